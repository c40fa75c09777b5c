"""The private PostgreSQL cluster of the tests (see :mod:`quiesce.bench.pg`)."""

from quiesce.bench.pg import Cluster, find_bindir, free_port, new_schema, with_schema

__all__ = ["Cluster", "find_bindir", "free_port", "new_schema", "with_schema"]

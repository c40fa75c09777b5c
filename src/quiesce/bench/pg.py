"""A private PostgreSQL cluster for the tests and the ``shared`` benchmark: ``initdb --no-sync`` and
``pg_ctl start`` on a unix socket in a temporary directory, fsync off.

PostgreSQL refuses to run as root, so when the tests run as root the server
runs as an unprivileged system user (``postgres`` if it exists, else
``nobody``) through ``setpriv``/``runuser``, and its directories are owned by
that user. Clients connect over the unix socket with ``trust`` auth as the
superuser ``quiesce``; root can open the socket whoever owns it.

Binaries: ``$QUIESCE_PG_BINDIR``, then ``pg_config --bindir``, then
``/usr/lib/postgresql/*/bin``, then ``PATH``. Without them ``find_bindir``
returns ``None``; the fixture then skips, except under ``CI=true``, where it
fails (``.ci/run`` installs the server package first).

What it keeps true: a cluster it starts lives in its own temporary
directory, listens on a unix socket there (and loopback TCP on a free port),
and :meth:`Cluster.destroy` stops it and removes the directory. It never
touches another cluster.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass

__all__ = ["Cluster", "find_bindir", "free_port", "new_schema", "with_schema"]


def find_bindir() -> str | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    candidates: list[str] = []
    if os.environ.get("QUIESCE_PG_BINDIR"):
        candidates.append(os.environ["QUIESCE_PG_BINDIR"])
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
            candidates.append(out)
        except (OSError, subprocess.SubprocessError):
            pass
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(os.path.dirname(os.path.realpath(initdb)))
    for d in candidates:
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return d
    return None


def _server_user() -> pwd.struct_passwd | None:
    """The unprivileged user to run the server as when we are root (else None)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and no 'postgres' or 'nobody' user to run PostgreSQL as")


@dataclass
class Cluster:
    """A running private cluster. ``dsn`` connects as the superuser."""

    bindir: str
    root: str
    port: int = 5432

    @property
    def datadir(self) -> str:
        """The cluster's data directory."""
        return os.path.join(self.root, "data")

    @property
    def sockdir(self) -> str:
        """The directory of the server's unix socket."""
        return os.path.join(self.root, "sock")

    @property
    def dsn(self) -> str:
        """A DSN for the superuser over the unix socket."""
        return f"postgresql://quiesce@/postgres?host={self.sockdir}&port={self.port}"

    def tcp_dsn(self, host: str = "127.0.0.1", port: int | None = None) -> str:
        """A DSN over TCP (e.g. through a proxy at ``host:port``)."""
        return f"postgresql://quiesce@{host}:{port or self.port}/postgres"

    # -- lifecycle --------------------------------------------------------

    @classmethod
    def create(cls, bindir: str, port: int) -> Cluster:
        """``initdb`` a new cluster in a temporary directory and start it."""
        root = tempfile.mkdtemp(prefix="quiesce-pg-")
        os.chmod(root, 0o755)
        cluster = cls(bindir, root, port)
        os.mkdir(cluster.sockdir)
        user = _server_user()
        if user is not None:
            for d in (root, cluster.sockdir):
                os.chown(d, user.pw_uid, user.pw_gid)
        cluster._run(
            "initdb",
            "--no-sync",
            "-D",
            cluster.datadir,
            "-U",
            "quiesce",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
        )
        with open(os.path.join(cluster.datadir, "postgresql.conf"), "a") as f:
            f.write(
                "\n# quiesce tests\n"
                "fsync = off\nfull_page_writes = off\nsynchronous_commit = off\n"
                f"unix_socket_directories = '{cluster.sockdir}'\n"
                "listen_addresses = '127.0.0.1'\n"
                f"port = {port}\n"
                "max_connections = 200\n"
                "shared_buffers = 32MB\n"
            )
        cluster.start()
        return cluster

    def _run(self, binary: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [os.path.join(self.bindir, binary), *args]
        user = _server_user()
        if user is not None:
            setpriv = shutil.which("setpriv")
            if setpriv:
                cmd = [
                    setpriv,
                    f"--reuid={user.pw_uid}",
                    f"--regid={user.pw_gid}",
                    "--clear-groups",
                    "--",
                    *cmd,
                ]
            else:
                cmd = ["runuser", "-u", user.pw_name, "--", *cmd]
        env = dict(os.environ, LC_ALL="C", HOME=self.root)
        return subprocess.run(
            cmd, capture_output=True, text=True, check=check, env=env, cwd=self.root, timeout=120
        )

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run(
            "pg_ctl",
            "-D",
            self.datadir,
            "-l",
            os.path.join(self.root, "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m mode`` (``immediate`` is a crash: no checkpoint)."""
        self._run("pg_ctl", "-D", self.datadir, "-m", mode, "-w", "-t", "60", "stop", check=False)

    def destroy(self) -> None:
        """Stop the server (immediate) and remove its directory."""
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def free_port() -> int:
    """A TCP port free on loopback right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def new_schema(dsn: str) -> str:
    """Create a fresh schema and return a DSN whose ``search_path`` is it."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    return with_schema(dsn, name)


def with_schema(dsn: str, schema: str) -> str:
    """``dsn`` with its ``search_path`` set to ``schema``."""
    sep = "&" if "?" in dsn else "?"
    return f"{dsn}{sep}options=-csearch_path%3D{schema}"

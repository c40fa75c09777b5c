"""The SQL of :class:`~.postgres.PostgresLog`: the tables, the triggers that
keep the log append-only and fenced, and the statements the sink runs.

What it keeps true: this is text only (no connection, no driver import), so
the schema can be read, reviewed and versioned in one place; ``SCHEMA``
names its version, and a change to any table or trigger that an older
quiesce could not use raises it. The trigger functions are the database's
half of the invariants in :mod:`.postgres` (append-only, no gap, epoch and
writer-token fences); the sink's half lives there.
"""

from __future__ import annotations

#: The version of the tables below; a database holding a newer one is refused.
SCHEMA = 1

#: SQLSTATE of the fence: an insert by a writer whose epoch is not current.
FENCED_SQLSTATE = "QF001"
#: SQLSTATE of the token fence: an insert of the current epoch from a session
#: that does not hold the writer lease (a foreign client).
FOREIGN_SQLSTATE = "QF002"
#: The insert trigger's words for a seq that is not the next one (the log
#: ends elsewhere than this writer thought: another record is where it writes).
_NOT_NEXT = "is not the next one"

_DDL_TEMPLATE = """
CREATE TABLE quiesce_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE quiesce_writer (
    buffer_id   text PRIMARY KEY,
    epoch       bigint NOT NULL,
    holder      text NOT NULL,
    lease_until timestamptz NOT NULL,
    token       bytea,
    token_epoch bigint
);
CREATE TABLE quiesce_log (
    buffer_id    text     NOT NULL,
    seq          bigint   NOT NULL CHECK (seq >= 0),
    writer_epoch bigint   NOT NULL,
    format       smallint NOT NULL,
    op           text     NOT NULL,
    version      bigint,
    record       text     NOT NULL,
    PRIMARY KEY (buffer_id, seq)
);
CREATE TABLE quiesce_member (
    buffer_id   text NOT NULL,
    member_id   text NOT NULL,
    incarnation text NOT NULL,
    lease_until timestamptz NOT NULL,
    horizon     bigint,
    applied_seq bigint NOT NULL DEFAULT -1,
    info        text NOT NULL DEFAULT '',
    PRIMARY KEY (buffer_id, member_id)
);
CREATE TABLE quiesce_request (
    buffer_id   text NOT NULL,
    request_id  text NOT NULL,
    member_id   text NOT NULL,
    op          text NOT NULL,
    args        text NOT NULL,
    created     timestamptz NOT NULL DEFAULT now(),
    result      text,
    applied_seq bigint,
    PRIMARY KEY (buffer_id, request_id)
);
CREATE INDEX quiesce_request_open ON quiesce_request (buffer_id, created)
    WHERE result IS NULL;
CREATE INDEX quiesce_log_checkpoints ON quiesce_log (buffer_id, seq)
    WHERE op = 'checkpoint';

{insert_function}
CREATE FUNCTION quiesce_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP;
END $$;
CREATE TRIGGER quiesce_log_insert BEFORE INSERT ON quiesce_log
    FOR EACH ROW EXECUTE FUNCTION quiesce_log_insert();
CREATE TRIGGER quiesce_log_no_change BEFORE UPDATE OR DELETE ON quiesce_log
    FOR EACH ROW EXECUTE FUNCTION quiesce_refuse();
CREATE TRIGGER quiesce_log_no_truncate BEFORE TRUNCATE ON quiesce_log
    FOR EACH STATEMENT EXECUTE FUNCTION quiesce_refuse();
CREATE TRIGGER quiesce_meta_no_change BEFORE UPDATE OR DELETE ON quiesce_meta
    FOR EACH ROW EXECUTE FUNCTION quiesce_refuse();
CREATE TRIGGER quiesce_meta_no_truncate BEFORE TRUNCATE ON quiesce_meta
    FOR EACH STATEMENT EXECUTE FUNCTION quiesce_refuse();
"""

#: The insert trigger's function (in the DDL of a new schema; replaced once
#: in a schema-1 database whose function predates the writer token). The
#: token check applies when the lease row carries a token of its current
#: epoch (``open_shared_buffer``'s sequencers set one at takeover): the row
#: must come from a session that set ``quiesce.writer_token`` to the secret
#: whose SHA-256 is stored, i.e. from the sequencer's own sink.
_INSERT_FUNCTION = """
CREATE OR REPLACE FUNCTION quiesce_log_insert() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    current_epoch bigint;
    current_token bytea;
    current_token_epoch bigint;
    next_seq bigint;
BEGIN
    SELECT epoch, token, token_epoch INTO current_epoch, current_token, current_token_epoch
        FROM quiesce_writer WHERE buffer_id = NEW.buffer_id FOR SHARE;
    IF NEW.writer_epoch IS DISTINCT FROM COALESCE(current_epoch, 0) THEN
        RAISE EXCEPTION 'quiesce_log: writer epoch % of buffer % is fenced (current epoch %)',
            NEW.writer_epoch, NEW.buffer_id, COALESCE(current_epoch, 0)
            USING ERRCODE = 'QF001';
    END IF;
    IF current_token IS NOT NULL AND current_token_epoch = current_epoch
        AND current_token IS DISTINCT FROM sha256(convert_to(
            COALESCE(current_setting('quiesce.writer_token', true), ''), 'UTF8')) THEN
        RAISE EXCEPTION 'quiesce_log: a row of buffer % (epoch %, seq %) from a session '
            'that does not hold the writer lease (no or wrong writer token): refused',
            NEW.buffer_id, NEW.writer_epoch, NEW.seq
            USING ERRCODE = 'QF002';
    END IF;
    SELECT COALESCE(MAX(seq) + 1, 0) INTO next_seq FROM quiesce_log
        WHERE buffer_id = NEW.buffer_id;
    IF NEW.seq <> next_seq THEN
        RAISE EXCEPTION 'quiesce_log is append-only: seq % of buffer % is not the next one (%)',
            NEW.seq, NEW.buffer_id, next_seq;
    END IF;
    RETURN NEW;
END $$;
"""
_DDL = _DDL_TEMPLATE.replace("{insert_function}", _INSERT_FUNCTION)
#: Brings a schema-1 database whose trigger predates the writer token up to
#: date (same schema number: two nullable columns and a stricter trigger).
_WRITER_TOKEN_MIGRATION = (
    "ALTER TABLE quiesce_writer ADD COLUMN IF NOT EXISTS token bytea, "
    "ADD COLUMN IF NOT EXISTS token_epoch bigint;" + _INSERT_FUNCTION
)

_COPY = "COPY quiesce_log (buffer_id, seq, writer_epoch, format, op, version, record) FROM STDIN"
_SELECT = "SELECT seq, record FROM quiesce_log WHERE buffer_id = %s AND seq >= %s ORDER BY seq"
_SELECT_CONTAINING = (
    "SELECT seq, record FROM quiesce_log WHERE buffer_id = %s AND seq >= %s AND seq < %s "
    "AND record LIKE %s ORDER BY seq"
)
_SELECT_RANGE = (
    "SELECT seq, record FROM quiesce_log WHERE buffer_id = %s AND seq >= %s AND seq < %s "
    "ORDER BY seq"
)
#: The checkpoint index (issue 13): recovery finds the checkpoints without
#: reading the log. In the DDL of a new schema; added once to a schema-1
#: database that predates it (same tables, one more index: no new schema).
_CHECKPOINT_INDEX = (
    "CREATE INDEX IF NOT EXISTS quiesce_log_checkpoints ON quiesce_log (buffer_id, seq) "
    "WHERE op = 'checkpoint'"
)
#: The number of records (the primary key's last entry) and the checkpoint
#: seqs below it (the partial index), in one statement and one snapshot.
_CHECKPOINTS = """
SELECT COALESCE(MAX(seq) + 1, 0), NULL FROM quiesce_log WHERE buffer_id = %(b)s
UNION ALL
SELECT NULL, seq FROM quiesce_log WHERE buffer_id = %(b)s AND op = 'checkpoint'
"""
#: The newest record format from the newest checkpoint on (see the module
#: docstring): two index lookups and the tail, not the whole log.
_NEWEST_FORMAT = """
SELECT MAX(format) FROM quiesce_log WHERE buffer_id = %(b)s AND seq >= COALESCE(
    (SELECT MAX(seq) FROM quiesce_log WHERE buffer_id = %(b)s AND op = 'checkpoint'), 0)
"""

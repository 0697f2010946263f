"""The PostgreSQL spine's schema, its server-side append function and its statements, and
how a connection's schema is made or checked."""

from __future__ import annotations

from typing import Any

import psycopg

from ._errors import StorageError

FORMAT = "vertebra-spine-1"
# Any constant: serialises schema creation between processes opening a fresh database.
_SCHEMA_LOCK = 0x7665727465627261
#: How long the server lets one of our connections sit idle inside a transaction.
SET_IDLE_TIMEOUT = "SET idle_in_transaction_session_timeout = '10s'"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spine_events (
    position BIGINT PRIMARY KEY,
    stream   TEXT   NOT NULL,
    seq      BIGINT NOT NULL,
    kind     TEXT   NOT NULL,
    version  INT    NOT NULL,
    payload  BYTEA  NOT NULL,
    UNIQUE (stream, seq)
);
CREATE TABLE IF NOT EXISTS spine_streams (
    stream         TEXT PRIMARY KEY,
    last_seq       BIGINT NOT NULL,
    last_position  BIGINT NOT NULL,
    first_position BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS spine_streams_first ON spine_streams (first_position);
CREATE TABLE IF NOT EXISTS spine_idempotency (
    stream         TEXT   NOT NULL,
    key            TEXT   NOT NULL,
    first_seq      BIGINT NOT NULL,
    last_seq       BIGINT NOT NULL,
    first_position BIGINT NOT NULL,
    last_position  BIGINT NOT NULL,
    PRIMARY KEY (stream, key)
);
CREATE TABLE IF NOT EXISTS spine_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS spine_position (
    id       INT    PRIMARY KEY CHECK (id = 1),
    position BIGINT NOT NULL
);
INSERT INTO spine_position VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS spine_leases (
    stream TEXT   PRIMARY KEY,
    epoch  BIGINT NOT NULL,
    holder TEXT   NOT NULL
);
-- Stored bytes are what seals hash: the log itself never rewrites or removes them.
CREATE OR REPLACE FUNCTION spine_events_append_only() RETURNS trigger AS $$
BEGIN RAISE EXCEPTION 'events are append-only'; END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS spine_events_append_only ON spine_events;
CREATE TRIGGER spine_events_append_only BEFORE UPDATE OR DELETE ON spine_events
FOR EACH ROW EXECUTE FUNCTION spine_events_append_only();
"""

#: The whole append transaction, run by the server in one call (see the module's doc).
#: Checks in the order the log contract fixes: a known idempotency key answers first
#: ("duplicate": its seqs and positions), then the lease ("fenced": the current epoch),
#: then the expected seq ("conflict": the stream's last seq); "ok" carries the stream's
#: last seq and the counter before the append. A refused append writes nothing.
_APPEND_FUNCTION = """
CREATE OR REPLACE FUNCTION spine_append(
    p_stream TEXT, p_expected BIGINT, p_key TEXT, p_epoch BIGINT,
    p_kinds TEXT[], p_payloads BYTEA[], p_version INT, p_channel TEXT, p_marks TEXT
) RETURNS TABLE (r_outcome TEXT, r_a BIGINT, r_b BIGINT, r_c BIGINT, r_d BIGINT) AS $$
DECLARE
    v_pos0 BIGINT;
    v_last BIGINT;
    v_epoch BIGINT;
    v_n INT := cardinality(p_kinds);
    v_prior spine_idempotency%ROWTYPE;
BEGIN
    -- First, the counter row: every append waits here for the one before it to commit,
    -- so positions are taken and committed in one order.
    SELECT position INTO v_pos0 FROM spine_position WHERE id = 1 FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the spine''s position counter row is missing';
    END IF;
    IF p_key IS NOT NULL THEN
        SELECT * INTO v_prior FROM spine_idempotency WHERE stream = p_stream AND key = p_key;
        IF FOUND THEN
            RETURN QUERY SELECT 'duplicate'::TEXT, v_prior.first_seq, v_prior.last_seq,
                v_prior.first_position, v_prior.last_position;
            RETURN;
        END IF;
    END IF;
    IF p_epoch IS NOT NULL THEN
        SELECT epoch INTO v_epoch FROM spine_leases WHERE stream = p_stream FOR SHARE;
        IF COALESCE(v_epoch, 0) <> p_epoch THEN
            RETURN QUERY SELECT 'fenced'::TEXT, COALESCE(v_epoch, 0), 0::BIGINT, 0::BIGINT,
                0::BIGINT;
            RETURN;
        END IF;
    END IF;
    SELECT last_seq INTO v_last FROM spine_streams WHERE stream = p_stream;
    v_last := COALESCE(v_last, 0);
    IF v_last <> p_expected THEN
        RETURN QUERY SELECT 'conflict'::TEXT, v_last, 0::BIGINT, 0::BIGINT, 0::BIGINT;
        RETURN;
    END IF;
    INSERT INTO spine_events (stream, seq, position, kind, payload, version)
        SELECT p_stream, v_last + i, v_pos0 + i, p_kinds[i], p_payloads[i], p_version
        FROM generate_subscripts(p_kinds, 1) AS i;
    UPDATE spine_position SET position = v_pos0 + v_n WHERE id = 1;
    INSERT INTO spine_streams (stream, last_seq, last_position, first_position)
        VALUES (p_stream, v_last + v_n, v_pos0 + v_n, v_pos0 + 1)
        ON CONFLICT (stream) DO UPDATE SET
        last_seq = excluded.last_seq, last_position = excluded.last_position;
    IF p_key IS NOT NULL THEN
        INSERT INTO spine_idempotency
            VALUES (p_stream, p_key, v_last + 1, v_last + v_n, v_pos0 + 1, v_pos0 + v_n);
    END IF;
    PERFORM pg_notify(p_channel, p_marks);
    RETURN QUERY SELECT 'ok'::TEXT, v_last, v_pos0, 0::BIGINT, 0::BIGINT;
END $$ LANGUAGE plpgsql
"""
_APPEND_SIGNATURE = "spine_append(text,bigint,text,bigint,text[],bytea[],integer,text,text)"
#: One append: one statement, one round trip (the benchmark's baseline calls it too).
APPEND = "SELECT * FROM spine_append(%s, %s, %s, %s, %s, %s, %s, %s, %s)"

PRIOR_KEY = (
    "SELECT first_seq, last_seq, first_position, last_position "
    "FROM spine_idempotency WHERE stream = %s AND key = %s"
)
TAKE_LEASE = (
    "INSERT INTO spine_leases (stream, epoch, holder) VALUES (%s, 1, %s) "
    "ON CONFLICT (stream) DO UPDATE SET epoch = spine_leases.epoch + 1, "
    "holder = excluded.holder RETURNING epoch"
)
LAST_SEQ = "SELECT last_seq FROM spine_streams WHERE stream = %s"
_COLUMNS = "stream, seq, position, kind, payload, version"
_READ_ROWS = (
    "SELECT stream, seq, position, kind, version, payload FROM spine_events "
    "WHERE position > %s ORDER BY position LIMIT %s"
)


def init_schema(c: psycopg.Connection[Any], where: str, read_only: bool) -> str:
    """Make the spine's tables and append function in the connection's schema (a writer),
    or check that they are there; the name of the schema's notification channel."""
    try:
        schema = c.execute(
            "SELECT current_schema(), to_regprocedure(%s) IS NOT NULL", (_APPEND_SIGNATURE,)
        ).fetchone()
        if schema is None or schema[0] is None:
            raise StorageError(f"{where!r} has no schema to keep the spine in")
        if schema[1] and not read_only:
            # The usual case, without a transaction: the function is made last, in the
            # transaction that made the tables, so a spine that has it is complete.
            # Every new session process opens the log, and on a loaded host each round
            # trip here delays its takeover.
            row = c.execute("SELECT value FROM spine_meta WHERE key = 'format'").fetchone()
            if row is not None and row[0] != FORMAT:
                raise StorageError(f"{where!r} holds an unknown spine format {row[0]!r}")
            if row is not None:
                return f"spine_{schema[0]}"
        if read_only:
            row = c.execute(
                "SELECT to_regclass('spine_meta') IS NOT NULL AND EXISTS "
                "(SELECT 1 FROM spine_meta WHERE key = 'format' AND value = %s)",
                (FORMAT,),
            ).fetchone()
            if row is None or not row[0]:
                raise StorageError(f"{where!r} holds no spine to read")
        else:
            with c.transaction():
                c.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                exists = c.execute("SELECT to_regclass('spine_meta')").fetchone()
                if exists is None or exists[0] is None:
                    c.execute(_SCHEMA)
                row = c.execute("SELECT value FROM spine_meta WHERE key = 'format'").fetchone()
                if row is None:
                    c.execute("INSERT INTO spine_meta VALUES ('format', %s)", (FORMAT,))
                elif row[0] != FORMAT:
                    raise StorageError(f"{where!r} holds an unknown spine format {row[0]!r}")
                # A spine made before appends were one call lacks the function.
                fn = c.execute("SELECT to_regprocedure(%s)", (_APPEND_SIGNATURE,))
                made = fn.fetchone()
                if made is None or made[0] is None:
                    c.execute(_APPEND_FUNCTION)
    except psycopg.Error as exc:
        raise StorageError(f"{where!r} is not a usable spine database: {exc}") from exc
    # One channel per schema, so that logs in other schemas of the database (tests,
    # tenants) do not wake each other.
    return f"spine_{schema[0]}"

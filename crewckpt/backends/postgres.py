"""PostgreSQL backend: a store shared by many workers on many machines, in one schema of one database.

Location: ``postgresql://user[:password]@host[:port]/db?schema=NAME`` (or ``postgres://``); other query
parameters go to libpq unchanged (``sslmode=require``...). ``schema`` defaults to ``crewckpt``; several stores
share one database through separate schemas. Driver: psycopg 3 and psycopg_pool (extra ``crewckpt[postgres]``).

Design (docs/backends.md, 'PostgreSQL'):

* Tables ``objects`` (content-addressed: ``INSERT ... ON CONFLICT``, so the same bytes from any worker are
  stored once), ``refs`` (moved only by ``UPDATE ... WHERE target = old``), ``reflog``, ``commits`` (the commit
  index), ``aliases``, ``counters``, ``meta`` and ``txdone`` (tokens of committed transactions), all qualified
  with the schema name: no ``search_path`` or other session state, no server-side prepared statements
  (``prepare_threshold=None``), so the store works behind transaction-mode poolers (PgBouncer).
* One database transaction per :meth:`PgBackend.transaction`. Writes are queued and sent in one pipeline with
  the next read or with ``COMMIT``; reads of refs, meta rows and the commit counter are remembered for the
  rest of the transaction, and its first round trip also *prefetches* what the previous transaction begun
  at the same place in the code (same thread) read: a checkpoint costs 3 round trips, not one per object
  or per read (:class:`PgTxn`, docs/postgres.md 'Round trips').
* Writers to one ref are serialized by a transaction-scoped advisory lock taken when the transaction reads
  or moves that ref, so a checkpoint's tip read and its compare-and-swap cannot be split by another writer;
  writers to different branches run in parallel. Every write transaction holds a shared advisory lock that
  gc's epoch bump and deletes take exclusively (gc never sweeps while a checkpoint that started before its
  epoch bump is still open).
* Every transaction is recorded. When the connection dies (the server restarted, a pooler or
  ``pg_terminate_backend`` killed the session) or PostgreSQL aborts it (deadlock, serialization failure), it
  is replayed on a new connection, and its reads must return what they returned the first time (else
  :class:`~crewckpt.errors.RefConflict`). A connection lost during ``COMMIT`` is resolved by looking up the
  transaction's token: exactly one copy lands.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import psycopg
import psycopg_pool
from psycopg import errors as pgerr

from crewckpt.backends.base import (
    HEAD_BYTES,
    Capabilities,
    IndexRow,
    ObjectMeta,
    ReflogEntry,
    StoreBusy,
    StoredObject,
    StoreWriteError,
    TransactionalBackend,
    Txn,
    ref_conflict,
)
from crewckpt.backends.registry import Location, Opened, Opener, is_secret_key, redact, repeated_key
from crewckpt.errors import (
    BadLocation,
    CkptError,
    CorruptStore,
    FormatVersionError,
    RefConflict,
    StoreExists,
    StoreNotFound,
)

SCHEMES = ("postgresql", "postgres")
DEFAULT_SCHEMA = "crewckpt"
SCHEMA_VERSION = 1  # of the tables below; meta row "pg_schema_version"
BATCH = 10_000  # ids per ANY(%s) lookup
MAX_FIELD = (1 << 30) - 64  # PostgreSQL caps one bytea value at 1 GB
CHUNK_BYTES = 64 << 20  # frame bytes per INSERT statement
RETRY_S = 30.0  # how long a transaction keeps reconnecting and replaying before it gives up
CONNECT_TIMEOUT_S = 10
POOL_SIZE = 8
GC_GRACE_S = 60.0  # seconds; above the clock skew of NTP-synced machines (stored times are writers' clocks)
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

_TABLES = """
CREATE TABLE {s}.meta(key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE {s}.objects(oid bytea PRIMARY KEY, kind smallint NOT NULL, size bigint NOT NULL,
                         touched bigint NOT NULL, frame bytea NOT NULL);
ALTER TABLE {s}.objects ALTER COLUMN frame SET STORAGE EXTERNAL;
CREATE TABLE {s}.refs(name text PRIMARY KEY, target bytea NOT NULL);
CREATE TABLE {s}.reflog(n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, ref text NOT NULL, old bytea,
                        new bytea, time_ns bigint NOT NULL, message text NOT NULL);
CREATE INDEX ON {s}.reflog(ref, n);
CREATE TABLE {s}.commits(id bytea PRIMARY KEY, branch text NOT NULL, seq bigint NOT NULL,
                         time_ns bigint NOT NULL, run_id text NOT NULL, trig text, parents bytea NOT NULL,
                         tree bytea NOT NULL, summary bytea NOT NULL, alias text, meta text);
CREATE INDEX ON {s}.commits(branch, seq);
CREATE INDEX ON {s}.commits(seq);
CREATE TABLE {s}.aliases(alias text PRIMARY KEY, id bytea NOT NULL);
CREATE INDEX ON {s}.aliases(id);
CREATE TABLE {s}.counters(name text PRIMARY KEY, value bigint NOT NULL);
CREATE SEQUENCE {s}.seq;
CREATE TABLE {s}.txdone(token bytea PRIMARY KEY, time_ns bigint NOT NULL);
CREATE FUNCTION {s}.cas_check(n bigint, ref text) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  IF n <> 1 THEN RAISE EXCEPTION 'crewckpt-ref-conflict:%', ref; END IF;
  RETURN 1;
END $$;
"""
# cas_check: a failed compare-and-swap aborts the transaction on the server, so the CAS can travel in the same
# pipeline as COMMIT (no extra round trip) and a stale writer can never commit the rest of its transaction.
# frame STORAGE EXTERNAL: frames are zstd already; TOAST's pglz would only burn CPU trying again.
_CAS_MARK = "crewckpt-ref-conflict:"
_SYMREF = "symref:"  # symbolic refs (HEAD -> refs/heads/main) are meta rows, as in the SQLite backend
_ROW_COLS = "id, branch, seq, time_ns, run_id, trig, parents, tree, summary, alias, meta"
_RETRYABLE = (pgerr.DeadlockDetected, pgerr.SerializationFailure, pgerr.LockNotAvailable)


@dataclasses.dataclass(frozen=True)
class PgLocation:
    """A parsed ``postgresql://`` location: ``conninfo`` for libpq (without ``schema``), the ``schema``, and
    ``identity``: the canonical spelling (no password or other secret: it is shown and recorded; port and
    schema explicit)."""

    conninfo: str
    schema: str
    identity: str
    host: str


def parse_location(url: str) -> PgLocation:
    """Split ``postgresql://...?schema=NAME`` (see the module docstring).

    Raises:
        CkptError: not a postgresql:// URL, or a bad schema name (one line naming it).
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in SCHEMES or not parts.netloc and not parts.path.strip("/"):
        raise CkptError(f"{_redact(url)}: not a PostgreSQL location; write postgresql://user@host:port/db"
                        f"?schema=NAME")
    twice = repeated_key(parts.query)
    if twice is not None:  # libpq would silently take the last one
        raise BadLocation(f"{_redact(url)}: {twice}= is given more than once; give it once")
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    schema = schemas[-1] if schemas else DEFAULT_SCHEMA
    if not _SCHEMA_NAME.fullmatch(schema):
        raise CkptError(f"{_redact(url)}: schema {schema!r} is not a plain name; use lowercase letters, digits "
                        f"and '_' (at most 63, not starting with a digit), e.g. ?schema=crewckpt")
    rest = [(k, v) for k, v in query if k != "schema"]
    conninfo = urllib.parse.urlunsplit(("postgresql", parts.netloc, parts.path, urllib.parse.urlencode(rest), ""))
    host = parts.hostname or "localhost"
    port = parts.port or 5432
    user = f"{urllib.parse.quote(parts.username)}@" if parts.username else ""
    shown_host = f"[{host}]" if ":" in host else host
    db = parts.path.lstrip("/") or (parts.username or "")
    tail = "".join(f"&{urllib.parse.urlencode([(k, v)])}" for k, v in sorted(rest) if not is_secret_key(k))
    identity = f"postgresql://{user}{shown_host}:{port}/{db}?schema={schema}{tail}"
    return PgLocation(conninfo, schema, identity, f"{shown_host}:{port}")


def _redact(url: str) -> str:
    """``url`` with its password and secret query values masked (error messages end up in logs)."""
    return redact(url)


def _bin(v: object) -> bytes:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    return b"" if v is None else str(v).encode()


def _row(r: Sequence[Any]) -> IndexRow:
    p = _bin(r[6])
    return IndexRow(_bin(r[0]), r[1], r[2], r[3], r[4], r[5], tuple(p[i:i + 32] for i in range(0, len(p), 32)),
                    _bin(r[7]), _bin(r[8]), r[9], r[10])


def _chunks(objs: list[StoredObject]) -> Iterator[list[StoredObject]]:
    """Runs of at most BATCH objects and CHUNK_BYTES of frames (one array parameter is capped at 1 GB)."""
    run: list[StoredObject] = []
    size = 0
    for o in objs:
        if run and (len(run) >= BATCH or size + len(o.frame) > CHUNK_BYTES):
            yield run
            run, size = [], 0
        run.append(o)
        size += len(o.frame)
    if run:
        yield run


def _first_line(e: BaseException, secrets: Sequence[str] = ()) -> str:
    """The first line of ``e``'s message with each of ``secrets`` masked (libpq quotes a password it cannot
    parse: 'unexpected spaces found in "two words"')."""
    line = (str(e).strip().splitlines() or [type(e).__name__])[0]
    for secret in secrets:
        line = line.replace(secret, "***")
    return line


def _secrets_of(conninfo: str) -> tuple[str, ...]:
    """The secret values in a conninfo URL as they may appear in messages (raw and percent-decoded), longest
    first: the password and each secret query value."""
    parts = urllib.parse.urlsplit(conninfo)
    raw = parts.netloc.rpartition("@")[0].partition(":")[2] if "@" in parts.netloc else ""
    found = {raw, urllib.parse.unquote(raw)}
    for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if is_secret_key(k):
            found |= {v, urllib.parse.quote(v), urllib.parse.quote_plus(v)}
    return tuple(sorted((x for x in found if x), key=len, reverse=True))


# A read a transaction remembers and may prefetch: ("ref", name) (read under the ref's advisory lock),
# ("meta", key) (symbolic refs are meta rows "symref:NAME") or ("seq", "") (counter_next("seq")).
_Key = tuple[str, str]
PREFETCH_MAX = 8  # a transaction that read more keys than this teaches nothing (no prefetch at its call site)


# An op queued or done inside a transaction: (sql, args, many, expect). expect: None (a write; its row count
# is returned), "rows" (fetch the rows; a replay may see others: counters, counts), or ("cmp", rows) (a read whose rows a replay must see again;
# rows is None until it first ran).
_Op = tuple[str, Any, bool, Any]
_Result = list[tuple[Any, ...]] | int


class _Sql:
    """The schema's statements, qualified with its quoted name, and its advisory lock keys."""

    def __init__(self, schema: str) -> None:
        self.s = '"' + schema + '"'
        self.schema = schema
        self.tables = _TABLES.format(s=self.s)

    def lock(self, purpose: str, name: str = "", shared: bool = False, try_: bool = False) -> tuple[str, Any]:
        """A transaction-scoped advisory lock statement on ``(schema, purpose, name)``."""
        fn = "pg_try_advisory_xact_lock" if try_ else "pg_advisory_xact_lock"
        return (f"SELECT {fn}{'_shared' if shared else ''}(hashtext(%s), hashtext(%s))",
                (f"{self.schema}/{purpose}", name))
class _PgReader:
    """Read verbs over ``_q`` (supplied by the backend: pooled autocommit reads; by a transaction: its own)."""

    _sql: _Sql

    def _q(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def get_many(self, oids: Iterable[bytes]) -> dict[bytes, StoredObject]:
        ids = list(dict.fromkeys(oids))
        out: dict[bytes, StoredObject] = {}
        for i in range(0, len(ids), BATCH):
            for oid, kind, size, frame in self._q(
                    f"SELECT oid, kind, size, frame FROM {self._sql.s}.objects WHERE oid = ANY(%s)",
                    (ids[i:i + BATCH],)):
                out[bytes(oid)] = StoredObject(bytes(oid), kind, size, bytes(frame))
        return out

    def get_prefix(self, prefix: bytes, kind: int) -> list[StoredObject]:
        lo, hi = prefix + b"\x00" * (32 - len(prefix)), prefix + b"\xff" * (32 - len(prefix))
        rows = self._q(f"SELECT oid, kind, size, frame FROM {self._sql.s}.objects WHERE oid BETWEEN %s AND %s "
                       f"AND kind = %s", (lo, hi, kind))
        return [StoredObject(bytes(o), k, sz, bytes(f)) for o, k, sz, f in rows]

    def has_many(self, oids: Iterable[bytes]) -> set[bytes]:
        ids = list(dict.fromkeys(oids))
        out: set[bytes] = set()
        for i in range(0, len(ids), BATCH):
            out.update(bytes(r[0]) for r in self._q(f"SELECT oid FROM {self._sql.s}.objects WHERE oid = ANY(%s)",
                                                    (ids[i:i + BATCH],)))
        return out

    def iter_objects(self, prefix: bytes = b"") -> Iterator[ObjectMeta]:
        lo, hi = prefix + b"\x00" * (32 - len(prefix)), prefix + b"\xff" * (32 - len(prefix))
        where = "WHERE oid BETWEEN %s AND %s" if prefix else ""
        for oid, kind, size, touched, head, n in self._q(
                f"SELECT oid, kind, size, touched, substring(frame FROM 1 FOR {HEAD_BYTES}), length(frame) "
                f"FROM {self._sql.s}.objects {where}", (lo, hi) if prefix else ()):
            yield ObjectMeta(bytes(oid), kind, size, touched, _bin(head), n)

    def object_stats(self) -> tuple[int, int, int]:
        n, size, stored = self._q(f"SELECT count(*), coalesce(sum(size), 0), coalesce(sum(length(frame)), 0) "
                                  f"FROM {self._sql.s}.objects")[0]
        return int(n), int(size), int(stored)

    def get_ref(self, name: str) -> bytes | None:
        r = self._q(f"SELECT target FROM {self._sql.s}.refs WHERE name = %s", (name,))
        return bytes(r[0][0]) if r else None

    def refs(self, prefix: str = "") -> dict[str, bytes]:
        rows = self._q(f"SELECT name, target FROM {self._sql.s}.refs WHERE left(name, %s) = %s ORDER BY name",
                       (len(prefix), prefix))
        return {n: bytes(t) for n, t in rows}

    def reflog(self, ref: str) -> list[ReflogEntry]:
        rows = self._q(f"SELECT ref, old, new, time_ns, message FROM {self._sql.s}.reflog WHERE ref = %s "
                       f"ORDER BY n", (ref,))
        return [ReflogEntry(r, _bin(o) if o is not None else None, _bin(n) if n is not None else None, t, m)
                for r, o, n, t, m in rows]

    def get_symref(self, name: str) -> str | None:
        r = self._q(f"SELECT value FROM {self._sql.s}.meta WHERE key = %s", (_SYMREF + name,))
        return str(r[0][0]) if r else None

    def index_get(self, cid: bytes) -> IndexRow | None:
        r = self._q(f"SELECT {_ROW_COLS} FROM {self._sql.s}.commits WHERE id = %s", (cid,))
        return _row(r[0]) if r else None

    def index_rows(self, branch: str | None = None) -> list[IndexRow]:
        if branch is None:
            rows = self._q(f"SELECT {_ROW_COLS} FROM {self._sql.s}.commits ORDER BY seq, time_ns, id")
        else:
            rows = self._q(f"SELECT {_ROW_COLS} FROM {self._sql.s}.commits WHERE branch = %s "
                           f"ORDER BY seq, time_ns, id", (branch,))
        return [_row(r) for r in rows]

    def index_children(self, cids: Iterable[bytes]) -> list[IndexRow]:
        want = set(cids)
        if not want:
            return []
        # position() finds each id anywhere in the parents bytes; the alignment check drops false hits
        rows = self._q(f"SELECT {_ROW_COLS} FROM {self._sql.s}.commits c WHERE EXISTS (SELECT 1 FROM "
                       f"unnest(%s::bytea[]) AS w(id) WHERE position(w.id IN c.parents) > 0) "
                       f"ORDER BY seq, time_ns, id", (list(want),))
        return [r for r in map(_row, rows) if not want.isdisjoint(r.parents)]

    def index_last(self) -> bytes | None:
        r = self._q(f"SELECT id FROM {self._sql.s}.commits ORDER BY seq DESC LIMIT 1")
        return bytes(r[0][0]) if r else None

    def index_prefix(self, hex_prefix: str, limit: int = 20) -> list[bytes]:
        lo = bytes.fromhex((hex_prefix + "0" * 64)[:64])
        hi = bytes.fromhex((hex_prefix + "f" * 64)[:64])
        rows = self._q(f"SELECT id FROM {self._sql.s}.commits WHERE id BETWEEN %s AND %s ORDER BY id LIMIT %s",
                       (lo, hi, limit))
        return [bytes(r[0]) for r in rows]

    def alias_get(self, alias: str) -> bytes | None:
        r = self._q(f"SELECT id FROM {self._sql.s}.aliases WHERE alias = %s", (alias,))
        return bytes(r[0][0]) if r else None

    def meta_get(self, key: str) -> str | None:
        r = self._q(f"SELECT value FROM {self._sql.s}.meta WHERE key = %s", (key,))
        return r[0][0] if r else None


class PgTxn(_PgReader, Txn):
    """One database transaction (see the module docstring): writes are queued and sent with the next read or
    the commit; every statement is recorded so the whole transaction can be replayed on a new connection.

    Refs, meta rows (and symbolic refs) and ``counter_next("seq")`` are *keys*: a key read once is answered
    from memory for the rest of the transaction until the transaction writes it (read-your-writes: a write
    forgets the key, so the next read goes to the server behind the queued write). A ref is read under its
    advisory lock, so its value cannot change while the transaction runs.

    Prefetch: the keys a committed transaction read are remembered per (thread, code that made its first
    read); the next transaction whose first read comes from the same place sends those reads in its first
    round trip, each exactly as it would be sent on demand (a ref's lock statement right before its read,
    in the recorded order). A prefetched read the transaction never uses is not compared on a replay; one
    it uses is, like any read. A prefetched seq is used only when every ref whose value the transaction has
    read by then was locked before that seq was taken (else it is dropped, a gap, and a new one is taken),
    as on demand: a commit's seq must come after that of the tip it builds on (docs/backends.md, I6). A
    place whose transaction took gc's exclusive lock never prefetches (a ref lock held before the
    exclusive gc lock could deadlock with a writer)."""

    def __init__(self, backend: PgBackend) -> None:
        self._b = backend
        self._sql = backend._sql
        self._s = self._sql.s
        self._log: list[_Op] = []  # sent: replayed in order on a new connection
        self._pending: list[_Op] = []  # queued, not yet sent
        self._locked: set[str] = set()  # refs whose advisory lock this transaction holds
        self._cas_expect: dict[str, bytes | None] = {}  # ref -> the old value its queued CAS expects
        self._exclusive = False
        self._conn: psycopg.Connection[Any] | None = None
        self.token = os.urandom(16)
        self.round_trips = 0  # pipelines sent (benchmarks and tests count them)
        self._committing = False
        self.dropped = 0  # packs drop_packs deleted (the backend VACUUMs after the commit)
        self._known: dict[_Key, Any] = {}  # key -> its value in this transaction
        self._prefetched: dict[_Key, tuple[int, list[tuple[Any, ...]]]] = {}  # unused prefetch: _log index, rows
        self._seq_after: frozenset[str] = frozenset()  # refs locked before the prefetched seq was taken
        self._seen: set[str] = set()  # refs whose value the caller has read
        self._reads: dict[_Key, None] = {}  # keys asked for, in first-use order (the next prediction)
        self._site: Any = None  # (thread, code of the first read's caller): where the prediction is kept
        shared = self._sql.lock("gc", shared=True)  # held by every write transaction; gc takes it exclusively
        self._begin: list[_Op] = [("BEGIN", None, False, None), (shared[0], shared[1], False, None)]

    # -- sending ---------------------------------------------------------------------------------------------

    @staticmethod
    def _send(conn: psycopg.Connection[Any], ops: list[_Op]) -> list[_Result]:
        """Send ``ops`` in one pipeline (one round trip); per op, its rows or its row count."""
        curs = []
        with conn.pipeline():
            for sql, args, many, _ in ops:
                cur = conn.cursor()
                if many:
                    cur.executemany(sql, args)
                else:
                    cur.execute(sql, args)
                curs.append(cur)
        out: list[_Result] = []
        for cur, (_, _, _, expect) in zip(curs, ops):
            fetch = expect == "rows" or isinstance(expect, tuple)
            out.append(cur.fetchall() if fetch else cur.rowcount)
        return out

    def _check(self, ops: list[_Op], results: list[_Result], compare: range) -> None:
        for i, ((_sql, _args, _many, expect), res) in enumerate(zip(ops, results)):
            if i in compare and isinstance(expect, tuple) and expect[1] != res:
                self._abort()
                raise RefConflict(f"{self._b.where}: the store changed while this transaction was replayed "
                                  f"after a lost connection; nothing of it was written; retry")

    def _run(self, ops: list[_Op]) -> list[_Result]:
        """Send the queued writes plus ``ops`` in one round trip; returns the results of ``ops``. On a lost
        connection or an aborted transaction, replays everything sent so far on a new connection (reads
        must return what they did) until the backend's retry_s."""
        batch = self._pending + ops
        self._pending = []
        deadline = time.monotonic() + self._b.retry_s
        while True:
            try:
                if self._conn is None:
                    self._conn = self._b._getconn(deadline)
                    todo = self._begin + self._log + batch
                    compare = range(len(self._begin), len(self._begin) + len(self._log))
                else:
                    todo, compare = batch, range(0)
                self.round_trips += 1
                self._b.round_trips += 1
                results = self._send(self._conn, todo)
                self._check(todo, results, compare)
            except (psycopg.OperationalError, *_RETRYABLE) as e:
                if not _retryable(e) or time.monotonic() > deadline:
                    self._abort()
                    raise self._b._error(e) from None
                self._drop()
                if self._committing and self._b._landed(self.token, deadline):
                    return [0 for _ in ops]  # the lost COMMIT had landed: exactly one copy, done
                continue
            except psycopg.Error as e:
                self._abort()
                primary = getattr(getattr(e, "diag", None), "message_primary", None) or ""
                if isinstance(e, pgerr.RaiseException) and primary.startswith(_CAS_MARK):
                    name = primary[len(_CAS_MARK):]
                    raise self._b._conflict(name, self._cas_expect.get(name)) from None
                raise self._b._error(e) from None
            tail = results[len(todo) - len(batch):]
            self._log.extend((sql, a, m, ("cmp", r) if isinstance(x, tuple) else x)
                             for (sql, a, m, x), r in zip(batch, tail))
            return tail[len(batch) - len(ops):]

    def _q(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        r = self._run([(sql, args, False, ("cmp", None))])[0]
        assert isinstance(r, list)
        return r

    def _rows(self, sql: str, args: Any) -> list[tuple[Any, ...]]:
        """A read whose answer may legitimately differ on a replay (counts, counters)."""
        r = self._run([(sql, args, False, "rows")])[0]
        assert isinstance(r, list)
        return r

    def _queue(self, sql: str, args: Any, many: bool = False, expect: Any = None) -> None:
        self._pending.append((sql, args, many, expect))

    def _lock_ref(self, name: str) -> None:
        if name not in self._locked:
            self._locked.add(name)
            self._queue(*self._sql.lock("ref", name))

    # -- remembered and prefetched reads ---------------------------------------------------------------------

    def _read_ops(self, key: _Key, expect: Any) -> list[_Op]:
        """The statements reading ``key`` (a ref: its lock first, once per transaction)."""
        kind, name = key
        s = self._s
        if kind == "ref":
            ops: list[_Op] = []
            if name not in self._locked:
                self._locked.add(name)
                sql, args = self._sql.lock("ref", name)
                ops.append((sql, args, False, None))
            return [*ops, (f"SELECT target FROM {s}.refs WHERE name = %s", (name,), False, expect)]
        if kind == "meta":
            return [(f"SELECT value FROM {s}.meta WHERE key = %s", (name,), False, expect)]
        # never at or below the highest seq indexed (an index rebuilt or copied in keeps numbers growing); a
        # sequence, not a row: writers to different branches do not queue here
        return [(f"SELECT greatest(nextval('{s}.seq'), (SELECT coalesce(max(seq), 0) + 1 FROM {s}.commits))",
                 (), False, "rows")]

    @staticmethod
    def _value(key: _Key, rows: list[tuple[Any, ...]]) -> Any:
        if key[0] == "seq":
            return int(rows[0][0])
        if not rows:
            return None
        return bytes(rows[0][0]) if key[0] == "ref" else str(rows[0][0])

    def _read(self, key: _Key) -> Any:
        """The value of ``key`` in this transaction: remembered, prefetched, or read now (see the class)."""
        if not self._reads and self._site is None:
            self._site = (sys._getframe(2).f_code, key)  # _read <- get_ref/meta_get/... <- the code asking
        self._reads.setdefault(key, None)
        if key in self._known:
            value = self._known[key]
            used = self._prefetched.pop(key, None)
            if key[0] == "seq":
                del self._known[key]
                if self._seen <= self._seq_after:
                    return value
                # a ref read that was locked after this seq was taken: its tip's seq may be higher; take a new one
            else:
                if used is not None:  # a prefetched read now relied on: a replay must see it again
                    i, rows = used
                    sql, args, many, _ = self._log[i]
                    self._log[i] = (sql, args, many, ("cmp", rows))
                if key[0] == "ref":
                    self._seen.add(key[1])
                return value
        own = self._read_ops(key, "rows" if key[0] == "seq" else ("cmp", None))
        ops = list(own)
        extra: list[tuple[_Key, int]] = []  # prefetched key, index of its read in ops
        if self._conn is None and not self._log:  # the first round trip: send what this place read last time
            for k in self._b._prediction(self._site):
                if k == key or k in self._known or k[0] == "ref" and k[1] in self._locked:
                    continue
                if k[0] == "ref":  # a try-lock: a prefetch never waits (no new lock cycle between writers)
                    sql, args = self._sql.lock("ref", k[1], try_=True)
                    ops.append((sql, args, False, "rows"))
                ops.extend(self._read_ops(k, "rows") if k[0] != "ref" else
                           [(f"SELECT target FROM {self._s}.refs WHERE name = %s", (k[1],), False, "rows")])
                extra.append((k, len(ops) - 1))
        base = len(self._log) + len(self._pending)
        results = self._run(ops)
        for k, j in extra:
            got_rows = results[j]
            assert isinstance(got_rows, list)
            if k[0] == "ref":
                got = results[j - 1]
                if not (isinstance(got, list) and got and got[0][0]):
                    continue  # another writer holds it: read it on demand, behind its lock
                self._locked.add(k[1])
                sql, args = self._sql.lock("ref", k[1])  # a replay takes it waiting, as on demand
                self._log[base + j - 1] = (sql, args, False, None)
            elif k[0] == "seq":
                self._seq_after = frozenset(self._locked)  # the refs locked before it, in pipeline order
            self._known[k] = self._value(k, got_rows)
            self._prefetched[k] = (base + j, got_rows)
        mine = results[len(own) - 1]
        assert isinstance(mine, list)
        value = self._value(key, mine)
        if key[0] != "seq":
            self._known[key] = value
        if key[0] == "ref":
            self._seen.add(key[1])
        return value

    def _forget(self, key: _Key) -> None:
        """``key`` is written by this transaction: its next read goes to the server (behind the write)."""
        self._known.pop(key, None)
        self._prefetched.pop(key, None)

    def get_symref(self, name: str) -> str | None:
        v = self._read(("meta", _SYMREF + name))
        return None if v is None else str(v)

    def meta_get(self, key: str) -> str | None:
        v = self._read(("meta", key))
        return None if v is None else str(v)

    def _exclusive_gc(self) -> None:
        if not self._exclusive:
            self._exclusive = True
            self._queue(*self._sql.lock("gc"))

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
            self._b._putconn(conn)

    def _abort(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            with contextlib.suppress(Exception):
                conn.close()
        self._b._putconn(conn)

    def _commit(self) -> None:
        """Send what is queued, the token and COMMIT in one round trip; a connection lost on the way is
        resolved through the token (committed: done; not: replay and commit again)."""
        if self._conn is None and not self._log and not self._pending:
            return  # nothing was done at all
        self._queue(f"INSERT INTO {self._s}.txdone(token, time_ns) VALUES (%s, %s)", (self.token, time.time_ns()))
        self._committing = True
        self._run([("COMMIT", None, False, None)])
        if self._site is not None:
            keys = list(self._reads)[1:]
            self._b._learn(self._site, () if self._exclusive or len(keys) > PREFETCH_MAX else tuple(keys))
        if self._conn is not None:  # None: the COMMIT's answer was lost but the token shows it landed
            conn, self._conn = self._conn, None
            self._b._putconn(conn)

    # -- write verbs -----------------------------------------------------------------------------------------

    def get_ref(self, name: str) -> bytes | None:
        # under the ref's lock: the tip read and the later compare-and-swap cannot be split by another writer
        v = self._read(("ref", name))
        return None if v is None else bytes(v)

    def put_many(self, objs: Iterable[StoredObject], now_ns: int) -> int:
        rows = self._put_rows(objs)
        if not rows:
            return 0
        # one round trip: count the present ones, insert the absent
        count: _Op = (f"SELECT count(*) FROM {self._s}.objects WHERE oid = ANY(%s)", ([o.oid for o in rows],),
                      False, "rows")
        before = self._run([count, *self._inserts(rows, now_ns)])[0]
        assert isinstance(before, list)
        return len(rows) - int(before[0][0])

    def put_many_uncounted(self, objs: Iterable[StoredObject], now_ns: int) -> None:
        """Queued: sent with the transaction's next round trip (a checkpoint saves one of its round trips)."""
        self._pending.extend(self._inserts(self._put_rows(objs), now_ns))

    def _put_rows(self, objs: Iterable[StoredObject]) -> list[StoredObject]:
        """Distinct objects in id order (one lock order: no deadlocks); raises before anything is sent when
        one is over PostgreSQL's field limit."""
        rows = sorted({o.oid: o for o in objs}.values(), key=lambda o: o.oid)
        for o in rows:
            if len(o.frame) > MAX_FIELD:
                self._abort()
                raise StoreWriteError(f"{self._b.where}: object {o.oid.hex()[:12]} is {len(o.frame)} bytes at "
                                      f"rest, over PostgreSQL's 1 GB field limit; nothing was written")
        return rows

    def _inserts(self, rows: list[StoredObject], now_ns: int) -> list[_Op]:
        """Insert the absent; a present one's stored time becomes at least now_ns (gc's grace rule) without
        rewriting rows that are already as fresh."""
        inserts: list[_Op] = []
        for chunk in _chunks(rows):  # unnest(): one statement per chunk, ~3x faster than executemany here
            inserts.append((
                f"INSERT INTO {self._s}.objects AS o(oid, kind, size, touched, frame) "
                f"SELECT u.oid, u.kind, u.size, %s, u.frame "
                f"FROM unnest(%s::bytea[], %s::smallint[], %s::bigint[], %s::bytea[]) AS u(oid, kind, size, frame) "
                f"ON CONFLICT (oid) DO UPDATE SET touched = excluded.touched WHERE o.touched < excluded.touched",
                (now_ns, [o.oid for o in chunk], [o.kind for o in chunk], [o.size for o in chunk],
                 [o.frame for o in chunk]), False, None))
        return inserts

    def reframe(self, frames: Iterable[tuple[bytes, bytes]]) -> int:
        items = list(frames)
        if not items:
            return 0
        ids = [o for o, _ in items]
        n = self._rows(f"SELECT count(*) FROM {self._s}.objects WHERE oid = ANY(%s)", (ids,))[0][0]
        self._queue(f"UPDATE {self._s}.objects SET frame = %s WHERE oid = %s", [(f, o) for o, f in items],
                    many=True)
        return int(n)

    def delete_objects(self, oids: Iterable[bytes], touched_before_ns: int) -> int:
        ids = list(dict.fromkeys(oids))
        if not ids:
            return 0
        self._exclusive_gc()
        n = 0
        for i in range(0, len(ids), BATCH):
            n += len(self._rows(f"DELETE FROM {self._s}.objects WHERE touched < %s AND oid = ANY(%s) "
                                f"RETURNING 1", (touched_before_ns, ids[i:i + BATCH])))
        return n

    def drop_packs(self, oids: Iterable[bytes], touched_before_ns: int) -> int:
        """Delete packs no frame names (base.Txn.drop_packs) without gc's exclusive lock: a merge must not
        make every writer of the store wait. The space they took is made reusable right after the commit
        (:meth:`PgBackend.transaction`), so bytes as written stay near what gc leaves."""
        ids = list(dict.fromkeys(oids))
        n = 0
        for i in range(0, len(ids), BATCH):
            n += len(self._rows(f"DELETE FROM {self._s}.objects WHERE touched < %s AND oid = ANY(%s) "
                                f"RETURNING 1", (touched_before_ns, ids[i:i + BATCH])))
        self.dropped += n
        return n

    def set_ref_if_equals(self, name: str, old: bytes | None, new: bytes | None) -> None:
        self._lock_ref(name)
        s = self._s
        args: tuple[Any, ...]
        if old is None and new is None:
            if self.get_ref(name) is not None:
                self._abort()
                raise self._b._conflict(name, None)
            return
        if old is None:
            change, args = (f"INSERT INTO {s}.refs(name, target) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING",
                            (name, new))
        elif new is None:
            change, args = f"DELETE FROM {s}.refs WHERE name = %s AND target = %s", (name, old)
        else:
            change, args = f"UPDATE {s}.refs SET target = %s WHERE name = %s AND target = %s", (new, name, old)
        self._cas_expect[name] = old
        self._forget(("ref", name))
        self._queue(f"WITH u AS ({change} RETURNING 1) SELECT {s}.cas_check(count(*), %s) FROM u", (*args, name))

    def set_symref(self, name: str, target: str) -> None:
        self._forget(("meta", _SYMREF + name))
        self._queue(f"INSERT INTO {self._s}.meta(key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                    f"SET value = excluded.value", (_SYMREF + name, target))

    def reflog_append(self, entry: ReflogEntry) -> None:
        self._queue(f"INSERT INTO {self._s}.reflog(ref, old, new, time_ns, message) VALUES (%s, %s, %s, %s, %s)",
                    (entry.ref, entry.old, entry.new, entry.time_ns, entry.message))

    def reflog_delete(self, ref: str) -> None:
        self._queue(f"DELETE FROM {self._s}.reflog WHERE ref = %s", (ref,))

    def index_add(self, row: IndexRow) -> None:
        self._queue(f"INSERT INTO {self._s}.commits({_ROW_COLS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    f"ON CONFLICT (id) DO NOTHING",
                    (row.id, row.branch, row.seq, row.time_ns, row.run_id, row.trigger, b"".join(row.parents),
                     row.tree, row.summary, row.alias, row.meta_json))

    def index_remove(self, ids: Iterable[bytes]) -> int:
        idl = list(dict.fromkeys(ids))
        if not idl:
            return 0
        return len(self._rows(f"DELETE FROM {self._s}.commits WHERE id = ANY(%s) RETURNING 1", (idl,)))

    def index_rebranch(self, old: str, new: str) -> None:
        self._queue(f"UPDATE {self._s}.commits SET branch = %s WHERE branch = %s", (new, old))

    def index_renumber(self, seqs: Mapping[bytes, int]) -> int:
        items = list(seqs.items())
        if not items:
            return 0
        n = 0
        for cid, seq in items:  # in the given order (see the contract); each answer counts what changed
            n += len(self._rows(f"UPDATE {self._s}.commits SET seq = %s WHERE id = %s AND seq <> %s RETURNING 1",
                                (seq, cid, seq)))
        return n

    def alias_set(self, alias: str, cid: bytes) -> None:
        self._queue(f"INSERT INTO {self._s}.aliases(alias, id) VALUES (%s, %s) ON CONFLICT (alias) DO NOTHING",
                    (alias, cid))

    def alias_forget(self, cids: Iterable[bytes]) -> int:
        idl = list(dict.fromkeys(cids))
        if not idl:
            return 0
        return len(self._rows(f"DELETE FROM {self._s}.aliases WHERE id = ANY(%s) RETURNING 1", (idl,)))

    def counter_next(self, name: str) -> int:
        s = self._s
        if name == "seq":
            return int(self._read(("seq", "")))
        return int(self._rows(f"INSERT INTO {s}.counters(name, value) VALUES (%s, 1) ON CONFLICT (name) DO UPDATE "
                              f"SET value = {s}.counters.value + 1 RETURNING value", (name,))[0][0])

    def meta_set(self, key: str, value: str) -> None:
        if key == "gc_epoch":  # gc's bump waits for every open write transaction (module docstring)
            self._exclusive_gc()
        self._forget(("meta", key))
        self._queue(f"INSERT INTO {self._s}.meta(key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                    f"SET value = excluded.value", (key, value))


def _retryable(e: BaseException) -> bool:
    """A failure that a new connection and a replay cure: the connection died, or PostgreSQL aborted the
    transaction to break a deadlock or a serialization conflict."""
    if isinstance(e, _RETRYABLE):
        return True
    if isinstance(e, (pgerr.AdminShutdown, pgerr.CannotConnectNow, pgerr.CrashShutdown,
                      pgerr.IdleSessionTimeout, pgerr.IdleInTransactionSessionTimeout)):
        return True
    if isinstance(e, psycopg.OperationalError):
        sqlstate = getattr(e, "sqlstate", None)
        return sqlstate is None or sqlstate.startswith("08") or sqlstate.startswith("57P")
    return False


class PgBackend(_PgReader, TransactionalBackend):
    """The PostgreSQL backend over one schema (see the module docstring).

    Use :meth:`create` for a new store and :meth:`open` for an existing one. Thread-safe: a pool of
    connections is shared by the threads of the process, each transaction on its own connection.

    Raises (both):
        CkptError: the server cannot be reached (one line naming host and port) or rejects the login.
    """

    # gc_grace_s: stored times come from each writer's clock; a grace above the clock skew between machines
    # keeps an object a writer reused just after gc's epoch bump (docs/backends.md, 'PostgreSQL')
    capabilities = Capabilities(transactions=True, locks=True, cheap_listing=True, reframe=True, shared=True,
                                persistent=True, gc_grace_s=GC_GRACE_S)
    # a writer merges its per-checkpoint packs this often (Store.AUTO_PACKS elsewhere): until the merge's
    # VACUUM they take space in the table, so merging twice as often keeps bytes as written ~20% lower here
    merge_packs_every = 16

    def __init__(self, location: str | PgLocation, *, pool_size: int = POOL_SIZE,
                 retry_s: float = RETRY_S, connect_timeout_s: int = CONNECT_TIMEOUT_S,
                 gc_grace_s: float = GC_GRACE_S) -> None:
        """``gc_grace_s``: see :attr:`capabilities` (0 is safe when every writer runs on this machine's clock:
        the advisory locks already order gc's epoch bump against open checkpoints)."""
        if gc_grace_s != GC_GRACE_S:
            self.capabilities = dataclasses.replace(self.capabilities, gc_grace_s=gc_grace_s)
        self.loc = location if isinstance(location, PgLocation) else parse_location(location)
        self.where = self.loc.identity
        self._secrets = _secrets_of(self.loc.conninfo)
        self.retry_s = retry_s
        self._sql = _Sql(self.loc.schema)
        self._connect_timeout = connect_timeout_s
        self._closed = False
        self.read_only = False
        self.round_trips = 0  # statements or pipelines sent to the server (benchmarks and tests count them)
        self._probe()
        self._pool = psycopg_pool.ConnectionPool(
            self.loc.conninfo, min_size=0, max_size=pool_size, open=True, name=f"crewckpt-{self.loc.schema}",
            kwargs={"autocommit": True, "prepare_threshold": None, "connect_timeout": connect_timeout_s},
            timeout=max(retry_s, 1.0), reconnect_timeout=max(retry_s, 1.0))
        self._lock = threading.Lock()
        self._predictions: dict[Any, tuple[_Key, ...]] = {}  # PgTxn's prefetch per [thread,] (place, first key)
        self._open = 0  # transactions open now (threads)

    def _prediction(self, site: Any) -> tuple[_Key, ...]:
        """What the last committed transaction begun at ``site`` read, in this thread; in a thread new to
        ``site`` (CrewAI runs tasks in threads of their own), another thread's, but only while no other
        transaction of this backend is open (threads writing at once never prefetch each other's refs)."""
        keys = self._predictions.get((threading.get_ident(), site))
        if keys is None and self._open == 1:
            keys = self._predictions.get(site)
        return keys or ()

    def _learn(self, site: Any, keys: tuple[_Key, ...]) -> None:
        if len(self._predictions) > 1024:  # threads come and go: forget them all now and then
            self._predictions.clear()
        self._predictions[(threading.get_ident(), site)] = self._predictions[site] = keys

    # -- opening ---------------------------------------------------------------------------------------------

    def _probe(self) -> None:
        """One direct connection first: a server that is down or refuses the login gives its own one-line
        reason here (the pool would only time out)."""
        try:
            with psycopg.connect(self.loc.conninfo, connect_timeout=self._connect_timeout, autocommit=True,
                                 prepare_threshold=None) as c:
                c.execute("SELECT 1")
        except psycopg.Error as e:
            raise CkptError(f"{self.where}: cannot connect to the PostgreSQL server at {self.loc.host} "
                            f"({_first_line(e, self._secrets)}); check that it runs and the URL (user, password, database)") from None

    @classmethod
    def create(cls, location: str, meta: dict[str, str] | None = None, **kw: Any) -> PgBackend:
        """Create the store's schema, tables and ``meta`` rows in one transaction and open it. Of several
        processes creating one store at once, one wins; the others get StoreExists.

        Raises:
            StoreExists: the schema already holds a crewckpt store. CkptError: it holds other tables, the
                server is unreachable, or the user may not create schemas.
        """
        b = cls(location, **kw)
        try:
            b._create(meta or {})
        except BaseException:
            b.close()
            raise
        return b

    def _create(self, meta: dict[str, str]) -> None:
        s = self._sql
        with self._pool.connection(timeout=self.retry_s) as c:
            try:
                with c.transaction():
                    # one creator at a time per schema name; the others then find the finished store
                    c.execute(*s.lock("create"))
                    found = c.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s",
                                      (s.schema,)).fetchone()
                    if found and found[0]:
                        has = c.execute("SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'meta'",
                                        (s.schema,)).fetchone()
                        if has:
                            raise StoreExists(f"{self.where}: a crewckpt store already exists in schema "
                                              f"{s.schema!r}; open it, or pick another ?schema=")
                        raise CkptError(f"{self.where}: schema {s.schema!r} already holds other tables; pick "
                                        f"another ?schema= for the store")
                    c.execute(f"CREATE SCHEMA IF NOT EXISTS {s.s}")
                    c.execute(s.tables)
                    rows = {**meta, "pg_schema_version": str(SCHEMA_VERSION)}
                    with c.cursor() as cur:
                        cur.executemany(f"INSERT INTO {s.s}.meta(key, value) VALUES (%s, %s)", list(rows.items()))
            except psycopg.errors.InsufficientPrivilege as e:
                raise CkptError(f"{self.where}: may not create the store's schema ({_first_line(e, self._secrets)}); ask for "
                                f"CREATE on the database, or use a schema you own") from None

    @classmethod
    def open(cls, location: str, **kw: Any) -> PgBackend:
        """Open an existing store; never creates anything.

        Raises:
            StoreNotFound: no crewckpt store in that schema. FormatVersionError: its tables are a newer
            schema version than this crewckpt knows. CkptError: unreachable server (one line naming the host).
        """
        b = cls(location, **kw)
        try:
            b._check()
        except BaseException:
            b.close()
            raise
        return b

    def _check(self) -> None:
        s = self._sql
        found = self._q("SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'meta'", (s.schema,))
        if not found:
            raise StoreNotFound(f"{self.where}: no crewckpt store in schema {s.schema!r}; create one with "
                                f"`ckpt init {self.where}`")
        v = self.meta_get("pg_schema_version")
        if v is None or not v.isdigit():
            raise CorruptStore(f"{self.where}: the store's schema version is missing; this schema is not a "
                               f"complete crewckpt store")
        if int(v) > SCHEMA_VERSION:
            raise FormatVersionError(f"{self.where}: store schema version {v} is newer than this crewckpt "
                                     f"understands ({SCHEMA_VERSION}); upgrade crewckpt")

    # -- connections -----------------------------------------------------------------------------------------

    def _getconn(self, deadline: float) -> psycopg.Connection[Any]:
        while True:
            try:
                return self._pool.getconn(timeout=max(0.5, deadline - time.monotonic()))
            except psycopg_pool.PoolTimeout:
                if time.monotonic() >= deadline:
                    raise StoreBusy(f"{self.where}: no connection to the server at {self.loc.host} within "
                                    f"{self.retry_s:.0f} s; check that it runs and is reachable") from None

    def _putconn(self, conn: psycopg.Connection[Any]) -> None:
        with contextlib.suppress(Exception):
            self._pool.putconn(conn)

    def _q(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        """A read outside any transaction (autocommit: one statement, committed state), retried on a new
        connection while the server is unreachable (until retry_s)."""
        if self._closed:
            raise CkptError(f"{self.where}: the store is closed")
        deadline = time.monotonic() + self.retry_s
        while True:
            conn = self._getconn(deadline)
            try:
                self.round_trips += 1
                rows = conn.execute(sql, args).fetchall()
                self._putconn(conn)
                return rows
            except psycopg.Error as e:
                self._putconn(conn)
                if not _retryable(e) or time.monotonic() > deadline:
                    raise self._error(e) from None

    def _landed(self, token: bytes, deadline: float) -> bool:
        """Whether the transaction with ``token`` committed (its COMMIT's answer was lost)."""
        while True:
            try:
                return bool(self._q(f"SELECT 1 FROM {self._sql.s}.txdone WHERE token = %s", (token,)))
            except CkptError:
                if time.monotonic() > deadline:
                    raise

    def _error(self, e: BaseException) -> Exception:
        """A crewckpt error (one line) for a PostgreSQL failure that retrying cannot cure."""
        msg = _first_line(e, self._secrets)
        if isinstance(e, psycopg.OperationalError) and _retryable(e):
            return StoreWriteError(f"{self.where}: lost the connection to the server at {self.loc.host} and "
                                   f"could not get it back within {self.retry_s:.0f} s ({msg}); nothing of the "
                                   f"unfinished transaction was written; retry when the server is back")
        if isinstance(e, (pgerr.DiskFull, pgerr.OutOfMemory, pgerr.ProgramLimitExceeded)):
            return StoreWriteError(f"{self.where}: the server refused the write ({msg}); nothing was written")
        if isinstance(e, pgerr.ReadOnlySqlTransaction):
            return StoreWriteError(f"{self.where}: the server is read-only ({msg}); nothing was written; "
                                   f"point the location at the primary")
        if isinstance(e, pgerr.InsufficientPrivilege):
            return StoreWriteError(f"{self.where}: permission denied ({msg}); grant the user access to schema "
                                   f"{self._sql.schema!r}")
        if isinstance(e, (pgerr.UndefinedTable, pgerr.UndefinedColumn, pgerr.InvalidSchemaName,
                          pgerr.UndefinedFunction)):
            return CorruptStore(f"{self.where}: the store's tables are damaged or missing ({msg}); restore the "
                                f"schema from a backup (pg_dump -n {self._sql.schema})")
        # anything else is the server's refusal, not damage in the store (no "restore from a backup" advice)
        return CkptError(f"{self.where}: the PostgreSQL server refused the request ({msg}); nothing of an "
                         f"unfinished transaction was written")

    def _conflict(self, name: str, expected: bytes | None) -> RefConflict:
        return ref_conflict(name, expected, self.get_ref(name))

    # -- verbs -----------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Txn]:
        """One database transaction (module docstring): atomic; writes to one ref are serialized; transactions
        of different threads run at once on their own connections."""
        if self._closed:
            raise CkptError(f"{self.where}: the store is closed")
        txn = PgTxn(self)
        with self._lock:
            self._open += 1
        try:
            try:
                yield txn
            except BaseException:
                txn._abort()
                raise
            txn._commit()
        finally:
            with self._lock:
                self._open -= 1
        if txn.dropped:
            # MVCC: the dropped packs' rows (mostly TOAST) stay dead until a VACUUM; autovacuum comes a
            # minute later at best, so without this every per-checkpoint pack ever written would take space
            self._vacuum("objects", options="SKIP_LOCKED, TRUNCATE false")

    @contextlib.contextmanager
    def lock(self, name: str = "gc", wait_s: float = 0.0) -> Iterator[bool]:
        """A named exclusive lock held by an open transaction on a connection of its own (transaction-scoped,
        so it works behind transaction-mode poolers and dies with its holder's connection)."""
        deadline = time.monotonic() + self.retry_s
        conn = self._getconn(deadline)
        try:
            conn.execute("BEGIN")
            if wait_s > 0:
                conn.execute(f"SET LOCAL lock_timeout = '{max(1, int(wait_s * 1000))}ms'")
                try:
                    conn.execute(*self._sql.lock("lock", name))
                    got = True
                except pgerr.LockNotAvailable:
                    got = False
            else:
                row = conn.execute(*self._sql.lock("lock", name, try_=True)).fetchone()
                got = bool(row and row[0])
            yield got
        except psycopg.Error as e:
            raise self._error(e) from None
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")
            self._putconn(conn)

    def maintain(self, compact: bool = False) -> None:
        """gc's hook after a sweep: forget transaction tokens older than a day (a lost COMMIT is resolved
        within seconds), then VACUUM the objects table (space freed by gc becomes reusable; never blocks
        writers). ``compact`` (gc passes it for small stores): VACUUM FULL, which also gives the space back
        to the operating system but holds an exclusive lock on the table while it rewrites it (writers wait
        for it, a few seconds on a store under 256 MiB)."""
        day_ago = time.time_ns() - 86_400 * 10**9
        with self.transaction() as t:
            assert isinstance(t, PgTxn)
            t._queue(f"DELETE FROM {self._sql.s}.txdone WHERE time_ns < %s", (day_ago,))
        for table in ("objects", "txdone"):
            self._vacuum(table, full=compact and table == "objects")

    def _vacuum(self, table: str, full: bool = False, options: str = "") -> None:
        """VACUUM (FULL) one table, best effort (as SQLite's VACUUM: a failure is ignored). ``options``: a
        lazy VACUUM's option list (``SKIP_LOCKED``: another session's VACUUM of the table is not waited for;
        ``TRUNCATE false``: never takes the lock that would make writers wait; both PostgreSQL 12+)."""
        deadline = time.monotonic() + self.retry_s
        conn = self._getconn(deadline)
        opts = "FULL " if full else f"({options}) " if options else ""
        try:
            conn.execute(f"VACUUM {opts}{self._sql.s}.{table}")
        except psycopg.Error:
            pass
        finally:
            self._putconn(conn)

    def disk_bytes(self) -> int:
        """Bytes the store's tables take in the database (``pg_total_relation_size``: heap, TOAST, indexes)."""
        r = self._q("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n "
                    "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'S')",
                    (self._sql.schema,))
        return int(r[0][0])

    def drop(self) -> None:
        """Delete the whole store (its schema, CASCADE). For tests and ``ckpt`` tooling; irreversible."""
        deadline = time.monotonic() + self.retry_s
        conn = self._getconn(deadline)
        try:
            conn.execute(f"DROP SCHEMA IF EXISTS {self._sql.s} CASCADE")
        finally:
            self._putconn(conn)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool.close()


# -- location registry (crewckpt.backends.registry finds OPENER for postgresql:// and postgres://) ----------

class PostgresOpener(Opener):
    """Opens ``postgresql://`` and ``postgres://`` locations (see the module docstring)."""

    label = "PostgreSQL"

    def identity(self, loc: Location) -> str:
        return parse_location(loc.target).identity

    def open(self, loc: Location) -> Opened:
        b = PgBackend.open(loc.target)
        return Opened(b, b.where)

    def create(self, loc: Location, meta: Mapping[str, str], *, private: bool) -> Opened:
        """``private`` has no meaning in a database (access is the server's GRANTs): ignored."""
        b = PgBackend.create(loc.target, dict(meta))
        return Opened(b, b.where)


OPENER = PostgresOpener()

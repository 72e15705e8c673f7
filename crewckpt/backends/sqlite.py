"""SQLite backend: the embedded default. One database file (``store.db``) in the store folder, WAL mode,
busy timeout, incremental auto-vacuum. Works with SQLite 3.40 (no JSON functions needed).

Why SQLite: one small row per transaction costs ~0.02 ms in WAL (../shared/notes/store-anchors.md), locks die
with their process, and a whole content-addressed VCS fits in one file (Fossil).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

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
from crewckpt.backends.registry import Location, Opened, Opener
from crewckpt.errors import CkptError, CorruptStore, StoreExists, StoreNotFound

DB_NAME = "store.db"
BATCH = 900  # bound parameters per statement; far below SQLite's 32,766 limit on any build
BUSY_TIMEOUT_S = 60.0
# bytes per database page of a new store (SQLite's default is 4096): each of the 9 tables and indexes takes at
# least one page, so 2 KiB pages halve a short run's fixed overhead; no slower to write (docs/write-path.md)
PAGE_SIZE = 2048
SMALL_VACUUM_BYTES = 1 << 20  # a store file at most this big is VACUUMed when its last writer releases it
FREE_PAGES_MIN = 256  # free pages (and FREE_SHARE_MIN of the file) above which release() gives them back
FREE_SHARE_MIN = 0.25
VACUUM_STEP_PAGES = 512  # pages one step of that vacuum frees (1 MiB at 2 KiB pages, ~5 ms of write lock)
VACUUM_PAUSE_MAX = 0.05  # seconds: the longest pause between two steps (a waiting writer retries within it)
VACUUM_BUSY_TRIES = 20  # steps in a row refused by another writer's lock before the vacuum gives up (~1 s)

_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE objects(oid BLOB PRIMARY KEY, kind INTEGER NOT NULL, size INTEGER NOT NULL,
                     touched INTEGER NOT NULL, frame BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE refs(name TEXT PRIMARY KEY, target BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE reflog(n INTEGER PRIMARY KEY, ref TEXT NOT NULL, old BLOB, new BLOB,
                    time_ns INTEGER NOT NULL, message TEXT NOT NULL);
CREATE INDEX reflog_ref ON reflog(ref, n);
CREATE TABLE commits(id BLOB PRIMARY KEY, branch TEXT NOT NULL,
                     seq INTEGER NOT NULL, time_ns INTEGER NOT NULL, run_id TEXT NOT NULL, trig TEXT,
                     parents BLOB NOT NULL, tree BLOB NOT NULL, summary BLOB NOT NULL, alias TEXT,
                     meta TEXT) WITHOUT ROWID;
CREATE INDEX commits_branch ON commits(branch, seq);
CREATE INDEX commits_seq ON commits(seq);
CREATE TABLE aliases(alias TEXT PRIMARY KEY, id BLOB NOT NULL) WITHOUT ROWID;
"""
# Small tables are WITHOUT ROWID (no separate key index: one page each instead of two) and the write
# counters live in ``meta``: on a store of a few hundred KB, every page is 4 KiB of disk.

_SYMREF = "symref:"  # symbolic refs live in meta (key "symref:HEAD"): stores made before them open unchanged
_ROW_COLS = "id, branch, seq, time_ns, run_id, trig, parents, tree, summary, alias, meta"


def _batches(items: Sequence[bytes]) -> Iterator[Sequence[bytes]]:
    for i in range(0, len(items), BATCH):
        yield items[i:i + BATCH]


def _bin(v: object) -> bytes:
    """A BLOB column's value as bytes, whatever a hostile or damaged row holds (TEXT, a number, NULL): the
    object layer then fails to decode or verify it and names the object, instead of a raw TypeError here."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    return b"" if v is None else str(v).encode()


def _row(r: tuple) -> IndexRow:  # type: ignore[type-arg]
    p = _bin(r[6])
    return IndexRow(_bin(r[0]), r[1], r[2], r[3], r[4], r[5], tuple(p[i:i + 32] for i in range(0, len(p), 32)),
                    _bin(r[7]), _bin(r[8]), r[9], r[10])


class _SqlReader:
    """Read verbs over one connection; subclasses supply ``_q`` (a locked, busy-retrying execute)."""

    def _q(self, sql: str, args: Sequence[object] = ()) -> list[tuple]:  # type: ignore[type-arg]
        raise NotImplementedError

    def get_prefix(self, prefix: bytes, kind: int) -> list[StoredObject]:
        lo, hi = prefix + b"\x00" * (32 - len(prefix)), prefix + b"\xff" * (32 - len(prefix))
        rows = self._q("SELECT oid, kind, size, CAST(frame AS BLOB) FROM objects WHERE oid BETWEEN ? AND ? AND kind=?",
                       (lo, hi, kind))
        return [StoredObject(_bin(o), k, sz, _bin(f)) for o, k, sz, f in rows]

    def get_many(self, oids: Iterable[bytes]) -> dict[bytes, StoredObject]:
        ids = list(dict.fromkeys(oids))
        out: dict[bytes, StoredObject] = {}
        for b in _batches(ids):
            for oid, kind, size, frame in self._q(
                    f"SELECT oid, kind, size, CAST(frame AS BLOB) FROM objects WHERE oid IN ({','.join('?' * len(b))})",
                    b):
                out[_bin(oid)] = StoredObject(_bin(oid), kind, size, _bin(frame))
        return out

    def has_many(self, oids: Iterable[bytes]) -> set[bytes]:
        ids = list(dict.fromkeys(oids))
        out: set[bytes] = set()
        for b in _batches(ids):
            out.update(bytes(r[0]) for r in self._q(
                f"SELECT oid FROM objects WHERE oid IN ({','.join('?' * len(b))})", b))
        return out

    def iter_objects(self, prefix: bytes = b"") -> Iterator[ObjectMeta]:
        where = ""
        args: tuple[bytes, ...] = ()
        if prefix:
            where = " WHERE oid BETWEEN ? AND ?"
            args = (prefix + b"\x00" * (32 - len(prefix)), prefix + b"\xff" * (32 - len(prefix)))
        for oid, kind, size, touched, head, flen in self._q(
                f"SELECT oid, kind, size, touched, coalesce(substr(CAST(frame AS BLOB), 1, {HEAD_BYTES}), x''), "
                f"length(frame) FROM objects{where}", args):
            # substr() of a zero-length blob is NULL: an emptied frame (lost write) must list, not crash;
            # a frame stored as TEXT is cast (it then fails verification, named, instead of a TypeError)
            yield ObjectMeta(_bin(oid), kind, size if isinstance(size, int) else -1,
                             touched if isinstance(touched, int) else 0, _bin(head),
                             flen if isinstance(flen, int) else -1)

    def count_objects(self, kind: int, size_below: int) -> int:
        return int(self._q("SELECT count(*) FROM objects WHERE kind=? AND size<?", (kind, size_below))[0][0])

    def object_stats(self) -> tuple[int, int, int]:
        n, size, stored = self._q("SELECT count(*), coalesce(sum(size),0), coalesce(sum(length(frame)),0) "
                                  "FROM objects")[0]
        return n, size, stored

    def get_ref(self, name: str) -> bytes | None:
        r = self._q("SELECT target FROM refs WHERE name=?", (name,))
        return _bin(r[0][0]) if r else None

    def refs(self, prefix: str = "") -> dict[str, bytes]:
        rows = self._q("SELECT name, target FROM refs WHERE substr(name, 1, ?) = ? ORDER BY name",
                       (len(prefix), prefix))
        return {n: _bin(t) for n, t in rows}

    def reflog(self, ref: str) -> list[ReflogEntry]:
        rows = self._q("SELECT ref, old, new, time_ns, message FROM reflog WHERE ref=? ORDER BY n", (ref,))
        out: list[ReflogEntry] = []
        prev: bytes | None = None
        for r, o, n, t, m in rows:
            old = None if o is None else _bin(o)
            if old == b"":  # stored as "the previous record's new" (see reflog_append)
                old = prev
            new = None if n is None else _bin(n)
            out.append(ReflogEntry(r, old, new, t, m))
            prev = new
        return out

    def get_symref(self, name: str) -> str | None:
        r = self._q("SELECT value FROM meta WHERE key=?", (_SYMREF + name,))
        return str(r[0][0]) if r else None

    def index_get(self, cid: bytes) -> IndexRow | None:
        r = self._q(f"SELECT {_ROW_COLS} FROM commits WHERE id=?", (cid,))
        return _row(r[0]) if r else None

    def index_rows(self, branch: str | None = None) -> list[IndexRow]:
        if branch is None:
            rows = self._q(f"SELECT {_ROW_COLS} FROM commits ORDER BY seq, time_ns, id")
        else:
            rows = self._q(f"SELECT {_ROW_COLS} FROM commits WHERE branch=? ORDER BY seq, time_ns, id", (branch,))
        return [_row(r) for r in rows]

    def index_children(self, cids: Iterable[bytes]) -> list[IndexRow]:
        want = set(cids)
        if not want:
            return []
        if len(want) <= 16:  # instr() scans the parents blobs in C; the alignment check below drops false hits
            cond = " OR ".join(["instr(parents, ?) > 0"] * len(want))
            rows = [_row(r) for r in self._q(f"SELECT {_ROW_COLS} FROM commits WHERE {cond} "
                                             f"ORDER BY seq, time_ns, id", tuple(want))]
            return [r for r in rows if not want.isdisjoint(r.parents)]
        hit = [_bin(i) for i, p in self._q("SELECT id, parents FROM commits")
               if not want.isdisjoint(_bin(p)[k:k + 32] for k in range(0, len(_bin(p)), 32))]
        rows = [_row(r) for b in _batches(hit)
                for r in self._q(f"SELECT {_ROW_COLS} FROM commits WHERE id IN ({','.join('?' * len(b))})", b)]
        return sorted(rows, key=lambda r: (r.seq, r.time_ns, r.id))

    def index_last(self) -> bytes | None:
        r = self._q("SELECT id FROM commits ORDER BY seq DESC LIMIT 1")
        return _bin(r[0][0]) if r else None

    def index_prefix(self, hex_prefix: str, limit: int = 20) -> list[bytes]:
        lo = bytes.fromhex((hex_prefix + "0" * 64)[:64])
        hi = bytes.fromhex((hex_prefix + "f" * 64)[:64])
        rows = self._q("SELECT id FROM commits WHERE id BETWEEN ? AND ? ORDER BY id LIMIT ?", (lo, hi, limit))
        return [_bin(r[0]) for r in rows]

    def alias_get(self, alias: str) -> bytes | None:
        r = self._q("SELECT id FROM aliases WHERE alias=?", (alias,))
        return _bin(r[0][0]) if r else None

    def meta_get(self, key: str) -> str | None:
        r = self._q("SELECT value FROM meta WHERE key=?", (key,))
        return r[0][0] if r else None


class SqliteTxn(_SqlReader, Txn):
    """Write verbs inside one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, backend: SqliteBackend) -> None:
        self._b = backend

    def _q(self, sql: str, args: Sequence[object] = ()) -> list[tuple]:  # type: ignore[type-arg]
        return self._b._conn.execute(sql, args).fetchall()

    def put_many(self, objs: Iterable[StoredObject], now_ns: int) -> int:
        # two statements for any number of objects (a checkpoint's are nearly all new: the UPDATE runs only
        # when some were present, and skips rows already stamped now)
        rows = [(o.oid, o.kind, o.size, now_ns, o.frame) for o in objs]
        if not rows:
            return 0
        c = self._b._conn
        new: int = c.executemany("INSERT OR IGNORE INTO objects(oid, kind, size, touched, frame) VALUES (?,?,?,?,?)",
                                 rows).rowcount
        if new < len(rows):
            c.executemany("UPDATE objects SET touched=?1 WHERE oid=?2 AND touched<?1", [(now_ns, r[0]) for r in rows])
        return new

    def reframe(self, frames: Iterable[tuple[bytes, bytes]]) -> int:
        rows = [(f, o) for o, f in frames]
        return int(self._b._conn.executemany("UPDATE objects SET frame=? WHERE oid=?", rows).rowcount) if rows else 0

    def delete_objects(self, oids: Iterable[bytes], touched_before_ns: int) -> int:
        ids = list(oids)
        n = 0
        for b in _batches(ids):
            n += self._b._conn.execute(
                f"DELETE FROM objects WHERE touched < ? AND oid IN ({','.join('?' * len(b))})",
                (touched_before_ns, *b)).rowcount
        return n

    def set_ref_if_equals(self, name: str, old: bytes | None, new: bytes | None) -> None:
        c = self._b._conn
        # one statement when the ref holds what the caller expects (the usual case)
        if old is not None and new is not None:
            done = c.execute("UPDATE refs SET target=? WHERE name=? AND target=?", (new, name, old)).rowcount
        elif old is None and new is not None:
            done = c.execute("INSERT OR IGNORE INTO refs(name, target) VALUES (?,?)", (name, new)).rowcount
        elif old is not None:
            done = c.execute("DELETE FROM refs WHERE name=? AND target=?", (name, old)).rowcount
        else:
            done = 0
        if done:
            return
        cur = self.get_ref(name)  # a conflict, or a row SQL does not compare equal (a TEXT target, an old=new=None)
        if cur != old:
            raise ref_conflict(name, old, cur)
        if new is None:
            c.execute("DELETE FROM refs WHERE name=?", (name,))
        else:
            c.execute("INSERT OR REPLACE INTO refs(name, target) VALUES (?,?)", (name, new))

    def set_symref(self, name: str, target: str) -> None:
        self._b._conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?,?)", (_SYMREF + name, target))

    def reflog_append(self, entry: ReflogEntry) -> None:
        # a record whose old id is the previous record's new (the usual case) stores x'' instead of 32 bytes;
        # decided in the INSERT itself (one statement)
        self._b._conn.execute(
            "INSERT INTO reflog(ref, old, new, time_ns, message) VALUES (:ref, CASE WHEN :old IS NOT NULL AND :old "
            "= (SELECT new FROM reflog WHERE ref=:ref ORDER BY n DESC LIMIT 1) THEN x'' ELSE :old END, :new, :t, :m)",
            {"ref": entry.ref, "old": entry.old, "new": entry.new, "t": entry.time_ns, "m": entry.message})

    def reflog_delete(self, ref: str) -> None:
        self._b._conn.execute("DELETE FROM reflog WHERE ref=?", (ref,))

    def index_add(self, row: IndexRow) -> None:
        self._b._conn.execute(
            f"INSERT OR IGNORE INTO commits({_ROW_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (row.id, row.branch, row.seq, row.time_ns, row.run_id, row.trigger,
             b"".join(row.parents), row.tree, row.summary, row.alias, row.meta_json))

    def index_remove(self, ids: Iterable[bytes]) -> int:
        n = 0
        for b in _batches(list(ids)):
            n += self._b._conn.execute(f"DELETE FROM commits WHERE id IN ({','.join('?' * len(b))})", b).rowcount
        return n

    def index_rebranch(self, old: str, new: str) -> None:
        self._b._conn.execute("UPDATE commits SET branch=? WHERE branch=?", (new, old))

    def index_renumber(self, seqs: Mapping[bytes, int]) -> int:
        c = self._b._conn
        return sum(c.execute("UPDATE commits SET seq=? WHERE id=? AND seq<>?", (seq, cid, seq)).rowcount
                   for cid, seq in seqs.items())

    def alias_set(self, alias: str, cid: bytes) -> None:
        self._b._conn.execute("INSERT OR IGNORE INTO aliases(alias, id) VALUES (?,?)", (alias, cid))

    def alias_forget(self, cids: Iterable[bytes]) -> int:
        n = 0
        for b in _batches(list(cids)):
            n += self._b._conn.execute(f"DELETE FROM aliases WHERE id IN ({','.join('?' * len(b))})", b).rowcount
        return n

    def counter_next(self, name: str) -> int:
        c = self._b._conn
        key = "counter:" + name
        # never below the highest seq written (a damaged counter row must not hand out old numbers: parents
        # are older than their children, and graph walks rely on it to detect cycles)
        floor = "coalesce((SELECT max(seq) FROM commits), 0)" if name == "seq" else "0"
        cur = c.execute(f"INSERT INTO meta(key, value) VALUES (?, CAST({floor} + 1 AS TEXT)) "
                  f"ON CONFLICT(key) DO UPDATE SET value = CAST(max(CAST(value AS INTEGER), {floor}) + 1 AS TEXT) "
                  f"RETURNING value", (key,))
        return int(cur.fetchall()[0][0])

    def meta_set(self, key: str, value: str) -> None:
        self._b._conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?,?)", (key, value))


class SqliteBackend(_SqlReader, TransactionalBackend):
    """The SQLite backend over ``<folder>/store.db``.

    Use :meth:`create` for a new store and the constructor to open an existing one (never creates files).

    A store whose file or folder is not writable opens read-only (``read_only``): reads work, every write
    raises StoreWriteError before touching anything.

    Raises:
        CorruptStore: the file is not a database, is truncated, or lacks crewckpt's tables.
    """

    capabilities = Capabilities(transactions=True, locks=True, cheap_listing=True, reframe=True, shared=True,
                                persistent=True)

    def __init__(self, folder: str | os.PathLike[str], busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.folder = Path(folder)
        self.path = self.folder / DB_NAME
        self._busy = busy_timeout_s
        self._lock = threading.RLock()
        if not db_file(self.folder):  # raises for a FIFO, folder or device named store.db
            raise CorruptStore(f"{self.path}: database file is missing; the store is damaged")
        _check_not_truncated(self.path)
        self.read_only = not (os.access(self.path, os.W_OK) and os.access(self.folder, os.W_OK))
        self._read_only_why: str | None = None
        if not self.read_only:  # an init killed between publishing store.db and cleaning up left its temp file
            _remove_dead_inits(self.folder)
            self._read_only_why = _hard_link_problem(self.path)
            if self._read_only_why:  # readable as a read-only store; every write refuses with the fix
                self.read_only = True
        self._c: sqlite3.Connection | None = None
        self._file: tuple[int, int] | None = None  # (device, inode) of the file the first connection opened
        self._real = self.path  # that file's resolved path: SQLite keeps its -wal and -shm beside it
        self._connect()

    def _connect(self) -> sqlite3.Connection:
        """Open the connection (at construction, and again on first use after :meth:`release`)."""
        # as_uri() percent-encodes: a raw '?' or '#' in the folder name would end the path early and make
        # SQLite open (and create) a different file outside the store
        real = self.path.resolve()
        uri = real.as_uri()
        try:
            st = real.stat()
            ident: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            ident = None  # gone: connecting names the problem
        if self._file is not None and ident is not None and ident != self._file:
            # reopening after release(): the caches of the Store on this handle name objects of the file it
            # opened first; writing them into another file would link to objects that file never had
            raise StoreNotFound(f"{self.path} was replaced since this handle opened it (a backup restored or a "
                                f"copy moved over it?); nothing was written; open the store again")
        modes = ("mode=ro", "immutable=1") if self.read_only else ("mode=rw",)
        busy_timeout_s = self._busy
        for n, mode in enumerate(modes):
            try:
                conn = sqlite3.connect(f"{uri}?{mode}", uri=True, timeout=busy_timeout_s,
                                       isolation_level=None, check_same_thread=False)
                if not self.read_only:
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute("PRAGMA synchronous=NORMAL")
                    # checkpoint the WAL every 128 pages (256 KiB of 2 KiB pages) and cut it back to 256 KiB when
                    # it restarts (it would idle at 4 MiB; a short run's whole store is smaller than that);
                    # Store.finish_writes (run end, close) truncates it to zero
                    conn.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
                    conn.execute("PRAGMA journal_size_limit=262144")
                conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
                conn.execute("SELECT count(*) FROM meta").fetchone()
                conn.execute("SELECT oid FROM objects LIMIT 1").fetchall()
                self._c = conn
                self._file, self._real = self._file or ident, real
                return conn
            except sqlite3.OperationalError as e:
                # read-only folder without a -shm file: WAL readers need one, so read it as immutable
                if n + 1 < len(modes) and ("unable to open" in str(e) or "readonly" in str(e)):
                    continue
                raise _open_error(self.path, e) from None
            except sqlite3.DatabaseError as e:
                raise CorruptStore(f"{self.path}: not a readable crewckpt database ({e}); restore it from a "
                                   f"backup or re-import") from None
            except UnicodeDecodeError:  # a damaged schema makes even SQLite's error message invalid UTF-8
                raise CorruptStore(f"{self.path}: not a readable crewckpt database (damaged schema); restore "
                                   f"it from a backup or re-import") from None
        raise AssertionError("unreachable: the last mode raises")

    @property
    def _conn(self) -> sqlite3.Connection:
        """The connection, reopened on first use after :meth:`release`."""
        c = self._c
        if c is None:
            with self._lock:
                c = self._c if self._c is not None else self._connect()
        return c

    @_conn.setter
    def _conn(self, conn: sqlite3.Connection) -> None:  # tests wrap it to count statements
        self._c = conn

    @classmethod
    def create(cls, folder: str | os.PathLike[str], meta: dict[str, str] | None = None, *,
               mode: int = 0o600) -> SqliteBackend:
        """Create ``store.db`` (schema and ``meta`` rows) in an existing folder and open it.

        ``mode``: permissions of ``store.db`` (the process umask still applies); SQLite gives its ``-wal`` and
        ``-shm`` files the database's permissions. Default: private to the user.

        The database is built under a temporary name and published with a hard link, which never replaces an
        existing file: a process killed while creating leaves no half-made ``store.db``, and of several
        processes creating one store at once exactly one wins; the others get FileExistsError and can open
        the winner's complete store.

        Raises:
            FileExistsError: ``store.db`` exists. OSError: the folder is not writable.
        """
        folder = Path(folder)
        path = folder / DB_NAME
        if path.exists():
            raise FileExistsError(errno.EEXIST, "store exists", str(path))
        _remove_dead_inits(folder)
        tmp = folder / f".{DB_NAME}.{os.getpid()}.{threading.get_ident()}.init"
        rows = "".join(f"INSERT INTO meta(key, value) VALUES ({_sql_text(k)}, {_sql_text(v)});"
                       for k, v in (meta or {}).items())
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode))  # SQLite would use 0644
            # a URI built from the absolute path: a bare "file:..." name would be read as a URI by SQLite
            # (file:v/x -> "unable to open", file:w?mode=memory -> the schema goes to memory)
            conn = sqlite3.connect(Path(os.path.abspath(tmp)).as_uri() + "?mode=rw", uri=True, isolation_level=None)
            try:
                conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
                conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript("BEGIN;" + _SCHEMA + rows + "COMMIT;")
            finally:
                conn.close()  # the last connection checkpoints and removes the -wal/-shm files
            try:
                os.link(tmp, path)
            except OSError as e:
                if e.errno in (errno.EEXIST,):
                    raise
                if path.exists():  # filesystems without hard links: rename (not atomic against a racer)
                    raise FileExistsError(errno.EEXIST, "store exists", str(path)) from None
                os.rename(tmp, path)
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()
        return cls(folder)

    def _q(self, sql: str, args: Sequence[object] = ()) -> list[tuple]:  # type: ignore[type-arg]
        with self._lock:
            return self._retry(lambda: self._conn.execute(sql, args).fetchall())

    def _retry(self, fn):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + self._busy
        delay = 0.001
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise self._error(e) from None
                if time.monotonic() > deadline:
                    raise StoreBusy(f"{self.path}: store is locked by another writer for over "
                                    f"{self._busy:.0f} s; retry later") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
            except sqlite3.DatabaseError as e:
                raise CorruptStore(f"{self.path}: {e}; run `ckpt fsck`") from None
            except UnicodeDecodeError:  # a damaged page turned a TEXT value (or SQLite's message) into bad UTF-8
                raise CorruptStore(f"{self.path}: damaged text in the database; run `ckpt fsck`") from None

    def _error(self, e: sqlite3.Error | UnicodeDecodeError) -> Exception:
        """A crewckpt error for an SQLite failure that waiting cannot cure (one line, with the fix)."""
        msg = str(e)
        if isinstance(e, sqlite3.OperationalError) and "full" in msg:
            return StoreWriteError(f"{self.path}: disk full; nothing was written (the branch is unchanged); "
                                   f"free some space and retry")
        if "readonly" in msg or "read-only" in msg or "unable to open" in msg or "ermission" in msg:
            return StoreWriteError(f"{self.path}: the store is read-only ({msg}); nothing was written; check "
                                   f"the permissions of the folder and its files")
        if "disk I/O error" in msg:
            return StoreWriteError(f"{self.path}: I/O error ({msg}); nothing was written; check the disk")
        if isinstance(e, sqlite3.OperationalError):
            return CorruptStore(f"{self.path}: {msg}")
        return CorruptStore(f"{self.path}: {msg}; run `ckpt fsck`")

    def _rollback(self) -> None:
        # SQLite may already have rolled back by itself (SQLITE_FULL, I/O errors): a second ROLLBACK would
        # raise and hide the real error
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Txn]:
        if self.read_only:
            raise StoreWriteError(self._read_only_why or f"{self.folder}: the store is read-only; nothing was "
                                  f"written; make the folder and {DB_NAME} writable to change it")
        with self._lock:
            self._retry(lambda: self._conn.execute("BEGIN IMMEDIATE"))
            try:
                yield SqliteTxn(self)
            except (sqlite3.Error, UnicodeDecodeError) as e:  # a statement inside the transaction (disk full...)
                self._rollback()
                raise self._error(e) from None
            except BaseException:
                self._rollback()
                raise
            try:
                self._retry(lambda: self._conn.execute("COMMIT"))
            except BaseException:
                self._rollback()
                raise

    @contextlib.contextmanager
    def lock(self, name: str = "gc", wait_s: float = 0.0) -> Iterator[bool]:
        """An flock on ``<folder>/<name>.lock`` (dies with the process; ``gc.lock`` for gc)."""
        import filelock  # only gc needs it
        if not name.replace("-", "").isalnum():
            raise ValueError(f"lock name {name!r}: letters, digits and '-' only")
        if self.read_only:
            raise StoreWriteError(self._read_only_why or f"{self.folder}: the store is read-only; gc cannot run")
        try:  # the lock file is as private as the database, and always the owner's to read and write
            mode = (os.stat(self.folder / DB_NAME).st_mode & 0o666) | 0o600
        except OSError:
            mode = 0o600
        lock = filelock.FileLock(str(self.folder / f"{name}.lock"), timeout=wait_s, mode=mode)
        try:
            lock.acquire()
        except filelock.Timeout:
            yield False
            return
        except OSError as e:
            raise StoreWriteError(f"{self.folder}: cannot take the gc lock ({e.strerror}); check the folder's "
                                  f"permissions") from None
        try:
            yield True
        finally:
            lock.release()

    def maintain(self, compact: bool = False) -> None:
        """Incremental vacuum in steps and a WAL checkpoint, neither waiting on other connections
        (:func:`_vacuum_steps`, :func:`_truncate_wal`); ``compact`` also VACUUMs (best effort)."""
        with self._lock:
            for _ in _vacuum_steps(self._conn, min_pages=1, min_share=0.0):
                pass
            if compact:
                try:  # best effort: VACUUM needs free disk for a copy and a moment without readers
                    self._retry(lambda: self._conn.execute("VACUUM"))
                except (CorruptStore, StoreBusy):
                    pass
            _truncate_wal(self._conn)

    def database_check(self, full: bool = False) -> list[str]:
        """SQLite's own consistency check of the file: ``integrity_check`` (``full``) or ``quick_check``
        (no index-content cross-check). Returns its findings (at most 20), empty when the file is sound."""
        pragma = "integrity_check(20)" if full else "quick_check(20)"
        rows = self._q(f"PRAGMA {pragma}")
        lines = [str(r[0]) for r in rows]
        return [] if lines == ["ok"] else lines

    def recovery_advice(self) -> str:
        """SQLite's own salvage: ``.recover`` copies every readable row into a new database file."""
        return (f"restore {self.path} from a backup, or salvage what SQLite can still read: "
                f"`sqlite3 {self.path} .recover | sqlite3 recovered.db`, then `ckpt fsck --full` on it")

    def release(self) -> None:
        """Close the connection until the next call (base.Backend.release): the last connection to the store
        checkpoints the WAL and removes the -wal and -shm files, so an idle store is one file. When it was the
        last one (the -shm file went with it) and the file holds at most SMALL_VACUUM_BYTES, the store is first
        rewritten densely (:meth:`_vacuum_alone`; a short run's pages are a quarter slack). A transaction of
        another thread of this process finishes first (the lock waits for it)."""
        with self._lock:
            c, self._c = self._c, None
            if c is None:
                return
            if not self.read_only:
                _give_free_pages_back(c)
            c.close()
            if self.read_only or os.path.lexists(f"{self._real}-shm"):
                return  # another connection has the store open: leave it be
            try:
                small = self.path.stat().st_size <= SMALL_VACUUM_BYTES
            except OSError:
                return
            if small:
                self._vacuum_alone()

    def _vacuum_alone(self) -> None:
        """VACUUM a small store that no connection had open a moment ago, then close again. Never waits (busy
        timeout 0): a writer that came meanwhile keeps the store and the VACUUM is skipped; one that comes
        during it waits as for any write (a few ms at this size). Best effort: a failure changes nothing."""
        try:
            conn = self._connect()
        except CkptError:
            return
        try:
            conn.execute("PRAGMA busy_timeout=0")
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error:
            pass
        finally:
            self._c = None
            conn.close()

    def close(self) -> None:
        with self._lock:
            if self._c is not None:
                self._c.close()

    def disk_bytes(self) -> int:
        """Bytes the store keeps on disk: the database and its WAL (the -shm index and the lock file are
        transient and hold no data)."""
        return sum(f.stat().st_size for f in self.folder.iterdir()
                   if f.is_file() and f.name in (DB_NAME, DB_NAME + "-wal"))


def _give_free_pages_back(conn: sqlite3.Connection) -> None:
    """Run :func:`_vacuum_steps` to the end (release(): a transfer's merge dropped its one-commit packs,
    10,006 of 13,081 pages of a 1,200-checkpoint push)."""
    for _ in _vacuum_steps(conn):
        pass


@contextlib.contextmanager
def _never_waiting(conn: sqlite3.Connection) -> Iterator[None]:
    """Busy timeout 0 on ``conn`` while inside, the connection's own restored after (best effort)."""
    timeout = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
    conn.execute("PRAGMA busy_timeout=0")
    try:
        yield
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute(f"PRAGMA busy_timeout={timeout}")


def _vacuum_steps(conn: sqlite3.Connection, min_pages: int = FREE_PAGES_MIN,
                  min_share: float = FREE_SHARE_MIN) -> Iterator[int]:
    """``PRAGMA incremental_vacuum`` in steps of VACUUM_STEP_PAGES pages when at least ``min_pages`` pages and
    ``min_share`` of the file are free (release(); maintain(), at a run's end and in gc, gives back any free
    page); yields the free pages left after each step. Each step is its own transaction and is followed by
    a pause as long as it held the write lock, so a writer waiting for the lock gets it between steps (one
    vacuum of 74k pages held it 650 ms, a writer's commit beside it waited 631 ms). Never waits on SQLite's
    lock (busy timeout 0, restored after): a step another writer's commit refuses is tried again after
    VACUUM_PAUSE_MAX, and after VACUUM_BUSY_TRIES refusals in a row the vacuum gives up. Never waits for
    readers (it moves pages in the WAL; the file shrinks at the next checkpoint, the last connection's
    close). Stops when a step frees nothing. Best effort: a failure changes nothing."""
    try:
        free = _free_pages(conn)
        if not free or free < min_pages or free < min_share * int(conn.execute("PRAGMA page_count").fetchone()[0]):
            return
        with _never_waiting(conn):
            yield from _steps(conn, free)
    except sqlite3.Error:
        return


def _steps(conn: sqlite3.Connection, free: int) -> Iterator[int]:
    """The loop of :func:`_vacuum_steps` from ``free`` pages on."""
    refused = 0
    while free and refused <= VACUUM_BUSY_TRIES:
        held = _vacuum_step(conn)
        if held is None:
            refused += 1
            time.sleep(VACUUM_PAUSE_MAX)  # another writer commits: let it finish, then go on
            continue
        refused = 0
        left = _free_pages(conn)
        if left >= free:
            return
        free = left
        yield free
        if free:
            time.sleep(min(held, VACUUM_PAUSE_MAX))


def _vacuum_step(conn: sqlite3.Connection) -> float | None:
    """One step of :func:`_vacuum_steps`: the seconds it held the write lock, or None when another writer
    held the lock (nothing was done). Raises sqlite3.Error for anything else."""
    started = time.monotonic()
    try:  # executescript runs the pragma to the end of its N pages (execute() steps it once: one page)
        conn.executescript(f"PRAGMA incremental_vacuum({VACUUM_STEP_PAGES});")
    except sqlite3.OperationalError as e:
        if "locked" in str(e) or "busy" in str(e):
            return None
        raise
    return time.monotonic() - started


def _truncate_wal(conn: sqlite3.Connection) -> None:
    """``wal_checkpoint(TRUNCATE)`` without waiting (busy timeout 0, restored after): while it waits for a
    reader's open snapshot SQLite blocks every writer (a run end made another process's commit wait 4.1 s
    beside a 4 s reader). Skipped when it cannot finish now; the next one, or the last close, does it."""
    try:
        with _never_waiting(conn):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.Error:
        pass


def _free_pages(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA freelist_count").fetchone()[0])


def _hard_link_problem(path: Path) -> str | None:
    """Why ``path`` must not be written, if another name links to the same file (``cp -al`` backups): SQLite
    keeps its WAL and shared-memory index per *path*, so writers through two names corrupt the database."""
    st = path.stat()
    links = st.st_nlink
    if links <= 1:
        return None
    # a creator publishes store.db as a hard link of its temp file and removes the temp a moment later
    with contextlib.suppress(OSError):
        links -= sum(1 for f in path.parent.glob(f".{DB_NAME}.*.init") if f.stat().st_ino == st.st_ino)
    if links <= 1:
        return None
    return (f"{path}: the database file has {links} hard links (a `cp -al` copy?); writing through two names "
            f"corrupts it, so this store opened read-only; make this copy independent with `cp {DB_NAME} "
            f"{DB_NAME}.new && mv {DB_NAME}.new {DB_NAME}` in its folder (with no writer running)")


def _open_error(path: Path, e: sqlite3.OperationalError) -> Exception:
    """The error for an SQLite failure while opening: a full disk, a permission problem, a read-only
    filesystem, an I/O error or a lock are named as such, with their fix; none of them means the store is
    damaged, so none says "restore from a backup". Only what remains (missing tables...) is CorruptStore."""
    msg = str(e)
    low = msg.lower()
    if "full" in low:
        return StoreWriteError(f"{path}: disk full, the store cannot be opened ({msg}); free some space and "
                               f"retry (the store itself is not damaged)")
    if "readonly" in low or "read-only" in low or "unable to open" in low or "permission" in low:
        return StoreWriteError(f"{path}: cannot open the store ({msg}): no permission, or a read-only "
                               f"filesystem; check the permissions of the folder and {DB_NAME} (the store is "
                               f"not damaged)")
    if "disk i/o error" in low:
        return StoreWriteError(f"{path}: I/O error opening the store ({msg}): the disk may be full or failing; "
                               f"free some space or check the disk, then retry (the store is not damaged)")
    if "locked" in low or "busy" in low:
        return StoreBusy(f"{path}: store is locked by another process; retry later")
    return CorruptStore(f"{path}: not a readable crewckpt database ({msg}); restore it from a backup or "
                        f"re-import")


def _remove_dead_inits(folder: Path) -> None:
    """Delete temporary databases left by creators that were killed (their pid no longer runs)."""
    for f in folder.glob(f".{DB_NAME}.*.init*"):
        try:
            pid = int(f.name.split(".")[3])
            os.kill(pid, 0)
        except ProcessLookupError:
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
        except (ValueError, IndexError, PermissionError):
            continue


def _sql_text(v: str) -> str:
    """A string as an SQL literal (for the fixed meta rows written at creation)."""
    return "'" + v.replace("'", "''") + "'"


WAL_AUTOCHECKPOINT_PAGES = 128
"""A writer's connection checkpoints its WAL into the database every this many pages (PAGE_SIZE bytes each)."""

_TRUNCATION_RECHECKS = 20
"""How many times a short file is read again before it is declared truncated (see _check_not_truncated)."""
_RECHECK_PAUSE_S = 0.05
"""Seconds between those reads: 20 x 0.05 s = 1 s, far longer than one WAL checkpoint's file growth."""


def _check_not_truncated(path: Path) -> None:
    """A clean SQLite file is at least as long as its header says (bytes 28..31 = page count,
    16..17 = page size); shorter with no WAL beside it means truncation.

    Another process's WAL checkpoint writes the new page count into page 1 before it has extended the file
    and then empties its WAL, so one look can see a short file with no WAL (a false alarm seen with two
    workers publishing at once). The reads are ordered WAL, then header, then size, and a short file is read
    again (``_TRUNCATION_RECHECKS`` times, ``_RECHECK_PAUSE_S`` apart) until it is whole; only a file that
    stays short is truncated.

    Raises:
        CorruptStore: a bad header, or a file that stays shorter than its header says.
    """
    short = _short_by(path)
    for _ in range(_TRUNCATION_RECHECKS):
        if short is None:
            return
        _settle()
        short = _short_by(path)
    if short is not None:
        size, want = short
        raise CorruptStore(f"{path}: database is truncated ({size} of {want} bytes); restore it from a backup")


def _settle() -> None:
    """Give a racing WAL checkpoint time to finish (a seam for tests)."""
    time.sleep(_RECHECK_PAUSE_S)


def _short_by(path: Path) -> tuple[int, int] | None:
    """``(size, size the header says)`` in bytes when the file is shorter and no WAL is beside it, else None.

    Raises:
        CorruptStore: the file does not start with an SQLite header.
    """
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:  # first: a checkpoint empties the WAL only after growing the file
        return None
    with open(path, "rb") as f:
        head = f.read(100)
        size = os.fstat(f.fileno()).st_size  # after the header, which a checkpoint writes before growing the file
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        raise CorruptStore(f"{path}: not an SQLite database (bad header); the store is damaged")
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    return (size, pages * page) if pages and size < pages * page else None


# -- locations: plain paths and sqlite:PATH (crewckpt.backends.registry) ------------------------------------

DEFAULT_DIR = ".ckpt"
"""The store folder ``ckpt init`` creates and discovery looks for."""


def discover() -> Path:
    """The nearest ``.ckpt`` store folder walking up from the working folder (git's rule).

    Raises:
        StoreNotFound: none found, or a folder on the way cannot be read (one line with the fix).
    """
    from crewckpt.backends.registry import ENV_VAR

    try:
        here = Path.cwd().resolve()
        for d in (here, *here.parents):
            if db_file(d / DEFAULT_DIR):
                return d / DEFAULT_DIR
    except OSError as e:  # e.g. a folder the user may not enter
        raise StoreNotFound(f"{e.filename}: cannot look for a store there ({e.strerror}); check the "
                            f"permissions or pass --store") from None
    if db_file(here):  # `ckpt clone SRC DEST` makes DEST itself the store folder, as `ckpt init DEST` does
        raise StoreNotFound(f"no .ckpt store in {here} or any parent folder, but {here} is itself a store; "
                            f"pass `--store .` or set {ENV_VAR}=.")
    raise StoreNotFound(f"no .ckpt store in {here} or any parent folder; run `ckpt init` or set {ENV_VAR}")


def locate(p: Path) -> Path:
    """The store folder an explicit path names: the folder holding ``store.db``, or its ``.ckpt``.

    Raises:
        StoreNotFound: neither (one line: no such folder / a file / not a store, with the fix).
    """
    try:
        return _locate(p)
    except OSError as e:
        raise StoreNotFound(f"{e.filename or p}: cannot look for a store there ({e.strerror}); check the "
                            f"permissions or pass --store") from None


def _locate(p: Path) -> Path:
    if db_file(p):
        return p
    if db_file(p / DEFAULT_DIR):
        return p / DEFAULT_DIR
    if not p.exists():
        raise StoreNotFound(f"{p}: no such folder; create a store with `ckpt init {p}`")
    if not p.is_dir():
        if is_store_db(p):
            fix = (f"use --store {p.parent} (the folder that holds it)" if p.name == DB_NAME else
                   f"a store is the folder holding it as {DB_NAME}: move it to NEWFOLDER/{DB_NAME} and use "
                   f"--store NEWFOLDER")
            raise StoreNotFound(f"{p}: is a crewckpt store's database file; {fix}")
        raise StoreNotFound(f"{p}: is a file, not a store folder; pass the folder that holds {DB_NAME}")
    raise StoreNotFound(f"{p}: not a crewckpt store (no {DB_NAME}); create one with `ckpt init {p}`")


def db_file(folder: Path) -> bool:
    """True when ``folder/store.db`` is a regular file (a symlink to one counts), False when there is none.
    Only stats it: a FIFO there is never opened (opening one for reading blocks).

    Raises:
        StoreNotFound: something else is there (a FIFO, a folder, a device, a dangling symlink), named, with
        the fix.
    """
    db = folder / DB_NAME
    try:
        st = os.stat(db)
    except FileNotFoundError:
        if not os.path.lexists(db):
            return False
        raise StoreNotFound(f"{db} is not a regular file (a dangling symlink); move it away") from None
    except NotADirectoryError:
        return False
    if stat.S_ISREG(st.st_mode):
        return True
    what = ("a fifo" if stat.S_ISFIFO(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode)
            else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a file")
    raise StoreNotFound(f"{db} is not a regular file ({what}); move it away (a store's {DB_NAME} is an SQLite "
                        f"database file)")


SQLITE_MAGIC = b"SQLite format 3\x00"


def is_sqlite_file(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a regular file starting with SQLite's magic bytes (CrewAI's ``detect_provider``).

    Opened non-blocking and checked with fstat first, so a FIFO or device at ``path`` is never read (a
    FIFO would block the open, ``/dev/zero`` would be read as "not SQLite" only after the fact)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (OSError, ValueError):  # ValueError: NUL in the path
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, 16) == SQLITE_MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


_STORE_TABLES = frozenset({"meta", "objects", "refs", "reflog", "commits"})


def is_store_db(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is an SQLite database file with crewckpt's tables (a store's ``store.db``). Reads
    only the schema, read-only; a FIFO or device is never opened (its magic bytes are checked first)."""
    if not is_sqlite_file(path):
        return False
    try:
        conn = sqlite3.connect(Path(os.path.abspath(path)).as_uri() + "?mode=ro", uri=True)
        try:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            conn.close()
    except (sqlite3.Error, UnicodeDecodeError, OSError):
        return False
    return _STORE_TABLES <= names


def _opened(folder: Path, backend: SqliteBackend) -> Opened:
    return Opened(backend, os.path.abspath(folder), folder)


def _unmake(made: list[Path]) -> None:
    """Remove the folders a failed create made (deepest first), each only while still empty."""
    for folder in made:
        with contextlib.suppress(OSError):
            folder.rmdir()


class SqliteOpener(Opener):
    """Plain paths and ``sqlite:PATH``: a store folder holding ``store.db``. Opening a folder that holds a
    ``.ckpt`` store opens that one (``Store.open("myproject")``)."""

    label = "SQLite"

    def identity(self, loc: Location) -> str:
        """The absolute folder path (``os.path.abspath``: ``..`` collapsed, symlinks kept)."""
        return os.path.abspath(loc.target)

    def open(self, loc: Location) -> Opened:
        folder = locate(Path(loc.target))
        return _opened(folder, SqliteBackend(folder))

    def create(self, loc: Location, meta: Mapping[str, str], *, private: bool) -> Opened:
        """Create the folder (0700 when ``private``, with its parents) and ``store.db`` in it (0600)."""
        p = Path(loc.target)
        exists = f"{p}: a crewckpt store already exists here; open it with Store.open({str(p)!r})"
        if p.is_dir() and db_file(p):  # something else named store.db: db_file names it
            raise StoreExists(exists)
        full = Path(os.path.abspath(p))
        if full.parent == full:  # safety: store.db and its -wal/-shm directly in / (sqlite:/// by mistake)
            raise CkptError(f"{loc.text}: refusing to create a store directly in the filesystem root {full}; "
                            f"give a folder, e.g. {full / DEFAULT_DIR}")
        if p.exists() and not p.is_dir():
            raise CkptError(f"{p}: exists and is not a folder; choose another path")
        above = next((a for a in p.parents if a.exists()), None)  # mkdir would say only "File exists"
        if above is not None and not above.is_dir():
            raise CkptError(f"{p}: cannot create the store: {above} is a file, not a folder; choose another "
                            f"location")
        made = [a for a in (p, *p.parents) if not os.path.lexists(a)]  # removed again if creating fails
        try:
            p.mkdir(parents=True, exist_ok=True, mode=0o700 if private else 0o777)
            # created complete (format version included) and published atomically: see SqliteBackend.create
            backend = SqliteBackend.create(p, dict(meta), mode=0o600 if private else 0o666)
        except FileExistsError:
            raise StoreExists(exists) from None
        except OSError as e:
            _unmake(made)
            raise CkptError(f"{p}: cannot create the store ({e.strerror}); check the path and permissions") from None
        except sqlite3.Error as e:
            _unmake(made)
            raise CkptError(f"{p}: cannot create the store ({e}); check the path and permissions") from None
        except BaseException:
            _unmake(made)
            raise
        return _opened(p, backend)

    def discover(self) -> Location:
        """The nearest ``.ckpt`` store walking up from the working folder (:func:`discover`)."""
        folder = str(discover())
        return Location("sqlite", folder, folder)

    def has_store(self, loc: Location) -> bool:
        """``store.db`` is in the folder itself (no ``.ckpt`` descent: a project folder is not a store)."""
        return bool(loc.target) and os.path.isdir(loc.target) and db_file(Path(loc.target))

    def occupied(self, loc: Location) -> bool:
        return os.path.lexists(loc.target)

    def instance(self, loc: Location) -> Hashable | None:
        """``(st_dev, st_ino)`` of the ``store.db`` the location opens (a ``rm -rf .ckpt`` and a new init
        change it); None when there is none."""
        for db in (os.path.join(loc.target, DB_NAME), os.path.join(loc.target, DEFAULT_DIR, DB_NAME)):
            try:
                st = os.stat(db)
            except OSError:
                continue
            return st.st_dev, st.st_ino
        return None


OPENER = SqliteOpener()

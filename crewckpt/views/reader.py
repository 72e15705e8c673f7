"""Readers of CrewAI 1.15 checkpoint locations: a JSON folder, one JSON file, or an SQLite database.

:func:`open_source` detects the format as CrewAI's ``detect_provider`` does (SQLite magic bytes, else
JSON) and lists the checkpoints without parsing them; :meth:`CrewaiSource.load` parses one, and
:meth:`CrewaiSource.checkpoints` parses each in turn, turning damaged ones into :class:`Problem` entries
instead of errors. No crewai import.

A location someone sent is treated as hostile (docs/invariants.md, "Untrusted checkpoints, folders, dbs and
stores"): only regular files are read, opened non-blocking and without following a final symbolic link (a
FIFO or device named ``*.json`` is skipped, never opened for reading); symbolic links are followed only to
files inside the folder; a checkpoint over :func:`max_checkpoint_bytes` is skipped unread; SQLite is opened
read-only (``mode=ro``, or ``immutable=1`` for a WAL database without a ``-wal`` file) with untrusted
schema code off, temporary storage in memory, a per-value size limit and a step budget per statement
(:data:`SQLITE_STEP_BUDGET`), and ``checkpoints`` must be a plain table (a view could run any query).
Each odd entry becomes a :class:`Problem` with a one-line reason; the rest is read.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from crewckpt.errors import DamagedCheckpoint, SourceError
from crewckpt.views import layout
from crewckpt.views.jsonb import JsonbError, jsonb_to_value, looks_like_jsonb

SourceKind = Literal["json-folder", "json-file", "sqlite"]

MAX_CHECKPOINT_BYTES = 256 * 1024 * 1024
"""Default size limit of one checkpoint (file or ``data`` cell); larger ones are skipped unread. CrewAI's
checkpoints are kilobytes to a few megabytes; ``$CKPT_MAX_CHECKPOINT_BYTES`` raises (or lowers) it."""

SQLITE_STEP_BUDGET = 20_000_000
"""SQLite virtual-machine steps one statement may take, plus one per byte of the database file (a real
table is scanned in far fewer); past it the statement is interrupted and reported, never left running."""


def max_checkpoint_bytes() -> int:
    """The size limit of one checkpoint in bytes: ``$CKPT_MAX_CHECKPOINT_BYTES`` if set to a positive integer,
    else :data:`MAX_CHECKPOINT_BYTES`."""
    raw = os.environ.get("CKPT_MAX_CHECKPOINT_BYTES", "").strip()
    if raw.isdigit() and 0 < len(raw) < 19 and int(raw) > 0:
        return int(raw)
    return MAX_CHECKPOINT_BYTES


def _too_big(size: int | None, limit: int, what: str = "file") -> str:
    """The skip reason for a checkpoint over the size limit (``size`` None: SQLite only said "too big")."""
    how = f"is {size:,} bytes, over" if size is not None else "is over"
    return f"{what} {how} the {limit:,}-byte limit for one checkpoint; not read (set CKPT_MAX_CHECKPOINT_BYTES to import it)"
ProblemKind = Literal["skipped", "orphan", "note"]


@dataclasses.dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """One CrewAI checkpoint as listed, before its data is parsed.

    checkpoint_id: CrewAI id (``<ts>_<8 hex>``); parent_id: the parent id the provider recorded (file name
    or ``parent_id`` column), None for a root; branch: CrewAI branch label; created_at: UTC
    ``YYYYmmddTHHMMSS``; source: file path or ``<db>#<id>``; size: stored bytes of the data.
    """

    checkpoint_id: str
    parent_id: str | None
    branch: str
    created_at: str
    source: str
    size: int
    _key: Any = dataclasses.field(default=None, compare=False, repr=False)  # path or rowid


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint:
    """A parsed checkpoint: its record, the exact JSON value (key order kept) and, where the source stores
    text rather than JSONB, that text (to tell CrewAI's writer style)."""

    record: CheckpointRecord
    value: dict[str, Any]
    text: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    """Something in a source that was skipped (``skipped``), imported without its parent (``orphan``) or
    is worth knowing (``note``); ``reason`` is one line."""

    source: str
    checkpoint_id: str | None
    kind: ProblemKind
    reason: str

    def __str__(self) -> str:
        who = self.checkpoint_id or self.source
        if not who.isprintable():  # ids come from hostile files too: keep the report one line per problem
            who = repr(who)
        return f"{self.kind}: {who}: {' '.join(self.reason.split())}"


def detect_kind(path: str | Path) -> SourceKind:
    """``sqlite`` for a file with SQLite's magic bytes (or ``<db>#<id>``), ``json-folder`` for a directory,
    else ``json-file``. Raises SourceError when nothing is at ``path``."""
    db, _ = layout.split_location(str(path))
    if layout.is_sqlite_file(db):
        return "sqlite"
    p = Path(path)
    if p.is_dir():
        return "json-folder"
    if p.is_file():
        return "json-file"
    if p.exists():
        raise SourceError(f"{path}: not a regular file or folder (a FIFO, socket or device); pass a CrewAI "
                          f"checkpoint folder, .json file or SQLite db")
    raise SourceError(f"{path}: no such file or folder; pass a CrewAI checkpoint folder, .json file or SQLite db")


def open_source(path: str | Path, *, max_bytes: int | None = None) -> CrewaiSource:
    """Open a CrewAI checkpoint location for reading; checkpoints over ``max_bytes`` (default
    :func:`max_checkpoint_bytes`) are skipped unread. Raises SourceError (see :func:`detect_kind`)."""
    kind = detect_kind(path)
    if kind == "sqlite":
        return SqliteSource(str(path), max_bytes=max_bytes)
    if kind == "json-folder":
        return JsonFolderSource(Path(path), max_bytes=max_bytes)
    return JsonFileSource(Path(path), max_bytes=max_bytes)


class CrewaiSource:
    """A listed CrewAI location. ``records`` in listing order; ``problems`` found so far (listing and
    loading). Use as a context manager or call :meth:`close`."""

    kind: SourceKind

    def __init__(self, path: str, max_bytes: int | None = None) -> None:
        self.path = path
        self.max_bytes = max_bytes if max_bytes is not None else max_checkpoint_bytes()
        self.records: list[CheckpointRecord] = []
        self.problems: list[Problem] = []

    def load(self, record: CheckpointRecord) -> Checkpoint:
        """Parse one checkpoint. Raises DamagedCheckpoint with a one-line reason (also for a checkpoint too
        large to parse in memory)."""
        try:
            value, text = self._load(record)
        except MemoryError:
            raise DamagedCheckpoint(f"too large to parse in memory ({record.size:,} bytes stored)") from None
        if not isinstance(value, dict):
            raise DamagedCheckpoint(f"data is a JSON {type(value).__name__}, not an object")
        why = _not_runtime_state(value)
        if why:
            raise DamagedCheckpoint(f"not a CrewAI checkpoint: {why}")
        return Checkpoint(record, value, text)

    def checkpoints(self) -> Iterator[Checkpoint]:
        """Parse every record in listing order; damaged ones are added to ``problems`` and skipped."""
        for record in self.records:
            try:
                yield self.load(record)
            except DamagedCheckpoint as exc:
                self.problems.append(Problem(record.source, record.checkpoint_id, "skipped", str(exc)))

    def _load(self, record: CheckpointRecord) -> tuple[Any, str | None]:
        raise NotImplementedError

    def close(self) -> None:
        """Release the source (the SQLite connection)."""

    def __enter__(self) -> CrewaiSource:  # noqa: PYI034 - Python 3.10 has no typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _not_runtime_state(value: dict[str, Any]) -> str | None:
    """Why ``value`` cannot be CrewAI's RuntimeState (its ``entities`` list of typed entities and its
    ``event_record`` object), or None."""
    ents = value.get("entities")
    if not isinstance(ents, list) or not all(isinstance(e, dict) and isinstance(e.get("entity_type"), str)
                                              for e in ents):
        return "'entities' must be a list of objects with an 'entity_type'"
    if "event_record" in value and not isinstance(value["event_record"], dict):
        return "'event_record' must be an object"
    return None


def _parse_text(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:  # CrewAI's own json.dumps cannot write this either
        raise DamagedCheckpoint("JSON nested too deeply for Python's json module") from None
    except json.JSONDecodeError as exc:
        end = text.rstrip()
        if not end.lstrip().startswith(("{", "[")):  # text that never was JSON is not "truncated"
            first = end.lstrip()[:1]
            raise DamagedCheckpoint(f"not JSON (it starts with {first!r}, a CrewAI checkpoint starts with '{{'), nor "
                                    f"an SQLite database" if first else "an empty file, not a checkpoint") from None
        cut = exc.pos >= len(end) or exc.msg.startswith("Unterminated string") or not end.endswith(("}", "]"))
        why = "truncated JSON" if cut else "invalid JSON"
        raise DamagedCheckpoint(f"{why}: {exc.msg.removesuffix(' at')} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:  # int() refusing a number of more than sys.get_int_max_str_digits() digits
        why = " ".join(str(exc).split()).split(":")[0][:120]  # "Exceeds the limit (4300 digits) for ..."
        raise DamagedCheckpoint(f"holds a number Python's json module (so CrewAI too) cannot read ({why})") from None


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def _not_regular(mode: int) -> str | None:
    """Why a file of this ``st_mode`` is not read ("not a regular file (a FIFO); not read"), or None."""
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a file")
    return f"not a regular file ({kind}); not read"


def _read_file(path: Path, limit: int) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes. Opened non-blocking and without
    following a final symbolic link, then checked with fstat, so a file swapped for a FIFO, device or link
    after listing is refused, not read. Raises DamagedCheckpoint."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DamagedCheckpoint("is a symbolic link; not followed") from None
        raise DamagedCheckpoint(f"cannot read file: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        why = _not_regular(st.st_mode)
        if why:
            raise DamagedCheckpoint(why)
        if st.st_size > limit:
            raise DamagedCheckpoint(_too_big(st.st_size, limit))
        chunks: list[bytes] = []
        got = 0
        while got <= limit:  # read at most limit + 1 bytes: a file growing under us is refused, not slurped
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise DamagedCheckpoint(_too_big(got, limit) + " (it grew while being read)")
        return b"".join(chunks).decode("utf-8")
    except OSError as exc:
        raise DamagedCheckpoint(f"cannot read file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise DamagedCheckpoint(f"not UTF-8 text (byte {exc.start})") from None
    finally:
        os.close(fd)


def _created_at(checkpoint_id: str, mtime: float) -> str:
    ts = layout.timestamp_of(checkpoint_id)
    if ts:
        return ts
    try:
        return time.strftime(layout.TS_FORMAT, time.gmtime(mtime))
    except (OSError, OverflowError, ValueError):  # an mtime set far outside time_t / 4-digit years
        return "19700101T000000"


def _is_utf8(text: str) -> bool:
    """False for a name holding lone surrogates (os.fsdecode's escapes of non-UTF-8 bytes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class JsonFolderSource(CrewaiSource):
    """``<location>/<branch>/<id>_p-<parent>.json`` files, branch folders nested (``fork/...``).

    Hidden files and folders are skipped, as CrewAI's ``glob("**/*.json")`` does. A folder that holds
    checkpoint files itself is read as one branch folder (its name, or the branch recorded in the data
    when the folder path ends with it, e.g. ``.../fork/abc``).

    Hostile entries are skipped with a reason (see the module docstring): anything but a regular file,
    symbolic links to anything outside the folder (and broken or looping ones), symbolically linked
    folders, names that are not UTF-8, files over ``max_bytes``. The walk is iterative (any depth).
    """

    kind: SourceKind = "json-folder"

    def __init__(self, root: Path, max_bytes: int | None = None) -> None:
        super().__init__(str(root), max_bytes)
        self.root = root
        self._real_root = root.resolve()
        stack: list[tuple[Path, str | None]] = [(root, None)]
        while stack:
            folder, rel = stack.pop()
            subfolders: list[tuple[Path, str | None]] = []
            try:
                with os.scandir(folder) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as exc:
                self.problems.append(Problem(str(folder), None, "skipped",
                                             f"cannot list folder: {exc.strerror or exc}"))
                continue
            for entry in entries:
                name = entry.name
                if name.startswith("."):
                    continue
                path = Path(entry.path)
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    is_link = entry.is_symlink()
                except OSError:
                    is_dir = is_link = False
                if is_dir:
                    if not _is_utf8(name):
                        self._skip(path, None, "folder name is not valid UTF-8; rename it to import what it holds")
                    else:
                        subfolders.append((path, name if rel is None else f"{rel}/{name}"))
                elif name.endswith(".json"):
                    self._add(path, rel, is_link)
                elif is_link and path.is_dir():
                    self._skip(path, None, "symbolic link to a folder; not followed (import its target itself)")
            stack.extend(reversed(subfolders))  # depth-first, sorted: the order os.walk gave

    def _skip(self, path: Path, checkpoint_id: str | None, reason: str) -> None:
        self.problems.append(Problem(str(path), checkpoint_id, "skipped", reason))

    def _target(self, path: Path, is_link: bool, confine: bool) -> tuple[Path, os.stat_result] | None:
        """The regular file to read for ``path`` (a symbolic link resolved, inside the folder when
        ``confine``) and its lstat, or None after recording why it is skipped."""
        parsed = layout.parse_filename(path.name)
        cid = parsed[0] if parsed else None
        if not _is_utf8(path.name):
            self._skip(path, None, "file name is not valid UTF-8 (CrewAI names checkpoints in ASCII); rename it")
            return None
        key = path
        if is_link:
            try:
                key = path.resolve(strict=True)
            except (OSError, RuntimeError) as exc:  # RuntimeError: a link loop on Python < 3.13
                self._skip(path, cid, f"broken symbolic link ({getattr(exc, 'strerror', None) or exc}); not followed")
                return None
            if confine and self._real_root not in key.parents:
                self._skip(path, cid, f"symbolic link to {key}, outside {self.root}; not followed")
                return None
        try:
            st = os.lstat(key)
        except OSError as exc:
            self._skip(path, cid, f"cannot read file: {exc.strerror or exc}")
            return None
        why = _not_regular(st.st_mode) or (_too_big(st.st_size, self.max_bytes) if st.st_size > self.max_bytes
                                           else None)
        if why:
            self._skip(path, cid, why)
            return None
        return key, st

    def _add(self, path: Path, branch: str | None, is_link: bool = False, confine: bool = True) -> None:
        found = self._target(path, is_link, confine)
        if found is None:
            return
        key, st = found
        parsed = layout.parse_filename(path.name)
        data: dict[str, Any] = {}
        if parsed is None or branch is None:
            try:
                loaded = _parse_text(_read_file(key, self.max_bytes))
                data = loaded if isinstance(loaded, dict) else {}
            except MemoryError:
                self._skip(path, None, f"too large to parse in memory ({st.st_size:,} bytes)")
                return
            except DamagedCheckpoint as exc:
                if parsed is None:  # no name to go by: not recognisably a checkpoint
                    self._skip(path, None, str(exc))
                    return
        if parsed is None:
            if "entities" not in data:
                self._skip(path, None, "not a CrewAI checkpoint (no 'entities')")
                return
            pid = data.get("parent_id")
            parsed = (path.stem, pid if isinstance(pid, str) and _is_utf8(pid) else None)
        if branch is None:
            branch = self._branch_of_top_folder(data.get("branch"))
        cid, parent = parsed
        self.records.append(CheckpointRecord(cid, parent, branch, _created_at(cid, st.st_mtime), str(path),
                                             st.st_size, key))

    def _branch_of_top_folder(self, recorded: Any) -> str:
        resolved = self._real_root.as_posix()
        if isinstance(recorded, str) and layout.branch_is_safe(recorded) and resolved.endswith("/" + recorded):
            return recorded
        return self._real_root.name or "main"

    def _load(self, record: CheckpointRecord) -> tuple[Any, str | None]:
        text = _read_file(record._key, self.max_bytes)
        return _parse_text(text), text


class JsonFileSource(JsonFolderSource):
    """One checkpoint file; its branch is the one recorded in its data (else its folder's name). The path was
    named by the user: a symbolic link there is followed (to a regular file only)."""

    kind: SourceKind = "json-file"

    def __init__(self, path: Path, max_bytes: int | None = None) -> None:
        CrewaiSource.__init__(self, str(path), max_bytes)
        self.root = path.parent
        self._real_root = self.root.resolve()
        self._add(path, None, is_link=path.is_symlink(), confine=False)


class SqliteSource(CrewaiSource):
    """CrewAI's ``checkpoints`` table; ``data`` as JSONB (decoded without SQLite >= 3.45) or text.

    ``<db>#<id>`` reads that one row. Listing is in rowid order (CrewAI's write order). The database is
    opened read-only and bounded (see the module docstring and :func:`_connect_readonly`): ``checkpoints``
    must be a table without generated columns, each statement has a step budget, values over ``max_bytes``
    are refused by SQLite itself.
    """

    kind: SourceKind = "sqlite"

    def __init__(self, path: str, max_bytes: int | None = None) -> None:
        db, only_id = layout.split_location(path)
        super().__init__(db, max_bytes)
        self.conn, self._steps = _connect_readonly(db, self.max_bytes)
        try:
            self._check_table(db)
            rows = self._list(db, only_id)
        except SourceError:
            self.conn.close()
            raise
        except (sqlite3.DatabaseError, MemoryError) as exc:
            self.conn.close()
            raise SourceError(f"{db}: cannot read SQLite database: {self._why(exc)}") from None
        if only_id is not None and not rows:
            self.conn.close()
            raise SourceError(f"{db}: no checkpoint with id {only_id!r}")
        for rowid, cid, created, parent, branch, size in rows:
            self._add_row(db, rowid, cid, created, parent, branch, size)

    def _why(self, exc: BaseException) -> str:
        """One line for an SQLite failure; names the step budget when it interrupted the statement."""
        if self._steps.tripped:
            return (f"gave up after {self._steps.limit:,} SQLite steps in one statement (a hostile or damaged "
                    f"database; CrewAI's table is read in far fewer)")
        if isinstance(exc, MemoryError):
            return "out of memory"
        return " ".join(str(exc).split()) or type(exc).__name__

    def _run(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        self._steps.reset()
        try:
            return self.conn.execute(sql, args).fetchall()
        except UnicodeDecodeError:  # a damaged page can make SQLite's own error message invalid UTF-8
            raise sqlite3.DatabaseError("database disk image is malformed (SQLite's message is not UTF-8)") from None

    def _check_table(self, db: str) -> None:
        """Refuse anything but a plain table named ``checkpoints`` with CrewAI's five stored columns: a view
        (or a generated column) could run any query, e.g. an endless recursive CTE."""
        found = self._run("SELECT type, sql FROM sqlite_master WHERE name = 'checkpoints' COLLATE NOCASE")
        if not found:
            raise SourceError(f"{db}: SQLite database without a 'checkpoints' table; not a CrewAI checkpoint db")
        kind, sql = found[0]
        if kind != "table" or (isinstance(sql, str) and sql.lstrip()[:21].upper().startswith("CREATE VIRTUAL")):
            raise SourceError(f"{db}: 'checkpoints' is {'a virtual table' if kind == 'table' else 'a ' + str(kind)}, "
                              f"not CrewAI's table; not read")
        cols = {r[1]: r[6] for r in self._run("PRAGMA table_xinfo(checkpoints)")}
        missing = [c for c in layout.TABLE_COLUMNS if c not in cols]
        if missing:
            raise SourceError(f"{db}: 'checkpoints' table lacks column(s) {', '.join(missing)}; not CrewAI's layout")
        computed = [c for c in layout.TABLE_COLUMNS if cols[c]]
        if computed:
            raise SourceError(f"{db}: 'checkpoints' column(s) {', '.join(computed)} are computed, not stored; "
                              f"not CrewAI's table; not read")

    def _list(self, db: str, only_id: str | None) -> list[tuple[Any, ...]]:
        """(rowid, id, created_at, parent_id, branch, size) rows in rowid order. A cell over the size limit
        makes SQLite refuse the whole statement, so then rows are listed one by one and such rows skipped."""
        where, args = (" WHERE id = ?", (only_id,)) if only_id is not None else ("", ())
        query = "SELECT rowid, id, created_at, parent_id, branch, length(data) FROM checkpoints"
        try:
            return self._run(query + where + " ORDER BY rowid", args)
        except sqlite3.DataError:
            pass
        rows = []
        for (rowid,) in self._run("SELECT rowid FROM checkpoints" + where + " ORDER BY rowid", args):
            try:
                rows += self._run(query + " WHERE rowid = ?", (rowid,))
            except sqlite3.DataError:
                self.problems.append(Problem(f"{db} rowid {rowid}", None, "skipped",
                                             _too_big(None, self.max_bytes, "a cell of the row")))
        return rows

    def _add_row(self, db: str, rowid: int, cid: Any, created: Any, parent: Any, branch: Any, size: Any) -> None:
        where = f"{db}#{cid}" if isinstance(cid, str) else f"{db} rowid {rowid}"
        if not isinstance(cid, str) or not cid:
            self.problems.append(Problem(where, None, "skipped", f"row has no text id ({_short(cid)})"))
            return
        if parent is not None and not isinstance(parent, str):
            self.problems.append(Problem(where, cid, "skipped", f"parent_id is not text ({_short(parent)})"))
            return
        if isinstance(size, int) and size > self.max_bytes:
            self.problems.append(Problem(where, cid, "skipped", _too_big(size, self.max_bytes, "data")))
            return
        if not isinstance(branch, str) or not branch:
            self.problems.append(Problem(where, cid, "note", f"branch {_short(branch)} is not a name; read as 'main'"))
            branch = "main"
        ts = layout.timestamp_of(cid) or (created if isinstance(created, str) else None) or "19700101T000000"
        self.records.append(CheckpointRecord(cid, parent or None, branch, ts, where,
                                             size if isinstance(size, int) else 0, rowid))

    def _load(self, record: CheckpointRecord) -> tuple[Any, str | None]:
        try:
            row = self._run("SELECT typeof(data), data FROM checkpoints WHERE rowid = ?", (record._key,))
        except sqlite3.DataError:
            raise DamagedCheckpoint(_too_big(None, self.max_bytes, "data")) from None
        except (sqlite3.DatabaseError, MemoryError) as exc:
            raise DamagedCheckpoint(f"cannot read row: {self._why(exc)}") from None
        if not row:
            raise DamagedCheckpoint("row vanished while reading")
        sql_type, data = row[0]
        if isinstance(data, str):
            return _parse_text(data), data
        if isinstance(data, bytes):
            if sql_type == "text":  # the text factory hands back bytes that are not UTF-8
                raise DamagedCheckpoint("data is text that is not valid UTF-8")
            return _decode_blob(data)
        raise DamagedCheckpoint(f"data is SQL {type(data).__name__}, not JSON text or JSONB")

    def close(self) -> None:
        self.conn.close()


def _short(value: Any) -> str:
    """A cell for a one-line reason: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _decode_blob(blob: bytes) -> tuple[Any, str | None]:
    """JSONB, or JSON text stored as a BLOB."""
    try:
        return jsonb_to_value(blob), None
    except JsonbError as exc:
        if not looks_like_jsonb(blob):
            try:
                text = blob.decode("utf-8")
                return json.loads(text), text
            except (UnicodeDecodeError, ValueError, RecursionError):
                pass
        raise DamagedCheckpoint(f"invalid JSONB data: {exc.reason} (byte {exc.offset})") from None


class _StepBudget:
    """SQLite progress handler: interrupts a statement after ``limit`` virtual-machine steps (counted in
    units of :data:`_STEP_UNIT`). Deterministic: the same database and query always stop at the same step."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.calls = 0
        self.tripped = False

    def reset(self) -> None:
        self.calls = 0
        self.tripped = False

    def __call__(self) -> int:
        self.calls += 1
        if self.calls * _STEP_UNIT > self.limit:
            self.tripped = True
            return 1
        return 0


_STEP_UNIT = 1000


def _text_or_bytes(raw: bytes) -> str | bytes:
    """SQLite text as str, or the raw bytes when it is not UTF-8 (so one bad cell skips one row, instead of
    sqlite3 failing the whole listing)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _connect_readonly(db: str, max_bytes: int) -> tuple[sqlite3.Connection, _StepBudget]:
    """Open ``db`` for reading only, bounded, and its step budget.

    ``mode=ro``; ``immutable=1`` instead for a WAL database without a ``-wal`` file (everything is in the
    main file, and no ``-shm``/``-wal`` is left in the sender's folder), and as the fallback where ``mode=ro``
    cannot open (a WAL db in a read-only folder). Then: ``trusted_schema=OFF`` (no functions with side
    effects from the schema), ``temp_store=MEMORY`` (nothing written to /var/tmp), a small page cache, no
    mmap, values over ``max_bytes`` refused by SQLite (Python >= 3.11), and a progress handler giving each
    statement :data:`SQLITE_STEP_BUDGET` steps plus one per byte of the file.
    """
    uri = Path(db).resolve().as_uri()
    try:
        size = os.stat(db).st_size
    except OSError as exc:
        raise SourceError(f"{db}: cannot open SQLite database: {exc.strerror or exc}") from None
    modes = ("immutable=1", "mode=ro") if _wal_without_log(db) else ("mode=ro", "immutable=1")
    steps = _StepBudget(SQLITE_STEP_BUDGET + size)
    last: Exception | None = None
    for mode in modes:
        conn = sqlite3.connect(f"{uri}?{mode}", uri=True, timeout=30)
        conn.text_factory = _text_or_bytes
        conn.set_progress_handler(steps, _STEP_UNIT)
        if hasattr(conn, "setlimit"):
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH,  # type: ignore[attr-defined]  # 3.11+, guarded
                          max(1, min(max_bytes, 1_000_000_000)))
        try:
            for pragma in ("trusted_schema=OFF", "temp_store=MEMORY", "cache_size=-8192", "mmap_size=0",
                           "query_only=ON"):
                steps.reset()
                conn.execute(f"PRAGMA {pragma}")
            steps.reset()
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            return conn, steps
        except sqlite3.OperationalError as exc:
            conn.close()
            if steps.tripped:
                raise SourceError(f"{db}: cannot read SQLite database: gave up after {steps.limit:,} steps "
                                  f"reading its schema (a hostile or damaged database)") from None
            last = exc
        except UnicodeDecodeError:  # a damaged page can make SQLite's own error message invalid UTF-8
            conn.close()
            raise SourceError(f"{db}: cannot read SQLite database: database disk image is malformed") from None
        except (sqlite3.DatabaseError, MemoryError) as exc:
            conn.close()
            raise SourceError(f"{db}: cannot read SQLite database: {exc or 'out of memory'}") from None
    raise SourceError(f"{db}: cannot open SQLite database: {last}")


def _wal_without_log(db: str) -> bool:
    """True for a database in WAL mode (header bytes 18-19 are 2) that has no ``-wal`` file: its whole
    content is in the main file, so reading it as immutable is exact."""
    try:
        with open(db, "rb") as f:
            header = f.read(20)
    except OSError:
        return False
    return header[18:20] == b"\x02\x02" and not os.path.lexists(db + "-wal")


def orphans(records: list[CheckpointRecord]) -> list[CheckpointRecord]:
    """Records whose recorded parent is not among ``records`` (missing, pruned, or never written)."""
    ids = {r.checkpoint_id for r in records}
    return [r for r in records if r.parent_id is not None and r.parent_id not in ids]

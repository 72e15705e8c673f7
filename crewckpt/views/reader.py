"""Readers of CrewAI 1.15 checkpoint locations: a JSON folder, one JSON file, or an SQLite database.

:func:`open_source` detects the format as CrewAI's ``detect_provider`` does (SQLite magic bytes, else
JSON) and lists the checkpoints without parsing them; :meth:`CrewaiSource.load` parses one, and
:meth:`CrewaiSource.checkpoints` parses each in turn, turning damaged ones into :class:`Problem` entries
instead of errors. No crewai import.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from crewckpt.errors import CkptError
from crewckpt.views import layout
from crewckpt.views.jsonb import JsonbError, jsonb_to_value, looks_like_jsonb

SourceKind = Literal["json-folder", "json-file", "sqlite"]
ProblemKind = Literal["skipped", "orphan", "note"]


class SourceError(CkptError):
    """A path is not a readable CrewAI checkpoint location (missing, unreadable, not CrewAI's table)."""


class DamagedCheckpoint(CkptError):
    """One checkpoint in a source cannot be read (truncated or invalid JSON/JSONB, not an object)."""


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
    raise SourceError(f"{path}: no such file or folder; pass a CrewAI checkpoint folder, .json file or SQLite db")


def open_source(path: str | Path) -> CrewaiSource:
    """Open a CrewAI checkpoint location for reading. Raises SourceError (see :func:`detect_kind`)."""
    kind = detect_kind(path)
    if kind == "sqlite":
        return SqliteSource(str(path))
    if kind == "json-folder":
        return JsonFolderSource(Path(path))
    return JsonFileSource(Path(path))


class CrewaiSource:
    """A listed CrewAI location. ``records`` in listing order; ``problems`` found so far (listing and
    loading). Use as a context manager or call :meth:`close`."""

    kind: SourceKind

    def __init__(self, path: str) -> None:
        self.path = path
        self.records: list[CheckpointRecord] = []
        self.problems: list[Problem] = []

    def load(self, record: CheckpointRecord) -> Checkpoint:
        """Parse one checkpoint. Raises DamagedCheckpoint with a one-line reason."""
        value, text = self._load(record)
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
        cut = exc.pos >= len(end) or exc.msg.startswith("Unterminated string") or not end.endswith(("}", "]"))
        why = "truncated JSON" if cut else "invalid JSON"
        raise DamagedCheckpoint(f"{why}: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


def _read_file(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise DamagedCheckpoint(f"cannot read file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise DamagedCheckpoint(f"not UTF-8 text (byte {exc.start})") from None


def _created_at(checkpoint_id: str, path: Path) -> str:
    ts = layout.timestamp_of(checkpoint_id)
    if ts:
        return ts
    try:
        return time.strftime(layout.TS_FORMAT, time.gmtime(path.stat().st_mtime))
    except OSError:
        return "19700101T000000"


class JsonFolderSource(CrewaiSource):
    """``<location>/<branch>/<id>_p-<parent>.json`` files, branch folders nested (``fork/...``).

    Hidden files and folders are skipped, as CrewAI's ``glob("**/*.json")`` does. A folder that holds
    checkpoint files itself is read as one branch folder (its name, or the branch recorded in the data
    when the folder path ends with it, e.g. ``.../fork/abc``).
    """

    kind: SourceKind = "json-folder"

    def __init__(self, root: Path) -> None:
        super().__init__(str(root))
        self.root = root
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            rel = Path(dirpath).relative_to(root).as_posix()
            for name in sorted(filenames):
                if name.endswith(".json") and not name.startswith("."):
                    self._add(Path(dirpath) / name, None if rel == "." else rel)

    def _add(self, path: Path, branch: str | None) -> None:
        parsed = layout.parse_filename(path.name)
        data: dict[str, Any] = {}
        if parsed is None or branch is None:
            try:
                loaded = _parse_text(_read_file(path))
                data = loaded if isinstance(loaded, dict) else {}
            except DamagedCheckpoint as exc:
                if parsed is None:  # no name to go by: not recognisably a checkpoint
                    self.problems.append(Problem(str(path), None, "skipped", str(exc)))
                    return
        if parsed is None:
            if "entities" not in data:
                self.problems.append(Problem(str(path), None, "skipped", "not a CrewAI checkpoint (no 'entities')"))
                return
            pid = data.get("parent_id")
            parsed = (path.stem, pid if isinstance(pid, str) else None)
        if branch is None:
            branch = self._branch_of_top_folder(data.get("branch"))
        cid, parent = parsed
        size = path.stat().st_size
        self.records.append(CheckpointRecord(cid, parent, branch, _created_at(cid, path), str(path), size, path))

    def _branch_of_top_folder(self, recorded: Any) -> str:
        resolved = self.root.resolve().as_posix()
        if isinstance(recorded, str) and layout.branch_is_safe(recorded) and resolved.endswith("/" + recorded):
            return recorded
        return self.root.resolve().name or "main"

    def _load(self, record: CheckpointRecord) -> tuple[Any, str | None]:
        text = _read_file(record._key)
        return _parse_text(text), text


class JsonFileSource(JsonFolderSource):
    """One checkpoint file; its branch is the one recorded in its data (else its folder's name)."""

    kind: SourceKind = "json-file"

    def __init__(self, path: Path) -> None:
        CrewaiSource.__init__(self, str(path))
        self.root = path.parent
        self._add(path, None)


class SqliteSource(CrewaiSource):
    """CrewAI's ``checkpoints`` table; ``data`` as JSONB (decoded without SQLite >= 3.45) or text.

    ``<db>#<id>`` reads that one row. Listing is in rowid order (CrewAI's write order). The database is
    opened read-only.
    """

    kind: SourceKind = "sqlite"

    def __init__(self, path: str) -> None:
        db, only_id = layout.split_location(path)
        super().__init__(db)
        self.conn = _connect_readonly(db)
        try:
            cols = [r[1] for r in self.conn.execute("PRAGMA table_info(checkpoints)")]
            if not cols:
                raise SourceError(f"{db}: SQLite database without a 'checkpoints' table; not a CrewAI checkpoint db")
            missing = [c for c in layout.TABLE_COLUMNS if c not in cols]
            if missing:
                raise SourceError(f"{db}: 'checkpoints' table lacks column(s) {', '.join(missing)}; not CrewAI's layout")
            query = "SELECT rowid, id, created_at, parent_id, branch, length(data) FROM checkpoints"
            args: tuple[Any, ...] = ()
            if only_id is not None:
                query += " WHERE id = ?"
                args = (only_id,)
            rows = self.conn.execute(query + " ORDER BY rowid", args).fetchall()
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise SourceError(f"{db}: cannot read SQLite database: {exc}") from None
        except SourceError:
            self.conn.close()
            raise
        if only_id is not None and not rows:
            self.conn.close()
            raise SourceError(f"{db}: no checkpoint with id {only_id!r}")
        for rowid, cid, created, parent, branch, size in rows:
            self._add_row(db, rowid, cid, created, parent, branch, size)

    def _add_row(self, db: str, rowid: int, cid: Any, created: Any, parent: Any, branch: Any, size: Any) -> None:
        where = f"{db}#{cid}" if isinstance(cid, str) else f"{db} rowid {rowid}"
        if not isinstance(cid, str) or not cid:
            self.problems.append(Problem(where, None, "skipped", f"row has no text id ({cid!r})"))
            return
        if parent is not None and not isinstance(parent, str):
            self.problems.append(Problem(where, cid, "skipped", f"parent_id is not text ({parent!r})"))
            return
        if not isinstance(branch, str) or not branch:
            self.problems.append(Problem(where, cid, "note", f"branch {branch!r} is not a name; read as 'main'"))
            branch = "main"
        ts = layout.timestamp_of(cid) or (created if isinstance(created, str) else None) or "19700101T000000"
        self.records.append(CheckpointRecord(cid, parent or None, branch, ts, where, int(size or 0), rowid))

    def _load(self, record: CheckpointRecord) -> tuple[Any, str | None]:
        try:
            row = self.conn.execute("SELECT data FROM checkpoints WHERE rowid = ?", (record._key,)).fetchone()
        except sqlite3.DatabaseError as exc:
            raise DamagedCheckpoint(f"cannot read row: {exc}") from None
        if row is None:
            raise DamagedCheckpoint("row vanished while reading")
        data = row[0]
        if isinstance(data, str):
            return _parse_text(data), data
        if isinstance(data, bytes):
            return _decode_blob(data)
        raise DamagedCheckpoint(f"data is SQL {type(data).__name__}, not JSON text or JSONB")

    def close(self) -> None:
        self.conn.close()


def _decode_blob(blob: bytes) -> tuple[Any, str | None]:
    """JSONB, or JSON text stored as a BLOB."""
    try:
        return jsonb_to_value(blob), None
    except JsonbError as exc:
        if not looks_like_jsonb(blob):
            try:
                text = blob.decode("utf-8")
                return json.loads(text), text
            except (UnicodeDecodeError, json.JSONDecodeError):
                pass
        raise DamagedCheckpoint(f"invalid JSONB data: {exc.reason} (byte {exc.offset})") from None


def _connect_readonly(db: str) -> sqlite3.Connection:
    """Open for reading only. A writable file is opened read-write (only SELECTs are run) so that closing
    tidies the -wal/-shm files as CrewAI's own readers do; else read-only; else, for a WAL db in a
    read-only folder (no -shm can be made), as an immutable file."""
    uri = Path(db).resolve().as_uri()
    modes = ("mode=rw", "mode=ro", "immutable=1") if os.access(db, os.W_OK) else ("mode=ro", "immutable=1")
    last: Exception | None = None
    for mode in modes:
        try:
            conn = sqlite3.connect(f"{uri}?{mode}", uri=True, timeout=30)
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            return conn
        except sqlite3.OperationalError as exc:
            last = exc
        except sqlite3.DatabaseError as exc:
            raise SourceError(f"{db}: cannot read SQLite database: {exc}") from None
    raise SourceError(f"{db}: cannot open SQLite database: {last}")

def orphans(records: list[CheckpointRecord]) -> list[CheckpointRecord]:
    """Records whose recorded parent is not among ``records`` (missing, pruned, or never written)."""
    ids = {r.checkpoint_id for r in records}
    return [r for r in records if r.parent_id is not None and r.parent_id not in ids]

"""Writers of CrewAI 1.15's layouts: a JSON folder and an SQLite database (no crewai import).

What real CrewAI reads back (checked against crewai 1.15.30's source and tests):

* JSON: ``<location>/<branch>/<id>_p-<parent or none>.json`` holding the checkpoint text. CrewAI's
  ``checkpoint list/info`` order files by mtime, so each file's mtime is set to the commit time (made
  strictly increasing in write order): "latest" is the branch tip. Files are written atomically
  (a hidden temporary file, then rename), which CrewAI itself does not do.
* SQLite: CrewAI's exact ``CREATE TABLE`` (``data JSONB``), WAL journal, rows inserted in write order
  (CrewAI lists ``ORDER BY rowid``). ``data`` is stored as JSON *text*: SQLite < 3.45 (and any other
  reader) can read it, and CrewAI's ``SELECT json(data)`` returns it on every SQLite version.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
import sqlite3
from pathlib import Path

from crewckpt.errors import ViewWriteError
from crewckpt.views import layout
from crewckpt.views.jsonb import JsonbError, jsonb_to_value


@dataclasses.dataclass(frozen=True, slots=True)
class ViewEntry:
    """One checkpoint to write: CrewAI id, recorded parent id, branch, JSON text, created_at
    (``YYYYmmddTHHMMSS``) and the mtime to give a JSON file (ns since the epoch, or None for now)."""

    checkpoint_id: str
    parent_id: str | None
    branch: str
    text: str
    created_at: str
    mtime_ns: int | None = None


@dataclasses.dataclass(slots=True)
class WriteOutcome:
    """What a write did: ``written`` new checkpoints, ``present`` already there with the same content,
    ``conflicts`` already there with other content (left untouched), as location strings."""

    written: list[str] = dataclasses.field(default_factory=list)
    present: list[str] = dataclasses.field(default_factory=list)
    conflicts: list[str] = dataclasses.field(default_factory=list)

    def merge(self, other: WriteOutcome) -> None:
        self.written += other.written
        self.present += other.present
        self.conflicts += other.conflicts

_UNSAFE_NAME = re.compile("[/\\\\\x00-\x1f\x7f-\x9f]")  # separators and control characters


class JsonFolderWriter:
    """Writes checkpoints under ``location`` in CrewAI's JSON folder layout."""

    def __init__(self, location: str | Path) -> None:
        self.location = Path(location)
        self._names: dict[Path, dict[str, str]] = {}  # folder -> checkpoint id -> its file name there

    def _existing(self, path: Path, checkpoint_id: str) -> Path | None:
        """The file already holding ``checkpoint_id`` in ``path``'s folder under any parent suffix (CrewAI
        finds a checkpoint by id, so one id must be one file), or None. Listed once per folder."""
        names = self._names.get(path.parent)
        if names is None:
            names = {}
            with contextlib.suppress(OSError):
                for p in path.parent.iterdir():
                    parsed = layout.parse_filename(p.name) if p.name.endswith(".json") else None
                    if parsed is not None:
                        names.setdefault(parsed[0], p.name)
            self._names[path.parent] = names
        name = names.get(checkpoint_id)
        if name is None or not path.with_name(name).exists():  # pruned or removed since it was listed
            names.pop(checkpoint_id, None)
            return None
        return path.with_name(name)

    def path_for(self, entry: ViewEntry) -> Path:
        """``<location>/<branch>/<id>_p-<parent>.json``. Raises ViewWriteError for a branch that would
        escape the location."""
        if not layout.branch_is_safe(entry.branch):
            raise ViewWriteError(f"branch {entry.branch!r} would escape {self.location}; rename the branch")
        for what, value in (("checkpoint id", entry.checkpoint_id), ("parent id", entry.parent_id)):
            if value is not None and _UNSAFE_NAME.search(value):  # a separator, or bytes a terminal acts on
                of = f" of checkpoint {entry.checkpoint_id!r}" if what == "parent id" else ""
                raise ViewWriteError(f"{what} {value!r}{of} cannot be part of a file name")
        name = layout.checkpoint_filename(entry.checkpoint_id, entry.parent_id)
        folder = self.location
        for part in entry.branch.split("/"):
            folder = folder / part
            if folder.is_symlink():  # git's rule: never write "beyond a symbolic link" inside the tree
                raise ViewWriteError(f"{folder} is a symbolic link; refusing to write through it (it may point "
                                     f"outside {self.location}); remove it or export elsewhere")
        return folder / name

    def write(self, entries: list[ViewEntry]) -> WriteOutcome:
        """Write each entry unless a file with the same name, or with the same checkpoint id and another
        parent suffix, exists (same bytes: ``present``; else ``conflicts``, untouched). Raises
        ViewWriteError or OSError."""
        out = WriteOutcome()
        for entry in entries:
            path = self.path_for(entry)
            data = entry.text.encode("utf-8")
            path = self._existing(path, entry.checkpoint_id) or path
            if path.exists():
                same = path.stat().st_size == len(data) and path.read_bytes() == data
                (out.present if same else out.conflicts).append(str(path))
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp, fd = _create_temp(path)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    if entry.mtime_ns is not None:  # by descriptor: never through a name someone could swap
                        os.utime(f.fileno(), ns=(entry.mtime_ns, entry.mtime_ns))
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)  # ours (O_EXCL made it); unlink never follows a link
                raise
            self._names.setdefault(path.parent, {})[entry.checkpoint_id] = path.name
            out.written.append(str(path))
        return out

    def prune(self, branch: str, keep: int) -> int:
        """Delete the oldest checkpoint files of ``branch`` beyond the newest ``keep`` (by mtime), as
        CrewAI's ``JsonProvider.prune`` does; returns how many went. Raises ViewWriteError for an unsafe
        branch; a file that cannot be removed is skipped (CrewAI's rule too)."""
        if not layout.branch_is_safe(branch):
            raise ViewWriteError(f"branch {branch!r} would escape {self.location}; rename the branch")
        folder = self.location.joinpath(*branch.split("/"))
        try:
            files = sorted((p for p in folder.glob("*.json") if p.is_file() and not p.is_symlink()),
                           key=lambda p: p.stat().st_mtime_ns)
        except OSError:
            return 0
        removed = 0
        for path in files[:-keep] if keep > 0 else files:
            try:
                path.unlink()
                removed += 1
            except OSError:
                continue
        return removed


_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _create_temp(path: Path) -> tuple[Path, int]:
    """Create the hidden temporary file for ``path`` (``.<name>.<pid>.tmp``) with O_EXCL|O_NOFOLLOW, so a
    file or symbolic link planted at that name is never written through or truncated; when the name is
    taken (a planted link, or a leftover of a killed export with the same pid), a random suffix is tried.
    Returns (temporary path, open descriptor). Raises ViewWriteError when no name can be had."""
    names = [f".{path.name}.{os.getpid()}.tmp"] + [f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
                                                   for _ in range(3)]
    for name in names:
        tmp = path.with_name(name)
        try:
            return tmp, os.open(tmp, _TEMP_FLAGS, 0o666)
        except FileExistsError:
            continue
    raise ViewWriteError(f"cannot create a temporary file next to {path}: {names[0]} and random names exist; "
                         f"remove the stray .*.tmp files there")


class SqliteWriter:
    """Writes checkpoints into CrewAI's ``checkpoints`` table of an SQLite database (created if absent)."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = str(db_path)
        Path(self.db_path).parent.mkdir(parents=True, exist_ok=True)
        if Path(self.db_path).exists() and Path(self.db_path).stat().st_size and not layout.is_sqlite_file(self.db_path):
            raise ViewWriteError(f"{self.db_path} exists and is not an SQLite database; pick another --to path")
        # a URI built from the absolute path: this SQLite reads a plain name starting with "file:" as a URI
        # (a "?mode=memory" there would export into memory and write nothing)
        self.conn = sqlite3.connect(Path(self.db_path).resolve().as_uri() + "?mode=rwc", uri=True, timeout=30)
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute(layout.CREATE_TABLE)
            cols = [r[1] for r in self.conn.execute("PRAGMA table_info(checkpoints)")]
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise ViewWriteError(f"{self.db_path}: cannot write SQLite database: {exc}") from None
        if any(c not in cols for c in layout.TABLE_COLUMNS):
            self.conn.close()
            raise ViewWriteError(f"{self.db_path}: has a 'checkpoints' table that is not CrewAI's; pick another path")

    def write(self, entries: list[ViewEntry]) -> WriteOutcome:
        """Insert the entries in order, in one transaction; ids already present are left as they are
        (``present`` when their data is the same text, else ``conflicts``)."""
        out = WriteOutcome()
        with self.conn:
            for e in entries:
                where = f"{self.db_path}#{e.checkpoint_id}"
                cur = self.conn.execute(
                    "INSERT OR IGNORE INTO checkpoints (id, created_at, parent_id, branch, data) VALUES (?, ?, ?, ?, ?)",
                    (e.checkpoint_id, e.created_at, e.parent_id, e.branch, e.text),
                )
                if cur.rowcount == 1:
                    out.written.append(where)
                    continue
                row = self.conn.execute("SELECT data FROM checkpoints WHERE id = ?", (e.checkpoint_id,)).fetchone()
                (out.present if row and _same_data(row[0], e.text) else out.conflicts).append(where)
        return out

    def prune(self, branch: str, keep: int) -> int:
        """Delete the oldest rows of ``branch`` beyond the newest ``keep`` (by rowid), with CrewAI's own
        ``SqliteProvider.prune`` statement; returns how many went."""
        with self.conn:
            cur = self.conn.execute(layout.PRUNE_SQL, (branch, branch, keep))
        return max(cur.rowcount, 0)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> SqliteWriter:  # noqa: PYI034 - Python 3.10 has no typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _same_data(stored: object, text: str) -> bool:
    """Whether a stored ``data`` cell (text or CrewAI's JSONB) holds the same JSON value as ``text``."""
    if stored == text:
        return True
    try:
        value = jsonb_to_value(stored) if isinstance(stored, bytes) else json.loads(str(stored))
        return bool(value == json.loads(text))
    except (JsonbError, ValueError):
        return False

"""CrewAI 1.15's on-disk naming rules, shared by the readers and writers (no crewai import).

Sources (crewai 1.15.30): ``crewai/state/provider/json_provider.py`` (``_build_path``, ``extract_id``,
``_safe_branch``), ``sqlite_provider.py`` (``_CREATE_TABLE``, ``_make_id``), ``utils.py``
(``detect_provider``), ``crewai_cli/checkpoint_cli.py`` (``_list_json`` globs ``**/*.json`` and sorts by
mtime; SQLite lists ``ORDER BY rowid DESC``).

* A checkpoint id is ``<YYYYmmddTHHMMSS UTC>_<8 hex>``.
* A JSON checkpoint lives at ``<location>/<branch>/<id>_p-<parent id or "none">.json``; the id is the
  file stem before ``_p-``; branch may hold ``/`` (``fork/<id>_<6 hex>``).
* An SQLite checkpoint is a row of ``checkpoints(id, created_at, parent_id, branch, data)``; its
  location string is ``<db path>#<id>``; ``created_at`` is the id's timestamp.
* A file is SQLite when its first 16 bytes are ``SQLite format 3\\0``.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from typing import Any

from crewckpt.backends.sqlite import is_sqlite_file  # re-exported: views and the CLI look here
from crewckpt.history.jsontext import escape_surrogates

TS_FORMAT = "%Y%m%dT%H%M%S"
CHECKPOINT_ID_RE = re.compile(r"(\d{8}T\d{6})_([0-9a-f]{8})")
_TS_RE = re.compile(r"\d{8}T\d{6}")

# Verbatim from crewai/state/provider/sqlite_provider.py, so CrewAI's own CREATE TABLE IF NOT EXISTS and
# INSERTs work on databases we write.
CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS checkpoints (
    id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    parent_id TEXT,
    branch TEXT NOT NULL DEFAULT 'main',
    data JSONB NOT NULL
)
"""
# Verbatim from crewai/state/provider/sqlite_provider.py (_PRUNE): keep a branch's newest N rows by rowid.
PRUNE_SQL = """
DELETE FROM checkpoints WHERE branch = ? AND rowid NOT IN (
    SELECT rowid FROM checkpoints WHERE branch = ? ORDER BY rowid DESC LIMIT ?
)
"""
TABLE_COLUMNS = ("id", "created_at", "parent_id", "branch", "data")

JSON_STYLE_DUMPS = "dumps"
"""``json.dumps(payload)``: what CrewAI's automatic checkpoint listener writes (", " and ": ", ASCII)."""
JSON_STYLE_COMPACT = "compact"
"""Pydantic's ``model_dump_json()``: what ``RuntimeState.checkpoint()`` (manual checkpoints) writes."""


def split_location(path: str) -> tuple[str, str | None]:
    """Split CrewAI's ``<db path>#<checkpoint id>`` location; a plain path gives ``(path, None)``."""
    if "#" in path:
        db, _, cid = path.rpartition("#")
        if is_sqlite_file(db):
            return db, cid or None
    return path, None


def checkpoint_filename(checkpoint_id: str, parent_id: str | None) -> str:
    """``<id>_p-<parent or none>.json``, as ``JsonProvider._build_path`` names files."""
    return f"{checkpoint_id}_p-{parent_id or 'none'}.json"


def parse_filename(name: str) -> tuple[str, str | None] | None:
    """(checkpoint id, parent id or None) from a checkpoint file name, or None if it has no ``_p-`` part.

    Follows ``JsonProvider.extract_id``: the id is the stem before the first ``_p-``.
    """
    stem = name.removesuffix(".json")
    idx = stem.find("_p-")
    if idx <= 0:
        return None
    parent = stem[idx + 3 :]
    return stem[:idx], (None if parent in ("", "none") else parent)


def timestamp_of(checkpoint_id: str) -> str | None:
    """The ``YYYYmmddTHHMMSS`` prefix of a checkpoint id, or None."""
    m = _TS_RE.match(checkpoint_id)
    return m.group(0) if m else None


def ts_to_ns(ts: str) -> int:
    """UTC ``YYYYmmddTHHMMSS`` -> ns since the epoch. Raises ValueError on another shape."""
    return calendar.timegm(time.strptime(ts, TS_FORMAT)) * 1_000_000_000


def ns_to_ts(time_ns: int) -> str:
    """ns since the epoch -> UTC ``YYYYmmddTHHMMSS``."""
    return time.strftime(TS_FORMAT, time.gmtime(time_ns // 1_000_000_000))


def make_checkpoint_id(time_ns: int, commit_id: str) -> str:
    """A CrewAI-shaped id for a commit that has none: its UTC second and the first 8 hex of its id."""
    return f"{ns_to_ts(time_ns)}_{commit_id[:8]}"


def branch_is_safe(branch: str) -> bool:
    """True when ``<location>/<branch>`` stays inside location (``JsonProvider._safe_branch``'s rule)."""
    if not branch or branch.startswith("/") or "\\" in branch or "\x00" in branch:
        return False
    return all(part not in ("", ".", "..") for part in branch.split("/"))


def render_json(value: Any, style: str | None = None) -> str:
    """JSON text of a checkpoint in CrewAI's style: ``dumps`` (default) or ``compact``."""
    if style == JSON_STYLE_COMPACT:
        # a lone surrogate as its escape: the text must be writable as UTF-8 and still parse to the same value
        return escape_surrogates(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    return json.dumps(value)


def detect_style(value: Any, text: str) -> str | None:
    """Which CrewAI writer produced ``text`` (re-rendering ``value`` gives it back byte for byte), or None."""
    head = text[:256]
    if '": ' in head or ", " in head:
        order = (JSON_STYLE_DUMPS, JSON_STYLE_COMPACT)
    else:
        order = (JSON_STYLE_COMPACT, JSON_STYLE_DUMPS)
    for style in order:
        if render_json(value, style) == text:
            return style
    return None

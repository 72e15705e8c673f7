"""Formatting shared by the `ckpt` verbs: short ids, times, entity summaries, the commit JSON record."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

SHORT_ID_MIN = 8

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)\Z")
MAX_DURATION_S = 10_000 * 365 * 86400
_UNIT_S = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def short_ids(ids: Iterable[str], minimum: int = SHORT_ID_MIN) -> dict[str, str]:
    """The shortest common length (at least ``minimum`` hex digits) at which the given ids differ.

    One length for all, so columns line up; unique among the ids given: pass every id in the store when
    the output lists them all. Returns {full id: short id}.
    """
    unique = set(ids)
    length = minimum
    while length < 64 and len({i[:length] for i in unique}) < len(unique):
        length += 1
    return {i: i[:length] for i in unique}


@functools.lru_cache(maxsize=4096)
def _local_second(second: int) -> str:
    return datetime.fromtimestamp(second).strftime("%Y-%m-%d %H:%M:%S")


def local_time(time_ns: int) -> str:
    """``2026-11-29 23:42:23`` in local time, for human output (cached: checkpoints share seconds)."""
    return _local_second(time_ns // 1_000_000_000)


def parse_duration_ns(text: str) -> int:
    """``7d``, ``12h``, ``30m``, ``90s``, ``2w`` -> nanoseconds.

    Raises ValueError naming the accepted units.
    """
    match = _DURATION.match(text.strip().lower())
    if not match:
        raise ValueError(f"bad duration {safe_text(text[:40])!r}: write a number and a unit, like 7d, 12h, 30m, "
                         f"90s or 2w")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if not seconds <= MAX_DURATION_S:  # also inf, from a number of hundreds of digits
        raise ValueError(f"duration {safe_text(text[:40])!r} is longer than 10000 years; give e.g. 365d")
    return int(seconds * 1_000_000_000)


def summary_fields(info: Any) -> dict[str, Any]:
    """A commit's summary as a plain dict: entities [{type, name}], tasks_done, tasks_total, event_count,
    logical_bytes (bytes of the document as compact JSON)."""
    return summary_fields_of(getattr(info, "summary", None))


def summary_fields_of(summary: Any) -> dict[str, Any]:
    """A summary (crewckpt.views.document.CrewSummary, a commit's summary map, or a dict of the fields
    below) as a plain dict; see above."""
    if summary is None:
        return {"entities": [], "tasks_done": 0, "tasks_total": 0, "event_count": 0, "logical_bytes": 0}
    if isinstance(summary, dict):
        entities = summary.get("entities") or []
        fields = summary
    else:
        entities = summary.entities
        fields = {
            k: getattr(summary, k) for k in ("tasks_done", "tasks_total", "event_count", "logical_bytes")
        }
    return {
        "entities": [
            {"type": e.get("type"), "name": e.get("name")}
            if isinstance(e, dict)
            else {"type": e[0], "name": e[1]}
            for e in entities
        ],
        "tasks_done": int(fields.get("tasks_done") or 0),
        "tasks_total": int(fields.get("tasks_total") or 0),
        "event_count": int(fields.get("event_count") or 0),
        "logical_bytes": int(fields.get("logical_bytes") or 0),
    }


def entity_summary(summary: Any) -> str:
    """``crew:research [3/6 tasks]``: the first entity, its task progress, then other named entities.

    ``summary``: a crewckpt.views.document.CrewSummary or the dict of summary_fields.
    Unnamed entities (CrewAI's per-agent executor flows inside a crew) are left out.
    """
    if isinstance(summary, dict):
        pairs = [(e["type"], e["name"]) for e in summary["entities"]]
        done, total = summary["tasks_done"], summary["tasks_total"]
    else:
        pairs, done, total = summary.entities, summary.tasks_done, summary.tasks_total
    if not pairs:
        return "-"
    text = _entity(pairs[0])
    if total:
        text += f" [{done}/{total} tasks]"
    others = [_entity(e) for e in pairs[1:] if e[1]]
    if others:
        text += ", " + ", ".join(others[:2]) + (f" +{len(others) - 2}" if len(others) > 2 else "")
    return safe_text(text)  # names come from checkpoints: a newline must not start a fake record


def _entity(pair: Any) -> str:
    kind, name = pair
    return f"{kind}:{name}" if name else str(kind)


def commit_json(info: Any, *, branches_at: list[str] | None = None) -> dict[str, Any]:
    """The JSON record of a commit (schema "commit" in docs/cli-json.md; CommitInfo.to_json), ids in full."""
    record = dict(info.to_json())
    if branches_at is not None:
        record["branches_at"] = branches_at
    return record


# -- terminal safety --------------------------------------------------------------------------------------
# Text from a store is data someone else may have written. Before it reaches a terminal, every character
# that can act on the terminal or hide what a line says is shown escaped (``\x1b``, ``\u202e``): C0 controls
# (ESC starts CSI and OSC sequences: OSC 52 writes the clipboard, CSI 2J clears the screen), DEL, C1 controls
# (U+009B is a one-character CSI), bidi controls (U+202A-U+202E, U+2066-U+2069, U+200E/F, U+061C), zero-width
# characters (U+200B-U+200D, U+2060, U+FEFF), line/paragraph separators and lone surrogates (which a UTF-8
# terminal cannot even be sent). `--json` output is never filtered: JSON escapes what it must and stays exact.
_OTHER_UNSAFE = "\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff"
_UNSAFE = re.compile(f"[\x00-\x08\x0a-\x1f{_OTHER_UNSAFE}]")  # tab: handled apart
_UNSAFE_MULTILINE = re.compile(f"[\x00-\x08\x0b-\x1f{_OTHER_UNSAFE}]")  # keeps \t and \n
_SGR_OR_UNSAFE = re.compile(f"\x1b\\[[0-9;]*m|[\x00-\x08\x0b-\x1f{_OTHER_UNSAFE}]")


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(c: str) -> str:
    o = ord(c)
    return _NAMED.get(c) or (f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")


def _escape_match(m: re.Match[str]) -> str:
    t = m.group()
    return _escape_char(t[0]) + t[1:]  # one character, or an SGR sequence whose ESC alone is active


def safe_text(text: object, *, multiline: bool = False, tabs: bool | None = None) -> str:
    """``text`` with every terminal-active or invisible character shown escaped (``\\x1b``, ``\\u202e``; the
    rule above). ``multiline``: keep newlines and tabs (a document's text); else they are escaped too (a
    name, a trigger, a one-line field). ``tabs``: keep tabs (default: as ``multiline``). Cheap when there is
    nothing to escape."""
    s = text if isinstance(text, str) else str(text)
    pattern = _UNSAFE_MULTILINE if multiline else _UNSAFE
    if "\t" in s and not (multiline if tabs is None else tabs):
        s = s.replace("\t", "\\t")  # outside the character class: the multiline pattern keeps tabs
    return pattern.sub(_escape_match, s) if pattern.search(s) else s


def terminal_safe(text: str, *, keep_sgr: bool) -> str:
    """Output text made safe for a terminal: like ``safe_text(multiline=True)``, but ``keep_sgr`` keeps the
    colour codes crewckpt itself writes (``ESC [ digits ; m``, which only set colours)."""
    if not _SGR_OR_UNSAFE.search(text):
        return text

    def sub(m: re.Match[str]) -> str:
        t = m.group()
        return t if keep_sgr and len(t) > 1 else _escape_match(m)

    return _SGR_OR_UNSAFE.sub(sub, text)


class TerminalSafeStream:
    """A text stream wrapper that passes everything written through :func:`terminal_safe` (the backstop
    for every line a verb prints; the verbs also escape stored fields themselves). ``unfiltered`` is the
    wrapped stream (progress bars need their cursor codes)."""

    def __init__(self, stream: Any, keep_sgr: bool) -> None:
        self.unfiltered = stream
        self._keep_sgr = keep_sgr

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.unfiltered.write(terminal_safe(text, keep_sgr=self._keep_sgr))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, errors, buffer...
        return getattr(self.unfiltered, name)


def control_escape_table() -> dict[int, str]:
    """``str.translate`` table for the same rule as :func:`safe_text` with ``multiline=True`` (newlines and
    tabs kept): used by the TUI, whose widgets render through rich/Textual text that keeps ESC."""
    table: dict[int, str] = {}
    for lo, hi in ((0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x9F), (0x61C, 0x61C), (0x200B, 0x200F), (0x2028, 0x202E),
                   (0x2060, 0x2069), (0xFEFF, 0xFEFF), (0xD800, 0xDFFF)):
        for o in range(lo, hi + 1):
            table[o] = _escape_char(chr(o))
    return table

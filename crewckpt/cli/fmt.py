"""Formatting shared by the `ckpt` verbs: short ids, times, entity summaries, the commit JSON record."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

SHORT_ID_MIN = 8

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)\Z")
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
        raise ValueError(f"bad duration {text!r}: write a number and a unit, like 7d, 12h, 30m, 90s or 2w")
    return int(float(match.group(1)) * _UNIT_S[match.group(2)] * 1_000_000_000)


def summary_fields(info: Any) -> dict[str, Any]:
    """A commit's summary as a plain dict: entities [{type, name}], tasks_done, tasks_total, event_count,
    logical_bytes (bytes of the document as compact JSON)."""
    return summary_fields_of(getattr(info, "summary", None))


def summary_fields_of(summary: Any) -> dict[str, Any]:
    """A Summary (crewckpt.format.objects.Summary, or a dict of its fields) as a plain dict; see above."""
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

    ``summary``: a commit's Summary (crewckpt.format.objects.Summary) or the dict of summary_fields.
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
    return text


def _entity(pair: Any) -> str:
    kind, name = pair
    return f"{kind}:{name}" if name else str(kind)


def commit_json(info: Any, *, branches_at: list[str] | None = None) -> dict[str, Any]:
    """The JSON record of a commit (schema "commit" in docs/cli-json.md; CommitInfo.to_json), ids in full."""
    record = dict(info.to_json())
    if branches_at is not None:
        record["branches_at"] = branches_at
    return record

"""Formatting shared by the `ckpt` verbs: short ids, times, entity summaries, the commit JSON record."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

SHORT_ID_MIN = 8

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)\Z")
_UNIT_S = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def short_ids(ids: Iterable[str], minimum: int = SHORT_ID_MIN) -> dict[str, str]:
    """Shortest prefixes (at least ``minimum`` hex digits) that tell the given ids apart.

    Like git's abbreviations, unique among the ids given: pass every id in the store when the output
    lists them all. Returns {full id: short id}.
    """
    ordered = sorted(set(ids))
    length = {i: minimum for i in ordered}
    for a, b in itertools.pairwise(ordered):
        common = 0
        while common < min(len(a), len(b)) and a[common] == b[common]:
            common += 1
        length[a] = max(length[a], common + 1)
        length[b] = max(length[b], common + 1)
    return {i: i[: length[i]] for i in ordered}


def local_time(time_ns: int) -> str:
    """``2026-11-29 23:42:23`` in the local time zone, for human output."""
    return datetime.fromtimestamp(time_ns / 1e9).strftime("%Y-%m-%d %H:%M:%S")


def parse_duration_ns(text: str) -> int:
    """``7d``, ``12h``, ``30m``, ``90s``, ``2w`` -> nanoseconds. Raises ValueError naming the accepted units."""
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
    get = summary.get if isinstance(summary, dict) else lambda k, d=None: getattr(summary, k, d)
    entities = []
    for entity in get("entities", None) or []:
        if isinstance(entity, dict):
            entities.append({"type": entity.get("type"), "name": entity.get("name")})
        else:
            kind, name = (list(entity) + [None, None])[:2]
            entities.append({"type": kind, "name": name})
    return {
        "entities": entities,
        "tasks_done": int(get("tasks_done", 0) or 0),
        "tasks_total": int(get("tasks_total", 0) or 0),
        "event_count": int(get("event_count", 0) or 0),
        "logical_bytes": int(get("logical_bytes", 0) or 0),
    }


def entity_summary(summary: dict[str, Any]) -> str:
    """``crew:research [3/6 tasks]``: the first entity, its task progress, then other named entities.

    Unnamed entities (CrewAI's per-agent executor flows inside a crew) are left out.
    """
    entities = summary["entities"]
    if not entities:
        return "-"
    first = entities[0]
    text = _entity(first)
    if summary["tasks_total"]:
        text += f" [{summary['tasks_done']}/{summary['tasks_total']} tasks]"
    others = [_entity(e) for e in entities[1:] if e.get("name")]
    if others:
        text += ", " + ", ".join(others[:2]) + (f" +{len(others) - 2}" if len(others) > 2 else "")
    return text


def _entity(entity: dict[str, Any]) -> str:
    return f"{entity['type']}:{entity['name']}" if entity.get("name") else str(entity["type"])


def commit_json(info: Any, *, branches_at: list[str] | None = None) -> dict[str, Any]:
    """The JSON record of a commit (schema "commit" in docs/cli-json.md; CommitInfo.to_json), ids in full."""
    record = dict(info.to_json())
    if branches_at is not None:
        record["branches_at"] = branches_at
    return record

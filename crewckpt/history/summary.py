"""Commit summaries: what listing shows without decoding snapshots.

Knows CrewAI's RuntimeState shape (``entities`` with ``entity_type``; crews' ``tasks`` whose ``output`` is set
once done; ``event_record.nodes``) but never depends on it: any other JSON gets an empty summary plus its size.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from crewckpt.format.objects import Summary


def json_size(doc: Any) -> int:
    """Bytes of ``doc`` as compact UTF-8 JSON (the 'logical' size)."""
    try:
        return len(orjson.dumps(doc))
    except (TypeError, orjson.JSONEncodeError):  # big ints, lone surrogates, non-str keys
        return len(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))


def entity_name(e: dict[str, Any]) -> str:
    """A crew's or flow's ``name``, an agent's ``role``, else the empty string."""
    for k in ("name", "role"):
        v = e.get(k)
        if isinstance(v, str) and v:
            return v
    return ""


def summarize(doc: Any, logical_bytes: int | None = None) -> Summary:
    """Summary of one checkpoint document (see module docstring); ``logical_bytes`` if already known."""
    size = json_size(doc) if logical_bytes is None else logical_bytes
    if not isinstance(doc, dict):
        return Summary(logical_bytes=size)
    entities: list[tuple[str, str]] = []
    done = total = 0
    ents = doc.get("entities")
    if isinstance(ents, list):
        for e in ents:
            if not isinstance(e, dict) or not isinstance(e.get("entity_type"), str):
                continue
            entities.append((e["entity_type"], entity_name(e)))
            tasks = e.get("tasks")
            if isinstance(tasks, list):
                total += len(tasks)
                done += sum(1 for t in tasks if isinstance(t, dict) and t.get("output") is not None)
    events = 0
    rec = doc.get("event_record")
    if isinstance(rec, dict) and isinstance(rec.get("nodes"), dict):
        events = len(rec["nodes"])
    return Summary(tuple(entities), done, total, events, size)

"""Commit summaries: what listing shows without decoding snapshots.

Knows CrewAI's RuntimeState shape (``entities`` with ``entity_type``; crews' ``tasks`` whose ``output`` is set
once done; ``event_record.nodes``) but never depends on it: any other JSON gets an empty summary plus its size.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from crewckpt.format.objects import Summary
from crewckpt.history.snapshot import Frozen


def _fragment(v: Any) -> Any:
    if isinstance(v, Frozen):
        return orjson.Fragment(v.json_bytes) if v.json_bytes is not None else v.value
    raise TypeError(f"value of type {type(v).__name__} is not JSON")


def json_size(doc: Any) -> int:
    """Bytes of ``doc`` as compact UTF-8 JSON (the 'logical' size); a :class:`Frozen` with ``json_bytes``
    counts those bytes without being dumped again."""
    try:
        return len(orjson.dumps(doc, default=_fragment))
    except (TypeError, orjson.JSONEncodeError):  # big ints, lone surrogates, deep nesting
        return _walk_size(doc)


def _scalar_size(v: Any) -> int:
    return len(json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def _walk_size(doc: Any) -> int:
    """Compact-JSON length without recursion (documents may nest deeper than Python's stack)."""
    total = 0
    stack = [doc]
    while stack:
        v = stack.pop()
        if isinstance(v, Frozen):
            if v.json_bytes is not None:
                total += len(v.json_bytes)
            else:
                stack.append(v.value)
        elif isinstance(v, dict):
            total += 2 + max(len(v) - 1, 0) + len(v) + sum(_scalar_size(k) for k in v)
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            total += 2 + max(len(v) - 1, 0)
            stack.extend(v)
        else:
            total += _scalar_size(v)
    return total


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
    doc = doc.value if isinstance(doc, Frozen) else doc
    if not isinstance(doc, dict):
        return Summary(logical_bytes=size)
    entities: list[tuple[str, str]] = []
    done = total = 0
    ents = doc.get("entities")
    ents = ents.value if isinstance(ents, Frozen) else ents
    if isinstance(ents, list):
        for e in ents:
            e = e.value if isinstance(e, Frozen) else e
            if not isinstance(e, dict) or not isinstance(e.get("entity_type"), str):
                continue
            entities.append((e["entity_type"], entity_name(e)))
            tasks = e.get("tasks")
            tasks = tasks.value if isinstance(tasks, Frozen) else tasks
            if isinstance(tasks, list):
                total += len(tasks)
                tasks = [t.value if isinstance(t, Frozen) else t for t in tasks]
                done += sum(1 for t in tasks if isinstance(t, dict) and t.get("output") is not None)
    events = 0
    rec = doc.get("event_record")
    rec = rec.value if isinstance(rec, Frozen) else rec
    nodes = rec.get("nodes") if isinstance(rec, dict) else None
    nodes = nodes.value if isinstance(nodes, Frozen) else nodes
    if isinstance(nodes, dict):
        events = len(nodes)
    return Summary(tuple(entities), done, total, events, size)

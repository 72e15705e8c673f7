"""What the detail tabs show, read off one checkpoint document (pure functions, no Textual).

Knows CrewAI 1.15's RuntimeState shape (``entities`` with ``entity_type``; crews' ``tasks`` with ``output``
set at completion and ``start_time`` at start; ``checkpoint_inputs``; ``event_record.nodes`` whose ``event``
has ``type``, ``timestamp`` and ``emission_sequence``) and degrades to empty lists on any other JSON.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import orjson

from crewckpt.history import jsontext
from crewckpt.views.diff import entity_label, task_status


@dataclasses.dataclass(frozen=True)
class TaskRow:
    """One task: ``key`` = (entity index, task index); ``status`` completed|running|pending; ``output`` the
    raw output text (None unless completed)."""

    key: tuple[int, int]
    entity: str
    name: str
    agent: str
    description: str
    status: str
    output: str | None


@dataclasses.dataclass(frozen=True)
class EventRow:
    """One recorded event (``seq`` = CrewAI's emission_sequence; ``timestamp`` ISO text)."""

    seq: int
    timestamp: str
    type: str
    task: str
    agent: str


def entities(doc: Any) -> list[dict[str, Any]]:
    """The document's entity objects (empty for non-CrewAI JSON)."""
    ents = doc.get("entities") if isinstance(doc, dict) else None
    return [e for e in ents if isinstance(e, dict)] if isinstance(ents, list) else []


def main_entities(doc: Any) -> list[tuple[int, dict[str, Any]]]:
    """(index, entity) of the entities a user started: named ones, or all when none is named (CrewAI's
    per-agent executor flows are unnamed and left out)."""
    ents = list(enumerate(entities(doc)))
    named = [(i, e) for i, e in ents if e.get("name") or e.get("role")]
    return named or ents


def inputs(doc: Any) -> dict[str, Any]:
    """Kickoff inputs: every entity's ``checkpoint_inputs`` merged (first entity wins on a clash)."""
    merged: dict[str, Any] = {}
    for e in reversed(entities(doc)):
        v = e.get("checkpoint_inputs")
        if isinstance(v, dict):
            merged.update(v)
    return merged


def output_text(task: dict[str, Any]) -> str | None:
    """A task's output as text: ``output.raw``, else its JSON."""
    out = task.get("output")
    if out is None:
        return None
    if isinstance(out, dict):
        raw = out.get("raw")
        if isinstance(raw, str):
            return raw
        out = raw if raw is not None else out
    if isinstance(out, str):
        return out
    return jsontext.dumps(out, indent=True)  # lone surrogates and big ints too


def tasks(doc: Any) -> list[TaskRow]:
    """Every task of every entity, in order."""
    rows = []
    for ei, e in enumerate(entities(doc)):
        for ti, t in enumerate(e.get("tasks") or []):
            if not isinstance(t, dict):
                continue
            agent = t.get("agent")
            role = agent.get("role") if isinstance(agent, dict) else agent
            rows.append(TaskRow((ei, ti), entity_label(e), str(t.get("name") or f"task {ti + 1}"),
                                str(role or ""), str(t.get("description") or ""), task_status(t),
                                output_text(t)))
    return rows


def events(doc: Any) -> list[EventRow]:
    """Recorded events, newest first (by emission sequence, then timestamp)."""
    rec = doc.get("event_record") if isinstance(doc, dict) else None
    nodes = rec.get("nodes") if isinstance(rec, dict) else None
    if not isinstance(nodes, dict):
        return []
    rows = []
    for node in nodes.values():
        ev = node.get("event") if isinstance(node, dict) else None
        if not isinstance(ev, dict):
            continue
        seq = ev.get("emission_sequence")
        rows.append(EventRow(seq if isinstance(seq, int) else -1, str(ev.get("timestamp") or ""),
                             str(ev.get("type") or "unknown"), str(ev.get("task_name") or ""),
                             str(ev.get("agent_role") or "")))
    rows.sort(key=lambda r: (r.seq, r.timestamp), reverse=True)
    return rows


def event_counts(rows: list[EventRow]) -> list[tuple[str, int]]:
    """(type, count), most frequent first, ties by name."""
    return sorted(Counter(r.type for r in rows).items(), key=lambda kv: (-kv[1], kv[0]))


def invalidated_tasks(task_counts: dict[int, int], edited: Any) -> list[tuple[int, int]]:
    """Tasks an output edit sends back to run: in each entity, every task after its first edited task that
    is not itself edited (crewckpt.crewai.edits applies the same rule on Fork). ``task_counts`` maps entity
    index -> number of tasks; ``edited`` holds (entity index, task index) keys."""
    out: list[tuple[int, int]] = []
    for ent, count in sorted(task_counts.items()):
        firsts = [t for (e, t) in edited if e == ent]
        if firsts:
            out += [(ent, t) for t in range(min(firsts) + 1, count) if (ent, t) not in edited]
    return out


def format_value(value: Any) -> str:
    """An input value as the user edits it: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else jsontext.dumps(value)


def parse_value(text: str, original: Any) -> Any:
    """Inverse of :func:`format_value`: a string input stays a string; others are parsed as JSON when
    they parse, else kept as the typed text."""
    if isinstance(original, str):
        return text
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


__all__ = ["EventRow", "TaskRow", "entities", "event_counts", "events", "format_value", "inputs", "invalidated_tasks",
           "main_entities", "output_text", "parse_value", "tasks"]

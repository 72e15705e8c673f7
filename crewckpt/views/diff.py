"""Semantic diff of two checkpoint documents (pure function over JSON values).

`diff_documents(old, new)` works on any JSON value. When the documents have CrewAI's checkpoint shape
(``{"entities": [...], "event_record": {"nodes": {...}}, ...}``, see
/work/shared/fixtures/crewai-1.15.30/README.md) it reports what a CrewAI user asks about:

- kickoff inputs (``entities[*].checkpoint_inputs``),
- per entity (crew, flow, agent; matched by ``id``, then by name, then by position among its type):
  tasks matched by task ``id`` (then by ``name``; never by list position) with their status
  (pending/running/completed) and a unified text diff of ``output.raw``; agents (by ``id``, then ``role``)
  with their ``memory``; flow state (``checkpoint_state``), completed methods and method call counts,
- events added/removed from ``event_record.nodes`` counted by event ``type``,
- document sizes (compact JSON bytes),
- every other changed path (``changes``), as JSON paths usable with ``ckpt show --path``.

Result schema "crewckpt.diff/1" (JSON-serialisable, keys always present; documented in docs/cli-json.md):

    {"schema": "crewckpt.diff/1", "identical": bool, "crewai": bool,
     "sizes": {"old_bytes", "new_bytes", "delta_bytes", "old_event_bytes", "new_event_bytes"},  # ints
     "inputs": MapDiff,
     "entities": [EntityDiff],
     "events": EventDiff | None,                 # None when neither document has event_record.nodes
     "changes": [Change], "changes_truncated": int}
    MapDiff    = {"added": {k: v}, "removed": {k: v}, "changed": {k: {"old": v, "new": v}}}
    EntityDiff = {"type", "name", "id", "label", "role", "op", "old_index", "new_index", "matched_by",
                  "inputs": MapDiff, "tasks": [TaskDiff], "agents": [AgentDiff], "flow": FlowDiff | None}
    TaskDiff   = {"id", "name", "op", "matched_by", "old_status", "new_status",
                  "output_diff": str | None, "output_lines": {"added": int, "removed": int}, "fields": [str]}
    AgentDiff  = {"id", "role", "op", "matched_by", "memory": {"old", "new"} | None, "fields": [str]}
    FlowDiff   = {"state": [Change], "completed_methods": {"added": [str], "removed": [str]},
                  "method_counts": MapDiff}
    EventDiff  = {"old_count", "new_count", "added_total", "removed_total", "changed_total",
                  "added": {type: n}, "removed": {type: n}}
    Change     = {"path": str, "op": "added" | "removed" | "changed", "old"?: v, "new"?: v}
    op         = "added" | "removed" | "changed" | "unchanged"

Values larger than VALUE_PREVIEW_BYTES in a Change become a string like ``"<object: 12 keys, 3456 bytes>"``
(the change walk, matcher and previews are :mod:`crewckpt.history.diff`'s, the generic JSON diff).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from crewckpt.history import jsontext
from crewckpt.history.diff import (
    MAX_CHANGES,
    ChangeList,
    changed_keys,
    json_bytes,
    map_diff,
    match,
    op,
    same,
    walk,
)
from crewckpt.history.linediff import unified_diff

SCHEMA = "crewckpt.diff/1"
CONTEXT_LINES = 3

# Entity keys reported by their own section; the generic `changes` list skips them.
_ENTITY_SECTIONS = frozenset(
    {
        "tasks",
        "agents",
        "checkpoint_inputs",
        "checkpoint_state",
        "checkpoint_completed_methods",
        "checkpoint_method_counts",
    }
)


def diff_documents(
    old: Any,
    new: Any,
    *,
    max_changes: int = MAX_CHANGES,
    context_lines: int = CONTEXT_LINES,
) -> dict[str, Any]:
    """Compare two checkpoint documents; returns the "crewckpt.diff/1" dict described in the module doc.

    ``old``/``new`` are JSON values (dict, list, str, int, float, bool, None). ``max_changes`` caps the
    generic ``changes`` list (the rest is counted in ``changes_truncated``); ``context_lines`` is the
    unified-diff context of task outputs. Never raises on well-formed JSON values.
    """
    crewai = is_crewai_document(old) and is_crewai_document(new)
    changes = ChangeList(max_changes)
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "identical": same(old, new),
        "crewai": crewai,
        "sizes": _sizes(old, new),
        "inputs": map_diff(_inputs(old), _inputs(new)),
        "entities": [],
        "events": _events_diff(old, new),
        "changes": [],
        "changes_truncated": 0,
    }
    if crewai:
        name = flow_kickoff(new)[0] or flow_kickoff(old)[0]
        result["entities"] = _entities_diff(old["entities"], new["entities"], changes, context_lines, name)
        walk(
            {k: v for k, v in old.items() if k not in ("entities", "event_record")},
            {k: v for k, v in new.items() if k not in ("entities", "event_record")},
            [],
            changes,
        )
    else:
        walk(_without_events(old), _without_events(new), [], changes)
    result["changes"] = changes.items
    result["changes_truncated"] = changes.dropped
    return result


def is_crewai_document(doc: Any) -> bool:
    """True when ``doc`` has CrewAI's checkpoint shape: an object with a list of entity objects."""
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("entities"), list)
        and all(isinstance(e, dict) for e in doc["entities"])
    )


def task_status(task: Any) -> str:
    """Status of a task: "completed" if it has an output, "running" if it has a start time, else "pending".

    Rule read off CrewAI 1.15 snapshots: ``output`` is set at task completion, ``start_time`` at start.
    """
    if not isinstance(task, dict):
        return "pending"
    if task.get("output") is not None:
        return "completed"
    if task.get("start_time") is not None:
        return "running"
    return "pending"


def entity_roles(entities: list[Any]) -> list[str]:
    """The role of each entity of a checkpoint document: "main", "executor" or "placeholder".

    Rules read off CrewAI 1.15 checkpoints (fixtures crew_restore_src, flow_json):
    - "executor": CrewAI's internal per-agent executor flows. They carry ``executor_type``; in a document
      that holds a crew or an agent, every flow is one (restored ones lose ``executor_type``).
    - "placeholder": in a Flow's document, an unnamed flow whose state is only ``{"id"}`` and that has no
      completed methods: the stand-in ``Flow.fork``/restore puts first.
    - "main": the user's crew, agent or flow.
    """
    kinds = {e.get("entity_type") for e in entities if isinstance(e, dict)}
    has_owner = bool(kinds & {"crew", "agent"})
    roles = []
    for entity in entities:
        if not isinstance(entity, dict) or entity.get("entity_type") != "flow":
            roles.append("main")
        elif entity.get("executor_type") is not None or has_owner:
            roles.append("executor")
        elif _is_stub(entity):
            roles.append("placeholder")
        else:
            roles.append("main")
    return roles


def _is_stub(flow: dict[str, Any]) -> bool:
    state = flow.get("checkpoint_state")
    keys = set(state) if isinstance(state, dict) else set()
    return not flow.get("name") and keys <= {"id"} and not flow.get("checkpoint_completed_methods")


def entity_label(entity: Any) -> str:
    """``crew:research`` / ``flow:MyFlow`` / ``agent:Solo``: type and the best human name available."""
    if not isinstance(entity, dict):
        return "?"
    kind = str(entity.get("entity_type") or "entity")
    name = entity.get("name") or entity.get("role")
    return f"{kind}:{name}" if name else kind


def _label(entity: dict, index: int | None, role: str, flow_name: str | None) -> str:
    """``crew:research``; the user's unnamed Flow gets the class name its ``flow_started`` event records
    (``flow:DemoFlow``); other unnamed entities (executors, placeholders) their position: ``flow[1]``."""
    label = entity_label(entity)
    if ":" in label:
        return label
    if role == "main" and flow_name and entity.get("entity_type") == "flow":
        return f"flow:{flow_name}"
    return f"{label}[{index}]" if index else label


# ---------------------------------------------------------------------------------------------------
# sections


def _sizes(old: Any, new: Any) -> dict[str, int]:
    old_bytes, new_bytes = json_bytes(old), json_bytes(new)
    return {
        "old_bytes": old_bytes,
        "new_bytes": new_bytes,
        "delta_bytes": new_bytes - old_bytes,
        "old_event_bytes": json_bytes(_event_record(old)) if _event_record(old) is not None else 0,
        "new_event_bytes": json_bytes(_event_record(new)) if _event_record(new) is not None else 0,
    }


def _inputs(doc: Any) -> dict[str, Any]:
    """Kickoff inputs: every entity's ``checkpoint_inputs`` merged (crews); for a document whose first entity
    is a Flow (which records none), the ``inputs`` of its ``flow_started`` event."""
    merged: dict[str, Any] = {}
    if is_crewai_document(doc):
        for entity in doc["entities"]:
            inputs = entity.get("checkpoint_inputs")
            if isinstance(inputs, dict):
                merged.update(inputs)
        owners = {e.get("entity_type") for e in doc["entities"]} & {"crew", "agent"}
        if not merged and not owners:  # a Flow's document
            merged.update(flow_kickoff(doc)[1])
    return merged


# CrewAI runs each agent's work as a flow of this name; its flow_started events are not the user's flow.
_EXECUTOR_FLOW_NAME = "AgentExecutor"


def flow_kickoff(doc: Any) -> tuple[str | None, dict[str, Any]]:
    """(class name, kickoff inputs) of the user's Flow, from the first ``flow_started`` event that is not
    CrewAI's own agent executor; ``(None, {})`` when there is none. CrewAI 1.15 keeps both only there (the
    flow entity's ``name`` is usually null)."""
    nodes = _event_nodes(doc) or {}
    starts = [
        node["event"]
        for node in nodes.values()
        if isinstance(node, dict)
        and isinstance(node.get("event"), dict)
        and node["event"].get("type") == "flow_started"
        and node["event"].get("flow_name") != _EXECUTOR_FLOW_NAME
    ]
    if not starts:
        return None, {}
    first = min(
        starts, key=lambda e: e.get("emission_sequence") if isinstance(e.get("emission_sequence"), int) else 0
    )
    name = first.get("flow_name")
    inputs = first.get("inputs")
    return (name if isinstance(name, str) else None), (inputs if isinstance(inputs, dict) else {})


def _entities_diff(
    old: list[dict], new: list[dict], changes: ChangeList, context_lines: int, flow_name: str | None = None
) -> list[dict[str, Any]]:
    role = {id(e): r for side in (old, new) for e, r in zip(side, entity_roles(side))}
    pairs = match(
        old,
        new,
        [
            ("id", lambda e: (e.get("entity_type"), e.get("id")) if e.get("id") else None),
            ("name", lambda e: (e.get("entity_type"), e.get("name")) if e.get("name") else None),
            ("position", lambda e: (e.get("entity_type"), role[id(e)])),  # never a placeholder with a flow
        ],
    )
    out = []
    for old_index, new_index, matched_by, a, b, either in pairs:
        entry: dict[str, Any] = {
            "type": either.get("entity_type"),
            "name": either.get("name") or either.get("role"),
            "id": either.get("id"),
            "label": _label(
                either, new_index if new_index is not None else old_index, role[id(either)], flow_name
            ),
            "role": role[id(either)],
            "op": op(a, b),
            "old_index": old_index,
            "new_index": new_index,
            "matched_by": matched_by,
            "inputs": map_diff(_dict(a, "checkpoint_inputs"), _dict(b, "checkpoint_inputs")),
            "tasks": _tasks_diff(_list(a, "tasks"), _list(b, "tasks"), context_lines),
            "agents": _agents_diff(_list(a, "agents"), _list(b, "agents")),
            "flow": None,
        }
        if either.get("entity_type") == "flow" or "checkpoint_state" in either:
            entry["flow"] = _flow_diff(a or {}, b or {})
        if either.get("entity_type") == "agent":
            # A top-level agent (Agent.kickoff) is reported like a crew's agent.
            entry["agents"] = [
                d for d in _agents_diff([a] if a else [], [b] if b else []) if d["op"] != "unchanged"
            ]
        if a is not None and b is not None and new_index is not None:  # paired: both indexes exist
            walk(
                {k: v for k, v in a.items() if k not in _ENTITY_SECTIONS},
                {k: v for k, v in b.items() if k not in _ENTITY_SECTIONS},
                ["entities", new_index],
                changes,
            )
        out.append(entry)
    return out


def _tasks_diff(old: list[Any], new: list[Any], context_lines: int) -> list[dict[str, Any]]:
    old_tasks = [t for t in old if isinstance(t, dict)]
    new_tasks = [t for t in new if isinstance(t, dict)]
    pairs = match(
        old_tasks,
        new_tasks,
        [
            ("id", lambda t: t.get("id") or None),
            ("name", lambda t: t.get("name") or None),
        ],
    )
    out = []
    for _, _, matched_by, a, b, either in pairs:
        text_diff, added, removed = _output_diff(
            a, b, str(either.get("name") or either.get("id")), context_lines
        )
        out.append(
            {
                "id": either.get("id"),
                "name": either.get("name"),
                "op": op(a, b),
                "matched_by": matched_by,
                "old_status": task_status(a) if a is not None else None,
                "new_status": task_status(b) if b is not None else None,
                "output_diff": text_diff,
                "output_lines": {"added": added, "removed": removed},
                "fields": changed_keys(a, b),
            }
        )
    return out


def _output_diff(a: Any, b: Any, name: str, context_lines: int) -> tuple[str | None, int, int]:
    """Unified diff of the tasks' ``output.raw`` text; (None, 0, 0) when the outputs are equal."""
    old_text, new_text = _output_text(a), _output_text(b)
    if old_text == new_text:
        return None, 0, 0
    lines = list(
        unified_diff(  # difflib's format, near-linear (crewckpt.history.linediff)
            (old_text or "").splitlines(),
            (new_text or "").splitlines(),
            fromfile=f"a/{name}" if old_text is not None else "/dev/null",
            tofile=f"b/{name}" if new_text is not None else "/dev/null",
            lineterm="",
            n=context_lines,
        )
    )
    added = sum(1 for line in lines[2:] if line.startswith("+"))
    removed = sum(1 for line in lines[2:] if line.startswith("-"))
    return "\n".join(lines), added, removed


def _output_text(task: Any) -> str | None:
    if not isinstance(task, dict):
        return None
    output = task.get("output")
    if output is None:
        return None
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        raw = output.get("raw")
        if isinstance(raw, str):
            return raw
        if raw is not None:
            return jsontext.dumps(raw, indent=True)
    return jsontext.dumps(output, indent=True, sort_keys=True, default=str)


def _agents_diff(old: list[Any], new: list[Any]) -> list[dict[str, Any]]:
    old_agents = [x for x in old if isinstance(x, dict)]
    new_agents = [x for x in new if isinstance(x, dict)]
    pairs = match(
        old_agents,
        new_agents,
        [("id", lambda x: x.get("id") or None), ("role", lambda x: x.get("role") or None)],
    )
    out = []
    for _, _, matched_by, a, b, either in pairs:
        old_memory = a.get("memory") if a is not None else None
        new_memory = b.get("memory") if b is not None else None
        out.append(
            {
                "id": either.get("id"),
                "role": either.get("role"),
                "op": op(a, b),
                "matched_by": matched_by,
                "memory": None if same(old_memory, new_memory) else {"old": old_memory, "new": new_memory},
                "fields": changed_keys(a, b),
            }
        )
    return out


def _flow_diff(a: dict, b: dict) -> dict[str, Any]:
    state_changes = ChangeList(MAX_CHANGES)
    walk(a.get("checkpoint_state"), b.get("checkpoint_state"), ["checkpoint_state"], state_changes)
    old_methods = _str_set(a.get("checkpoint_completed_methods"))
    new_methods = _str_set(b.get("checkpoint_completed_methods"))
    return {
        "state": state_changes.items,
        "completed_methods": {
            "added": sorted(new_methods - old_methods),
            "removed": sorted(old_methods - new_methods),
        },
        "method_counts": map_diff(
            _dict(a, "checkpoint_method_counts"), _dict(b, "checkpoint_method_counts")
        ),
    }


def _events_diff(old: Any, new: Any) -> dict[str, Any] | None:
    old_nodes, new_nodes = _event_nodes(old), _event_nodes(new)
    if old_nodes is None and new_nodes is None:
        return None
    old_nodes, new_nodes = old_nodes or {}, new_nodes or {}
    added = Counter(_event_type(new_nodes[k]) for k in new_nodes.keys() - old_nodes.keys())
    removed = Counter(_event_type(old_nodes[k]) for k in old_nodes.keys() - new_nodes.keys())
    changed = sum(1 for k in old_nodes.keys() & new_nodes.keys() if not same(old_nodes[k], new_nodes[k]))
    return {
        "old_count": len(old_nodes),
        "new_count": len(new_nodes),
        "added_total": sum(added.values()),
        "removed_total": sum(removed.values()),
        "changed_total": changed,
        "added": dict(sorted(added.items(), key=lambda kv: (-kv[1], kv[0]))),
        "removed": dict(sorted(removed.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


# ---------------------------------------------------------------------------------------------------
# helpers




def _dict(entity: Any, key: str) -> dict[str, Any]:
    value = entity.get(key) if isinstance(entity, dict) else None
    return value if isinstance(value, dict) else {}


def _list(entity: Any, key: str) -> list[Any]:
    value = entity.get(key) if isinstance(entity, dict) else None
    return value if isinstance(value, list) else []


def _str_set(value: Any) -> set[str]:
    return (
        {str(v) for v in value}
        if isinstance(value, Iterable) and not isinstance(value, (str, dict))
        else set()
    )


def _event_record(doc: Any) -> Any:
    return doc.get("event_record") if isinstance(doc, dict) else None


def _event_nodes(doc: Any) -> dict[str, Any] | None:
    record = _event_record(doc)
    nodes = record.get("nodes") if isinstance(record, dict) else None
    return nodes if isinstance(nodes, dict) else None


def _without_events(doc: Any) -> Any:
    """The document minus ``event_record.nodes`` (reported by the events section instead)."""
    if _event_nodes(doc) is None:
        return doc
    record = {k: v for k, v in doc["event_record"].items() if k != "nodes"}
    return {**doc, "event_record": record}


def _event_type(node: Any) -> str:
    if isinstance(node, dict):
        event = node.get("event")
        if isinstance(event, dict) and isinstance(event.get("type"), str):
            return event["type"]
        if isinstance(node.get("type"), str):
            return node["type"]
    return "unknown"



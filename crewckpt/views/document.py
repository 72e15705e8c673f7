"""What a CrewAI checkpoint document means to the store: its listing summary and its split hints.

The generic store (:mod:`crewckpt.history`) knows nothing of CrewAI; :data:`CREWAI` is the
:class:`~crewckpt.history.profile.Profile` the CrewAI-facing code gives it (the CrewAI writer, ``ckpt
import``, the CLI and the TUI). Pure JSON: no ``crewai`` import.

Summary keys (in this order, then the store's ``logical_bytes``): ``entities`` ``[[entity_type, name],
...]`` for each entity of ``entities`` that has an ``entity_type`` (name: ``name``, else ``role``, else "");
``tasks_done`` / ``tasks_total`` over every entity's ``tasks`` (done: ``output`` is set); ``event_count``:
nodes in ``event_record.nodes``. A document without that shape gets zeros and no entities. These are the
keys and meaning of the summary slot of format-1 commits (objects_format.md), so old and new commits list
alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from crewckpt.history.profile import Profile
from crewckpt.history.snapshot import Frozen, Parts

SEPARATE_KEYS = frozenset({"agent", "agent_executor", "output", "memory", "prompt_context", "description",
                           "expected_output", "checkpoint_original_description",
                           "checkpoint_original_expected_output"})
"""CrewAI shape hints: containers and strings under these keys are their own trees (blobs) once over 256 bytes.
A crew's every task embeds its agent, and the agent's executor changes on every event: inline, each change
would rewrite every task; as links, the tasks stay put. Task outputs and memory also become separately
addressable (diff). A task's long texts (its prompt context, which in a sequential crew holds every earlier
task's output, and its description and expected output) are blobs: each checkpoint rewrites every task's
body (its agent link changed), and with the texts inline that was O(the whole run's text) per checkpoint."""


def _plain(v: Any) -> Any:
    """``v`` without its :class:`Frozen` / :class:`Parts` wrapping (a Parts value becomes a new dict/list)."""
    while isinstance(v, Frozen):
        v = v.value
    return v.plain() if isinstance(v, Parts) else v


def _field(v: Any, key: str) -> Any:
    """``v[key]`` of a dict (also Frozen or Parts), else None; a Parts value is not rebuilt."""
    while isinstance(v, Frozen):
        v = v.value
    if isinstance(v, Parts) and not v.array:
        for p in v.pieces:
            p = p.value if isinstance(p, Frozen) else p
            if isinstance(p, dict) and key in p:
                return p[key]
        return None
    return v.get(key) if isinstance(v, dict) else None


def entity_name(e: dict[str, Any]) -> str:
    """A crew's or flow's ``name``, an agent's ``role``, else the empty string."""
    for k in ("name", "role"):
        v = e.get(k)
        if isinstance(v, str) and v:
            return v
    return ""


def summarize(doc: Any) -> dict[str, Any]:
    """The CrewAI summary keys of one checkpoint document (see the module docstring); ``doc`` may hold
    :class:`Frozen` and :class:`Parts` values. Never raises on a JSON value."""
    doc = _plain(doc)
    entities: list[list[str]] = []
    done = total = events = 0
    if isinstance(doc, dict):
        ents = _plain(doc.get("entities"))
        if isinstance(ents, list):
            for e in ents:
                e = _plain(e)
                if not isinstance(e, dict) or not isinstance(e.get("entity_type"), str):
                    continue
                entities.append([e["entity_type"], entity_name(e)])
                tasks = _plain(e.get("tasks"))
                if isinstance(tasks, list):
                    total += len(tasks)
                    done += sum(1 for t in tasks if _field(t, "output") is not None)
        rec = _plain(doc.get("event_record"))
        nodes = rec.get("nodes") if isinstance(rec, dict) else None
        while isinstance(nodes, Frozen):
            nodes = nodes.value
        if isinstance(nodes, (dict, Parts)):  # a Parts value is counted, not rebuilt
            events = len(nodes)
    return {"entities": entities, "tasks_done": done, "tasks_total": total, "event_count": events}


CREWAI = Profile(name="crewai", summarize=summarize, separate_keys=SEPARATE_KEYS)
"""The profile for CrewAI checkpoint documents: :func:`summarize` and :data:`SEPARATE_KEYS`."""


@dataclasses.dataclass(frozen=True, slots=True)
class CrewSummary:
    """A commit's summary read as CrewAI's: entities ``((entity_type, name), ...)``, tasks done / total,
    events, and the document's size in bytes (compact JSON). Missing or malformed keys read as empty / 0
    (a commit written by a non-CrewAI profile, or a damaged cache row)."""

    entities: tuple[tuple[str, str], ...] = ()
    tasks_done: int = 0
    tasks_total: int = 0
    event_count: int = 0
    logical_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        """The ``summary`` record of docs/cli-json.md (entities as ``[type, name]`` pairs)."""
        return {"entities": [list(e) for e in self.entities], "tasks_done": self.tasks_done,
                "tasks_total": self.tasks_total, "event_count": self.event_count,
                "logical_bytes": self.logical_bytes}


def crewai_summary(doc: Any) -> CrewSummary:
    """The :class:`CrewSummary` of a document not in a store (a CrewAI file being listed): what
    :data:`CREWAI` would record for it."""
    return crew_summary(CREWAI.summary(doc))


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def crew_summary(summary: Mapping[str, Any] | None) -> CrewSummary:
    """``CommitInfo.summary`` (or :meth:`CREWAI.summary <Profile.summary>`'s result) as a :class:`CrewSummary`."""
    if not summary:
        return CrewSummary()
    get = summary.get
    ents, done, total, events, size = (get("entities"), get("tasks_done"), get("tasks_total"), get("event_count"),
                                       get("logical_bytes"))
    if type(done) is int and type(total) is int and type(events) is int and type(size) is int:
        try:  # the shape the CrewAI profile writes (`ckpt log` reads thousands): no per-field checks
            return CrewSummary(tuple([(t, n) for t, n in ents]) if ents else (), done, total, events, size)
        except (TypeError, ValueError):
            pass
    if type(size) is int and done is None and total is None and events is None and ents is None:
        return CrewSummary(logical_bytes=size)  # a generic profile's summary
    entities = tuple((str(e[0]), str(e[1])) for e in ents if isinstance(e, (list, tuple)) and len(e) == 2) \
        if isinstance(ents, (list, tuple)) else ()
    return CrewSummary(entities, _int(summary.get("tasks_done")), _int(summary.get("tasks_total")),
                       _int(summary.get("event_count")), _int(summary.get("logical_bytes")))

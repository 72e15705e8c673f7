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
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from crewckpt.errors import DamagedCheckpoint
from crewckpt.history.jsontext import copy_json
from crewckpt.history.limits import ReadBudget
from crewckpt.history.profile import Profile
from crewckpt.history.snapshot import Frozen, Parts
from crewckpt.history.summary import json_size

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


# -- agent references (docs/write-path.md "Agent references"; objects_format.md section 10) --------------------

SHAPE_KEY = "$crewckpt"
"""Top-level key of a stored CrewAI document whose tasks name their agent by reference. Its value is
``{"agent_refs": [i, ...]}``: the entities (by index) whose tasks may hold references. CrewAI never writes a
key starting with ``$`` at the top level; :func:`crewai_json` removes it."""

REF_KEY = "$ref"
REFS_VERSION = 3
"""The store format version a store needs once it holds a document with :data:`SHAPE_KEY` (older crewckpt
would hand CrewAI the references: objects_format.md section 10)."""

_POINTER = re.compile(r"#/entities/(0|[1-9][0-9]{0,8})/agents/(0|[1-9][0-9]{0,8})")


def agent_ref(entity: int, agent: int) -> dict[str, str]:
    """The stored form of "the agent ``entities[entity].agents[agent]``" (a JSON Reference)."""
    return {REF_KEY: f"#/entities/{entity}/agents/{agent}"}


def is_ref_shaped(value: Any) -> bool:
    """True for a dict holding the key ``$ref``: in an entity listed by :data:`SHAPE_KEY`, a task's agent of
    that shape is a reference, so the writer never lists an entity whose real agent dump has that key."""
    return isinstance(value, dict) and REF_KEY in value


def store_version(doc: Any) -> int:
    """The store format version ``doc`` needs: :data:`REFS_VERSION` with :data:`SHAPE_KEY`, else 2."""
    return REFS_VERSION if isinstance(doc, dict) and SHAPE_KEY in doc else 2


def _task_agent(task: Any) -> Any:
    """``task["agent"]`` of a task value (plain, Frozen, or a Frozen Parts of Frozen pieces), else None."""
    while isinstance(task, Frozen):
        task = task.value
    if isinstance(task, Parts):
        for p in task.pieces:
            p = p.value if isinstance(p, Frozen) else p
            if isinstance(p, dict) and "agent" in p:
                return p["agent"]
        return None
    return task.get("agent") if isinstance(task, dict) else None


def logical_size(doc: Any, size: int) -> int:
    """``size`` (``doc``'s stored compact JSON length) as CrewAI's JSON of it, references expanded: the
    marker's bytes out, each reference's replaced by its agent's (``doc`` may hold Frozen / Parts values;
    the agents are sized from their cached sizes). A malformed reference leaves ``size`` as it is."""
    if not isinstance(doc, dict) or SHAPE_KEY not in doc:
        return size
    try:
        shape = _plain(doc[SHAPE_KEY])
        out = size - json_size(SHAPE_KEY) - json_size(shape) - 2  # ',"$crewckpt":{...}': comma and colon
        entities = _plain(doc.get("entities"))
        delta: dict[str, int] = {}  # pointer -> its agent's size minus the reference's
        for i in set(shape["agent_refs"]):
            agents = None
            for task in _plain(_field(entities[i], "tasks")):
                ref = _task_agent(task)
                if type(ref) is not dict or REF_KEY not in ref:
                    continue
                pointer = ref[REF_KEY]
                d = delta.get(pointer)
                if d is None:
                    m = _POINTER.fullmatch(pointer)
                    if m is None or int(m.group(1)) != i:
                        return size
                    agents = _plain(_field(entities[i], "agents")) if agents is None else agents
                    d = delta[pointer] = json_size(agents[int(m.group(2))]) - json_size(ref)
                out += d
        return out
    except Exception:  # a hand-made document: its stored size
        return size


def _copy(value: Any) -> tuple[Any, int]:
    """An independent copy of a JSON value (each task gets its own agent object, as CrewAI's JSON has) and
    its compact JSON size in bytes."""
    copied, size = copy_json(value)
    return copied, json_size(value) if size is None else size


def _target(entities: Sequence[Any] | Mapping[int, Any], ref: Any) -> tuple[Any, str | None]:
    """(the agent ``ref`` names, None) or (None, why it names none)."""
    pointer = ref.get(REF_KEY) if isinstance(ref, dict) else None
    if len(ref) != 1 or not isinstance(pointer, str):
        return None, "is not a reference to an agent of a crew ({\"$ref\": \"#/entities/I/agents/J\"} only)"
    m = _POINTER.fullmatch(pointer)
    if m is None:
        return None, f"names {pointer[:80]!r}, which is not an agent of a crew (#/entities/I/agents/J)"
    i, j = int(m.group(1)), int(m.group(2))
    entity = entities.get(i) if isinstance(entities, Mapping) else (entities[i] if i < len(entities) else None)
    agents = entity.get("agents") if isinstance(entity, dict) else None
    if not isinstance(agents, list):
        return None, f"names {pointer}, but entities[{i}] is not a crew with agents"
    if j >= len(agents):
        return None, f"names {pointer}, out of range (entities[{i}] has {len(agents)} agent(s))"
    if not isinstance(agents[j], dict) or is_ref_shaped(agents[j]):
        return None, f"names {pointer}, which is not an agent object"
    return agents[j], None


def expand_entity(entity: Any, index: int, entities: Sequence[Any] | Mapping[int, Any], where: str,
                  budget: ReadBudget | None = None) -> Any:
    """``entity`` (plain JSON) with each task's agent reference replaced by a copy of the agent it names in
    ``entities`` (a new entity and tasks list; untouched tasks are shared). ``budget``, when given, is
    charged each copy's bytes: a small stored document of many references to one big agent expands by their
    product, so an untrusted store's is bounded like any read (objects_format.md 7.1).

    Raises:
        DamagedCheckpoint: a reference that names no agent object (one line naming the task).
        DocumentTooLarge: the copies pass ``budget`` (one line naming the limit and how to raise it)."""
    tasks = entity.get("tasks") if isinstance(entity, dict) else None
    if not isinstance(tasks, list):
        return entity
    out: list[Any] = []
    for k, task in enumerate(tasks):
        ref = task.get("agent") if isinstance(task, dict) else None
        if not is_ref_shaped(ref):
            out.append(task)
            continue
        agent, why = _target(entities, ref)
        if why is not None:
            raise DamagedCheckpoint(f"{where}: entities[{index}].tasks[{k}].agent {why}; the stored document "
                                    "is damaged or was not written by crewckpt (`ckpt show --stored` prints it "
                                    "as stored)")
        copied, size = _copy(agent)
        if budget is not None:
            budget.charge_bytes(size)
        out.append({key: (copied if key == "agent" else v) for key, v in task.items()})
    return {key: (out if key == "tasks" else v) for key, v in entity.items()}


def crewai_json(doc: Any, where: str = "checkpoint") -> Any:
    """The CrewAI JSON of a stored checkpoint document: the ONE expansion every CrewAI-facing read applies
    (restore, export, diff, TUI, `ckpt show --raw`). A document without :data:`SHAPE_KEY` (written before
    agent references, imported from CrewAI, or by hand) is returned as it is, the same object, even when a
    task's agent looks like a reference; with it, the key is dropped and every task agent reference of the
    entities it lists becomes a copy of the agent it names. ``where`` names the checkpoint in errors.

    Raises:
        DamagedCheckpoint: a :data:`SHAPE_KEY` value this crewckpt does not know, or a bad reference (out of
            range, not an object, not ``#/entities/I/agents/J``): one line; nothing stored changes.
        DocumentTooLarge: the agents' copies add up to more than the read limit (``$CKPT_MAX_READ_BYTES``,
            :data:`crewckpt.history.limits.MAX_READ_BYTES`)."""
    if not isinstance(doc, dict) or SHAPE_KEY not in doc:
        return doc
    shape = doc[SHAPE_KEY]
    listed = shape.get("agent_refs") if isinstance(shape, dict) and len(shape) == 1 else None
    if not (isinstance(listed, list) and all(type(i) is int and i >= 0 for i in listed)):
        raise DamagedCheckpoint(f"{where}: its {SHAPE_KEY} key holds {orjson.dumps(shape, default=str)[:80]!r}, "
                                "a document shape this crewckpt does not know; upgrade crewckpt")
    out = {k: v for k, v in doc.items() if k != SHAPE_KEY}
    entities = doc.get("entities")
    if isinstance(entities, list):
        wanted = set(listed)
        budget = ReadBudget(what=f"checkpoint {where}", doing="expand", kwargs=False)
        out["entities"] = [expand_entity(e, i, entities, where, budget) if i in wanted else e
                           for i, e in enumerate(entities)]
    return out


def refuse_shape_key(doc: Any) -> None:
    """Refuse a document that arrives from outside (a CrewAI checkpoint being imported) holding
    :data:`SHAPE_KEY`: every read would expand it, i.e. it would come back rewritten.

    Raises:
        DamagedCheckpoint: one line naming the key and the fix."""
    if isinstance(doc, dict) and SHAPE_KEY in doc:
        raise DamagedCheckpoint(f"it holds a top-level {SHAPE_KEY!r} key, crewckpt's own (agent references), never "
                                "CrewAI's: stored, it would be read back rewritten; remove that key to import it")


CREWAI = Profile(name="crewai", summarize=summarize, separate_keys=SEPARATE_KEYS, store_version=store_version,
                 logical_size=logical_size)
"""The profile for CrewAI checkpoint documents: :func:`summarize`, :data:`SEPARATE_KEYS`, :func:`store_version`
and :func:`logical_size`. Its splitter caches keep the default bound (``Profile.cache_bytes`` None): a 4 MiB
bound saved ~10 MB of RSS at 100 tasks (within the runs' noise) but made the last 100 of 1,000 commits of a
plain 1.6 MB CrewAI-shaped document (what `ckpt import` commits) 3x slower: 77 / 80 ms vs 26 / 25 ms."""


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

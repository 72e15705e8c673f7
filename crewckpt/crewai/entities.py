"""Dumping a crew entity in pieces, so a checkpoint re-processes only the tasks and agents that changed.

A crew's dump embeds every task, and every task embeds its agent; the agent's executor changes on every
event, so the dump as a whole changes every checkpoint, and parsing, redacting, walking and hashing it all
grows with the number of tasks. :class:`CrewDumper` asks pydantic (C speed) for the same JSON in three parts,
through the crew's own serializers (``include``/``exclude`` only select, they do not change how a field is
written): the crew without its tasks, the tasks without their agent, and each distinct agent object once
through a task that holds it. Only a part whose content differs from the previous checkpoint's is parsed,
redacted and cleaned again (the fingerprint is the pydantic dump itself: a changed value always shows in
it; object identity is never trusted alone); the rest are the same :class:`~crewckpt.history.snapshot.Frozen`
objects as last time, which the store reuses in O(1).

The first document of each dumper is also dumped whole and compared byte for byte; if the pieces do not
give exactly CrewAI's dump (another crewai version, a custom serializer), that dumper falls back to whole
dumps for good. Any error in the pieced path does the same.

Memory: the previous checkpoint's parts only (one dict and two Frozen values per task, one Frozen per
agent), about twice the JSON size of the crew.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING, Any

import orjson

from crewckpt.history.snapshot import Frozen, Parts, Refreezer

if TYPE_CHECKING:
    from crewckpt.crewai.snapshot import SnapshotBuilder

logger = logging.getLogger("crewckpt.crewai")


def plain(doc: Any) -> Any:
    """A document from :meth:`SnapshotBuilder.document` as bare JSON: :class:`Frozen` and :class:`Parts` values
    unwrapped (new containers down to them; their values are shared, not copied)."""
    if isinstance(doc, Frozen):
        return plain(doc.value)
    if isinstance(doc, Parts):
        return plain(doc.plain())
    if isinstance(doc, dict):
        return {k: plain(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [plain(v) for v in doc]
    return doc


class IdWeakMap:
    """Object (by identity: pydantic models are unhashable) -> value; an entry goes with its object."""

    def __init__(self) -> None:
        self._d: dict[int, tuple[weakref.ref[Any], Any]] = {}
        self._lock = threading.Lock()

    def get(self, obj: Any) -> Any:
        entry = self._d.get(id(obj))
        if entry is not None and entry[0]() is obj:
            return entry[1]
        return None

    def set(self, obj: Any, value: Any) -> None:
        key = id(obj)

        def forget(_ref: weakref.ref[Any]) -> None:
            self._d.pop(key, None)

        with self._lock:
            self._d[key] = (weakref.ref(obj, forget), value)


def _after(cls: type, field: str) -> frozenset[str]:
    """Names of ``cls``'s fields declared after ``field`` (pydantic dumps fields in declaration order)."""
    names = list(getattr(cls, "model_fields", {}))
    return frozenset(names[names.index(field) + 1:]) if field in names else frozenset()


def _frozen(value: Any) -> Frozen:
    try:
        return Frozen(value, orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):  # lone surrogates: the store sizes it
        return Frozen(value)


def _insert_before(d: dict[str, Any], after: frozenset[str], key: str, value: Any) -> dict[str, Any]:
    """``d`` with ``key: value`` put before the first key in ``after`` (at the end when none is)."""
    out: dict[str, Any] = {}
    placed = False
    for k, v in d.items():
        if not placed and k in after:
            out[key] = value
            placed = True
        out[k] = v
    if not placed:
        out[key] = value
    return out


class CrewDumper:
    """Dumps one crew per checkpoint, reusing the parts that did not change (see the module docstring).

    ``ok``: None until the first document was checked against a whole dump; False once the pieced path is
    off for this dumper.
    """

    def __init__(self, builder: SnapshotBuilder) -> None:
        self.builder = builder
        self.ok: bool | None = None
        self._tasks: list[tuple[Any, Frozen, Frozen, Frozen, Frozen]] = []  # raw, prefix, agent piece, suffix, task
        self._agents: dict[str, Frozen] = {}  # agent dump text -> its {"agent": ...} piece (last checkpoint's)
        self._top = Refreezer()
        self._agent_refreezers = IdWeakMap()  # agent object -> Refreezer (reuse is decided by content)

    def dump(self, crew: Any) -> Any:
        """The crew's checkpoint value: equal, once unwrapped, to ``builder.dump_model(crew)``."""
        b = self.builder
        if self.ok is False:
            return b.dump_model(crew)
        try:
            out = self._pieced(crew)
        except Exception:
            logger.debug("crewckpt: dumping %s in pieces failed; dumping it whole from now on",
                         type(crew).__name__, exc_info=True)
            self.ok = False
            return b.dump_model(crew)
        if self.ok is None:
            whole = b.dump_model(crew)
            try:
                same = orjson.dumps(plain(out)) == orjson.dumps(whole)
            except (TypeError, orjson.JSONEncodeError):
                same = False
            self.ok = same
            if not same:
                logger.debug("crewckpt: %s dumped in pieces differs from its whole dump; dumping it whole",
                             type(crew).__name__)
                self._tasks = []
                self._agents = {}
                self._top = Refreezer()
                return whole
        return out

    def _clean(self, model: Any, value: Any, text: str | None) -> Any:
        b = self.builder
        b._drop_bad_callbacks(model, value)
        return b.redactor.apply(value, text)

    def _pieced(self, crew: Any) -> dict[str, Any]:
        tasks = list(crew.tasks)
        top_text = crew.model_dump_json(exclude={"tasks"}, warnings=False)
        top = self._top.values(self._clean(crew, orjson.loads(top_text), top_text))
        tasks_text = crew.model_dump_json(include={"tasks"}, exclude={"tasks": {"__all__": {"agent"}}},
                                          warnings=False)
        dumped = orjson.loads(tasks_text)["tasks"]
        if len(dumped) != len(tasks):
            raise ValueError("task count changed while dumping")
        agents: dict[int, Frozen] = {}  # this checkpoint: agent object -> piece (same object, same moment)
        seen: dict[str, Frozen] = {}
        old = self._tasks
        new: list[tuple[Any, Frozen, Frozen, Frozen, Frozen]] = []
        values: list[Frozen] = []
        for j, (task, raw) in enumerate(zip(tasks, dumped)):
            agent = task.agent
            piece = agents.get(id(agent)) if agent is not None else None
            if piece is None:
                if agent is None:
                    text = '{"agent":null}'
                else:
                    text = crew.model_dump_json(include={"tasks": {j: {"agent"}}}, warnings=False)
                piece = seen.get(text) or self._agents.get(text)
                if piece is None:
                    value = None if agent is None else orjson.loads(text)["tasks"][0]["agent"]
                    if value is not None:
                        refreeze = self._agent_refreezers.get(agent)
                        if refreeze is None:
                            refreeze = Refreezer()
                            self._agent_refreezers.set(agent, refreeze)
                        value = refreeze(self._clean(agent, value, text))
                    piece = _frozen({"agent": value})
                seen[text] = piece
                if agent is not None:
                    agents[id(agent)] = piece
            self.builder._drop_bad_callbacks(task, raw)  # the callback's fate depends on the live object
            prev = old[j] if j < len(old) else None
            if prev is not None and prev[0] == raw:
                prefix, suffix = prev[1], prev[3]
            else:
                after = _after(type(task), "agent")
                cut = next((i for i, k in enumerate(raw) if k in after), len(raw))
                keys = list(raw)
                redacted = self.builder.redactor.apply(orjson.loads(orjson.dumps(raw)))
                prefix = _frozen({k: redacted[k] for k in keys[:cut]})
                suffix = _frozen({k: redacted[k] for k in keys[cut:]})
            if prev is not None and prev[1] is prefix and prev[2] is piece and prev[3] is suffix:
                value_f = prev[4]
            else:
                value_f = Frozen(Parts([prefix, piece, suffix], join=True))
            new.append((raw, prefix, piece, suffix, value_f))
            values.append(value_f)
        self._tasks = new
        self._agents = seen
        return _insert_before(top, _after(type(crew), "tasks"), "tasks", values)

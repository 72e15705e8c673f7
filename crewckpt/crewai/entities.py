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

The tasks' dump is one text; a task whose text is byte-equal to last checkpoint's at the same position (and
whose callbacks would be kept or dropped alike) is not parsed at all: the text is parsed from the first task
that differs (usually the running one, near the end). A task whose agent's dump is byte-equal to the crew's
``agents[j]`` (as compared on every checkpoint, orjson text of the cleaned values) names it by reference,
``{"$ref": "#/entities/I/agents/J"}`` (:mod:`crewckpt.views.document`; every CrewAI-facing read expands it
back): its piece never changes, so an unchanged task is the same Frozen value as last checkpoint and keeps
its tree id. Any other agent's piece is one Frozen object shared by all its tasks, so the store walks it once
per checkpoint however many tasks embed it.

The first document of each dumper is also dumped whole and compared byte for byte; if the pieces do not
give exactly CrewAI's dump (another crewai version, a custom serializer), that dumper falls back to whole
dumps for good. Any error in the pieced path does the same.

Memory: the previous checkpoint's parts only (one parsed dict, two Frozen values and the dump text per task,
one Frozen per agent), about three times the JSON size of the crew.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import weakref
from typing import TYPE_CHECKING, Any

import orjson
import zstandard
from crewai.types.callback import _is_non_roundtrippable, callable_to_string
from pydantic import BaseModel

from crewckpt.history.snapshot import Frozen, Parts, Refreezer
from crewckpt.history.summary import json_size
from crewckpt.views.document import agent_ref, expand_entity, is_ref_shaped

if TYPE_CHECKING:
    from crewckpt.crewai.snapshot import SnapshotBuilder

logger = logging.getLogger("crewckpt.crewai")


def _is_callback_field(info: Any) -> bool:
    """True for fields typed with CrewAI's SerializableCallable (directly or in a list)."""
    stack = [info.annotation, *info.metadata]
    seen = 0
    while stack and seen < 50:
        seen += 1
        item = stack.pop()
        if getattr(item, "func", None) is callable_to_string:
            return True
        stack.extend(getattr(item, "__metadata__", ()) or ())
        stack.extend(getattr(item, "__args__", ()) or ())
    return False


_CALLBACK_FIELDS: dict[type, tuple[str, ...]] = {}
# attributes through which a Crew, Task, Agent or event reaches models that hold callbacks
_CALLBACK_CARRIERS = ("tasks", "agents", "agent", "manager_agent", "task", "from_task", "from_agent")


def callback_fields(cls: type[BaseModel]) -> tuple[str, ...]:
    """Names of ``cls``'s fields that hold CrewAI serializable callables (cached per class)."""
    names = _CALLBACK_FIELDS.get(cls)
    if names is None:
        names = tuple(n for n, f in cls.model_fields.items() if _is_callback_field(f))
        _CALLBACK_FIELDS[cls] = names
    return names


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


class Encoded(Frozen):
    """A :class:`Frozen` JSON value held only as its compact JSON bytes (orjson): ``value`` parses them again on
    each access (C speed). For values the store splits once and then reuses by their cached representation
    (event nodes): keeping the bytes instead of the parsed dicts costs about a tenth of the memory.

    :meth:`compress` then keeps the bytes zstd-compressed instead (a CrewAI event's JSON: ~5x smaller;
    ``json_bytes`` becomes None, :meth:`encoded` and ``value`` decompress them: lossless, so every later
    use sees exactly the same bytes).

    Args:
        json_bytes: the value's compact JSON, exactly as ``orjson.dumps`` writes it.
    """

    __slots__ = ("_z",)

    def __init__(self, json_bytes: bytes) -> None:  # no super().__init__: it would assign ``value``
        self.json_bytes = json_bytes
        self.size = len(json_bytes)
        self._rep = None
        self._token = None
        self._z: bytes | None = None

    def encoded(self) -> bytes:
        """The value's compact JSON bytes (decompressed when :meth:`compress` was called)."""
        raw = self.json_bytes  # read once: compress() sets _z before it clears json_bytes (another thread)
        if raw is not None:
            return raw
        return zstandard.decompress(self._z or b"", max_output_size=self.size or 0)  # type: ignore[no-any-return]

    def compress(self, cctx: zstandard.ZstdCompressor) -> None:
        """Keep the bytes zstd-compressed with ``cctx`` (the caller's: zstandard contexts are not thread-safe)
        when that is smaller; then ``json_bytes`` is None. Idempotent."""
        raw = self.json_bytes
        if raw is None or len(raw) < _COMPRESS_MIN:
            return
        z = cctx.compress(raw)
        if len(z) < len(raw):
            self._z = z
            self.json_bytes = None

    @property  # type: ignore[override]
    def value(self) -> Any:
        """The value, parsed from its bytes (a new object each time: callers never share it)."""
        return orjson.loads(self.encoded())

    def __repr__(self) -> str:
        b = self.encoded()
        return f"Encoded({b[:60]!r}...)" if len(b) > 60 else f"Encoded({b!r})"


_COMPRESS_MIN = 128  # bytes: a zstd frame costs ~10 B, so tiny nodes stay raw


def _after(cls: type, field: str) -> frozenset[str]:
    """Names of ``cls``'s fields declared after ``field`` (pydantic dumps fields in declaration order)."""
    names = list(getattr(cls, "model_fields", {}))
    return frozenset(names[names.index(field) + 1:]) if field in names else frozenset()


def _frozen(value: Any) -> Frozen:
    """``value`` frozen with its compact JSON; a value holding Frozen / Parts values (an agent's reused parts)
    is sized from them instead (so the store's size of a task never walks its agent)."""
    try:
        return Frozen(value, orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        pass
    try:
        return Frozen(value, size=json_size(value))
    except Exception:  # lone surrogates, too deep: the store sizes it (and reports what is wrong)
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


_TOP_DEPTH = 5  # the crew without its tasks is opened down to crew.agents[i].agent_executor.execution_context,
# the part CrewAI changes on every event (its emission sequence), so the rest of each agent is reused


class CrewDumper:
    """Dumps one crew per checkpoint, reusing the parts that did not change (see the module docstring).

    ``ok``: None until the first document was checked against a whole dump; False once the pieced path is
    off for this dumper. ``refs``: whether the last value returned holds agent references (the document
    must then list the crew's entity index under ``$crewckpt``).
    """

    def __init__(self, builder: SnapshotBuilder) -> None:
        self.builder = builder
        self.ok: bool | None = None
        self.refs = False
        self._ref_pieces: dict[str, Frozen] = {}  # pointer -> its {"agent": {"$ref": pointer}} piece, for good
        self._tasks: list[_Task] = []  # last checkpoint's, by position
        self._agents: dict[str, Frozen] = {}  # agent dump text -> its {"agent": ...} piece (last checkpoint's)
        self._top = Refreezer(depth=_TOP_DEPTH)
        self._agent_refreezers = IdWeakMap()  # agent object -> Refreezer (reuse is decided by content)

    def dump(self, crew: Any, index: int = 0, *, refs: bool = True) -> Any:
        """The crew's checkpoint value: equal, once unwrapped and its agent references expanded
        (:func:`crewckpt.views.document.expand_entity`), to ``builder.dump_model(crew)``. ``index``: the
        crew's position in the document's ``entities`` (references name it); ``refs``: whether tasks may name
        their agent by reference (sets :attr:`refs`)."""
        b = self.builder
        self.refs = False
        if self.ok is False:
            return b.dump_model(crew)
        try:
            out = self._pieced(crew, index if refs else None)
        except Exception:
            logger.debug("crewckpt: dumping %s in pieces failed; dumping it whole from now on",
                         type(crew).__name__, exc_info=True)
            self.ok = False
            self.refs = False
            return b.dump_model(crew)
        if self.ok is None:
            whole = b.dump_model(crew)
            try:
                flat = plain(out)
                if self.refs:
                    flat = expand_entity(flat, index, {index: flat}, type(crew).__name__)
                same = orjson.dumps(flat) == orjson.dumps(whole)
            except Exception:  # unencodable, or a reference that does not expand: not this dumper's shape
                same = False
            self.ok = same
            if not same:
                self.refs = False
                logger.debug("crewckpt: %s dumped in pieces differs from its whole dump; dumping it whole",
                             type(crew).__name__)
                self._tasks = []
                self._agents = {}
                self._top = Refreezer(depth=_TOP_DEPTH)
                return whole
        return out

    def _clean(self, model: Any, value: Any, text: str | None) -> Any:
        b = self.builder
        b._drop_bad_callbacks(model, value)
        return b.redactor.apply(value, text)

    def _pieced(self, crew: Any, index: int | None) -> dict[str, Any]:
        """The pieced value (see :meth:`dump`); ``index`` None: no agent references. Sets :attr:`refs`."""
        tasks = list(crew.tasks)
        top_text = crew.model_dump_json(exclude={"tasks"}, warnings=False)
        top_value = self._clean(crew, orjson.loads(top_text), top_text)
        top = self._top.values(top_value)
        # the crew's own agents: a task's agent named by reference must dump byte-equal to one of them
        listed = top_value.get("agents") if index is not None and isinstance(top_value, dict) else None
        crew_agents = list(getattr(crew, "agents", None) or ()) if isinstance(listed, list) else []
        position: dict[int, int] = {}
        if len(crew_agents) == len(listed or ()):
            for pos, a in enumerate(crew_agents):
                position.setdefault(id(a), pos)
        listed_bytes: dict[int, bytes | None] = {}
        tasks_text = crew.model_dump_json(include={"tasks"}, exclude={"tasks": {"__all__": {"agent"}}},
                                          warnings=False)
        old = self._tasks
        verdicts = [_callback_verdict(t) for t in tasks]
        dumped, texts = self._task_dumps(tasks_text, verdicts, old)
        agents: dict[int, Frozen] = {}  # this checkpoint: agent object -> piece (same object, same moment)
        seen: dict[str, Frozen] = {}
        new: list[_Task] = []
        values: list[Frozen] = []
        for j, (task, raw) in enumerate(zip(tasks, dumped)):
            agent = task.agent
            piece = agents.get(id(agent)) if agent is not None else None
            if piece is None:
                if agent is None:
                    text = '{"agent":null}'
                else:
                    text = crew.model_dump_json(include={"tasks": {j: {"agent"}}}, warnings=False)
                piece = self._ref_piece(agent, text, index, position, listed, listed_bytes)
                if piece is None:
                    piece = seen.get(text) or self._agents.get(text)
                    if piece is None:
                        piece = self._agent_piece(agent, text)
                    seen[text] = piece
                if agent is not None:
                    agents[id(agent)] = piece
            prev = old[j] if j < len(old) else None
            if raw is None:  # its text is byte-equal to last checkpoint's, and so are its callbacks' fates
                assert prev is not None
                raw, prefix, suffix = prev.raw, prev.prefix, prev.suffix
            else:
                self.builder._drop_bad_callbacks(task, raw)  # the callback's fate depends on the live object
                if prev is not None and prev.raw == raw:
                    prefix, suffix = prev.prefix, prev.suffix
                else:
                    after = _after(type(task), "agent")
                    cut = next((i for i, k in enumerate(raw) if k in after), len(raw))
                    keys = list(raw)
                    redacted = self.builder.redactor.apply(orjson.loads(orjson.dumps(raw)))
                    prefix = _frozen({k: redacted[k] for k in keys[:cut]})
                    suffix = _frozen({k: redacted[k] for k in keys[cut:]})
            if prev is not None and prev.prefix is prefix and prev.piece is piece and prev.suffix is suffix:
                value_f = prev.value
            else:
                value_f = Frozen(Parts([prefix, piece, suffix], join=True), size=_joined_size((prefix, piece, suffix)))
            new.append(_Task(raw, prefix, piece, suffix, value_f, texts[j], verdicts[j]))
            values.append(value_f)
        self._tasks = new
        self._agents = seen
        return _insert_before(top, _after(type(crew), "tasks"), "tasks", values)

    def _ref_piece(self, agent: Any, text: str, index: int | None, position: dict[int, int], listed: Any,
                   listed_bytes: dict[int, bytes | None]) -> Frozen | None:
        """The piece ``{"agent": {"$ref": ...}}`` when ``agent`` (dumped in a task as ``text``) is the crew's
        ``agents[j]`` and its cleaned dump is byte-equal to ``listed[j]`` (the crew's cleaned ``agents``), else
        None. ``listed_bytes`` caches ``listed[j]``'s JSON for this checkpoint; sets :attr:`refs`."""
        pos = position.get(id(agent)) if agent is not None and index is not None else None
        if pos is None:
            return None
        value = self._clean(agent, orjson.loads(text)["tasks"][0]["agent"], text)
        if pos not in listed_bytes:
            listed_bytes[pos] = _json(listed[pos])
        if listed_bytes[pos] is None or _json(value) != listed_bytes[pos]:
            return None
        ref = agent_ref(index, pos)  # type: ignore[arg-type]
        piece = self._ref_pieces.get(ref["$ref"])
        if piece is None:
            piece = self._ref_pieces[ref["$ref"]] = _frozen({"agent": ref})
        self.refs = True
        return piece

    def _agent_piece(self, agent: Any, text: str) -> Frozen:
        """The piece ``{"agent": <its cleaned dump, refrozen>}`` of an agent embedded in its tasks.

        Raises:
            ValueError: the dump is an object with a ``$ref`` key (it would read as a reference)."""
        if agent is None:
            return _frozen({"agent": None})
        value = self._clean(agent, orjson.loads(text)["tasks"][0]["agent"], text)
        if is_ref_shaped(value):  # the crew is then dumped whole and its document holds no references
            raise ValueError("a task's agent dumps as an object with a '$ref' key")
        refreeze = self._agent_refreezers.get(agent)
        if refreeze is None:
            refreeze = Refreezer()
            self._agent_refreezers.set(agent, refreeze)
        return _frozen({"agent": refreeze(value)})

    def _task_dumps(self, text: str, verdicts: list[tuple[bool, ...] | None], old: list[_Task]
                    ) -> tuple[list[Any], list[str | None]]:
        """Each task's dump (without its agent) from ``text`` (``{"tasks":[...]}`` as pydantic wrote it), and
        its text for the next checkpoint's comparison (None when not found). ``verdicts``: each task's
        :func:`_callback_verdict` now.

        A task whose text is byte-equal to last checkpoint's at the same position (a JSON object is
        prefix-free: equal bytes there are the whole, equal object) and whose callbacks would be kept or
        dropped alike gets None instead of a dump: it is not parsed again. The rest of ``text``, from the
        first task that differs, is parsed in one call (C speed); each parsed task's text is found again by
        re-encoding it (orjson writes compact JSON as pydantic does; where they differ, the task is just
        parsed again next time)."""
        head = '{"tasks":['
        if not text.startswith(head) or not text.endswith("]}"):
            raise ValueError("unexpected tasks dump")
        pos = len(head)
        out: list[Any] = []
        texts: list[str | None] = []
        for j, verdict in enumerate(verdicts):
            prev = old[j] if j < len(old) else None
            if (prev is None or prev.text is None or verdict is None or prev.verdict != verdict
                    or not text.startswith(prev.text, pos)):
                break
            out.append(None)
            texts.append(prev.text)
            pos += len(prev.text) + 1
        rest = orjson.loads("[" + text[pos:-1]) if len(out) < len(verdicts) else []
        if len(out) + len(rest) != len(verdicts):
            raise ValueError("task count changed while dumping")
        found = True
        for raw in rest:
            found = found and isinstance(raw, dict)
            t: str | None = None
            if found:
                try:
                    t = orjson.dumps(raw).decode()
                except (TypeError, orjson.JSONEncodeError):
                    t = None
                found = t is not None and text.startswith(t, pos)
            texts.append(t if found else None)
            if found:
                pos += len(t) + 1  # type: ignore[arg-type]
            out.append(raw)
        return out, texts


@dataclasses.dataclass(slots=True)
class _Task:
    """One task as dumped last checkpoint: its cleaned dump without the agent, the pieces, the value, its
    pydantic text (None: not found) and its callbacks' fate (:func:`_callback_verdict`)."""

    raw: Any
    prefix: Frozen
    piece: Frozen
    suffix: Frozen
    value: Frozen
    text: str | None
    verdict: tuple[bool, ...] | None


_PLAIN_TASKS: dict[type, bool] = {}


def _callback_verdict(task: Any) -> tuple[bool, ...] | None:
    """Which of ``task``'s callback fields hold callbacks that cannot be stored (the dump's text shows their
    dotted path, not whether it resolves back). None when the task's class can reach other callback-holding
    models (its dump's cleaning then depends on more than these fields: never reused unparsed)."""
    cls = type(task)
    plain_cls = _PLAIN_TASKS.get(cls)
    if plain_cls is None:
        fields = getattr(cls, "model_fields", {})
        plain_cls = _PLAIN_TASKS[cls] = not any(n in fields for n in _CALLBACK_CARRIERS if n != "agent")
    if not plain_cls:
        return None
    return tuple(bool(callable(v) and _is_non_roundtrippable(v))
                 for v in (getattr(task, n, None) for n in callback_fields(cls)))


def _json(value: Any) -> bytes | None:
    """``value``'s compact JSON (orjson), None when orjson cannot write it (never equal to anything)."""
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        return None


def _joined_size(pieces: tuple[Frozen, ...]) -> int | None:
    """Compact-JSON length of the object joined from ``pieces`` (each a Frozen object with a size)."""
    full: list[int] = []
    for p in pieces:
        if p.size is None:
            return None
        if p.size > 2:  # '{}' adds nothing, not even a comma
            full.append(p.size)
    return 2 + sum(n - 2 for n in full) + max(len(full) - 1, 0)

"""Dumping a crew entity in pieces, so a checkpoint re-processes only the tasks and agents that changed.

A crew's dump embeds every task, and every task embeds its agent; the agent's executor changes on every
event, so the dump as a whole changes every checkpoint, and parsing, redacting, walking and hashing it all
grows with the number of tasks. :class:`CrewDumper` asks pydantic (C speed) for the same JSON in three parts,
through the crew's own serializers (``include``/``exclude`` only select, they do not change how a field is
written): the crew without its tasks, the tasks without their agent, and each distinct agent object once
through a task that holds it. Only a part whose content differs from the previous checkpoint's is parsed,
redacted and cleaned again (the fingerprint is the pydantic dump itself, a changed value always shows in
it; for the held fields below, a walk of every object they reach; object identity is never trusted alone);
the rest are the same :class:`~crewckpt.history.snapshot.Frozen` objects as last time, which the store
reuses in O(1).

The tasks' dump is one text; a task whose text is byte-equal to last checkpoint's at the same position (and
whose callbacks would be kept or dropped alike) is not parsed at all: the text is parsed from the first task
that differs (usually the running one, near the end). A task whose agent's dump is byte-equal to the crew's
``agents[j]`` (as compared on every checkpoint, orjson text of the cleaned values) names it by reference,
``{"$ref": "#/entities/I/agents/J"}`` (:mod:`crewckpt.views.document`; every CrewAI-facing read expands it
back): its piece never changes, so an unchanged task is the same Frozen value as last checkpoint and keeps
its tree id. Any other agent's piece is one Frozen object shared by all its tasks, so the store walks it once
per checkpoint however many tasks embed it.

A task's fields that grow with a run (its output and long texts: :func:`_held_names`) are left out of that
text while they provably hold what they held when last dumped: a fingerprint (:func:`_fingerprint`) walks
every container they reach and compares every object by identity, down to immutable leaves, so the same
fingerprint means the same content and pydantic would write the same JSON. Their JSON is then last
checkpoint's, spliced back in pydantic's key order; a task whose fingerprint changed is dumped whole by
index. The fingerprint is taken before the dumps and again after a task's whole dump (a change by another
thread in between makes that task dumped whole again next time). This keeps the tasks' text, which a
sequential crew grows with the square of its tasks (task k's prompt context holds tasks 1..k-1's
outputs), out of every checkpoint.

The first document of each dumper is also dumped whole and compared byte for byte; if the pieces do not
give exactly CrewAI's dump (another crewai version, a custom serializer), that dumper falls back to whole
dumps for good. Any error in the pieced path does the same. The first document with held fields is
checked the same way; a difference stops holding them for that dumper.

Memory: the previous checkpoint's parts only (one parsed dict, two Frozen values, the dump text and a
fingerprint of at most _FINGERPRINT_MAX references per task, one Frozen per agent), about three times the JSON
size of the crew.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import logging
import operator
import threading
import types
import typing
import uuid
import weakref
from typing import TYPE_CHECKING, Any

import orjson
import zstandard
from crewai.types.callback import _is_non_roundtrippable, callable_to_string
from pydantic import BaseModel

from crewckpt.history import jsontext
from crewckpt.history.snapshot import Frozen, Parts, Refreezer
from crewckpt.history.summary import json_size
from crewckpt.views.document import SEPARATE_KEYS, agent_ref, expand_entity, is_ref_shaped

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
            # a copy: python-zstandard's result keeps its compress-bound allocation (about the input's size)
            # behind the shorter bytes, so holding it kept ~3x the compressed size (issue 13: RSS of long runs)
            self._z = bytes(memoryview(z))
            self.json_bytes = None
            # the store's inline representation is the uncompressed msgpack (~3.3 MB over a 100-task run's
            # settled nodes): a settled node is rarely split again (~3 per checkpoint), so rebuild it then
            self.forget()

    @property  # type: ignore[override]
    def value(self) -> Any:
        """The value, parsed from its bytes (a new object each time: callers never share it)."""
        return jsontext.loads(self.encoded())

    def __repr__(self) -> str:
        b = self.encoded()
        return f"Encoded({b[:60]!r}...)" if len(b) > 60 else f"Encoded({b!r})"


_COMPRESS_MIN = 128  # bytes: a zstd frame costs ~10 B, so tiny nodes stay raw


def _after(cls: type, field: str) -> frozenset[str]:
    """Names of ``cls``'s fields declared after ``field`` (pydantic dumps fields in declaration order)."""
    names = list(getattr(cls, "model_fields", {}))
    return frozenset(names[names.index(field) + 1:]) if field in names else frozenset()


def _frozen(value: Any) -> Frozen:
    """``value`` frozen with its compact JSON's size (only the size: the bytes would be held until the next
    checkpoint, ~10 MB for a 100-task crew); a value holding Frozen / Parts values (an agent's reused parts)
    is sized from them instead (so the store's size of a task never walks its agent)."""
    try:
        return Frozen(value, size=len(orjson.dumps(value)))
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
        self.held_ok: bool | None = None  # None until a document with held fields was checked whole
        self._held_used = False  # whether the last _pieced value held any field out of the tasks' dump
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
        at = index if refs else None
        try:
            try:
                out = self._pieced(crew, at, hold=self.held_ok is not False)
            except _HeldMiss:  # a task's other fields moved while its long fields were held: dump them all
                out = self._pieced(crew, at, hold=False)
        except Exception:
            logger.debug("crewckpt: dumping %s in pieces failed; dumping it whole from now on",
                         type(crew).__name__, exc_info=True)
            self.ok = False
            self.refs = False
            return b.dump_model(crew)
        if self.ok is None or (self.held_ok is None and self._held_used):
            same = self._same(out, b.dump_model(crew), crew, index)
            if self.ok is not None:  # the held path's first document (the pieces were checked before it)
                self.held_ok = same
                if not same:
                    logger.debug("crewckpt: %s dumped with held fields differs from its whole dump; not "
                                 "holding them", type(crew).__name__)
                    self._tasks = []
                    return self.dump(crew, index, refs=refs)
                return out
            self.ok = same
            if not same:
                self.refs = False
                logger.debug("crewckpt: %s dumped in pieces differs from its whole dump; dumping it whole",
                             type(crew).__name__)
                self._tasks = []
                self._agents = {}
                self._top = Refreezer(depth=_TOP_DEPTH)
                return b.dump_model(crew)
        return out

    def _same(self, out: Any, whole: Any, crew: Any, index: int) -> bool:
        """Whether the pieced value ``out``, as bare JSON with its references expanded, is byte-equal to
        ``whole`` (the crew's whole dump)."""
        try:
            flat = plain(out)
            if self.refs:
                flat = expand_entity(flat, index, {index: flat}, type(crew).__name__)
            return orjson.dumps(flat) == orjson.dumps(whole)
        except Exception:  # unencodable, or a reference that does not expand: not this dumper's shape
            return False

    def _clean(self, model: Any, value: Any, text: str | None) -> Any:
        b = self.builder
        b._drop_bad_callbacks(model, value)
        return b.redactor.apply(value, text)

    def _pieced(self, crew: Any, index: int | None, *, hold: bool = True) -> dict[str, Any]:
        """The pieced value (see :meth:`dump`); ``index`` None: no agent references; ``hold``: leave the
        tasks' long fields that are provably unchanged out of the tasks' dump (:func:`_held_names`). Sets
        :attr:`refs`.

        Raises:
            _HeldMiss: a task's other fields are not last checkpoint's keys (the caller dumps them all)."""
        tasks = list(crew.tasks)
        old = self._tasks
        # fingerprints first, dumps after: a value changed in between is then seen as changed next time
        names = _held_names(tasks) if hold else ()
        prints = [_fingerprint(t, names) for t in tasks] if names else [None] * len(tasks)
        fresh = [j for j, t in enumerate(tasks) if not _unchanged(old, j, t, prints[j])] if names else []
        if len(fresh) > max(_FRESH_MAX, len(tasks) // 4):  # most changed: one dump of everything is cheaper
            names, fresh = (), []
        mode = bool(names)
        self._held_used = mode
        top_text = crew.model_dump_json(exclude={"tasks"}, warnings=False)
        top_value = self._clean(crew, jsontext.loads(top_text), top_text)
        top = self._top.values(top_value)
        # the crew's own agents: a task's agent named by reference must dump byte-equal to one of them
        listed = top_value.get("agents") if index is not None and isinstance(top_value, dict) else None
        crew_agents = list(getattr(crew, "agents", None) or ()) if isinstance(listed, list) else []
        position: dict[int, int] = {}
        if len(crew_agents) == len(listed or ()):
            for pos, a in enumerate(crew_agents):
                position.setdefault(id(a), pos)
        listed_bytes: dict[int, bytes | None] = {}
        tasks_text = crew.model_dump_json(include={"tasks"}, exclude={"tasks": {"__all__": {"agent", *names}}},
                                          warnings=False)
        whole_tasks: dict[int, Any] = {}
        if fresh:  # the tasks whose held fields changed: dumped whole (one call for all of them)
            got = jsontext.loads(crew.model_dump_json(include={"tasks": {j: True for j in fresh}},
                                                    exclude={"tasks": {"__all__": {"agent"}}}, warnings=False))
            if not isinstance(got, dict) or len(got.get("tasks") or ()) != len(fresh):
                raise _HeldMiss("the tasks changed while dumping")
            whole_tasks = dict(zip(fresh, got["tasks"]))
            for j in fresh:  # changed again meanwhile (another thread): not known to match its dump next time
                if not _same_print(prints[j], _fingerprint(tasks[j], names)):
                    prints[j] = None
        verdicts = [_callback_verdict(t) for t in tasks]
        dumped, texts = self._task_dumps(tasks_text, verdicts, old, mode)
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
            if j in whole_tasks:
                raw = whole_tasks[j]
            elif raw is not None and mode:  # its held fields are last checkpoint's: spliced back in place
                assert prev is not None
                raw = _splice(raw, prev.raw, names)
            if raw is None:  # its text is byte-equal to last checkpoint's, and so are its callbacks' fates
                assert prev is not None
                raw, prefix, suffix = prev.raw, prev.prefix, prev.suffix
            else:
                self.builder._drop_bad_callbacks(task, raw)  # the callback's fate depends on the live object
                if prev is not None and jsontext.same_json(prev.raw, raw):  # not ==: 1 == True == 1.0
                    prefix, suffix = prev.prefix, prev.suffix
                else:
                    after = _after(type(task), "agent")
                    cut = next((i for i, k in enumerate(raw) if k in after), len(raw))
                    keys = list(raw)
                    redacted = self.builder.redactor.apply(jsontext.copy_json(raw)[0])
                    prefix = _frozen({k: redacted[k] for k in keys[:cut]})
                    suffix = _frozen({k: redacted[k] for k in keys[cut:]})
            if prev is not None and prev.prefix is prefix and prev.piece is piece and prev.suffix is suffix:
                value_f = prev.value
            else:
                value_f = Frozen(Parts([prefix, piece, suffix], join=True), size=_joined_size((prefix, piece, suffix)))
            if (prev is not None and value_f is prev.value and prev.raw is raw and prev.task is task
                    and prev.text == texts[j] and prev.verdict == verdicts[j] and prev.held is mode
                    and (not mode or j not in whole_tasks)):  # held and not dumped whole: same fingerprint
                new.append(prev)  # nothing about it changed: no new entry (nor garbage) per unchanged task
            else:
                new.append(_Task(raw, prefix, piece, suffix, value_f, texts[j], verdicts[j], task, prints[j], mode))
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
        value = self._clean(agent, jsontext.loads(text)["tasks"][0]["agent"], text)
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
        value = self._clean(agent, jsontext.loads(text)["tasks"][0]["agent"], text)
        if is_ref_shaped(value):  # the crew is then dumped whole and its document holds no references
            raise ValueError("a task's agent dumps as an object with a '$ref' key")
        refreeze = self._agent_refreezers.get(agent)
        if refreeze is None:
            refreeze = Refreezer()
            self._agent_refreezers.set(agent, refreeze)
        return _frozen({"agent": refreeze(value)})

    def _task_dumps(self, text: str, verdicts: list[tuple[bool, ...] | None], old: list[_Task],
                    held: bool = False) -> tuple[list[Any], list[str | None]]:
        """Each task's dump (without its agent) from ``text`` (``{"tasks":[...]}`` as pydantic wrote it), and
        its text for the next checkpoint's comparison (None when not found). ``verdicts``: each task's
        :func:`_callback_verdict` now.

        A task whose text is byte-equal to last checkpoint's at the same position (a JSON object is
        prefix-free: equal bytes there are the whole, equal object) and whose callbacks would be kept or
        dropped alike gets None instead of a dump: it is not parsed again. A task that differs is parsed
        alone when its end is found: the next task's old text, after a comma, further on, where the text
        between parses as one JSON object (again prefix-free: it then is exactly that task's text), so only
        the tasks that changed are parsed. Otherwise the rest of ``text`` is parsed in one call (C speed)
        and each task's text is found again by re-encoding it (orjson writes compact JSON as pydantic does;
        where they differ, the task is just parsed again next time). ``held``: ``text`` leaves the held
        fields out (:func:`_held_names`); it is compared only with texts that did too."""
        head = '{"tasks":['
        if not text.startswith(head) or not text.endswith("]}"):
            raise ValueError("unexpected tasks dump")
        pos = len(head)
        n = len(verdicts)
        out: list[Any] = []
        texts: list[str | None] = []
        while len(out) < n:
            j = len(out)
            prev = old[j] if j < len(old) else None
            if (prev is not None and prev.text is not None and verdicts[j] is not None
                    and prev.verdict == verdicts[j] and prev.held is held and text.startswith(prev.text, pos)):
                out.append(None)
                texts.append(prev.text)
                pos += len(prev.text) + 1
                continue
            found = _changed_run(text, pos, old, j, n)
            if found is None:  # the rest, in one call
                rest = jsontext.loads("[" + text[pos:-1])
                if len(out) + len(rest) != n:
                    raise ValueError("task count changed while dumping")
                _texts_of(rest, text, pos, out, texts)
                break
            run, end = found
            _texts_of(run, text, pos, out, texts)
            pos = end + 1
        return out, texts


_RUN_TRIES = 8  # later tasks tried as the first unchanged one after a changed task


def _changed_run(text: str, pos: int, old: list[_Task], j: int, n: int) -> tuple[list[Any], int] | None:
    """The tasks ``j..k-1`` parsed, and where their text ends: task ``k`` is the first of the next few whose
    text last checkpoint stands right after them (``,`` then that text); None when none does (the caller
    parses the rest). The
    slice is parsed as an array and must hold exactly ``k - j`` objects: a slice ending anywhere but after
    the (k-j)-th task is not that (an end inside a string does not parse; another task boundary gives
    another count)."""
    for k in range(j + 1, min(j + 1 + _RUN_TRIES, n, len(old))):
        following = old[k].text
        if following is None:
            continue
        end = text.find("," + following, pos)
        if end <= pos:
            continue
        try:
            run = jsontext.loads("[" + text[pos:end] + "]")
        except orjson.JSONDecodeError:
            continue
        if len(run) == k - j and all(isinstance(r, dict) for r in run):
            return run, end
    return None


def _texts_of(raws: list[Any], text: str, pos: int, out: list[Any], texts: list[str | None]) -> None:
    """Append ``raws`` (tasks parsed from ``text`` at ``pos``) to ``out`` and each one's text to ``texts``,
    found again by re-encoding it (None from the first not found on: those are parsed again next time)."""
    ok = True
    for raw in raws:
        ok = ok and isinstance(raw, dict)
        t: str | None = None
        if ok:
            try:
                t = orjson.dumps(raw).decode()
            except (TypeError, orjson.JSONEncodeError):
                t = None
            ok = t is not None and text.startswith(t, pos)
        texts.append(t if ok else None)
        if ok:
            pos += len(t) + 1  # type: ignore[arg-type]
        out.append(raw)


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
    task: Any  # the task object at this position
    print: Print | None  # its held fields' fingerprint when dumped (:func:`_fingerprint`)
    held: bool  # ``text`` left the held fields out


# -- held fields: a task's long fields left out of the tasks' dump while provably unchanged ------------------

_FRESH_MAX = 8  # tasks whose held fields changed, dumped whole by index; more (and over a quarter): all dumped
_FINGERPRINT_MAX = 4096  # objects in one task's fingerprint; a bigger value is dumped every checkpoint
_LEAVES = frozenset({str, int, float, bool, type(None), datetime.datetime, datetime.date, datetime.time,
                     datetime.timedelta, uuid.UUID, decimal.Decimal})  # immutable
_HELD_NAMES: dict[type, tuple[str, ...]] = {}
_PLAIN_MODELS: dict[type, bool] = {}
_MISSING = object()
Print = tuple[list[Any], list[int]]  # a fingerprint: (every object reached, every container's length)


class _HeldMiss(Exception):
    """A task dumped without its held fields does not have last checkpoint's other keys."""


def _plain_model(cls: type) -> bool:
    """Whether pydantic writes a ``cls`` instance from its fields' values alone: a BaseModel without model or
    field serializers and computed fields (cached per class)."""
    ok = _PLAIN_MODELS.get(cls)
    if ok is None:
        dec = getattr(cls, "__pydantic_decorators__", None)
        ok = _PLAIN_MODELS[cls] = bool(issubclass(cls, BaseModel) and dec is not None and not dec.model_serializers
                                       and not dec.field_serializers and not dec.computed_fields)
    return ok


def _held_names(tasks: list[Any]) -> tuple[str, ...]:
    """The fields left out of the tasks' dump while unchanged (:func:`_fingerprint`): those of the CrewAI
    split hints (:data:`crewckpt.views.document.SEPARATE_KEYS`: what grows with a run, a task's output and
    prompt context) that pydantic writes from their value alone: typed ``str``, a model or either or None,
    with no alias, metadata, serializer or exclusion. () unless every task has the same class."""
    cls = type(tasks[0]) if tasks else None
    if cls is None or any(type(t) is not cls for t in tasks):
        return ()
    names = _HELD_NAMES.get(cls)
    if names is None:
        fields = getattr(cls, "model_fields", {})
        names = _HELD_NAMES[cls] = () if not _plain_model(cls) else tuple(
            n for n, f in fields.items()
            if n in SEPARATE_KEYS and n != "agent" and not f.metadata and f.alias is None
            and f.serialization_alias is None and not f.exclude and _held_type(f.annotation))
    return names


def _held_type(annotation: Any) -> bool:
    """``str``, a BaseModel subclass, or either of them or None."""
    args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else (annotation,)
    kinds = [a for a in args if a is not type(None)]
    return len(kinds) == 1 and isinstance(kinds[0], type) and (kinds[0] is str or issubclass(kinds[0], BaseModel))


def _fingerprint(task: Any, names: tuple[str, ...]) -> Print | None:
    """What the fields ``names`` of ``task`` hold, as (every object reached, every container's length), or
    None when something is not provably immutable through it.

    The walk visits every list, tuple, dict and plain model (:func:`_plain_model`, through its ``__dict__``
    and extras) and stops at immutable leaves (str, numbers, None, dates, UUID, Decimal, enum members): two
    fingerprints whose objects are the same objects (``is``, in order) and whose lengths are equal describe
    the same content, so pydantic writes the same JSON for both. Identity alone is never the proof: every
    container is walked again each time. The lists keep the objects alive, so no id is reused."""
    d = task.__dict__
    leaves = _LEAVES
    level = [d.get(n, _MISSING) for n in names]
    objs: list[Any] = list(level)
    lengths: list[int] = []
    while level:  # one level of the tree at a time; leaves cost one C-level type test each
        below: list[Any] = []
        for x in level:
            t = type(x)
            if t in leaves or x is _MISSING:
                continue
            if t is list or t is tuple:
                lengths.append(len(x))
                below.extend(x)
            elif t is dict:
                lengths.append(len(x))
                for key in x:
                    if type(key) is not str:
                        return None
                objs.extend(x)
                below.extend(x.values())
            elif isinstance(x, enum.Enum):
                if type(x.value) not in leaves:
                    return None
            elif _plain_model(t):
                fields = x.__dict__
                lengths.append(len(fields))
                objs.append(t)
                objs.extend(fields)
                below.extend(fields.values())
                below.append(getattr(x, "__pydantic_extra__", None))
            else:
                return None
        objs.extend(below)
        if len(objs) > _FINGERPRINT_MAX:
            return None
        level = [y for y in below if type(y) not in leaves]
    return objs, lengths


def _same_print(a: Print | None, b: Print | None) -> bool:
    """Whether two fingerprints (:func:`_fingerprint`) describe the same objects holding the same content."""
    if a is None or b is None:
        return False
    return a[1] == b[1] and len(a[0]) == len(b[0]) and all(map(operator.is_, a[0], b[0]))


def _unchanged(old: list[_Task], j: int, task: Any, fp: Print | None) -> bool:
    """Whether ``task`` at position ``j`` holds what its held fields held when last checkpoint dumped it."""
    prev = old[j] if j < len(old) else None
    return prev is not None and prev.task is task and _same_print(fp, prev.print)


def _splice(raw: Any, prev_raw: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """``raw`` (a task dumped without its held fields ``names``) with their values from ``prev_raw`` (its
    whole dump last checkpoint, when they held the same), every key in ``prev_raw``'s order (pydantic's).

    Raises:
        _HeldMiss: ``raw``'s keys are not ``prev_raw``'s without ``names``, in order."""
    if not isinstance(raw, dict) or not isinstance(prev_raw, dict):
        raise _HeldMiss("not a task dump")
    held = set(names)
    keys = list(prev_raw)
    if [k for k in keys if k not in held] != list(raw):
        raise _HeldMiss("a task's fields changed")
    return {k: prev_raw[k] if k in held else raw[k] for k in keys}


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

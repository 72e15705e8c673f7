"""Incremental serialization of a CrewAI ``RuntimeState`` into the checkpoint document.

The document has exactly the keys CrewAI's listener writes, in its order: ``crewai_version``,
``parent_id``, ``branch``, ``entities``, ``event_record`` (``{"nodes": {event_id: {"event", "edges"}}}``)
and ``trigger``. Entities are dumped on every checkpoint (they change all the time); the event record is
append-mostly, so each event is dumped once and each node is rebuilt only when an event added after it
wired a new edge to it (``EventRecord.add`` touches at most the parent, triggering, previous and started
nodes; each new node names them, so events recorded without passing through crewckpt's hook, such as
CrewAI's checkpoint events, are covered too). The cost of one checkpoint therefore does not grow with the number of events recorded
so far. Memory: each node is kept as its compact JSON bytes only (:class:`crewckpt.crewai.entities.Encoded`),
never as parsed dicts, and zstd-compressed once a checkpoint passed without rebuilding it: about a fifth of the
event record's JSON size, plus ~150 bytes of bookkeeping per event.

Difference from CrewAI, on purpose: an event embeds live objects (a ``task_started`` event holds the Task);
CrewAI re-dumps them on every checkpoint, so an old event shows later task output. Here an event is dumped
when the first checkpoint that contains it is taken and never changes afterwards (with ``"*"``: the
state when it was emitted), which is what an event log should hold.

Secrets (API keys, tokens, passwords, authorization headers, values of secret environment variables) are
redacted in every dumped value (:mod:`crewckpt.crewai.secrets`).

Values pydantic cannot serialize are replaced by ``null`` with one :class:`UnserializableFieldWarning` per
field (``Class.field``) per run; callbacks that cannot round-trip (bound methods, partials, callable
instances, lambdas, closures) are not stored, following ``crewai.types.callback``.
"""

from __future__ import annotations

import itertools
import logging
import threading
import warnings
import weakref
from typing import Any

import orjson
import zstandard
from crewai.state.runtime import RuntimeState
from crewai.types.callback import _is_non_roundtrippable, callable_to_string
from crewai_core.version import get_crewai_version
from pydantic import BaseModel

from crewckpt.crewai.entities import _CALLBACK_CARRIERS, CrewDumper, Encoded, IdWeakMap
from crewckpt.crewai.entities import callback_fields as callback_fields  # re-exported: its old home
from crewckpt.crewai.entities import plain as plain  # re-exported: its old home
from crewckpt.crewai.prepare import prepare_entities
from crewckpt.crewai.secrets import Redactor
from crewckpt.history import jsontext
from crewckpt.history.snapshot import CHUNK_ENTRIES, AppendMap, Frozen, Parts, Refreezer
from crewckpt.views.document import SHAPE_KEY

logger = logging.getLogger("crewckpt.crewai")


_EVENT_AT = len(b'{"event":')
_NODE_FRAME = len(b'{"event":,"edges":}')  # a node's JSON bytes besides its event's and its edges'
_WIDE = 2 * CHUNK_ENTRIES  # ids: an edge list longer than this is held as sealed pieces (_WideNode)
_EDGE_PIECE = CHUNK_ENTRIES  # ids per sealed piece of a wide edge list


class _WideNode(Frozen):
    """An event node with a long edge list (a crew's kickoff gains a ``child`` edge per event): ``{"event":
    <its Encoded dump>, "edges": {...}}`` whose long lists are :class:`Parts` of sealed pieces, so a checkpoint
    that adds one edge walks one piece and the event's cached representation, not every id (issue 13).
    ``event``: the event's dump, reused by every rebuild of the node."""

    __slots__ = ("event",)

    def __init__(self, event: Encoded, edges: dict[str, Any], size: int) -> None:
        super().__init__({"event": event, "edges": edges}, size=size)
        self.event = event


class UnserializableFieldWarning(UserWarning):
    """A field's value could not be serialized into a checkpoint and was stored as null."""


class SnapshotBuilder:
    """Builds checkpoint documents for one RuntimeState, reusing what did not change.

    Not thread-safe by itself: callers hold crewckpt's emission lock (no event can be recorded while a
    document is built).
    """

    def __init__(self) -> None:
        self._record_ref: weakref.ref[Any] | None = None
        # event id -> (its node as stored last, the length of its event's JSON in the node's bytes); the node's
        # bytes begin with the event's (b'{"event":' + event + b',"edges":...'), so no parsed dump is kept
        self._nodes: dict[str, tuple[Frozen, int]] = {}
        self._raw: dict[str, Any] = {}  # parsed dumps of the rare events orjson cannot encode (lone surrogates)
        self._sealed: dict[tuple[str, str], list[Frozen]] = {}  # (event id, edge) -> a wide list's sealed pieces
        self._log = AppendMap()
        self._dumpers = IdWeakMap()  # crew object -> its CrewDumper
        self._refreezers = IdWeakMap()  # other entity object -> its Refreezer
        self._dirty: set[str] = set()
        self._built: list[str] = []  # event ids whose node this checkpoint built
        self._fresh: list[tuple[str, Frozen]] = []  # nodes built by the last checkpoint, compressed at the next
        self._zstd = zstandard.ZstdCompressor(level=1)  # this builder's own (contexts are not thread-safe)
        self._full = True
        self.warned: set[str] = set()
        self.refs = True  # tasks may name their agent by reference (docs/write-path.md, "Agent references")
        self.version = get_crewai_version()
        self.redactor = Redactor()

    # -- dirty tracking (called for every recorded event, on the emitting thread) --------------------
    def mark(self, event: Any) -> None:
        """Note that ``event`` was just added: its node and the nodes it links to changed."""
        if self._full:
            return
        dirty = self._dirty
        dirty.add(event.event_id)
        for ref in (event.parent_event_id, event.triggered_by_event_id, event.previous_event_id,
                    event.started_event_id):
            if ref:
                dirty.add(ref)

    # -- document ----------------------------------------------------------------------------------
    def document(self, state: RuntimeState, *, parent_id: str | None, branch: str,
                 trigger: str | None) -> dict[str, Any]:
        """Return the checkpoint document of ``state`` now (CrewAI's key order; ``trigger`` if given).

        The event nodes are a :class:`crewckpt.history.snapshot.Parts` value of :class:`crewckpt.Frozen`
        pieces (the store reuses what did not change); use :func:`plain` for the bare JSON value.
        """
        prepare_entities(state.root)  # what CrewAI's _prepare_entities does, without O(tasks) calls
        refs: list[int] = []
        doc: dict[str, Any] = {
            "crewai_version": self.version,
            "parent_id": parent_id,
            "branch": branch,
            "entities": [self._dump_entity(e, i, refs) for i, e in enumerate(state.root)],
            "event_record": {"nodes": self._event_nodes(state)},
        }
        if trigger is not None:
            doc["trigger"] = trigger
        if refs:  # tasks name their agent by reference: crewai_json expands them on every CrewAI-facing read
            doc[SHAPE_KEY] = {"agent_refs": refs}
        return doc

    def _dump_entity(self, entity: BaseModel, index: int = 0, refs: list[int] | None = None) -> Any:
        """A crew in pieces (:class:`crewckpt.crewai.entities.CrewDumper`, one per crew object); anything else
        whole, its unchanged branches reused (:class:`crewckpt.history.snapshot.Refreezer`). ``index``: its
        place in ``entities``; appended to ``refs`` when its tasks name their agents by reference."""
        if not isinstance(getattr(entity, "tasks", None), list) or "tasks" not in type(entity).model_fields:
            refreeze = self._refreezers.get(entity)
            if refreeze is None:
                refreeze = Refreezer()
                self._refreezers.set(entity, refreeze)
            return refreeze(self.dump_model(entity))
        dumper = self._dumpers.get(entity)
        if dumper is None:
            dumper = CrewDumper(self)
            self._dumpers.set(entity, dumper)
        out = dumper.dump(entity, index, refs=self.refs and refs is not None)
        if dumper.refs and refs is not None:
            refs.append(index)
        return out

    def _event_nodes(self, state: RuntimeState) -> Parts:
        """The event record's nodes as a :class:`Parts` value (pieces that did not change are reused).

        Only nodes marked since the last checkpoint are rebuilt, and nodes recorded since then are found at the
        end of the record (its dict only grows: CrewAI never removes a node); if the record is not the one
        seen last, got shorter, or its node before the new ones is not the last one seen, everything is
        rebuilt."""
        record = state.event_record
        nodes = record.nodes
        log = self._log
        new = len(nodes) - len(log)
        if (self._record_ref is None or self._record_ref() is not record or new < 0
                or (len(log) and next(itertools.islice(reversed(nodes), new, None), None) != log.last_key())):
            self._record_ref = weakref.ref(record)
            self._nodes.clear()
            self._raw.clear()
            self._sealed.clear()
            self._fresh = []
            self._built = []
            log = self._log = AppendMap()
            self._full = True
            new = len(nodes)
        if new:
            fresh = list(itertools.islice(reversed(nodes), new))
            for event_id in reversed(fresh):
                node = nodes[event_id]
                log.set(event_id, self._node(event_id, node))
                if not self._full:  # the nodes it wired edges to: also for events the hook does not mark
                    ev = node.event  # (checkpoint events are recorded without passing through it)
                    for ref in (ev.parent_event_id, ev.triggered_by_event_id, ev.previous_event_id,
                                getattr(ev, "started_event_id", None)):
                        if ref:
                            self._dirty.add(ref)
        if not self._full:
            for event_id in self._dirty:
                dirty = nodes.get(event_id)
                if dirty is not None and event_id in log:
                    log.set(event_id, self._node(event_id, dirty))
        self._dirty = set()
        self._full = False
        self._compress_settled()
        return log.parts()

    def _compress_settled(self) -> None:
        """Compress the nodes the previous checkpoint built that this one did not rebuild (most nodes never
        change again; a node that gains an edge at every checkpoint, like a crew's kickoff, stays raw), and
        remember this checkpoint's for the next. At most one compression per node version, so the cost per
        checkpoint follows the nodes built, not the record's length."""
        settled = self._fresh
        self._fresh = [(e, self._nodes[e][0]) for e in self._built]
        self._built = []
        for event_id, frozen in settled:
            if isinstance(frozen, Encoded) and self._nodes.get(event_id, (None, 0))[0] is frozen:  # not rebuilt
                frozen.compress(self._zstd)

    def _node(self, event_id: str, node: Any) -> Frozen:
        """The node as CrewAI dumps it (``{"event", "edges"}``), frozen for the store: its event is dumped
        once; edges are copied, so later ``add_edge`` calls cannot change a value handed to the store.

        Memory: the node is kept as its compact JSON bytes only (:class:`Encoded`); a rebuilt node reuses its
        event's bytes from the previous node's."""
        edges = {k: list(v) for k, v in node.edges.items()}
        prev = self._nodes.get(event_id)
        event: bytes | None = None
        wide = prev[0] if prev is not None and isinstance(prev[0], _WideNode) else None
        if wide is not None:
            event = wide.event.encoded()
        elif prev is not None and prev[1] >= 0:
            event = prev[0].encoded()[_EVENT_AT:_EVENT_AT + prev[1]]  # type: ignore[attr-defined]
        elif event_id not in self._raw:
            value = self.dump_model(node.event)
            try:
                event = orjson.dumps(value)
            except (TypeError, orjson.JSONEncodeError):  # e.g. lone surrogates: keep it parsed
                self._raw[event_id] = value
        if event is not None:
            try:
                edges_json = orjson.dumps(edges)
                frozen: Frozen
                if any(len(v) > _WIDE for v in edges.values()):
                    frozen = _WideNode(wide.event if wide is not None else Encoded(event),
                                       self._wide_edges(event_id, edges), _NODE_FRAME + len(event) + len(edges_json))
                else:
                    frozen = Encoded(b'{"event":' + event + b',"edges":' + edges_json + b"}")
                self._nodes[event_id] = (frozen, len(event))
                self._built.append(event_id)
                return frozen
            except (TypeError, orjson.JSONEncodeError):
                self._raw[event_id] = jsontext.loads(event)
        frozen = Frozen({"event": self._raw[event_id], "edges": edges})  # the store sizes it
        self._nodes[event_id] = (frozen, -1)
        return frozen

    def _wide_edges(self, event_id: str, edges: dict[str, list[str]]) -> dict[str, Any]:
        """``edges`` with each list longer than _WIDE as a :class:`Parts` array of _EDGE_PIECE-id pieces: the
        sealed ones kept from the last rebuild while the list still starts with them (CrewAI only appends
        edges; checked by comparing the lists, C speed), then one new piece for the tail."""
        out: dict[str, Any] = {}
        for name, ids in edges.items():
            if len(ids) <= _WIDE:
                out[name] = ids
                continue
            sealed = self._sealed.get((event_id, name), [])
            keep = 0
            while keep < len(sealed) and ids[keep * _EDGE_PIECE:(keep + 1) * _EDGE_PIECE] == sealed[keep].value:
                keep += 1
            del sealed[keep:]
            at = keep * _EDGE_PIECE
            while len(ids) - at > _EDGE_PIECE:
                piece = ids[at:at + _EDGE_PIECE]
                sealed.append(Frozen(piece, size=len(orjson.dumps(piece))))  # kept for the run: the size only
                at += _EDGE_PIECE
            self._sealed[(event_id, name)] = sealed
            tail = ids[at:]
            out[name] = Parts([*sealed, Frozen(tail, orjson.dumps(tail))], array=True, length=len(ids))
        return out

    # -- safe model dumping -----------------------------------------------------------------------
    def dump_model(self, model: BaseModel) -> Any:
        """``model.model_dump(mode="json")`` that never raises: bad values become null (one warning each).

        Goes through pydantic's JSON serializer and orjson (same value, about 1.5x faster than building
        the dicts in Python), then Python mode (e.g. lone surrogates), then field by field.
        """
        text: str | None = None
        try:
            text = model.model_dump_json(warnings=False)
            out = jsontext.loads(text)
        except Exception:
            text = None
            try:
                out = model.model_dump(mode="json", warnings=False)
            except Exception:
                out = self._dump_fieldwise(model, type(model).__name__)
        self._drop_bad_callbacks(model, out)
        return self.redactor.apply(out, text)

    def _dump_fieldwise(self, model: BaseModel, path: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in type(model).model_fields:
            try:
                out.update(model.model_dump(mode="json", include={name}, warnings=False))
                continue
            except Exception as exc:
                error = exc
            value = getattr(model, name, None)
            if isinstance(value, BaseModel):
                out[name] = self._dump_fieldwise_or_whole(value, f"{type(value).__name__}")
            elif isinstance(value, list) and any(isinstance(v, BaseModel) for v in value):
                out[name] = [
                    self._dump_fieldwise_or_whole(v, type(v).__name__) if isinstance(v, BaseModel)
                    else self._dump_plain(v, f"{path}.{name}")
                    for v in value
                ]
            else:
                out[name] = None
                self.warn(f"{path}.{name}", value, error)
        return out

    def _dump_fieldwise_or_whole(self, model: BaseModel, path: str) -> Any:
        try:
            out = model.model_dump(mode="json", warnings=False)
        except Exception:
            out = self._dump_fieldwise(model, path)
        self._drop_bad_callbacks(model, out)
        return out

    def _dump_plain(self, value: Any, path: str) -> Any:
        from pydantic_core import to_jsonable_python

        try:
            return to_jsonable_python(value)
        except Exception as exc:
            self.warn(path, value, exc)
            return None

    def _drop_bad_callbacks(self, model: BaseModel, out: Any, seen: set[int] | None = None) -> None:
        """Null out callbacks CrewAI would store as a dotted path that cannot be resolved faithfully.

        Walks the models that can carry callbacks (crew -> tasks/agents -> agent; events -> task/agent)
        alongside their dumped dicts; each model once.
        """
        if not isinstance(out, dict):
            return
        seen = set() if seen is None else seen
        if id(model) in seen:
            return
        seen.add(id(model))
        cls = type(model)
        for name in callback_fields(cls):
            value = getattr(model, name, None)
            if value is None or name not in out:
                continue
            if isinstance(value, list):
                keep = [v for v in value if not (callable(v) and _is_non_roundtrippable(v))]
                if len(keep) != len(value):
                    self.warn(f"{cls.__name__}.{name}", value, None)
                    out[name] = [callable_to_string(v) for v in keep]
            elif callable(value) and _is_non_roundtrippable(value):
                self.warn(f"{cls.__name__}.{name}", value, None)
                out[name] = None
        for name in _CALLBACK_CARRIERS:
            value = model.__dict__.get(name)
            if value is None:
                continue
            sub = out.get(name)
            if isinstance(value, BaseModel) and isinstance(sub, dict):
                self._drop_bad_callbacks(value, sub, seen)
            elif isinstance(value, list) and isinstance(sub, list) and len(sub) == len(value):
                for v, s in zip(value, sub):
                    if isinstance(v, BaseModel) and isinstance(s, dict):
                        self._drop_bad_callbacks(v, s, seen)

    def warn(self, field: str, value: Any, error: BaseException | None) -> None:
        """Warn once per field per run that ``field`` was stored as null.

        One warning only (a :class:`UnserializableFieldWarning`, not also a log record: Python's last-resort
        log handler would print the same line twice); logged at debug level for log files.
        """
        if field in self.warned:
            return
        self.warned.add(field)
        why = f": {error}" if error is not None else " (cannot be restored from a dotted path)"
        message = (
            f"crewckpt: {field} holds a {type(value).__name__} that cannot be stored in a checkpoint{why}; "
            "stored as null (use a module-level function or a JSON-serializable value)"
        )
        logger.debug(message)
        warnings.warn(message, UnserializableFieldWarning, stacklevel=2)


_builders = IdWeakMap()
_builders_lock = threading.Lock()


def builder_for(state: RuntimeState) -> SnapshotBuilder:
    """The SnapshotBuilder kept for ``state`` (created on first use)."""
    builder: SnapshotBuilder | None = _builders.get(state)
    if builder is None:
        with _builders_lock:
            builder = _builders.get(state)
            if builder is None:
                builder = SnapshotBuilder()
                _builders.set(state, builder)
    return builder


def existing_builder(state: RuntimeState) -> SnapshotBuilder | None:
    """The SnapshotBuilder of ``state`` if one was made (events before the first checkpoint need none)."""
    builder: SnapshotBuilder | None = _builders.get(state)
    return builder

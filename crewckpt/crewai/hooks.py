"""The places where crewckpt attaches to CrewAI 1.15 (installed once by :func:`install`).

CrewAI offers no synchronous per-event hook and its restore path only knows JSON files and SQLite rows, so
crewckpt wraps four functions (each wrapper calls the original for everything that is not crewckpt's):

* ``CrewAIEventsBus._prepare_event`` (runs on the emitting thread for ``emit`` and ``aemit``, after the event
  got its ids and sequence number and was added to the event record): crewckpt takes the checkpoint here,
  under one re-entrant lock, so each snapshot holds exactly the events up to its trigger, in emission order,
  and each run's checkpoints form one chain. CrewAI's own listener runs on a thread pool, which is what
  loses, reorders and forks its checkpoints (shared notes, 'What the built-in machinery does').
* ``crewai.state.checkpoint_listener._should_checkpoint``: returns None for crewckpt configs, so CrewAI's
  pool listener does not also write (or re-serialize) them.
* ``RuntimeState.from_checkpoint`` / ``afrom_checkpoint``: a crewckpt config, or a ``"<store>#<rev>"``
  location, restores from the store (``Crew/Flow/Agent.from_checkpoint``, ``fork`` and
  ``kickoff(from_checkpoint=...)`` all go through it).
* ``RuntimeState.fork``: on a state restored from crewckpt, checks the branch name before any write and
  names automatic branches ``fork/<commit id[:12]>_<6 hex>``.
* ``Flow.from_checkpoint``: restoring into a Flow subclass builds a fresh instance (checkpoints carry no
  methods); crewckpt puts that instance in the restored state in place of the placeholder Flow and gives it
  the stored crewckpt config when it has none, so the restored flow keeps checkpointing (as a Crew does).
  The ``flow_created`` event that building the fresh instance emits is not checkpointed: it describes an
  empty instance whose state the restore then replaces, and writing it moved the branch to a new root
  checkpoint with empty state (a later restore of ``main`` then re-ran every method).

Signals: with telemetry off CrewAI never emits its SIGTERM/SIGINT/... events, so a config listing signals
installs handlers (main thread only) that have a thread of crewckpt's emit CrewAI's signal event (checkpoint),
then hand the signal to the handler that was there before (default action included: SIGTERM still
terminates); the handler itself takes no lock (:mod:`crewckpt.crewai.signals`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

from crewai.events.event_bus import CrewAIEventsBus, crewai_event_bus, is_replaying
from crewai.events.types.checkpoint_events import (
    CheckpointBaseEvent,
    CheckpointForkBaseEvent,
    CheckpointRestoreBaseEvent,
    CheckpointRestoreCompletedEvent,
    CheckpointRestoreFailedEvent,
    CheckpointRestoreStartedEvent,
)
from crewai.flow.flow import Flow
from crewai.state import checkpoint_listener
from crewai.state.checkpoint_config import CheckpointConfig as CrewAICheckpointConfig
from crewai.state.runtime import RuntimeState

from crewckpt.backends import registry
from crewckpt.crewai import allocator, gate, publish, secrets
from crewckpt.crewai.config import (
    RESTORED_CONTEXT,
    SQLITE_SUFFIXES,
    CheckpointConfig,
    CrewckptProvider,
    split_location,
)
from crewckpt.crewai.run import remember_flow_class
from crewckpt.crewai.signals import SIGNAL_EVENTS, repeat_signal
from crewckpt.crewai.snapshot import IdWeakMap, existing_builder
from crewckpt.crewai.writer import EMIT_LOCK, open_store, run_id_for, write_checkpoint
from crewckpt.history.lineage import resume_branch
from crewckpt.views.document import crewai_json

logger = logging.getLogger("crewckpt.crewai")

_SKIP = (CheckpointBaseEvent, CheckpointForkBaseEvent, CheckpointRestoreBaseEvent)
_installed = False
_install_lock = threading.Lock()
_orig: dict[str, Any] = {}

# states restored from a store -> that store's path (fork checks branch names against it)
_state_store = IdWeakMap()
# (commit id, revision the user gave): a caller that resolved a revision itself restores the id (pinned,
# so a branch moving meanwhile cannot change what is restored) and keeps the name for the branch rule
_resumed_as: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("crewckpt_resumed_as",
                                                                                     default=None)
# True while CrewAI's Flow.from_checkpoint builds the fresh instance of a Flow subclass: no checkpoint then
_restoring: contextvars.ContextVar[bool] = contextvars.ContextVar("crewckpt_restoring", default=False)


# -- the write hook -----------------------------------------------------------------------------------------

def config_for(source: Any, event: Any, state: RuntimeState) -> CheckpointConfig | None:
    """The crewckpt config that ``event`` from ``source`` triggers, or None.

    Entities resolve as CrewAI does (task -> agent -> crew; ``False`` stops the walk). Signal events come
    from no entity: the first entity of the running state whose config lists the signal (or ``"*"``) wins.
    """
    if event.type in SIGNAL_EVENTS:
        for entity in state.root:
            cfg = checkpoint_listener._find_checkpoint(entity)
            if isinstance(cfg, CheckpointConfig) and cfg.triggers(event.type):
                return cfg
        return None
    cfg = checkpoint_listener._find_checkpoint(source)
    if isinstance(cfg, CheckpointConfig) and cfg.triggers(event.type):
        return cfg
    return None


def _prepare_event(self: CrewAIEventsBus, source: Any, event: Any) -> None:
    if isinstance(event, _SKIP):
        _orig["prepare"](self, source, event)
        return
    with EMIT_LOCK:
        _orig["prepare"](self, source, event)
        state = self._runtime_state
        if state is None:
            return
        builder = existing_builder(state)
        if builder is not None:
            builder.mark(event)
        if is_replaying() or _restoring.get():
            return
        cfg = config_for(source, event, state)
        if cfg is not None:
            write_checkpoint(state, cfg, event)
        if event.type in _COMPACT_EVENTS:  # first: the run-end push then reads the merged pack
            _compact_at_run_end(source, state)
        if event.type in publish.RUN_END_EVENTS:
            _push_at_run_end(source, state)


def _push_at_run_end(source: Any, state: RuntimeState) -> None:
    """``push_to``: a run ended; publish the branch it wrote on (if it wrote any checkpoint)."""
    cfg = checkpoint_listener._find_checkpoint(source)
    if isinstance(cfg, CheckpointConfig) and cfg.push_to and getattr(state, "_checkpoint_id", None):
        publish.at_run_end(cfg, cfg.store_location(), state._branch, run_id_for(state))


_COMPACT_EVENTS = frozenset({"crew_kickoff_completed", "crew_kickoff_failed", "flow_finished"})


def _compact_at_run_end(source: Any, state: RuntimeState) -> None:
    """A crew's or a user flow's run ended (not an agent's executor flow, which ends with every task): the
    store it wrote to merges that run's small packs and truncates its WAL (:meth:`Store.finish_writes`), so
    the store a user inspects right after a run is compact."""
    if type(source).__name__ == "AgentExecutor" or not getattr(state, "_checkpoint_id", None):
        return
    cfg = checkpoint_listener._find_checkpoint(source)
    if not isinstance(cfg, CheckpointConfig):
        return
    try:
        open_store(str(cfg.store_path())).finish_writes()
    except Exception as exc:  # best effort: the checkpoints are written already
        logger.debug("crewckpt: compacting %s after the run failed: %s", cfg.store_path(), exc)
    allocator.trim_now()  # the run's buffers are gone: give their pages back


def _should_checkpoint(source: Any, event: Any) -> CrewAICheckpointConfig | None:
    cfg = _orig["should"](source, event)
    return None if isinstance(cfg, CheckpointConfig) else cfg


# -- restore -------------------------------------------------------------------------------------------------

def crewckpt_target(config: Any) -> tuple[str, str] | None:
    """``(store location, revision)`` when ``config.restore_from`` names a crewckpt checkpoint, else None.

    A crewckpt config: ``restore_from`` is a revision in ``config.location``, ``"<store>#<rev>"``, a path
    (with a separator) to a store folder, meaning its HEAD, or a CrewAI location (a ``.json`` checkpoint
    file, an SQLite db or ``"<db>#<checkpoint id>"``): that checkpoint is imported into
    ``config.location`` first (:func:`import_crewai_target`) and the imported commit is restored. A
    ``memory:NAME`` or URL store (``postgresql://host/db``) alone means its HEAD too.
    A CrewAI config: only ``"<store>#<rev>"`` or a store folder (its HEAD), when that folder is a store.
    """
    raw = getattr(config, "restore_from", None)
    if raw is None:
        return None
    raw = os.fspath(raw) if isinstance(raw, os.PathLike) else str(raw)
    path, rev = split_location(raw)
    if isinstance(config, CheckpointConfig):
        if rev is not None and path and _is_store(path):
            return path, rev
        if rev is None and (os.sep in raw or registry.local_folder(raw) is None) and _is_store(raw):
            # a store folder or a memory:/URL store: its HEAD
            return raw, "HEAD"
        crewai_source = _crewai_location(raw)
        if crewai_source is not None:
            return import_crewai_target(config.store_location(), raw)
        _check_path_exists(raw, config.store_location())
        return config.store_location(), raw
    if rev is not None and _is_store(path):
        return path, rev
    if rev is None and _is_store(raw):
        return raw, "HEAD"
    return None


_PATH_SUFFIXES = (".json", *SQLITE_SUFFIXES)


def _check_path_exists(raw: str, store_path: str) -> None:
    """Raise when ``restore_from`` (not a store, not a CrewAI file) looks like a path that does not exist.

    A path: ends in ``.json``/``.db``/``.sqlite``/``.sqlite3``, or has a slash (``"fork/3fa2c1_ab12cd"``
    branches have one too: such a value is a path only when the store has no such revision).

    Raises:
        crewckpt.errors.UnknownRevision: one line saying the file does not exist and what to give instead.
    """
    from crewckpt.errors import CkptError, UnknownRevision

    file_part = split_location(raw)[0] if "#" in raw else raw
    if not (file_part.lower().endswith(_PATH_SUFFIXES) or "/" in raw or os.sep in raw):
        return
    if os.path.exists(file_part):
        return
    certain = file_part.lower().endswith(_PATH_SUFFIXES) or "#" in raw or file_part.startswith(
        ("/", "./", "../", "~", os.sep))
    if not certain and _is_store(store_path):
        try:
            open_store(store_path).resolve(raw)
            return  # a revision with a slash (a branch such as fork/...)
        except (CkptError, ValueError):
            pass
    raise UnknownRevision(
        f"restore_from {raw!r}: the file {file_part!r} does not exist; give an existing CrewAI checkpoint "
        f"(a .json file or SQLite db), a store folder, or a revision of the store at {store_path} "
        "such as 'main~2'")


def _crewai_location(raw: str) -> str | None:
    """The file part of ``raw`` when it names a CrewAI JSON checkpoint file or SQLite db, else None."""
    from crewckpt.views.layout import is_sqlite_file
    from crewckpt.views.layout import split_location as split_db

    db, _ = split_db(raw)
    if is_sqlite_file(db):
        return db
    if raw.endswith(".json") and os.path.isfile(raw):
        return raw
    return None


def import_crewai_target(store_path: str, location: str) -> tuple[str, str]:
    """Import the CrewAI checkpoint at ``location`` (a ``.json`` file, an SQLite db = its newest
    checkpoint, or ``"<db>#<id>"``) into the store at ``store_path`` (created if missing); returns
    ``(store_path, commit id)`` of the imported checkpoint. Importing again adds nothing (aliases).

    Raises:
        crewckpt.errors.CkptError: nothing readable at ``location`` (one line naming it and the reason).
    """
    from crewckpt.errors import CkptError
    from crewckpt.views import transfer
    from crewckpt.views.importer import lookup_alias
    from crewckpt.views.layout import split_location as split_db
    from crewckpt.views.reader import open_source

    store = open_store(store_path, create=True)
    db, wanted = split_db(location)
    if wanted is None and db == location and not location.endswith(".json"):  # a db: its newest checkpoint
        with open_source(db) as source:
            records = sorted(source.records, key=lambda r: r.created_at)
            wanted = records[-1].checkpoint_id if records else None
    report = transfer.import_checkpoints(store, location if wanted is None else f"{db}#{wanted}")
    found = [cid for alias, cid in report.imported + report.present if wanted is None or alias == wanted]
    if wanted is not None and not found:
        hit = lookup_alias(store, wanted)
        found = [hit] if hit else []
    if not found:
        why = "; ".join(str(p) for p in report.problems[:1]) or "no CrewAI checkpoint found there"
        raise CkptError(f"cannot restore from {location}: {why}")
    return store_path, found[-1]


def _is_store(location: str) -> bool:
    """Whether a store is at ``location`` (a folder holding one, or any URL/memory store).

    Raises:
        BadLocation, BackendMissing: ``location`` names a scheme no installed backend serves.
    """
    return bool(location) and registry.has_store(location)


def inject_configs(value: Any) -> Any:
    """Replace serialized crewckpt configs (``provider.provider_type == "crewckpt"``) by CheckpointConfig
    instances, in place, so validation of the document yields crewckpt configs (CrewAI's field type only
    knows JSON/SQLite providers). Iterative; returns ``value``."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            for k, child in v.items():
                if (k == "checkpoint" and isinstance(child, dict)
                        and isinstance(child.get("provider"), dict)
                        and child["provider"].get("provider_type") == "crewckpt"):
                    v[k] = CheckpointConfig.model_validate(child, context={RESTORED_CONTEXT: True})
                elif isinstance(child, (dict, list)):
                    stack.append(child)
        elif isinstance(v, list):
            stack.extend(c for c in v if isinstance(c, (dict, list)))
    return value


def load_state(cls: type[RuntimeState], doc: Any, **kwargs: Any) -> RuntimeState:
    """Validate a checkpoint document into a RuntimeState (``kwargs``: e.g. ``context=``)."""
    if not isinstance(doc, dict) or "entities" not in doc:
        raise ValueError("not a CrewAI checkpoint: the document has no 'entities'")
    gate.check(doc)  # before validation: CrewAI resolves some code-naming fields unguarded
    secrets.prepare_restore(doc)  # redacted keys are rebuilt by CrewAI from the environment
    return cls.model_validate(inject_configs(doc), **kwargs)


def write_target(config: Any, read_path: str) -> tuple[str, dict[str, Any]]:
    """Where a run restored from the store at ``read_path`` writes, and the settings the user chose.

    Returns ``(store identity, overrides)``: the store read from, unless ``config`` is a crewckpt
    config whose ``location`` the user set explicitly; ``overrides`` holds ``view``, ``view_format``,
    ``max_checkpoints``, ``push_to`` and ``push_every`` when the user set them on ``config``, else None for each. Nothing stored inside
    the checkpoint (which whoever wrote it chose) decides where writes go, what is published or pruned.
    """
    overrides: dict[str, Any] = {"view": None, "view_format": None, "max_checkpoints": None, "push_to": None,
                                 "push_every": None}
    store = registry.identity(read_path)
    if isinstance(config, CheckpointConfig):
        chosen = config.model_fields_set
        overrides.update({k: getattr(config, k) for k in overrides if k in chosen})
        if "location" in chosen:
            store = config.store_location()
    return store, overrides


def retarget_configs(value: Any, store: str, overrides: dict[str, Any]) -> Any:
    """Replace every checkpoint config stored in a document (crewckpt's or CrewAI's JSON/SQLite ones) by a
    crewckpt config writing to ``store`` with ``overrides`` (see :func:`write_target`), keeping only its
    ``on_events``. The ``checkpoint`` field of every entity model (:func:`crewckpt.crewai.gate.checkpoint_holders`:
    by model annotation, so an agent without ``entity_type`` counts) is replaced whatever it holds unless it
    turns checkpointing off: CrewAI reads a dict without ``provider``, and ``true`` / ``"true"`` / ``1``, as a
    JsonProvider config writing where the dict says (or to ``./.checkpoints``). In place; returns ``value``."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            for k, child in v.items():
                if k == "checkpoint" and _is_config_dict(child):  # anywhere, events included
                    v[k] = _restored_config(child, store, overrides)
                elif isinstance(child, (dict, list)):
                    stack.append(child)
        elif isinstance(v, list):
            stack.extend(c for c in v if isinstance(c, (dict, list)))
    for holder in gate.checkpoint_holders(value):  # any entity model's checkpoint field, found by annotation
        child = holder["checkpoint"]
        if not isinstance(child, CheckpointConfig) and not _checkpointing_off(child):
            holder["checkpoint"] = _restored_config(child, store, overrides)
    return value


_OFF = frozenset({"0", "false", "f", "n", "no", "off"})  # pydantic's lax false strings


def _checkpointing_off(value: Any) -> bool:
    """Whether a stored ``checkpoint`` value turns checkpointing off as pydantic reads it (None, False, 0,
    "false", "no", ...); anything else (True, "true", 1, a dict) would make a config."""
    if value is None or value is False:
        return True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value == 0
    return isinstance(value, str) and value.strip().lower() in _OFF


def _is_config_dict(value: Any) -> bool:
    provider = value.get("provider") if isinstance(value, dict) else None
    return isinstance(provider, dict) and provider.get("provider_type") in ("crewckpt", "json", "sqlite")


def _restored_config(stored: Any, store: str, overrides: dict[str, Any]) -> CheckpointConfig:
    """A crewckpt config writing to ``store`` with ``overrides``, keeping only the ``on_events`` of the
    ``stored`` checkpoint value (a dict; anything else keeps none)."""
    on_events = stored.get("on_events") if isinstance(stored, dict) else None
    fields: dict[str, Any] = {"location": store, **{k: v for k, v in overrides.items() if v is not None}}
    if isinstance(on_events, list) and all(isinstance(e, str) for e in on_events):
        fields["on_events"] = on_events
    return CheckpointConfig.model_validate(fields, context={RESTORED_CONTEXT: True})


def restore_state(cls: type[RuntimeState], config: Any, path: str, rev: str, **kwargs: Any) -> RuntimeState:
    """CrewAI's ``RuntimeState.from_checkpoint`` for a crewckpt store (same events, same lineage fields).

    The restored entities keep checkpointing into the store read from (or the one the user named, see
    :func:`write_target`), never where the checkpoint's stored configs point.
    """
    location = f"{registry.identity(path)}#{rev}"
    crewai_event_bus.emit(config, CheckpointRestoreStartedEvent(location=location,
                                                                provider="CrewckptProvider"))
    start = time.perf_counter()
    try:
        store = open_store(path)
        commit_id = store.resolve(rev)
        target, overrides = write_target(config, path)
        doc = retarget_configs(crewai_json(store.read(commit_id), commit_id[:12]), target, overrides)
        state = load_state(cls, doc, **kwargs)
        state._provider = CrewckptProvider()
        state._checkpoint_id = commit_id
        state._parent_id = commit_id
        info = store.info(commit_id)
        if target == registry.identity(path):
            pinned = _resumed_as.get()
            named = pinned[1] if pinned is not None and pinned[0] == commit_id else rev
            # the branch it continues here (lineage.resume_branch; an import may have renamed it)
            state._branch = resume_branch(store, named, commit_id) or state._branch
        _state_store.set(state, target)
        remember_flow_class(state, info.meta)
        if isinstance(config, CheckpointConfig):
            _adopt_stored_settings(config, state, target)
    except Exception as exc:
        crewai_event_bus.emit(config, CheckpointRestoreFailedEvent(
            location=location, provider="CrewckptProvider", error=str(exc)))
        raise
    crewai_event_bus.emit(config, CheckpointRestoreCompletedEvent(
        location=location, provider="CrewckptProvider", checkpoint_id=commit_id, branch=state._branch,
        parent_id=state._parent_id, duration_ms=(time.perf_counter() - start) * 1000.0))
    return state


@contextlib.contextmanager
def resuming(rev: str, commit_id: str) -> Iterator[None]:
    """While active, restoring ``commit_id`` (64 hex) applies the branch rule to ``rev``, the revision it
    was resolved from (:func:`crewckpt.history.lineage.resume_branch`): ``ckpt resume fork/x`` restores
    the id it resolved and still continues ``fork/x`` when several branches share that tip."""
    outer = _resumed_as.get()
    if outer is not None and outer[0] == commit_id:  # an outer caller's name for the same commit wins
        yield
        return
    token = _resumed_as.set((commit_id, rev))
    try:
        yield
    finally:
        _resumed_as.reset(token)


def _adopt_stored_settings(config: CheckpointConfig, state: RuntimeState, target: str) -> None:
    """Give ``config`` the write store and the stored ``on_events`` where the user left them unset.

    ``kickoff(from_checkpoint=config)`` replaces the restored entity's config by a copy of ``config``
    (CrewAI's ``apply_checkpoint``); without this the copy would write elsewhere and only on CrewAI's default
    ``["task_completed"]``, so a run checkpointing on ``"*"`` would lose e.g. ``crew_kickoff_completed``
    after a Python resume, while ``ckpt resume`` (which keeps the stored configs) writes it.
    """
    chosen = set(config.model_fields_set)
    if "location" not in chosen:
        config.location = target
    if "on_events" not in chosen:
        stored = next((e.checkpoint for e in state.root
                       if isinstance(getattr(e, "checkpoint", None), CheckpointConfig)), None)
        if isinstance(stored, CheckpointConfig):
            config.on_events = list(stored.on_events)
            # still unset: the same config restoring another checkpoint takes that one's events
            config.model_fields_set.discard("on_events")


def restored_store(state: Any) -> str | None:
    """The store a state restored from crewckpt writes to (None for other states)."""
    return _state_store.get(state)


def _from_checkpoint(cls: type[RuntimeState], config: Any, **kwargs: Any) -> RuntimeState:
    target = crewckpt_target(config)
    if target is None:
        gate.check_crewai_location(getattr(config, "restore_from", None))  # CrewAI's own files too
        return _orig["from"](cls, config, **kwargs)
    return restore_state(cls, config, *target, **kwargs)


async def _afrom_checkpoint(cls: type[RuntimeState], config: Any, **kwargs: Any) -> RuntimeState:
    target = crewckpt_target(config)
    if target is None:
        await asyncio.to_thread(gate.check_crewai_location, getattr(config, "restore_from", None))
        return await _orig["afrom"](cls, config, **kwargs)
    return await asyncio.to_thread(restore_state, cls, config, *target, **kwargs)


def _flow_from_checkpoint(cls: type[Flow], config: Any, **kwargs: Any) -> Flow:
    token = _restoring.set(True)
    try:
        flow = _orig["flow_from"](cls, config, **kwargs)
    finally:
        _restoring.reset(token)
    state = crewai_event_bus.runtime_state
    target = _state_store.get(state) if state is not None else None
    if state is None or target is None:
        return flow
    if isinstance(flow.checkpoint, CheckpointConfig) and flow.checkpoint.store_location() != target:
        flow.checkpoint = flow.checkpoint.model_copy(update={"location": target})  # the class's default
    stale = [i for i, e in enumerate(state.root) if isinstance(e, Flow) and e is not flow]
    if not stale:
        return flow
    placeholder = state.root[stale[0]]
    if flow.checkpoint is None and isinstance(placeholder.checkpoint, CheckpointConfig):
        flow.checkpoint = placeholder.checkpoint
    if any(e is flow for e in state.root):
        del state.root[stale[0]]
    else:
        state.root[stale[0]] = flow
    crewai_event_bus.set_runtime_state(state)
    return flow


def _fork(self: RuntimeState, branch: str | None = None) -> None:
    path = _state_store.get(self)
    if path is None:
        _orig["fork"](self, branch)
        return
    from crewckpt.errors import BranchExists
    from crewckpt.history.refnames import check_branch

    if not branch:
        base = (self._checkpoint_id or uuid.uuid4().hex)[:12]
        branch = f"fork/{base}_{uuid.uuid4().hex[:6]}"
    branch = check_branch(branch)
    tip = open_store(path).branches().get(branch)
    if tip is not None and tip != self._checkpoint_id:
        raise BranchExists(f"branch {branch!r} already exists (tip {tip[:12]}); fork with another name "
                           f"or delete it first (ckpt branch -d {branch})")
    _orig["fork"](self, branch)


# -- installation --------------------------------------------------------------------------------------------

def install() -> None:
    """Install the wrappers described in the module docstring (idempotent, thread-safe)."""
    global _installed
    if _installed:
        return
    with _install_lock:
        if _installed:
            return
        _orig["prepare"] = CrewAIEventsBus._prepare_event
        _orig["should"] = checkpoint_listener._should_checkpoint
        _orig["from"] = RuntimeState.from_checkpoint.__func__  # type: ignore[attr-defined]
        _orig["afrom"] = RuntimeState.afrom_checkpoint.__func__  # type: ignore[attr-defined]
        _orig["fork"] = RuntimeState.fork
        _orig["flow_from"] = Flow.from_checkpoint.__func__  # type: ignore[attr-defined]

        def prepare(self: CrewAIEventsBus, source: Any, event: Any) -> None:
            if repeat_signal(event):
                _orig["prepare"](self, source, event)
            else:
                _prepare_event(self, source, event)

        CrewAIEventsBus._prepare_event = prepare  # type: ignore[method-assign]
        checkpoint_listener._should_checkpoint = _should_checkpoint
        RuntimeState.from_checkpoint = classmethod(_from_checkpoint)  # type: ignore[assignment]
        RuntimeState.afrom_checkpoint = classmethod(_afrom_checkpoint)  # type: ignore[assignment]
        RuntimeState.fork = _fork  # type: ignore[method-assign]
        Flow.from_checkpoint = classmethod(_flow_from_checkpoint)  # type: ignore[assignment]
        # checkpoints written with crewckpt.testing.ScriptedLLM (the demo, tests) restore in any process,
        # e.g. `ckpt resume`, not only where crewckpt.testing was imported; CrewAI imports the class lazily
        from crewai.agents.agent_builder.base_agent import _LLM_TYPE_REGISTRY
        _LLM_TYPE_REGISTRY.setdefault("crewckpt_scripted", "crewckpt.testing.ScriptedLLM")
        # CrewAI warns at construction that such a callback "will prevent checkpointing"; with crewckpt it
        # does not (the field is stored as null with crewckpt's own warning): one warning per callback
        warnings.filterwarnings("ignore", message=r".*callbacks cannot be serialized and will prevent checkpointing",
                                category=UserWarning)
        _installed = True

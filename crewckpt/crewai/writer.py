"""Writing checkpoints of a CrewAI RuntimeState into a crewckpt store.

One write: build the document with the state's :class:`~crewckpt.crewai.snapshot.SnapshotBuilder`, commit it
on the state's branch with the state's last checkpoint as parent, then advance the state's lineage
(``_checkpoint_id``/``_parent_id``) exactly as CrewAI's listener does, so every run is one linear chain.
Writes are best-effort: an error is logged, CrewAI's ``CheckpointFailedEvent`` is emitted and the run goes
on. CrewAI's ``CheckpointStartedEvent``/``CheckpointCompletedEvent``/``CheckpointPrunedEvent`` are emitted
around each write with the same fields CrewAI fills (location ``"<store>#<commit id>"``).

Branch rule (:mod:`crewckpt.history.lineage`): a fresh run's first checkpoint has no parent, as in CrewAI
(a new lineage: a root commit); the branch moves to it and the earlier run keeps its run ref
``refs/runs/<run id>`` and its place in the branch's reflog. Later checkpoints use the previous one as
parent. When the branch tip is no longer the parent (the run was restored from an older checkpoint, or
another writer moved the branch), the checkpoint goes on a new branch ``<branch>-from-<parent id[:8]>``
(``-2``, ``-3``... when taken) and the run stays there, leaving the old continuation where it was.
"""

from __future__ import annotations

import atexit
import contextvars
import logging
import os
import threading
import time
import uuid
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from crewai.events.event_bus import crewai_event_bus
from crewai.events.types.checkpoint_events import (
    CheckpointCompletedEvent,
    CheckpointFailedEvent,
    CheckpointPrunedEvent,
    CheckpointStartedEvent,
)

from crewckpt.backends import registry
from crewckpt.crewai import allocator, publish
from crewckpt.crewai.locations import join_location
from crewckpt.crewai.run import entity_meta
from crewckpt.crewai.snapshot import IdWeakMap, builder_for
from crewckpt.history.lineage import continuation_branch
from crewckpt.views.document import CREWAI

if TYPE_CHECKING:
    from crewai.state.runtime import RuntimeState

    from crewckpt import Store
    from crewckpt.crewai.config import CheckpointConfig

logger = logging.getLogger("crewckpt.crewai")

PROVIDER_NAME = "CrewckptProvider"

EMIT_LOCK = threading.RLock()
"""Held while an event is recorded and while a checkpoint is taken, so snapshots follow emission order."""

_tally: dict[str, list[Any]] = {}  # location -> [written, failed, last error]: reported at exit
_tally_lock = threading.Lock()
_stores: dict[str, tuple[Store, Hashable | None]] = {}
_stores_lock = threading.Lock()
_run_ids = IdWeakMap()


def open_store(location: str | os.PathLike[str], *, create: bool = False) -> Store:
    """Open (and with ``create`` initialise) the store at ``location`` (any store location); handles are
    cached per location identity (``./.ckpt`` and its absolute path share one).

    A cached handle is dropped when its store was deleted or replaced meanwhile (a ``rm -rf .ckpt``
    between two runs of one process must not send checkpoints into an unlinked file).

    Raises:
        crewckpt.errors.StoreNotFound: no store at ``location`` and ``create`` is False.
        crewckpt.errors.BadLocation, BackendMissing: a location no installed backend serves.
    """
    key = registry.identity(location)
    cached = _stores.get(key)
    if cached is not None and cached[1] == registry.instance(key):
        return cached[0]
    with _stores_lock:
        cached = _stores.get(key)
        if cached is not None:
            if cached[1] == registry.instance(key):
                return cached[0]
            _close(cached[0])
            del _stores[key]
        from crewckpt import Store

        store = Store.open(key, create=create, profile=CREWAI)
        _stores[key] = (store, registry.instance(key))
    return store


def prepare_store(location: str | os.PathLike[str]) -> None:
    """Open or create the store at ``location`` in a daemon thread (no-op when a handle is cached)."""
    key = registry.identity(location)
    if key in _stores:
        return

    def run() -> None:
        try:
            open_store(key, create=True)
        except Exception:
            logger.debug("crewckpt: preparing the store at %s failed", key, exc_info=True)

    threading.Thread(target=run, name="crewckpt-prepare-store", daemon=True).start()


def _close(store: Store) -> None:
    try:
        store.close()
    except Exception:
        logger.debug("crewckpt: closing a stale store handle failed", exc_info=True)


def forget_stores() -> None:
    """Close and drop every cached store handle (tests; after a store was deleted)."""
    with _stores_lock:
        for store, _ in _stores.values():
            _close(store)
        _stores.clear()


def place(store: Store, parent_id: str | None, branch: str) -> tuple[list[str], str]:
    """Decide ``(parents, branch)`` for a checkpoint whose lineage parent is ``parent_id`` on ``branch``.

    Returns ``parents=[]`` (a root: a new lineage, as CrewAI's first checkpoint of a fresh kickoff) when
    there is no parent or the parent is not in this store (lineage from elsewhere, e.g. a CrewAI JSON
    checkpoint), ``[parent_id]`` otherwise; the branch is a new ``<branch>-from-<parent[:8]>`` when
    ``branch``'s tip is not the parent (:func:`crewckpt.history.lineage.continuation_branch`).
    """
    if parent_id is None or not _known(store, parent_id):
        return [], branch
    return [parent_id], continuation_branch(store, parent_id, branch)


def _known(store: Store, commit_id: str) -> bool:
    from crewckpt.errors import CkptError

    try:
        store.info(commit_id)
    except (CkptError, ValueError):
        return False
    return True


def commit_document(store: Store, doc: dict[str, Any], *, parent_id: str | None, branch: str,
                    trigger: str | None = None, run_id: str | None = None) -> tuple[str, str]:
    """Commit ``doc`` following the branch rule; returns ``(commit id, branch written)``.

    ``doc["branch"]`` is rewritten when the checkpoint has to go on a new branch.
    """
    parents, target = place(store, parent_id, branch)
    if target != branch and isinstance(doc, dict) and "branch" in doc:
        doc["branch"] = target
    commit_id = store.commit(doc, branch=target, parents=parents, run_id=run_id, trigger=trigger, profile=CREWAI)
    return commit_id, target


def run_id_for(state: RuntimeState) -> str:
    """A stable id for the run that owns ``state`` (recorded in each commit's ``run_id``)."""
    rid = _run_ids.get(state)
    if rid is None:
        rid = "run-" + uuid.uuid4().hex[:12]
        _run_ids.set(state, rid)
    return rid


def _emit(cfg: Any, event: Any) -> None:
    # In a copy of the context, as CrewAI's listener does from its pool thread: checkpoint events must not
    # become the "previous event" of the run's next event.
    contextvars.copy_context().run(crewai_event_bus.emit, cfg, event)


def _context(event: Any) -> dict[str, Any]:
    return {
        "task_id": getattr(event, "task_id", None),
        "task_name": getattr(event, "task_name", None),
        "agent_id": getattr(event, "agent_id", None),
        "agent_role": getattr(event, "agent_role", None),
    }


def write_checkpoint(state: RuntimeState, cfg: CheckpointConfig, event: Any = None, *,
                     trigger: str | None = None, branch: str | None = None,
                     commit_trigger: str | None = None) -> str | None:
    """Write one checkpoint of ``state`` now; best-effort.

    Args:
        state: the run's RuntimeState.
        cfg: the crewckpt CheckpointConfig in effect (store = ``cfg.location``).
        event: the triggering event, if any (its type becomes the document's ``trigger``).
        trigger: trigger label when there is no event (manual checkpoints); None writes no ``trigger`` key.
        branch: write on this branch instead of the state's (the state then stays on it).
        commit_trigger: label for the commit's trigger field when it differs from the document's.
    Returns:
        The commit id (64 hex), or None when the write failed (logged, ``CheckpointFailedEvent`` emitted).
    """
    with EMIT_LOCK:
        trigger = event.type if event is not None else trigger
        if branch is not None and branch != state._branch:
            state._branch = branch
        parent_id: str | None = state._parent_id
        branch_name: str = state._branch
        context = _context(event)
        location = cfg.store_location()
        _emit(cfg, CheckpointStartedEvent(location=location, provider=PROVIDER_NAME, trigger=trigger,
                                          branch=branch_name, parent_id=parent_id, **context))
        start = time.perf_counter()
        try:
            store = open_store(location, create=True)
            parents, target = place(store, parent_id, branch_name)
            doc = builder_for(state).document(state, parent_id=parent_id, branch=target, trigger=trigger)
            commit_id = store.commit(doc, branch=target, parents=parents, run_id=run_id_for(state),
                                     trigger=commit_trigger or trigger, meta=entity_meta(state), profile=CREWAI)
        except Exception as exc:
            _count(location, exc)
            logger.warning("crewckpt: checkpoint on %s failed (trigger=%s): %s", _shown(location), trigger,
                           scrub(str(exc)),
                           exc_info=logger.isEnabledFor(logging.DEBUG))
            _emit(cfg, CheckpointFailedEvent(location=location, provider=PROVIDER_NAME, trigger=trigger,
                                             branch=branch_name, parent_id=parent_id, error=str(exc),
                                             **context))
            return None
        _count(location, None)
        allocator.after_checkpoint()
        state._branch = target
        state._checkpoint_id = commit_id
        state._parent_id = commit_id
        duration_ms = (time.perf_counter() - start) * 1000.0
        logger.info("Checkpoint saved. Resume with: ckpt resume %s", commit_id[:12])
        _emit(cfg, CheckpointCompletedEvent(location=join_location(location, commit_id),
                                            provider=PROVIDER_NAME, trigger=trigger, branch=target,
                                            parent_id=parent_id, checkpoint_id=commit_id,
                                            duration_ms=duration_ms, **context))
        if cfg.max_checkpoints is not None:
            _prune(store, cfg, cfg.max_checkpoints, target, parent_id, trigger, context)
        view = cfg.view_target()
        if view is not None:
            _live_view(location, *view, max_checkpoints=cfg.max_checkpoints).publish(commit_id)
        if cfg.push_to and cfg.push_every:
            publish.after_checkpoint(cfg, location, target, run_id_for(state))
        return commit_id


_views: dict[tuple[str, str, str, int | None], Any] = {}
_views_lock = threading.Lock()


def _live_view(store_path: str, dest: str, fmt: str, *, max_checkpoints: int | None = None) -> Any:
    """The LiveViewExporter publishing ``store_path``'s commits to ``dest``, pruning each branch of the
    view to ``max_checkpoints`` as CrewAI's providers do (one exporter per combination, kept)."""
    key = (store_path, dest, fmt, max_checkpoints)
    exporter = _views.get(key)
    if exporter is None:
        with _views_lock:
            exporter = _views.get(key)
            if exporter is None:
                from crewckpt.views.exporter import LiveViewExporter

                exporter = _views[key] = LiveViewExporter(store_path, dest, fmt,
                                                          max_checkpoints=max_checkpoints)
    return exporter


def flush_views(timeout: float | None = 10.0) -> bool:
    """Wait until every live view has written what was published to it; False on timeout. Also runs at
    interpreter exit (timeout 10 s) so views are complete when a script ends."""
    with _views_lock:
        exporters = list(_views.values())
    return all([e.flush(timeout) for e in exporters])


atexit.register(flush_views)


def _count(location: str, error: BaseException | None) -> None:
    with _tally_lock:
        t = _tally.setdefault(location, [0, 0, ""])
        if error is None:
            t[0] += 1
        else:
            t[1] += 1
            t[2] = str(error)


def checkpoint_failures() -> dict[str, tuple[int, int, str]]:
    """Per store location, ``(checkpoints written, checkpoints that failed, the last error)`` in this process
    (best-effort writes go on after a failure; this is how a run learns what it lost)."""
    with _tally_lock:
        return {loc: (t[0], t[1], t[2]) for loc, t in _tally.items()}


def _shown(location: object) -> str:
    """A location for a log line: its secrets masked (a log outlives the terminal)."""
    return registry.redact(str(location))


scrub = registry.scrub


def report_failures() -> None:
    """Log one warning per store where checkpoints failed (runs at interpreter exit): a best-effort run
    that kept going says at the end how many of its checkpoints were not written, and why."""
    for loc, (ok, failed, last) in checkpoint_failures().items():
        if failed:
            logger.warning("crewckpt: %d of %d checkpoints could not be written to %s; last error: %s",
                           failed, ok + failed, _shown(loc), scrub(str(last)))


atexit.register(report_failures)


def _prune(store: Store, cfg: CheckpointConfig, keep: int, branch: str, parent_id: str | None,
           trigger: str | None, context: dict[str, Any]) -> None:
    try:
        removed = store.prune(branch, keep=keep)
    except Exception as exc:
        logger.warning("crewckpt: prune of branch %s in %s failed: %s", branch, _shown(cfg.location),
                       scrub(str(exc)))
        return
    _emit(cfg, CheckpointPrunedEvent(location=cfg.store_location(), provider=PROVIDER_NAME,
                                     trigger=trigger, branch=branch, parent_id=parent_id,
                                     removed_count=len(removed), max_checkpoints=keep,
                                     **context))

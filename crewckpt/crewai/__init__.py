"""CrewAI integration: drop-in checkpointing for Crew, Flow and Agent on a crewckpt store.

One-line change::

    from crewckpt.crewai import CheckpointConfig
    crew = Crew(agents=..., tasks=..., checkpoint=CheckpointConfig(on_events=["*"]))   # store: ./.ckpt

Restore and fork by hash or ref through CrewAI's own entry points::

    crew.kickoff(from_checkpoint=CheckpointConfig(restore_from="main~2"))
    Crew.from_checkpoint(CheckpointConfig(restore_from="3fa2c1"))
    Crew.fork(CheckpointConfig(restore_from="main~4"), branch="exp")
    restore("main", store=".ckpt")            # -> the Crew / Flow / Agent the checkpoint records

Manual checkpoints from event handlers: :func:`checkpoint` / :func:`acheckpoint`. Live CrewAI views of the
store: ``CheckpointConfig(view="./.checkpoints")`` and :func:`flush_views`. Guide: docs/crewai.md.

Importing this module installs crewckpt's hooks into CrewAI (see :mod:`crewckpt.crewai.hooks`).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from crewckpt.crewai.config import DEFAULT_LOCATION, CheckpointConfig, CrewckptProvider
from crewckpt.crewai.hooks import install, resuming
from crewckpt.crewai.run import entity_class
from crewckpt.crewai.snapshot import UnserializableFieldWarning
from crewckpt.crewai.writer import EMIT_LOCK, flush_views, open_store, write_checkpoint
from crewckpt.views.document import crewai_json

install()

def _store_path(store: Any) -> str:
    """The location of ``store`` (a Store, a location, or None: ``$CKPT_STORE`` / the nearest ``.ckpt``)."""
    if store is None:
        from crewckpt import Store

        with Store.open(None) as found:  # discovery, as `ckpt` does
            assert found.location is not None
            return found.location
    if isinstance(store, (str, os.PathLike)):
        return os.fspath(store)
    location = getattr(store, "location", None)
    if location is None:
        raise ValueError("restore needs a store it can reopen: an anonymous memory store (Store.memory()) "
                         "cannot be; use Store.init('memory:NAME') or a folder")
    return str(location)


def restore(rev: str = "HEAD", *, store: Any = None, cls: Any = None, fork: bool | str = False,
            **kwargs: Any) -> Any:
    """Restore the entity a checkpoint records, ready to resume with ``kickoff()``.

    Args:
        rev: revision: commit id or prefix (>= 4 hex), branch, ``main~2``, ``exp@{1}``, ``HEAD`` (the current
            branch's tip), ``latest`` (the last checkpoint written), or a CrewAI checkpoint id (an alias).
        store: a :class:`crewckpt.Store`, a store location (folder, ``memory:NAME``, URL), or None
            (``$CKPT_STORE`` or the nearest ``.ckpt``).
        cls: class to restore into (e.g. your Flow subclass, whose methods the checkpoint cannot carry);
            default: Crew, Flow or Agent after the checkpoint's first entity.
        fork: False to continue: new checkpoints go on the branch ``rev`` names when it is that branch's
            tip, else on the one branch whose tip it is, else on ``<branch>-from-<id[:8]>``
            (:func:`crewckpt.history.lineage.resume_branch`; HEAD never moves); True or a branch name to
            fork (CrewAI's ``fork(config, branch)``; True generates ``fork/<id[:12]>_<6 hex>``).
        kwargs: passed to ``cls.from_checkpoint`` (e.g. ``definition=`` for declarative flows).
    Returns:
        The restored Crew, Flow or Agent; it keeps checkpointing to ``store`` with this checkpoint as parent.
    Raises:
        StoreNotFound, UnknownRevision, AmbiguousRevision: bad store or revision.
        IntegrityError: a stored object does not match its hash.
        ValueError: the checkpoint holds no Crew/Flow/Agent, or callbacks are stored and
            ``CREWAI_DESERIALIZE_CALLBACKS`` is not set (CrewAI's rule).
    """
    path = _store_path(store)
    opened = open_store(path)
    full = opened.resolve(rev)  # once: the class and the restored state come from the same commit
    if cls is None:
        cls = entity_class(crewai_json(opened.read(full), full[:12]))
    config = CheckpointConfig(location=path, restore_from=full)
    with resuming(rev, full):  # the branch rule still sees the name given (lineage.resume_branch)
        if fork is not False:
            return cls.fork(config, branch=None if fork is True else fork, **kwargs)
        return cls.from_checkpoint(config, **kwargs)


def checkpoint(state: Any = None, location: str | os.PathLike[str] = DEFAULT_LOCATION, *,
               branch: str | None = None, trigger: str | None = "manual") -> str | None:
    """Write the current RuntimeState into a crewckpt store now (manual checkpoint).

    For CrewAI event handlers (``@crewai_event_bus.on(TaskCompletedEvent)`` receiving ``state``) or any code
    that holds the state: the docs' ``state.checkpoint(...)`` recipe, pointed at crewckpt. The checkpoint
    continues the state's lineage (parent = its last checkpoint) on ``branch`` (default: the state's).

    Args:
        state: a ``crewai.state.runtime.RuntimeState``; None = the one attached to the event bus.
        location: store folder (created if missing).
        branch: branch to write on; the state stays on it for later checkpoints.
        trigger: label recorded as the commit's trigger (not added to the document).
    Returns:
        The commit id (64 hex), or None if the write failed (logged; CrewAI's ``CheckpointFailedEvent``).
    Raises:
        RuntimeError: no state given and none attached to the event bus.
        BadRefName: ``branch`` is not a valid branch name.
    """
    from crewai.events.event_bus import crewai_event_bus

    if state is None:
        state = crewai_event_bus.runtime_state
        if state is None:
            raise RuntimeError("no RuntimeState: pass the handler's `state` or call inside a kickoff")
    if branch is not None:
        from crewckpt.history.refnames import check_branch

        branch = check_branch(branch)
    cfg = CheckpointConfig(location=os.fspath(location))
    with EMIT_LOCK:  # no event is recorded while the snapshot is taken
        return write_checkpoint(state, cfg, None, branch=branch, commit_trigger=trigger)


async def acheckpoint(state: Any = None, location: str | os.PathLike[str] = DEFAULT_LOCATION, *,
                      branch: str | None = None, trigger: str | None = "manual") -> str | None:
    """Async form of :func:`checkpoint` (the write runs in a worker thread; same arguments and result)."""
    from crewai.events.event_bus import crewai_event_bus

    if state is None:
        state = crewai_event_bus.runtime_state
    return await asyncio.to_thread(checkpoint, state, location, branch=branch, trigger=trigger)


__all__ = [
    "CheckpointConfig",
    "CrewckptProvider",
    "UnserializableFieldWarning",
    "acheckpoint",
    "checkpoint",
    "entity_class",
    "flush_views",
    "install",
    "restore",
]

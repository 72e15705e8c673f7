"""``CheckpointConfig`` and ``CrewckptProvider``: CrewAI's checkpoint settings pointed at a crewckpt store.

``CheckpointConfig`` subclasses ``crewai.state.checkpoint_config.CheckpointConfig`` so ``Crew``, ``Flow`` and
``Agent`` accept it as ``checkpoint=`` and as ``from_checkpoint=``; it keeps CrewAI's fields and defaults
(``on_events=["task_completed"]``, ``max_checkpoints=None``, ``restore_from=None``) and changes two:
``location`` is a crewckpt store location (a folder, default ``./.ckpt``, created on the first write; or
``memory:NAME``, ``postgresql://...``: see crewckpt.backends.registry) and ``provider``
is widened from CrewAI's closed JSON/SQLite union to any ``BaseProvider`` so it can hold
:class:`CrewckptProvider` (the only provider it accepts: JSON files and SQLite rows are import/export views).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, Literal

import orjson
from crewai.state.checkpoint_config import CheckpointConfig as CrewAICheckpointConfig
from crewai.state.provider.core import BaseProvider
from pydantic import Field, SerializeAsAny, ValidationInfo, field_validator

from crewckpt.backends import registry
from crewckpt.crewai.locations import join_location as join_location  # re-exported: the old path
from crewckpt.crewai.locations import split_location as split_location
from crewckpt.crewai.signals import SIGNAL_EVENTS as SIGNAL_EVENTS
from crewckpt.history import jsontext

DEFAULT_LOCATION = "./.ckpt"
RESTORED_CONTEXT = "crewckpt_restored"
"""Validation-context key set when a config is rebuilt from a stored checkpoint (no store is prepared)."""
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
"""File suffixes of an SQLite database (CrewAI's SQLite provider habit); never a store folder's name."""


class CrewckptProvider(BaseProvider):
    """CrewAI provider interface over a crewckpt store (``location`` is the store folder).

    Used when CrewAI itself drives a write or read through ``state._provider`` (the docs'
    ``state.checkpoint(location)`` recipe on a restored state, ``afrom_checkpoint``). Automatic
    checkpoints do not go through :meth:`checkpoint`: crewckpt writes them on the emitting thread with an
    incremental serializer (see :mod:`crewckpt.crewai.writer`).

    Locations returned are ``"<absolute store path>#<commit id>"``; :meth:`extract_id` returns the commit id.
    """

    provider_type: Literal["crewckpt"] = "crewckpt"

    def checkpoint(self, data: str, location: str, *, parent_id: str | None = None,
                   branch: str = "main") -> str:
        """Commit a serialized RuntimeState (JSON text) on ``branch``; returns ``"<store>#<commit id>"``.

        Raises:
            orjson.JSONDecodeError: ``data`` is not JSON.
            crewckpt.errors.CkptError: the store refused the commit.
        """
        from crewckpt.crewai.secrets import Redactor
        from crewckpt.crewai.writer import commit_document, open_store

        path, _ = split_location(location)
        store = open_store(path, create=True)
        doc = Redactor().apply(jsontext.loads(data), data)  # CrewAI's own dump holds keys in clear
        commit_id, _branch = commit_document(store, doc, parent_id=parent_id, branch=branch,
                                             trigger=doc.get("trigger") if isinstance(doc, dict) else None)
        return join_location(path, commit_id)

    async def acheckpoint(self, data: str, location: str, *, parent_id: str | None = None,
                          branch: str = "main") -> str:
        """Async form of :meth:`checkpoint` (runs it in a worker thread)."""
        return await asyncio.to_thread(self.checkpoint, data, location, parent_id=parent_id, branch=branch)

    def prune(self, location: str, max_keep: int, *, branch: str = "main") -> int:
        """Keep the newest ``max_keep`` checkpoints of ``branch``; returns how many were pruned."""
        from crewckpt.crewai.writer import open_store

        path, _ = split_location(location)
        return len(open_store(path).prune(branch, keep=max_keep))

    def extract_id(self, location: str) -> str:
        """The commit id after ``#`` (or the whole string when there is no ``#``)."""
        path, rev = split_location(location)
        return rev if rev is not None else path

    def from_checkpoint(self, location: str) -> str:
        """JSON text of the checkpoint ``"<store>#<rev>"`` (rev: id, prefix, branch, ``main~2``...)."""
        from crewckpt.crewai.writer import open_store
        from crewckpt.views.document import crewai_json

        path, rev = split_location(location)
        store = open_store(path)
        full = store.resolve(rev or "HEAD")
        return orjson.dumps(crewai_json(store.read(full), full[:12])).decode()

    async def afrom_checkpoint(self, location: str) -> str:
        """Async form of :meth:`from_checkpoint`."""
        return await asyncio.to_thread(self.from_checkpoint, location)


class CheckpointConfig(CrewAICheckpointConfig):
    """CrewAI's ``CheckpointConfig`` writing into a crewckpt store.

    Fields (CrewAI's, with crewckpt's defaults):
        location: store location, default ``./.ckpt``: a folder (relative paths resolve against the working
            folder at write time, as in CrewAI), ``sqlite:PATH``, ``memory:NAME``, or the URL of an installed
            backend (``postgresql://...``); an unknown scheme or a backend not installed is refused here. A config made in code opens (or creates) the store in a background
            thread right away, so the run's first checkpoint does not pay for it; failures there are only
            logged at debug level (the first write reports them).
        on_events: event names that trigger a checkpoint, ``"*"`` for all, and the signals
            ``SIGTERM``, ``SIGINT``, ``SIGHUP``, ``SIGTSTP``, ``SIGCONT`` (crewckpt installs handlers for the
            signals listed, chaining to the previous handler). Default ``["task_completed"]``.
        provider: always a :class:`CrewckptProvider`.
        max_checkpoints: after each write keep only the newest N (>= 1) checkpoints of the branch written.
        restore_from: a revision (``"3fa2c1"``, ``"main"``, ``"main~2"``, ``"exp@{1}"``, ``"HEAD"``: the
            current branch's tip, ``"latest"``: the last checkpoint written) in the store at ``location``, or
            ``"<store location>#<rev>"``. Used by ``from_checkpoint``/``fork`` and
            ``kickoff(from_checkpoint=...)``.
        view: also publish every checkpoint to a CrewAI JSON folder or SQLite database (a live view that
            CrewAI's own tools read), written incrementally by a background thread; a view that cannot be
            written is logged and never slows or fails the run. ``view_format``: ``"json"``/``"sqlite"``
            (default: SQLite for ``.db``/``.sqlite``/``.sqlite3``, else JSON). See :func:`flush_views`.
        push_to: publish the run (its ``refs/runs/<run id>``, and its branch when no tip loses its name:
            :mod:`crewckpt.history.publish`) to this remote of the store (``ckpt remote add``) or location
            when the run ends, and with ``push_every=N`` after every N checkpoints; best effort on a background
            thread (a failure is logged, emitted as ``CheckpointFailedEvent`` with trigger ``"push"`` and
            counted in :func:`crewckpt.crewai.publish.push_stats`). See :func:`crewckpt.crewai.publish.flush_pushes`.

    Semantics follow CrewAI's docs: ``checkpoint=None`` inherits from the parent (task -> agent -> crew),
    ``True`` uses CrewAI's defaults, ``False`` opts out and stops inheritance, a config overrides.
    """

    location: str = Field(default=DEFAULT_LOCATION, description="crewckpt store location (folder or URL).")
    provider: SerializeAsAny[BaseProvider] = Field(  # type: ignore[assignment]
        default_factory=CrewckptProvider, description="Always a CrewckptProvider."
    )

    view: str | None = Field(
        default=None,
        description="Also publish each checkpoint to this CrewAI location (a live view): a JSON folder, or "
        "an SQLite database when it ends in .db/.sqlite/.sqlite3 or view_format is 'sqlite'.",
    )
    view_format: Literal["json", "sqlite"] | None = Field(
        default=None, description="Format of `view`; None infers it from the suffix."
    )
    push_to: str | None = Field(
        default=None,
        description="Publish the run (refs/runs/<run id>, and its branch when no tip loses its name) to this "
        "remote of the store (a name from `ckpt remote`) or store location when the run ends (and every "
        "`push_every` checkpoints); best effort, in the background.",
    )
    push_every: int | None = Field(
        default=None, description="With push_to: also push after every N checkpoints of a run (N >= 1)."
    )

    @field_validator("provider", mode="before")
    @classmethod
    def _only_crewckpt(cls, value: Any) -> Any:
        if isinstance(value, dict) and value.get("provider_type", "crewckpt") == "crewckpt":
            return CrewckptProvider()
        if isinstance(value, CrewckptProvider):
            return value
        kind = value.get("provider_type") if isinstance(value, dict) else type(value).__name__
        raise ValueError(
            f"crewckpt.crewai.CheckpointConfig writes to a crewckpt store, not {kind!r}; to also write "
            "CrewAI's own JSON files or SQLite db, keep the default provider and add view='./.checkpoints' "
            "(or view='./checkpoints.db'): a live view CrewAI's tools read"
        )

    @field_validator("push_every")
    @classmethod
    def _push_every_positive(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"push_every must be at least 1 (got {value}); leave it unset to push only when the "
                             "run ends")
        return value

    @field_validator("max_checkpoints")
    @classmethod
    def _keep_at_least_one(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(
                f"max_checkpoints must be at least 1 (got {value}): a branch keeps its newest checkpoint; "
                "use checkpoint=False to turn checkpointing off"
            )
        return value

    @field_validator("location", mode="before")
    @classmethod
    def _location_str(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        if isinstance(value, str) and not value.strip():
            raise ValueError("location is empty; give a store folder such as './.ckpt'")
        if isinstance(value, str):
            if not (info.context or {}).get(RESTORED_CONTEXT):
                # an unknown scheme or a backend not installed: one line now (a CkptError, not wrapped by
                # pydantic), never a local folder named "s3:" made by the first write
                registry.identity(split_location(value)[0])
            path = registry.local_folder(split_location(value)[0])
            if path is not None and (Path(path).suffix.lower() in SQLITE_SUFFIXES or os.path.isfile(path)):
                raise ValueError(
                    f"location {value!r} names a file, but a crewckpt store is a folder: use a folder such as "
                    f"'./.ckpt', add view={path!r} to also publish a CrewAI SQLite db, restore from one with "
                    f"restore_from='{path}#<checkpoint id>', or import it with `ckpt import {path}`"
                )
        return value

    @property
    def signals(self) -> frozenset[str]:
        """The signal names in ``on_events``."""
        return SIGNAL_EVENTS & set(self.on_events)

    def triggers(self, event_type: str) -> bool:
        """True when an event of this type triggers a checkpoint (``"*"`` matches every event)."""
        return self.trigger_all or event_type in self.on_events

    def view_target(self) -> tuple[str, str] | None:
        """``(absolute view path, "json" | "sqlite")`` of the live view, or None without one."""
        if not self.view:
            return None
        fmt = self.view_format or (
            "sqlite" if Path(self.view).suffix.lower() in SQLITE_SUFFIXES else "json")
        return os.path.abspath(self.view), fmt

    def store_location(self) -> str:
        """The canonical store location of ``location`` (the absolute folder of a folder store; a
        ``"<store>#rev"`` location gives its store part); see :mod:`crewckpt.backends.registry`."""
        return registry.identity(split_location(self.location)[0])

    def store_path(self) -> Path:
        """``Path(store_location())``: the absolute store folder of a folder store (kept for earlier callers;
        :meth:`store_location` also covers ``memory:`` and URL stores)."""
        return Path(self.store_location())

    def model_post_init(self, __context: Any) -> None:
        super().model_post_init(__context)
        if self.signals:
            from crewckpt.crewai.signals import install_signal_handlers

            install_signal_handlers(self.signals)
        if self.restore_from is None and not (__context or {}).get(RESTORED_CONTEXT):
            from crewckpt.crewai.writer import prepare_store

            prepare_store(self.store_location())  # open or create it now, off the run's critical path

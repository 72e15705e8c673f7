"""The parts of an open store that maintenance works on (gc, fsck, the index rebuild; later sync), instead of
the whole :class:`crewckpt.history.store.Store` facade: verified object access, refs, the commit index,
meta, and the backend itself for its capabilities, locks, write scopes and maintenance hook.

One backend usually provides every part; they are named apart so a split store (refs and index in one
service, objects in another) or a test double can hand in each on its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from crewckpt.backends.base import Backend, CommitIndex, MetaStore, RefStore
from crewckpt.history.objectdb import ObjectDB


@dataclasses.dataclass(frozen=True)
class StoreParts:
    """objects: verified reads and encoding (``objects.backend`` is the object store); refs, index, meta: the
    backend's other parts; backend: capabilities, :meth:`~Backend.lock`, write scopes
    (:func:`crewckpt.backends.base.writing`) and :meth:`~Backend.maintain`; size_bytes: bytes the store
    takes at rest (for reports); summarize: a document's listing summary (the index rebuild recomputes it
    for commits whose body holds none)."""

    objects: ObjectDB
    refs: RefStore
    index: CommitIndex
    meta: MetaStore
    backend: Backend
    size_bytes: Callable[[], int]
    summarize: Callable[[Any], dict[str, Any]]

    @classmethod
    def of(cls, backend: Backend, objects: ObjectDB | None = None, *, size_bytes: Callable[[], int] | None = None,
           summarize: Callable[[Any], dict[str, Any]] | None = None) -> StoreParts:
        """Every part from one backend. Default size: the sum of frame bytes; default summarizer: the
        generic profile's (:data:`crewckpt.history.profile.GENERIC`: the size only)."""
        if summarize is None:
            from crewckpt.history.profile import GENERIC

            summarize = GENERIC.summary
        return cls(objects or ObjectDB(backend), backend, backend, backend, backend,
                   size_bytes or (lambda: backend.object_stats()[2]), summarize)

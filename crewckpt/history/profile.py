"""Store profiles: what the generic store is told about the documents it holds.

The store works on any JSON value. A :class:`Profile` plugs in the two things that depend on what the
documents mean, and nothing else:

* ``summarize``: ``doc -> {key: JSON value}``, the listing summary kept in the commit index (``ckpt log``
  reads it without decoding snapshots). The store always adds ``logical_bytes`` (the document's size as
  compact JSON); the summarizer adds its own keys before it.
* ``separate_keys``: split hints. A container under one of these object keys becomes its own tree, and a
  string its own blob, even when small (over 256 bytes; so a value repeated in many places, or embedded in a
  parent changed on every checkpoint, is stored once and not rewritten with it). They change object ids,
  never what is read back.
* ``logical_size``: ``(doc, size) -> int``, the document's size as its consumers see it, from ``size``, its
  stored compact JSON (the CrewAI profile adds back the agents its references stand for): ``logical_bytes``.
* ``store_version``: ``doc -> int``, the store format version (objects_format.md section 10) a store must
  record before it holds ``doc``; the commit that stores it raises the store's version in its transaction.
* ``cache_bytes``: the bound of the writer's splitter caches for these documents (None: the default,
  :data:`crewckpt.history.snapshot.CACHE_BYTES`). Writer policy: it changes speed and memory, never ids.

:data:`GENERIC` (the default) knows nothing of any framework: a summary of the size only, no split hints.
The CrewAI profile lives with the CrewAI-facing code (:data:`crewckpt.views.document.CREWAI`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from crewckpt.history.summary import json_size

Summarizer = Callable[[Any], dict[str, Any]]
"""``doc -> summary keys``: ``doc`` may hold :class:`crewckpt.history.snapshot.Frozen` values; the result is
a small JSON object (msgpack-encodable: str keys; str, int, bool, None, lists and maps as values)."""

LOGICAL_BYTES = "logical_bytes"
"""The summary key the store always sets: bytes of the document as compact UTF-8 JSON."""


def base_version(doc: Any) -> int:
    """The generic ``store_version``: 2 (what format-2 commits need) for any document."""
    return 2


def stored_size(doc: Any, size: int) -> int:
    """The generic ``logical_size``: the stored size itself."""
    return size


def no_summary(doc: Any) -> dict[str, Any]:
    """The generic summarizer: no keys of its own (the store still records ``logical_bytes``)."""
    return {}


@dataclasses.dataclass(frozen=True)
class Profile:
    """A summarizer and split hints for one kind of document (see the module docstring).

    name: shown in errors and docs; summarize: :data:`Summarizer`; separate_keys: object keys whose container
    (string) values are stored as their own trees (blobs); store_version: ``doc -> int``, the store format
    version ``doc`` needs; cache_bytes: the splitter's cache bound for these documents (None: the default).
    """

    name: str = "generic"
    summarize: Summarizer = no_summary
    separate_keys: frozenset[str] = frozenset()
    store_version: Callable[[Any], int] = base_version
    logical_size: Callable[[Any, int], int] = stored_size
    cache_bytes: int | None = None

    def summary(self, doc: Any, logical_bytes: int | None = None) -> dict[str, Any]:
        """The summary the store keeps for ``doc``: the summarizer's keys, then ``logical_bytes``
        (``logical_bytes`` if already known, else measured)."""
        size = self.logical_size(doc, json_size(doc)) if logical_bytes is None else logical_bytes
        out = dict(self.summarize(doc))
        out.pop(LOGICAL_BYTES, None)  # the store's own measure wins, and stays last
        out[LOGICAL_BYTES] = size
        return out


GENERIC = Profile()
"""The default profile: any JSON; summary ``{"logical_bytes": n}``; no split hints."""

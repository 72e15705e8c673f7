"""crewckpt: git for AI-agent checkpoints (content-addressed, deduplicated CrewAI checkpoint store).

Public API: :class:`Store`, :class:`Frozen`, :class:`CommitInfo` and the error types in :mod:`crewckpt.errors`.
Names load on first use (PEP 562), so ``import crewckpt`` and the ``ckpt`` command start quickly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crewckpt.errors import (
    AmbiguousRevision,
    BadRefName,
    CkptError,
    FormatVersionError,
    IntegrityError,
    RefConflict,
    StoreNotFound,
    UnknownRevision,
)

if TYPE_CHECKING:
    from crewckpt.history.commits import CommitInfo, PrunedCommit
    from crewckpt.history.snapshot import Frozen
    from crewckpt.history.store import Store

_LAZY = {"Store": "crewckpt.history.store", "Frozen": "crewckpt.history.snapshot",
         "CommitInfo": "crewckpt.history.commits", "PrunedCommit": "crewckpt.history.commits"}

__all__ = [
    "AmbiguousRevision",
    "BadRefName",
    "CkptError",
    "CommitInfo",
    "FormatVersionError",
    "Frozen",
    "IntegrityError",
    "PrunedCommit",
    "RefConflict",
    "Store",
    "StoreNotFound",
    "UnknownRevision",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'crewckpt' has no attribute {name!r}")

"""crewckpt: git for AI-agent checkpoints (content-addressed, deduplicated CrewAI checkpoint store).

Public API: :class:`Store` and the error types in :mod:`crewckpt.errors`.
"""

from crewckpt.errors import (AmbiguousRevision, BadRefName, CkptError, FormatVersionError, IntegrityError,
                             RefConflict, StoreNotFound, UnknownRevision)
from crewckpt.history.commits import CommitInfo, PrunedCommit
from crewckpt.history.snapshot import Frozen
from crewckpt.history.store import Store

__all__ = ["Store", "Frozen", "CommitInfo", "PrunedCommit", "CkptError", "StoreNotFound", "FormatVersionError",
           "IntegrityError", "UnknownRevision", "AmbiguousRevision", "BadRefName", "RefConflict"]
__version__ = "0.1.0"

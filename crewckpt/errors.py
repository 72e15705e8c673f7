"""Error types raised by crewckpt.

Every error carries a one-line message that names the problem and, where possible, the fix.
All derive from :class:`CkptError` so callers (the CLI) can catch one type.
"""

from __future__ import annotations


class CkptError(Exception):
    """Base class of every crewckpt error; ``str(err)`` is a one-line message."""


class StoreNotFound(CkptError):
    """No crewckpt store at the given path (or found by discovery)."""


class BadLocation(CkptError):
    """A store location names no backend: an unknown scheme or a malformed location (one line with the fix).
    Deliberately not a ValueError: a pydantic validator lets it through as this one line."""


class BackendMissing(CkptError):
    """A store location of a known scheme whose backend is not installed (names the ``pip install``)."""


class StoreExists(CkptError):
    """``Store.init`` was asked to create a store where one already exists."""


class FormatVersionError(CkptError):
    """The store was written by a newer format version than this reader understands."""


class CorruptStore(CkptError):
    """The store's database or metadata cannot be read (truncated, not a database, missing tables)."""


class IntegrityError(CkptError):
    """An object failed verification: its bytes do not decode or do not hash to its id.

    Attributes:
        oid: the 64-hex object id that failed.
    """

    def __init__(self, oid: str, why: str) -> None:
        self.oid = oid
        self.why = why
        super().__init__(f"object {oid} is corrupt: {why}; run `ckpt fsck --full` to list affected commits")


class MissingObject(CkptError):
    """An object a commit needs is not in the store (pruned, gc'd or lost)."""

    def __init__(self, oid: str) -> None:
        self.oid = oid
        super().__init__(f"object {oid} is missing from the store; run `ckpt fsck` to list affected commits")


class DecodeError(CkptError, ValueError):
    """Bytes are not a valid encoding of a crewckpt object (hostile or damaged input)."""


class UnknownRevision(CkptError, LookupError):
    """A revision string names no commit."""


class AmbiguousRevision(CkptError, LookupError):
    """A short id prefix matches several commits; the message lists each candidate."""


class BadRefName(CkptError, ValueError):
    """A branch or ref name breaks git's check-ref-format rules."""


class RefConflict(CkptError):
    """A compare-and-swap on a ref failed: the ref moved since it was read."""


class BranchExists(CkptError):
    """A branch of that name already exists."""


INSTALL_HINT = "pip install 'crewckpt[crewai]'"
"""How to get the optional CrewAI runtime (the ``crewai`` extra)."""


class CrewAIMissing(CkptError):
    """An action needs the crewai package (the ``crewai`` extra) and it is not installed."""


def crewai_available() -> bool:
    """True when ``import crewai`` can work (checked without importing it: that takes ~2 s)."""
    import importlib.util
    try:
        return importlib.util.find_spec("crewai") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["crewai"] is None (import blocked)
        return False


def require_crewai(action: str) -> None:
    """Raise :class:`CrewAIMissing` (one line with the install command) unless crewai is installed.

    Args:
        action: what needs it, as the user named it (e.g. "`ckpt resume`", "Fork").
    """
    if not crewai_available():
        raise CrewAIMissing(f"{action} needs CrewAI, which is not installed; install it with: {INSTALL_HINT}")


class DocumentTooLarge(CkptError, ValueError):
    """A document is bigger or deeper than a stated limit: refused at commit (nesting deeper than
    ``MAX_DEPTH``) or at read (more bytes or values than the read limits; raise them to read it anyway)."""

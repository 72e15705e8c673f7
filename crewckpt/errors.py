"""Error types raised by crewckpt.

Every error carries a one-line message that names the problem and, where possible, the fix.
All derive from :class:`CkptError` so callers (the CLI) can catch one type.
"""

from __future__ import annotations

from typing import Any


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


class UnknownRemote(CkptError, LookupError):
    """No remote of that name is configured in the store (``ckpt remote -v`` lists them)."""


class UntrustedRemote(CkptError, PermissionError):
    """A remote came with the store (its config is data) and this machine's user never added or trusted it:
    using it would send credentials and checkpoints where someone else chose (crewckpt.history.trust)."""


class PushRejected(CkptError):
    """A push would lose commits on the remote (not a fast-forward), or another pusher moved the branch first;
    the message names both tips and what to do. Nothing on the remote branch changed."""


class PullDiverged(CkptError):
    """A pull cannot fast-forward: the local branch and the remote's have each got commits the other lacks;
    the message names both tips and what to do. Nothing changed locally but the remote-tracking ref."""


class SyncError(CkptError):
    """A transfer between two stores could not be planned or completed (the message names the store, the
    object and the fix); nothing half-done is left referenced."""


class BranchInUse(CkptError):
    """The branch is the current branch (HEAD names it): it cannot be deleted."""


class BranchNotMerged(CkptError):
    """No other branch or remote-tracking ref reaches the branch's tip: deleting it (``ckpt branch -d``) would
    let prune and gc drop checkpoints nothing else keeps. ``ckpt branch -D`` deletes it anyway."""


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


class StoreBusy(CkptError):
    """The store stayed locked by another writer for longer than the busy timeout."""


class StoreWriteError(CkptError):
    """The store cannot be written: the disk is full, the store is read-only, or an I/O error. The write
    was rolled back (nothing of it is stored; refs are unchanged)."""


class GcBusy(CkptError):
    """Another gc holds the store's gc lock."""


class GcAborted(CkptError):
    """gc could not read an object its mark had to walk through (listed, but unreadable right now): it
    deleted nothing."""


class JsonPathError(ValueError):
    """A JSON path that cannot be parsed, or that does not lead to a value in the document."""


class UntrustedCode(CkptError, ValueError):
    """A checkpoint names code that restoring would import or run, and the user did not opt in.

    Attributes:
        path: the field, e.g. ``entities[0].agents[1].tools[0].tool_type``.
        value: the stored string.
        findings: every ``(path, value, what)`` found in the document.
    """

    def __init__(self, findings: list[tuple[str, str, str]]) -> None:
        self.findings = findings
        self.path, self.value, what = findings[0]
        more = f" (and {len(findings) - 1} more field(s))" if len(findings) > 1 else ""
        shown = self.value if len(self.value) <= 60 else self.value[:57] + "..."
        # the variable comes before the details: callers may cut long lines
        super().__init__(f"field {self.path} names code{more}; set CREWAI_DESERIALIZE_CALLBACKS=1 only for a checkpoint you "
                         f"trust ({shown!r}: {what})")


class UntrustedEndpoint(CkptError, ValueError):
    """A checkpoint points an LLM at an endpoint the user does not trust (the API key would go there).

    Attributes:
        path: the field, e.g. ``entities[0].agents[0].llm.base_url``.
        value: the stored URL.
        findings: every ``(path, url)`` found.
    """

    def __init__(self, findings: list[tuple[str, str]]) -> None:
        self.findings = findings
        self.path, self.value = findings[0]
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        shown = self.value if len(self.value) <= 60 else self.value[:57] + "..."
        what = "embedder" if ".embedder." in self.path else "LLM"
        super().__init__(f"field {self.path} points the {what} at {shown!r}{more}, where your API key and prompts "
                         f"would be sent; add that URL to CREWCKPT_LLM_ENDPOINTS (comma-separated) to trust it, or set "
                         f"CREWAI_DESERIALIZE_CALLBACKS=1 for a checkpoint you trust")


class UntrustedPath(CkptError, ValueError):
    """A checkpoint names an output file the resumed run would write (``Task.output_file``,
    ``Crew.output_log_file``) that could lie anywhere: absolute, ``~``, ``..`` or a ``{placeholder}``.

    Attributes:
        path: the field, e.g. ``entities[0].tasks[2].output_file``.
        value: the stored value.
        findings: every ``(path, value)`` found.
    """

    def __init__(self, findings: list[tuple[str, Any]]) -> None:
        self.findings = findings
        self.path, self.value = findings[0]
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        shown = repr(self.value) if len(repr(self.value)) <= 62 else repr(self.value)[:59] + "..."
        super().__init__(f"field {self.path} would make the resumed run write to {shown}{more}, a file the checkpoint "
                         f"chose; set CREWAI_DESERIALIZE_CALLBACKS=1 only for a checkpoint you trust, or `ckpt "
                         f"export` it, give that field a relative path (or null) and `ckpt import` it again")


class UntrustedCapability(CkptError, ValueError):
    """A checkpoint turns on something restoring would act on that is neither named code nor an output file:
    an MCP server to start or connect to, code execution, a remote agent, an agent fetched from a
    repository, a file to read and hand to the LLM (``Task.input_files``, ``Crew.prompt_file``, a knowledge
    source's ``file_paths``).

    Attributes:
        path: the field, e.g. ``entities[0].agents[0].mcps``.
        value: the stored value.
        findings: every ``(path, value, what)`` found.
    """

    def __init__(self, findings: list[tuple[str, Any, str]]) -> None:
        self.findings = findings
        self.path, self.value, what = findings[0]
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        shown = repr(self.value) if len(repr(self.value)) <= 62 else repr(self.value)[:59] + "..."
        super().__init__(f"field {self.path} would make the resumed run {what} ({shown}){more}; set "
                         f"CREWAI_DESERIALIZE_CALLBACKS=1 only for a checkpoint you trust, or `ckpt export` it, clear "
                         f"that field and `ckpt import` it again")


class JsonbError(CkptError, ValueError):
    """A BLOB is not well-formed JSONB. ``offset`` is the byte where the problem was found; ``reason`` says
    what is wrong in a few words."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"malformed JSONB at byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class SourceError(CkptError):
    """A path is not a readable CrewAI checkpoint location (missing, unreadable, not CrewAI's table)."""


class DamagedCheckpoint(CkptError):
    """One checkpoint in a source cannot be read (truncated or invalid JSON/JSONB, not an object)."""


class ViewWriteError(CkptError):
    """A view cannot be written (unsafe branch name, not CrewAI's table, conflicting existing file)."""

"""Branch and ref names: git's check-ref-format rules plus crewckpt's reserved names.

Source: git-check-ref-format(1). Names are NFC-normalized first so two spellings of one name are one branch.
"""

from __future__ import annotations

import re
import unicodedata

from crewckpt.errors import BadRefName

HEADS = "refs/heads/"
RUNS = "refs/runs/"
REMOTES = "refs/remotes/"  # remote-tracking refs: refs/remotes/<remote>/<branch>, written origin/main
RESERVED = frozenset({"HEAD", "latest", "@"})
MAX_LEN = 200  # characters; keeps ref names far from filesystem limits when exported as folders

_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
# Unicode categories a name may not contain: controls (C0 and C1), format characters (bidi overrides such as
# U+202E, zero-width U+200B-U+200D, U+2060, U+FEFF), lone surrogates (not UTF-8: SQLite cannot store them),
# private use, unassigned, and separators other than ASCII space (U+00A0, U+2028...): a name shown in a
# terminal must look like what it is.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"})


def check_branch(name: object) -> str:
    """Validate a branch name and return its NFC form.

    Rules (git check-ref-format --branch): non-empty; no control characters (C0 or C1), NUL, space,
    ``~ ^ : ? * [ \\``, no invisible or text-direction characters (Unicode categories Cf, Zs, Zl, Zp: bidi
    overrides, zero-width characters), no lone surrogates, private-use or unassigned code points;
    no ``..`` and no ``@{``; no leading ``-`` or ``/``, no trailing ``/`` or ``.``; no empty component
    (``a//b``); no component starting with ``.`` or ending with ``.lock``; not ``@``. crewckpt also reserves
    ``HEAD`` and ``latest`` (revision keywords) and names longer than 200 characters.

    Raises:
        BadRefName: (a ValueError) naming the rule that failed.
    """
    if not isinstance(name, str):
        raise BadRefName(f"branch name must be a string, not {type(name).__name__}")
    n = unicodedata.normalize("NFC", name)
    why = _problem(n)
    if why:
        shown = repr(name) if len(name) <= 60 else repr(name[:57]) + "..."
        raise BadRefName(f"bad branch name {shown}: {why}; use letters, digits, '-', '_', '.' and '/'")
    return n


def _problem(n: str) -> str | None:
    if not n:
        return "empty"
    if len(n) > MAX_LEN:
        return f"longer than {MAX_LEN} characters"
    if n in RESERVED:
        return "reserved word"
    if n == "refs" or n.startswith("refs/"):
        return "starts with 'refs/' (a branch is named without it)"
    m = _FORBIDDEN.search(n)
    if m:
        return f"contains {m.group()!r}"
    bad = next((c for c in n if unicodedata.category(c) in _INVISIBLE), None)
    if bad is not None:
        kind = "a lone surrogate (not valid UTF-8)" if unicodedata.category(bad) == "Cs" else (
            "an invisible, control or text-direction character")
        return f"contains U+{ord(bad):04X}, {kind}"
    if ".." in n:
        return "contains '..'"
    if "@{" in n:
        return "contains '@{'"
    if n.startswith("-"):
        return "starts with '-'"
    if n.startswith("/") or n.endswith("/"):
        return "starts or ends with '/'"
    if n.endswith("."):
        return "ends with '.'"
    for part in n.split("/"):
        if not part:
            return "has an empty component ('//')"
        if part.startswith("."):
            return "a component starts with '.'"
        if part.endswith(".lock"):
            return "a component ends with '.lock'"
    return None


def ref_name_problem(name: str) -> str | None:
    """Why a stored ref name is one crewckpt never writes (a store from elsewhere made it), else None: under
    ``refs/heads/``, ``refs/runs/`` and ``refs/remotes/`` the rest must follow the branch rules
    (:func:`check_branch`, NFC); other ``refs/`` names are left to their owners."""
    for prefix in (HEADS, RUNS, REMOTES):
        if name.startswith(prefix):
            rest = name[len(prefix):]
            return _problem(rest) or ("not in Unicode NFC form" if unicodedata.normalize("NFC", rest) != rest
                                      else None)
    return None


def branch_ref(branch: str) -> str:
    """``main`` -> ``refs/heads/main`` (validates)."""
    return HEADS + check_branch(branch)


def run_ref(run_id: str) -> str:
    """Per-run (lineage) ref: ``refs/runs/<run_id>``; run ids follow the branch rules."""
    return RUNS + check_branch(run_id)


ANONYMOUS_RUN = "w-"  # + 12 hex digits: the run id a Store handle gives commits whose caller names no run
_ANONYMOUS_RUN = re.compile(r"w-[0-9a-f]{12}")


def anonymous_run(run_id: str) -> bool:
    """True for a run id a Store handle made up (``w-`` and 12 hex digits: ``Store.commit`` without
    ``run_id=``). Such a run is just "what that handle wrote" (every plain commit has a run ref), not a run
    anyone started or can name, so advice never offers to publish it; CrewAI runs (``run-...``), import
    lineages and explicit ``run_id=`` values are named runs."""
    return _ANONYMOUS_RUN.fullmatch(run_id) is not None


def ref_fix(name: str) -> str:
    """How to mend ref ``name`` when it names no commit (its reflog keeps what it held before)."""
    short = name[len(HEADS):] if name.startswith(HEADS) else name
    delete = f"delete it with `ckpt branch -d {short}` or " if short != name else ""
    return f"{delete}see its earlier values with `ckpt reflog {short}`"

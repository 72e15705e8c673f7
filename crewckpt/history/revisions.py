"""Revision syntax, parsed in one place (git's gitrevisions(7) subset plus CrewAI ids).

Grammar: ``BASE SUFFIX*`` where BASE is ``HEAD`` or ``@`` (the tip of the current branch, which the
symbolic ref HEAD names), ``latest`` (the last commit written on any local branch; never a
remote-tracking or run ref), a full 64-hex id, a branch
name, a remote-tracking name ``REMOTE/BRANCH`` (``refs/remotes/REMOTE/BRANCH``; a local branch of the same
name wins, as in git), a ``refs/...`` name, a CrewAI checkpoint id kept as an alias (``20261129T234227_0d859366``), or a
unique hex prefix of at least 4 characters, optionally followed by ``@{N}`` (the ref's N-th prior value from
its reflog: ``main@{1}``, ``HEAD@{2}``; with no name, ``@{N}`` is the current branch's, as in git);
``@{-N}`` alone is the N-th branch HEAD was on before the current one. SUFFIX is ``~N`` (N-th first-parent
ancestor) or ``^`` / ``^N`` (N-th parent; ``^0`` the commit itself). Source: gitrevisions(7).
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata

from crewckpt.errors import UnknownRevision

MIN_PREFIX = 4
_SUFFIX = re.compile(r"~(\d*)|\^(\d*)")
_REFLOG = re.compile(r"^(.*)@\{(-?\d+)\}")
MAX_REV_LEN = 1024


@dataclasses.dataclass(frozen=True)
class Revision:
    """A parsed revision: ``base`` string, optional reflog index, and ancestry steps ``(parent_no, count)``:
    ``~N`` is ``(1, N)``, ``^N`` is ``(N, 1)``. ``base`` is ``""`` for ``@{N}`` (the current branch's reflog)
    and ``@{-N}`` (``reflog`` = -N: the N-th branch checked out before the current one)."""

    text: str
    base: str
    reflog: int | None
    steps: tuple[tuple[int, int], ...]


_AT_BRACES = re.compile(r"@\{([^}]*)\}")


_UPSTREAM = frozenset({"u", "upstream", "push"})  # git's @{upstream} shorthands (any case)
_PEEL = re.compile(r"\^\{[^}]*\}")
_ONE_COMMIT_RANGE = re.compile(r"\^[!@-]")  # A^! (A alone), A^@ (A's parents), A^-N (A^N..A)


def unsupported(text: str) -> str | None:
    """The one line naming git revision syntax crewckpt does not take that ``text`` uses, or None: ranges
    (``A..B``, ``A...B``, ``^A``, ``A^!``, ``A^@``, ``A^-``), ``@{upstream}`` / ``@{u}`` / ``@{push}``, dates
    in ``@{...}``, peeling (``A^{}``, ``A^{commit}``), message search (``:/TEXT``). Asked only for a
    revision that is otherwise unknown or malformed (git refuses ``..``, ``^``, ``:`` and ``@{`` in branch
    names, so no branch is shadowed)."""
    shown = text if len(text) <= 80 else text[:77] + "..."
    if text.startswith(":/"):
        return (f"revision {shown!r}: searching commit messages (:/TEXT) is not supported; find the commit in "
                f"`ckpt log` and give its id")
    if text.startswith("^") or ".." in text or _ONE_COMMIT_RANGE.search(text):
        return (f"revision {shown!r}: ranges (A..B, A...B, ^A, A^!, A^@, A^-) are not supported; show one "
                f"branch with `ckpt log B`, or compare tips with `ckpt diff A B`")
    braces = [m.group(1).strip() for m in _AT_BRACES.finditer(text)]
    if any(b.lower() in _UPSTREAM for b in braces):
        return (f"revision {shown!r}: @{{upstream}} (@{{u}}, @{{push}}) is not supported; name the "
                f"remote-tracking ref, e.g. origin/main")
    if any(not re.fullmatch(r"-?\d+", b) for b in braces):
        return (f"revision {shown!r}: dates in @{{...}} are not supported; use @{{N}} (the N-th previous "
                f"value; see `ckpt reflog`)")
    if _PEEL.search(text):
        return (f"revision {shown!r}: ^{{...}} (peeling) is not needed: every revision names a commit; write "
                f"{_PEEL.sub('', text)!r}")
    return None


def parse(text: object) -> Revision:
    """Parse a revision string.

    Raises:
        UnknownRevision: empty, too long, or malformed (e.g. ``main~x``, ``@{}``).
    """
    if not isinstance(text, str) or not text.strip():
        raise UnknownRevision("empty revision; give a commit id, a branch, HEAD or e.g. main~2")
    if len(text) > MAX_REV_LEN or "\x00" in text:
        raise UnknownRevision(f"revision {text[:40]!r}... is not valid")
    if any("\ud800" <= c <= "\udfff" for c in text):
        raise UnknownRevision(f"revision {text[:40]!r} is not valid UTF-8 (it holds a lone surrogate); no branch, "
                              f"id or checkpoint id can contain one")
    text = unicodedata.normalize("NFC", text)  # branch names are stored NFC (objects_format.md section 8)
    cut = min([i for i in (text.find("~"), text.find("^")) if i >= 0], default=len(text))
    head, tail = text[:cut], text[cut:]
    reflog = None
    m = _REFLOG.match(head)
    if m and m.end() == len(head):
        head, reflog = m.group(1), int(m.group(2))
        if reflog < 0 and head:
            raise UnknownRevision(f"revision {text!r}: @{{-N}} stands alone (the N-th branch checked out "
                                  f"before the current one); write e.g. @{{-1}} or {head}@{{1}}")
    if not head and reflog is None:
        raise UnknownRevision(unsupported(text) or f"revision {text!r} has no base; write e.g. main~2")
    steps: list[tuple[int, int]] = []
    pos = 0
    while pos < len(tail):
        m = _SUFFIX.match(tail, pos)
        if not m:
            raise UnknownRevision(unsupported(text) or f"revision {text!r}: cannot parse {tail[pos:]!r}; use ~N, ^ "
                                  f"or ^N")
        if m.group(0).startswith("~"):
            steps.append((1, int(m.group(1) or 1)))
        else:
            steps.append((int(m.group(2)) if m.group(2) else 1, 1))
        pos = m.end()
    return Revision(text, head, reflog, tuple(steps))


def is_hex(s: str) -> bool:
    """True for a lowercase/uppercase hex string of at least MIN_PREFIX characters."""
    return len(s) >= MIN_PREFIX and all(c in "0123456789abcdefABCDEF" for c in s)

"""HEAD: the symbolic ref naming the current branch, and its own reflog (git's ``.git/HEAD`` and ``logs/HEAD``).

Rules (docs/cli.md, "HEAD and the current branch"):

* HEAD always names a branch (``refs/heads/<name>``), which may not exist yet (unborn, like a fresh git
  repository's ``main``); there is no detached HEAD. A store that never stored HEAD (written before HEAD was
  a symbolic ref) reads as the branch of its last commit written when that branch exists, else ``main``;
  its first write stores that value, so it stays put from then on.
* A commit moves the branch it is written on; HEAD follows (an entry in HEAD's reflog) only when it names
  that branch. Writers never switch HEAD to another branch: only :func:`switch` does (``ckpt switch``, and
  ``ckpt resume`` / the TUI's Resume and Fork for the branch their run wrote on).
* Renaming the current branch moves HEAD with it; the current branch cannot be deleted.

Functions take a backend or a transaction (both are :class:`~crewckpt.backends.base.Parts`), so a move of
HEAD lands atomically with the ref update that caused it.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from crewckpt.backends.base import Parts, ReflogEntry, RefStore
from crewckpt.errors import BadRefName, UnknownRevision
from crewckpt.history import refnames

if TYPE_CHECKING:
    from crewckpt.history.store import Store

HEAD = "HEAD"
DEFAULT_BRANCH = "main"
_MOVE = re.compile(r"^[a-z-]+: moving from (\S+) to (\S+)$")  # HEAD reflog lines that record a switch
_log = logging.getLogger("crewckpt")
_warned: set[str] = set()


def head_ref(r: Parts) -> str:
    """The ref HEAD names (``refs/heads/<branch>``; the branch may be unborn). A damaged stored value is
    ignored with one warning, and the legacy rule applies."""
    stored = r.get_symref(HEAD)
    if stored is not None:
        if _valid(stored):
            return stored
        if stored not in _warned:
            _warned.add(stored)
            _log.warning("crewckpt: the store's HEAD holds %r, not a branch ref; using the branch of the last "
                         "checkpoint instead (fix it with `ckpt switch BRANCH`)", stored[:80])
    return _legacy(r)


def head_ref_stored(txn: Parts) -> str:
    """:func:`head_ref` inside a write, storing it first when the store has none yet, so that a store made
    before HEAD was stored keeps the HEAD it had (the legacy rule depends on the last commit written)."""
    stored = txn.get_symref(HEAD)
    if stored is not None and _valid(stored):
        return stored
    ref = head_ref(txn)
    txn.set_symref(HEAD, ref)
    return ref


def follow(txn: Parts, ref: str, old: bytes | None, new: bytes, time_ns: int, message: str, *,
           head_ref: str | None = None) -> None:
    """Record in HEAD's reflog that branch ``ref`` moved ``old -> new``, if HEAD names it. ``head_ref``: what
    :func:`head_ref_stored` returned earlier in this transaction (saves reading HEAD again)."""
    if (head_ref_stored(txn) if head_ref is None else head_ref) == ref:
        txn.reflog_append(ReflogEntry(HEAD, old, new, time_ns, message))


def follow_run(store: Store, branch: str | None, last: str | None, restored_from: str, *,
               finished: bool = False) -> bool:
    """After a resumed run in the user's terminal (``ckpt resume``, the TUI's Resume and Fork): make the
    branch it wrote on the current branch, as `git switch` before committing would, so that ``ckpt log`` and
    ``ckpt resume`` without REV go on from it. Nothing moves when the run wrote no checkpoint (``last`` is
    None or ``restored_from``) or its branch is already current, unless ``finished`` (the run had nothing
    left to do: the branch REV named still becomes current, when it exists). Python restores (``restore``,
    ``from_checkpoint``) never call this: a program writing checkpoints does not move the store's HEAD.

    Returns:
        True when HEAD moved (one ``resume: moving from A to B`` entry in HEAD's reflog).
    """
    if not branch or (not finished and (not last or last == restored_from)):
        return False
    if branch not in store.branches() or store.current_branch() == branch:
        return False
    store.switch(branch, reason="resume")
    return True


def problems(refs: RefStore) -> list[str]:
    """fsck's findings about HEAD: a stored value that is not a branch ref (an unborn branch is fine)."""
    stored = refs.get_symref(HEAD)
    if stored is None or _valid(stored):
        return []
    shown = stored if len(stored) <= 80 else stored[:77] + "..."
    return [f"HEAD holds {shown!r}, not a branch ref (read meanwhile as the branch of the last checkpoint "
            f"written, else main); set it with `ckpt switch BRANCH`"]


def branch_of(ref: str) -> str:
    """``refs/heads/main`` -> ``main``."""
    return ref[len(refnames.HEADS):]


def previous_branch(r: Parts, n: int) -> str | None:
    """The ``n``-th branch HEAD was on before the current one (git's ``@{-n}``), from the ``moving from A
    to B`` entries of HEAD's reflog; None when HEAD moved fewer times."""
    seen = 0
    for e in reversed(r.reflog(HEAD)):
        m = _MOVE.match(e.message)
        if m:
            seen += 1
            if seen == n:
                return m.group(1)
    return None


def unborn(r: Parts, text: str) -> UnknownRevision:
    """The one-line error for ``text`` (HEAD, ``@``, ``HEAD~2``...) when HEAD's branch has no commit yet."""
    name = branch_of(head_ref(r))
    others = sorted(branch_of(k) for k in r.refs(refnames.HEADS))
    if not others:
        return UnknownRevision(f"revision {text!r}: the store has no checkpoints yet (HEAD names branch "
                               f"{name!r}, which its first checkpoint creates)")
    shown = ", ".join(others[:10]) + (", ..." if len(others) > 10 else "")
    return UnknownRevision(f"revision {text!r}: HEAD is on branch {name!r}, which has no checkpoints yet; "
                           f"switch to a branch that has some with `ckpt switch BRANCH` (branches: {shown})")


def _valid(ref: str) -> bool:
    if not ref.startswith(refnames.HEADS):
        return False
    try:
        refnames.check_branch(branch_of(ref))
    except BadRefName:
        return False
    return True


def _legacy(r: Parts) -> str:
    """HEAD of a store that has none stored: the branch of its last commit written if that branch exists
    (what HEAD meant before it was a symbolic ref), else ``main``."""
    last = r.index_last()
    row = r.index_get(last) if last is not None else None
    if row is not None:
        ref = refnames.HEADS + str(row.branch)
        if _valid(ref) and r.get_ref(ref) is not None:
            return ref
    return refnames.HEADS + DEFAULT_BRANCH

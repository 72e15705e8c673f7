"""Where a checkpoint goes: the branch rule shared by the CrewAI writer and ``ckpt import``.

CrewAI's rule for lineage: a fresh kickoff has no parent, so its first checkpoint is a root (a new lineage);
a restored run continues from the checkpoint it was restored from. crewckpt adds git's rule that a branch
never moves backwards and that no tip loses its name:

* a root (new lineage) moves the branch to itself; the earlier run on that branch keeps its run ref
  ``refs/runs/<run id>`` and stays in the branch's reflog (``main@{1}``) and in ``ckpt list`` / ``log --all``;
* a continuation goes on the branch when the branch's tip is its parent (or the branch does not exist yet);
  otherwise on a new branch ``<branch>-from-<parent id[:8]>`` (``-2``, ``-3``... when taken), so the tip that
  was there keeps its branch.

Which branch a resumed run continues (:func:`resume_branch`; ``ckpt resume REV``, ``restore(REV)``,
``CheckpointConfig(restore_from=REV)``), REV resolving to commit C:

1. REV names a local branch whose tip is C (``NAME``, ``refs/heads/NAME``, ``HEAD``/``@`` = the current
   branch; no ``~``/``^``/``@{}`` suffix): that branch;
2. else the one local branch whose tip is C, when exactly one is (a hash, ``latest``...);
3. else, when several are, the branch C was written on if it is one of them;
4. else C's own branch, which the run cannot move back: its checkpoints go on ``<branch>-from-<C[:8]>``.
   That is git's detached HEAD (committing on a commit that is no named tip, or the tip of several branches
   none named, advances no branch), kept under a name; resume a branch by name to continue it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crewckpt.errors import CkptError
from crewckpt.history import refnames, revisions

if TYPE_CHECKING:
    from crewckpt.history.store import Store


def free_branch(store: Store, base: str) -> str:
    """``base`` when no branch has that name, else the first free ``<base>-2``, ``<base>-3``..."""
    names = store.branches()
    if base not in names:
        return base
    n = 2
    while f"{base}-{n}" in names:
        n += 1
    return f"{base}-{n}"


def continuation_branch(store: Store, parent_id: str, branch: str) -> str:
    """The branch a child of commit ``parent_id`` (64 hex) that wants ``branch`` is written on: ``branch``
    when its tip is the parent or it does not exist, else a new ``<branch>-from-<parent[:8]>``."""
    # one ref read, not a listing of every branch (a fleet's store has a branch per run)
    tip_id = store.backend.get_ref(refnames.HEADS + branch)
    tip = tip_id.hex() if tip_id is not None else None
    if tip is None or tip == parent_id:
        return branch
    return free_branch(store, f"{branch}-from-{parent_id[:8]}")


def named_branch(store: Store, rev: str) -> str | None:
    """The local branch revision ``rev`` names by itself (``NAME``, ``refs/heads/NAME``, ``HEAD``/``@``: the
    current branch), or None (an id, a prefix, an alias, a remote-tracking name, a ``~``/``^``/``@{}``
    expression, no such branch). Resolution order as in :meth:`Store.resolve`: a local branch wins over an
    alias or a hex prefix; a full 64-hex id is an id."""
    try:
        r = revisions.parse(rev)
    except CkptError:
        return None
    base = r.base
    if r.steps or r.reflog is not None or base == "latest" or (len(base) == 64 and revisions.is_hex(base)):
        return None
    if base in ("HEAD", "@"):
        return store.current_branch()
    if base.startswith(refnames.HEADS):
        base = base[len(refnames.HEADS):]
    elif base.startswith("refs/"):
        return None
    try:
        base = refnames.check_branch(base)
    except CkptError:
        return None
    return base if store.backend.get_ref(refnames.HEADS + base) is not None else None


def pick_resume_branch(commit_branch: str, tips: list[str], named: str | None) -> str:
    """Rules 1-4 of the module docstring, given the branch the commit was written on (its index row),
    the local branches whose tip it is, and the branch the revision named (None: none)."""
    if named is not None and named in tips:
        return named
    if len(tips) == 1:
        return tips[0]
    return commit_branch  # rule 3 when it is a tip; rule 4 (a new -from- branch at write time) otherwise


def resume_branch(store: Store, rev: str, commit_id: str) -> str | None:
    """The branch a run restored from revision ``rev`` (resolved to ``commit_id``, 64 hex) writes on, before
    :func:`continuation_branch`: rules 1-4 of the module docstring. None when the commit is on no branch
    here and no branch has it as its tip (an unindexed commit: the document's own branch stays).
    Reads the branch listing once (one restore, not one checkpoint)."""
    tips = sorted(name for name, tip in store.branches().items() if tip == commit_id)
    own = store.info(commit_id).branch
    picked = pick_resume_branch(own, tips, named_branch(store, rev))
    return picked or None

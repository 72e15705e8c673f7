"""Where a checkpoint goes: the branch rule shared by the CrewAI writer and ``ckpt import``.

CrewAI's rule for lineage: a fresh kickoff has no parent, so its first checkpoint is a root (a new lineage);
a restored run continues from the checkpoint it was restored from. crewckpt adds git's rule that a branch
never moves backwards and that no tip loses its name:

* a root (new lineage) moves the branch to itself; the earlier run on that branch keeps its run ref
  ``refs/runs/<run id>`` and stays in the branch's reflog (``main@{1}``) and in ``ckpt list`` / ``log --all``;
* a continuation goes on the branch when the branch's tip is its parent (or the branch does not exist yet);
  otherwise on a new branch ``<branch>-from-<parent id[:8]>`` (``-2``, ``-3``... when taken), so the tip that
  was there keeps its branch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crewckpt.history import refnames

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

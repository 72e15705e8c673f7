"""Local order: how a commit gets its ``seq`` when it becomes live, so that every indexed parent's seq stays
below every indexed child's (objects_format.md section 9; docs/backends.md, I6).

A new commit simply takes the next seq. A commit can also come back into the index under children that
stayed live: prune removed its row (its children were kept) and then the same commit is written again
(commit format 2 ids hold no seq or branch, so a re-import of a CrewAI checkpoint after gc, the same
document committed again with the same parents, time and run id, or a fetch of it from a remote gives the
same id). A fresh seq would then sit above those children's. Such a *revived* commit still takes the next
seq, and its live descendants are renumbered after it (parents before children, keeping their relative
order): they read as having arrived again just after it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from crewckpt.backends.base import IndexRow, Parts
from crewckpt.history.refnames import HEADS


def index_commit(w: Parts, cid: bytes, row_for: Callable[[int], IndexRow], *, may_revive: bool,
                 seq: int | None = None) -> None:
    """Make commit ``cid`` live in the write scope ``w``: ``row_for(seq)`` builds its row (a row already
    there stays as it is: index_add is idempotent).

    ``seq``: a seq taken for it earlier (``w.counter_next("seq")``), else one is taken now. Without a
    transaction a writer MUST take it after reading the tip it builds on and before its compare-and-swap
    moves the ref (docs/backends.md, W3): a writer that then builds on the new tip takes a higher one, even
    if it indexes its commit first.

    ``may_revive``: the commit may already be named as a parent by live rows (see the module docstring);
    then those rows and their live descendants get new seqs after it. False only where that is impossible
    (a commit made just now, whose id did not exist before: its time is the current one), which saves the
    lookups. The steps keep parents below children at every point for a backend without transactions: the
    commit's seq is taken first, the descendants are renumbered last-first into seqs above it, then the
    commit's row is added.
    """
    if seq is None:
        seq = w.counter_next("seq")
    if may_revive and w.index_get(cid) is None and w.index_children([cid]):
        moved = _stable_descendants(w, cid)
        fresh = [w.counter_next("seq") for _ in moved]
        w.index_renumber({r.id: s for r, s in reversed(list(zip(moved, fresh, strict=True)))})
    w.index_add(row_for(seq))


def _stable_descendants(w: Parts, cid: bytes) -> list[IndexRow]:
    """:func:`_descendants`, after reading the branch refs they belong to: a backend that serializes writers
    per ref rather than per store (PostgreSQL: a transaction that reads a ref waits for its writers) then
    orders this renumbering against a checkpoint adding a child on one of those branches meanwhile; the set
    is recomputed until no new branch appears (elsewhere transactions are serialized and one pass does)."""
    read: set[str] = set()
    while True:
        moved = _descendants(w, cid, w.index_children([cid]))
        new = {r.branch for r in moved if isinstance(r.branch, str) and r.branch} - read
        if not new:
            return moved
        for b in sorted(new):
            w.get_ref(HEADS + b)
        read |= new


def _descendants(w: Parts, cid: bytes, kids: list[IndexRow]) -> list[IndexRow]:
    """Every live row reachable from ``cid`` through live children, parents before children (ties and
    a damaged index's cycles: by the current seq)."""
    rows = {r.id: r for r in w.index_rows()}
    children: dict[bytes, list[bytes]] = {}
    for r in rows.values():
        for p in r.parents:
            children.setdefault(p, []).append(r.id)
    found: set[bytes] = set()
    todo = [k.id for k in kids]
    while todo:
        x = todo.pop()
        if x in found or x == cid or x not in rows:
            continue
        found.add(x)
        todo.extend(children.get(x, ()))
    waiting = {x: sum(1 for p in set(rows[x].parents) if p in found and p != x) for x in found}
    heap = [(rows[x].seq, x) for x, n in waiting.items() if n == 0]
    heapq.heapify(heap)
    out: list[IndexRow] = []
    done: set[bytes] = set()
    while len(out) < len(found):
        if not heap:  # a cycle among the rows (a damaged index): release its lowest-seq member
            heap.append(min((rows[x].seq, x) for x in found if x not in done))
        _, x = heapq.heappop(heap)
        if x in done:
            continue
        done.add(x)
        out.append(rows[x])
        for k in children.get(x, ()):
            if k in waiting and k not in done:
                waiting[k] -= 1
                if waiting[k] == 0:
                    heapq.heappush(heap, (rows[k].seq, k))
    return out

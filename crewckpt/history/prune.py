"""Which commits ``prune`` removes from one branch, and which of its candidates other branches hold back.

The rule (``Store.prune``): a candidate is a live commit of the branch outside the ``keep`` newest (by
sequence number) and, with a cut time, older than it; the branch's own tip is never one. A candidate stays
when a remote-tracking ref points at it or another existing branch's history reaches it: that branch's tip
or live rows, or any ancestor of those through live rows (a deleted branch's rows do not count). For a
deleted branch (no ref) the history remote-tracking refs reach stays too, as ``branch -d`` counted it. Everything
here is one walk over the other branches' history plus, when reasons are asked for, one pass over the
commits it reached (which branch holds what), so ``ckpt prune`` reads the index once per branch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from crewckpt.backends.base import IndexRow, Parts
from crewckpt.history import refnames


@dataclasses.dataclass(frozen=True)
class PruneReport:
    """What one branch's prune did (or, dry run, would do).

    removed: ids (64 hex) of the commits removed from the live set, oldest first. held: how many of the rule's
    candidates stay because other branches' history or tips reach them or a remote-tracking ref points at
    them (0 when reasons were not asked for). held_by: those branches' names (``origin/main`` for a tracking
    ref), sorted.
    """

    removed: list[str]
    held: int = 0
    held_by: list[str] = dataclasses.field(default_factory=list)


def plan(parts: Parts, branch: str, *, keep: int | None, cut_ns: int | None,
         reasons: bool) -> tuple[list[IndexRow], PruneReport]:
    """The rows ``prune`` of ``branch`` removes (oldest first) and its report, read from ``parts`` (a
    transaction when the caller goes on to remove them). ``cut_ns``: candidates must be older (None: any
    age). ``reasons``: also count and name what holds candidates back (else ``held`` is 0, and the walk runs
    only when some candidate could go)."""
    rows = parts.index_rows(branch)
    heads = {ref[len(refnames.HEADS):]: t for ref, t in parts.refs(refnames.HEADS).items()}
    remotes = {ref[len(refnames.REMOTES):]: t for ref, t in parts.refs(refnames.REMOTES).items()}
    own = heads.pop(branch, None)
    old = rows[:-keep] if keep is not None else rows
    cands = [r for r in old if r.id != own and (cut_ns is None or r.time_ns < cut_ns)]
    tracked = set(remotes.values())
    free = [r for r in cands if r.id not in tracked]
    if not (free or (reasons and cands)):
        return [], PruneReport([], *_tracking_only(cands, remotes, reasons))
    live = {r.id: r for r in parts.index_rows()}
    starts: dict[str, list[bytes]] = {name: [tip] for name, tip in heads.items()}
    if own is None:  # a deleted branch: what other remote-tracking refs reach stays (`branch -d` counted them)
        starts.update({name: [tip] for name, tip in remotes.items() if name not in starts and name != branch})
    for r in live.values():
        if r.branch in starts:
            starts[r.branch].append(r.id)
    needed = ancestors(live, [s for ss in starts.values() for s in ss])
    gone = [r for r in free if r.id not in needed]
    if not reasons:
        return gone, PruneReport([r.id.hex() for r in gone])
    ids = {r.id for r in cands}
    hit = ids & needed
    n, names = _tracking_only(cands, remotes, True)
    names_set = set(names)
    if hit:
        reach = _reaching(live, needed, hit)
        names_set |= {name for name, ss in starts.items() if any(s in reach for s in ss)}
    held = len(hit | (ids & tracked))
    return gone, PruneReport([r.id.hex() for r in gone], held, sorted(names_set))


def _tracking_only(cands: list[IndexRow], remotes: dict[str, bytes], reasons: bool) -> tuple[int, list[str]]:
    """``(count, names)`` of the candidates remote-tracking refs point at (``(0, [])`` without reasons)."""
    if not reasons:
        return 0, []
    ids = {r.id for r in cands}
    return len(ids & set(remotes.values())), sorted(name for name, tip in remotes.items() if tip in ids)


def ancestors(rows: dict[bytes, Any], starts: list[bytes]) -> set[bytes]:
    """``starts`` and every ancestor of them through the live ``rows`` (id -> index row); a start that is not
    a live row is left out."""
    todo = list(starts)
    needed: set[bytes] = set()
    while todo:
        cid = todo.pop()
        if cid not in needed and cid in rows:
            needed.add(cid)
            todo.extend(rows[cid].parents)
    return needed


def _reaching(rows: dict[bytes, Any], within: set[bytes], targets: set[bytes]) -> set[bytes]:
    """The commits of ``within`` (an ancestor-closed set of live rows) whose history (through ``within``)
    reaches one of ``targets``: ``targets`` and their descendants inside ``within``."""
    children: dict[bytes, list[bytes]] = {}
    for cid in within:
        for p in rows[cid].parents:
            if p in within:
                children.setdefault(p, []).append(cid)
    reach = set(targets)
    todo = list(targets)
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in reach:
                reach.add(c)
                todo.append(c)
    return reach

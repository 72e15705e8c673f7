"""Rebuild the commit index from objects and refs (``ckpt fsck --rebuild-index``): the index is a derived
cache (docs/backends.md, 'Commit index'), so losing or damaging rows loses nothing the objects and refs do
not hold.

Which commits are live: every commit an existing row names (when its object is still there), every ref
target, every commit named in a ref's reflog, and every ancestor of those reachable through parents whose
object is present. Commits that prune removed but gc has not collected yet are ancestors too, so a rebuild
makes them live again (run prune again if that matters; nothing is ever lost by a rebuild).

Local state of a row, in order of preference:

* branch: the existing row's; else the head whose reflog records the commit as written on it
  (``commit: ...``); else the first head whose first-parent chain reaches it (heads by name); else "".
* seq (local order): all rows are renumbered 1..N in an order where every parent precedes its children;
  between unrelated commits, existing rows keep their relative order and a new row sits after the existing
  rows written no later than it (by time).
* summary: the existing row's; else the format-1 body's; else recomputed from the document.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import heapq
import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from crewckpt.backends.base import IndexRow, Parts, writing
from crewckpt.errors import CkptError, MissingObject
from crewckpt.format import objects as ob
from crewckpt.history import head, refnames
from crewckpt.history.commits import branch_ok, to_row
from crewckpt.history.limits import ReadBudget
from crewckpt.history.localorder import index_commit
from crewckpt.history.snapshot import assemble

if TYPE_CHECKING:
    from crewckpt.history.gc import Progress
    from crewckpt.history.parts import StoreParts


@dataclasses.dataclass(frozen=True)
class RebuildReport:
    """rows: live commits in the rebuilt index; added: rows that were missing; dropped: rows whose commit
    object is gone or unreadable; rewritten: rows whose copied fields disagreed with the commit object;
    renumbered: rows whose seq changed; aliases: foreign ids set again; problems: commits that could not
    be read (one line each; they are left out)."""

    rows: int
    added: int
    dropped: int
    rewritten: int
    renumbered: int
    aliases: int
    problems: list[str]


def rebuild_index(parts: StoreParts, *, dry_run: bool = False, progress: Progress | None = None) -> RebuildReport:
    """Rebuild the commit index of the store ``parts`` belong to (module docstring has the rules).

    Runs in one transaction where the backend has them; else verb by verb (run it with no writer active).
    ``dry_run``: compute the report, change nothing.
    """
    objs, refs, index = parts.objects, parts.refs, parts.index
    old = {r.id: r for r in index.index_rows()}
    heads = refs.refs(refnames.HEADS)
    all_refs = refs.refs()
    roots: list[bytes] = list(old) + list(all_refs.values())
    written_on: dict[bytes, str] = {}
    for name in [*sorted(all_refs), head.HEAD]:  # HEAD's reflog: every commit made on the current branch
        for e in refs.reflog(name):
            roots.extend(x for x in (e.old, e.new) if x is not None)
            if name in heads and e.new is not None and e.message.startswith("commit:"):
                written_on.setdefault(e.new, name[len(refnames.HEADS):])
    commits: dict[bytes, ob.Commit] = {}
    problems: list[str] = []
    unreadable: set[bytes] = set()
    corrupt: set[bytes] = set()  # present but unreadable: their rows are kept (never dropped, so gc spares them)
    todo = list(dict.fromkeys(roots))
    while todo:
        cid = todo.pop()
        if cid in commits or cid in unreadable:
            continue
        try:
            c = objs.commit(cid)
        except MissingObject:
            unreadable.add(cid)  # collected by gc (or never there): the walk ends here
            continue
        except CkptError as e:
            unreadable.add(cid)
            corrupt.add(cid)
            problems.append(f"commit {cid.hex()}: {e}")
            continue
        commits[cid] = c
        todo.extend(p for p in c.parents if p not in commits)
        if progress and len(commits) % 500 == 0:
            progress("read commits", len(commits), None)
    branch = _branches(commits, heads, old, written_on)
    order = _order(commits, old)
    rows: list[IndexRow] = []
    added = rewritten = renumbered = 0
    for seq, cid in enumerate(order, 1):
        c = commits[cid]
        prev = old.get(cid)
        if prev is not None:
            summary = _summary_of(prev)
        else:
            summary = c.v1_summary.as_map() if c.v1_summary is not None else _recompute(parts, c)
        row = to_row(cid, c, branch[cid], seq, summary or {})
        if prev is None:
            added += 1
        else:
            if dataclasses.replace(row, seq=prev.seq, summary=prev.summary) != prev:
                rewritten += 1
            if prev.seq != seq:
                renumbered += 1
        rows.append(row)
    # a damaged commit keeps its row as it was (renumbered after the rest): dropping it would let gc collect
    # the commit and the intact snapshot under it, turning one flipped bit into permanent loss
    for seq, cid in enumerate((c for c in old if c in corrupt and c not in commits), len(rows) + 1):
        rows.append(dataclasses.replace(old[cid], seq=seq))
    dropped = [cid for cid in old if cid not in commits and cid not in corrupt]
    aliases = [(c.alias, cid) for cid, c in commits.items() if c.alias]
    changed = added or rewritten or renumbered or dropped
    wrong = _wrong_aliases(parts, aliases)
    n_alias = sum(1 for a, cid in aliases if index.alias_get(a) != cid)
    if not dry_run and (changed or n_alias):
        with writing(parts.backend) as w:
            if wrong:  # hand-made: the commits they name get back only the alias their object carries
                w.alias_forget(set(wrong.values()))
                for cid in set(wrong.values()):
                    with_alias = commits.get(cid)
                    if with_alias is not None and with_alias.alias:
                        w.alias_set(with_alias.alias, cid)
            if changed:
                w.index_remove(list(old))
                for i, row in enumerate(rows):
                    w.index_add(row)
                    if progress and i % 1000 == 0:
                        progress("write index", i, len(rows))
            for a, cid in aliases:
                w.alias_set(a, cid)  # first writer wins: an alias already naming another commit stays
    return RebuildReport(len(rows), added, len(dropped), rewritten, renumbered, n_alias, problems)


def _wrong_aliases(parts: StoreParts, aliases: list[tuple[str, bytes]]) -> dict[str, bytes]:
    """``alias -> commit`` entries of the alias table (for the aliases live commits carry) naming a live
    commit whose object carries another alias: a damaged or hand-made table (writers set aliases from the
    objects), which first-writer-wins ``alias_set`` alone would keep."""
    out = {}
    for a, _ in aliases:
        named = parts.index.alias_get(a)
        if named is None:
            continue
        try:
            c = parts.objects.commit(named)
        except CkptError:
            continue
        if c.alias != a:
            out[a] = named
    return out


def index_missing(parts: StoreParts, tips: Mapping[bytes, str]) -> int:
    """Index the commits that ``tips`` (commit id -> the branch its rows get) reach through commits the index
    lacks, parents first, each with a fresh seq (:func:`crewckpt.history.localorder.index_commit`; a child
    another writer indexed meanwhile is renumbered after its parent, I6). Unlike :func:`rebuild_index` it
    removes and renumbers nothing else, so it is safe while writers are active: it heals what a writer that
    died between its ref CAS and its index row (docs/backends.md W3-W5) left, and a writer still in that
    window later finds its row there (index_add keeps the first). Returns the rows added.

    Raises: CkptError when a commit object cannot be read (missing ones end the walk)."""
    found: dict[bytes, ob.Commit] = {}
    branch: dict[bytes, str] = {}
    for tip, name in tips.items():
        stack = [tip]
        while stack:
            cid = stack.pop()
            if cid in found or parts.index.index_get(cid) is not None:
                continue
            try:
                c = parts.objects.commit(cid)
            except MissingObject:
                continue
            found[cid] = c
            branch.setdefault(cid, name)
            stack.extend(c.parents)
    with writing(parts.backend) as w:
        for cid in _order(found, {}):
            c = found[cid]
            summary = c.v1_summary.as_map() if c.v1_summary is not None else _recompute(parts, c)
            list_again(w, cid, c, branch[cid], summary)
    return len(found)


def list_again(w: Parts, cid: bytes, c: ob.Commit, branch: str, summary: dict[str, Any]) -> None:
    """Give commit ``cid`` (object ``c``) an index row on ``branch`` with ``summary`` in the write scope ``w``,
    after any live children that name it (:func:`~crewckpt.history.localorder.index_commit`, I6), and its
    alias back."""
    index_commit(w, cid, functools.partial(to_row, cid, c, branch, summary=summary), may_revive=True)
    if c.alias:
        w.alias_set(c.alias, cid)


def _summary_of(row: IndexRow) -> dict[str, Any] | None:
    from crewckpt.history.commits import from_row
    try:
        return from_row(row).summary
    except CkptError:
        return None


def _recompute(parts: StoreParts, c: ob.Commit) -> dict[str, Any]:
    """The summary of a commit's document (format 2 keeps none in the body; the store profile's keys and
    ``logical_bytes``), read from the objects under the default read limits (limits.ReadBudget: a fetched
    commit is untrusted); ``{}`` when unreadable or over them (CkptError)."""
    budget = ReadBudget(what=f"the document of {c.tree.oid.hex()[:12]}")
    try:
        doc = assemble(c.tree, lambda ids: parts.objects.trees(ids, budget=budget),
                       lambda ids: parts.objects.blobs(ids, budget=budget), budget)
        return parts.summarize(doc)
    except CkptError:
        return {}


def _branches(commits: dict[bytes, ob.Commit], heads: dict[str, bytes], old: dict[bytes, IndexRow],
              written_on: dict[bytes, str]) -> dict[bytes, str]:
    """The branch each commit belongs to (module docstring, 'branch')."""
    out = {cid: old[cid].branch for cid in commits if cid in old and branch_ok(old[cid].branch)}
    for cid, name in written_on.items():
        if cid in commits:
            out.setdefault(cid, name)
    for ref in sorted(heads):
        at: bytes | None = heads[ref]
        seen: set[bytes] = set()
        while at is not None and at in commits and at not in seen:
            seen.add(at)
            out.setdefault(at, ref[len(refnames.HEADS):])
            ps = commits[at].parents
            at = ps[0] if ps else None
    for cid in commits:
        out.setdefault(cid, "")
    return out


def _order(commits: dict[bytes, ob.Commit], old: dict[bytes, IndexRow]) -> list[bytes]:
    """Commits with every parent before its children (module docstring, 'seq'); a parent cycle (a damaged
    or hand-made graph) is broken at its lowest-priority edge rather than dropping commits."""
    by_time = sorted((r.time_ns, r.seq, r.id) for r in old.values() if r.id in commits and isinstance(r.seq, int)
                     and isinstance(r.time_ns, int))
    times = [t for t, _, _ in by_time]
    top = list(itertools.accumulate((s for _, s, _ in by_time), max))  # highest seq written by each time

    def est(cid: bytes) -> float:
        r = old.get(cid)
        if r is not None and isinstance(r.seq, int):
            return float(r.seq)
        i = bisect.bisect_right(times, commits[cid].time_ns)
        return (top[i - 1] if i else 0) + 0.5

    pri = {cid: (est(cid), commits[cid].time_ns, cid) for cid in commits}
    kids: dict[bytes, list[bytes]] = {}
    waiting = {}
    for cid, c in commits.items():
        ps = {p for p in c.parents if p in commits and p != cid}
        waiting[cid] = len(ps)
        for p in ps:
            kids.setdefault(p, []).append(cid)
    heap = [pri[c] for c, n in waiting.items() if n == 0]
    heapq.heapify(heap)
    out: list[bytes] = []
    done: set[bytes] = set()
    while len(out) < len(commits):
        if not heap:  # a cycle: release its member with the lowest priority
            heapq.heappush(heap, min(pri[c] for c in commits if c not in done))
        cid = heapq.heappop(heap)[2]
        if cid in done:
            continue
        done.add(cid)
        out.append(cid)
        for k in kids.get(cid, []):
            waiting[k] -= 1
            if waiting[k] == 0 and k not in done:
                heapq.heappush(heap, pri[k])
    return out

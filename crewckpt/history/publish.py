"""Publishing a run to a shared store: the rule ``CheckpointConfig(push_to=...)`` follows (usable directly).

A run is one lineage: the chain of checkpoints one kickoff wrote, named ``refs/runs/<run id>`` in the store
that wrote it (:mod:`crewckpt.history.lineage`). Every fresh kickoff of a crew starts a new lineage, a root
commit, and moves its branch (``main``) to itself there; so a plain ``push`` of ``main`` after the second
kickoff is not a fast-forward of the shared ``main`` (the first run's tip), and a ``pull`` cannot help (the
two lineages share no commit). Publishing therefore pushes the run under its own name and moves the
shared branch by the same rule the worker's own store follows:

1. ``refs/runs/<run id>`` -> the run's last checkpoint. Only that run moves it, so it is new or a
   fast-forward there (anything else is rejected, as a push would be): every run ever published keeps its
   name in the shared store (``ckpt log --all``, ``ckpt log refs/runs/<id>``, resume and fork by it).
2. The run's branch -> the same checkpoint, when the branch is new there or this is a fast-forward, or when
   the tip it would leave is kept by its own run's ref in the shared store (a new lineage replaces the
   branch's previous run, which keeps its name: what a fresh kickoff does in the worker's store). The branch
   stays as it is, reported ``kept`` (not an error: the run is published), when the shared branch already
   contains this checkpoint or holds checkpoints no run ref there names (someone pushed them by hand: they
   are never displaced); it is not pushed at all (``skipped``) when the worker's own branch has moved
   on to a later run meanwhile (that run's publishing moves it).
   So with several workers, the shared branch names the run that published last, as the local branch names
   the run that wrote last, and nothing ever loses its name.

Both refs move by compare-and-swap against what was read (run ref first, so a branch never names a
checkpoint whose run ref is not there yet); a lost race on the branch is planned again (its objects have
arrived already, nothing is sent twice), and after 5 lost races the branch is ``kept``: each loss means
another publisher moved it later, so it names the run that published last, as the rule says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crewckpt.errors import UnknownRevision
from crewckpt.history import refnames, remotes
from crewckpt.history.sync import (
    Progress,
    RefResult,
    RefUpdate,
    Side,
    TransferReport,
    is_ancestor,
    move_refs,
    transfer,
)

if TYPE_CHECKING:
    from crewckpt.history.store import Store

KEPT = "kept"
"""RefResult status of a branch publishing left as it was (the reason says why); not a rejection."""
SKIPPED = "skipped"
"""RefResult status of the branch when this run no longer owns it here (a later run of this store moved it
on; that run's publishing moves it): not pushed, nothing to report."""
REPLACED = "new-lineage"
"""RefResult status of a branch moved to a new lineage whose previous tip keeps its run ref."""
_ATTEMPTS = 5  # plans redone when another publisher moved the shared branch between the read and the swap


def publish_run(store: Store, remote: str | Store | None, run_id: str, branch: str | None = None, *,
                name: str | None = None, progress: Progress | None = None,
                dry_run: bool = False) -> remotes.SyncReport:
    """Publish run ``run_id`` of ``store`` to ``remote`` (a remote name, a location or an open Store) by the
    module's rule; ``branch`` (default: the branch the run's last checkpoint was written on) is the shared
    branch that may follow it. ``name``: the tracking namespace for a location (as :func:`remotes.push`).
    ``dry_run``: plan and count what would be sent and which refs would move (same statuses and reasons),
    write nothing in either store (report ``dry_run`` true).

    Returns:
        The report (``verb`` "publish"): ``refs`` holds the run ref's result, then the branch's (status
        "new", "fast-forward", "up-to-date", :data:`REPLACED`, :data:`KEPT` or :data:`SKIPPED` with a
        reason, or "rejected").
        ``rejected`` is non-empty only when the run ref could not move (someone else's commits hold that
        name there). A branch that lost every compare-and-swap race is :data:`KEPT` (another publisher
        published later; see :func:`_outraced`).

    Raises:
        UnknownRevision: no run ``run_id`` in ``store``. And :func:`remotes.push`'s errors (UnknownRemote,
            UntrustedRemote, SyncError, IntegrityError, the backend's connection errors).
    """
    rref = refnames.run_ref(run_id)
    first = store.backend.get_ref(rref)
    if first is None:
        raise UnknownRevision(f"no run {run_id!r} in this store; its runs are listed by `ckpt log --all`")
    if branch is None:
        row = store.backend.index_get(first)
        branch = row.branch if row is not None and row.branch else remotes.current_branch(store)
    bref = refnames.branch_ref(branch)
    where = remotes.location_of(store) or "memory"
    with remotes.connect(store, remote) as (label, other):
        here, there = remotes.side(store, "this store"), remotes.side(other, remotes._where(other, label))
        total = TransferReport(dry_run=dry_run)
        results: list[RefResult] = []
        tip = first
        for attempt in range(_ATTEMPTS):
            tip, mine = _local_tips(store, rref, bref)  # the run may still be writing: its latest state
            run_update, run_bad = _run_update(here, there, rref, tip, branch, run_id, where)
            if run_bad is not None:
                results = [run_bad]
                break
            b_update, b_result = _branch_update(here, there, bref, tip, mine, branch, run_id, where)
            updates = [u for u in (run_update, b_update) if u is not None]
            rep = transfer(here, there, updates, dry_run=dry_run, progress=progress) if updates else TransferReport()
            total.commits += rep.commits
            total.objects += rep.objects
            total.bytes += rep.bytes
            total.seconds += rep.seconds
            results = list(rep.refs)
            if run_update is None:
                results.insert(0, RefResult(rref, tip.hex(), tip.hex(), "up-to-date"))
            if b_result is not None:
                results.append(b_result)
            lost = [r for r in results if r.status == "rejected"]
            if dry_run or not lost or lost[0].ref == rref or attempt + 1 == _ATTEMPTS:
                break  # the run ref's loser does not retry: only its own run moves it
        total.refs = [_outraced(r, branch, rref) if r.ref == bref and r.status == "rejected" else r for r in results]
        report = remotes._report("publish", there.name, total)
    label = remotes.check_remote_name(name) if name else label
    moved = any(r.ref == bref and r.status not in ("rejected", KEPT, SKIPPED) for r in report.refs)
    if label and moved and not dry_run:  # the tracking ref records what the remote's branch now holds, as after a push
        dst = remotes.tracking_prefix(label) + branch
        move_refs(here, [RefUpdate(dst, tip, store.backend.get_ref(dst), "", "push", f"publish to {label}")])
    return report


def _outraced(r: RefResult, branch: str, rref: str) -> RefResult:
    """The branch's result after it lost every compare-and-swap race: :data:`KEPT`, not a failure. Each lost
    race means another publisher moved the branch after this one read it, so by the module's rule (the
    branch names the run that published last) that publisher's run is the one to name; this run is
    published under ``rref`` all the same (the run ref moved first)."""
    return RefResult(r.ref, r.old, r.new, KEPT, f"another publisher moved {branch} {_ATTEMPTS} times while this one "
                                               f"tried (it names the run that published last); this run is "
                                               f"published as {rref}")


def _local_tips(store: Store, rref: str, bref: str) -> tuple[bytes, bytes | None]:
    """``(run ref, branch)`` here as of one moment: a writer moves both in one write, so the pair is
    consistent when the run ref did not change while the branch was read."""
    tip = store.backend.get_ref(rref)
    for _ in range(10):
        mine = store.backend.get_ref(bref)
        again = store.backend.get_ref(rref)
        if again == tip or again is None:
            break
        tip = again
    if tip is None:
        raise UnknownRevision(f"run {rref[len(refnames.RUNS):]} was deleted from this store meanwhile")
    return tip, mine


def _run_update(here: Side, there: Side, rref: str, tip: bytes, branch: str, run_id: str,
                where: str) -> tuple[RefUpdate | None, RefResult | None]:
    """The run ref's update (None when up to date), or its rejection."""
    theirs = there.backend.get_ref(rref)
    if theirs == tip:
        return None, None
    if theirs is None:
        status = "new"
    elif remotes._known(here.backend, theirs) and is_ancestor(here, theirs, tip):
        status = "fast-forward"
    else:
        return None, RefResult(rref, theirs.hex(), tip.hex(), "rejected",
                               f"{there.name} already has a run {run_id} at {theirs.hex()[:12]} that is not "
                               f"an ancestor of this run's {tip.hex()[:12]}; nothing was published")
    return RefUpdate(rref, tip, theirs, branch, status, f"publish: run {run_id} from {where}"), None


def _branch_update(here: Side, there: Side, bref: str, tip: bytes, mine: bytes | None, branch: str, run_id: str,
                   where: str) -> tuple[RefUpdate | None, RefResult | None]:
    """The shared branch's update to the run's ``tip`` (``mine``: the branch here), or why it stays (a
    :data:`KEPT` / "up-to-date" result)."""
    theirs = there.backend.get_ref(bref)

    def kept(why: str, status: str = KEPT) -> tuple[None, RefResult]:
        return None, RefResult(bref, _hex(theirs), tip.hex(), status, why)

    if mine != tip:
        return kept(f"{branch} here has moved on to another run ({_hex(mine, 12) or 'deleted'}); that run "
                    f"publishes it", SKIPPED)
    if theirs == tip:
        return None, RefResult(bref, tip.hex(), tip.hex(), "up-to-date")
    msg = f"publish: run {run_id} from {where}"
    if theirs is None:
        return RefUpdate(bref, tip, None, branch, "new", msg), None
    if remotes._known(here.backend, theirs) and is_ancestor(here, theirs, tip):
        return RefUpdate(bref, tip, theirs, branch, "fast-forward", msg), None
    if remotes._known(there.backend, tip) and is_ancestor(there, tip, theirs):
        return kept(f"{there.name} {branch} ({theirs.hex()[:12]}) already continues this checkpoint")
    holder = remotes.run_holding(there, theirs)
    if holder is None:
        return kept(f"{there.name} {branch} ({theirs.hex()[:12]}) holds checkpoints no run ref names there "
                    f"(pushed by hand?); it stays, the run is published as {refnames.run_ref(run_id)}")
    return RefUpdate(bref, tip, theirs, branch, REPLACED, f"{msg} (previous tip kept by {holder})"), None


def _hex(oid: bytes | None, n: int = 64) -> str | None:
    return oid.hex()[:n] if oid is not None else None

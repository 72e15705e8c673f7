"""Sync core: copy commits and the objects under them from one store to another, as git's fetch and push do.

It works on two :class:`Side` values (a backend's parts plus the verified object layer over it), never on a
whole Store, so any two backends can talk (memory, SQLite, PostgreSQL...). Steps, in this order:

1. **Negotiate** (have/want). The commit walk starts at the wanted tips on the sender and stops at commits
   the receiver has live (in its commit index) and at commits the sender itself no longer has live (pruned:
   the transfer boundary, like a shallow clone). Under every commit to send, the tree walk checks each level's
   ids for presence at the receiver in one batch and descends only into what is missing, so only missing
   objects cross. A present tree stands for its whole subtree: objects are always written children first,
   and gc keeps that true (docs/backends.md W7); while a gc may be sweeping the receiver (meta
   ``gc_running``) nothing present is trusted and every object under the commits is sent.
2. **Read and verify** everything to send *before writing anything*: every object is read through the
   sender's object layer (decoded, re-hashed; the stored id must be the id asked for), commit bodies are
   decoded, and each link's kind must match the object's. A hostile or damaged remote is refused with one
   line naming the object, and nothing is written to the receiver. Decompression is bounded like a read
   (:mod:`crewckpt.history.limits`): the new objects one commit brings may decompress to at most
   ``$CKPT_MAX_READ_BYTES`` together (512 MiB), charged from the declared sizes *before* decompressing, so a
   small frame claiming gigabytes (a decompression bomb) is refused without being inflated.
3. **Land** commit by commit, parents first, each in one write scope (one transaction where the backend has
   them): its new objects (small ones in one pack, children before parents), then the commit object. Not yet
   indexed: until a ref reaches them these are unreachable objects, as in git.
4. **Move refs** by compare-and-swap against the value read when the transfer was planned, with a reflog
   record, and in the same write scope (a transaction where there are) index the commits the ref now
   reaches: commit-index rows with the receiver's own arrival ``seq`` (the summary copied from the sender's
   row, or taken from the commit object; a commit the receiver pruned under children that stayed live comes
   back below them: :mod:`crewckpt.history.localorder`) and their aliases (CrewAI checkpoint ids). A ref that moved
   meanwhile is reported as rejected (another writer won), never overwritten, and the commits only it would
   have reached stay unindexed: nothing lists them and gc collects them (docs/backends.md W1-W5 order).

Interrupt safety: a kill at any point leaves complete commits only (objects before commits before refs
and index rows); running the same transfer again sends only what is missing (objects are checked for
presence; a commit object that arrived is not counted or sent again).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from crewckpt.backends.base import Backend, IndexRow, Parts, ReflogEntry, StoredObject, writing
from crewckpt.errors import CkptError, DecodeError, IntegrityError, MissingObject, RefConflict, SyncError
from crewckpt.format import objects as ob
from crewckpt.history import head, refnames
from crewckpt.history.commits import from_commit, from_row, raise_version, to_row
from crewckpt.history.gc import running as gc_running
from crewckpt.history.limits import ReadBudget
from crewckpt.history.localorder import index_commit
from crewckpt.history.objectdb import ObjectDB, decode_commit
from crewckpt.history.snapshot import links_in

if TYPE_CHECKING:
    from crewckpt.history.parts import StoreParts

Progress = Callable[[str, int, "int | None"], None]
"""Progress callback: ``(phase, done, total or None)``; phases "negotiate", "read", "write"."""

LOOSE_MIN = 1 << 20  # bytes: bodies larger than this travel (and are stored) loose, as Store.commit does
_log = logging.getLogger("crewckpt")
STAGE_BYTES = 64 << 20  # frames kept in memory between reading and writing; beyond this they are re-read
_NO_SEQ = 1 << 62  # a sender commit with no index row sorts after every seq (see _assign_branches)
_RETRIES = 3  # plans redone when a gc ran on the receiver meanwhile


@dataclasses.dataclass(frozen=True)
class Side:
    """One end of a transfer: ``backend`` (objects, refs, commit index, meta), ``objects`` (verified reads
    and framing over it) and ``name`` (how messages call it: a location, a remote name)."""

    backend: Backend
    objects: ObjectDB
    name: str


@dataclasses.dataclass(frozen=True)
class RefUpdate:
    """One ref to move on the receiver: ``ref`` (full name there), ``new`` (raw id, on the sender),
    ``expected`` (its value on the receiver when the update was decided: the CAS old value), ``branch``
    (the commit-index branch given to commits that arrive for it, unless :func:`plan` finds a better one)
    and ``status`` (what it is: "new",
    "fast-forward", "forced", "up-to-date"); ``message`` goes to the reflog; ``source_branch`` is the
    sender's branch this update carries ("" when it carries no branch, e.g. a run ref): a sent commit the
    sender indexes on that branch gets ``branch`` here (see :func:`plan`)."""

    ref: str
    new: bytes
    expected: bytes | None
    branch: str
    status: str
    message: str = "sync"
    source_branch: str = ""


@dataclasses.dataclass
class RefResult:
    """What happened to one ref: ``status`` is an update's status, or "rejected" with ``reason``."""

    ref: str
    old: str | None
    new: str | None
    status: str
    reason: str | None = None

    def to_json(self) -> dict[str, object]:
        """Stable JSON form (docs/cli-json.md)."""
        return {"ref": self.ref, "old": self.old, "new": self.new, "status": self.status, "reason": self.reason}


@dataclasses.dataclass
class TransferReport:
    """Figures of one transfer: ``commits`` and ``objects`` sent (objects count commits too, not the pack
    containers), ``bytes`` (frame bytes written to the receiver: what crossed), ``seconds`` (wall), and the
    ``refs`` results. With ``dry_run`` the figures say what would cross and nothing was written."""

    commits: int = 0
    objects: int = 0
    bytes: int = 0
    seconds: float = 0.0
    refs: list[RefResult] = dataclasses.field(default_factory=list)
    dry_run: bool = False

    @property
    def rejected(self) -> list[RefResult]:
        """The refs that did not move."""
        return [r for r in self.refs if r.status == "rejected"]

    def to_json(self) -> dict[str, object]:
        """Stable JSON form (docs/cli-json.md)."""
        return {"commits": self.commits, "objects": self.objects, "bytes": self.bytes,
                "seconds": round(self.seconds, 6), "dry_run": self.dry_run, "refs": [r.to_json() for r in self.refs]}


@dataclasses.dataclass
class _CommitPlan:
    cid: bytes
    body: bytes
    commit: ob.Commit
    branch: str
    summary_row: object  # the sender's IndexRow, or None
    order: list[tuple[bytes, int]]  # new objects, children before parents
    bodies: dict[bytes, bytes] | None  # None: re-read when landing (over STAGE_BYTES)
    arrived: bool = False  # the receiver holds the commit object already (an earlier, interrupted transfer)
    revive: bool = False  # live rows of the receiver name it as a parent (pruned there: see localorder)


def transfer(sender: Side, receiver: Side, updates: Sequence[RefUpdate], *, dry_run: bool = False,
             progress: Progress | None = None) -> TransferReport:
    """Send what the receiver lacks for ``updates`` and move its refs (see the module docstring).

    Raises:
        SyncError: the sender lacks an object a commit needs. IntegrityError: the sender holds a corrupt
            object (nothing was written). StoreBusy / StoreWriteError from the receiver's backend.
    """
    t0 = time.perf_counter()
    for attempt in range(_RETRIES):
        epoch = receiver.backend.meta_get("gc_epoch")
        # read after the epoch: a gc that bumped it before is either seen running here or finished (its sweep
        # done before the plan looks); one that bumps it later is seen by the re-check before the index
        present: Callable[[list[bytes]], set[bytes]] = receiver.backend.has_many
        if gc_running(receiver.backend):
            present = _nothing
            _log.warning("crewckpt: %s: a gc is running there, or one did not complete (then run `ckpt gc` there); "
                         "sending every object under the new checkpoints, not only what it lacks", receiver.name)
        plans = plan(sender, receiver, updates, progress, present)
        report = TransferReport(dry_run=dry_run)
        report.commits = sum(not p.arrived for p in plans)
        if dry_run:
            for p in plans:
                n, size = _frame_cost(receiver.objects, p, sender)
                report.objects += n
                report.bytes += size
            report.refs = [RefResult(u.ref, _hex(u.expected), u.new.hex(), u.status) for u in updates]
            report.seconds = time.perf_counter() - t0
            return report
        if plans:  # pin HEAD first: a store that never stored it reads it from the last commit written
            with writing(receiver.backend) as w:
                head.head_ref_stored(w)
        _mark_revivals(receiver, plans)
        sender_version = _version(sender) if plans else 0
        packs = _Packs()
        try:
            for i, p in enumerate(plans):
                n, size = _land(sender, receiver, p, epoch, sender_version, packs)
                report.objects += n
                report.bytes += size
                if progress:
                    progress("write", i + 1, len(plans))
            report.refs = _move_and_index(sender, receiver, updates, plans, epoch)
        except _EpochChanged:
            if attempt + 1 == _RETRIES:
                raise SyncError(f"{receiver.name}: a gc keeps running there during the transfer; retry later") from None
            continue
        packs.merge(receiver)
        report.seconds = time.perf_counter() - t0
        return report
    raise AssertionError("unreachable")


@dataclasses.dataclass
class _Pack:
    """A pack a transfer wrote: its id, its members' ids and their body bytes."""

    oid: bytes
    members: list[bytes]
    size: int


class _Packs:
    """The packs a transfer wrote, with the members' bodies while they total at most STAGE_BYTES (a merge then
    reads none back; beyond that it reads them, a group at a time)."""

    def __init__(self) -> None:
        self.made: list[_Pack] = []
        self.bodies: dict[bytes, tuple[int, bytes]] = {}
        self.size = 0

    def add(self, oid: bytes, members: list[tuple[bytes, int, bytes]]) -> None:
        size = sum(len(b) for _, _, b in members)
        self.made.append(_Pack(oid, [o for o, _, _ in members], size))
        self.size += size
        if self.size <= STAGE_BYTES:
            self.bodies.update((o, (k, b)) for o, k, b in members)

    def merge(self, receiver: Side) -> None:
        """Merge the one-commit packs into bigger ones, as a writer merges its per-checkpoint packs at the end
        of a run (crewckpt.history.gc.merge_packs): a clone of 50 checkpoints otherwise holds 50 small packs,
        each compressed alone, ~3x the bytes until ``ckpt gc``. Groups of at most PACK_MAX body bytes, at gc's
        zstd level when all hold at most RUN_MERGE_BYTES, else at MERGE_LEVEL. Best effort: skipped while a gc
        runs there (it repacks them anyway); a failure only logs (the transfer itself is complete). Then, when
        the receiver holds more than AUTO_MERGE_PACKS small packs (earlier transfers' or a killed one's),
        those are merged too (:func:`crewckpt.history.gc.merge_small_packs`)."""
        if not self.made:
            return
        from crewckpt.history.gc import merge_small_packs
        from crewckpt.history.parts import StoreParts

        parts = StoreParts.of(receiver.backend, receiver.objects)
        if len(self.made) > 1 and not self._merge_own(parts):
            return  # a gc holds the lock: it repacks these itself
        merged = 0
        try:
            merged = merge_small_packs(parts)
        except CkptError as e:
            _log.warning("crewckpt: merging the store's small packs after a transfer skipped: %s", e)
        if len(self.made) < 2 and not merged:
            return  # nothing dropped: no pages to give back
        try:  # as a run's end: SQLite's last connection drops the WAL and VACUUMs a small store, never waiting
            receiver.backend.release()
        except CkptError as e:
            _log.warning("crewckpt: compacting the store after a transfer skipped: %s", e)

    def _merge_own(self, parts: StoreParts) -> bool:
        """Merge the packs this transfer wrote (see :meth:`merge`); False when a gc holds the lock or a merge
        failed (logged)."""
        from crewckpt.format.frame import PACK_LEVEL
        from crewckpt.history.gc import MERGE_LEVEL, PACK_MAX, RUN_MERGE_BYTES, merge_packs

        level = PACK_LEVEL if self.size <= RUN_MERGE_BYTES else MERGE_LEVEL
        group: list[_Pack] = []
        for n, p in enumerate(self.made, 1):
            group.append(p)
            if n < len(self.made) and sum(g.size for g in group) < PACK_MAX:
                continue
            try:
                if len(group) > 1 and not merge_packs(parts, [(g.oid, g.members) for g in group], level=level,
                                                      bodies=self.bodies):
                    return False
            except CkptError as e:
                _log.warning("crewckpt: merging the packs a transfer wrote skipped: %s", e)
                return False
            group = []
        return True


def plan(sender: Side, receiver: Side, updates: Sequence[RefUpdate], progress: Progress | None = None,
         present: Callable[[list[bytes]], set[bytes]] | None = None) -> list[_CommitPlan]:
    """Negotiate and read: the commits to send (parents first), each with its missing objects read and
    verified. Writes nothing. ``present(ids)``: which of ``ids`` the receiver holds, whole subtree included
    (default: its ``has_many``; :func:`_nothing` while a gc may be sweeping there, whose sweep may take what
    no live commit reaches: every object under the commits is then sent, and putting one freshens it).

    Raises:
        SyncError, IntegrityError: see :func:`transfer`.
    """
    commits, _ = missing_commits(sender, receiver, [u.new for u in updates], [u.branch for u in updates])
    if progress:
        progress("negotiate", len(commits), len(commits))
    scheduled: set[bytes] = set()
    staged = 0
    out = []
    arrived = receiver.backend.has_many([cid for cid, _, _ in commits]) if commits else set()
    for i, (cid, body, c) in enumerate(commits):
        order, bodies = _missing_objects(sender, present or receiver.backend.has_many, cid, c, scheduled)
        size = sum(len(b) for b in bodies.values())
        keep = staged + size <= STAGE_BYTES
        staged += size if keep else 0
        out.append(_CommitPlan(cid, body, c, "", sender.backend.index_get(cid), order,
                               bodies if keep else None, cid in arrived))
        if progress:
            progress("read", i + 1, len(commits))
    _assign_branches(out, updates)
    return out


def _assign_branches(plans: Sequence[_CommitPlan], updates: Sequence[RefUpdate]) -> None:
    """Give each planned commit the receiver's branch a git user expects: the branch the sender indexes it
    on, under the receiver's name for it (``RefUpdate.source_branch`` -> ``branch``: the same name on clone
    and push, ``origin/<b>`` on fetch). Otherwise (that branch is not sent, or the sender has no row) the
    branch of an update whose tip it is, else that of its child written first on the sender (lowest sender
    seq: the line that continued it first in the sender's local order), never the order of branch names.
    An unknown seq sorts last; ties keep plan order."""
    names: dict[str, str] = {}
    tips: dict[bytes, str] = {}
    for u in updates:
        if u.branch:
            if u.source_branch:
                names.setdefault(u.source_branch, u.branch)
            tips.setdefault(u.new, u.branch)
    planned = {p.cid: p for p in plans}
    kids: dict[bytes, list[_CommitPlan]] = {}
    for p in plans:
        for parent in p.commit.parents:
            if parent in planned:
                kids.setdefault(parent, []).append(p)
    for p in reversed(plans):  # children before parents
        row = p.summary_row
        mapped = names.get(row.branch) if row is not None else None  # type: ignore[attr-defined]
        if mapped is not None:
            p.branch = mapped
        elif p.cid in tips:
            p.branch = tips[p.cid]
        elif p.cid in kids:
            first = min(kids[p.cid], key=lambda k: _sender_seq(k))
            p.branch = first.branch
        # else: reached only by updates that name no branch; _index then uses the update's


def _sender_seq(p: _CommitPlan) -> int:
    row = p.summary_row
    return row.seq if row is not None and row.seq > 0 else _NO_SEQ  # type: ignore[attr-defined]


def missing_commits(sender: Side, receiver: Side, tips: Sequence[bytes],
                    branches: Sequence[str]) -> tuple[list[tuple[bytes, bytes, ob.Commit]], dict[bytes, str]]:
    """The commits reachable from ``tips`` on the sender that the receiver does not have live, parents first,
    as ``(id, verified body, decoded commit)``, and the branch each belongs to (that of the first tip in
    ``tips`` that reaches it; :func:`plan` assigns branches its own way). The walk reads commit objects a level at a time (verified) and stops at
    commits live on the receiver and at parents the sender does not have live (pruned there).

    Raises:
        SyncError: a tip is not a commit the sender has. IntegrityError: a corrupt commit object.
    """
    found: dict[bytes, tuple[bytes, ob.Commit]] = {}
    branch_of: dict[bytes, str] = {}
    here = receiver.backend
    for tip, branch in zip(tips, branches, strict=True):
        frontier = [tip]
        is_tip = True
        while frontier:
            level = [c for c in dict.fromkeys(frontier) if c not in found and here.index_get(c) is None]
            if not is_tip:  # a parent the sender pruned is the boundary (its objects may be half collected)
                level = [c for c in level if sender.backend.index_get(c) is not None]
            bodies = read_verified(sender, level, lambda cid: budget(sender, cid))
            frontier = []
            for cid in level:
                if cid not in bodies:
                    if is_tip:
                        raise SyncError(f"{sender.name}: {branch} points at commit {cid.hex()[:12]}, which is not "
                                        f"there (a damaged store); run `ckpt fsck` on it (nothing was written)")
                    continue
                kind, body = bodies[cid]
                c = _decode_commit(cid, kind, body)
                found[cid] = (body, c)
                branch_of[cid] = branch
                frontier.extend(c.parents)
            is_tip = False
    order = _postorder(found, lambda cid: [p for p in found[cid][1].parents if p in found])
    return [(cid, *found[cid]) for cid in order], branch_of


def budget(sender: Side, cid: bytes) -> ReadBudget:
    """The decompression budget of what commit ``cid`` brings from ``sender`` (``$CKPT_MAX_READ_BYTES``)."""
    return ReadBudget(what=f"{sender.name}: checkpoint {cid.hex()[:12]}", doing="copy (nothing was written)",
                      kwargs=False)


def read_verified(side: Side, oids: Sequence[bytes],
                  charge: ReadBudget | Callable[[bytes], ReadBudget]) -> dict[bytes, tuple[int, bytes]]:
    """``oid -> (kind, body)`` for those of ``oids`` the side has, each re-hashed through its object layer;
    an object stored under another id than the one asked for is corrupt too. ``charge``: the budget the
    declared sizes are charged to before decompressing (one for all, or one per object id).

    Raises:
        IntegrityError: naming the object (the frame does not decode or hash to its id).
        DocumentTooLarge: the objects would decompress to more than the budget (nothing was decompressed
            beyond it)."""
    if not oids:
        return {}
    # through the object layer, never frames then verify: it reads the frames again when a pack went between
    # the two reads (the sender's writer merged its packs meanwhile: backends.md RD4)
    return side.objects.get_many(oids, side.backend, charge)


_decode_commit = decode_commit  # one decoder for every commit read (objectdb)


def _missing_objects(sender: Side, present: Callable[[list[bytes]], set[bytes]], cid: bytes, c: ob.Commit,
                     scheduled: set[bytes]) -> tuple[list[tuple[bytes, int]], dict[bytes, bytes]]:
    """The objects under commit ``c`` the receiver lacks (``present`` says which it holds) and no earlier
    commit of this transfer sends: ``[(oid, kind)]`` children first, and their verified bodies. One presence
    batch per tree level."""
    bodies: dict[bytes, bytes] = {}
    kinds: dict[bytes, int] = {}
    kids: dict[bytes, list[bytes]] = {}
    frontier = [c.tree]
    spent = budget(sender, cid)  # one budget for everything this commit brings
    while frontier:
        links = list({ln.oid: ln for ln in frontier if ln.oid not in scheduled}.values())
        held = present([ln.oid for ln in links]) if links else set()
        need = [ln for ln in links if ln.oid not in held]
        got = read_verified(sender, [ln.oid for ln in need], spent)
        frontier = []
        for ln in need:
            if ln.oid not in got:
                raise SyncError(f"{sender.name}: commit {cid.hex()[:12]} needs object {ln.oid.hex()[:12]}, which "
                                f"is missing there; run `ckpt fsck` on it (nothing was written)")
            kind, body = got[ln.oid]
            if kind != ln.kind:
                raise IntegrityError(ln.oid.hex(), f"linked as a {_kind(ln.kind)} but {sender.name} holds a "
                                                   f"{_kind(kind)}")
            scheduled.add(ln.oid)
            bodies[ln.oid], kinds[ln.oid] = body, kind
            children: list[ob.Link] = []
            if kind == ob.TREE:
                try:
                    children = list(links_in(ob.decode_tree(body)[1]))
                except DecodeError as e:
                    raise IntegrityError(ln.oid.hex(), str(e)) from None
            kids[ln.oid] = [k.oid for k in children]
            frontier.extend(children)
    order = _postorder(bodies, lambda o: [k for k in kids[o] if k in bodies])
    return [(o, kinds[o]) for o in order], bodies


def _postorder(nodes: Iterable[bytes], kids: Callable[[bytes], Iterable[bytes]]) -> list[bytes]:
    """``nodes`` ordered so each comes after every one of its ``kids`` (iterative DFS; ids hash their kids'
    ids, so the graph has no cycle)."""
    out: list[bytes] = []
    done: set[bytes] = set()
    for root in nodes:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                out.append(node)
                continue
            if node in done:
                continue
            done.add(node)
            stack.append((node, True))
            stack.extend((k, False) for k in kids(node) if k not in done)
    return out


def _frames(objects: ObjectDB, items: list[tuple[bytes, int, bytes]],
            packs: list[tuple[bytes, list[tuple[bytes, int, bytes]]]] | None = None) -> list[StoredObject]:
    """Frames for one commit's new objects, children first: small ones in one pack (the pack before its
    members), big ones loose. ``packs`` gets the pack made, if any."""
    small = [x for x in items if len(x[2]) <= LOOSE_MIN]
    if len(small) < 2:
        return [objects.frame(k, b) for _, k, b in items]
    packed = objects.pack(small)
    if packs is not None:
        packs.append((packed[0].oid, small))
    return [objects.frame(k, b) for _, k, b in items if len(b) > LOOSE_MIN] + packed


def _items(sender: Side, p: _CommitPlan) -> list[tuple[bytes, int, bytes]]:
    bodies = p.bodies
    if bodies is None:  # over the staging budget: read (and verify) again
        got = read_verified(sender, [o for o, _ in p.order], budget(sender, p.cid))
        missing = [o for o, _ in p.order if o not in got]
        if missing:
            raise SyncError(f"{sender.name}: object {missing[0].hex()[:12]} vanished during the transfer (a gc "
                            f"there?); run the same command again")
        bodies = {o: b for o, (_, b) in got.items()}
    return [(o, k, bodies[o]) for o, k in p.order]


def _frame_cost(objects: ObjectDB, p: _CommitPlan, sender: Side) -> tuple[int, int]:
    frames = _frames(objects, _items(sender, p)) + ([] if p.arrived else [objects.frame(ob.COMMIT, p.body)])
    return len(p.order) + (not p.arrived), sum(len(f.frame) for f in frames)


def _land(sender: Side, receiver: Side, p: _CommitPlan, epoch: str | None, sender_version: int = 0,
          packs: _Packs | None = None) -> tuple[int, int]:
    """One commit's new objects, then its commit object, in one write scope; not indexed (see
    :func:`_move_and_index`). Returns (objects, bytes) sent. The receiver's format version is raised to the
    commit's format, and to ``sender_version`` (a sender's version above 2 says its documents may need it:
    the documents are not decoded to find out, objects_format.md section 10). ``packs`` gets the pack
    written, if any."""
    made: list[tuple[bytes, list[tuple[bytes, int, bytes]]]] = []
    frames = _frames(receiver.objects, _items(sender, p), made)
    cobj = receiver.objects.frame(ob.COMMIT, p.body)
    with writing(receiver.backend) as w:
        if w.meta_get("gc_epoch") != epoch:
            raise _EpochChanged
        if w.index_get(p.cid) is not None:  # another transfer landed it meanwhile
            return 0, 0
        now = time.time_ns()
        # one batch, children first and the commit object last (one PUT on S3: a pack per commit, not two);
        # it also freshens a commit object that arrived before, so gc's grace covers it
        w.put_many([*frames, cobj], now)
        raise_version(w, max(p.commit.version, sender_version))
    if packs is not None:
        for oid, members in made:
            packs.add(oid, members)
    sent = [] if p.arrived else [cobj]
    return len(p.order) + len(sent), sum(len(f.frame) for f in [*frames, *sent])


def _version(side: Side) -> int:
    """The store format version ``side`` records above commit format 2 (what its documents may need), else 0."""
    v = side.backend.meta_get("format_version") or ""
    n = int(v) if v.isascii() and v.isdigit() else 0
    return min(n, ob.FORMAT_VERSION) if n > ob.COMMIT_FORMAT else 0


def _mark_revivals(receiver: Side, plans: Sequence[_CommitPlan]) -> None:
    """Mark the planned commits that live rows of the receiver name as a parent (it pruned them and kept
    their children): indexing them renumbers those children after them (crewckpt.history.localorder). One
    index query per transfer, so other commits skip the per-commit lookups."""
    ids = {p.cid for p in plans}
    named = {x for r in receiver.backend.index_children(ids) for x in r.parents} if ids else set()
    for p in plans:
        p.revive = p.cid in named


def _reached(plans: Sequence[_CommitPlan], tip: bytes) -> list[_CommitPlan]:
    """The planned commits ``tip`` reaches by parents, in plan order (parents first)."""
    by_id = {p.cid: p for p in plans}
    seen: set[bytes] = set()
    stack = [tip]
    while stack:
        cid = stack.pop()
        if cid in seen or cid not in by_id:
            continue
        seen.add(cid)
        stack.extend(by_id[cid].commit.parents)
    return [p for p in plans if p.cid in seen]


def _reserve(b: Backend, plans: Sequence[_CommitPlan]) -> dict[bytes, int]:
    """Seqs for the planned commits not indexed yet, parents first, taken before the ref moves (W3: a writer
    that builds on the new tip meanwhile takes a higher seq than every commit the tip reaches)."""
    return {p.cid: b.counter_next("seq") for p in plans if b.index_get(p.cid) is None}


def _index(w: Parts, plans: Sequence[_CommitPlan], branch: str, seqs: Mapping[bytes, int] | None = None) -> None:
    """Index-rows and aliases of ``plans`` not indexed yet, parents first (they are live from now on), each on
    its planned branch (:func:`_assign_branches`), else ``branch``. ``seqs``: from :func:`_reserve`; a plan
    outside it was indexed before (a row already there stays: index_add is idempotent)."""
    todo = [p for p in plans if (p.cid in seqs if seqs is not None else w.index_get(p.cid) is None)]
    for p in todo:
        index_commit(w, p.cid, functools.partial(_row, p, p.branch or branch), may_revive=p.revive,
                     seq=None if seqs is None else seqs[p.cid])
        if p.commit.alias:
            w.alias_set(p.commit.alias, p.cid)


def _row(p: _CommitPlan, branch: str, seq: int) -> IndexRow:
    return to_row(p.cid, p.commit, branch, seq, _summary(p))


def _summary(p: _CommitPlan) -> dict[str, Any]:
    """The listing summary: the sender's index row's (a cache derived from the document, the same in every
    store) when it decodes, else what the commit object itself holds."""
    row = p.summary_row
    if row is not None:
        try:
            return from_row(row).summary  # type: ignore[arg-type]  # summary_row is an IndexRow
        except DecodeError:
            pass
    return from_commit(p.cid, p.commit, live=True).summary


def move_refs(receiver: Side, updates: Sequence[RefUpdate]) -> list[RefResult]:
    """Move each ref by compare-and-swap from its ``expected`` value, with a reflog record; a ref that holds
    something else now is "rejected" (another writer moved it), the others are unaffected. The commits must
    be indexed at the receiver already (a transfer indexes what it sends when its ref moves)."""
    return _move_and_index(None, receiver, updates, [], None)


def _move_and_index(sender: Side | None, receiver: Side, updates: Sequence[RefUpdate], plans: Sequence[_CommitPlan],
                    epoch: str | None) -> list[RefResult]:
    """:func:`move_refs`, indexing with each ref that moves (or already points at its new value) the planned
    commits it reaches, in the same write scope. With transactions the scope re-checks the gc epoch (a gc may
    have swept the not-yet-indexed objects): _EpochChanged, the transfer plans again. Without, the ref moves
    first and the index follows (W3-W5); a gc that ran meanwhile gets the objects put again (W6)."""
    b = receiver.backend
    atomic = b.capabilities.transactions
    out = []
    for u in updates:
        reached = _reached(plans, u.new) if plans else []
        seqs = _reserve(b, reached) if reached and not atomic else None
        status, indexed = "up-to-date", False
        if u.expected != u.new:
            try:
                with writing(b) as w:
                    if reached and atomic and w.meta_get("gc_epoch") != epoch:
                        raise _EpochChanged
                    now = time.time_ns()
                    w.set_ref_if_equals(u.ref, u.expected, u.new)
                    w.reflog_append(ReflogEntry(u.ref, u.expected, u.new, now, u.message))
                    if u.ref.startswith(refnames.HEADS):
                        head.follow(w, u.ref, u.expected, u.new, now, u.message)
                    if atomic:
                        _index(w, reached, u.branch)
                status, indexed = u.status, atomic
            except RefConflict:
                found = b.get_ref(u.ref)
                if found != u.new:
                    out.append(RefResult(u.ref, _hex(u.expected), u.new.hex(), "rejected",
                                         f"{receiver.name} moved it to {_hex(found, 12) or 'nothing'} meanwhile "
                                         f"(another writer won); fetch and try again"))
                    continue  # the commits only it reaches stay unindexed: garbage for gc, as in git
                # another transfer (or an earlier attempt of this one) moved it here: index what it reaches
        if reached and not indexed:
            with writing(b) as w:
                if atomic and w.meta_get("gc_epoch") != epoch:
                    raise _EpochChanged
                _index(w, reached, u.branch, seqs)
            if not atomic and sender is not None and b.meta_get("gc_epoch") != epoch:
                _reput(sender, receiver, reached)
        out.append(RefResult(u.ref, _hex(u.expected), u.new.hex(), status))
    return out


def _reput(sender: Side, receiver: Side, plans: Sequence[_CommitPlan]) -> None:
    """W6 for a transfer without transactions: a gc ran while the objects were unindexed; put every object
    under the commits again, also those the plan found present (they may be what an interrupted transfer
    left, which that gc did not mark): put-if-absent restores what it swept, the fresh stored time keeps the
    rest from its sweep."""
    for p in plans:
        order, bodies = _missing_objects(sender, _nothing, p.cid, p.commit, set())
        now = time.time_ns()
        receiver.backend.put_many(_frames(receiver.objects, [(o, k, bodies[o]) for o, k in order]), now)
        receiver.backend.put_many([receiver.objects.frame(ob.COMMIT, p.body)], now)


def whole_commit(side: Side, cid: bytes, c: ob.Commit) -> list[tuple[bytes, int, bytes]]:
    """Every object under commit ``c`` (id ``cid``) on ``side``, children first, as verified
    ``(oid, kind, body)``: what a transfer sends when it trusts nothing the receiver holds. Raises SyncError
    (an object is missing), IntegrityError (one fails its hash or is linked as another kind)."""
    order, bodies = _missing_objects(side, _nothing, cid, c, set())
    return [(oid, kind, bodies[oid]) for oid, kind in order]


def _nothing(ids: list[bytes]) -> set[bytes]:
    """A ``present`` for :func:`plan` that trusts nothing the receiver holds."""
    return set()


def is_ancestor(side: Side, ancestor: bytes, descendant: bytes) -> bool:
    """Whether ``ancestor`` is ``descendant`` or reachable from it by parents, on ``side`` (parents from the
    verified commit objects; a walk skips commits older than ``ancestor`` by local seq).

    Raises:
        IntegrityError: a corrupt commit object on the way. DocumentTooLarge: one over the read budget."""
    if ancestor == descendant:
        return True
    b = side.backend
    arow = b.index_get(ancestor)
    floor = arow.seq if arow is not None else None
    seen = {descendant}
    stack = [descendant]
    while stack:
        cid = stack.pop()
        row = b.index_get(cid)
        if row is not None and floor is not None and row.seq <= floor:
            continue  # only prunes the walk: a damaged seq can make it answer no (a refusal), never yes
        # parents from the verified commit object, never from the row (an unhashed cache a hostile store can
        # forge), bounded like every read of this module
        try:
            got = read_verified(side, [cid], budget(side, cid))
        except MissingObject:  # its pack went meanwhile (a gc there)
            continue
        if cid not in got:
            continue
        parents: Sequence[bytes] = _decode_commit(cid, *got[cid]).parents
        for par in parents:
            if par == ancestor:
                return True
            if par not in seen:
                seen.add(par)
                stack.append(par)
    return False


class _EpochChanged(Exception):
    """A gc ran on the receiver since the plan: objects counted as present may be gone; plan again."""


def _hex(oid: bytes | None, n: int = 64) -> str | None:
    return oid.hex()[:n] if oid is not None else None


def _kind(kind: int) -> str:
    return ob.KIND_NAMES.get(kind, b"object").decode()

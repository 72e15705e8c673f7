"""Garbage collection: mark from live commits and refs, sweep what nothing reaches, give disk back.

Safety with concurrent writers (objects_format.md, 'gc'): gc first bumps the store's ``gc_epoch`` in its own
transaction and takes ``cutoff = now - grace``. A writer whose caches predate the bump notices the new epoch
inside its commit transaction and re-puts every object it references (``touched`` = now >= cutoff). Objects
are deleted only while ``touched < cutoff`` still holds *inside the delete transaction*, so an object a
writer stored or reused after the bump survives. Only one gc runs at a time (a lock that dies with its
process). Deleting in small transactions makes gc interruptible: a gc killed at any point leaves only
unreferenced objects, and a rerun finishes the job. A transfer trusts that a present tree has its whole
subtree, so gc records that it runs (meta ``gc_running``, docs/backends.md W7: transfers then send whole
trees; cleared only by a gc that completes with no hole below what it kept) and keeps what young
unreachable trees reach.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from crewckpt.backends.base import HEAD_BYTES, Backend, ObjectMeta, writing
from crewckpt.errors import CkptError, DocumentTooLarge, GcAborted, GcBusy, IntegrityError, MissingObject
from crewckpt.format import objects as ob
from crewckpt.format.frame import PACK_KEY, PACK_LEVEL, PACKED
from crewckpt.history.limits import ObjectBound
from crewckpt.history.refnames import ref_fix
from crewckpt.history.snapshot import links_in

if TYPE_CHECKING:
    from crewckpt.history.parts import StoreParts

Progress = Callable[[str, int, "int | None"], None]
"""Progress callback: ``(phase, done, total or None)``."""

DELETE_BATCH = 500
LOOSE_MIN = 1 << 20  # bytes; bodies over this stay loose (same rule as commits)
REPACK_BELOW = 16 << 20  # bytes: gc merges packs smaller than this (one full pack until then, like git gc)
PACK_MAX = 16 << 20  # bytes of bodies per new pack
MERGE_LEVEL = 3  # zstd level of a writer's merges: 4x faster than gc's level 9, ~5% more bytes (issue 13)
AUTO_MERGE_PACKS = 50  # small packs a store holds before a transfer into it merges them (git's gc.autoPackLimit)
SMALL_PACK = 1 << 20  # body bytes: a pack under this counts as small for AUTO_MERGE_PACKS
MERGE_PACKS_AT_ONCE = 200  # small packs one merge_small_packs call merges at most (<= 200 MiB of bodies)
RUN_MERGE_BYTES = 4 << 20  # body bytes: a run (or transfer) whose packs hold at most this ends with one pack
GC_WAIT_S = 30.0  # seconds gc waits for the lock (another gc, or a writer's automatic repack)
COMPACT_BELOW = 256 << 20  # bytes: smaller stores are rewritten densely (VACUUM, well under a second)
RUNNING = "gc_running"  # meta: the epoch of a gc that bumped it and has not completed ("" or absent: none)
_log = logging.getLogger("crewckpt")


@dataclasses.dataclass(frozen=True)
class GcReport:
    """What gc did: objects marked live, objects deleted (or that would be, for a dry run), their body
    bytes, and the store folder's size before/after in bytes. ``kept_young``: unreachable objects kept because
    they were stored or reused less than ``grace_s`` seconds before gc started, or such a tree reaches them
    (``grace_shared``: that grace is the backend's own, for writers on other machines' clocks);
    ``kept_until_ns``: the wall-clock time (ns since the epoch) after which a new gc can delete all of them
    (None when none was kept). ``deleted_packs`` and
    ``deleted_pack_bytes`` (member bytes, uncompressed): the part of ``deleted_objects`` / ``deleted_bytes`` that
    is packs repacking replaced or emptied, not unreachable data."""

    live_objects: int
    deleted_objects: int
    deleted_bytes: int
    bytes_before: int
    bytes_after: int
    dry_run: bool
    kept_young: int = 0
    grace_s: float = 0.0
    grace_shared: bool = False
    kept_until_ns: int | None = None
    deleted_packs: int = 0
    deleted_pack_bytes: int = 0


def roots(parts: StoreParts) -> set[bytes]:
    """Commit ids gc keeps: every live commit (the commit index) and every ref target. Parent pointers are
    weak references: a pruned parent is not kept alive by its children."""
    r = {row.id for row in parts.index.index_rows()}
    r.update(parts.refs.refs().values())
    return r


def mark(parts: StoreParts, progress: Progress | None = None, unread: set[bytes] | None = None) -> set[bytes]:
    """Ids of every non-pack object reachable from :func:`roots` (commits, their trees and blobs) plus every
    dictionary. Packs are live while a surviving object's frame names them (see :func:`gc`).

    Objects the walk needs but cannot get are added to ``unread`` (when given) and their subgraph is not
    walked: gc then refuses to sweep if any of them is listed (present but unreadable right now), since what
    sits below them would look unreachable. Corrupt trees raise IntegrityError (nothing is deleted); a commit
    or tree declaring more bytes than the read limit ($CKPT_MAX_READ_BYTES) raises GcAborted before it is
    decompressed (nothing is deleted: what sits below it would look unreachable).
    """
    try:
        return _mark(parts, progress, unread, ObjectBound(doing="check"))
    except DocumentTooLarge as e:
        raise GcAborted(f"gc stopped before deleting anything: {e}; or run `ckpt fsck` to see what needs "
                        f"it") from None


def _mark(parts: StoreParts, progress: Progress | None, unread: set[bytes] | None,
          bound: ObjectBound) -> set[bytes]:
    objs = parts.objects
    live: set[bytes] = {m.oid for m in objs.backend.iter_objects() if m.kind == ob.DICT}
    level: list[bytes] = []
    for cid in roots(parts):
        try:
            c = objs.commit(cid, budget=bound)
        except MissingObject:
            if unread is not None:
                unread.add(cid)
            continue
        except IntegrityError:
            _not_a_commit(parts, cid)
            raise
        live.add(cid)
        level.append(c.tree.oid)
    _descend(parts, level, live, frozenset(), unread, bound, progress)
    return live


def _descend(parts: StoreParts, level: list[bytes], seen: set[bytes], stop: AbstractSet[bytes],
             unread: set[bytes] | None, bound: ObjectBound, progress: Progress | None = None) -> None:
    """Add to ``seen`` every object at or below the ids in ``level`` that is in neither ``seen`` nor ``stop``,
    reading trees a level at a time (one ``get_many`` per level, decoding in :func:`size_batches`)."""
    objs = parts.objects
    done = 0
    while level:
        todo = [o for o in dict.fromkeys(level) if o not in seen and o not in stop]
        seen.update(todo)
        level = []
        found = objs.backend.get_many(todo)
        if unread is not None:
            unread.update(o for o in todo if o not in found)
        trees = [o for o, s in found.items() if s.kind == ob.TREE]
        for batch in size_batches(trees, {o: found[o].size for o in trees}):
            got = objs.trees(batch, budget=bound)
            for _, payload in got.values():
                level.extend(ln.oid for ln in links_in(payload))
        done += len(todo)
        if progress:
            progress("mark", done, None)


def _below_young(parts: StoreParts, trees: list[bytes], commits: list[bytes], live: set[bytes],
                 listed: AbstractSet[bytes], unread: set[bytes]) -> tuple[set[bytes], int]:
    """The unmarked objects below unmarked but young ``trees`` and ``commits`` (stored within the grace, so
    kept), and how many objects below them are missing (not ``listed``: an interrupted gc or transfer left
    such holes). gc keeps what they reach: a transfer skips a tree it finds present, trusting its
    subtree is there (objects are written children first), so no sweep may leave a present tree without its
    children. A young object that is corrupt is garbage nothing can use: what only it reaches is not kept.
    Objects listed but unread are added to ``unread``."""
    bound = ObjectBound(doing="check")
    roots = list(trees)
    for cid in commits:
        with contextlib.suppress(MissingObject, IntegrityError):
            roots.append(parts.objects.commit(cid, budget=bound).tree.oid)
    seen: set[bytes] = set()
    missing: set[bytes] = set()
    try:
        try:
            _descend(parts, roots, seen, live, missing, bound)
        except IntegrityError:  # a corrupt young tree: walk them one by one, skipping those
            seen.clear()
            missing.clear()
            for root in roots:
                absent: set[bytes] = set()
                with contextlib.suppress(IntegrityError):
                    _descend(parts, [root], seen, live, absent, bound)
                missing |= absent
    except DocumentTooLarge as e:
        raise GcAborted(f"gc stopped before deleting anything: {e}; or run `ckpt fsck` to see what needs "
                        f"it") from None
    unread |= missing & listed
    return seen.difference(trees), len(missing - listed)  # ``trees`` are young themselves


def _not_a_commit(parts: StoreParts, cid: bytes) -> None:
    """Raise GcAborted naming the ref when root ``cid`` is a ref's target that is stored as another kind of
    object (the ref is damaged, not the object); return otherwise."""
    got = parts.objects.backend.get(cid)
    if got is None or got.kind == ob.COMMIT:
        return
    for name, target in sorted(parts.refs.refs().items()):
        if target == cid:
            kind = ob.KIND_NAMES.get(got.kind, b"object").decode()
            raise GcAborted(f"gc stopped before deleting anything: ref {name} names {cid.hex()}, a {kind}, not a "
                            f"commit; {ref_fix(name)}")


BATCH_BYTES = 64 << 20  # declared body bytes decoded per batch (frames never decode past their declared size)


def size_batches(oids: list[bytes], sizes: dict[bytes, int] | None, limit: int = BATCH_BYTES,
                 count: int = 2000) -> list[list[bytes]]:
    """Cut ``oids`` into batches of at most ``count`` objects and ``limit`` declared bytes (a single bigger
    object is a batch alone): a store whose objects declare huge bodies costs memory one object at a time,
    not 2000 at once. ``sizes`` None: by count only."""
    out: list[list[bytes]] = []
    cur: list[bytes] = []
    used = 0
    for o in oids:
        n = max((sizes or {}).get(o, 0), 0) if sizes is not None else 0
        if cur and (len(cur) >= count or used + n > limit):
            out.append(cur)
            cur, used = [], 0
        cur.append(o)
        used += n
    if cur:
        out.append(cur)
    return out


def next_epoch(current: str | None) -> str:
    """The gc epoch after ``current``; a damaged value (not a number) is replaced by a fresh one (writers only
    compare epochs for equality)."""
    text = (current or "0").strip()
    return str(int(text) + 1) if text.isdigit() and len(text) < 30 else str(time.time_ns())


def _pack_of(head: bytes) -> bytes | None:
    """The pack id prefix a frame head names, or None for an unpacked frame."""
    return bytes(head[1:1 + PACK_KEY]) if head[:1] == bytes([PACKED]) and len(head) == HEAD_BYTES else None


def repack(parts: StoreParts, live: set[bytes], metas: dict[bytes, ObjectMeta],
           progress: Progress | None = None) -> int:
    """Rewrite live objects that sit loose or in small or mostly-dead packs into new packs of up to
    PACK_MAX bytes, compressed at PACK_LEVEL; returns how many objects moved. Members are ordered by kind
    and body prefix so versions of one task/agent sit together (zstd then finds them: ~5x better than
    per-checkpoint packs on crew_json_star_n6).

    Each new pack lands with its members' new frames in one transaction, so a crash leaves either frame.
    """
    moving = repack_plan(live, metas)
    return write_packs(parts, moving, progress, {o: metas[o].size for o in moving if o in metas}) if moving else 0


def repack_plan(live: set[bytes], metas: dict[bytes, ObjectMeta]) -> list[bytes]:
    """The live objects :func:`repack` moves into new packs (empty when it would do nothing): loose ones
    and the members of packs under REPACK_BELOW bytes or less than half live. The packs they leave are then
    unreferenced and gc deletes them (what ``gc --dry-run`` counts too)."""
    by_pack: dict[bytes, list[bytes]] = {}
    loose: list[bytes] = []
    for oid in live:
        m = metas.get(oid)
        if m is None or m.kind in (ob.DICT, ob.PACK):
            continue
        p = _pack_of(m.head)
        if p is not None:
            by_pack.setdefault(p, []).append(oid)
        elif m.size <= LOOSE_MIN:
            loose.append(oid)
    chosen = []
    pack_size: dict[bytes, int] = {}
    for o, m in metas.items():
        if m.kind == ob.PACK:
            pack_size[o[:PACK_KEY]] = pack_size.get(o[:PACK_KEY], 0) + m.size
    sparse = False
    for p, members in by_pack.items():
        size = pack_size.get(p, 0)
        live_bytes = sum(metas[o].size for o in members)
        if size < REPACK_BELOW or live_bytes * 2 < size:
            chosen.append(p)
            sparse = sparse or live_bytes * 2 < size
    if len(chosen) + (1 if loose else 0) < 2 and not sparse:
        return []
    return loose + [o for p in chosen for o in by_pack[p]]


def write_packs(parts: StoreParts, oids: list[bytes], progress: Progress | None = None,
                sizes: dict[bytes, int] | None = None, level: int = PACK_LEVEL,
                drop: list[bytes] | None = None, known: Mapping[bytes, tuple[int, bytes]] | None = None,
                made: list[tuple[bytes, list[bytes], int]] | None = None) -> int:
    """Move objects into new packs of up to PACK_MAX body bytes at zstd ``level`` (default PACK_LEVEL), ordered
    by kind and body prefix; returns how many frames changed. Objects gone meanwhile are skipped. Each pack
    lands with its members' new frames in one transaction, so a crash leaves either frame. ``sizes``
    (declared body bytes) bounds each decoding batch to BATCH_BYTES. ``drop``: the packs these objects leave
    (a writer's merge); they are deleted in the transaction of the last new pack, when no frame names them
    any more, so no crash or failure leaves their bytes behind (a reader that read an old frame retries on
    the miss: objectdb.get_many); one that is also a new pack (the same member bodies in the same order:
    pack ids hash bodies, not compression) is kept, since its members' new frames name it. ``known``:
    ``oid -> (kind, body)`` the caller made itself and hashed to those ids (a writer merging its own packs):
    used instead of reading them back, for the ones still stored.
    ``made``: gets ``(pack id, member ids, body bytes)`` of each new pack once it landed."""
    bodies: dict[bytes, tuple[int, bytes]] = {}
    if known:
        mine = [o for o in oids if o in known]
        bodies = {o: known[o] for o in parts.objects.backend.has_many(mine)}
    for ids in size_batches([o for o in oids if o not in bodies], sizes):
        bodies.update(parts.objects.get_many(ids))
    items = sorted(((o, k, b) for o, (k, b) in bodies.items()), key=lambda x: (x[1], x[2][:48], x[0]))
    moved = 0
    batch: list[tuple[bytes, int, bytes]] = []
    size = 0
    written: set[bytes] = set()
    for n, it in enumerate(items, 1):
        batch.append(it)
        size += len(it[2])
        last = n == len(items)
        if last or size >= PACK_MAX:
            objs = parts.objects.pack(batch, level=level)
            written.add(objs[0].oid)
            with parts.backend.transaction() as txn:  # reframe implies transactions (docs/backends.md)
                txn.put_many(objs[:1], time.time_ns())
                moved += txn.reframe((o.oid, o.frame) for o in objs[1:])
                if last and drop:
                    # a pack id hashes its members' bodies, not their compression: a merge whose members and
                    # order are a dropped pack's rewrites that very pack, which its new frames then name
                    txn.drop_packs([p for p in drop if p not in written], time.time_ns() + 1)
            if made is not None:
                made.append((objs[0].oid, [o for o, _, _ in batch], size))
            batch, size = [], 0
            if progress:
                progress("repack", moved, len(items))
    if drop and not items:  # every member went meanwhile: nothing names the packs
        with parts.backend.transaction() as txn:
            txn.drop_packs(drop, time.time_ns() + 1)
    return moved


def drop_unreferenced_packs(parts: StoreParts, touched_before_ns: int) -> int:
    """Delete packs that no object's frame names any more (and older than the cutoff); returns the count.

    Decided inside one transaction where the backend has them; without, writers only add frames naming the
    pack they put in the same batch (its stored time is then fresh), and the delete re-checks that time."""
    with writing(parts.backend) as txn:
        now = list(txn.iter_objects())
        used = {_pack_of(m.head) for m in now}
        packs = [m.oid for m in now
                 if m.kind == ob.PACK and m.oid[:PACK_KEY] not in used and m.touched_ns < touched_before_ns]
        return txn.delete_objects(packs, touched_before_ns)


def merge_packs(parts: StoreParts, packs: list[tuple[bytes, list[bytes]]], level: int = PACK_LEVEL,
                bodies: Mapping[bytes, tuple[int, bytes]] | None = None,
                made: list[tuple[bytes, list[bytes], int]] | None = None) -> bool:
    """Merge packs this writer wrote, given as ``(pack id, member ids)``, into bigger packs compressed together
    (git's gc.autoPackLimit idea), deleting them in the same transaction as the last new pack. Needs no
    scan: only the writer's own rows name its packs (a member that already existed kept its older frame).
    Skipped, returning False, while a gc holds the lock; the caller keeps its list and tries again later.
    ``level``: zstd level of the merged packs; ``bodies``: members' bodies the writer still holds (see
    :func:`write_packs` ``known``); ``made``: as in :func:`write_packs`."""
    b = parts.backend
    if not (b.capabilities.reframe and b.capabilities.locks):
        return True  # nothing to merge on a backend that cannot reframe: per-checkpoint packs stay
    with b.lock("gc") as got:
        if not got:
            return False
        write_packs(parts, [o for _, members in packs for o in members], level=level,
                    drop=[p for p, _ in packs], known=bodies, made=made)
    return True


def merge_small_packs(parts: StoreParts, limit: int | None = None, level: int = MERGE_LEVEL) -> int:
    """When the store holds more than ``limit`` (default AUTO_MERGE_PACKS) packs of under SMALL_PACK body
    bytes, merge up to MERGE_PACKS_AT_ONCE of them into packs of up to PACK_MAX. git runs ``gc --auto`` after a
    push for the same reason: a store fed by many small transfers, or by a transfer killed and run again,
    held 200-600 one-transfer packs, 3-10x the bytes of the same objects after gc. Returns how many packs
    were merged: 0 below the limit, while a gc (or another merge) holds the lock, or on a backend that
    cannot reframe. Counts with one query (:meth:`~crewckpt.backends.base.ObjectStore.count_objects`); past
    the limit, lists every object's meta once, under the gc lock, so no gc deletes a member meanwhile.
    Raises CkptError (the caller logs it)."""
    b = parts.backend
    limit = AUTO_MERGE_PACKS if limit is None else limit
    if not (b.capabilities.reframe and b.capabilities.locks) or b.count_objects(ob.PACK, SMALL_PACK) <= limit:
        return 0
    with b.lock("gc") as got:
        if not got:
            return 0
        metas = list(b.iter_objects())
        small = {m.oid[:PACK_KEY]: m.oid for m in metas if m.kind == ob.PACK and m.size < SMALL_PACK}
        if len(small) <= limit:
            return 0
        # a bounded share per transfer (a store that had 3,000 made a one-checkpoint push take 2.9 s)
        small = dict(list(small.items())[:MERGE_PACKS_AT_ONCE])
        members = {m.oid: m.size for m in metas
                   if m.kind not in (ob.PACK, ob.DICT) and _pack_of(m.head) in small}
        write_packs(parts, list(members), sizes=members, level=level, drop=list(small.values()))
    return len(small)


def gc(parts: StoreParts, *, dry_run: bool = False, grace_ns: int = 0, progress: Progress | None = None,
       wait_s: float = GC_WAIT_S) -> GcReport:
    """Collect unreachable objects of the store ``parts`` belong to, and repack the live ones (module docstring has the safety
    argument).

    Args:
        dry_run: report what would go, change nothing (the epoch is not bumped either).
        grace_ns: also keep objects touched within this many ns before gc started.
        wait_s: how long to wait for the gc lock (another gc, or a writer's automatic repack).
    Raises:
        GcBusy: the lock stayed taken for ``wait_s`` seconds. GcAborted: an object the mark needed is listed but
            could not be read (nothing was deleted; retry, or run fsck).
    """
    b = parts.backend
    caps = b.capabilities
    shared_ns = int(caps.gc_grace_s * 1e9)
    grace_shared = shared_ns > 0 and shared_ns >= grace_ns
    grace_ns = max(grace_ns, shared_ns)
    lock = b.lock("gc", wait_s=wait_s) if caps.locks else contextlib.nullcontext(True)
    with lock as got:  # a writer's automatic repack holds it for well under a second
        if not got:
            holder = b.lock_holder("gc")
            raise GcBusy(f"another gc is running on this store (its lock stayed taken for {wait_s:.0f} s"
                         f"{'; ' + holder if holder else ''}); wait for it to finish")
        # the cutoff is read *before* the epoch bump: a writer that puts objects after the bump either saw the
        # old epoch (its transaction committed before the bump, so mark sees its commit) or stamps them with
        # a time read after the bump, hence >= cutoff. Read after the bump, a descheduled gc could get a
        # cutoff later than a racing writer's stamp and sweep that writer's fresh commit.
        cutoff = time.time_ns() - grace_ns
        if dry_run:
            return _collect(parts, cutoff, grace_ns, grace_shared, True, progress)[0]
        with writing(b) as txn:
            epoch = next_epoch(txn.meta_get("gc_epoch"))
            txn.meta_set("gc_epoch", epoch)
            txn.meta_set(RUNNING, epoch)  # transfers send whole trees until it is cleared (sync.plan)
        # a gc that stops early (killed, interrupted, refused) leaves the mark: its sweep may have left trees
        # without their children, which only a gc that completes removes
        report, holes = _collect(parts, cutoff, grace_ns, grace_shared, False, progress)
        if not holes:
            _finished(b, epoch)
        else:
            _log.warning("crewckpt: %d object(s) are missing below unreachable trees gc kept for the grace (an "
                         "interrupted gc left them so); transfers into this store send whole trees until a gc "
                         "after the grace collects those trees", holes)
        return report


def running(backend: Backend) -> bool:
    """Whether a gc may be sweeping ``backend`` now, or one did not complete (killed, interrupted, refused,
    or it kept young trees missing objects below them): a present tree may then lack its subtree, so a
    transfer trusts no object it finds present (sync.plan). The next gc that completes clears it."""
    return bool(backend.meta_get(RUNNING))


def _finished(b: Backend, epoch: str) -> None:
    """Clear :data:`RUNNING` when it still names this gc's ``epoch``; best effort (left set, transfers only
    send more)."""
    try:
        with writing(b) as txn:
            if txn.meta_get(RUNNING) == epoch:
                txn.meta_set(RUNNING, "")
    except CkptError as e:
        _log.warning("crewckpt: gc could not record that it finished (%s); transfers into this store send whole "
                     "trees until the next gc finishes", e)


def _collect(parts: StoreParts, cutoff: int, grace_ns: int, grace_shared: bool, dry_run: bool,
             progress: Progress | None) -> tuple[GcReport, int]:
    """Mark, then (unless ``dry_run``) repack, sweep what is unmarked and older than ``cutoff`` (ns), drop
    packs nothing names and run the backend's maintenance; see :func:`gc`. Returns the report and how many
    objects are missing below the young unreachable trees and commits it kept."""
    b = parts.backend
    caps = b.capabilities
    before = parts.size_bytes()
    unread: set[bytes] = set()
    live = mark(parts, progress, unread)
    metas = {m.oid: m for m in parts.objects.backend.iter_objects()}
    young = [m.touched_ns for o, m in metas.items() if m.kind != ob.PACK and o not in live
             and m.touched_ns >= cutoff]
    # a present object stands for its whole subtree (sync.plan skips it): keep what young ones reach too
    kept_ids = [o for o, m in metas.items() if o not in live and m.touched_ns >= cutoff]
    below, holes = _below_young(parts, [o for o in kept_ids if metas[o].kind == ob.TREE],
                                [o for o in kept_ids if metas[o].kind == ob.COMMIT], live, metas.keys(), unread)
    if unread & metas.keys():  # present but unreadable: what lies below it would look unreachable
        first = min(unread & metas.keys()).hex()
        raise GcAborted(f"gc could not read object {first} that a live (or young) object needs, though the store lists "
                        f"it; nothing was deleted; retry, and run `ckpt fsck` if it persists")
    dead = [o for o, m in metas.items()
            if m.kind != ob.PACK and o not in live and o not in below and m.touched_ns < cutoff]
    kept = functools.partial(GcReport, kept_young=len(young) + len(below), grace_s=grace_ns / 1e9, grace_shared=grace_shared,
                             kept_until_ns=max(young) + grace_ns if young else None)
    if dry_run:  # what the sweep deletes, then the packs nothing names once repack moved their members
        dead_set = set(dead) | (set(repack_plan(live, metas)) if caps.reframe and caps.locks else set())
        used = {_pack_of(m.head) for o, m in metas.items() if o not in dead_set}
        packs = [o for o, m in metas.items()
                 if m.kind == ob.PACK and o[:PACK_KEY] not in used and m.touched_ns < cutoff]
        gone = dead + packs
        return kept(len(live), len(gone), sum(metas[o].size for o in gone), before, before, True,
                    deleted_packs=len(packs), deleted_pack_bytes=sum(metas[o].size for o in packs)), holes
    if caps.reframe and caps.locks:  # packing is tuning for backends that can rewrite frames in place
        repack(parts, live, metas, progress)
    deleted = 0
    for i in range(0, len(dead), DELETE_BATCH):
        batch = dead[i:i + DELETE_BATCH]
        with writing(b) as txn:
            deleted += txn.delete_objects(batch, cutoff)
            # a collected commit's foreign ids must not resolve to nothing (re-import makes them anew)
            txn.alias_forget([o for o in batch if metas[o].kind == ob.COMMIT and not txn.has_many([o])])
        if progress:
            progress("sweep", min(i + DELETE_BATCH, len(dead)), len(dead))
    packs_before = {o for o, m in metas.items() if m.kind == ob.PACK}
    deleted += drop_unreferenced_packs(parts, cutoff)
    gone_packs = packs_before - {m.oid for m in parts.objects.backend.iter_objects() if m.kind == ob.PACK}
    b.maintain(compact=before < COMPACT_BELOW)  # the backend's own tuning (SQLite: vacuum, WAL)
    after = parts.size_bytes()
    pack_bytes = sum(metas[o].size for o in gone_packs)
    freed = sum(metas[o].size for o in dead) + pack_bytes
    return kept(len(live), deleted, freed, before, after, False, deleted_packs=len(gone_packs),
                deleted_pack_bytes=pack_bytes), holes

"""Garbage collection: mark from live commits and refs, sweep what nothing reaches, give disk back.

Safety with concurrent writers (objects_format.md, 'gc'): gc first bumps the store's ``gc_epoch`` in its own
transaction and takes ``cutoff = now - grace``. A writer whose caches predate the bump notices the new epoch
inside its commit transaction and re-puts every object it references (``touched`` = now >= cutoff). Objects
are deleted only while ``touched < cutoff`` still holds *inside the delete transaction*, so an object a
writer stored or reused after the bump survives. Only one gc runs at a time (a lock that dies with its
process). Deleting in small transactions makes gc interruptible: a gc killed at any point leaves only
unreferenced objects, and a rerun finishes the job.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from crewckpt.errors import CkptError, MissingObject
from crewckpt.format import objects as ob
from crewckpt.history.snapshot import links_in

if TYPE_CHECKING:
    from crewckpt.history.store import Store

Progress = Callable[[str, int, "int | None"], None]
"""Progress callback: ``(phase, done, total or None)``."""

DELETE_BATCH = 500


class GcBusy(CkptError):
    """Another gc holds the store's gc lock."""


@dataclasses.dataclass(frozen=True)
class GcReport:
    """What gc did: objects marked live, objects deleted (or that would be, for a dry run), their stored
    bytes, and the store folder's size before/after in bytes."""

    live_objects: int
    deleted_objects: int
    deleted_bytes: int
    bytes_before: int
    bytes_after: int
    dry_run: bool


def roots(store: Store) -> set[bytes]:
    """Commit ids gc keeps: every live commit (the commit index) and every ref target. Parent pointers are
    weak references: a pruned parent is not kept alive by its children."""
    r = {row.id for row in store.backend.index_rows()}
    r.update(store.backend.refs().values())
    return r


def mark(store: Store, progress: Progress | None = None) -> set[bytes]:
    """Ids of every object reachable from :func:`roots` (commits, their trees and blobs, dictionaries).

    Missing objects are skipped (fsck reports them); corrupt trees raise IntegrityError.
    """
    live: set[bytes] = set()
    commits = roots(store)
    level: list[bytes] = []
    for cid in commits:
        try:
            c = store.objects.commit(cid)
        except MissingObject:
            continue
        live.add(cid)
        level.append(c.tree.oid)
    for oid, kind, _ in store.backend.iter_objects():
        if kind == ob.DICT:
            live.add(oid)
    done = 0
    while level:
        todo = [o for o in dict.fromkeys(level) if o not in live]
        live.update(todo)
        level = []
        kinds = {o: s.kind for o, s in store.backend.get_many(todo).items()}
        trees = [o for o in todo if kinds.get(o) == ob.TREE]
        for i in range(0, len(trees), 2000):
            got = store.objects.trees(trees[i:i + 2000])
            for _, payload in got.values():
                level.extend(ln.oid for ln in links_in(payload))
        done += len(todo)
        if progress:
            progress("mark", done, None)
    return live


def gc(store: Store, *, dry_run: bool = False, grace_ns: int = 0, progress: Progress | None = None) -> GcReport:
    """Collect unreachable objects of ``store`` (module docstring has the safety argument).

    Args:
        dry_run: report what would go, delete nothing (the epoch is not bumped either).
        grace_ns: also keep objects touched within this many ns before gc started.
    Raises:
        GcBusy: another gc is running.
    """
    b = store.backend
    with b.gc_lock() as got:
        if not got:
            raise GcBusy("another gc is running on this store; wait for it to finish")
        before = store.stats()["file_bytes"]
        if not dry_run:
            with b.transaction() as txn:
                txn.meta_set("gc_epoch", str(int(txn.meta_get("gc_epoch") or "0") + 1))
        cutoff = time.time_ns() - grace_ns
        live = mark(store, progress)
        sizes = {}
        dead = []
        for oid, _kind, touched in b.iter_objects():
            if oid not in live and touched < cutoff:
                dead.append(oid)
        for i in range(0, len(dead), 2000):
            sizes.update({o: len(s.frame) for o, s in b.get_many(dead[i:i + 2000]).items()})
        deleted = 0
        if not dry_run:
            for i in range(0, len(dead), DELETE_BATCH):
                with b.transaction() as txn:
                    deleted += txn.delete_objects(dead[i:i + DELETE_BATCH], cutoff)
                if progress:
                    progress("sweep", i + DELETE_BATCH, len(dead))
            b.reclaim()
        after = store.stats()["file_bytes"]
        return GcReport(len(live), deleted if not dry_run else len(dead), sum(sizes.values()), before, after,
                        dry_run)

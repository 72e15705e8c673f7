"""The backend contract: the small set of parts every storage backend provides (docs/backends.md has it in
MUST/SHOULD form, with the contract test that checks each rule; modelled on dulwich's object store and refs
container and restic's backend interface).

A backend is four parts plus what it declares about itself:

* :class:`ObjectStore`: immutable objects ``oid -> (kind, size, frame)``; put-if-absent, get, has, list,
  delete, all in batches. An object is never changed in place (see :meth:`Backend.reframe` for the one
  optional exception, an equivalent frame for the same body).
* :class:`RefStore`: refs ``name -> oid`` moved only by compare-and-swap (:class:`RefConflict` on a stale
  old value), an append-only reflog per ref, and symbolic refs ``name -> ref name`` (``HEAD ->
  refs/heads/main``, git's HEAD file; HEAD's moves are logged in the reflog of ``HEAD``).
* :class:`CommitIndex`: a *derived cache* of the commit objects (one row per live commit, its local order
  ``seq`` and owning branch), foreign-id aliases and local counters. Rebuildable from objects and refs
  (crewckpt.history.reindex.rebuild_index); never the only copy of anything but liveness and local order.
* :class:`MetaStore`: a few strings (format_version, gc_epoch, dictionary, config).

and :class:`Capabilities` (transactions, locks, cheap listing, shared, ...), so the store above adapts
instead of every backend faking one SQLite file. Backend-specific tuning (WAL, vacuum, packing, busy
timeouts) stays inside the backend, behind the optional :meth:`Backend.maintain` hook gc calls.

Backends never decode or verify frames: that is the object layer's job (crewckpt.history.objectdb).
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
from collections.abc import Iterable, Iterator, Mapping

from crewckpt.errors import RefConflict
from crewckpt.errors import StoreBusy as StoreBusy  # re-exported: the old import path
from crewckpt.errors import StoreWriteError as StoreWriteError


@dataclasses.dataclass(frozen=True, slots=True)
class StoredObject:
    """One object at rest: 32-byte id, kind code, uncompressed body size (bytes), frame bytes."""

    oid: bytes
    kind: int
    size: int
    frame: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectMeta:
    """Listing form of an object: id, kind, body size (bytes), stored time (UTC ns: when it was put or last
    put again; gc's grace rule), and ``head``: the first HEAD_BYTES bytes of its frame (enough to see a packed
    frame's pack id without reading the payload); ``frame_bytes``: the frame's length at rest (-1: unknown)."""

    oid: bytes
    kind: int
    size: int
    touched_ns: int
    head: bytes
    frame_bytes: int = -1


HEAD_BYTES = 9


@dataclasses.dataclass(frozen=True, slots=True)
class IndexRow:
    """A live commit in the commit index (a cache of the commit object's fields plus local state).

    id: 32-byte commit id; branch: the branch it belongs to locally (prune, rename); seq: local write order
    (store-wide, increasing along every branch); time_ns: UTC ns; parents: raw ids; tree: raw id of the
    snapshot root; summary: the msgpack-encoded listing summary, opaque here (a map written by the store's
    profile; a format-1 store's rows hold a 5-slot list); meta_json: the commit's metadata JSON text.
    """

    id: bytes
    branch: str
    seq: int
    time_ns: int
    run_id: str
    trigger: str | None
    parents: tuple[bytes, ...]
    tree: bytes
    summary: bytes
    alias: str | None
    meta_json: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class ReflogEntry:
    """One ref update: old/new raw ids (None = absent), UTC time in ns, a short message."""

    ref: str
    old: bytes | None
    new: bytes | None
    time_ns: int
    message: str


@dataclasses.dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend offers beyond the required verbs; the store and gc adapt to it (docs/backends.md).

    transactions: :meth:`Backend.transaction` gives an atomic, serialized write scope over every part; the
        store then lands a checkpoint in one transaction. Without it the store follows the ordering
        invariants (objects, commit object, ref CAS, index) and heals a missing index row.
    locks: :meth:`Backend.lock` gives named exclusive locks that die with their holder (no stale lock files).
    cheap_listing: :meth:`ObjectStore.iter_objects` is cheap enough to run on every gc and ``stats``
        (a local file or database table; not a paginated remote listing).
    reframe: :meth:`Backend.reframe` exists (an equivalent frame for an existing object: repacking). gc only
        repacks when this is true, and only under the "gc" lock (so it also needs ``locks``).
    shared: several processes (or machines) may open the same store at once; the contract suite then
        runs its multi-process checks.
    persistent: what was written survives closing and reopening the backend.
    gc_grace_s: the least grace (seconds) gc must apply to objects stored recently; 0 is safe only when
        deletes re-check an object's stored time atomically against writers (transactions).
    """

    transactions: bool = False
    locks: bool = False
    cheap_listing: bool = True
    reframe: bool = False
    shared: bool = False
    persistent: bool = True
    gc_grace_s: float = 0.0


def ref_conflict(name: str, expected: bytes | None, found: bytes | None) -> RefConflict:
    """The one-line error every backend raises for a stale compare-and-swap on ``name``."""
    return RefConflict(f"ref {name} moved (expected {expected.hex() if expected else 'nothing'}, found "
                       f"{found.hex() if found else 'nothing'}); re-read it and retry")


class ObjectStore(abc.ABC):
    """Immutable content-addressed objects. Every verb takes any number of ids (backends batch internally)."""

    @abc.abstractmethod
    def get_many(self, oids: Iterable[bytes]) -> dict[bytes, StoredObject]:
        """Objects found among ``oids`` (absent ids are simply missing from the result)."""

    @abc.abstractmethod
    def has_many(self, oids: Iterable[bytes]) -> set[bytes]:
        """The subset of ``oids`` present."""

    @abc.abstractmethod
    def put_many(self, objs: Iterable[StoredObject], now_ns: int) -> int:
        """Put-if-absent: store the absent objects (stored time ``now_ns``), never change a present one's
        frame; a present object's stored time becomes at least ``now_ns`` (gc's grace rule: a reused object
        is as fresh as a new one). Returns how many were new (exact for one writer; writers racing to put
        the same object may each count it). Durable when it returns (outside a transaction) or when the
        transaction commits."""

    def put_many_uncounted(self, objs: Iterable[StoredObject], now_ns: int) -> None:
        """:meth:`put_many` for a caller that does not need the count (the store's checkpoint): a backend
        may then send it with the transaction's next round trip instead of waiting for its answer (PostgreSQL).
        Same guarantees once the transaction commits; outside one, durable when it returns (default)."""
        self.put_many(objs, now_ns)

    @abc.abstractmethod
    def iter_objects(self, prefix: bytes = b"") -> Iterator[ObjectMeta]:
        """Every object whose id starts with ``prefix`` as :class:`ObjectMeta`, in no particular order."""

    @abc.abstractmethod
    def delete_objects(self, oids: Iterable[bytes], touched_before_ns: int) -> int:
        """Delete those of ``oids`` whose stored time is still older than ``touched_before_ns``, re-checked
        at delete time (atomically per object): gc's guard against a writer that put an object again after
        gc marked it. Absent ids are skipped. Returns how many went."""

    def get(self, oid: bytes) -> StoredObject | None:
        """One object or None."""
        return self.get_many([oid]).get(oid)

    def get_prefix(self, prefix: bytes, kind: int) -> list[StoredObject]:
        """Objects of ``kind`` whose id starts with ``prefix`` (packed frames name packs by an 8-byte prefix;
        callers verify which candidate is meant)."""
        return list(self.get_many([m.oid for m in self.iter_objects(prefix) if m.kind == kind]).values())

    def count_objects(self, kind: int, size_below: int) -> int:
        """How many objects of ``kind`` have a body under ``size_below`` bytes (a transfer's receiver counts its
        small packs this way before deciding to merge them). Default: a scan of :meth:`iter_objects`; a
        backend MAY override it with one query."""
        return sum(1 for m in self.iter_objects() if m.kind == kind and m.size < size_below)

    def object_stats(self) -> tuple[int, int, int]:
        """``(object count, sum of body sizes in bytes, sum of frame sizes in bytes)``."""
        n = size = stored = 0
        for m in self.iter_objects():
            n, size, stored = n + 1, size + max(m.size, 0), stored + max(m.frame_bytes, 0)
        return n, size, stored


class RefStore(abc.ABC):
    """Mutable names for commits, each move checked by compare-and-swap, and their append-only reflogs."""

    @abc.abstractmethod
    def get_ref(self, name: str) -> bytes | None:
        """The id a ref points at, or None."""

    @abc.abstractmethod
    def refs(self, prefix: str = "") -> dict[str, bytes]:
        """All refs whose name starts with ``prefix``, sorted by name."""

    @abc.abstractmethod
    def set_ref_if_equals(self, name: str, old: bytes | None, new: bytes | None) -> None:
        """Compare-and-swap: set ``name`` to ``new`` (None deletes) only if it is ``old`` (None: absent);
        atomic against every other writer of the store.

        Raises:
            RefConflict: the ref holds something else (:func:`ref_conflict`); nothing changed.
        """

    @abc.abstractmethod
    def reflog(self, ref: str) -> list[ReflogEntry]:
        """A ref's updates, oldest first."""

    @abc.abstractmethod
    def reflog_append(self, entry: ReflogEntry) -> None:
        """Append one record to a ref's reflog (records are never edited)."""

    @abc.abstractmethod
    def reflog_delete(self, ref: str) -> None:
        """Drop a ref's whole reflog (branch deletion, as git does)."""

    @abc.abstractmethod
    def get_symref(self, name: str) -> str | None:
        """The ref name symbolic ref ``name`` holds (``"HEAD"`` -> ``"refs/heads/main"``), or None when it was
        never set. Returned as stored: the store above validates it (crewckpt.history.head)."""

    @abc.abstractmethod
    def set_symref(self, name: str, target: str) -> None:
        """Point symbolic ref ``name`` at ref name ``target`` (which need not exist yet: an unborn branch).
        A plain overwrite: callers that must not lose a concurrent switch do it in a transaction."""


class CommitIndex(abc.ABC):
    """The commit index: a derived cache over commit objects plus local state (liveness, local order, the
    owning branch), foreign-id aliases and counters. Everything but liveness and local order can be rebuilt
    from the commit objects; liveness is rebuilt from what refs and reflogs reach."""

    @abc.abstractmethod
    def index_get(self, cid: bytes) -> IndexRow | None:
        """The live commit row, or None when the commit is not live (pruned or never written)."""

    @abc.abstractmethod
    def index_rows(self, branch: str | None = None) -> list[IndexRow]:
        """Live commits (of one branch, or all), ordered by (seq, time_ns, id)."""

    @abc.abstractmethod
    def index_add(self, row: IndexRow) -> None:
        """Make a commit live (idempotent: an existing row is kept as it is)."""

    @abc.abstractmethod
    def index_remove(self, ids: Iterable[bytes]) -> int:
        """Make commits not live; returns how many rows went."""

    @abc.abstractmethod
    def index_rebranch(self, old: str, new: str) -> None:
        """Rename the branch column of live rows (``ckpt branch -m``)."""

    @abc.abstractmethod
    def alias_get(self, alias: str) -> bytes | None:
        """The commit id an alias names, or None."""

    @abc.abstractmethod
    def alias_set(self, alias: str, cid: bytes) -> None:
        """Name a commit by a foreign id (first writer wins; setting an existing alias is a no-op)."""

    @abc.abstractmethod
    def alias_forget(self, cids: Iterable[bytes]) -> int:
        """Drop every alias naming one of ``cids`` (gc collected those commits); returns how many went."""

    @abc.abstractmethod
    def counter_next(self, name: str) -> int:
        """Atomically increment and return a named counter (starts at 1; never decreases; for ``seq`` never
        at or below the highest seq in the index)."""

    def index_children(self, cids: Iterable[bytes]) -> list[IndexRow]:
        """Live rows that name one of ``cids`` among their parents, ordered by (seq, time_ns, id). The store
        asks this only when a commit may come back into the index (a revival: see :meth:`index_renumber`).
        Default: a scan of :meth:`index_rows`; a backend SHOULD override it (one query, no row decoding for
        rows that do not match)."""
        want = set(cids)
        return [r for r in self.index_rows() if not want.isdisjoint(r.parents)]

    def index_renumber(self, seqs: Mapping[bytes, int]) -> int:
        """Give live rows a new local order in place: ``seqs`` maps commit id -> new seq, applied in the
        mapping's order (the store orders it so that a crash between two rows leaves every parent's seq below
        its children's); ids without a row are skipped. Returns how many rows changed. A row never stops
        being live meanwhile. The store calls it when a commit comes back live under live children (docs/
        backends.md, I6). Default: remove and re-add each row, which is atomic only inside a transaction:
        a backend without transactions MUST override it."""
        n = 0
        for cid, seq in seqs.items():
            row = self.index_get(cid)
            if row is None or row.seq == seq:
                continue
            self.index_remove([cid])
            self.index_add(dataclasses.replace(row, seq=seq))
            n += 1
        return n

    def index_last(self) -> bytes | None:
        """Id of the live commit with the highest seq (the last written), or None."""
        rows = self.index_rows()
        return rows[-1].id if rows else None

    def index_prefix(self, hex_prefix: str, limit: int = 20) -> list[bytes]:
        """Live commit ids whose hex form starts with ``hex_prefix`` (lowercase), sorted, at most ``limit``."""
        return sorted(r.id for r in self.index_rows() if r.id.hex().startswith(hex_prefix))[:limit]


class MetaStore(abc.ABC):
    """A few named strings: format_version, gc_epoch, dictionary, configuration."""

    @abc.abstractmethod
    def meta_get(self, key: str) -> str | None:
        """A metadata string, or None."""

    @abc.abstractmethod
    def meta_set(self, key: str, value: str) -> None:
        """Set a metadata string (read-your-writes: every later meta_get sees it)."""


class Parts(ObjectStore, RefStore, CommitIndex, MetaStore, abc.ABC):
    """All four parts: what a backend is, and what a transaction scope offers."""


class Txn(Parts, abc.ABC):
    """The parts inside ``with backend.transaction() as txn`` (backends with ``transactions``): reads see
    the transaction's own writes; everything lands atomically when the block exits normally."""

    def reframe(self, frames: Iterable[tuple[bytes, bytes]]) -> int:
        """See :meth:`Backend.reframe`."""
        raise NotImplementedError(f"{type(self).__name__} cannot reframe objects")

    def drop_packs(self, oids: Iterable[bytes], touched_before_ns: int) -> int:
        """Delete packs that no frame names any more (a writer's merge drops the packs it replaced, in the
        transaction that reframes their last members): :meth:`delete_objects` by default. A backend may
        skip here what guards objects a concurrent writer reuses (PostgreSQL: gc's exclusive lock), because
        no writer ever writes a frame naming an existing pack, only the new one it puts in the same
        transaction. Returns how many went."""
        return self.delete_objects(oids, touched_before_ns)


Reader = Parts
"""Former name of the read side (kept for callers typing a ``reader`` argument)."""


class Backend(Parts, abc.ABC):
    """A storage backend: the four parts, :attr:`capabilities`, and optional verbs that only some backends
    have (each guarded by a capability). Outside a transaction every verb is atomic on its own."""

    capabilities: Capabilities = Capabilities()

    def transaction(self) -> contextlib.AbstractContextManager[Txn]:
        """Exclusive, atomic write scope over every part (``capabilities.transactions``): all lands when the
        ``with`` block exits normally, nothing if it raises or the process dies; concurrent scopes are
        serialized (a busy store waits up to the backend's busy timeout, then raises StoreBusy)."""
        raise NotImplementedError(f"{type(self).__name__} has no transactions")

    def lock(self, name: str = "gc", wait_s: float = 0.0) -> contextlib.AbstractContextManager[bool]:
        """A named exclusive lock (``capabilities.locks``) held for the ``with`` block; waits up to ``wait_s``
        seconds, then yields False when another holder still has it. Dies with its holder."""
        raise NotImplementedError(f"{type(self).__name__} has no locks")

    def lock_holder(self, name: str = "gc") -> str | None:
        """Who holds lock ``name`` (one phrase for error messages), when the backend knows; default None."""
        return None

    def gc_lock(self, wait_s: float = 0.0) -> contextlib.AbstractContextManager[bool]:
        """``lock("gc", wait_s)``: held for a whole gc or repack."""
        return self.lock("gc", wait_s)

    def reframe(self, frames: Iterable[tuple[bytes, bytes]]) -> int:
        """Replace the frames of existing objects by equivalent ones ``(oid, frame)`` (same body: repacking;
        ``capabilities.reframe``); absent ids are skipped. Returns how many changed. Ids and times stay."""
        raise NotImplementedError(f"{type(self).__name__} cannot reframe objects")

    def maintain(self, compact: bool = False) -> None:
        """The maintenance hook gc calls after a sweep: give freed space back (SQLite: incremental vacuum and
        WAL checkpoint; ``compact``: rewrite densely). Default: nothing to do."""

    def release(self) -> None:
        """Give back what an idle handle holds between uses (the writer calls it at the end of a run, after
        :meth:`maintain`); the next call on the backend takes it again. Never loses or blocks anything.
        SQLite: closes its connection, so the last one in the store removes the ``-wal`` and ``-shm``
        files. Default: nothing."""

    def recovery_advice(self) -> str:
        """One clause telling a user whose store is damaged below crewckpt's rows how to get it back (fsck
        appends it to such a problem). Default: restore from a backup; backends with their own salvage tool
        name it."""
        return "restore the store from a backup"

    @abc.abstractmethod
    def close(self) -> None:
        """Release files and connections; the backend is unusable afterwards."""


class TransactionalBackend(Backend, abc.ABC):
    """A backend with transactions: each write verb called outside a transaction runs in one of its own
    (subclasses implement the verbs once, on their :class:`Txn`)."""

    capabilities = Capabilities(transactions=True)

    def put_many(self, objs: Iterable[StoredObject], now_ns: int) -> int:
        with self.transaction() as t:
            return t.put_many(objs, now_ns)

    def delete_objects(self, oids: Iterable[bytes], touched_before_ns: int) -> int:
        with self.transaction() as t:
            return t.delete_objects(oids, touched_before_ns)

    def set_ref_if_equals(self, name: str, old: bytes | None, new: bytes | None) -> None:
        with self.transaction() as t:
            t.set_ref_if_equals(name, old, new)

    def reflog_append(self, entry: ReflogEntry) -> None:
        with self.transaction() as t:
            t.reflog_append(entry)

    def reflog_delete(self, ref: str) -> None:
        with self.transaction() as t:
            t.reflog_delete(ref)

    def set_symref(self, name: str, target: str) -> None:
        with self.transaction() as t:
            t.set_symref(name, target)

    def index_add(self, row: IndexRow) -> None:
        with self.transaction() as t:
            t.index_add(row)

    def index_remove(self, ids: Iterable[bytes]) -> int:
        with self.transaction() as t:
            return t.index_remove(ids)

    def index_rebranch(self, old: str, new: str) -> None:
        with self.transaction() as t:
            t.index_rebranch(old, new)

    def index_renumber(self, seqs: Mapping[bytes, int]) -> int:
        with self.transaction() as t:
            return t.index_renumber(seqs)

    def alias_set(self, alias: str, cid: bytes) -> None:
        with self.transaction() as t:
            t.alias_set(alias, cid)

    def alias_forget(self, cids: Iterable[bytes]) -> int:
        with self.transaction() as t:
            return t.alias_forget(cids)

    def counter_next(self, name: str) -> int:
        with self.transaction() as t:
            return t.counter_next(name)

    def meta_set(self, key: str, value: str) -> None:
        with self.transaction() as t:
            t.meta_set(key, value)

    def reframe(self, frames: Iterable[tuple[bytes, bytes]]) -> int:
        with self.transaction() as t:
            return t.reframe(frames)


def writing(backend: Backend) -> contextlib.AbstractContextManager[Parts]:
    """The write scope callers use: one transaction when the backend has them, else the backend itself
    (each verb atomic on its own; callers then rely on the ordering invariants of docs/backends.md)."""
    if backend.capabilities.transactions:
        return backend.transaction()
    return contextlib.nullcontext(backend)

"""The backend contract: what every storage backend provides (modelled on dulwich's object store and refs
container, and restic's backend interface; invariants in objects_format.md, 'Invariants').

A backend stores five things:

* objects ``oid -> (kind, size, frame, touched_ns)``: immutable; ``put`` only inserts what is absent and
  freshens ``touched_ns`` of what is present (gc's grace rule needs it);
* refs ``name -> oid``: changed only by compare-and-swap (:meth:`Txn.set_ref_if_equals`); symbolic refs
  ``name -> ref name`` (``HEAD -> refs/heads/main``, as git's HEAD file) are plain values set and read as a whole;
* the reflog: an append-only list of ref updates per ref;
* the commit index: one row per *live* commit (a cache of the commit object plus liveness: prune removes
  rows; gc marks from rows and refs);
* aliases (foreign ids such as CrewAI checkpoint ids -> commit id), counters and metadata strings.

Contract:

1. Reads outside a transaction see only committed state.
2. :meth:`Backend.transaction` gives exclusive write access; everything done through the ``Txn`` lands
   atomically when the ``with`` block exits normally, and not at all if it raises (or the process dies).
3. Concurrent writers (threads or processes) are serialized; a busy store waits (it never surfaces
   "database is locked" to the caller) up to the backend's busy timeout, then raises ``StoreBusy``.
4. Backends never decode or verify frames: that is the object layer's job (crewckpt.history.objectdb).
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
from collections.abc import Iterable, Iterator, Sequence

from crewckpt.errors import CkptError


class StoreBusy(CkptError):
    """The store stayed locked by another writer for longer than the busy timeout."""


class StoreWriteError(CkptError):
    """The store cannot be written: the disk is full, the store is read-only, or an I/O error. The write
    was rolled back (nothing of it is stored; refs are unchanged)."""


@dataclasses.dataclass(frozen=True, slots=True)
class StoredObject:
    """One object at rest: 32-byte id, kind code, uncompressed body size (bytes), frame bytes."""

    oid: bytes
    kind: int
    size: int
    frame: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectMeta:
    """Listing form of an object: id, kind, body size (bytes), touched time (UTC ns), and ``head``: the first
    HEAD_BYTES bytes of its frame (enough to see a packed frame's pack id without reading the payload)."""

    oid: bytes
    kind: int
    size: int
    touched_ns: int
    head: bytes


HEAD_BYTES = 9


@dataclasses.dataclass(frozen=True, slots=True)
class IndexRow:
    """A live commit in the commit index (a cache of the commit object's fields plus liveness).

    id: 32-byte commit id; seq: per-branch sequence; time_ns: UTC ns; parents: raw ids; tree: raw id of the
    snapshot root; summary: msgpack-encoded :class:`crewckpt.format.objects.Summary`; meta_json: the
    commit's metadata JSON text.
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


class Reader(abc.ABC):
    """Read verbs, available on the backend and inside a transaction."""

    @abc.abstractmethod
    def get_many(self, oids: Iterable[bytes]) -> dict[bytes, StoredObject]:
        """Objects found among ``oids`` (absent ids are simply missing from the result). Any count of ids."""

    def get(self, oid: bytes) -> StoredObject | None:
        """One object or None."""
        return self.get_many([oid]).get(oid)

    @abc.abstractmethod
    def get_prefix(self, prefix: bytes, kind: int) -> list[StoredObject]:
        """Objects of ``kind`` whose id starts with ``prefix`` (packed frames name packs by an 8-byte
        prefix; callers verify which candidate is meant)."""

    @abc.abstractmethod
    def has_many(self, oids: Iterable[bytes]) -> set[bytes]:
        """The subset of ``oids`` present. Any count of ids."""

    @abc.abstractmethod
    def iter_objects(self) -> Iterator[ObjectMeta]:
        """Every object's :class:`ObjectMeta`, in no particular order."""

    @abc.abstractmethod
    def object_stats(self) -> tuple[int, int, int]:
        """``(object count, sum of body sizes in bytes, sum of frame sizes in bytes)``."""

    @abc.abstractmethod
    def get_ref(self, name: str) -> bytes | None:
        """The id a ref points at, or None."""

    @abc.abstractmethod
    def refs(self, prefix: str = "") -> dict[str, bytes]:
        """All refs whose name starts with ``prefix``."""

    @abc.abstractmethod
    def reflog(self, ref: str) -> list[ReflogEntry]:
        """A ref's updates, oldest first."""

    @abc.abstractmethod
    def get_symref(self, name: str) -> str | None:
        """The ref name a symbolic ref holds (``"HEAD"`` -> ``"refs/heads/main"``), or None when it was never
        set. The value is returned as stored: the store above validates it."""

    @abc.abstractmethod
    def index_get(self, cid: bytes) -> IndexRow | None:
        """The live commit row, or None when the commit is not live (pruned or never written)."""

    @abc.abstractmethod
    def index_rows(self, branch: str | None = None) -> list[IndexRow]:
        """Live commits (of one branch, or all), ordered by (seq, time_ns, id)."""

    @abc.abstractmethod
    def index_last(self) -> bytes | None:
        """Id of the live commit with the highest seq (the last written), or None; one indexed lookup."""

    @abc.abstractmethod
    def index_prefix(self, hex_prefix: str, limit: int = 20) -> list[bytes]:
        """Live commit ids whose hex form starts with ``hex_prefix`` (lowercase), at most ``limit``."""

    @abc.abstractmethod
    def alias_get(self, alias: str) -> bytes | None:
        """The commit id an alias names, or None."""

    @abc.abstractmethod
    def meta_get(self, key: str) -> str | None:
        """A metadata string (format_version, gc_epoch, dictionary, ...), or None."""


class Txn(Reader):
    """Write verbs; only valid inside ``with backend.transaction() as txn``."""

    @abc.abstractmethod
    def put_many(self, objs: Iterable[StoredObject], now_ns: int) -> int:
        """Insert absent objects; set ``touched_ns = now_ns`` on present ones. Returns how many were new."""

    @abc.abstractmethod
    def reframe(self, frames: Iterable[tuple[bytes, bytes]]) -> int:
        """Replace the frames of existing objects by equivalent ones ``(oid, frame)`` (same body: repacking);
        absent ids are skipped. Returns how many changed. Ids and touched times stay."""

    @abc.abstractmethod
    def touch(self, oids: Sequence[bytes], now_ns: int) -> set[bytes]:
        """Freshen ``touched_ns`` of existing objects; returns the ids that were NOT present."""

    @abc.abstractmethod
    def delete_objects(self, oids: Iterable[bytes], touched_before_ns: int) -> int:
        """Delete those of ``oids`` whose touched time is older than ``touched_before_ns``; returns count.

        The re-check of the touched time happens inside the transaction: gc's guard against a writer that
        reused an object after gc marked it (objects_format.md, 'gc')."""

    @abc.abstractmethod
    def set_ref_if_equals(self, name: str, old: bytes | None, new: bytes | None) -> None:
        """Compare-and-swap: set ``name`` to ``new`` (None deletes) only if it is ``old`` (None: absent).

        Raises:
            RefConflict: the ref holds something else.
        """

    @abc.abstractmethod
    def set_symref(self, name: str, target: str) -> None:
        """Point symbolic ref ``name`` at ref name ``target`` (the target need not exist yet: an unborn branch).
        Atomic with the rest of the transaction; its moves are logged by the caller with :meth:`reflog_append`
        under ``name`` (HEAD's own reflog)."""

    @abc.abstractmethod
    def reflog_append(self, entry: ReflogEntry) -> None:
        """Append one record to a ref's reflog."""

    @abc.abstractmethod
    def reflog_delete(self, ref: str) -> None:
        """Drop a ref's reflog (branch deletion, as git does)."""

    @abc.abstractmethod
    def index_add(self, row: IndexRow) -> None:
        """Make a commit live (idempotent)."""

    @abc.abstractmethod
    def index_remove(self, ids: Iterable[bytes]) -> int:
        """Make commits not live; returns how many rows went."""

    @abc.abstractmethod
    def index_rebranch(self, old: str, new: str) -> None:
        """Rename the branch column of live rows (``ckpt branch -m``)."""

    @abc.abstractmethod
    def alias_set(self, alias: str, cid: bytes) -> None:
        """Name a commit by a foreign id (first writer wins; setting an existing alias is a no-op)."""

    @abc.abstractmethod
    def alias_forget(self, cids: Iterable[bytes]) -> int:
        """Drop every alias naming one of ``cids`` (gc collected those commits); returns how many went."""

    @abc.abstractmethod
    def counter_next(self, name: str) -> int:
        """Increment and return a named counter (starts at 1; never decreases, survives branch deletion)."""

    @abc.abstractmethod
    def meta_set(self, key: str, value: str) -> None:
        """Set a metadata string."""


class Backend(Reader):
    """A storage backend: read verbs plus :meth:`transaction`; see the module docstring for the contract."""

    @abc.abstractmethod
    def transaction(self) -> contextlib.AbstractContextManager[Txn]:
        """Exclusive, atomic write scope (contract points 2 and 3)."""

    @abc.abstractmethod
    def gc_lock(self, wait_s: float = 0.0) -> contextlib.AbstractContextManager[bool]:
        """Lock held for a whole gc or repack; waits up to ``wait_s`` seconds, then yields False when another
        holder still has it. Dies with its process (no stale lock files)."""

    @abc.abstractmethod
    def reclaim(self, compact: bool = False) -> None:
        """Give freed space back to the operating system (SQLite: incremental vacuum + WAL checkpoint);
        ``compact`` also rewrites the file densely (SQLite VACUUM: time proportional to the store)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release files and connections; the backend is unusable afterwards."""

"""The Store: a crewckpt store folder and the Python API over it (commit, read, refs, revisions, history,
retention and maintenance).

A store is named by a location (crewckpt.backends.registry): a folder (default ``./.ckpt``, the SQLite
backend), ``memory:NAME``, or a backend's URL. ``Store.open`` finds it from an explicit location,
``$CKPT_STORE``, or by walking up from the working directory for ``.ckpt`` like git.
"""

from __future__ import annotations

import builtins  # Store.list shadows the builtin inside the class body
import collections
import contextlib
import dataclasses
import difflib
import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec

from crewckpt.backends import registry
from crewckpt.backends.base import Backend, IndexRow, Parts, ReflogEntry, StoredObject, writing
from crewckpt.backends.registry import ENV_VAR
from crewckpt.backends.sqlite import DEFAULT_DIR
from crewckpt.errors import (
    AmbiguousRevision,
    BadRefName,
    BranchExists,
    BranchInUse,
    BranchNotMerged,
    CkptError,
    DecodeError,
    FormatVersionError,
    IntegrityError,
    MissingObject,
    RefConflict,
    StoreBusy,
    StoreNotFound,
    SyncError,
    UnknownRevision,
)
from crewckpt.format import objects as ob
from crewckpt.history import head, refnames, revisions
from crewckpt.history.commits import (
    REBUILD,
    CommitInfo,
    PrunedCommit,
    branch_ok,
    check_commit_fields,
    damaged_row,
    distinct_parents,
    from_commit,
    from_row,
    meta_json,
    raise_version,
    row_differences,
    row_matches,
    to_row,
)
from crewckpt.history.gc import MERGE_LEVEL, RUN_MERGE_BYTES
from crewckpt.history.limits import ReadBudget
from crewckpt.history.localorder import index_commit
from crewckpt.history.objectdb import ObjectDB, decode_commit
from crewckpt.history.profile import GENERIC, Profile
from crewckpt.history.snapshot import CACHE_BYTES, Splitter, assemble

if TYPE_CHECKING:  # maintenance modules load on first use: the read path stays quick to import
    from crewckpt.history.fsck import FsckReport
    from crewckpt.history.gc import GcReport, Progress
    from crewckpt.history.parts import StoreParts
    from crewckpt.history.prune import PruneReport
    from crewckpt.history.reindex import RebuildReport
    from crewckpt.history.remotes import SyncReport

_log = logging.getLogger("crewckpt")
__all__ = ["DEFAULT_DIR", "ENV_VAR", "Store", "find_store"]
_EPOCH = "gc_epoch"
AUTO_PACKS = 32  # per-checkpoint packs a writer merges into one (git's gc.autoPackLimit is 50)
CHECKPOINT_LEVEL = 1  # zstd level of a checkpoint's own pack: as small as level 3 here, ~3x less CPU cold
_COMMIT_CACHE = 4096  # verified commit objects a handle keeps (~200 bytes each)
MERGE_MEMORY = 16 << 20  # bytes of its unmerged packs' bodies a writer keeps for its next merge
LOOSE_MIN = 1 << 20  # bytes: bodies larger than this are stored loose, not packed
KNOWN_IDS = 200_000  # object ids a writer remembers having written (~100 bytes each: ~20 MB); then it forgets


@dataclasses.dataclass(frozen=True)
class _Start:
    """Where a new branch starts (Store._start): ``cid``; for a commit no index row lists, also what the ref's
    transaction puts again (``frames``, children first) and indexes (``commit`` and its ``summary``)."""

    cid: bytes
    frames: builtins.list[StoredObject] = dataclasses.field(default_factory=builtins.list)
    commit: ob.Commit | None = None
    summary: dict[str, Any] | None = None


class _Unlisted(Exception):
    """Store._create_ref: the start commit, listed when Store._start looked, was pruned before the ref's
    transaction (another process); the caller starts again."""


def _pruned_meanwhile(rev: str) -> UnknownRevision:
    return UnknownRevision(f"revision {rev[:80]!r}: its checkpoint was pruned again each time the branch was about to "
                           f"start there (another process is pruning); nothing was changed: run the command again")


_P = ParamSpec("_P")


def _replayed(land: Callable[Concatenate[Store, _P], bytes]) -> Callable[Concatenate[Store, _P], bytes]:
    """``land`` (Store._land_once), again when its transaction was aborted and replayed against a store that
    changed meanwhile (PostgreSQL after a lost connection, a deadlock or a serialization failure:
    RefConflict, "nothing of it was written"): the checkpoint is made anew on the tip it then reads, up to
    _REPLAYS times, only where the backend has transactions. Found by the PostgreSQL contract's 4 processes
    committing to one branch (one CI run in about ten)."""
    @functools.wraps(land)
    def again(self: Store, *args: _P.args, **kw: _P.kwargs) -> bytes:
        for n in range(_REPLAYS):
            try:
                return land(self, *args, **kw)
            except RefConflict:
                if not self.backend.capabilities.transactions or n + 1 == _REPLAYS:
                    raise
        raise AssertionError("unreachable")
    return again


class Store:
    """A crewckpt store. Thread-safe for one process; many processes may share one store folder.

    Construct with :meth:`init`, :meth:`open` or :meth:`memory`; close with :meth:`close` or ``with``.
    """

    def __init__(self, backend: Backend, path: Path | None = None, *, profile: Profile = GENERIC,
                 location: str | None = None) -> None:
        """Wrap an open backend. ``path``: its store folder (local stores); ``location``: its canonical
        location (:func:`crewckpt.backends.registry.identity`), default the identity of ``path``; None for a
        store that cannot be reopened by location (anonymous memory)."""
        self.backend = backend
        self.path = path
        self.location = location if location is not None or path is None else registry.identity(path)
        self.profile = profile
        """What the documents mean to this store: summarizer and split hints (:mod:`crewckpt.history.profile`)."""
        self.objects = ObjectDB(backend)
        self._splitters: dict[tuple[frozenset[str], int | None], Splitter] = {}  # one per split policy + bound
        self._known: set[bytes] = set()  # ids this handle wrote: not framed again (at most KNOWN_IDS)
        self._epoch = backend.meta_get(_EPOCH) or "0"
        self._wlock = threading.Lock()
        self._my_packs: builtins.list[tuple[bytes, builtins.list[bytes]]] = []  # merged every AUTO_PACKS
        self._wrote = False  # committed since the last finish_writes()
        self._last_pack: tuple[bytes, builtins.list[bytes]] | None = None
        # the bodies of _my_packs' members (this writer made them and hashed them to their ids), so its merge
        # need not read and decompress them back; at most MERGE_MEMORY bytes, else the merge reads the rest
        self._pack_bodies: dict[bytes, tuple[int, bytes]] = {}
        self._pack_bytes = 0
        self._my_bytes = 0  # body bytes of _my_packs
        # (pack id, members, body bytes) of the packs this handle's merges made since finish_writes, while they
        # hold at most RUN_MERGE_BYTES (then []): finish_writes merges them with _my_packs into one pack
        self._run_packs: builtins.list[tuple[bytes, builtins.list[bytes], int]] = []
        self._run_bytes = 0
        self._last_bodies: builtins.list[tuple[bytes, int, bytes]] = []
        self._last_commit: StoredObject | None = None  # the commit object _land wrote last
        self._commit_cache: dict[bytes, ob.Commit] = {}  # verified commit objects (immutable: ids hash them)
        self._disagreeing: set[bytes] = set()  # commits whose index row was found to disagree (warned once)
        self._check_version()
        dict_id = backend.meta_get("dictionary")
        if dict_id:
            try:  # only new writes use it (frames name their own dictionary): a damaged row must not block opening
                oid = bytes.fromhex(dict_id)
                self.objects.codec.use_dictionary(oid, self.objects.get(oid)[1])
            except (ValueError, TypeError, CkptError) as e:
                _log.warning("crewckpt: %s: ignoring the store's zstd dictionary (meta row %r: %s); new "
                             "checkpoints are written without it", path or "memory store", str(dict_id)[:80], e)
        if not backend.capabilities.transactions:
            self._heal_index()

    def _heal_index(self) -> None:
        """Without transactions a writer that died after its ref CAS and before its index row (W5 in
        docs/backends.md) left a branch tip the index does not know: rebuild the index then (best effort). A
        transfer killed there (sync indexes with the ref move) leaves the same, on a branch or a
        remote-tracking ref. Only the missing rows are added (reindex.index_missing): other writers may be
        active, and one still between its CAS and its row is not disturbed (a full rebuild would renumber
        under it)."""
        try:
            tips: dict[bytes, str] = {}
            for prefix in (refnames.HEADS, refnames.REMOTES):
                for ref, t in self.backend.refs(prefix).items():
                    tips.setdefault(t, ref[len(prefix):])
            unknown = {t: b for t, b in tips.items() if self.backend.index_get(t) is None}
            if unknown and self.backend.has_many(unknown):
                from crewckpt.history.reindex import index_missing
                index_missing(self.parts, unknown)
        except CkptError as e:
            _log.warning("crewckpt: %s: the commit index misses a branch tip and could not be rebuilt (%s); run "
                         "`ckpt fsck --rebuild-index`", self.location or "store", e)

    # -- opening ---------------------------------------------------------------------------------------------

    @classmethod
    def init(cls, location: str | os.PathLike[str] = DEFAULT_DIR, *, private: bool = True,
             profile: Profile = GENERIC) -> Store:
        """Create a store at ``location`` and open it (``profile``: see :attr:`profile`).

        ``location``: a folder path or ``sqlite:PATH`` (the default ``./.ckpt``), ``memory:NAME``, or a URL of
        an installed backend (``postgresql://...``); see :mod:`crewckpt.backends.registry`.
        ``private`` (default): a folder created here is 0700 and the store's files 0600, since checkpoints
        hold prompts, outputs and inputs; ``private=False`` honours the umask instead (a shared store).
        An existing folder keeps its permissions.

        Raises:
            StoreExists: ``location`` already holds a store. CkptError: ``location`` is a file or not writable.
            BadLocation: an unknown scheme. BackendMissing: its backend is not installed (names the extra).
        """
        opened = registry.create_backend(location, _new_meta(), private=private)
        return cls(opened.backend, opened.folder, profile=profile, location=opened.location)

    @classmethod
    def open(cls, location: str | os.PathLike[str] | None = None, *, create: bool = False,
             profile: Profile = GENERIC) -> Store:
        """Open an existing store: ``location`` (any form :meth:`init` takes), else ``$CKPT_STORE``, else the
        nearest ``.ckpt`` folder walking up from the working directory. Never creates or repairs anything,
        unless ``create``: then a missing store is created (private, as :meth:`init` does). ``profile``: see
        :attr:`profile` (the CrewAI layer passes :data:`crewckpt.views.document.CREWAI`).

        Raises:
            StoreNotFound, CorruptStore, FormatVersionError (one-line messages naming the location).
            BadLocation, BackendMissing: the location names no installed backend.
        """
        opened = registry.open_backend(location, create=create, meta=_new_meta())
        return cls(opened.backend, opened.folder, profile=profile, location=opened.location)

    @classmethod
    def memory(cls, *, profile: Profile = GENERIC) -> Store:
        """A new anonymous store held in memory (tests, scratch work); ``Store.init("memory:NAME")`` makes one
        that ``Store.open("memory:NAME")`` finds again in this process."""
        return cls.open("memory:", profile=profile)

    def _check_version(self) -> None:
        v = self.backend.meta_get("format_version")
        where = self.location or "memory store"
        if v is None:
            raise FormatVersionError(f"{where}: no format version recorded; this is not a crewckpt store")
        if not (v.isascii() and v.isdigit()):  # e.g. 'x', '', '²': a damaged meta row, not another format
            db = getattr(self.backend, "path", None)  # SQLite: its database file
            fix = (f"sqlite3 {db} \"UPDATE meta SET value='{ob.FORMAT_VERSION}' "
                   f"WHERE key='format_version'\"" if db is not None else
                   f"set the meta row format_version back to {ob.FORMAT_VERSION}")
            raise FormatVersionError(f"{where}: the recorded format version {v[:40]!r} is unreadable (a damaged "
                                     f"meta row: a version is a whole number); if crewckpt wrote this store, "
                                     f"mend it with {fix}, then run `ckpt fsck`")
        if int(v) > ob.FORMAT_VERSION:
            raise FormatVersionError(f"{where}: store format version {v} is newer than this crewckpt "
                                     f"understands ({ob.FORMAT_VERSION}); upgrade crewckpt")
        # an older store opens as is; its first commit that needs more (format 2: any new commit; 3: a document
        # whose profile needs it) records that version in the commit's transaction (objects_format.md 10)
        self._version = int(v)

    def close(self) -> None:
        """Close the backend; a handle that committed first finishes its writes (:meth:`finish_writes`)."""
        if self._wrote:
            self.finish_writes()
        self.backend.close()

    def finish_writes(self) -> None:
        """Compact what this handle wrote, at the end of a run (the CrewAI writer calls it when a crew or flow
        run ends) and at close: its per-checkpoint packs not merged yet become one pack (with the packs its
        earlier merges made, at gc's zstd level, when they hold at most RUN_MERGE_BYTES of bodies: a short
        run ends with one pack), the backend gives space back (SQLite: incremental vacuum, a small store's
        VACUUM when no other writer is in it, WAL checkpointed and truncated to zero bytes), then releases
        what an idle handle holds (SQLite: its connection, so the -wal and -shm files go; the next call
        reopens). Best effort and short: other writers are not blocked (packs merge under the gc lock only
        writers' own repacks take, each in its own small transaction); a failure only logs."""
        with self._wlock:
            if self._my_packs or len(self._run_packs) > 1:
                self._auto_repack(final=True)
            self._run_packs, self._run_bytes = [], 0
            self._wrote = False
        try:
            self.backend.maintain()
            self.backend.release()
        except CkptError as e:
            _log.warning("crewckpt: compacting the store after writing skipped: %s", e)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------------------------

    def commit(self, doc: Any, *, branch: str | None = None, parents: Sequence[str] | None = None,
               meta: dict[str, Any] | None = None, run_id: str | None = None, trigger: str | None = None,
               time_ns: int | None = None, alias: str | None = None, profile: Profile | None = None) -> str:
        """Store ``doc`` as a new commit on ``branch`` in one backend transaction; returns its 64-hex id.

        Args:
            doc: any JSON value (dict key order kept).
            branch: branch whose ref moves to the new commit (validated before anything is written). None
                (the default) = the current branch, the one HEAD names, read in the same transaction (as
                ``git commit``; :meth:`current_branch`). When that branch is unborn (a fresh store's
                ``main``) the commit creates it. There is no detached HEAD (HEAD always names a branch), so
                None never means "no branch"; a damaged stored HEAD is read as the branch of the last
                commit written, else ``main``, with one warning, and replaced by it. An explicit branch
                moves that branch only; HEAD stays where it is (writers never switch it).
            parents: revisions of the parents; None = the branch's current tip (none if the branch is new);
                ``[]`` = a root commit. A commit named twice (by any names) is listed once, where it came first,
                with a warning "duplicate parent X ignored" (as git's commit-tree).
            meta: JSON-serialisable metadata kept in the commit.
            run_id: the writer/lineage id; a ref ``refs/runs/<run_id>`` follows the run's last commit.
                Default: a new id per Store object.
            trigger: the CrewAI event type that caused the checkpoint, if any.
            time_ns: UTC wall time in ns (default now; imports pass the original time).
            alias: a foreign id for this commit (a CrewAI checkpoint id).
            profile: summarizer and split hints for this document (default: the store's :attr:`profile`).
        Raises:
            BadRefName: bad branch or run id. UnknownRevision: a parent does not resolve. TypeError: not JSON.
            ValueError: NaN or Infinity (JSON has neither), in ``doc`` or ``meta``.
            TypeError / ValueError: a field of another type or range (:func:`check_commit_fields`; ``parents``
                not a list of strings, ``profile`` not a Profile), before anything is written.
            TypeError: also ``meta`` not a dict, or not JSON (:func:`crewckpt.history.commits.meta_json`).
            StoreBusy: the store stayed locked. CkptError subclasses for damaged stores.
        """
        check_commit_fields(time_ns=time_ns, run_id=run_id, trigger=trigger, alias=alias)
        if profile is not None and not isinstance(profile, Profile):
            raise TypeError(f"profile must be a crewckpt Profile (e.g. crewckpt.views.document.CREWAI), got "
                            f"{type(profile).__name__}")
        if parents is not None:  # read once into a list: a generator is not consumed by the check
            given = None if isinstance(parents, (str, bytes, dict)) else _as_list(parents)
            if given is None or not all(isinstance(p, str) for p in given):
                raise TypeError("parents must be a list of revisions (strings), e.g. parents=[c1] or [] for a root "
                                "commit")
            parents = given
        ref = None if branch is None else refnames.branch_ref(branch)  # None: HEAD's, read in _land
        run = run_id or self._default_run
        rref = refnames.run_ref(run)
        parent_ids = None
        if parents is not None:
            parent_ids, repeats = distinct_parents([bytes.fromhex(self.resolve(p)) for p in parents])
            for p in repeats:  # git's commit-tree: "duplicate parent X ignored"
                _log.warning("crewckpt: duplicate parent %s ignored", p.hex())
        meta_text = meta_json(meta)
        prof = self.profile if profile is None else profile
        summary: dict[str, Any] | None = None
        version = max(ob.COMMIT_FORMAT, prof.store_version(doc))
        with self._wlock:
            policy = (prof.separate_keys, prof.cache_bytes)
            splitter = self._splitters.get(policy)
            if splitter is None:
                splitter = self._splitters[policy] = Splitter(
                    CACHE_BYTES if prof.cache_bytes is None else prof.cache_bytes, separate_keys=prof.separate_keys)
            for attempt in range(2):
                pending: dict[bytes, tuple[int, bytes]] = {}

                def put(kind: int, body: bytes, pending: dict[bytes, tuple[int, bytes]] = pending) -> bytes:
                    oid = ob.object_id(kind, body)
                    if oid not in self._known:
                        pending[oid] = (kind, body)
                    return oid

                root = splitter.split(doc, put)
                frames = self._frames(pending)
                try:
                    if summary is None:  # after the split, which refused values no JSON tool can hold
                        summary = _summary(prof, doc)
                    cid = self._land(frames, root, ref, rref, run, parent_ids, trigger, summary,
                                     meta_text, alias, time_ns, full=attempt == 1, version=version)
                except _EpochChanged:
                    for s in self._splitters.values():  # every cache may name objects that gc removed
                        s.reset()
                    self._known.clear()
                    continue
                except BaseException:
                    splitter.discard()
                    raise
                splitter.keep()
                if len(self._known) > KNOWN_IDS:
                    self._known.clear()
                self._known.update(pending)
                self._wrote = True
                if self._last_pack is not None:
                    self._my_packs.append(self._last_pack)
                    self._my_bytes += sum(len(b) for _, _, b in self._last_bodies)
                    for oid, kind, body in self._last_bodies:
                        if self._pack_bytes + len(body) <= MERGE_MEMORY:
                            self._pack_bodies[oid] = (kind, body)
                            self._pack_bytes += len(body)
                    if len(self._my_packs) >= min(AUTO_PACKS, getattr(self.backend, "merge_packs_every",
                                                                        AUTO_PACKS)):
                        self._auto_repack()
                if not self.backend.capabilities.transactions:
                    self._repair_after_gc(doc, root, splitter)
                return cid.hex()
        raise AssertionError("unreachable: the second attempt re-puts everything and cannot race gc")

    def _repair_after_gc(self, doc: Any, root: ob.Link, splitter: Splitter) -> None:
        """Without transactions, a gc may have swept objects this checkpoint reused from the writer's caches
        between its epoch check and its ref CAS (docs/backends.md, G4). When the gc epoch moved since this
        writer last saw it, put every object of the document and the commit object again (put-if-absent
        restores what went; a fresh stored time keeps the rest from the running sweep) before acknowledging."""
        epoch = self.backend.meta_get(_EPOCH) or "0"
        if epoch == self._epoch:
            return
        self._epoch = epoch
        for sp in self._splitters.values():  # every cache may name objects that gc removed
            sp.reset()
        self._known.clear()
        pending: dict[bytes, tuple[int, bytes]] = {}

        def put(kind: int, body: bytes) -> bytes:
            oid = ob.object_id(kind, body)
            pending[oid] = (kind, body)
            return oid

        again = splitter.split(doc, put)
        splitter.keep()
        again_objs = self._frames(pending) + ([self._last_commit] if self._last_commit is not None else [])
        self.backend.put_many(again_objs, time.time_ns())
        self._last_pack = None
        self._known.update(pending)
        if again != root:
            raise IntegrityError(root.oid.hex(), "the document split differently when it was put again after a "
                                                 "concurrent gc; run `ckpt fsck` on this checkpoint")

    def _auto_repack(self, final: bool = False) -> None:
        """Merge this writer's per-checkpoint packs every AUTO_PACKS checkpoints (best effort: a failure only
        logs; a running gc postpones it). ``final`` (run end): also the packs earlier merges made, into one
        pack at gc's level, when all of them hold at most RUN_MERGE_BYTES of bodies (reading those back
        costs a few ms; one pack compresses a short run's versions against each other)."""
        from crewckpt.format.frame import PACK_LEVEL
        from crewckpt.history.gc import merge_packs
        packs, level = self._my_packs, MERGE_LEVEL
        whole = final and bool(self._run_packs) and self._run_bytes + self._my_bytes <= RUN_MERGE_BYTES
        if whole:
            packs, level = [(p, m) for p, m, _ in self._run_packs] + self._my_packs, PACK_LEVEL
        made: builtins.list[tuple[bytes, builtins.list[bytes], int]] = []
        try:
            if merge_packs(self.parts, packs, level=level, bodies=self._pack_bodies, made=made):
                if whole:
                    self._run_packs, self._run_bytes = [], 0
                self._run_bytes += sum(n for _, _, n in made)
                self._run_packs += made
                if self._run_bytes > RUN_MERGE_BYTES:  # too big to merge whole at the end: stop tracking
                    self._run_packs = []
                self._my_packs = []
                self._pack_bodies = {}
                self._pack_bytes = self._my_bytes = 0
        except CkptError as e:
            _log.warning("crewckpt: automatic repack skipped: %s", e)

    def _frames(self, pending: dict[bytes, tuple[int, bytes]]) -> list[Any]:
        """A checkpoint's new objects go into one pack; big blobs stay loose (objects_format.md, 'Packs')."""
        small = [(o, k, b) for o, (k, b) in pending.items() if len(b) <= LOOSE_MIN]
        self._last_bodies = []
        big = [self.objects.frame(k, b) for o, (k, b) in pending.items() if len(b) > LOOSE_MIN]
        self._last_pack = None
        if len(small) < 2:
            return big + [self.objects.frame(k, b) for _, k, b in small]
        packed = self.objects.pack(small, level=CHECKPOINT_LEVEL)
        self._last_pack = (packed[0].oid, [o for o, _, _ in small])
        self._last_bodies = small
        return big + packed

    def lookup_alias(self, alias: str) -> str | None:
        """The 64-hex commit id a foreign id (CrewAI checkpoint id) names, or None. No revision parsing."""
        a = self.backend.alias_get(alias)
        if a is None or (self.backend.index_get(a) is None and not self.backend.has_many([a])):
            return None  # the commit was collected (gc also drops such aliases)
        self._check_alias(alias, a)
        return a.hex()

    def _check_alias(self, alias: str, cid: bytes) -> None:
        """The alias table is an unhashed cache: an alias names only a commit whose object carries that alias
        (every writer sets it from the object). Raises UnknownRevision naming both and the fix otherwise; a
        collected commit is left to the caller (resolve says "pruned and collected")."""
        try:
            c = (self._commit_object(cid) if self.backend.index_get(cid) is not None
                 else self.objects.commit(cid))
        except MissingObject:
            return
        if c.alias != alias:
            raise UnknownRevision(f"checkpoint id {alias[:80]!r}: the alias table names commit {cid.hex()}, whose "
                                  f"commit object has alias {str(c.alias)[:80]!r}: the alias table is damaged; "
                                  f"{REBUILD}")

    @property
    def _default_run(self) -> str:
        run = getattr(self, "_run", None)
        if run is None:
            run = self._run = refnames.ANONYMOUS_RUN + uuid.uuid4().hex[:12]
        return run

    @property
    def parts(self) -> StoreParts:
        """The parts maintenance works on (gc, fsck, the index rebuild): objects, refs, index, meta, backend."""
        from crewckpt.history.parts import StoreParts
        return StoreParts(self.objects, self.backend, self.backend, self.backend, self.backend,
                          lambda: self.stats()["file_bytes"], self.profile.summary)

    def _writing(self) -> contextlib.AbstractContextManager[Parts]:
        """One transaction when the backend has them, else the backend's own atomic verbs (callers keep the
        ordering invariants of docs/backends.md)."""
        return writing(self.backend)

    def _land_once(self, frames: list[Any], root: ob.Link, ref: str | None, rref: str, run: str,
                   parent_ids: list[bytes] | None, trigger: str | None, summary: dict[str, Any],
                   meta_json: str | None, alias: str | None, time_ns: int | None, full: bool,
                   version: int = ob.COMMIT_FORMAT) -> bytes:
        """One checkpoint: one transaction where the backend has them. ``full``: every referenced object is
        in ``frames`` (caches were just dropped), so it is safe whatever gc does meanwhile: all get
        ``touched = now``. ``ref`` None: the branch HEAD names, read in this transaction (so a concurrent
        `ckpt switch` is wholly before or after it).

        The steps are in the order that keeps a checkpoint durable without a transaction (docs/backends.md,
        'Write order'): objects, then the commit object, then the branch ref by compare-and-swap (retried on
        a moved tip when the parent is the tip), then reflog and run ref, then the commit index. ``version``:
        the store format version the commit needs; a store recording less is raised to it first."""
        with self._writing() as txn:
            now = time.time_ns()  # read inside the transaction, i.e. after any gc epoch bump it could miss
            epoch = txn.meta_get(_EPOCH) or "0"
            if epoch != self._epoch:
                self._epoch = epoch
                if not full:
                    raise _EpochChanged
            if version > self._version:  # nothing is rewritten: the version only tells older readers to refuse
                raise_version(txn, version)
            txn.put_many_uncounted(frames, now)
            head_ref = head.head_ref_stored(txn)  # read once: the branch by default, and whether HEAD follows
            ref = head_ref if ref is None else ref
            branch = head.branch_of(ref)
            for attempt in range(_CAS_RETRIES):
                tip = txn.get_ref(ref)
                parents = parent_ids if parent_ids is not None else ([tip] if tip else [])
                c = ob.Commit(root, tuple(parents), now if time_ns is None else time_ns, run, trigger, meta_json,
                              alias)
                cobj = self.objects.frame(ob.COMMIT, c.encode())
                fresh = txn.put_many([cobj], now) > 0  # counted: index_commit needs to know
                # local order is taken before the CAS: a child built on the moved tip gets a higher seq (W3)
                seq = txn.counter_next("seq")
                try:
                    txn.set_ref_if_equals(ref, tip, cobj.oid)
                    break
                except RefConflict:  # only without transactions: another writer moved the branch meanwhile
                    if attempt + 1 == _CAS_RETRIES:
                        raise
            message = f"commit: {trigger or 'manual'}"
            txn.reflog_append(ReflogEntry(ref, tip, cobj.oid, now, message))
            head.follow(txn, ref, tip, cobj.oid, now, message, head_ref=head_ref)
            _follow(txn, rref, cobj.oid)
            # local order: the commit index's, never the commit's. The same id can come back (format 2 ids hold
            # no seq) under children that stayed live: only a given time or an object already there allows it
            index_commit(txn, cobj.oid, lambda seq: to_row(cobj.oid, c, branch, seq, summary),
                         may_revive=time_ns is not None or not fresh, seq=seq)
            if alias:
                txn.alias_set(alias, cobj.oid)
        self._version = max(self._version, version)
        self._last_commit = cobj
        return cobj.oid

    # -- reading ---------------------------------------------------------------------------------------------


    _land = _replayed(_land_once)

    def read(self, rev: str, *, max_bytes: int | None = None, max_nodes: int | None = None) -> Any:
        """The exact JSON value stored by a commit.

        Reads are bounded (crewckpt.history.limits): at most ``max_bytes`` bytes decompressed plus expanded
        strings and ``max_nodes`` JSON values (defaults: ``$CKPT_MAX_READ_BYTES`` / ``$CKPT_MAX_READ_NODES``,
        else 512 MiB and 5,000,000), nesting at most 255 deep; checked before the document is built.

        Raises:
            UnknownRevision, AmbiguousRevision, MissingObject, IntegrityError. DocumentTooLarge: over a limit.
        """
        cid = self.resolve(rev)
        tree = self.objects.commit(bytes.fromhex(cid)).tree  # the object is authoritative
        budget = ReadBudget(max_bytes, max_nodes, what=f"checkpoint {cid[:12]}")
        return assemble(tree, lambda ids: self.objects.trees(ids, budget=budget),
                        lambda ids: self.objects.blobs(ids, budget=budget), budget)

    def info(self, rev: str) -> CommitInfo:
        """Metadata of one commit. The commit object's own fields (parents, tree, time, run id, trigger, meta,
        alias) come from the verified commit object, whatever its commit-index row says: they are what resume,
        fork and diff act on; the index adds only its local fields (seq, branch, listing summary). A
        pruned-but-present commit comes from its object alone. A row that disagrees with its object is logged
        once (``ckpt fsck`` names it; ``ckpt fsck --rebuild-index`` repairs it).

        Raises:
            UnknownRevision, AmbiguousRevision (see :meth:`resolve`), MissingObject for an unindexed commit
            whose object is gone.
        """
        if len(rev) == 64 and revisions.is_hex(rev):  # a full id with a row: that row, read once
            row = self.backend.index_get(bytes.fromhex(rev))
            if row is not None:
                return self._checked_info(row)
        return self._info(bytes.fromhex(self.resolve(rev)))

    def _info(self, cid: bytes) -> CommitInfo:
        row = self.backend.index_get(cid)
        if row is not None:
            return self._checked_info(row)
        return from_commit(cid, self.objects.commit(cid), live=False)  # not cached: gc may collect it

    def _commit_object(self, cid: bytes) -> ob.Commit:
        """The verified commit object ``cid`` (one small read; cached: a commit id hashes its body, so a
        verified commit never changes; the commit this handle wrote last needs no read at all). For live
        (indexed) commits only: an unindexed one may be collected by gc, and must then read as gone.
        Raises MissingObject, IntegrityError."""
        c = self._commit_cache.get(cid)
        if c is not None:
            return c
        last = self._last_commit
        if last is not None and last.oid == cid:
            c = decode_commit(cid, last.kind, self.objects.verify(last))
        else:
            c = self.objects.commit(cid)
        if len(self._commit_cache) >= _COMMIT_CACHE:
            with contextlib.suppress(StopIteration, RuntimeError):  # another thread trimmed it meanwhile
                self._commit_cache.pop(next(iter(self._commit_cache)), None)  # oldest first (insertion order)
        self._commit_cache[cid] = c
        return c

    def _checked_info(self, row: IndexRow) -> CommitInfo:
        """CommitInfo of a live commit: the object's fields, the row's local ones (seq, branch, summary). The
        row alone only when the object cannot be read (missing or corrupt: nothing can act on that commit, and
        ``read`` refuses it); a damaged row falls back to the object as in :meth:`_row_info`."""
        try:
            c = self._commit_object(row.id)
        except (MissingObject, IntegrityError):
            return self._row_info(row)
        try:
            info = from_row(row)
        except DecodeError:
            return self._row_info(row)  # damaged: read from the object (cached now), keeping intact seq/branch
        if row_matches(row, c):
            return info
        if row.id not in self._disagreeing:
            self._disagreeing.add(row.id)
            _log.warning("crewckpt: the commit-index row of %s disagrees with its commit object (%s); using the "
                         "commit object; %s", row.id.hex(), ", ".join(row_differences(row, c)), REBUILD)
        fixed = from_commit(row.id, c, live=True)
        fixed.seq, fixed.branch, fixed.summary = info.seq, info.branch, info.summary
        return fixed

    def _row_info(self, row: IndexRow) -> CommitInfo:
        """CommitInfo of an index row alone (listing: no object read); a damaged row (a cache) is read from
        its commit object instead (keeping the row's own seq and branch when they are intact: the object has
        neither), and raises the row's one-line DecodeError only when the object cannot be read either."""
        try:
            return from_row(row)
        except DecodeError as e:
            try:
                info = from_commit(row.id, self._commit_object(row.id), live=True)
            except CkptError:
                raise e from None
            if isinstance(row.seq, int) and not isinstance(row.seq, bool):
                info.seq = row.seq
            if branch_ok(row.branch):
                info.branch = row.branch
            return info

    def _parents(self, cid: bytes) -> tuple[bytes, ...]:
        """The parents a walk follows: the verified commit object's, never the index row's copy (an unhashed
        cache). Raises UnknownRevision for a pruned and collected commit, MissingObject/IntegrityError for a
        live one whose object is unreadable."""
        if self.backend.index_get(cid) is not None:
            return self._commit_object(cid).parents  # MissingObject here: a damaged store (fsck names it)
        try:
            return self.objects.commit(cid).parents  # pruned but present (not cached: gc may collect it)
        except MissingObject:
            raise UnknownRevision(f"commit {cid.hex()[:12]} was pruned; its parents are unknown") from None

    def _seq(self, cid: bytes) -> int | None:
        """Local write order from the commit index; None outside it (commits carry no order)."""
        row = self.backend.index_get(cid)
        if row is not None and (not isinstance(row.seq, int) or isinstance(row.seq, bool)):
            raise damaged_row(row)  # not a parent cycle: the row's order is unreadable
        return row.seq if row is not None else None

    def _check_edge(self, child: bytes, parent: bytes) -> None:
        """A parent is written before its child, so its seq is lower: an edge breaking that (a self-parent, or
        part of a parent cycle, possible only in a hand-made or damaged commit index) raises IntegrityError
        naming the child, instead of letting a walk loop forever. An edge to or from a commit outside the
        index has no seq to compare: commit objects cannot form a cycle (an id hashes its parents' ids), and
        walks also keep a seen set."""
        if parent == child:
            raise _cycle(child, parent)
        ps, cs = self._seq(parent), self._seq(child)
        if ps is not None and cs is not None and ps >= cs:
            raise _cycle(child, parent)

    def resolve(self, rev: str) -> str:
        """Resolve a revision (see :mod:`crewckpt.history.revisions`) to a full 64-hex commit id.

        Raises:
            UnknownRevision: names nothing, or an ancestor step runs past a root or a pruned commit.
            AmbiguousRevision: a short prefix matches several commits (the message lists them).
        """
        r = revisions.parse(rev)
        cid = self._base(r)
        walked = 0
        for parent_no, count in r.steps:
            for _ in range(count):
                if parent_no == 0:
                    break
                try:
                    ps = self._parents(cid)
                except UnknownRevision:
                    if not walked:
                        raise
                    raise UnknownRevision(f"revision {rev!r} goes past pruned history: {walked} step(s) from "
                                          f"{r.base} is commit {cid.hex()[:12]}, which was pruned, so its parents "
                                          f"are unknown; `ckpt log {r.base}` shows what is left") from None
                if parent_no <= len(ps):
                    self._check_edge(cid, ps[parent_no - 1])
                if len(ps) < parent_no:
                    if not ps:
                        raise UnknownRevision(f"revision {rev!r} goes past the first checkpoint: {r.base} has only "
                                              f"{walked} ancestor(s) that way")
                    raise UnknownRevision(f"revision {rev!r}: commit {cid.hex()[:12]} has {len(ps)} parent(s)")
                cid = ps[parent_no - 1]
                walked += 1
        if not walked and r.reflog is None and len(r.base) == 64 and revisions.is_hex(r.base):
            return cid.hex()  # _base found this very commit (index row or object): no second round trip
        if self.backend.index_get(cid) is None and not self.backend.has_many([cid]):
            raise UnknownRevision(f"revision {rev!r}: commit {cid.hex()[:12]} was pruned and collected; "
                                  f"`ckpt log {r.base}` shows what is left")
        return cid.hex()

    def _base(self, r: revisions.Revision) -> bytes:
        b = r.base
        if r.reflog is not None:
            return self._reflog_base(r)
        if b in (head.HEAD, "@"):  # git: '@' alone is HEAD
            name = head.head_ref(self.backend)
            t = self.backend.get_ref(name)
            if t is None:
                raise head.unborn(self.backend, r.text)
            return self._ref_commit(name, t)
        if b == "latest":  # the last commit written on any LOCAL branch (HEAD before it was the current branch)
            return self._latest()
        if len(b) == 64 and revisions.is_hex(b):
            cid = bytes.fromhex(b)
            if self.backend.index_get(cid):
                return cid
            got = self.backend.get(cid)
            if got is not None and got.kind == ob.COMMIT:
                return cid
            if got is not None:
                kind = ob.KIND_NAMES.get(got.kind, b"object").decode()
                raise UnknownRevision(f"{b[:12]} is a {kind}, not a commit; give a checkpoint's id")
        if b.startswith("refs/"):
            t = self.backend.get_ref(b)
            if t:
                return self._ref_commit(b, t)
        else:  # git's order: a local branch first, then a remote-tracking ref (origin/main)
            t = self.backend.get_ref(refnames.HEADS + b)
            tracked = self.backend.get_ref(refnames.REMOTES + b)
            if t and tracked:  # git warns too ("refname 'origin/main' is ambiguous")
                _log.warning("crewckpt: refname %r is ambiguous: using the local branch %s (%s), not the "
                             "remote-tracking refs/remotes/%s (%s); rename the branch with `ckpt branch -m %s "
                             "NEW`", b, b, t.hex()[:12], b, tracked.hex()[:12], b)
            for name, target in ((refnames.HEADS + b, t), (refnames.REMOTES + b, tracked)):
                if target:
                    self._not_a_shadow(b, target, f"branch {b!r}", f"refs/heads/{b} for the branch")
                    return self._ref_commit(name, target)
        a = self.backend.alias_get(b)
        if a:
            self._not_a_shadow(b, a, f"the imported checkpoint id {b!r}", "the id `ckpt list` shows for it")
            self._check_alias(b, a)
            return a
        if revisions.is_hex(b):
            cands = self.backend.index_prefix(b.lower(), 20) or self._stored_commits(b.lower())
            if len(cands) == 1:
                return cands[0]
            if len(cands) > 1:
                lines = "; ".join(f"{c.hex()[:12]} ({self._info(c).time:%Y-%m-%d %H:%M:%S} on "
                                  f"{self._info(c).branch})" for c in cands[:10])
                raise AmbiguousRevision(f"short id {b!r} is ambiguous: {lines}; give more characters")
        hint = ("; short ids need at least 4 hex digits" if len(b) < revisions.MIN_PREFIX
                and all(c in "0123456789abcdefABCDEF" for c in b) else self._branch_hint(b))
        shown = r.text if len(r.text) <= 80 else r.text[:77] + "..."
        gone = self._collected(b.lower()) if revisions.is_hex(b) and len(b) >= revisions.MIN_PREFIX else None
        if gone is not None:
            raise UnknownRevision(f"unknown revision {shown!r}: commit {gone.hex()[:12]} was pruned and collected by "
                                  f"gc (a reflog still names it), so its checkpoint is gone; pick another with "
                                  f"`ckpt log`")
        raise UnknownRevision(revisions.unsupported(r.text)
                              or f"unknown revision {shown!r}: not a commit id, branch or checkpoint id{hint}")

    def _branch_hint(self, name: str) -> str:
        """The end of an unknown-revision message for ``name``: a close local branch name (git's "did you
        mean"), else the first branches, else `ckpt list`."""
        names = sorted(self.backend.refs(refnames.HEADS))
        names = [n[len(refnames.HEADS):] for n in names]
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.75) if len(names) <= 10_000 else []
        if close:
            return f"; did you mean the branch {close[0]!r}?"
        if names and not revisions.is_hex(name):
            more = f" and {len(names) - 10} more" if len(names) > 10 else ""
            return f"; branches: {', '.join(repr(n) for n in names[:10])}{more}"
        return "; see `ckpt list`"

    def _collected(self, hex_prefix: str) -> bytes | None:
        """A commit id starting with ``hex_prefix`` that HEAD's or a local branch's reflog names (as old or new
        tip) but the store no longer has, else None: only on the error path, to say "pruned" instead of
        "unknown" for an id `ckpt prune` printed."""
        for ref in (head.HEAD, *self.backend.refs(refnames.HEADS)):
            for e in self.backend.reflog(ref):
                for cid in (e.new, e.old):
                    if cid and cid.hex().startswith(hex_prefix):
                        return cid
        return None

    def _stored_commits(self, hex_prefix: str, limit: int = 20) -> builtins.list[bytes]:
        """Commit objects whose id starts with ``hex_prefix`` that have no index row (pruned, not yet collected
        by gc): a short id names them as their full id does, as in git until gc. Sorted, at most ``limit``."""
        whole = bytes.fromhex(hex_prefix[:len(hex_prefix) // 2 * 2])
        return sorted(m.oid for m in self.backend.iter_objects(whole)
                      if m.kind == ob.COMMIT and m.oid.hex().startswith(hex_prefix))[:limit]

    def _not_a_shadow(self, name: str, target: bytes, what: str, other: str) -> None:
        """Refuse a branch or alias name that is also the short id of another commit: an imported name must
        not take over the id a user copied from `ckpt log` (git warns, "refname is ambiguous"; here it is
        refused, since the name came from someone else's data).

        Raises:
            AmbiguousRevision: ``name`` is hex, at least MIN_PREFIX long, and prefixes a commit other than
                ``target``.
        """
        if len(name) < revisions.MIN_PREFIX or not revisions.is_hex(name):
            return
        others = [c for c in self.backend.index_prefix(name.lower(), 2) if c != target]
        if others:
            raise AmbiguousRevision(f"{name!r} is ambiguous: {what} names {target.hex()[:12]}, and it is also the "
                                    f"short id of checkpoint {others[0].hex()[:12]}; give more characters of the id, "
                                    f"or {other}")

    def _latest(self) -> bytes:
        """``latest``: the newest (highest local seq) tip among the local branches (refs/heads). Never a
        remote-tracking or run ref: a fetch must not make a remote's checkpoint what `resume latest` starts
        from. A branch's tip is its newest commit (a parent's seq is below its child's), so the tips suffice.

        Raises:
            UnknownRevision: no local branch yet (fetched branches are named in the message).
        """
        best: tuple[int, bytes, str] | None = None
        for name, tip in self.backend.refs(refnames.HEADS).items():
            row = self.backend.index_get(tip)
            key = (row.seq if row is not None else -1, tip, name)
            if best is None or key > best:
                best = key
        if best is None:
            fetched = sorted(self.backend.refs(refnames.REMOTES))
            hint = (f"; fetched branches are not local: make one with `ckpt branch NAME "
                    f"{fetched[0][len(refnames.REMOTES):]}`" if fetched else "")
            raise UnknownRevision(f"revision 'latest': no local branch has checkpoints yet{hint}")
        return self._ref_commit(best[2], best[1])

    def _ref_commit(self, name: str, t: bytes) -> bytes:
        """Ref ``name``'s target ``t`` when it can name a commit; a malformed target (not 32 bytes) or one
        naming another kind of object raises UnknownRevision naming the ref (not "pruned", not "corrupt"). A
        missing target is read again first: another writer may have moved the ref and gc collected its old
        tip between our read of the ref and of its target (damage is a target read twice)."""
        problem = self._target_problem(t)
        for _ in range(_CAS_RETRIES):
            moved = self.backend.get_ref(name) if problem == "missing" else None
            if moved is None or moved == t:
                break
            t, problem = moved, self._target_problem(moved)
        if problem == "malformed":
            raise UnknownRevision(f"ref {name} is malformed: it holds {len(t)} byte(s) ({t[:32].hex()}), not a "
                                  f"{ob.ID_BYTES}-byte commit id; {refnames.ref_fix(name)}")
        if problem == "missing":  # gc keeps what a ref names: a ref naming nothing was damaged, not pruned
            raise UnknownRevision(f"ref {name} names {t.hex()[:12]}, which is not in the store (a damaged "
                                  f"ref); {refnames.ref_fix(name)}")
        if problem is not None:
            raise UnknownRevision(f"ref {name} names {t.hex()}, a {problem}, not a commit: the ref is damaged; "
                                  f"{refnames.ref_fix(name)}")
        return t

    def _target_problem(self, t: bytes) -> str | None:
        """Why a ref or reflog value ``t`` cannot name a commit: "malformed" (not 32 bytes), "missing" (not
        stored), or the kind name of the object it names ("tree", ...); None when it can (live commits are
        indexed: only an unindexed id costs an object read)."""
        if len(t) != ob.ID_BYTES:
            return "malformed"
        if self.backend.index_get(t) is not None:
            return None
        got = self.backend.get(t)
        if got is None:
            return "missing"
        return None if got.kind == ob.COMMIT else ob.KIND_NAMES.get(got.kind, b"object").decode()

    def _reflog_base(self, r: revisions.Revision) -> bytes:
        """``REF@{N}`` (N-th prior value of REF; ``@{N}``: of the current branch; ``HEAD@{N}``: of HEAD) and
        ``@{-N}`` (the tip of the N-th branch checked out before the current one)."""
        assert r.reflog is not None
        if r.reflog < 0:
            name = head.previous_branch(self.backend, -r.reflog)
            t = self.backend.get_ref(refnames.HEADS + name) if name is not None else None
            if t is None:
                why = (f"HEAD was on fewer than {-r.reflog} other branch(es)" if name is None
                       else f"branch {name!r} no longer exists")
                raise UnknownRevision(f"revision {r.text!r}: {why}; see `ckpt reflog HEAD`")
            return self._ref_commit(refnames.HEADS + (name or ""), t)
        if r.base in (head.HEAD, "@"):
            ref, label = head.HEAD, head.HEAD
        elif not r.base:
            ref = head.head_ref(self.backend)
            label = head.branch_of(ref)
        else:
            ref = r.base if r.base.startswith("refs/") else refnames.HEADS + r.base
            if ref != r.base and self.backend.get_ref(ref) is None and self.backend.get_ref(refnames.REMOTES + r.base):
                ref = refnames.REMOTES + r.base  # origin/main@{1}: a remote-tracking ref's reflog
            label = r.base
        log, n = self.backend.reflog(ref), r.reflog
        # git's rule (refs.c read_ref_at): @{0} is the newest entry's new side, @{n} the old side of the
        # (n-1)-th newest, so the oldest entry also answers for the value before it
        found = (log[-1].new if n == 0 else log[-n].old) if log and n <= len(log) else None
        if found is not None:
            return self._logged_commit(r.text, label, found)
        if not log and ref.startswith(refnames.HEADS) and self.backend.get_ref(ref) is None:
            if not r.base:
                raise head.unborn(self.backend, r.text)
            raise UnknownRevision(f"revision {r.text!r}: no branch named {label!r}; see `ckpt branch`")
        last = len(log) if log and log[0].old is not None else len(log) - 1
        have = f"only {len(log)} reflog entries ({label}@{{0}} to {label}@{{{last}}})" if log else (
            "no reflog entries")
        raise UnknownRevision(f"revision {r.text!r}: {label} has {have}; see `ckpt reflog {label}`")

    def _logged_commit(self, rev: str, label: str, t: bytes) -> bytes:
        """What reflog entry ``rev`` of ``label`` names, when that can be a commit. A reflog may outlive the
        commits it names (prune + gc), so an id that is not stored is "not in the store" either way; a
        malformed id or another kind of object is a damaged entry. Raises UnknownRevision (one line)."""
        fix = f"see `ckpt reflog {label}`; `ckpt fsck` lists damaged reflog entries"
        problem = self._target_problem(t)
        if problem == "malformed":
            raise UnknownRevision(f"reflog entry {rev} is malformed: it holds {len(t)} byte(s) ({t[:32].hex()}), "
                                  f"not a {ob.ID_BYTES}-byte commit id; {fix}")
        if problem == "missing":
            raise UnknownRevision(f"reflog entry {rev} names {t.hex()[:12]}, which is not in the store (pruned "
                                  f"and collected by gc, or a damaged reflog); {fix}")
        if problem is not None:
            raise UnknownRevision(f"reflog entry {rev} names {t.hex()[:12]}, a {problem}, not a commit: the reflog "
                                  f"is damaged; {fix}")
        return t

    # -- history ---------------------------------------------------------------------------------------------

    def log(self, rev: str = "HEAD", limit: int | None = None) -> Iterator[CommitInfo | PrunedCommit]:
        """Follow first parents from ``rev`` (any depth, no recursion); a parent whose object is gone appears as
        a :class:`PrunedCommit` marker and ends the walk."""
        cid: bytes | None = bytes.fromhex(self.resolve(rev))
        n = 0
        seen: set[bytes] = set()
        child: CommitInfo | None = None
        while cid is not None and (limit is None or n < limit):
            try:
                info = self._info(cid)
            except MissingObject:
                yield PrunedCommit(cid.hex())
                return
            if child is not None and child.live and info.live and info.seq >= child.seq:
                self._check_edge(bytes.fromhex(child.id), cid)  # a damaged seq is named as such
                raise _cycle(bytes.fromhex(child.id), cid)
            if cid in seen:  # e.g. an index row's parents leading back through unindexed commits
                raise _cycle(cid)
            seen.add(cid)
            child = info
            yield info
            n += 1
            cid = bytes.fromhex(info.parents[0]) if info.parents else None

    def list(self, branch: str | None = None) -> list[CommitInfo]:
        """Live commits of ``branch`` (or all branches), in write order (seq)."""
        if branch is not None:
            branch = refnames.check_branch(branch)
        return [self._row_info(r) for r in self.backend.index_rows(branch)]

    def branches(self) -> dict[str, str]:
        """``branch name -> tip commit id``, sorted by name."""
        return {k[len(refnames.HEADS):]: v.hex() for k, v in self.backend.refs(refnames.HEADS).items()}

    def runs(self) -> dict[str, str]:
        """``run (lineage) id -> its last commit id``."""
        return {k[len(refnames.RUNS):]: v.hex() for k, v in self.backend.refs(refnames.RUNS).items()}

    def reflog(self, branch: str) -> builtins.list[ReflogEntry]:
        """A branch's reflog, or HEAD's for ``"HEAD"`` (every move of HEAD: commits on the current branch,
        switches, renames of it), oldest first. Raises BadRefName."""
        return self.backend.reflog(head.HEAD if branch == head.HEAD else refnames.branch_ref(branch))

    def has_commits(self, ids: Iterable[str]) -> set[str]:
        """Those of ``ids`` (64-hex commit ids) the store holds, listed or pruned and not yet collected (a
        reflog entry may name a commit gc collected). Existence only (one batch); reads verify."""
        return {o.hex() for o in self.backend.has_many({bytes.fromhex(i) for i in ids})}

    def current_branch(self) -> str:
        """The branch HEAD names: where ``HEAD`` resolves and what `ckpt switch` sets. It may not exist yet
        (a fresh store's ``main``). Rules: :mod:`crewckpt.history.head`."""
        return head.branch_of(head.head_ref(self.backend))

    def previous_branch(self, n: int = 1) -> str | None:
        """The ``n``-th branch HEAD was on before the current one (``@{-n}``), or None."""
        return head.previous_branch(self.backend, n)

    def switch(self, branch: str, *, create: bool = False, start: str = "HEAD", reason: str = "checkout") -> str:
        """Make ``branch`` the current branch (HEAD names it); returns the branch HEAD named before.

        A move is one entry in HEAD's reflog, ``"<reason>: moving from OLD to NEW"`` (git's wording; ``reason``
        is e.g. ``"checkout"`` or ``"resume"``); switching to the current branch changes nothing.

        Args:
            create: create ``branch`` at ``start`` first (``git switch -c``).
            start: the revision a created branch starts at (resolved before anything is written).
        Raises:
            BadRefName. UnknownRevision: no such branch (and not ``create``), or ``start`` names nothing (and
            the other cases of :meth:`create_branch`). BranchExists: ``create`` and the branch exists.
            DocumentTooLarge: as :meth:`create_branch`.
        """
        ref = refnames.branch_ref(branch)
        if not create:
            return self._switch_once(ref, None, start, reason)
        self._refuse_remote_prefix(ref)
        return self._branching(start, lambda begin: self._switch_once(ref, begin, start, reason))

    def _switch_once(self, ref: str, begin: _Start | None, start: str, reason: str) -> str:
        branch = head.branch_of(ref)
        with self._writing() as txn:
            now = time.time_ns()
            old = head.head_ref_stored(txn)
            if begin is not None:
                self._create_ref(txn, ref, begin, start, now)
            elif old == ref:
                return branch
            tip = txn.get_ref(ref)
            if tip is None:
                names = ", ".join(head.branch_of(k) for k in txn.refs(refnames.HEADS)) or "none yet"
                raise UnknownRevision(f"no branch named {branch!r}; create it with `ckpt switch -c {branch} "
                                      f"[START]` (branches: {names})")
            txn.set_symref(head.HEAD, ref)
            txn.reflog_append(ReflogEntry(head.HEAD, txn.get_ref(old), tip, now,
                                          f"{reason}: moving from {head.branch_of(old)} to {branch}"))
        return head.branch_of(old)

    def merge_base(self, rev1: str, rev2: str) -> str | None:
        """The nearest common ancestor of two revisions (the fork point), or None. Follows all parents."""
        a, b = bytes.fromhex(self.resolve(rev1)), bytes.fromhex(self.resolve(rev2))
        anc = set(self._ancestors(a))
        for c in self._ancestors(b):
            if c in anc:
                return c.hex()
        return None

    def _ancestors(self, cid: bytes) -> Iterator[bytes]:
        """Breadth-first ancestors including ``cid``; stops at pruned commits."""
        seen = {cid}
        queue = collections.deque([cid])
        while queue:
            c = queue.popleft()
            yield c
            try:
                ps = self._parents(c)
            except UnknownRevision:
                continue
            for p in ps:
                self._check_edge(c, p)
                if p not in seen:
                    seen.add(p)
                    queue.append(p)

    # -- branches --------------------------------------------------------------------------------------------

    def create_branch(self, name: str, rev: str = "HEAD") -> str:
        """Create branch ``name`` at ``rev``; returns the commit id. A pruned checkpoint gc has not collected
        yet is listed again on the new branch (:meth:`_start`).

        Raises:
            BadRefName. BranchExists. UnknownRevision: ``rev`` names nothing, or a pruned commit that is
            incomplete, collected, or pruned again at every try. DocumentTooLarge: a pruned commit's document
            is over the read limits (listing it again reads it).
        """
        ref = refnames.branch_ref(name)
        self._refuse_remote_prefix(ref)
        return self._branching(rev, lambda begin: self._branch_at(ref, begin, rev))

    def _branch_at(self, ref: str, begin: _Start, rev: str) -> str:
        with self._writing() as txn:
            self._create_ref(txn, ref, begin, rev, time.time_ns())
        return begin.cid.hex()

    def _branching(self, rev: str, land: Callable[[_Start], str]) -> str:
        """``land(self._start(rev))``, from a fresh start again when the start commit was pruned by another
        process before the ref's transaction (``_Unlisted``); UnknownRevision after _CAS_RETRIES tries."""
        for _ in range(_CAS_RETRIES):
            try:
                return land(self._start(rev))
            except _Unlisted:
                continue
        raise _pruned_meanwhile(rev)

    def _start(self, rev: str) -> _Start:
        """The commit a new branch starts at. A full id may name a commit object no index row lists (a pruned
        checkpoint gc has not collected yet, an interrupted transfer's leftover): such a commit is taken only
        when every object below it is present and verifies (git checks connectivity before a ref names fetched
        objects). The ref's transaction then puts them all again, each framed loose from its verified body (a
        gc running meanwhile marked without the new ref: the fresh stored time, or the object itself if its
        sweep took it, keeps what the branch needs; a stored frame would name a pack gc may drop meanwhile),
        and lists the commit again in the index (its summary read from its document), so `ckpt log`, `list`,
        `info` and prune see the branch's tip as any other checkpoint. Store.commit's explicit parents are not
        checked so (a parent no index row lists is pruned history, which gc collects anyway; git's commit-tree
        checks only that it exists). Raises UnknownRevision: ``rev`` names nothing, or its commit is
        incomplete."""
        cid = bytes.fromhex(self.resolve(rev))
        if self.backend.index_get(cid) is not None:
            return _Start(cid)
        from crewckpt.history import remotes, sync
        try:
            summary = _summary(self.profile, self.read(cid.hex()))  # under the read limits (DocumentTooLarge)
            kind, body = self.objects.get(cid)  # framed anew below: its stored frame may name a pack gc drops
            commit = decode_commit(cid, kind, body)
            below = sync.whole_commit(remotes.side(self, "this store"), cid, commit)
        except (SyncError, MissingObject, IntegrityError):
            if not self.backend.has_many([cid]):  # gc collected it since resolve(): say so, as resolve() does
                self.resolve(cid.hex())
            raise UnknownRevision(f"revision {rev[:80]!r}: commit {cid.hex()[:12]} is not in `ckpt list` and "
                                  f"objects below it are missing or damaged (an interrupted transfer or gc left "
                                  f"it so), so no branch can start there; nothing was changed: pick a checkpoint "
                                  f"`ckpt log` lists, or fetch it again from a store that has it") from None
        frames = [*(self.objects.frame(k, b) for _, k, b in below), self.objects.frame(kind, body)]
        return _Start(cid, frames, commit, summary)

    @staticmethod
    def _create_ref(txn: Parts, ref: str, start: _Start, rev: str, now: int) -> None:
        if txn.get_ref(ref) is not None:
            raise BranchExists(f"branch {head.branch_of(ref)!r} already exists; pick another name or delete it "
                               f"first")
        if start.commit is None and txn.index_get(start.cid) is None:
            raise _Unlisted  # pruned since _start looked: take the unlisted path (its objects put again)
        if start.frames:  # children first, the commit last (docs/backends.md, 'Write order')
            txn.put_many(start.frames, now)
        txn.set_ref_if_equals(ref, None, start.cid)
        txn.reflog_append(ReflogEntry(ref, None, start.cid, now, f"branch: created from {rev}"))
        if start.commit is not None:  # listed again, after its live children if prune kept any
            from crewckpt.history.reindex import list_again
            list_again(txn, start.cid, start.commit, head.branch_of(ref), start.summary or {})

    def _refuse_remote_prefix(self, ref: str) -> None:
        """Refuse a new local branch named ``REMOTE/...`` for a configured REMOTE: it would shadow the
        remote-tracking ref of that name (``origin/main`` would name two things). Raises BadRefName."""
        from crewckpt.history import remotes
        b = head.branch_of(ref)
        first, _, rest = b.partition("/")
        if rest and first in remotes.remotes(self):
            raise refnames.BadRefName(f"branch {b!r} begins with '{first}/', the name of remote {first}: it would shadow the "
                             f"remote-tracking {b}; choose another name, e.g. {first}-{rest}")

    def delete_branch(self, name: str, *, force: bool = True) -> None:
        """Delete a branch ref and its reflog (its commits stay until pruned).

        ``force=False`` is ``ckpt branch -d`` (git's ``branch -d``): refuse unless another branch's tip or a
        remote-tracking ref (``refs/remotes/*``) is the tip or has it as an ancestor, so prune and gc cannot
        drop checkpoints only this branch keeps. A ref naming no commit (damaged) holds no history and is
        deleted either way. The default, True, deletes as before (``ckpt branch -D``).

        Raises:
            UnknownRevision: no such branch. BranchInUse: it is the current branch (git refuses too).
            BranchNotMerged: ``force=False`` and nothing else reaches its tip (nothing changed).
        """
        try:
            ref = refnames.branch_ref(name)
        except BadRefName:  # a name only a damaged or foreign store holds (fsck names it): it may still go
            ref = refnames.HEADS + name
            if not isinstance(name, str) or self.backend.get_ref(ref) is None:
                raise
        for _ in range(_CAS_RETRIES):
            witness = None if force else self._reached_elsewhere(ref)  # walked outside the transaction
            with self._writing() as txn:
                cur = txn.get_ref(ref)
                if cur is None:
                    tracking = refnames.REMOTES + head.branch_of(ref)
                    if "/" in head.branch_of(ref) and txn.get_ref(tracking) is not None:
                        remote, _, theirs = head.branch_of(ref).partition("/")
                        raise UnknownRevision(
                            f"{name!r} is a remote-tracking ref ({tracking}), not a branch: `ckpt remote prune "
                            f"{remote}` deletes it once {remote} no longer has {theirs}, `ckpt remote remove "
                            f"{remote}` deletes all of {remote}'s")
                    raise UnknownRevision(f"no branch named {name!r}; see `ckpt branch`")
                if head.head_ref_stored(txn) == ref:
                    raise BranchInUse(f"cannot delete branch {head.branch_of(ref)!r}: it is the current branch "
                                      f"(HEAD); switch to another first with `ckpt switch BRANCH`")
                if not force:
                    tip, by = witness if witness is not None else (None, None)
                    if tip != cur or (by is not None and txn.get_ref(by[0]) != by[1]):
                        continue  # a ref moved since the walk: walk again
                    if by is None:
                        raise BranchNotMerged(
                            f"branch {head.branch_of(ref)!r} is not fully merged: no other branch or "
                            f"remote-tracking ref reaches its tip {cur.hex()[:12]} (prune and gc would then "
                            f"drop its checkpoints); if you are sure, run `ckpt branch -D {head.branch_of(ref)}`")
                txn.set_ref_if_equals(ref, cur, None)
                txn.reflog_delete(ref)
                return
        raise StoreBusy(f"branch {name!r} kept moving while checking what reaches it; try again")

    def _reached_elsewhere(self, ref: str) -> tuple[bytes | None, tuple[str, bytes] | None]:
        """(``ref``'s tip, ``(other ref, its tip)`` reaching it or None): the first other branch or
        remote-tracking ref whose tip is the tip or has it as an ancestor. A tip that is no commit (a damaged
        ref) counts as reached (there is no history to lose). Walks verified commit objects, and only commits
        newer than the tip in local order (an older one cannot descend from it)."""
        tip = self.backend.get_ref(ref)
        if tip is None:
            return None, None
        others = {k: v for prefix in (refnames.HEADS, refnames.REMOTES)
                  for k, v in self.backend.refs(prefix).items() if k != ref and len(v) == ob.ID_BYTES}
        stored = self.backend.get(tip) if len(tip) == ob.ID_BYTES else None
        if stored is None or stored.kind != ob.COMMIT:
            return tip, (ref, tip)  # itself as the witness: it must still name the same thing
        floor = self._seq(tip)
        for k, v in sorted(others.items(), key=lambda kv: kv[1] != tip):  # an equal tip first: no walk
            if self._descends(v, tip, floor):
                return tip, (k, v)
        return tip, None

    def _descends(self, start: bytes, tip: bytes, floor: int | None) -> bool:
        """Whether ``tip`` is ``start`` or one of its ancestors (commits at or below seq ``floor`` are not
        followed; unreadable or collected commits end their path: a wrong "no" is a refusal, never a loss)."""
        seen = {start}
        stack = [start]
        while stack:
            c = stack.pop()
            if c == tip:
                return True
            try:
                s = self._seq(c)
                if floor is not None and s is not None and s <= floor:
                    continue
                ps = self._parents(c)
            except CkptError:
                continue
            for p in ps:
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        return False

    def rename_branch(self, old: str, new: str) -> None:
        """Rename a branch: its ref, reflog and the branch of its live commits; HEAD follows a rename of the
        current branch (one entry in HEAD's reflog). Raises BranchExists, UnknownRevision, BadRefName."""
        oref, nref = refnames.branch_ref(old), refnames.branch_ref(new)
        self._refuse_remote_prefix(nref)
        with self._writing() as txn:
            current = head.head_ref_stored(txn)  # before the refs change: a legacy HEAD is read from them
            cur = txn.get_ref(oref)
            if cur is None:
                raise UnknownRevision(f"no branch named {old!r}; see `ckpt branch`")
            if txn.get_ref(nref) is not None:
                raise BranchExists(f"branch {new!r} already exists; delete it first or pick another name")
            txn.set_ref_if_equals(nref, None, cur)
            txn.set_ref_if_equals(oref, cur, None)
            for e in txn.reflog(oref):
                txn.reflog_append(ReflogEntry(nref, e.old, e.new, e.time_ns, e.message))
            txn.reflog_delete(oref)
            now, message = time.time_ns(), f"branch: renamed {old} to {new}"
            txn.reflog_append(ReflogEntry(nref, cur, cur, now, message))
            if current == oref:
                txn.set_symref(head.HEAD, nref)
                txn.reflog_append(ReflogEntry(head.HEAD, cur, cur, now, message))
            txn.index_rebranch(oref[len(refnames.HEADS):], nref[len(refnames.HEADS):])

    # -- remotes (crewckpt.history.remotes; the transfer is crewckpt.history.sync) ----------------------------

    def remotes(self) -> dict[str, str]:
        """``name -> location`` of this store's remotes."""
        from crewckpt.history import remotes
        return remotes.remotes(self)

    def add_remote(self, name: str, location: str | os.PathLike[str], *, check: bool = True) -> str:
        """Add a remote (``ckpt remote add``); returns the location as stored. ``check``: a local location must
        hold a store now. Raises BadRefName, StoreNotFound, CkptError (see
        :func:`crewckpt.history.remotes.add_remote`)."""
        from crewckpt.history import remotes
        return remotes.add_remote(self, name, location, check=check)

    def remove_remote(self, name: str) -> builtins.list[str]:
        """Remove a remote and its remote-tracking refs; returns those refs. Raises UnknownRemote."""
        from crewckpt.history import remotes
        return remotes.remove_remote(self, name)

    def fetch(self, remote: str | Store | None = None, branches: Sequence[str] | None = None, *,
              name: str | None = None, dry_run: bool = False, progress: Progress | None = None,
              prune: bool = False) -> SyncReport:
        """Fetch a remote's branches into ``refs/remotes/<remote>/`` (see :func:`crewckpt.history.remotes.fetch`).
        ``remote``: a remote name (default ``origin``), a location or an open Store (then ``name`` names the
        tracking namespace). ``prune``: also delete tracking refs of branches the remote deleted."""
        from crewckpt.history import remotes
        return remotes.fetch(self, remote, branches, name=name, dry_run=dry_run, progress=progress, prune=prune)

    def pull(self, remote: str | Store | None = None, branch: str | None = None, *, name: str | None = None,
             dry_run: bool = False, progress: Progress | None = None) -> SyncReport:
        """Fetch and fast-forward ``branch`` (see :func:`crewckpt.history.remotes.pull`). Raises PullDiverged."""
        from crewckpt.history import remotes
        return remotes.pull(self, remote, branch, name=name, dry_run=dry_run, progress=progress)

    def push(self, remote: str | Store | None = None, branch: str | None = None, *, all_branches: bool = False,
             force: bool = False, name: str | None = None, dry_run: bool = False, progress: Progress | None = None,
             check: bool = True) -> SyncReport:
        """Push ``branch`` (default: the current one) or every branch to a remote (see
        :func:`crewckpt.history.remotes.push`).

        Raises:
            PushRejected: with ``check`` (default), when a branch was rejected (the others went; the report is
                the exception's ``report``). With ``check=False`` rejections are only in the report.
        """
        from crewckpt.history import remotes
        rep = remotes.push(self, remote, branch, all_branches=all_branches, force=force, name=name,
                           dry_run=dry_run, progress=progress)
        return remotes.push_or_raise(rep) if check else rep

    def publish_run(self, remote: str | Store | None, run_id: str, branch: str | None = None, *,
                    name: str | None = None, progress: Progress | None = None,
                    dry_run: bool = False) -> SyncReport:
        """Publish run ``run_id`` (its ``refs/runs/<run id>``, and its branch when no tip loses its name) to a
        shared store: what ``CheckpointConfig(push_to=...)`` does when a run ends (see
        :func:`crewckpt.history.publish.publish_run`; rejections are in the report; ``dry_run``: say what would
        move, write nothing). Raises UnknownRevision (no such run here) and push's errors."""
        from crewckpt.history import publish
        return publish.publish_run(self, remote, run_id, branch, name=name, progress=progress, dry_run=dry_run)

    @classmethod
    def clone(cls, src: str | Store, dest: str | os.PathLike[str], *, origin: str = "origin",
              progress: Progress | None = None) -> Store:
        """A new store at ``dest`` with every branch of ``src`` and remote ``origin`` naming it (see
        :func:`crewckpt.history.remotes.clone`; rerunning an interrupted clone completes it)."""
        from crewckpt.history import remotes
        return remotes.clone(cls, src, dest, origin=origin, progress=progress)[0]

    # -- retention and maintenance ----------------------------------------------------------------------------

    def prune(self, branch: str, *, keep: int | None = None, older_than_ns: int | None = None,
              dry_run: bool = False) -> builtins.list[str]:
        """Remove old commits of one branch from the live set; returns the removed ids (oldest first). For a
        deleted branch (no ref; its commits stay live and listed until pruned) ``keep`` and ``older_than_ns``
        may both be None: every one of its commits that no other branch reaches goes.

        A commit goes when it is outside the ``keep`` newest by sequence number (a future-dated commit does
        not count as newer) and, if ``older_than_ns`` is given, older than that many ns. Other branches and
        their history are untouched: a commit a branch ref or a remote-tracking ref points at stays, and so
        does every ancestor (through live commits) of another existing branch's live commits or tip, e.g. the
        fork point of a branch forked from this one and everything before it (git never drops history a
        branch reaches; delete that branch to let go of it).
        Space returns with :meth:`gc`. :meth:`prune_report` also says what other branches held back.

        Raises:
            ValueError: neither ``keep`` nor ``older_than_ns``, or ``keep < 1``. TypeError: either not an int.
            BadRefName. UnknownRevision: no such branch (and no checkpoint of that name to prune).
        """
        return self._prune(branch, keep, older_than_ns, dry_run, reasons=False).removed

    def prune_report(self, branch: str, *, keep: int | None = None, older_than_ns: int | None = None,
                     dry_run: bool = False) -> PruneReport:
        """:meth:`prune`, also reporting which of the rule's candidates stay because other branches' history or
        tips reach them (or remote-tracking refs point at them): ``PruneReport(removed, held, held_by)``
        (:class:`crewckpt.history.prune.PruneReport`), from the same walk of the other branches' history.

        Raises:
            ValueError: neither ``keep`` nor ``older_than_ns``, or ``keep < 1``. TypeError: either not an int.
            BadRefName. UnknownRevision: no such branch (and no checkpoint of that name to prune).
        """
        return self._prune(branch, keep, older_than_ns, dry_run, reasons=True)

    def _prune(self, branch: str, keep: int | None, older_than_ns: int | None, dry_run: bool, *,
               reasons: bool) -> PruneReport:
        for name, v in (("keep", keep), ("older_than_ns", older_than_ns)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        b = refnames.check_branch(branch)
        from crewckpt.history import prune

        with self._writing() as txn:
            # read in the transaction: a branch re-created meanwhile keeps its new checkpoints
            if keep is None and older_than_ns is None and any(
                    txn.get_ref(r) is not None for r in (refnames.branch_ref(b), refnames.REMOTES + b)):
                raise ValueError("prune needs keep=N or older_than_ns=NS (without either, only a deleted "
                                 "branch's checkpoints go: all that no other branch reaches)")
            cut = time.time_ns() - older_than_ns if older_than_ns is not None else None
            gone, report = prune.plan(txn, b, keep=keep, cut_ns=cut, reasons=reasons)
            ref = refnames.branch_ref(b)  # missing: no ref, not HEAD's (maybe unborn) branch, no checkpoint on it
            missing = (not gone and not report.held and txn.get_ref(ref) is None and head.head_ref(txn) != ref
                       and not txn.index_rows(b))
            if dry_run or not gone:
                gone = []
            ids = {r.id for r in gone}
            if ids:
                txn.index_remove(ids)
                for name, target in txn.refs(refnames.RUNS).items():
                    if target in ids:
                        txn.set_ref_if_equals(name, target, None)
        if missing:  # a typo pruned nothing: say so, as log and read do (git: "not a valid branch")
            raise UnknownRevision(f"no branch named {b!r}{self._branch_hint(b)}")
        return report

    def prune_held(self, branch: str, *, keep: int | None = None,
                   older_than_ns: int | None = None) -> tuple[int, builtins.list[str]]:
        """Why :meth:`prune` keeps checkpoints of ``branch`` its rule (``keep``, ``older_than_ns``) selects:
        ``(n, names)``, the number of them other branches' history or tips reach (or remote-tracking refs
        point at), and those branches' names (``origin/main`` for a tracking ref), sorted. ``(0, [])`` when
        nothing is held. Reads only (:meth:`prune_report` gives this with the prune itself).

        Raises:
            BadRefName.
        """
        from crewckpt.history import prune

        b = refnames.check_branch(branch)
        cut = time.time_ns() - older_than_ns if older_than_ns is not None else None
        _, report = prune.plan(self.backend, b, keep=keep, cut_ns=cut, reasons=True)
        return report.held, report.held_by

    def gc(self, *, dry_run: bool = False, grace_s: float = 0.0, progress: Progress | None = None,
           wait_s: float = 30.0) -> GcReport:
        """Delete objects no live commit or ref reaches, repack the rest, give the space back.

        Args:
            dry_run: only report. grace_s: also keep objects touched in the last ``grace_s`` seconds.
            progress: ``(phase, done, total or None)`` callback.
            wait_s: seconds to wait for the gc lock (another gc, or a writer's automatic repack).
        Raises:
            GcBusy: the gc lock stayed taken for ``wait_s`` seconds. See :func:`crewckpt.history.gc.gc` for the safety argument.
        """
        from crewckpt.history.gc import gc
        for name, v in (("grace_s", grace_s), ("wait_s", wait_s)):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < 1e9:
                raise TypeError(f"{name} must be a number of seconds (0 or more), got {v!r}"[:200])
        return gc(self.parts, dry_run=dry_run, grace_ns=int(grace_s * 1e9), progress=progress, wait_s=wait_s)

    def fsck(self, full: bool = False, progress: Progress | None = None) -> FsckReport:
        """Check the store (quick: live commits' graphs; full: every object re-hashed). Never raises for damage:
        the report lists broken objects and the commits that need them. See :mod:`crewckpt.history.fsck`."""
        from crewckpt.history.fsck import fsck
        return fsck(self.parts, full=full, progress=progress)

    def rebuild_index(self, *, dry_run: bool = False, progress: Progress | None = None) -> RebuildReport:
        """Rebuild the commit index (a derived cache) from objects, refs and reflogs; see
        :mod:`crewckpt.history.reindex` for which commits become live and how branch and order are chosen."""
        from crewckpt.history.reindex import rebuild_index
        return rebuild_index(self.parts, dry_run=dry_run, progress=progress)

    def stats(self) -> dict[str, Any]:
        """Store figures: ``objects`` (count, packs included), ``packs`` (how many of them are packs), ``body_bytes`` (uncompressed bodies, packs not counted twice),
        ``stored_bytes`` (frames at rest), ``logical_bytes`` (live commits' documents as JSON), ``file_bytes``
        (database + WAL on disk), the ratios between them, and per-branch commit counts and logical bytes."""
        n, _, stored = self.backend.object_stats()
        # packs hold copies of their members' bodies: count each object's body once
        body = packs = 0
        for m in self.backend.iter_objects():
            if m.kind == ob.PACK:
                packs += 1
            else:
                body += m.size
        rows = self.backend.index_rows()
        per: dict[str, dict[str, int]] = {}
        for r in rows:
            s = self._row_info(r).summary
            d = per.setdefault(r.branch, {"commits": 0, "logical_bytes": 0})
            d["commits"] += 1
            n_bytes = s.get("logical_bytes")
            d["logical_bytes"] += n_bytes if isinstance(n_bytes, int) and not isinstance(n_bytes, bool) else 0
        for name in self.branches():  # branches made from existing commits own none of their own yet
            per.setdefault(name, {"commits": 0, "logical_bytes": 0})
        logical = sum(d["logical_bytes"] for d in per.values())
        return {"objects": n, "packs": packs, "body_bytes": body, "stored_bytes": stored, "commits": len(rows),
                "logical_bytes": logical, "dedup_ratio": logical / body if body else 0.0,
                "compression_ratio": body / stored if stored else 0.0,
                "total_ratio": logical / stored if stored else 0.0, "branches": per,
                "file_bytes": self._disk_bytes(stored)}

    def _disk_bytes(self, stored: int) -> int:
        """What the store takes where it lives (the backend's ``disk_bytes()``), else its frames' bytes."""
        measure = getattr(self.backend, "disk_bytes", None)
        return int(measure()) if callable(measure) else stored

    def train_dictionary(self, samples: int = 2000) -> str | None:
        """Train a zstd dictionary from existing tree objects and use it for new writes; returns its id, or
        None when there are too few samples. Old frames keep their codec (ids never change)."""
        from crewckpt.format.frame import train_dictionary
        ids = [m.oid for m in self.backend.iter_objects() if m.kind == ob.TREE][:samples]
        if len(ids) < 100:
            return None
        bodies = [b for _, (_, b) in self.objects.get_many(ids).items()]
        try:
            data = train_dictionary(bodies)
        except CkptError:
            return None
        d = self.objects.frame(ob.DICT, data)
        with self._writing() as txn:
            txn.put_many([d], time.time_ns())
            txn.meta_set("dictionary", d.oid.hex())
        self.objects.codec.use_dictionary(d.oid, data)
        return d.oid.hex()


def _as_list(values: Any) -> builtins.list[Any] | None:
    """``list(values)``, or None when ``values`` is not iterable."""
    try:
        return builtins.list(values)
    except TypeError:
        return None


def _summary(prof: Profile, doc: Any) -> dict[str, Any]:
    """``prof.summary(doc)``, run only after the splitter accepted ``doc`` (orjson, which sizes it, crashes the
    process on tuples nested thousands deep; the splitter refuses those in one line first)."""
    try:
        return prof.summary(doc)
    except RecursionError:  # a Parts value among its own pieces (sizes and plain() recurse through groups)
        raise ValueError("the document contains itself (a Parts value is one of its own pieces); JSON cannot "
                         "hold a value that contains itself: store a copy or an id instead") from None


def _cycle(child: bytes, parent: bytes | None = None) -> IntegrityError:
    """The one-line error for a commit graph that loops (self-parent, cycle in the commit index)."""
    if parent is None or parent == child:
        why = ("it is its own ancestor: the commit graph loops" if parent is None
               else "it lists itself as its own parent")
    else:
        why = f"its parent {parent.hex()[:12]} is not older than it (a parent cycle in the commit index)"
    return IntegrityError(child.hex(), why)


_CAS_RETRIES = 20  # tries to move a branch another writer keeps moving (backends without transactions)
_REPLAYS = 5  # checkpoints made anew after their transaction was replayed against a changed store


def _follow(w: Parts, ref: str, target: bytes) -> None:
    """Point ``ref`` (a run ref: it follows its run's last commit, any old value will do) at ``target``."""
    for _ in range(_CAS_RETRIES):
        try:
            w.set_ref_if_equals(ref, w.get_ref(ref), target)
            return
        except RefConflict:
            continue
    raise RefConflict(f"ref {ref} keeps moving under concurrent writers; retry")


class _EpochChanged(Exception):
    """A gc ran since this writer's caches were filled: redo the split without them."""


def _new_meta() -> dict[str, str]:
    """The meta rows a new store is created with."""
    return {"format_version": str(ob.NEW_STORE_VERSION), _EPOCH: "0"}


def find_store(path: str | os.PathLike[str] | None = None) -> Path:
    """The folder of the local store ``Store.open(path)`` would open (explicit path, ``$CKPT_STORE``, or walking
    up for ``.ckpt``); kept for callers of earlier releases: new code opens by location with :meth:`Store.open`.

    Raises:
        StoreNotFound: with the path tried and the fix (also for a location that is not a local folder).
    """
    from crewckpt.backends.sqlite import discover, locate

    where = registry.named(path)
    if where is None:
        return discover()
    folder = registry.local_folder(where)
    if folder is None:
        raise StoreNotFound(f"{where}: not a local store folder; open it with Store.open({str(where)!r})")
    return locate(Path(folder))

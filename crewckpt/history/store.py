"""The Store: a crewckpt store folder and the Python API over it (commit, read, refs, revisions, history,
retention and maintenance).

A store is named by a location (crewckpt.backends.registry): a folder (default ``./.ckpt``, the SQLite
backend), ``memory:NAME``, or a backend's URL. ``Store.open`` finds it from an explicit location,
``$CKPT_STORE``, or by walking up from the working directory for ``.ckpt`` like git.
"""

from __future__ import annotations

import builtins  # Store.list shadows the builtin inside the class body
import collections
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from crewckpt.backends import registry
from crewckpt.backends.base import Backend, IndexRow, ReflogEntry
from crewckpt.backends.registry import ENV_VAR
from crewckpt.backends.sqlite import DEFAULT_DIR
from crewckpt.errors import (
    AmbiguousRevision,
    BranchExists,
    CkptError,
    DecodeError,
    FormatVersionError,
    IntegrityError,
    MissingObject,
    StoreNotFound,
    UnknownRevision,
)
from crewckpt.format import objects as ob
from crewckpt.history import refnames, revisions
from crewckpt.history.commits import CommitInfo, PrunedCommit, from_commit, from_row, to_row
from crewckpt.history.limits import ReadBudget
from crewckpt.history.objectdb import ObjectDB
from crewckpt.history.snapshot import Splitter, assemble
from crewckpt.history.summary import json_size, summarize

if TYPE_CHECKING:  # maintenance modules load on first use: the read path stays quick to import
    from crewckpt.history.fsck import FsckReport
    from crewckpt.history.gc import GcReport, Progress
    from crewckpt.views.exporter import ExportReport
    from crewckpt.views.importer import ImportReport

_log = logging.getLogger("crewckpt")
__all__ = ["DEFAULT_DIR", "ENV_VAR", "Store", "find_store"]
_EPOCH = "gc_epoch"
AUTO_PACKS = 32  # per-checkpoint packs a writer merges into one (git's gc.autoPackLimit is 50)
LOOSE_MIN = 1 << 20  # bytes: bodies larger than this are stored loose, not packed


class Store:
    """A crewckpt store. Thread-safe for one process; many processes may share one store folder.

    Construct with :meth:`init`, :meth:`open` or :meth:`memory`; close with :meth:`close` or ``with``.
    """

    def __init__(self, backend: Backend, path: Path | None = None, *, location: str | None = None) -> None:
        """Wrap an open backend. ``path``: its store folder (local stores); ``location``: its canonical
        location (:func:`crewckpt.backends.registry.identity`), default the identity of ``path``; None for a
        store that cannot be reopened by location (anonymous memory)."""
        self.backend = backend
        self.path = path
        self.location = location if location is not None or path is None else registry.identity(path)
        self.objects = ObjectDB(backend)
        self._splitter = Splitter()
        self._known: set[bytes] = set()
        self._epoch = backend.meta_get(_EPOCH) or "0"
        self._wlock = threading.Lock()
        self._my_packs: builtins.list[tuple[bytes, builtins.list[bytes]]] = []  # merged every AUTO_PACKS
        self._last_pack: tuple[bytes, builtins.list[bytes]] | None = None
        self._check_version()
        dict_id = backend.meta_get("dictionary")
        if dict_id:
            try:  # only new writes use it (frames name their own dictionary): a damaged row must not block opening
                oid = bytes.fromhex(dict_id)
                self.objects.codec.use_dictionary(oid, self.objects.get(oid)[1])
            except (ValueError, TypeError, CkptError) as e:
                _log.warning("crewckpt: %s: ignoring the store's zstd dictionary (meta row %r: %s); new "
                             "checkpoints are written without it", path or "memory store", str(dict_id)[:80], e)

    # -- opening ---------------------------------------------------------------------------------------------

    @classmethod
    def init(cls, location: str | os.PathLike[str] = DEFAULT_DIR, *, private: bool = True) -> Store:
        """Create a store at ``location`` and open it.

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
        return cls(opened.backend, opened.folder, location=opened.location)

    @classmethod
    def open(cls, location: str | os.PathLike[str] | None = None, *, create: bool = False) -> Store:
        """Open an existing store: ``location`` (any form :meth:`init` takes), else ``$CKPT_STORE``, else the
        nearest ``.ckpt`` folder walking up from the working directory. Never creates or repairs anything,
        unless ``create``: then a missing store is created (private, as :meth:`init` does).

        Raises:
            StoreNotFound, CorruptStore, FormatVersionError (one-line messages naming the location).
            BadLocation, BackendMissing: the location names no installed backend.
        """
        opened = registry.open_backend(location, create=create, meta=_new_meta())
        return cls(opened.backend, opened.folder, location=opened.location)

    @classmethod
    def memory(cls) -> Store:
        """A new anonymous store held in memory (tests, scratch work); ``Store.init("memory:NAME")`` makes one
        that ``Store.open("memory:NAME")`` finds again in this process."""
        return cls.open("memory:")

    def _check_version(self) -> None:
        v = self.backend.meta_get("format_version")
        where = self.location or "memory store"
        if v is None or not v.isdigit():
            raise FormatVersionError(f"{where}: no format version recorded; this is not a crewckpt store")
        if int(v) > ob.FORMAT_VERSION:
            raise FormatVersionError(f"{where}: store format version {v} is newer than this crewckpt "
                                     f"understands ({ob.FORMAT_VERSION}); upgrade crewckpt")

    def close(self) -> None:
        """Close the backend."""
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------------------------

    def commit(self, doc: Any, *, branch: str = "main", parents: Sequence[str] | None = None,
               meta: dict[str, Any] | None = None, run_id: str | None = None, trigger: str | None = None,
               time_ns: int | None = None, alias: str | None = None) -> str:
        """Store ``doc`` as a new commit on ``branch`` in one backend transaction; returns its 64-hex id.

        Args:
            doc: any JSON value (dict key order kept).
            branch: branch whose ref moves to the new commit (validated before anything is written).
            parents: revisions of the parents; None = the branch's current tip (none if the branch is new);
                ``[]`` = a root commit.
            meta: JSON-serialisable metadata kept in the commit.
            run_id: the writer/lineage id; a ref ``refs/runs/<run_id>`` follows the run's last commit.
                Default: a new id per Store object.
            trigger: the CrewAI event type that caused the checkpoint, if any.
            time_ns: UTC wall time in ns (default now; imports pass the original time).
            alias: a foreign id for this commit (a CrewAI checkpoint id).
        Raises:
            BadRefName: bad branch or run id. UnknownRevision: a parent does not resolve. TypeError: not JSON.
            ValueError: NaN or Infinity (JSON has neither).
            StoreBusy: the store stayed locked. CkptError subclasses for damaged stores.
        """
        ref = refnames.branch_ref(branch)
        branch = ref[len(refnames.HEADS):]
        run = run_id or self._default_run
        rref = refnames.run_ref(run)
        parent_ids = None if parents is None else [bytes.fromhex(self.resolve(p)) for p in parents]
        meta_json = orjson.dumps(meta).decode() if meta else None
        summary = summarize(doc, json_size(doc))
        with self._wlock:
            for attempt in range(2):
                pending: dict[bytes, tuple[int, bytes]] = {}

                def put(kind: int, body: bytes, pending: dict[bytes, tuple[int, bytes]] = pending) -> bytes:
                    oid = ob.object_id(kind, body)
                    if oid not in self._known:
                        pending[oid] = (kind, body)
                    return oid

                root = self._splitter.split(doc, put)
                frames = self._frames(pending)
                try:
                    cid = self._land(frames, root, ref, rref, branch, run, parent_ids, trigger, summary,
                                     meta_json, alias, time_ns, full=attempt == 1)
                except _EpochChanged:
                    self._splitter.reset()
                    self._known.clear()
                    continue
                except BaseException:
                    self._splitter.discard()
                    raise
                self._splitter.keep()
                if len(self._known) > 2_000_000:
                    self._known.clear()
                self._known.update(pending)
                if self._last_pack is not None:
                    self._my_packs.append(self._last_pack)
                    if len(self._my_packs) >= AUTO_PACKS:
                        self._auto_repack()
                return cid.hex()
        raise AssertionError("unreachable: the second attempt re-puts everything and cannot race gc")

    def _auto_repack(self) -> None:
        """Merge this writer's per-checkpoint packs every AUTO_PACKS checkpoints (best effort: a failure only
        logs; a running gc postpones it)."""
        from crewckpt.history.gc import merge_packs
        try:
            if merge_packs(self, self._my_packs):
                self._my_packs = []
        except CkptError as e:
            _log.warning("crewckpt: automatic repack skipped: %s", e)

    def _frames(self, pending: dict[bytes, tuple[int, bytes]]) -> list[Any]:
        """A checkpoint's new objects go into one pack; big blobs stay loose (objects_format.md, 'Packs')."""
        small = [(o, k, b) for o, (k, b) in pending.items() if len(b) <= LOOSE_MIN]
        big = [self.objects.frame(k, b) for o, (k, b) in pending.items() if len(b) > LOOSE_MIN]
        self._last_pack = None
        if len(small) < 2:
            return big + [self.objects.frame(k, b) for _, k, b in small]
        packed = self.objects.pack(small)
        self._last_pack = (packed[0].oid, [o for o, _, _ in small])
        return big + packed

    def lookup_alias(self, alias: str) -> str | None:
        """The 64-hex commit id a foreign id (CrewAI checkpoint id) names, or None. No revision parsing."""
        a = self.backend.alias_get(alias)
        if a is None or (self.backend.index_get(a) is None and not self.backend.has_many([a])):
            return None  # the commit was collected (gc also drops such aliases)
        return a.hex()

    @property
    def _default_run(self) -> str:
        run = getattr(self, "_run", None)
        if run is None:
            run = self._run = "w-" + uuid.uuid4().hex[:12]
        return run

    def _land(self, frames: list[Any], root: ob.Link, ref: str, rref: str, branch: str, run: str,
              parent_ids: list[bytes] | None, trigger: str | None, summary: ob.Summary,
              meta_json: str | None, alias: str | None, time_ns: int | None, full: bool) -> bytes:
        """One checkpoint, one transaction. ``full``: every referenced object is in ``frames`` (caches were
        just dropped), so it is safe whatever gc does meanwhile: all get ``touched = now``."""
        with self.backend.transaction() as txn:
            now = time.time_ns()  # read inside the transaction, i.e. after any gc epoch bump it could miss
            epoch = txn.meta_get(_EPOCH) or "0"
            if epoch != self._epoch:
                self._epoch = epoch
                if not full:
                    raise _EpochChanged
            tip = txn.get_ref(ref)
            parents = parent_ids if parent_ids is not None else ([tip] if tip else [])
            seq = txn.counter_next("seq")
            c = ob.Commit(root, tuple(parents), now if time_ns is None else time_ns, seq, branch, run, trigger,
                          summary, meta_json, alias)
            cobj = self.objects.frame(ob.COMMIT, c.encode())
            txn.put_many([*frames, cobj], now)
            txn.set_ref_if_equals(ref, tip, cobj.oid)
            txn.reflog_append(ReflogEntry(ref, tip, cobj.oid, now, f"commit: {trigger or 'manual'}"))
            rtip = txn.get_ref(rref)
            txn.set_ref_if_equals(rref, rtip, cobj.oid)
            txn.index_add(to_row(cobj.oid, c))
            if alias:
                txn.alias_set(alias, cobj.oid)
            return cobj.oid

    # -- reading ---------------------------------------------------------------------------------------------

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
        """Metadata of one commit (from the commit index; from the object for a pruned-but-present commit)."""
        return self._info(bytes.fromhex(self.resolve(rev)))

    def _info(self, cid: bytes) -> CommitInfo:
        row = self.backend.index_get(cid)
        if row is not None:
            return self._row_info(row)
        return from_commit(cid, self.objects.commit(cid), live=False)

    def _row_info(self, row: IndexRow) -> CommitInfo:
        """CommitInfo of an index row; a damaged row (a cache) is read from its commit object instead, and
        raises the row's one-line DecodeError only when the object cannot be read either."""
        try:
            return from_row(row)
        except DecodeError as e:
            try:
                return from_commit(row.id, self.objects.commit(row.id), live=True)
            except CkptError:
                raise e from None

    def _parents(self, cid: bytes) -> tuple[bytes, ...]:
        row = self.backend.index_get(cid)
        if row is not None:
            return row.parents
        try:
            return self.objects.commit(cid).parents
        except MissingObject:
            raise UnknownRevision(f"commit {cid.hex()[:12]} was pruned; its parents are unknown") from None

    def _seq(self, cid: bytes) -> int | None:
        row = self.backend.index_get(cid)
        if row is not None:
            return row.seq
        try:
            return self.objects.commit(cid).seq
        except MissingObject:
            return None

    def _check_edge(self, child: bytes, parent: bytes) -> None:
        """A parent is written before its child, so its seq is lower: an edge breaking that (a self-parent, or
        part of a parent cycle, possible only in a hand-made or damaged commit index) raises IntegrityError
        naming the child, instead of letting a walk loop forever."""
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
                ps = self._parents(cid)
                if parent_no <= len(ps):
                    self._check_edge(cid, ps[parent_no - 1])
                if len(ps) < parent_no:
                    if not ps:
                        raise UnknownRevision(f"revision {rev!r} goes past the first checkpoint: {r.base} has only "
                                              f"{walked} ancestor(s) that way")
                    raise UnknownRevision(f"revision {rev!r}: commit {cid.hex()[:12]} has {len(ps)} parent(s)")
                cid = ps[parent_no - 1]
                walked += 1
        if self.backend.index_get(cid) is None and not self.backend.has_many([cid]):
            raise UnknownRevision(f"revision {rev!r}: commit {cid.hex()[:12]} was pruned and collected")
        return cid.hex()

    def _base(self, r: revisions.Revision) -> bytes:
        b = r.base
        if r.reflog is not None:
            ref = b if b.startswith("refs/") else refnames.HEADS + b
            log = self.backend.reflog(ref)
            news = [e.new for e in log if e.new is not None]
            if r.reflog >= len(news):
                raise UnknownRevision(f"revision {r.text!r}: {b} has only {len(news)} reflog entries")
            return news[-1 - r.reflog]
        if b in ("HEAD", "latest"):
            last = self.backend.index_last()
            if last is None:
                raise UnknownRevision(f"revision {b!r}: the store has no commits yet")
            return last
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
                return t
        else:
            t = self.backend.get_ref(refnames.HEADS + b)
            if t:
                return t
        a = self.backend.alias_get(b)
        if a:
            return a
        if revisions.is_hex(b):
            cands = self.backend.index_prefix(b.lower(), 20)
            if len(cands) == 1:
                return cands[0]
            if len(cands) > 1:
                lines = "; ".join(f"{c.hex()[:12]} ({self._info(c).time:%Y-%m-%d %H:%M:%S} on "
                                  f"{self._info(c).branch})" for c in cands[:10])
                raise AmbiguousRevision(f"short id {b!r} is ambiguous: {lines}; give more characters")
        hint = ("; short ids need at least 4 hex digits" if len(b) < revisions.MIN_PREFIX
                and all(c in "0123456789abcdefABCDEF" for c in b) else "; see `ckpt list`")
        shown = r.text if len(r.text) <= 80 else r.text[:77] + "..."
        raise UnknownRevision(f"unknown revision {shown!r}: not a commit id, branch or checkpoint id{hint}")

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
            if child is not None and info.seq >= child.seq:
                raise _cycle(bytes.fromhex(child.id), cid)
            if cid in seen:  # unreachable while seqs decrease; kept so no index can make this loop
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
        """A branch's reflog, oldest first."""
        return self.backend.reflog(refnames.branch_ref(branch))

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
        """Create branch ``name`` at ``rev``; returns the commit id. Raises BadRefName, BranchExists."""
        ref = refnames.branch_ref(name)
        cid = bytes.fromhex(self.resolve(rev))
        with self.backend.transaction() as txn:
            if txn.get_ref(ref) is not None:
                raise BranchExists(f"branch {name!r} already exists; pick another name or delete it first")
            txn.set_ref_if_equals(ref, None, cid)
            txn.reflog_append(ReflogEntry(ref, None, cid, time.time_ns(), f"branch: created from {rev}"))
        return cid.hex()

    def delete_branch(self, name: str) -> None:
        """Delete a branch ref and its reflog (its commits stay until pruned). Raises UnknownRevision."""
        ref = refnames.branch_ref(name)
        with self.backend.transaction() as txn:
            cur = txn.get_ref(ref)
            if cur is None:
                raise UnknownRevision(f"no branch named {name!r}; see `ckpt branch`")
            txn.set_ref_if_equals(ref, cur, None)
            txn.reflog_delete(ref)

    def rename_branch(self, old: str, new: str) -> None:
        """Rename a branch: its ref, reflog and the branch of its live commits. Raises BranchExists,
        UnknownRevision, BadRefName."""
        oref, nref = refnames.branch_ref(old), refnames.branch_ref(new)
        with self.backend.transaction() as txn:
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
            txn.reflog_append(ReflogEntry(nref, cur, cur, time.time_ns(), f"branch: renamed {old} to {new}"))
            txn.index_rebranch(oref[len(refnames.HEADS):], nref[len(refnames.HEADS):])

    # -- retention and maintenance ----------------------------------------------------------------------------

    def prune(self, branch: str, *, keep: int | None = None, older_than_ns: int | None = None,
              dry_run: bool = False) -> builtins.list[str]:
        """Remove old commits of one branch from the live set; returns the removed ids (oldest first).

        A commit goes when it is outside the ``keep`` newest by sequence number (a future-dated commit does
        not count as newer) and, if ``older_than_ns`` is given, older than that many ns. Other branches and
        any commit a branch ref points at are untouched. Space returns with :meth:`gc`.

        Raises:
            ValueError: neither ``keep`` nor ``older_than_ns``, or ``keep < 1``. BadRefName.
        """
        if keep is None and older_than_ns is None:
            raise ValueError("prune needs keep=N or older_than_ns=NS")
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        b = refnames.check_branch(branch)
        with self.backend.transaction() as txn:
            rows = txn.index_rows(b)
            tips = set(txn.refs(refnames.HEADS).values())
            cut = time.time_ns() - older_than_ns if older_than_ns is not None else None
            old = rows[:-keep] if keep is not None else rows
            gone = [r for r in old if r.id not in tips and (cut is None or r.time_ns < cut)]
            if dry_run or not gone:
                return [r.id.hex() for r in gone]
            ids = {r.id for r in gone}
            txn.index_remove(ids)
            for name, target in txn.refs(refnames.RUNS).items():
                if target in ids:
                    txn.set_ref_if_equals(name, target, None)
        return [r.id.hex() for r in gone]

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
        return gc(self, dry_run=dry_run, grace_ns=int(grace_s * 1e9), progress=progress, wait_s=wait_s)

    def fsck(self, full: bool = False, progress: Progress | None = None) -> FsckReport:
        """Check the store (quick: live commits' graphs; full: every object re-hashed). Never raises for damage:
        the report lists broken objects and the commits that need them. See :mod:`crewckpt.history.fsck`."""
        from crewckpt.history.fsck import fsck
        return fsck(self, full=full, progress=progress)

    def import_crewai(self, path: str | os.PathLike[str], *, branch_prefix: str | None = None,
                      branch: str | None = None, progress: Progress | None = None) -> ImportReport:
        """Import a CrewAI JSON folder or file, or a CrewAI SQLite database (JSONB or text rows), as commits
        with their CrewAI ids as aliases; deterministic and idempotent. See :mod:`crewckpt.views.importer`."""
        from crewckpt.views.importer import import_crewai
        return import_crewai(self, Path(path), branch_prefix=branch_prefix, branch=branch, progress=progress)

    def export_crewai(self, dest: str | os.PathLike[str], fmt: str = "json", *, revs: Sequence[str] | None = None,
                      branch: str | None = None, strip_prefix: str | None = None) -> ExportReport:
        """Write commits in CrewAI's own layout (``fmt`` "json" folder or "sqlite" database) so CrewAI reads
        them. See :mod:`crewckpt.views.exporter`."""
        from crewckpt.views.exporter import export_crewai
        return export_crewai(self, Path(dest), fmt, revs=revs, branch=branch, strip_prefix=strip_prefix)

    def stats(self) -> dict[str, Any]:
        """Store figures: ``objects`` (count), ``body_bytes`` (uncompressed bodies, packs not counted twice),
        ``stored_bytes`` (frames at rest), ``logical_bytes`` (live commits' documents as JSON), ``file_bytes``
        (database + WAL on disk), the ratios between them, and per-branch commit counts and logical bytes."""
        n, _, stored = self.backend.object_stats()
        # packs hold copies of their members' bodies: count each object's body once
        body = sum(m.size for m in self.backend.iter_objects() if m.kind != ob.PACK)
        rows = self.backend.index_rows()
        per: dict[str, dict[str, int]] = {}
        for r in rows:
            s = self._row_info(r).summary
            d = per.setdefault(r.branch, {"commits": 0, "logical_bytes": 0})
            d["commits"] += 1
            d["logical_bytes"] += s.logical_bytes
        for name in self.branches():  # branches made from existing commits own none of their own yet
            per.setdefault(name, {"commits": 0, "logical_bytes": 0})
        logical = sum(d["logical_bytes"] for d in per.values())
        return {"objects": n, "body_bytes": body, "stored_bytes": stored, "commits": len(rows),
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
        with self.backend.transaction() as txn:
            txn.put_many([d], time.time_ns())
            txn.meta_set("dictionary", d.oid.hex())
        self.objects.codec.use_dictionary(d.oid, data)
        return d.oid.hex()


def _cycle(child: bytes, parent: bytes | None = None) -> IntegrityError:
    """The one-line error for a commit graph that loops (self-parent, cycle in the commit index)."""
    if parent is None or parent == child:
        why = ("it is its own ancestor: the commit graph loops" if parent is None
               else "it lists itself as its own parent")
    else:
        why = f"its parent {parent.hex()[:12]} is not older than it (a parent cycle in the commit index)"
    return IntegrityError(child.hex(), why)


class _EpochChanged(Exception):
    """A gc ran since this writer's caches were filled: redo the split without them."""


def _new_meta() -> dict[str, str]:
    """The meta rows a new store is created with."""
    return {"format_version": str(ob.FORMAT_VERSION), _EPOCH: "0"}


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

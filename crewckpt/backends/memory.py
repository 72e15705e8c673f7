"""In-memory backend: the twin of the SQLite backend for tests (dulwich keeps one for every store).

A transaction works on copies of the small tables and the object map, and publishes them on success, so a
failed transaction leaves nothing behind. Several handles (:meth:`MemoryBackend.handle`) may share one state,
as several connections share one database file.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
from collections.abc import Hashable, Iterable, Iterator, Mapping

from crewckpt.backends.base import (
    HEAD_BYTES,
    Capabilities,
    IndexRow,
    ObjectMeta,
    ReflogEntry,
    StoredObject,
    TransactionalBackend,
    Txn,
    ref_conflict,
)
from crewckpt.backends.registry import Location, Opened, Opener
from crewckpt.errors import StoreExists, StoreNotFound


class _State:
    def __init__(self) -> None:
        self.objects: dict[bytes, tuple[StoredObject, int]] = {}
        self.refs: dict[str, bytes] = {}
        self.symrefs: dict[str, str] = {}
        self.reflog: list[ReflogEntry] = []
        self.index: dict[bytes, IndexRow] = {}
        self.aliases: dict[str, bytes] = {}
        self.counters: dict[str, int] = {}
        self.meta: dict[str, str] = {}


class _Box:
    """What handles share: the published state, the transaction lock and the named locks."""

    def __init__(self) -> None:
        self.state = _State()
        self.lock = threading.RLock()
        self.named: dict[str, threading.Lock] = {}


class _MemReader:
    _s: _State

    def get_many(self, oids: Iterable[bytes]) -> dict[bytes, StoredObject]:
        objs = self._s.objects
        return {o: objs[o][0] for o in oids if o in objs}

    def has_many(self, oids: Iterable[bytes]) -> set[bytes]:
        return {o for o in oids if o in self._s.objects}

    def iter_objects(self, prefix: bytes = b"") -> Iterator[ObjectMeta]:
        for oid, (o, touched) in list(self._s.objects.items()):
            if oid.startswith(prefix):
                yield ObjectMeta(oid, o.kind, o.size, touched, o.frame[:HEAD_BYTES], len(o.frame))

    def get_ref(self, name: str) -> bytes | None:
        return self._s.refs.get(name)

    def refs(self, prefix: str = "") -> dict[str, bytes]:
        return {k: v for k, v in sorted(self._s.refs.items()) if k.startswith(prefix)}

    def reflog(self, ref: str) -> list[ReflogEntry]:
        return [e for e in self._s.reflog if e.ref == ref]

    def get_symref(self, name: str) -> str | None:
        return self._s.symrefs.get(name)

    def index_get(self, cid: bytes) -> IndexRow | None:
        return self._s.index.get(cid)

    def index_rows(self, branch: str | None = None) -> list[IndexRow]:
        rows = [r for r in self._s.index.values() if branch is None or r.branch == branch]
        return sorted(rows, key=lambda r: (r.seq, r.time_ns, r.id))

    def index_children(self, cids: Iterable[bytes]) -> list[IndexRow]:
        want = set(cids)
        rows = [r for r in self._s.index.values() if not want.isdisjoint(r.parents)]
        return sorted(rows, key=lambda r: (r.seq, r.time_ns, r.id))

    def index_last(self) -> bytes | None:
        return max(self._s.index.values(), key=lambda r: r.seq).id if self._s.index else None

    def alias_get(self, alias: str) -> bytes | None:
        return self._s.aliases.get(alias)

    def meta_get(self, key: str) -> str | None:
        return self._s.meta.get(key)


class MemoryTxn(_MemReader, Txn):
    """Works on a private copy of the state; :class:`MemoryBackend` swaps it in on success."""

    def __init__(self, state: _State) -> None:
        self._s = state

    def put_many(self, objs: Iterable[StoredObject], now_ns: int) -> int:
        new = 0
        for o in objs:
            old = self._s.objects.get(o.oid)
            if old is None:
                new += 1
                self._s.objects[o.oid] = (o, now_ns)
            else:
                self._s.objects[o.oid] = (old[0], max(old[1], now_ns))
        return new

    def reframe(self, frames: Iterable[tuple[bytes, bytes]]) -> int:
        n = 0
        for oid, frame in frames:
            old = self._s.objects.get(oid)
            if old is not None:
                self._s.objects[oid] = (dataclasses.replace(old[0], frame=frame), old[1])
                n += 1
        return n

    def delete_objects(self, oids: Iterable[bytes], touched_before_ns: int) -> int:
        n = 0
        for oid in oids:
            old = self._s.objects.get(oid)
            if old is not None and old[1] < touched_before_ns:
                del self._s.objects[oid]
                n += 1
        return n

    def set_ref_if_equals(self, name: str, old: bytes | None, new: bytes | None) -> None:
        cur = self._s.refs.get(name)
        if cur != old:
            raise ref_conflict(name, old, cur)
        if new is None:
            self._s.refs.pop(name, None)
        else:
            self._s.refs[name] = new

    def reflog_append(self, entry: ReflogEntry) -> None:
        self._s.reflog.append(entry)

    def reflog_delete(self, ref: str) -> None:
        self._s.reflog = [e for e in self._s.reflog if e.ref != ref]

    def set_symref(self, name: str, target: str) -> None:
        self._s.symrefs[name] = target

    def index_add(self, row: IndexRow) -> None:
        self._s.index.setdefault(row.id, row)

    def index_remove(self, ids: Iterable[bytes]) -> int:
        return sum(self._s.index.pop(i, None) is not None for i in ids)

    def index_rebranch(self, old: str, new: str) -> None:
        for k, r in list(self._s.index.items()):
            if r.branch == old:
                self._s.index[k] = dataclasses.replace(r, branch=new)

    def index_renumber(self, seqs: Mapping[bytes, int]) -> int:
        n = 0
        for cid, seq in seqs.items():
            r = self._s.index.get(cid)
            if r is not None and r.seq != seq:
                self._s.index[cid] = dataclasses.replace(r, seq=seq)
                n += 1
        return n

    def alias_set(self, alias: str, cid: bytes) -> None:
        self._s.aliases.setdefault(alias, cid)

    def alias_forget(self, cids: Iterable[bytes]) -> int:
        gone = set(cids)
        drop = [a for a, c in self._s.aliases.items() if c in gone]
        for a in drop:
            del self._s.aliases[a]
        return len(drop)

    def counter_next(self, name: str) -> int:
        floor = max((r.seq for r in self._s.index.values()), default=0) if name == "seq" else 0
        self._s.counters[name] = max(self._s.counters.get(name, 0), floor) + 1
        return self._s.counters[name]

    def meta_set(self, key: str, value: str) -> None:
        self._s.meta[key] = value


class MemoryBackend(_MemReader, TransactionalBackend):
    """A backend held in process memory; same contract as SQLite, nothing persists past the last handle."""

    capabilities = Capabilities(transactions=True, locks=True, cheap_listing=True, reframe=True, shared=False,
                                persistent=False)

    def __init__(self, _box: _Box | None = None) -> None:
        self._box = _box or _Box()

    @property
    def _s(self) -> _State:  # type: ignore[override]
        return self._box.state

    def handle(self) -> MemoryBackend:
        """Another handle on the same state (as a second connection to one database)."""
        return MemoryBackend(self._box)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Txn]:
        box = self._box
        with box.lock:
            cur = box.state
            work = copy.copy(cur)
            work.objects = dict(cur.objects)
            work.refs, work.reflog = dict(cur.refs), list(cur.reflog)
            work.symrefs = dict(cur.symrefs)
            work.index, work.aliases = dict(cur.index), dict(cur.aliases)
            work.counters, work.meta = dict(cur.counters), dict(cur.meta)
            yield MemoryTxn(work)
            box.state = work

    @contextlib.contextmanager
    def lock(self, name: str = "gc", wait_s: float = 0.0) -> Iterator[bool]:
        with self._box.lock:
            lk = self._box.named.setdefault(name, threading.Lock())
        got = lk.acquire(timeout=wait_s) if wait_s > 0 else lk.acquire(blocking=False)
        try:
            yield got
        finally:
            if got:
                lk.release()

    def close(self) -> None:
        """Nothing to release."""


# -- locations: memory: and memory:NAME (crewckpt.backends.registry) ----------------------------------------

_named: dict[str, MemoryBackend] = {}
_named_lock = threading.Lock()


def forget(name: str, backend: MemoryBackend | None = None) -> None:
    """Drop the in-memory store ``memory:NAME`` from this process (only if it is ``backend``, when given):
    what a failed ``clone`` into it created goes away."""
    with _named_lock:
        if name in _named and (backend is None or _named[name] is backend):
            del _named[name]


class MemoryOpener(Opener):
    """``memory:NAME``: one in-memory store per name per process, kept until the process ends (every open
    shares it); ``memory:``: a new anonymous store at each open, which cannot be reopened."""

    label = "in-memory"

    def identity(self, loc: Location) -> str:
        return f"memory:{loc.target}"

    def always_new(self, loc: Location) -> bool:
        return not loc.target

    def open(self, loc: Location) -> Opened:
        b = _named.get(loc.target)
        if b is None:
            raise StoreNotFound(f"{loc.text}: no in-memory store named {loc.target!r} in this process; create "
                                f"it with Store.init({loc.text!r})")
        return Opened(b, self.identity(loc))

    def create(self, loc: Location, meta: Mapping[str, str], *, private: bool) -> Opened:
        b = MemoryBackend()
        with b.transaction() as txn:
            for k, v in meta.items():
                txn.meta_set(k, v)
        if not loc.target:
            return Opened(b, None)
        with _named_lock:
            if loc.target in _named:
                raise StoreExists(f"{loc.text}: an in-memory store of that name already exists in this process; "
                                  f"open it with Store.open({loc.text!r})")
            _named[loc.target] = b
        return Opened(b, self.identity(loc))

    def has_store(self, loc: Location) -> bool:
        return bool(loc.target) and loc.target in _named

    def occupied(self, loc: Location) -> bool:
        return self.has_store(loc)

    def instance(self, loc: Location) -> Hashable | None:
        b = _named.get(loc.target)
        return None if b is None else id(b)


OPENER = MemoryOpener()

"""In-memory backend: the twin of the SQLite backend for tests (dulwich keeps one for every store).

A transaction works on copies of the small tables and a journal of object inserts/deletes, and publishes them
on success, so a failed transaction leaves nothing behind (contract point 2).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence

from crewckpt.backends.base import HEAD_BYTES, Backend, IndexRow, ObjectMeta, ReflogEntry, StoredObject, Txn
from crewckpt.backends.registry import Location, Opened, Opener
from crewckpt.errors import RefConflict, StoreExists, StoreNotFound


class _State:
    def __init__(self) -> None:
        self.objects: dict[bytes, tuple[StoredObject, int]] = {}
        self.refs: dict[str, bytes] = {}
        self.reflog: list[ReflogEntry] = []
        self.index: dict[bytes, IndexRow] = {}
        self.aliases: dict[str, bytes] = {}
        self.counters: dict[str, int] = {}
        self.meta: dict[str, str] = {}


class _MemReader:
    _s: _State

    def get_many(self, oids: Iterable[bytes]) -> dict[bytes, StoredObject]:
        return {o: self._s.objects[o][0] for o in oids if o in self._s.objects}

    def get_prefix(self, prefix: bytes, kind: int) -> list[StoredObject]:
        return [o for oid, (o, _) in self._s.objects.items() if oid.startswith(prefix) and o.kind == kind]

    def has_many(self, oids: Iterable[bytes]) -> set[bytes]:
        return {o for o in oids if o in self._s.objects}

    def iter_objects(self) -> Iterator[ObjectMeta]:
        for oid, (o, touched) in list(self._s.objects.items()):
            yield ObjectMeta(oid, o.kind, o.size, touched, o.frame[:HEAD_BYTES])

    def object_stats(self) -> tuple[int, int, int]:
        objs = [o for o, _ in self._s.objects.values()]
        return len(objs), sum(o.size for o in objs), sum(len(o.frame) for o in objs)

    def get_ref(self, name: str) -> bytes | None:
        return self._s.refs.get(name)

    def refs(self, prefix: str = "") -> dict[str, bytes]:
        return {k: v for k, v in sorted(self._s.refs.items()) if k.startswith(prefix)}

    def reflog(self, ref: str) -> list[ReflogEntry]:
        return [e for e in self._s.reflog if e.ref == ref]

    def index_get(self, cid: bytes) -> IndexRow | None:
        return self._s.index.get(cid)

    def index_rows(self, branch: str | None = None) -> list[IndexRow]:
        rows = [r for r in self._s.index.values() if branch is None or r.branch == branch]
        return sorted(rows, key=lambda r: (r.seq, r.time_ns, r.id))

    def index_last(self) -> bytes | None:
        return max(self._s.index.values(), key=lambda r: r.seq).id if self._s.index else None

    def index_prefix(self, hex_prefix: str, limit: int = 20) -> list[bytes]:
        return sorted(i for i in self._s.index if i.hex().startswith(hex_prefix))[:limit]

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

    def touch(self, oids: Sequence[bytes], now_ns: int) -> set[bytes]:
        missing = set()
        for oid in oids:
            old = self._s.objects.get(oid)
            if old is None:
                missing.add(oid)
            else:
                self._s.objects[oid] = (old[0], now_ns)
        return missing

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
            raise RefConflict(f"ref {name} moved (expected {old.hex() if old else 'nothing'}, found "
                              f"{cur.hex() if cur else 'nothing'}); re-read it and retry")
        if new is None:
            self._s.refs.pop(name, None)
        else:
            self._s.refs[name] = new

    def reflog_append(self, entry: ReflogEntry) -> None:
        self._s.reflog.append(entry)

    def reflog_delete(self, ref: str) -> None:
        self._s.reflog = [e for e in self._s.reflog if e.ref != ref]

    def index_add(self, row: IndexRow) -> None:
        self._s.index.setdefault(row.id, row)

    def index_remove(self, ids: Iterable[bytes]) -> int:
        return sum(self._s.index.pop(i, None) is not None for i in ids)

    def index_rebranch(self, old: str, new: str) -> None:
        for k, r in list(self._s.index.items()):
            if r.branch == old:
                self._s.index[k] = dataclasses.replace(r, branch=new)

    def alias_set(self, alias: str, cid: bytes) -> None:
        self._s.aliases.setdefault(alias, cid)

    def alias_forget(self, cids: Iterable[bytes]) -> int:
        gone = set(cids)
        drop = [a for a, c in self._s.aliases.items() if c in gone]
        for a in drop:
            del self._s.aliases[a]
        return len(drop)

    def counter_next(self, name: str) -> int:
        self._s.counters[name] = self._s.counters.get(name, 0) + 1
        return self._s.counters[name]

    def meta_set(self, key: str, value: str) -> None:
        self._s.meta[key] = value


class MemoryBackend(_MemReader, Backend):
    """A backend held in process memory; same contract as SQLite, nothing persists."""

    def __init__(self) -> None:
        self._s = _State()
        self._lock = threading.RLock()
        self._gc = threading.Lock()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Txn]:
        with self._lock:
            work = copy.copy(self._s)
            work.objects = dict(self._s.objects)
            work.refs, work.reflog = dict(self._s.refs), list(self._s.reflog)
            work.index, work.aliases = dict(self._s.index), dict(self._s.aliases)
            work.counters, work.meta = dict(self._s.counters), dict(self._s.meta)
            yield MemoryTxn(work)
            self._s = work

    @contextlib.contextmanager
    def gc_lock(self, wait_s: float = 0.0) -> Iterator[bool]:
        got = self._gc.acquire(timeout=wait_s) if wait_s > 0 else self._gc.acquire(blocking=False)
        try:
            yield got
        finally:
            if got:
                self._gc.release()

    def reclaim(self, compact: bool = False) -> None:
        """Nothing to give back: freed objects are already garbage for Python."""

    def close(self) -> None:
        """Nothing to release."""


# -- locations: memory: and memory:NAME (crewckpt.backends.registry) ----------------------------------------

_named: dict[str, MemoryBackend] = {}
_named_lock = threading.Lock()


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

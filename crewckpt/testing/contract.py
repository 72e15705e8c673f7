"""The backend contract suite (docs/backends.md names the test that checks each rule).

A backend runs it by subclassing the test classes and overriding one pytest fixture::

    import pytest
    from crewckpt.testing.contract import BackendContract, BackendFactory, StoreContract

    class MyFactory(BackendFactory):
        def create(self): return MyBackend.create(...)      # a new, empty store
        def reopen(self, backend): return MyBackend.open(...)  # optional: a second handle on the same store
        def process_opener(self, backend): return ("mypkg.backend:open_backend", "<location>")  # optional

    class TestMyBackend(BackendContract, StoreContract):
        @pytest.fixture
        def backend_factory(self, tmp_path):
            return MyFactory(tmp_path)

``BackendContract`` checks the verbs of each part (objects, refs, index, meta), the optional verbs the
backend declares in its :class:`~crewckpt.backends.base.Capabilities`, and concurrency (threads always;
processes when the backend is ``shared`` and the factory gives a ``process_opener``). ``StoreContract``
runs the Store on the backend: the stateful model test (random commit / fork / branch / prune / gc /
reopen sequences against a plain model), the write-order and crash checks, gc's safety rules and the index
rebuild. Tests whose name ends in ``_long`` are the long variants (this repository marks them slow).

Needs pytest and hypothesis, never crewai.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import importlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from crewckpt.backends.base import (
    Backend,
    Capabilities,
    IndexRow,
    ObjectMeta,
    ReflogEntry,
    StoredObject,
    writing,
)
from crewckpt.errors import BranchExists, BranchInUse, GcAborted, RefConflict, UnknownRevision
from crewckpt.format import objects as ob

# -- factories ------------------------------------------------------------------------------------------------


class BackendFactory(abc.ABC):
    """How the suite gets backends: the one thing a backend under test provides."""

    @abc.abstractmethod
    def create(self) -> Backend:
        """A new, empty store (no meta rows); called many times per test session."""

    def reopen(self, backend: Backend) -> Backend | None:
        """A second, independent handle on the store ``backend`` is open on (as another connection or another
        process would see it), or None when there is no such thing."""
        return None

    def process_opener(self, backend: Backend) -> tuple[str, str] | None:
        """``("module:callable", argument)``: a new Python process opens the same store with
        ``callable(argument)``; None when the store cannot be shared between processes."""
        return None


class MemoryFactory(BackendFactory):
    """The in-memory backend; ``reopen`` gives another handle on the same state."""

    def create(self) -> Backend:
        from crewckpt.backends.memory import MemoryBackend
        return MemoryBackend()

    def reopen(self, backend: Backend) -> Backend | None:
        from crewckpt.backends.memory import MemoryBackend
        return backend.handle() if isinstance(backend, MemoryBackend) else None


class SqliteFactory(BackendFactory):
    """SQLite stores in numbered folders under ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._n = 0

    def create(self) -> Backend:
        from crewckpt.backends.sqlite import SqliteBackend
        self._n += 1
        folder = self.root / f"store{self._n}"
        folder.mkdir(parents=True)
        return SqliteBackend.create(folder)

    def reopen(self, backend: Backend) -> Backend | None:
        from crewckpt.backends.sqlite import SqliteBackend
        return SqliteBackend(backend.folder) if isinstance(backend, SqliteBackend) else None

    def process_opener(self, backend: Backend) -> tuple[str, str] | None:
        from crewckpt.backends.sqlite import SqliteBackend
        return ("crewckpt.backends.sqlite:SqliteBackend", str(backend.folder)) \
            if isinstance(backend, SqliteBackend) else None


class WithoutTransactions(Backend):
    """Another backend seen without its transactions, locks and reframe: every verb atomic on its own.
    Runs the Store's and gc's non-transactional paths (the ordering invariants) on any backend."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        c = inner.capabilities
        self.capabilities = Capabilities(transactions=False, locks=False, cheap_listing=c.cheap_listing,
                                         reframe=False, shared=c.shared, persistent=c.persistent,
                                         gc_grace_s=c.gc_grace_s)

    def get_many(self, oids: Iterable[bytes]) -> dict[bytes, StoredObject]:
        return self.inner.get_many(oids)

    def has_many(self, oids: Iterable[bytes]) -> set[bytes]:
        return self.inner.has_many(oids)

    def put_many(self, objs: Iterable[StoredObject], now_ns: int) -> int:
        return self.inner.put_many(objs, now_ns)

    def iter_objects(self, prefix: bytes = b"") -> Iterator[ObjectMeta]:
        return self.inner.iter_objects(prefix)

    def delete_objects(self, oids: Iterable[bytes], touched_before_ns: int) -> int:
        return self.inner.delete_objects(oids, touched_before_ns)

    def get_prefix(self, prefix: bytes, kind: int) -> list[StoredObject]:
        return self.inner.get_prefix(prefix, kind)

    def get_ref(self, name: str) -> bytes | None:
        return self.inner.get_ref(name)

    def refs(self, prefix: str = "") -> dict[str, bytes]:
        return self.inner.refs(prefix)

    def set_ref_if_equals(self, name: str, old: bytes | None, new: bytes | None) -> None:
        self.inner.set_ref_if_equals(name, old, new)

    def reflog(self, ref: str) -> list[ReflogEntry]:
        return self.inner.reflog(ref)

    def reflog_append(self, entry: ReflogEntry) -> None:
        self.inner.reflog_append(entry)

    def reflog_delete(self, ref: str) -> None:
        self.inner.reflog_delete(ref)

    def get_symref(self, name: str) -> str | None:
        return self.inner.get_symref(name)

    def set_symref(self, name: str, target: str) -> None:
        self.inner.set_symref(name, target)

    def index_get(self, cid: bytes) -> IndexRow | None:
        return self.inner.index_get(cid)

    def index_rows(self, branch: str | None = None) -> list[IndexRow]:
        return self.inner.index_rows(branch)

    def index_add(self, row: IndexRow) -> None:
        self.inner.index_add(row)

    def index_remove(self, ids: Iterable[bytes]) -> int:
        return self.inner.index_remove(ids)

    def index_rebranch(self, old: str, new: str) -> None:
        self.inner.index_rebranch(old, new)

    def index_children(self, cids: Iterable[bytes]) -> list[IndexRow]:
        return self.inner.index_children(cids)

    def index_renumber(self, seqs: Mapping[bytes, int]) -> int:
        return self.inner.index_renumber(seqs)

    def index_last(self) -> bytes | None:
        return self.inner.index_last()

    def index_prefix(self, hex_prefix: str, limit: int = 20) -> list[bytes]:
        return self.inner.index_prefix(hex_prefix, limit)

    def alias_get(self, alias: str) -> bytes | None:
        return self.inner.alias_get(alias)

    def alias_set(self, alias: str, cid: bytes) -> None:
        self.inner.alias_set(alias, cid)

    def alias_forget(self, cids: Iterable[bytes]) -> int:
        return self.inner.alias_forget(cids)

    def counter_next(self, name: str) -> int:
        return self.inner.counter_next(name)

    def meta_get(self, key: str) -> str | None:
        return self.inner.meta_get(key)

    def meta_set(self, key: str, value: str) -> None:
        self.inner.meta_set(key, value)

    def close(self) -> None:
        self.inner.close()


class WithoutTransactionsFactory(BackendFactory):
    """``factory``'s backends seen through :class:`WithoutTransactions`."""

    def __init__(self, factory: BackendFactory) -> None:
        self.factory = factory

    def create(self) -> Backend:
        return WithoutTransactions(self.factory.create())

    def reopen(self, backend: Backend) -> Backend | None:
        assert isinstance(backend, WithoutTransactions)
        inner = self.factory.reopen(backend.inner)
        return None if inner is None else WithoutTransactions(inner)


WRITE_VERBS = ("put_many", "delete_objects", "set_ref_if_equals", "reflog_append", "reflog_delete", "set_symref",
               "index_add", "index_remove", "index_rebranch", "index_renumber", "alias_set", "alias_forget",
               "counter_next", "meta_set")


class _Crash(Exception):
    """Raised by :class:`Faulty` in place of a write (the process 'dies' there)."""


class Faulty(WithoutTransactions):
    """A non-transactional view that records every write verb (``calls``: ``(verb, args)``), can raise
    :class:`_Crash` instead of the ``crash_at``-th write (0-based), and can hide objects from reads while
    still listing them (``hidden``)."""

    def __init__(self, inner: Backend, crash_at: int | None = None) -> None:
        super().__init__(inner)
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.crash_at = crash_at
        self.hidden: set[bytes] = set()
        self.before: Callable[[str, tuple[Any, ...]], None] | None = None  # runs before each write

    def _write(self, verb: str, *args: Any) -> Any:
        if self.crash_at is not None and len(self.calls) >= self.crash_at:
            raise _Crash(f"crash before write {len(self.calls)} ({verb})")
        if self.before is not None:
            self.before(verb, args)
        args = tuple(dict(a) if isinstance(a, dict) else list(a) if isinstance(a, (list, tuple, set, Iterator))
                     else a for a in args)
        self.calls.append((verb, args))
        return getattr(self.inner, verb)(*args)

    def get_many(self, oids: Iterable[bytes]) -> dict[bytes, StoredObject]:
        return {o: s for o, s in self.inner.get_many(oids).items() if o not in self.hidden}

    def has_many(self, oids: Iterable[bytes]) -> set[bytes]:
        return self.inner.has_many(oids) - self.hidden

    def get_prefix(self, prefix: bytes, kind: int) -> list[StoredObject]:
        return [s for s in self.inner.get_prefix(prefix, kind) if s.oid not in self.hidden]


for _verb in WRITE_VERBS:  # each write verb of Faulty goes through _write
    setattr(Faulty, _verb, (lambda v: lambda self, *a: self._write(v, *a))(_verb))


def open_from(spec: tuple[str, str]) -> Backend:
    """Open a backend from a :meth:`BackendFactory.process_opener` spec (in a child process)."""
    mod, _, path = spec[0].partition(":")
    fn: Any = importlib.import_module(mod)
    for part in path.split("."):  # "module:Class.classmethod" works too
        fn = getattr(fn, part)
    backend: Backend = fn(spec[1])
    return backend


def new_store(backend: Backend) -> Any:
    """A :class:`crewckpt.history.store.Store` on an empty backend (writes the meta rows a store needs)."""
    from crewckpt.history.store import Store
    with writing(backend) as w:
        if w.meta_get("format_version") is None:
            w.meta_set("format_version", str(ob.FORMAT_VERSION))
            w.meta_set("gc_epoch", "0")
    return Store(backend, None)


REVIVAL_T0 = 1_764_460_800_000_000_000  # a fixed commit time (ns), so a commit can be written again with its id


def _oid(i: int) -> bytes:
    return i.to_bytes(32, "big")


def obj(i: int, size: int = 10, kind: int = 1) -> StoredObject:
    """A test object (its id is not a content hash: backends never verify frames)."""
    return StoredObject(_oid(i), kind, size, b"\x00" + bytes([i % 251]) * size)


def row(i: int, branch: str = "main", seq: int | None = None) -> IndexRow:
    """A test index row."""
    return IndexRow(_oid(i), branch, i if seq is None else seq, 100 + i, "run", "ev", (), b"t" * 32,
                    b"\x95\x90\x00\x00\x00\x00", None, None)


def _doc_text(doc: Any) -> str:
    """A JSON value's exact text (1 / 1.0 / true and -0.0 / 0.0 differ; key order kept)."""
    return json.dumps(doc, ensure_ascii=True, separators=(",", ":"))


def _children_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def _run_children(code: str, args: list[list[str]], timeout_s: float = 120.0) -> list[str]:
    """Run ``python -c code arg...`` once per argument list, all at once; their stdouts (each must exit 0)."""
    procs = [subprocess.Popen([sys.executable, "-c", code, *a], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=_children_env()) for a in args]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout_s)
        assert p.returncode == 0, err[-2000:]
        outs.append(out)
    return outs


# -- the parts ------------------------------------------------------------------------------------------------


class BackendContract:
    """The verbs of every part, optional verbs by capability, and concurrency (docs/backends.md)."""

    @pytest.fixture
    def backend_factory(self) -> BackendFactory:
        """Override: return the :class:`BackendFactory` of the backend under test."""
        raise NotImplementedError("override the backend_factory fixture")

    @pytest.fixture
    def backend(self, backend_factory: BackendFactory) -> Iterator[Backend]:
        b = backend_factory.create()
        yield b
        b.close()

    # objects

    def test_put_is_put_if_absent_and_freshens_present(self, backend: Backend) -> None:
        assert backend.put_many([obj(1), obj(2)], 10) == 2
        changed = dataclasses.replace(obj(2), frame=b"\x00other")
        assert backend.put_many([changed, obj(3)], 20) == 1
        assert backend.get(obj(2).oid) == obj(2)  # a present object's frame never changes
        assert backend.has_many([obj(1).oid, obj(9).oid]) == {obj(1).oid}
        touched = {m.oid: m.touched_ns for m in backend.iter_objects()}
        assert touched == {obj(1).oid: 10, obj(2).oid: 20, obj(3).oid: 20}
        assert backend.put_many([obj(1)], 5) == 0
        assert {m.oid: m.touched_ns for m in backend.iter_objects()}[obj(1).oid] == 10  # never goes back

    def test_batches_of_any_size(self, backend: Backend) -> None:
        objs = [obj(i, 1) for i in range(40_000)]
        assert backend.put_many(objs, 1) == 40_000
        ids = [o.oid for o in objs] + [obj(10 ** 6).oid]
        assert len(backend.has_many(ids)) == 40_000
        assert len(backend.get_many(ids)) == 40_000
        assert backend.delete_objects(ids, 2) == 40_000
        assert backend.has_many(ids) == set()

    def test_listing_prefix_meta_and_stats(self, backend: Backend) -> None:
        backend.put_many([obj(1), StoredObject(b"\xab" * 32, 5, 3, b"\x00abcdefghijk")], 7)
        metas = {m.oid: m for m in backend.iter_objects()}
        m = metas[b"\xab" * 32]
        assert (m.kind, m.size, m.touched_ns, m.head) == (5, 3, 7, b"\x00abcdefgh")
        assert m.frame_bytes in (-1, 12)
        assert [x.oid for x in backend.iter_objects(b"\xab" * 8)] == [b"\xab" * 32]
        assert [o.oid for o in backend.get_prefix(b"\xab" * 8, 5)] == [b"\xab" * 32]
        assert backend.get_prefix(b"\xab" * 8, 1) == []
        n, size, _ = backend.object_stats()
        assert (n, size) == (2, 13)
        kind = 5  # objects of kind 5 with bodies under 4 bytes: only the 3-byte one
        assert (backend.count_objects(kind, 4), backend.count_objects(kind, 3), backend.count_objects(9, 99)) == (1, 0, 0)

    def test_delete_rechecks_the_stored_time(self, backend: Backend) -> None:
        backend.put_many([obj(1), obj(2)], 10)
        backend.put_many([obj(2)], 50)  # reused after gc decided: must survive gc's delete
        assert backend.delete_objects([obj(1).oid, obj(2).oid, obj(9).oid], 20) == 1
        assert backend.has_many([obj(1).oid, obj(2).oid]) == {obj(2).oid}

    # refs

    def test_ref_compare_and_swap(self, backend: Backend) -> None:
        a, b = b"a" * 32, b"b" * 32
        backend.set_ref_if_equals("refs/heads/x", None, a)
        with pytest.raises(RefConflict, match="refs/heads/x"):
            backend.set_ref_if_equals("refs/heads/x", None, b)  # create-if-absent on an existing ref
        with pytest.raises(RefConflict):
            backend.set_ref_if_equals("refs/heads/x", b, a)  # stale old value
        assert backend.get_ref("refs/heads/x") == a
        backend.set_ref_if_equals("refs/heads/x", a, b)
        backend.set_ref_if_equals("refs/runs/r", None, a)
        assert backend.refs("refs/heads/") == {"refs/heads/x": b}
        assert list(backend.refs()) == ["refs/heads/x", "refs/runs/r"]
        backend.set_ref_if_equals("refs/heads/x", b, None)
        assert backend.get_ref("refs/heads/x") is None and backend.refs("refs/heads/") == {}
        with pytest.raises(RefConflict):
            backend.set_ref_if_equals("refs/heads/x", b, None)

    def test_reflog_is_append_only_per_ref(self, backend: Backend) -> None:
        for i in range(3):
            backend.reflog_append(ReflogEntry("refs/heads/m", None if i == 0 else bytes([i]) * 32,
                                              bytes([i + 1]) * 32, i, f"c{i}"))
        backend.reflog_append(ReflogEntry("refs/heads/o", None, b"z" * 32, 9, "other"))
        log = backend.reflog("refs/heads/m")
        assert [e.message for e in log] == ["c0", "c1", "c2"] and log[0].old is None and log[2].time_ns == 2
        backend.reflog_delete("refs/heads/m")
        assert backend.reflog("refs/heads/m") == [] and len(backend.reflog("refs/heads/o")) == 1

    def test_symbolic_refs(self, backend: Backend) -> None:
        assert backend.get_symref("HEAD") is None
        backend.set_symref("HEAD", "refs/heads/unborn")
        backend.set_symref("HEAD", "refs/heads/main")
        assert backend.get_symref("HEAD") == "refs/heads/main"
        assert "HEAD" not in backend.refs()

    # index and meta

    def test_index_order_prefix_rebranch_remove(self, backend: Backend) -> None:
        for i, seq in ((5, 3), (6, 1), (7, 2)):
            backend.index_add(row(i, "b" if i == 7 else "main", seq))
        backend.index_add(dataclasses.replace(row(5, seq=3), run_id="other"))  # idempotent: the row stays
        assert [r.seq for r in backend.index_rows()] == [1, 2, 3]
        assert [r.seq for r in backend.index_rows("main")] == [1, 3]
        assert backend.index_last() == row(5).id
        assert backend.index_prefix(row(5).id.hex()) == [row(5).id]
        assert backend.index_prefix("0000") == sorted([row(5).id, row(6).id, row(7).id])
        backend.index_rebranch("main", "trunk")
        assert backend.index_remove([row(7).id, row(9).id]) == 1
        assert {r.branch for r in backend.index_rows()} == {"trunk"}
        got = backend.index_get(row(5).id)
        assert got == dataclasses.replace(row(5, seq=3), branch="trunk") and backend.index_get(row(7).id) is None

    def test_index_children_and_renumber(self, backend: Backend) -> None:
        """I6: the live children of given commits; renumbering in place keeps every other field, skips ids
        without a row, and the seq counter stays above every renumbered seq (I5)."""
        a = row(1, seq=1)
        b = dataclasses.replace(row(2, seq=2), parents=(row(1).id,))
        c = dataclasses.replace(row(3, seq=3), parents=(row(2).id, row(1).id))
        d = dataclasses.replace(row(4, "b", seq=4), parents=(row(9).id,))  # a parent without a row
        for r in (a, b, c, d):
            backend.index_add(r)
        assert [r.id for r in backend.index_children([row(1).id])] == [b.id, c.id]
        assert backend.index_children([row(9).id]) == [d]
        assert backend.index_children([row(3).id]) == [] and backend.index_children([]) == []
        straddle = row(2).id[16:] + row(1).id[:16]  # bytes across two ids of c's parents: no parent
        assert backend.index_children([straddle]) == []
        many = [row(100 + k).id for k in range(40)] + [row(2).id]  # a big batch (a fetch asks for all)
        assert [r.id for r in backend.index_children(many)] == [c.id]
        assert backend.index_renumber({c.id: 20, b.id: 12, row(8).id: 30, a.id: 1}) == 2
        assert [(r.id, r.seq) for r in backend.index_rows()] == [(a.id, 1), (d.id, 4), (b.id, 12), (c.id, 20)]
        assert backend.index_get(c.id) == dataclasses.replace(c, seq=20)
        assert backend.index_last() == c.id and backend.counter_next("seq") == 21

    def test_counters_aliases_meta(self, backend: Backend) -> None:
        assert [backend.counter_next("seq") for _ in range(3)] == [1, 2, 3]
        backend.index_add(row(1, seq=10))
        assert backend.counter_next("seq") == 11  # never at or below a seq in the index
        assert backend.counter_next("other") == 1
        backend.alias_set("20261129T234227_0d859366", b"c" * 32)
        backend.alias_set("20261129T234227_0d859366", b"d" * 32)  # first writer wins
        backend.meta_set("k", "v")
        backend.meta_set("k", "w")
        assert backend.alias_get("20261129T234227_0d859366") == b"c" * 32
        assert backend.meta_get("k") == "w" and backend.meta_get("nope") is None
        backend.alias_set("other", b"e" * 32)
        assert backend.alias_forget([b"c" * 32, b"x" * 32]) == 1
        assert backend.alias_get("20261129T234227_0d859366") is None and backend.alias_get("other") == b"e" * 32

    # capabilities and optional verbs

    def test_capabilities_are_declared_and_undeclared_verbs_refuse(self, backend: Backend) -> None:
        caps = backend.capabilities
        assert isinstance(caps, Capabilities) and caps.gc_grace_s >= 0
        if caps.reframe:
            assert caps.locks and caps.transactions, "reframe needs locks (gc repacks under the gc lock)"
        for flag, call in (("transactions", lambda: backend.transaction().__enter__()),
                           ("locks", lambda: backend.lock("gc").__enter__()),
                           ("reframe", lambda: backend.reframe([]))):
            if not getattr(caps, flag):
                with pytest.raises(NotImplementedError):
                    call()

    def test_transaction_is_atomic_and_reads_its_own_writes(self, backend: Backend) -> None:
        if not backend.capabilities.transactions:
            pytest.skip("no transactions")
        with pytest.raises(RuntimeError):
            with backend.transaction() as t:
                t.put_many([obj(1)], 1)
                t.set_ref_if_equals("refs/heads/main", None, b"x" * 32)
                t.index_add(row(1))
                t.meta_set("k", "v")
                assert t.get_ref("refs/heads/main") == b"x" * 32 and t.has_many([obj(1).oid])
                raise RuntimeError("crash mid-checkpoint")
        assert backend.get(obj(1).oid) is None and backend.get_ref("refs/heads/main") is None
        assert backend.index_rows() == [] and backend.meta_get("k") is None
        with backend.transaction() as t:
            t.put_many([obj(1)], 1)
        assert backend.has_many([obj(1).oid]) == {obj(1).oid}

    def test_reframe_keeps_id_and_time(self, backend: Backend) -> None:
        if not backend.capabilities.reframe:
            pytest.skip("no reframe")
        backend.put_many([obj(2)], 10)
        with backend.transaction() as t:
            assert t.reframe([(obj(2).oid, b"\x00new"), (obj(3).oid, b"\x00x")]) == 1
        got = backend.get(obj(2).oid)
        assert got is not None and got.frame == b"\x00new" and got.size == obj(2).size
        assert [m.touched_ns for m in backend.iter_objects()] == [10] and not backend.has_many([obj(3).oid])

    def test_lock_is_exclusive_and_waits(self, backend_factory: BackendFactory, backend: Backend) -> None:
        if not backend.capabilities.locks:
            pytest.skip("no locks")
        other = backend_factory.reopen(backend) or backend
        try:
            with backend.lock("gc") as a:
                assert a
                with other.lock("gc") as b:
                    assert not b
                with other.lock("other") as c:
                    assert c  # locks are per name
                t0 = time.monotonic()
                with other.lock("gc", wait_s=0.2) as d:
                    assert not d and time.monotonic() - t0 >= 0.15
            with other.lock("gc") as e:
                assert e
        finally:
            if other is not backend:
                other.close()

    def test_a_second_handle_sees_every_part(self, backend_factory: BackendFactory, backend: Backend) -> None:
        backend.put_many([obj(1)], 1)
        backend.set_ref_if_equals("refs/heads/main", None, obj(1).oid)
        backend.reflog_append(ReflogEntry("refs/heads/main", None, obj(1).oid, 1, "c"))
        backend.index_add(row(1))
        backend.alias_set("a", obj(1).oid)
        backend.meta_set("k", "v")
        other = backend_factory.reopen(backend)
        if other is None:
            pytest.skip("the factory gives no second handle")
        try:
            assert other.get(obj(1).oid) == obj(1) and other.get_ref("refs/heads/main") == obj(1).oid
            assert len(other.reflog("refs/heads/main")) == 1 and other.index_get(row(1).id) == row(1)
            assert other.alias_get("a") == obj(1).oid and other.meta_get("k") == "v"
        finally:
            other.close()

    # concurrency

    def _handles(self, factory: BackendFactory, backend: Backend, n: int) -> list[Backend]:
        return [factory.reopen(backend) or backend for _ in range(n)]

    def test_threads_moving_one_ref_lose_no_update(self, backend_factory: BackendFactory,
                                                   backend: Backend) -> None:
        self._cas_race(backend_factory, backend, threads=4, each=25)

    def test_threads_moving_one_ref_lose_no_update_long(self, backend_factory: BackendFactory,
                                                        backend: Backend) -> None:
        self._cas_race(backend_factory, backend, threads=8, each=200)

    def _cas_race(self, factory: BackendFactory, backend: Backend, threads: int, each: int) -> None:
        """Threads move one ref by CAS (retrying on conflict), take counter values and put the same objects:
        the successful moves form one chain (linearizable), counters are distinct, each object is stored once."""
        handles = self._handles(factory, backend, threads)
        moves: list[tuple[bytes | None, bytes]] = []
        values: list[int] = []
        new: list[int] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def work(k: int, b: Backend) -> None:
            try:
                for i in range(each):
                    target = _oid(10_000 * (k + 1) + i)
                    while True:
                        cur = b.get_ref("refs/heads/race")
                        try:
                            b.set_ref_if_equals("refs/heads/race", cur, target)
                            break
                        except RefConflict:
                            continue
                    v = b.counter_next("race")
                    n = b.put_many([obj(i % 10)], i)
                    with lock:
                        moves.append((cur, target))
                        values.append(v)
                        new.append(n)
            except BaseException as e:  # reported below, with the thread's failure
                errors.append(e)

        ts = [threading.Thread(target=work, args=(k, h)) for k, h in enumerate(handles)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for h in {id(h): h for h in handles if h is not backend}.values():
            h.close()
        assert not errors, errors[0]
        nxt = dict(moves)
        assert len(nxt) == len(moves) == threads * each, "two moves started from the same old value"
        chain, cur = 0, None
        while cur in nxt:
            cur = nxt[cur]
            chain += 1
        assert chain == threads * each and backend.get_ref("refs/heads/race") == cur
        assert sorted(values) == list(range(1, threads * each + 1))
        assert sum(new) >= 10  # racing puts of one object may each count it as new (docs/backends.md O1)
        assert backend.put_many([obj(i) for i in range(10)], 1) == 0 and len(backend.has_many(
            [obj(i).oid for i in range(10)])) == 10

    _CHILD = (
        "import sys\n"
        "from crewckpt.testing.contract import open_from\n"
        "from crewckpt.errors import RefConflict\n"
        "b = open_from((sys.argv[1], sys.argv[2])); k = int(sys.argv[3])\n"
        "for i in range(int(sys.argv[4])):\n"
        "    t = (1000 * (k + 1) + i).to_bytes(32, 'big')\n"
        "    while True:\n"
        "        cur = b.get_ref('refs/heads/race')\n"
        "        try:\n"
        "            b.set_ref_if_equals('refs/heads/race', cur, t); break\n"
        "        except RefConflict:\n"
        "            pass\n"
        "    print((cur or b'').hex(), t.hex(), b.counter_next('race'), flush=True)\n"
        "b.close()\n"
    )

    def test_processes_moving_one_ref_lose_no_update(self, backend_factory: BackendFactory,
                                                     backend: Backend) -> None:
        spec = backend_factory.process_opener(backend) if backend.capabilities.shared else None
        if spec is None:
            pytest.skip("the store is not shared between processes")
        procs, each = 2, 15
        outs = _run_children(self._CHILD, [[spec[0], spec[1], str(k), str(each)] for k in range(procs)])
        lines = [ln.split() for out in outs for ln in out.splitlines()]
        nxt = {bytes.fromhex(o) if o != "-" else None: bytes.fromhex(n) for o, n, _ in
               ((x[0] if len(x) == 3 else "-", x[-2], x[-1]) for x in lines)}
        assert len(nxt) == len(lines) == procs * each
        chain, cur = 0, None
        while cur in nxt:
            cur = nxt[cur]
            chain += 1
        assert chain == procs * each and backend.get_ref("refs/heads/race") == cur
        assert sorted(int(x[-1]) for x in lines) == list(range(1, procs * each + 1))


# -- the Store on the backend -----------------------------------------------------------------------------------

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
                         st.sampled_from(["\ud800", "é", "x" * 3000, "\U0001f9a6"]))
json_docs = st.recursive(json_scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=5), st.dictionaries(st.text(max_size=6), kids, max_size=5)), max_leaves=25)
branch_names = st.sampled_from(["main", "dev", "exp/a", "exp/b", "hot-fix", "ünï"])


def store_model(factory: BackendFactory) -> type[RuleBasedStateMachine]:
    """The stateful model test for stores on ``factory``'s backends: random sequences of commit, fork, branch
    create/delete/rename, prune, gc and reopen against a plain in-memory model. After every step: branches
    and tips, live commits in write order with their branch, every live commit's exact document (as JSON
    text), pruned-but-present commits readable, collected ones unknown, the current branch (HEAD) and HEAD's
    reflog, and ``fsck --full`` clean.

    Model rules (the Store API): ``commit`` without parents goes on the branch tip; ``prune`` removes a
    branch's live commits outside the ``keep`` newest (write order) unless a branch points at them or another
    existing branch's history needs them (ancestors, through live commits, of its live commits or its tip); gc keeps
    live commits and ref targets, and parents are weak references (on a backend with a gc grace,
    ``capabilities.gc_grace_s > 0``, it keeps every commit: the model's are all younger than the grace). HEAD (crewckpt.history.head) starts on
    main; a commit on HEAD's branch, a switch and a rename of HEAD's branch append to HEAD's reflog; the
    current branch cannot be deleted."""

    class StoreModel(RuleBasedStateMachine):
        commits = Bundle("commits")

        def __init__(self) -> None:
            super().__init__()
            self.backend = factory.create()
            self.store = new_store(self.backend)
            self.docs: dict[str, str] = {}
            self.branch_of: dict[str, str] = {}
            self.order: list[str] = []
            self.tips: dict[str, str] = {}
            self.pruned: set[str] = set()
            self.collected: set[str] = set()
            self.head = "main"
            self.head_log: list[str] = []  # where HEAD moved, oldest first (HEAD's reflog)
            self.made_docs: dict[str, Any] = {}  # id -> the document committed
            self.parents_of: dict[str, tuple[str, ...]] = {}
            self.made: dict[str, tuple[Any, tuple[str, ...], int, str]] = {}  # id -> doc, parents, time, run

        def teardown(self) -> None:
            self.store.close()

        def _committed(self, cid: str, doc: Any, branch: str, parents: tuple[str, ...]) -> str:
            self.parents_of[cid] = parents
            self.made_docs[cid] = doc
            self.docs[cid] = _doc_text(doc)
            self.branch_of[cid] = branch
            self.order.append(cid)
            self.tips[branch] = cid
            if branch == self.head:
                self.head_log.append(cid)
            return cid

        @rule(target=commits, branch=branch_names, doc=json_docs)
        def commit(self, branch: str, doc: Any) -> str:
            cid = self.store.commit(doc, branch=branch)
            expected = (self.tips[branch],) if branch in self.tips else ()
            assert self.store.info(cid).parents == expected
            return self._committed(cid, doc, branch, expected)

        @rule(branch=branch_names, docs=st.lists(json_docs, min_size=2, max_size=3))
        def run(self, branch: str, docs: list[Any]) -> None:
            """A few checkpoints in a row on one branch (a CrewAI run), so prune has history to remove."""
            for doc in docs:
                self.commit(branch, doc)

        @precondition(lambda self: bool(self.order))
        @rule(target=commits, branch=branch_names, doc=json_docs, data=st.data())
        def fork(self, branch: str, doc: Any, data: st.DataObject) -> str:
            base = data.draw(st.sampled_from(self.order))
            cid = self.store.commit(doc, branch=branch, parents=[base[:12]])
            assert self.store.info(cid).parents == (base,)
            return self._committed(cid, doc, branch, (base,))

        @precondition(lambda self: bool(self.order))
        @rule(name=branch_names, data=st.data())
        def create_branch(self, name: str, data: st.DataObject) -> None:
            rev = data.draw(st.sampled_from(self.order))
            try:
                self.store.create_branch(name, rev)
            except BranchExists:
                assert name in self.tips
                return
            assert name not in self.tips
            self.tips[name] = rev

        @rule(name=branch_names)
        def delete_branch(self, name: str) -> None:
            try:
                self.store.delete_branch(name)
            except UnknownRevision:
                assert name not in self.tips
                return
            except BranchInUse:  # the current branch (HEAD) is not deleted, as in git
                assert name == self.head
                return
            assert name != self.head
            del self.tips[name]

        @rule(name=branch_names)
        def switch(self, name: str) -> None:
            try:
                self.store.switch(name)
            except UnknownRevision:
                assert name not in self.tips and name != self.head
                return
            if name != self.head:
                self.head = name
                self.head_log.append(self.tips[name])

        @rule(old=branch_names, new=branch_names)
        def rename_branch(self, old: str, new: str) -> None:
            try:
                self.store.rename_branch(old, new)
            except UnknownRevision:
                assert old not in self.tips
                return
            except BranchExists:
                assert new in self.tips
                return
            self.tips[new] = self.tips.pop(old)
            if old == self.head:
                self.head = new
                self.head_log.append(self.tips[new])
            for c, b in self.branch_of.items():
                if b == old:
                    self.branch_of[c] = new

        @rule(branch=branch_names, keep=st.integers(1, 4))
        def prune(self, branch: str, keep: int) -> None:
            rows = [c for c in self.order if self.branch_of[c] == branch]
            tips = set(self.tips.values())
            # another branch's history stays: ancestors (through live commits) of its live commits and its tip
            todo = [c for c in self.order if self.branch_of[c] != branch and self.branch_of[c] in self.tips]
            todo += [t for b, t in self.tips.items() if b != branch]
            needed: set[str] = set()
            while todo:
                c = todo.pop()
                if c not in needed and c in self.branch_of:
                    needed.add(c)
                    todo.extend(self.parents_of[c])
            expected = [c for c in rows[:-keep] if c not in tips and c not in needed]
            if not rows and branch not in self.tips and branch != self.store.current_branch():
                with pytest.raises(UnknownRevision, match=f"no branch named '{branch}'"):  # a typo prunes nothing
                    self.store.prune(branch, keep=keep)
                return
            assert self.store.prune(branch, keep=keep) == expected
            for c in expected:
                self.order.remove(c)
                del self.branch_of[c]
                self.pruned.add(c)

        @precondition(lambda self: bool(self.pruned or self.collected))
        @rule(branch=branch_names, data=st.data())
        def write_again(self, branch: str, data: st.DataObject) -> None:
            """A pruned or collected commit written again from the same inputs: the same id (format 2 holds
            no seq) comes back live, and its live descendants are renumbered after it (I6)."""
            cid = data.draw(st.sampled_from(sorted(self.pruned | self.collected)))
            doc, parents, time_ns, run = self.made[cid]
            if any(p in self.collected for p in parents):
                with pytest.raises(UnknownRevision):
                    self.store.commit(doc, branch=branch, parents=list(parents), run_id=run, time_ns=time_ns)
                return
            assert self.store.commit(doc, branch=branch, parents=list(parents), run_id=run, time_ns=time_ns) == cid
            self.pruned.discard(cid)
            self.collected.discard(cid)
            below = {cid}
            for c in self.order:  # write order is parents first: one pass finds every live descendant
                if below.intersection(self.made[c][1]):
                    below.add(c)
            moved = [c for c in self.order if c in below]
            self.order = [c for c in self.order if c not in below]
            self.order += [cid, *moved]
            self.branch_of[cid] = branch
            self.tips[branch] = cid
            if branch == self.head:
                self.head_log.append(cid)

        @rule()
        def gc(self) -> None:
            self.store.gc()
            if self.backend.capabilities.gc_grace_s > 0:  # every pruned commit here is younger than the grace
                return
            refs = set(self.tips.values())
            gone = {c for c in self.pruned if c not in refs}
            self.collected |= gone
            self.pruned -= gone

        @rule()
        def reopen(self) -> None:
            from crewckpt.history.store import Store
            other = factory.reopen(self.backend)
            if other is None:
                return
            self.store.close()
            self.backend = other
            self.store = Store(other, None)

        @invariant()
        def matches_model(self) -> None:
            assert self.store.branches() == dict(sorted(self.tips.items()))
            assert self.store.current_branch() == self.head
            assert [e.new.hex() for e in self.store.reflog("HEAD") if e.new] == self.head_log
            if self.head in self.tips:
                assert self.store.resolve("HEAD") == self.tips[self.head] == self.store.resolve("@{0}")
            live = self.store.list()
            for c in live:  # what write_again needs, read from the listing every step makes anyway
                self.made.setdefault(c.id, (self.made_docs[c.id], c.parents, c.time_ns, c.run_id))
            assert [c.id for c in live] == self.order
            assert all(c.branch == self.branch_of[c.id] for c in live)
            for cid in [*self.order, *self.pruned]:  # pruned, not yet collected: still readable by id
                assert _doc_text(self.store.read(cid)) == self.docs[cid]
            for cid in self.collected:
                with pytest.raises(UnknownRevision):
                    self.store.resolve(cid)

        @invariant()
        def fsck_clean(self) -> None:
            rep = self.store.fsck(full=True)
            assert rep.ok, rep

    return StoreModel


class StoreContract:
    """The Store on the backend: the stateful model, write order, crashes, gc safety, index rebuild."""

    model_examples = 6
    model_steps = 12
    long_examples = 40
    long_steps = 25

    @pytest.fixture
    def backend_factory(self) -> BackendFactory:
        """Override: return the :class:`BackendFactory` of the backend under test."""
        raise NotImplementedError("override the backend_factory fixture")

    @contextlib.contextmanager
    def _store(self, factory: BackendFactory, wrap: type[Faulty] | None = None, **kw: Any) -> Iterator[Any]:
        b = factory.create()
        s = new_store(wrap(b, **kw) if wrap else b)
        try:
            yield s
        finally:
            s.close()

    def _run_model(self, factory: BackendFactory, examples: int, steps: int, shrink: bool = True) -> None:
        phases = [p for p in Phase if shrink or p not in (Phase.shrink, Phase.explain)]
        run_state_machine_as_test(store_model(factory), settings=settings(
            max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
            suppress_health_check=list(HealthCheck), phases=phases))

    def test_store_matches_model(self, backend_factory: BackendFactory) -> None:
        self._run_model(backend_factory, self.model_examples, self.model_steps)

    def test_store_matches_model_long(self, backend_factory: BackendFactory) -> None:
        """Reports its first failing example unshrunk: shrinking a 25-step example on a networked backend
        replays hundreds of examples, outlasts the test timeout and then hides the failure behind it."""
        self._run_model(backend_factory, int(os.environ.get("CKPT_STATEFUL_EXAMPLES", self.long_examples)),
                        self.long_steps, shrink=False)

    def test_a_checkpoint_writes_objects_then_commit_then_ref_then_index(self,
                                                                         backend_factory: BackendFactory) -> None:
        """Write order without a transaction (docs/backends.md W1-W4)."""
        with self._store(backend_factory, Faulty) as s:
            f: Faulty = s.backend
            s.commit({"a": [1, 2, 3], "b": "x" * 100})
            f.calls.clear()
            cid = bytes.fromhex(s.commit({"a": [1, 2, 3, 4], "b": "y" * 100, "c": {"d": 1}}, alias="al-1"))
            verbs = [v for v, _ in f.calls]
            puts = [i for i, (v, a) in enumerate(f.calls) if v == "put_many"]
            commit_put = next(i for i in puts if any(o.oid == cid for o in f.calls[i][1][0]))
            ref_cas = next(i for i, (v, a) in enumerate(f.calls)
                           if v == "set_ref_if_equals" and a[0] == "refs/heads/main" and a[2] == cid)
            index_add = verbs.index("index_add")
            assert all(i < commit_put for i in puts if i != commit_put), verbs  # objects first
            assert commit_put < ref_cas < index_add, verbs
            assert verbs.index("alias_set") > ref_cas

    def test_a_crash_at_any_write_keeps_every_acknowledged_checkpoint(self,
                                                                      backend_factory: BackendFactory) -> None:
        """Kill the writer before each write of a checkpoint in turn (no transaction): the acknowledged
        checkpoint stays readable, the branch shows either it or the new one (readable), the next open puts
        a tip the index missed back into it, fsck is clean, and the next checkpoint lands on the tip."""
        from crewckpt.history.store import Store
        doc1, doc2 = {"k": list(range(50)), "s": "a" * 2000}, {"k": list(range(60)), "s": "b" * 2000, "n": 1}
        for k in range(100):
            inner = backend_factory.create()
            s = new_store(Faulty(inner))
            first = s.commit(doc1, alias="one")
            f: Faulty = s.backend
            f.crash_at = len(f.calls) + k
            try:
                s.commit(doc2, alias="two")
                done = True
            except _Crash:
                done = False
            s2 = Store(WithoutTransactions(inner), None)
            try:
                assert _doc_text(s2.read(first)) == _doc_text(doc1)
                tip = s2.branches()["main"]
                assert tip == first or _doc_text(s2.read(tip)) == _doc_text(doc2)
                assert s2.list()[-1].id == tip  # opening rebuilt a missing index row (W5)
                assert s2.fsck(full=True).ok and s2.resolve("main") == tip
                third = s2.commit({"k": 3})
                assert s2.info(third).parents == (tip,)
            finally:
                s2.close()
            if done:
                assert k > 0
                break
        else:
            raise AssertionError("a checkpoint took more than 100 writes")

    def test_gc_never_deletes_what_it_could_not_read(self, backend_factory: BackendFactory) -> None:
        with self._store(backend_factory, Faulty) as s:
            f: Faulty = s.backend
            ids = [s.commit({"n": i, "big": [i] * 100, "keep": "k" * 500}) for i in range(4)]
            s.prune("main", keep=1)
            tree = s.objects.commit(bytes.fromhex(ids[-1])).tree.oid
            f.hidden.add(tree)  # listed, but a read gets nothing (a flaky or eventually consistent store)
            before = {m.oid for m in f.iter_objects()}
            with pytest.raises(GcAborted, match="nothing was deleted"):
                s.gc()
            assert {m.oid for m in f.iter_objects()} == before
            f.hidden.clear()
            s.gc()
            assert _doc_text(s.read(ids[-1])) == _doc_text({"n": 3, "big": [3] * 100, "keep": "k" * 500})
            assert s.fsck(full=True).ok

    def test_gc_between_a_writers_objects_and_its_ref_cas_loses_nothing(self,
                                                                        backend_factory: BackendFactory) -> None:
        """Without a transaction, prune + gc run after a writer skipped putting objects it knew (its cache) and
        before its ref CAS, so they sweep objects only a pruned commit used: the writer notices the new gc
        epoch after its CAS and puts the document again before acknowledging (docs/backends.md G4)."""
        from crewckpt.history.store import Store
        inner = backend_factory.create()
        if inner.capabilities.gc_grace_s > 0:
            inner.close()
            pytest.skip("its gc grace spares every object this test writes; the race needs a sweep of them")
        w = new_store(Faulty(inner))
        g = Store(WithoutTransactions(inner), None)
        f: Faulty = w.backend
        doc_a = {"a": ["only in a"] * 40, "s": "a" * 3000}
        w.commit(doc_a, branch="w")
        w.commit({"b": ["only in b"] * 40, "s": "b" * 3000}, branch="w")
        assert len(g.prune("w", keep=1)) == 1  # the first commit: its objects are garbage now

        def gc_before_the_cas(verb: str, args: tuple[Any, ...]) -> None:
            if verb == "set_ref_if_equals" and args[0] == "refs/heads/w":
                f.before = None
                assert g.gc().deleted_objects > 0
        f.before = gc_before_the_cas
        again = w.commit(doc_a, branch="w")  # reuses the pruned commit's objects without putting them
        assert f.before is None, "the gc ran"
        assert _doc_text(g.read(again)) == _doc_text(doc_a) and g.fsck(full=True).ok
        w.close()
        g.close()

    def test_gc_keeps_what_a_concurrent_writer_reuses(self, backend_factory: BackendFactory) -> None:
        """A writer thread keeps re-committing documents that share old parts while prune and gc run: every
        acknowledged checkpoint that is still live reads back exactly, and fsck stays clean."""
        from crewckpt.history.store import Store
        inner = backend_factory.create()
        s = new_store(inner)
        other = backend_factory.reopen(inner) or inner
        w = Store(other, None)
        docs = [{"shared": "s" * 3000, "v": i % 3, "tail": list(range(i % 3 * 10))} for i in range(3)]
        acked: list[tuple[str, int]] = []
        stop = threading.Event()
        errors: list[BaseException] = []

        def writer() -> None:
            try:
                i = 0
                while not stop.is_set() or i < 6:
                    acked.append((w.commit(docs[i % 3], branch="w"), i % 3))
                    i += 1
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=writer)
        t.start()
        try:
            deadline = time.monotonic() + 30
            rounds = 0
            while rounds < 5 and time.monotonic() < deadline:
                if len(acked) > rounds:
                    s.prune("w", keep=2)
                    s.gc(wait_s=30)
                    rounds += 1
        finally:
            stop.set()
            t.join()
        assert not errors, errors[0]
        live = {c.id for c in s.list()}
        for cid, k in acked:
            if cid in live:
                assert _doc_text(s.read(cid)) == _doc_text(docs[k])
        assert s.fsck(full=True).ok
        w.close()
        if other is not inner:
            s.close()

    @staticmethod
    def _revival_history(s: Any, collect: bool = True) -> tuple[list[dict[str, Any]], list[str], str]:
        """b: c0 <- c1 <- c2 <- c3 and f: fork (a child of c2); prune b to its tip and (``collect``) gc: c0..c2
        are not live (gone) while their children c3 and fork stay live."""
        docs = [{"n": i, "s": "x" * 300 * (i + 1)} for i in range(4)]
        ids: list[str] = []
        for i, d in enumerate(docs):
            ids.append(s.commit(d, branch="b", parents=ids[-1:], run_id="r1", time_ns=REVIVAL_T0 + i))
        assert s.prune("b", keep=1) == ids[:3]
        fork = s.commit({"fork": 1}, branch="f", parents=[ids[2]])  # after: prune keeps what a branch reaches
        if collect:
            s.gc()
        return docs, ids, fork

    @staticmethod
    def _assert_parents_older(s: Any) -> None:
        seq = {c.id: c.seq for c in s.list()}
        bad = [(c.id[:8], p[:8]) for c in s.list() for p in c.parents if p in seq and seq[p] >= seq[c.id]]
        assert not bad, f"parents not older than their children: {bad}"
        rep = s.fsck(full=True)
        assert rep.ok, rep.problems

    def test_a_merge_that_rewrites_a_pack_it_drops_keeps_that_pack(self, backend_factory: BackendFactory) -> None:
        """A pack id hashes its members' bodies, not their compression: a writer's run-end merge whose members
        and order are those of a pack it merged before (a gc reset its caches, then it wrote objects it had
        already packed) writes that very pack again. Dropping the packs it replaced then deleted the pack its
        new frames name: every object in it became unreadable (found by the long stateful model on SQLite)."""
        from crewckpt.history.store import Store
        b = backend_factory.create()
        if not (b.capabilities.reframe and b.capabilities.locks):
            b.close()
            pytest.skip("no writer merges without reframe and locks")
        s = new_store(b)
        b.merge_packs_every = 2  # type: ignore[attr-defined] # the writer merges after 2 checkpoints, not 32
        d1 = {"k": [{"t": "a" * 5000}, {"t": "b" * 5000}]}
        d2 = {"k": [{"t": "a" * 5000}, {"t": "c" * 5000}], "n": 2}
        c1, c2 = s.commit(d1), s.commit(d2)  # the second checkpoint merges both packs into one
        s.gc()  # moves the merged pack's members; the writer's caches are reset (epoch)
        c3 = s.commit(d1)  # every object exists: its pack's members are all in the first merge
        s.finish_writes()  # the run-end merge rewrites the first merge's pack, then drops the packs it replaced
        other = backend_factory.reopen(b)
        fresh = Store(other if other is not None else b, None)  # no pack cache of the writer's
        try:
            assert fresh.fsck(full=True).ok
            assert [_doc_text(fresh.read(c)) for c in (c1, c2, c3)] == [_doc_text(d) for d in (d1, d2, d1)]
        finally:
            if other is not None:
                fresh.close()
            s.close()

    def test_a_revived_commit_stays_older_than_its_live_children(self, backend_factory: BackendFactory) -> None:
        """I6: commits pruned and collected while their children stayed live, then written again with the same
        ids (format 2 ids hold no seq: a CrewAI re-import after gc does this) keep every parent's seq below
        its children's; the children are renumbered after them, log and ~N walk the whole chain."""
        with self._store(backend_factory) as s:
            docs, ids, fork = self._revival_history(s)
            again: list[str] = []
            for i in range(3):
                again.append(s.commit(docs[i], branch="b2", parents=again[-1:], run_id="r1", time_ns=REVIVAL_T0 + i))
            assert again == ids[:3]
            self._assert_parents_older(s)
            assert [c.id for c in s.log("b")] == ids[::-1] and s.resolve("b~3") == ids[0]
            assert [c.id for c in s.log("f")] == [fork, *ids[2::-1]]
            assert [c.id for c in s.list()][-2:] in ([ids[3], fork], [fork, ids[3]])  # renumbered after c2
            assert all(_doc_text(s.read(c)) == _doc_text(d) for c, d in zip(ids, docs, strict=True))

    def test_a_crash_while_reviving_keeps_parents_older(self, backend_factory: BackendFactory) -> None:
        """I6 without a transaction: kill the writer before each write of a revival in turn; whatever landed,
        every indexed parent is older than its indexed children, and writing the commit again completes."""
        from crewckpt.history.store import Store
        for k in range(100):
            inner = backend_factory.create()
            s = new_store(Faulty(inner))
            docs, ids, _ = self._revival_history(s, collect=False)  # pruned, not collected: revived alike
            again: list[str] = []
            for i in range(2):
                again.append(s.commit(docs[i], branch="b2", parents=again[-1:], run_id="r1", time_ns=REVIVAL_T0 + i))
            f: Faulty = s.backend
            f.crash_at = len(f.calls) + k
            try:
                s.commit(docs[2], branch="b2", parents=again[-1:], run_id="r1", time_ns=REVIVAL_T0 + 2)
                done = True
            except _Crash:
                done = False
            s2 = Store(WithoutTransactions(inner), None)
            try:
                self._assert_parents_older(s2)
                assert s2.commit(docs[2], branch="b3", parents=ids[1:2], run_id="r1", time_ns=REVIVAL_T0 + 2) == ids[2]
                self._assert_parents_older(s2)
                assert [c.id for c in s2.log("b")] == ids[::-1]
            finally:
                s2.close()
            if done:
                break
        else:
            raise AssertionError("a revival took more than 100 writes")

    def test_a_child_of_a_tip_that_just_moved_is_younger(self, backend_factory: BackendFactory) -> None:
        """I6 without a transaction: another writer commits on a branch tip the moment its compare-and-swap
        landed, before the first writer reached the commit index; the first commit's seq is still below its
        child's (found by test_processes_commit_to_one_branch_and_lose_nothing_long on pg+s3)."""
        from crewckpt.history.store import Store
        inner = backend_factory.create()
        with new_store(Faulty(inner)) as s, Store(WithoutTransactions(inner), None) as other:
            base = s.commit({"k": 0})
            f: Faulty = s.backend
            won: list[str] = []

            def race(verb: str, args: tuple[Any, ...]) -> None:
                if verb == "reflog_append" and not won and args[0].ref == "refs/heads/main":
                    won.append(other.commit({"k": "other"}))  # built on the tip the CAS just set

            f.before = race
            mine = s.commit({"k": 1})
            assert won and other.info(won[0]).parents == (mine,)
            assert [c.id for c in s.log("main")] == [won[0], mine, base]
            self._assert_parents_older(s)

    def test_a_store_opened_while_a_writer_is_between_cas_and_index(self, backend_factory: BackendFactory) -> None:
        """Without transactions, opening a store heals a branch tip the index lacks (a writer died after its
        CAS, W5). A writer that is only slow there must not be disturbed: the opener indexes just the
        missing commit, another writer builds on it, the slow writer then finds its row; every row stays
        in order and nothing is renumbered under the others."""
        from crewckpt.history.store import Store
        inner = backend_factory.create()
        with new_store(Faulty(inner)) as s, Store(WithoutTransactions(inner), None) as other:
            base = [s.commit({"k": i}) for i in range(3)]
            seqs = {c.id: c.seq for c in s.list()}
            f: Faulty = s.backend
            won: list[str] = []

            def race(verb: str, args: tuple[Any, ...]) -> None:
                if verb == "reflog_append" and not won and args[0].ref == "refs/heads/main":
                    opener = Store(WithoutTransactions(inner), None)  # not closed: that would close inner
                    assert opener.list()[-1].id == args[0].new.hex()  # healed: the in-flight tip is listed
                    won.append(other.commit({"k": "other"}))

            f.before = race
            mine = s.commit({"k": 3})
            assert won and [c.id for c in s.log("main")] == [won[0], mine, *base[::-1]]
            assert {c.id: c.seq for c in s.list() if c.id in seqs} == seqs  # nothing renumbered
            self._assert_parents_older(s)

    def test_a_commit_without_a_branch_goes_where_head_is_at_that_moment(self,
                                                                         backend_factory: BackendFactory) -> None:
        """``Store.commit(doc)`` writes on the branch HEAD names when it commits (git's ``commit``), also when
        another handle on the store switched HEAD after this one opened: HEAD is read in the write, never
        cached. An explicit branch moves only that branch and leaves HEAD."""
        from crewckpt.history.store import Store
        b = backend_factory.create()
        with new_store(b) as s:
            m = s.commit({"k": 0})
            handle = backend_factory.reopen(b)
            other = Store(handle, None) if handle is not None else s
            try:
                assert other.switch("exp", create=True) == "main"
                e = s.commit({"k": 1})
                assert s.info(e).branch == "exp" and s.info(e).parents == (m,)
                assert s.branches() == {"exp": e, "main": m} and s.resolve("HEAD") == e
                assert s.reflog("HEAD")[-1].new == bytes.fromhex(e)
                m2 = s.commit({"k": 2}, branch="main")
                assert s.current_branch() == "exp" and s.reflog("HEAD")[-1].new == bytes.fromhex(e)
                assert [c.id for c in s.log("main")] == [m2, m]
            finally:
                if other is not s:
                    other.close()

    def test_the_index_is_rebuilt_from_objects_and_refs(self, backend_factory: BackendFactory) -> None:
        with self._store(backend_factory) as s:
            a = s.commit({"x": 1}, alias="crew-a")
            s.commit({"x": 2})
            s.create_branch("dev", a)
            s.commit({"y": [1, 2]}, branch="dev", alias="crew-d")
            s.commit({"x": 3})
            before = [(c.id, c.branch, c.alias) for c in s.list()]
            with writing(s.backend) as w:
                ids = [r.id for r in w.index_rows()]
                w.index_remove(ids)
                w.alias_forget(ids)
            assert s.list() == [] and s.lookup_alias("crew-a") is None
            rep = s.rebuild_index()
            assert (rep.rows, rep.added, rep.aliases) == (4, 4, 2)
            assert [(c.id, c.branch, c.alias) for c in s.list()] == before
            assert s.lookup_alias("crew-a") == a and s.fsck(full=True).ok

    def test_processes_commit_to_one_branch_and_lose_nothing(self, backend_factory: BackendFactory) -> None:
        self._processes_commit(backend_factory, procs=2, each=6)

    def test_processes_commit_to_one_branch_and_lose_nothing_long(self, backend_factory: BackendFactory) -> None:
        self._processes_commit(backend_factory, procs=4, each=25)

    def _processes_commit(self, backend_factory: BackendFactory, procs: int, each: int) -> None:
        """Processes commit to one shared branch and to one branch each: every acknowledged checkpoint is
        live, the shared branch is one first-parent chain of all of them (no silent fork, none lost)."""
        b = backend_factory.create()
        s = new_store(b)
        try:
            spec = backend_factory.process_opener(b) if b.capabilities.shared else None
            if spec is None:
                pytest.skip("the store is not shared between processes")
            code = ("import sys\n"
                    "from crewckpt.testing.contract import open_from\n"
                    "from crewckpt.history.store import Store\n"
                    "s = Store(open_from((sys.argv[1], sys.argv[2])), None); k = sys.argv[3]\n"
                    "for i in range(int(sys.argv[4])):\n"
                    "    print(s.commit({'w': k, 'i': i, 'shared': 'z' * 1000}, branch='main'), flush=True)\n"
                    "    print(s.commit({'w': k, 'i': i}, branch='own-' + k), flush=True)\n"
                    "s.close()\n")
            outs = _run_children(code, [[spec[0], spec[1], str(k), str(each)] for k in range(procs)])
            acked = [ln for out in outs for ln in out.split()]
            assert len(acked) == 2 * procs * each
            chain = [c.id for c in s.log("main")]
            mains = [c for out in outs for c in out.split()[::2]]
            assert set(mains) == set(chain) and len(chain) == procs * each
            assert {c.id for c in s.list()} == set(acked) and s.fsck().ok
        finally:
            s.close()


__all__ = ["BackendContract", "BackendFactory", "Faulty", "MemoryFactory", "SqliteFactory", "StoreContract",
           "WithoutTransactions", "WithoutTransactionsFactory", "new_store", "obj", "open_from", "row",
           "store_model"]

"""One contract test class run against every backend (dulwich/restic style)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crewckpt.backends.base import Backend, IndexRow, ReflogEntry, StoredObject
from crewckpt.backends.memory import MemoryBackend
from crewckpt.backends.sqlite import SqliteBackend
from crewckpt.errors import RefConflict


def obj(i: int, size: int = 10) -> StoredObject:
    oid = i.to_bytes(32, "big")
    return StoredObject(oid, 1, size, b"\x00" + bytes([i % 251]) * size)


def row(i: int, branch: str = "main", seq: int | None = None) -> IndexRow:
    return IndexRow(i.to_bytes(32, "big"), branch, seq if seq is not None else i, 100 + i, "run", "ev", (), b"t" * 32,
                    b"\x95\x90\x00\x00\x00\x00", None, None)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    b: Backend
    if request.param == "postgres":
        from crewckpt.backends.postgres import PgBackend
        b = PgBackend.create(request.getfixturevalue("pg_url"))
    else:
        b = MemoryBackend() if request.param == "memory" else SqliteBackend.create(tmp_path)
    yield b
    b.close()


class TestBackendContract:
    def test_put_get_has_only_inserts_absent(self, backend: Backend) -> None:
        with backend.transaction() as t:
            assert t.put_many([obj(1), obj(2)], 10) == 2
        with backend.transaction() as t:
            assert t.put_many([obj(2), obj(3)], 20) == 1
        assert backend.get(obj(2).oid) == obj(2)
        assert backend.has_many([obj(1).oid, obj(9).oid]) == {obj(1).oid}
        touched = {m.oid: m.touched_ns for m in backend.iter_objects()}
        assert touched[obj(1).oid] == 10 and touched[obj(2).oid] == 20 and touched[obj(3).oid] == 20

    def test_more_than_32766_ids_in_one_lookup(self, backend: Backend) -> None:
        objs = [obj(i, 1) for i in range(40_000)]
        with backend.transaction() as t:
            t.put_many(objs, 1)
        ids = [o.oid for o in objs] + [obj(10**6).oid]
        assert len(backend.has_many(ids)) == 40_000
        assert len(backend.get_many(ids)) == 40_000
        with backend.transaction() as t:
            assert t.delete_objects(ids, 2) == 40_000

    def test_transaction_is_atomic(self, backend: Backend) -> None:
        with pytest.raises(RuntimeError):
            with backend.transaction() as t:
                t.put_many([obj(1)], 1)
                t.set_ref_if_equals("refs/heads/main", None, b"x" * 32)
                t.index_add(row(1))
                raise RuntimeError("crash mid-checkpoint")
        assert backend.get(obj(1).oid) is None
        assert backend.get_ref("refs/heads/main") is None
        assert backend.index_rows() == []

    def test_ref_compare_and_swap(self, backend: Backend) -> None:
        a, b = b"a" * 32, b"b" * 32
        with backend.transaction() as t:
            t.set_ref_if_equals("refs/heads/x", None, a)
        with pytest.raises(RefConflict):
            with backend.transaction() as t:
                t.set_ref_if_equals("refs/heads/x", b, a)
        with backend.transaction() as t:
            t.set_ref_if_equals("refs/heads/x", a, b)
        assert backend.get_ref("refs/heads/x") == b
        with backend.transaction() as t:
            t.set_ref_if_equals("refs/heads/x", b, None)
        assert backend.refs("refs/heads/") == {}

    def test_reflog_append_read_delete(self, backend: Backend) -> None:
        with backend.transaction() as t:
            for i in range(3):
                t.reflog_append(ReflogEntry("refs/heads/m", None if i == 0 else bytes([i]) * 32,
                                            bytes([i + 1]) * 32, i, f"c{i}"))
            t.reflog_append(ReflogEntry("refs/heads/o", None, b"z" * 32, 9, "other"))
        log = backend.reflog("refs/heads/m")
        assert [e.message for e in log] == ["c0", "c1", "c2"] and log[0].old is None
        with backend.transaction() as t:
            t.reflog_delete("refs/heads/m")
        assert backend.reflog("refs/heads/m") == [] and len(backend.reflog("refs/heads/o")) == 1

    def test_index_order_prefix_rebranch_remove(self, backend: Backend) -> None:
        with backend.transaction() as t:
            for i, seq in ((5, 3), (6, 1), (7, 2)):
                t.index_add(row(i, "b" if i == 7 else "main", seq))
        assert [r.seq for r in backend.index_rows()] == [1, 2, 3]
        assert [r.seq for r in backend.index_rows("main")] == [1, 3]
        assert backend.index_prefix(row(5).id.hex()) == [row(5).id]
        assert len(backend.index_prefix("0000")) == 3
        with backend.transaction() as t:
            t.index_rebranch("main", "trunk")
            assert t.index_remove([row(7).id]) == 1
        assert {r.branch for r in backend.index_rows()} == {"trunk"}
        got = backend.index_get(row(5).id)
        assert got is not None and got.branch == "trunk" and got.seq == 3 and backend.index_get(row(7).id) is None

    def test_counters_aliases_meta(self, backend: Backend) -> None:
        with backend.transaction() as t:
            assert [t.counter_next("seq") for _ in range(3)] == [1, 2, 3]
            t.alias_set("20261129T234227_0d859366", b"c" * 32)
            t.alias_set("20261129T234227_0d859366", b"d" * 32)  # first writer wins
            t.meta_set("k", "v")
        assert backend.alias_get("20261129T234227_0d859366") == b"c" * 32
        assert backend.meta_get("k") == "v" and backend.meta_get("nope") is None
        with backend.transaction() as t:
            t.alias_set("other", b"e" * 32)
            assert t.alias_forget([b"c" * 32, b"x" * 32]) == 1
        assert backend.alias_get("20261129T234227_0d859366") is None and backend.alias_get("other") == b"e" * 32

    def test_delete_respects_touched_and_reframe_keeps_id(self, backend: Backend) -> None:
        with backend.transaction() as t:
            t.put_many([obj(1), obj(2)], 10)
            t.put_many([obj(2)], 50)  # a put of a present object freshens it
        with backend.transaction() as t:
            assert t.delete_objects([obj(1).oid, obj(2).oid], 20) == 1
            assert t.reframe([(obj(2).oid, b"\x00new"), (obj(3).oid, b"\x00x")]) == 1
        got = backend.get(obj(2).oid)
        assert got is not None and got.frame == b"\x00new" and got.oid == obj(2).oid

    def test_get_prefix_and_stats(self, backend: Backend) -> None:
        with backend.transaction() as t:
            t.put_many([obj(1), StoredObject(b"\xab" * 32, 5, 3, b"\x00abc")], 1)
        assert [o.oid for o in backend.get_prefix(b"\xab" * 8, 5)] == [b"\xab" * 32]
        assert backend.get_prefix(b"\xab" * 8, 1) == []
        n, size, stored = backend.object_stats()
        assert (n, size) == (2, 13)

    def test_gc_lock_is_exclusive(self, backend: Backend) -> None:
        with backend.gc_lock() as a:
            assert a
            if isinstance(backend, MemoryBackend):
                with backend.gc_lock() as b:
                    assert not b
        with backend.gc_lock() as c:
            assert c


def test_sqlite_gc_lock_excludes_other_processes(tmp_path: Path) -> None:
    import subprocess
    import sys
    b = SqliteBackend.create(tmp_path)
    code = ("import sys; from crewckpt.backends.sqlite import SqliteBackend as S\n"
            "with S(sys.argv[1]).gc_lock() as got: print(got)")
    with b.gc_lock() as got:
        assert got
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
        assert out.stdout.strip() == "False", out.stderr
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert out.stdout.strip() == "True"

"""Issue 13, store level: a checkpoint's cost in the store follows what changed (SQLite round trips, the
splitter's reuse of cached Frozen values, the writer's own pack merges), and no shortcut weakens a rule."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from crewckpt import Frozen, Store
from crewckpt.history.snapshot import Parts


def F(v: Any) -> Frozen:
    return Frozen(v, orjson.dumps(v))


class CountingConnection:
    """An sqlite3 connection that counts the calls crewckpt makes into SQLite (one round trip each)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def execute(self, *a: Any) -> Any:
        self.calls += 1
        return self.conn.execute(*a)

    def executemany(self, *a: Any) -> Any:
        self.calls += 1
        return self.conn.executemany(*a)


def test_a_sqlite_checkpoint_costs_a_fixed_number_of_round_trips_whatever_it_writes(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    s.commit({"start": 1})
    counting = CountingConnection(s.backend._conn)  # type: ignore[attr-defined]
    s.backend._conn = counting  # type: ignore[attr-defined]
    calls = []
    for n in (3, 300):  # a few new objects, then hundreds (a big container cut into many leaves)
        doc = {"n": n, "items": [{"i": i, "text": f"entry {i} of {n} " * 40} for i in range(n)]}
        before = counting.calls
        cid = s.commit(doc)
        calls.append(counting.calls - before)
        assert s.read(cid) == doc
    # one call per verb, not one per object: BEGIN, epoch, objects, tip, commit object, CAS, 2 reflog
    # records, HEAD, run ref (read + CAS), seq, index row, COMMIT (before: 17 plus one per new object)
    assert calls[0] == calls[1] <= 14, calls
    s.close()


def test_a_cached_frozen_value_is_still_checked_against_the_kind_of_its_parts_container() -> None:
    s = Store.memory()
    piece = F({"a": 1})
    s.commit({"x": piece, "p": Parts([piece])})  # its representation is now cached on the Frozen
    with pytest.raises(TypeError, match="piece of a Parts array must be a list"):
        s.commit(Parts([F([0]), piece], array=True))
    assert s.read(s.commit(Parts([piece, F({"b": 2})]))) == {"a": 1, "b": 2}


def test_a_writer_merges_its_own_packs_without_reading_them_back(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from crewckpt.history import store as store_mod
    s = Store.init(tmp_path / "s")
    reads: list[str] = []
    merged: list[bool] = []
    real_merge = store_mod.Store._auto_repack

    def auto_repack(self: Store) -> None:
        merged.append(True)
        real_merge(self)

    monkeypatch.setattr(store_mod.Store, "_auto_repack", auto_repack)
    docs = [{"step": i, "text": f"{i} " + "w" * 9000, "log": [f"event {k}: " + "w" * 200 for k in range(i + 3)]}
            for i in range(store_mod.AUTO_PACKS)]  # a tree and a blob each: one pack per checkpoint
    ids = [s.commit(d) for d in docs[:-1]]
    for verb in ("get_many", "get_prefix"):
        real = getattr(s.backend, verb)
        monkeypatch.setattr(s.backend, verb, lambda *a, _v=verb, _r=real, **k: reads.append(_v) or _r(*a, **k))
    ids.append(s.commit(docs[-1]))  # the AUTO_PACKS-th checkpoint merges the writer's packs
    assert merged and not reads  # the bodies came from the writer's memory, not from decompressing its packs
    monkeypatch.undo()
    packs = [r for r in s.backend.iter_objects() if r.kind == 5]
    assert len(packs) == 1  # the per-checkpoint packs were merged into one and deleted
    s2 = Store.open(tmp_path / "s")
    assert [s2.read(c) for c in ids] == docs
    assert s2.fsck(full=True).broken == {}
    s2.close()
    s.close()


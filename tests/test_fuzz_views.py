"""Hostile CrewAI input (issue 8, item 5): JSONB blobs and SQLite checkpoint tables with any cell types.

Decoders return a value or raise JsonbError; importers return a report whose problems name what was
skipped, or raise a one-line CkptError; nothing else escapes and nothing hangs.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_harness import fixtures_root

from crewckpt.errors import CkptError
from crewckpt.history.store import Store
from crewckpt.views import layout
from crewckpt.views.jsonb import JsonbError, jsonb_to_text, jsonb_to_value
from crewckpt.views.transfer import import_checkpoints

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])


def _real_jsonb() -> list[bytes]:
    db = fixtures_root() / "crew_sqlite_star" / "cp.db"
    conn = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
    rows = [bytes(r[0])[:4000] for r in conn.execute("SELECT data FROM checkpoints ORDER BY rowid LIMIT 3")]
    conn.close()
    return rows


_JSONB = _real_jsonb()


@st.composite
def mutated_jsonb(draw: st.DrawFn) -> bytes:
    b = bytearray(draw(st.sampled_from(_JSONB)))
    for _ in range(draw(st.integers(0, 6))):
        i = draw(st.integers(0, len(b) - 1))
        b[i] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        del b[draw(st.integers(0, len(b))):]
    return bytes(b)


@FUZZ
@given(st.one_of(st.binary(max_size=300), mutated_jsonb()))
def test_jsonb_decoders_return_a_value_or_jsonb_error(blob: bytes) -> None:
    t0 = time.process_time()  # CPU time: a loaded machine slows the wall clock, not the work done
    for fn in (jsonb_to_value, jsonb_to_text):
        try:
            fn(blob)
        except JsonbError as e:
            assert "\n" not in str(e)
    assert time.process_time() - t0 < 5


cell = st.one_of(st.none(), st.integers(-5, 2 ** 63 - 1), st.floats(), st.text(max_size=20),
                 st.binary(max_size=20), st.sampled_from(["main", "../x", "/abs", "", "20261129T000000_0000abcd"]))
data_cell = st.one_of(cell, st.sampled_from(['{"entities": []}', '{"entities": [', "[]", '"x"']), mutated_jsonb())


@FUZZ
@given(st.lists(st.tuples(cell, cell, cell, cell, data_cell), max_size=6))
def test_importing_any_sqlite_checkpoint_table_reports_instead_of_raising(
        tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[object, ...]]) -> None:
    root = tmp_path_factory.mktemp("sq")
    db = root / "cp.db"
    conn = sqlite3.connect(db)
    conn.execute(layout.CREATE_TABLE.replace("PRIMARY KEY", "").replace("NOT NULL", "")
                 .replace("DEFAULT 'main'", ""))  # loose types: hostile files need not follow CrewAI's schema
    conn.executemany("INSERT INTO checkpoints(id, created_at, parent_id, branch, data) VALUES (?,?,?,?,?)", rows)
    conn.commit()
    conn.close()
    store = Store.init(root / "s")
    try:
        rep = import_checkpoints(store, db)
        assert all("\n" not in str(p) for p in rep.problems)
    except CkptError as e:
        assert "\n" not in str(e)
    assert store.fsck(full=True).ok
    store.close()


def test_importing_a_file_that_is_not_crewai(tmp_path: Path) -> None:
    for name, data in [("x.db", b"SQLite format 3\x00" + b"\x00" * 50), ("y.json", b"\x00\x01"), ("z.bin", b"")]:
        p = tmp_path / name
        p.write_bytes(data)
        with Store.init(tmp_path / f"s-{name}") as store:
            try:
                rep = import_checkpoints(store, p)
                assert not rep.imported
            except CkptError as e:
                assert "\n" not in str(e)

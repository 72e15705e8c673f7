"""Issue 12 fuzzing pass, store side: random damage to store.db rows and frames, then what a user runs.

A small real store (a few commits on two branches, one packed by gc) is copied; random rows of its tables
(objects, commits, refs, aliases, meta, reflog) get random damage: bytes flipped, cut, emptied, replaced by
NULL / TEXT / a huge or negative integer / another row's value. Then open, branches, list, log, read of
every commit, stats-like walks and fsck --full. Allowed outcomes: the exact document, or a one-line
CkptError. Never another exception, never a hang, never wrong data.

CI: short and deterministic. Longer: ``CKPT_FUZZ_EXAMPLES=2000 pytest -m fuzz tests/test_fuzz_hostile_store.py``.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crewckpt.errors import CkptError
from crewckpt.history.store import Store

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(600)]

EXAMPLES = int(os.environ.get("CKPT_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

TABLES = {"objects": ("frame", "kind", "size", "oid"), "commits": ("tree", "parents", "summary", "meta", "seq",
                                                                   "branch", "alias", "time_ns"),
          "refs": ("target", "name"), "aliases": ("id", "alias"), "meta": ("value",), "reflog": ("new", "old", "ref")}


def _docs() -> list[dict[str, Any]]:
    base = {"entities": [{"entity_type": "crew", "name": "c", "tasks": [{"output": "x" * 300}] * 3}],
            "event_record": {"nodes": {str(i): {"t": i} for i in range(20)}}}
    return [dict(base, v=i, text="line\n" * (50 + i)) for i in range(5)]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("pristine") / "s"
    docs: dict[str, Any] = {}
    with Store.init(root) as s:
        for i, d in enumerate(_docs()):
            docs[s.commit(d, branch="main" if i % 2 else "team/a", alias=f"20261129T00000{i}_0000000{i}")] = d
        s.gc()  # packs some objects
        docs[s.commit(dict(_docs()[0], v=99), branch="main")] = dict(_docs()[0], v=99)
    return root, docs


damage = st.tuples(st.sampled_from(sorted(TABLES)), st.integers(0, 50), st.integers(0, 7),
                   st.sampled_from(["flip", "cut", "empty", "null", "text", "huge", "negative", "swap"]),
                   st.integers(0, 1 << 20), st.integers(1, 255))


def _damage(db: Path, table: str, row_pick: int, col_pick: int, how: str, where: int, byte: int) -> None:
    conn = sqlite3.connect(db)
    try:
        col = TABLES[table][col_pick % len(TABLES[table])]
        keys = [r[0] for r in conn.execute(f"SELECT rowid FROM {table}")] if table == "reflog" else None
        pk = {"objects": "oid", "commits": "id", "refs": "name", "aliases": "alias", "meta": "key"}.get(table, "rowid")
        keys = keys or [r[0] for r in conn.execute(f"SELECT {pk} FROM {table}")]
        if not keys:
            return
        key = keys[row_pick % len(keys)]
        (value,) = conn.execute(f"SELECT {col} FROM {table} WHERE {pk} = ?", (key,)).fetchone()
        raw = value if isinstance(value, bytes) else (str(value).encode() if value is not None else b"")
        if how == "flip" and raw:
            i = where % len(raw)
            new: Any = raw[:i] + bytes([raw[i] ^ byte]) + raw[i + 1:]
            new = new if isinstance(value, bytes) else new.decode("utf-8", "replace")
        elif how == "cut":
            new = raw[: where % (len(raw) + 1)]
            new = new if isinstance(value, bytes) else new.decode("utf-8", "replace")
        elif how == "empty":
            new = b"" if isinstance(value, bytes) else ""
        elif how == "null":
            new = None
        elif how == "text":
            new = raw.decode("latin-1")
        elif how == "huge":
            new = (1 << 62) + where
        elif how == "negative":
            new = -where - 1
        else:  # swap in another row's value of the same column
            other = conn.execute(f"SELECT {col} FROM {table} WHERE {pk} != ? LIMIT 1", (key,)).fetchone()
            new = other[0] if other else None
        try:
            with conn:
                conn.execute(f"UPDATE {table} SET {col} = ? WHERE {pk} = ?", (new, key))
        except sqlite3.Error:  # NOT NULL / PRIMARY KEY: the schema refuses this damage
            pass
    finally:
        conn.close()


def _one_line(exc: BaseException) -> None:
    assert isinstance(exc, CkptError), f"raw {type(exc).__name__}: {exc}"
    assert "\n" not in str(exc), str(exc)


@FUZZ
@given(st.lists(damage, min_size=1, max_size=3))
def test_damaged_store_rows_give_exact_data_or_one_line_errors(
        pristine: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory,
        damages: list[tuple[Any, ...]]) -> None:
    src, docs = pristine
    root = tmp_path_factory.mktemp("damaged") / "s"
    shutil.copytree(src, root)
    for d in damages:
        _damage(root / "store.db", *d)
    try:
        store = Store.open(root)
    except Exception as exc:  # noqa: BLE001 - the assertion names it
        _one_line(exc)
        return
    with store:
        for step in (store.branches, store.list, lambda: list(store.log("main")), lambda: store.fsck(full=True)):
            try:
                step()
            except Exception as exc:  # noqa: BLE001
                _one_line(exc)
        for cid, doc in docs.items():
            try:
                got = store.read(cid)
            except Exception as exc:  # noqa: BLE001
                _one_line(exc)
                continue
            assert got == doc, f"wrong data for {cid[:12]} after {damages}"


@pytest.mark.parametrize("target", ["0" * 64, 1 << 62, -1])  # TEXT; huge int (bytes(n) allocated n); negative
def test_a_ref_target_that_is_not_a_blob_is_a_one_line_error(tmp_path: Path, target: object) -> None:
    """Found by the fuzz above: refs/aliases/reflog columns went through bytes(), so a TEXT target raised a
    raw TypeError, 2**62 a MemoryError and -1 a ValueError from `ckpt branch`, `log` and fsck."""
    with Store.init(tmp_path / "s") as s:
        s.commit({"entities": []}, branch="main")
    conn = sqlite3.connect(tmp_path / "s" / "store.db")
    with conn:
        conn.execute("UPDATE refs SET target = ?", (target,))
    conn.close()
    with Store.open(tmp_path / "s") as s:
        for step in (s.branches, lambda: list(s.log("main")), lambda: s.fsck(full=True)):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - the assertion names it
                _one_line(exc)

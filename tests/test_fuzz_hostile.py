"""Issue 12 fuzzing pass: hostile CrewAI folders and SQLite dbs through `list` (open_source + load) and import.

Random file kinds (regular, FIFO, links to /dev/zero, outside, inside, dangling, looping, folders, sparse files
over the size limit, non-UTF-8 names), random names and JSON shapes; random SQLite schemas (CrewAI's table,
loose types, views over endless CTEs, generated columns, WITHOUT ROWID, missing columns), random cells and
random byte damage. Only clean outcomes are allowed: a report whose problems are one line each, or a one-line
CkptError; never another exception, never a hang (pytest timeout), and the good checkpoint beside the junk
is always imported exactly (nothing from outside the folder ever is).

CI runs a short, deterministic form (derandomize, no example database). A longer form:
``CKPT_FUZZ_EXAMPLES=2000 pytest -m fuzz tests/test_fuzz_hostile.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from crewai_fixtures import FIXTURES
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from crewckpt.errors import CkptError
from crewckpt.history.store import Store
from crewckpt.views import layout
from crewckpt.views.reader import DamagedCheckpoint, open_source
from crewckpt.views.transfer import import_checkpoints

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(600)]

EXAMPLES = int(os.environ.get("CKPT_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

GOOD_ID = "20261129T235149_0f3cd06d"
GOOD = FIXTURES / "agent_json" / "main" / f"{GOOD_ID}_p-none.json"
GOOD_TEXT = GOOD.read_text()
LIMIT = 64 * 1024  # size limit during the fuzz, so "too big" files stay small and sparse
SECRET = "SECRET-OUTSIDE-THE-FOLDER"

json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
    max_leaves=12)
shapes = st.one_of(
    json_value.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(["entities", "event_record", "branch", "parent_id", "trigger", "x"]),
                    json_value, max_size=4).map(lambda v: json.dumps(v).encode()),
    st.sampled_from([
        GOOD_TEXT.encode()[:-1] + b', "x": NaN}', GOOD_TEXT.encode()[:-1] + b', "x": ' + b"9" * 5000 + b"}",
        b'{"entities": [' * 3000, b'[' * 100000, b"\xff\xfe{}", b"", GOOD_TEXT.encode()[: len(GOOD_TEXT) // 2],
        b'{"entities": [{"entity_type": 5}]}', b'{"entities": [], "event_record": []}',
        GOOD_TEXT.replace('"main"', '"../../x"').encode(), b"SQLite format 3\x00" + b"\x00" * 200]),
    st.binary(max_size=64))
names = st.one_of(
    st.sampled_from([f"{GOOD_ID}_p-none.json", "99991231T235959_aaaaaaaa_p-none.json",
                     "00010101T000000_aaaaaaaa_p-20261129T235149_0f3cd06d.json", "_p-.json", "x.json",
                     "20261129T235150_bbbbbbbb_p-20261129T235150_bbbbbbbb.json", ".hidden.json", "a_p-b_p-c.json"]),
    st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=20)
    .map(lambda s: s + ".json"))
KINDS = ["file", "file", "good", "fifo", "devzero", "outside", "inside", "dangling", "loop", "dir", "big",
         "badname", "linkdir"]
entries = st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(["main", "main", "fork/x", "a/b", ".h"]),
                             names, shapes), max_size=8)


def _make(root: Path, outside: Path, kind: str, folder: str, name: str, payload: bytes) -> None:
    d = root / folder
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    if os.path.lexists(p):
        return
    if kind == "file":
        p.write_bytes(payload)
    elif kind == "good":
        p.write_text(GOOD_TEXT.replace('"Solo"', json.dumps(name)))
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "devzero":
        p.symlink_to("/dev/zero")
    elif kind == "outside":
        p.symlink_to(outside / "secret.json")
    elif kind == "inside":
        p.symlink_to(root / "main" / GOOD.name)
    elif kind == "dangling":
        p.symlink_to(root / "nowhere.json")
    elif kind == "loop":
        p.symlink_to(p)
    elif kind == "dir":
        p.mkdir()
    elif kind == "big":
        with open(p, "wb") as f:
            f.truncate(LIMIT + 1 + len(payload))
    elif kind == "badname":
        with open(os.fsencode(d) + b"/\xff" + os.fsencode(name), "wb") as f:
            f.write(GOOD_TEXT.encode())
    elif kind == "linkdir":
        p.symlink_to(outside, target_is_directory=True)


def _check_clean(problems: list[Any]) -> None:
    for p in problems:
        text = str(p)
        assert "\n" not in text and text.isprintable(), text


def _list_and_import(root: Path, src: Path) -> Store:
    """What `ckpt list` and `ckpt import` (twice) do; returns the store. Only CkptError may escape."""
    with open_source(src, max_bytes=LIMIT) as source:
        for record in source.records:
            try:
                source.load(record)
            except DamagedCheckpoint as exc:
                assert "\n" not in str(exc)
        _check_clean(source.problems)
    store = Store.init(root / "store")
    old = os.environ.get("CKPT_MAX_CHECKPOINT_BYTES")
    os.environ["CKPT_MAX_CHECKPOINT_BYTES"] = str(LIMIT)
    try:
        first = import_checkpoints(store, src)
        again = import_checkpoints(store, src)
    finally:
        if old is None:
            os.environ.pop("CKPT_MAX_CHECKPOINT_BYTES", None)
        else:
            os.environ["CKPT_MAX_CHECKPOINT_BYTES"] = old
    _check_clean(first.problems + again.problems)
    assert not again.imported
    for cid, commit in first.imported:
        assert SECRET not in json.dumps(store.read(commit)), f"{cid} was read from outside the folder"
    return store


@FUZZ
@given(entries)
def test_hostile_json_folders_give_clean_reports(tmp_path_factory: pytest.TempPathFactory,
                                                 files: list[tuple[str, str, str, bytes]]) -> None:
    root = tmp_path_factory.mktemp("folder")
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text(GOOD_TEXT.replace('"Solo"', json.dumps(SECRET)))
    src = root / "src"
    (src / "main").mkdir(parents=True)
    shutil.copy(GOOD, src / "main" / GOOD.name)
    for kind, folder, name, payload in files:
        _make(src, outside, kind, folder, name, payload)
    store = _list_and_import(root, src)
    assert store.read(GOOD_ID) == json.loads(GOOD_TEXT)  # the good checkpoint beside the junk always imports
    store.close()


SCHEMAS = {
    "crewai": layout.CREATE_TABLE,
    "loose": "CREATE TABLE checkpoints (id, created_at, parent_id, branch, data)",
    "cte": """CREATE VIEW checkpoints AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r)
              SELECT 'id' || n AS id, 'x' AS created_at, NULL AS parent_id, 'main' AS branch, '{}' AS data
              FROM r ORDER BY n DESC""",
    "view": "CREATE TABLE t (id, created_at, parent_id, branch, data); CREATE VIEW checkpoints AS SELECT * FROM t",
    "generated": "CREATE TABLE checkpoints (id, created_at, parent_id, branch, d0, "
                 "data GENERATED ALWAYS AS (zeroblob(100000000)))",
    "norowid": "CREATE TABLE checkpoints (id TEXT PRIMARY KEY, created_at, parent_id, branch, data) WITHOUT ROWID",
    "missing": "CREATE TABLE checkpoints (id, created_at, branch, data)",
    "none": "CREATE TABLE other (x)",
}
cells = st.one_of(st.none(), st.integers(-5, 2 ** 63 - 1), st.floats(), st.text(max_size=12),
                  st.binary(max_size=12), st.sampled_from(["main", "../x", "", "99991231T235959_aaaaaaaa"]))
data_cells = st.one_of(cells, shapes.map(lambda b: b.decode("utf-8", "replace")), shapes,
                       st.sampled_from(["@big-blob", "@big-text", "@bad-utf8", "@good"]))
rows = st.lists(st.tuples(st.one_of(cells, st.sampled_from(["@bad-utf8"])), cells, cells, cells, data_cells),
                max_size=5)


def _bind(value: Any) -> tuple[str, list[Any]]:
    """SQL expression and parameters for a fuzzed cell (the markers make cells sqlite3 cannot bind)."""
    if value == "@big-blob":
        return f"zeroblob({LIMIT + 1})", []
    if value == "@big-text":
        return f"printf('%.*c', {LIMIT + 1}, 'x')", []
    if value == "@bad-utf8":
        return "CAST(x'7bff7d' AS TEXT)", []
    if value == "@good":
        return "?", [GOOD_TEXT]
    return "?", [value]


@FUZZ
@given(st.sampled_from(sorted(SCHEMAS)), rows, st.lists(st.tuples(st.integers(100, 1 << 16), st.integers(0, 255)),
                                                        max_size=4))
# found by CI: a damaged page made SQLite's own error message invalid UTF-8 (raw UnicodeDecodeError)
@example(schema="norowid", cells_=[], damage=[(65530, 128)])
def test_hostile_sqlite_dbs_give_clean_reports(tmp_path_factory: pytest.TempPathFactory, schema: str,
                                               cells_: list[tuple[Any, ...]], damage: list[tuple[int, int]]) -> None:
    root = tmp_path_factory.mktemp("db")
    db = root / "cp.db"
    conn = sqlite3.connect(db)
    conn.executescript(SCHEMAS[schema])
    target = {"view": "t"}.get(schema, "checkpoints")
    insertable = schema not in ("cte", "generated", "none")
    if schema == "generated":
        conn.execute("INSERT INTO checkpoints (id, created_at, branch) VALUES ('a', 'b', 'main')")
    if insertable:
        cols = "(id, created_at, branch, data)" if schema == "missing" else "(id, created_at, parent_id, branch, data)"
        conn.execute(f"INSERT INTO {target} {cols} VALUES ('{GOOD_ID}', 'x', "
                     + ("" if schema == "missing" else "NULL, ") + "'main', ?)", (GOOD_TEXT,))
        for row in cells_:
            if schema == "missing":
                row = (row[0], row[1], row[3], row[4])
            parts = [_bind(v) for v in row]
            sql = f"INSERT OR IGNORE INTO {target} {cols} VALUES ({', '.join(p for p, _ in parts)})"
            try:
                conn.execute(sql, [a for _, args in parts for a in args])
            except sqlite3.Error:  # CrewAI's NOT NULL / PRIMARY KEY: the row cannot exist in such a table
                pass
    conn.commit()
    conn.close()
    if damage:
        with open(db, "r+b") as f:
            size = f.seek(0, 2)
            for offset, byte in damage:
                f.seek(offset % size)
                f.write(bytes([byte]))
    try:
        store = _list_and_import(root, db)
    except CkptError as exc:
        assert "\n" not in str(exc)
        assert damage or schema not in ("crewai", "loose"), exc  # an undamaged CrewAI table always opens
        return
    if not damage and schema in ("crewai", "loose"):
        assert store.read(GOOD_ID) == json.loads(GOOD_TEXT)
    store.close()

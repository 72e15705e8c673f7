"""Issue 12, items 4 and 10 (import side): a CrewAI folder or db someone sent is hostile.

Only regular files are read (a FIFO named *.json does not block, devices are refused), symbolic links are not
followed out of the folder, oversized checkpoints are skipped unread, SQLite is read-only and bounded (a view
over an endless recursive CTE ends at once), and every odd entry is skipped with a reason while the rest is
imported; reruns finish. The export's temporary file is never opened through a planted link.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from crewai_fixtures import FIXTURES

from crewckpt.history.store import Store
from crewckpt.views import reader
from crewckpt.views.jsonb import JsonbError, jsonb_to_value
from crewckpt.views.reader import SourceError, open_source
from crewckpt.views.transfer import export_checkpoints, import_checkpoints

pytestmark = pytest.mark.timeout(120)  # a regression here is a hang: fail instead of blocking CI

GOOD_ID = "20261129T235149_0f3cd06d"
GOOD = FIXTURES / "agent_json" / "main" / f"{GOOD_ID}_p-none.json"
BAD_ID = "20261129T235150_aaaaaaaa"
BAD_NAME = f"{BAD_ID}_p-none.json"


def folder(tmp_path: Path) -> tuple[Path, Path]:
    """(source folder, its main/ branch folder) holding one good checkpoint."""
    src = tmp_path / "src"
    (src / "main").mkdir(parents=True)
    shutil.copy(GOOD, src / "main" / GOOD.name)
    return src, src / "main"


def skipped(report_or_source: object) -> dict[str, str]:
    """problem source or checkpoint id -> reason, for skipped entries."""
    out = {}
    for p in report_or_source.problems:  # type: ignore[attr-defined]
        if p.kind == "skipped":
            out[p.checkpoint_id or p.source] = p.reason
    return out


def import_twice(tmp_path: Path, src: Path | str) -> tuple[object, Store]:
    """Import, then import again (the rerun must finish and find the good one present)."""
    store = Store.init(tmp_path / "store")
    first = import_checkpoints(store, src)
    again = import_checkpoints(store, src)
    assert not again.imported and {c for c, _ in again.present} == {c for c, _ in first.imported}
    return first, store


def assert_good_imported(report: object, store: Store) -> None:
    assert GOOD_ID in {c for c, _ in report.imported}  # type: ignore[attr-defined]
    assert store.read(GOOD_ID) == json.loads(GOOD.read_text())


# -- file kinds ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [BAD_NAME, "notes.json"])
def test_a_fifo_named_json_is_skipped_without_blocking(tmp_path: Path, name: str) -> None:
    src, main = folder(tmp_path)
    os.mkfifo(main / name)
    with open_source(src) as source:
        assert "not a regular file (a FIFO)" in " ".join(skipped(source).values())
    report, store = import_twice(tmp_path, src)
    assert_good_imported(report, store)
    assert any("FIFO" in r for r in skipped(report).values())


def test_a_fifo_or_device_given_as_the_path_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "cp.json"
    os.mkfifo(fifo)
    with pytest.raises(SourceError, match="not a regular file or folder"):
        open_source(fifo)
    with pytest.raises(SourceError, match="not a regular file or folder"):
        open_source("/dev/zero")


@pytest.mark.parametrize("name", [BAD_NAME, "zero.json"])
def test_a_json_symlink_to_dev_zero_is_not_read(tmp_path: Path, name: str) -> None:
    src, main = folder(tmp_path)
    (main / name).symlink_to("/dev/zero")
    report, store = import_twice(tmp_path, src)
    assert_good_imported(report, store)
    assert "outside" in " ".join(skipped(report).values())


def test_a_device_file_in_the_folder_is_refused(tmp_path: Path) -> None:
    src, main = folder(tmp_path)
    try:
        os.mknod(main / BAD_NAME, 0o600 | 0o020000, os.makedev(1, 3))  # a character device (/dev/null's)
    except (PermissionError, OSError):
        pytest.skip("cannot create a device node here")
    report, store = import_twice(tmp_path, src)
    assert_good_imported(report, store)
    assert skipped(report)[BAD_ID] == "not a regular file (a character device); not read"


def test_symlinked_files_outside_the_folder_are_skipped_inside_ones_read(tmp_path: Path) -> None:
    src, main = folder(tmp_path)
    secret = tmp_path / "secret.json"
    secret.write_text(GOOD.read_text().replace('"Solo"', '"SECRET"'))
    (main / BAD_NAME).symlink_to(secret)
    inside_id = "20261129T235151_bbbbbbbb"
    (src / "keep").mkdir()
    (src / "keep" / "real.txt").write_text(GOOD.read_text())
    (main / f"{inside_id}_p-none.json").symlink_to(src / "keep" / "real.txt")
    (main / "20261129T235152_cccccccc_p-none.json").symlink_to(tmp_path / "nowhere.json")  # dangling
    (main / "20261129T235153_dddddddd_p-none.json").symlink_to("20261129T235153_dddddddd_p-none.json")  # loop
    report, store = import_twice(tmp_path, src)
    assert_good_imported(report, store)
    reasons = skipped(report)
    assert reasons[BAD_ID] == f"symbolic link to {secret}, outside {src}; not followed"
    assert reasons["20261129T235152_cccccccc"].startswith("broken symbolic link")
    assert reasons["20261129T235153_dddddddd"].startswith("broken symbolic link")
    assert inside_id in {c for c, _ in report.imported}  # type: ignore[attr-defined]
    assert all("SECRET" not in json.dumps(store.read(c)) for c, _ in report.imported)  # type: ignore[attr-defined]


def test_a_2gb_sparse_checkpoint_is_skipped_and_the_good_one_imported(tmp_path: Path) -> None:
    src, main = folder(tmp_path)
    for name in (BAD_NAME, "huge.json"):
        with open(main / name, "wb") as f:
            f.truncate(2 << 30)  # sparse: no disk used
    report, store = import_twice(tmp_path, src)
    assert_good_imported(report, store)
    reasons = skipped(report)
    assert reasons[BAD_ID] == ("file is 2,147,483,648 bytes, over the 268,435,456-byte limit for one checkpoint; "
                               "not read (set CKPT_MAX_CHECKPOINT_BYTES to import it)")
    assert reasons[str(main / "huge.json")] == reasons[BAD_ID]


def test_the_size_limit_is_the_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, _ = folder(tmp_path)
    monkeypatch.setenv("CKPT_MAX_CHECKPOINT_BYTES", "1000")
    with open_source(src) as source:
        assert not source.records and "over the 1,000-byte limit" in skipped(source)[GOOD_ID]
    monkeypatch.setenv("CKPT_MAX_CHECKPOINT_BYTES", str(GOOD.stat().st_size))
    with open_source(src) as source:
        assert [r.checkpoint_id for r in source.records] == [GOOD_ID]


def test_deeply_nested_folders_do_not_raise_recursion_error(tmp_path: Path) -> None:
    src, _ = folder(tmp_path)
    deep = str(src)
    for _ in range(1100):  # deeper than Python's recursion limit; 2,200 characters of path
        deep += "/d"
        os.mkdir(deep)  # one level at a time: makedirs recurses too
    report, store = import_twice(tmp_path, src)
    assert_good_imported(report, store)


# -- odd checkpoints (item 10) ---------------------------------------------------------------------------


def _doc_with(extra: str) -> str:
    return GOOD.read_text().rstrip()[:-1] + ", " + extra + "}"


@pytest.mark.parametrize(("cid", "text", "reason"), [
    ("99991231T235959_aaaaaaaa", None, "its date 99991231T235959 is outside what the store records"),
    ("23000101T000000_aaaaaaaa", None, "its date 23000101T000000 is outside what the store records"),
    ("00010101T000000_aaaaaaaa", None, "its date 00010101T000000 is outside what the store records"),
    (BAD_ID, _doc_with('"x": NaN'), "cannot be stored: nan is not a JSON number"),
    (BAD_ID, _doc_with('"x": -Infinity'), "cannot be stored: -inf is not a JSON number"),
    (BAD_ID, _doc_with('"x": ' + "9" * 5000), "holds a number Python's json module (so CrewAI too) cannot read"),
])
def test_one_odd_checkpoint_is_skipped_and_never_blocks_a_rerun(tmp_path: Path, cid: str, text: str | None,
                                                                 reason: str) -> None:
    src, main = folder(tmp_path)
    (main / f"{cid}_p-none.json").write_text(text or GOOD.read_text())
    child = f"20261129T235155_eeeeeeee_p-{cid}.json"  # its child comes in as an orphan
    (main / child).write_text(GOOD.read_text())
    report, store = import_twice(tmp_path, src)
    assert_good_imported(report, store)
    assert skipped(report)[cid].startswith(reason)
    assert "20261129T235155_eeeeeeee" in {c for c, _ in report.imported}  # type: ignore[attr-defined]


def test_non_utf8_file_and_folder_names_are_skipped(tmp_path: Path) -> None:
    src, main = folder(tmp_path)
    raw = GOOD.read_bytes()
    with open(os.fsencode(main) + b"/20261129T235150_aaaa\xff\xfe_p-none.json", "wb") as f:
        f.write(raw)
    with open(os.fsencode(main) + b"/\xff.json", "wb") as f:
        f.write(raw)
    os.mkdir(os.fsencode(src) + b"/br\xff")
    with open(os.fsencode(src) + b"/br\xff/" + BAD_NAME.encode(), "wb") as f:
        f.write(raw)
    report, store = import_twice(tmp_path, src)
    assert_good_imported(report, store)
    reasons = list(skipped(report).values())
    assert reasons.count("file name is not valid UTF-8 (CrewAI names checkpoints in ASCII); rename it") == 2
    assert "folder name is not valid UTF-8; rename it to import what it holds" in reasons
    assert all(str(p).isprintable() for p in report.problems)  # type: ignore[attr-defined]


def test_a_jsonb_integer_over_pythons_digit_limit_is_a_jsonb_error() -> None:
    digits = b"9" * 5000
    blob = bytes([0xD3]) + len(digits).to_bytes(2, "big") + digits  # INT, 2-byte size
    with pytest.raises(JsonbError, match="integer of 5,000 digits"):
        jsonb_to_value(blob)


# -- SQLite ----------------------------------------------------------------------------------------------


def _db_with_view(path: Path, sql: str) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(sql)
    conn.close()
    return path


CTE_VIEW = """CREATE VIEW checkpoints AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r)
SELECT '20261129T235149_' || printf('%08x', n) AS id, 'x' AS created_at, NULL AS parent_id, 'main' AS branch,
'{"entities": []}' AS data FROM r ORDER BY n DESC;"""


def test_a_view_over_an_endless_recursive_cte_ends_at_once(tmp_path: Path) -> None:
    db = _db_with_view(tmp_path / "cp.db", CTE_VIEW)
    assert db.stat().st_size <= 8192
    code = ("import sys\nfrom crewckpt.views.reader import open_source\n"
            "try:\n    open_source(sys.argv[1])\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    # in a child: the query runs in C, where no pytest timeout could stop it
    proc = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.stdout == f"SourceError {db}: 'checkpoints' is a view, not CrewAI's table; not read\n", proc.stderr


def test_ckpt_list_of_the_cte_db_ends_with_one_line_and_writes_no_temp_file(tmp_path: Path) -> None:
    db = _db_with_view(tmp_path / "cp.db", CTE_VIEW)
    tmpdir = tmp_path / "sqlite-tmp"
    tmpdir.mkdir()
    env = {**os.environ, "SQLITE_TMPDIR": str(tmpdir), "TMPDIR": str(tmpdir), "NO_COLOR": "1"}
    for args in (["list", str(db)], ["--store", str(tmp_path / "s"), "import", str(db)]):
        if args[0] == "--store":
            Store.init(tmp_path / "s").close()
        proc = subprocess.run([sys.executable, "-c", "from crewckpt.cli.main import main; main()", *args],
                              capture_output=True, text=True, timeout=90, env=env,
                              stdin=subprocess.DEVNULL, check=False)
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "is a view, not CrewAI's table" in proc.stderr
    assert list(tmpdir.iterdir()) == []


def test_generated_and_virtual_checkpoint_columns_are_refused(tmp_path: Path) -> None:
    db = _db_with_view(tmp_path / "g.db", "CREATE TABLE checkpoints (id TEXT, created_at TEXT, parent_id TEXT, "
                       "branch TEXT, raw TEXT, data TEXT GENERATED ALWAYS AS (printf('%.*c', 100000000, 'x')))")
    with pytest.raises(SourceError, match="column.s. data are computed"):
        open_source(db)


def test_every_statement_has_a_step_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "many.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE checkpoints (id TEXT PRIMARY KEY, created_at TEXT, parent_id TEXT, branch TEXT, "
                 "data JSONB)")
    conn.executemany("INSERT INTO checkpoints VALUES (?, 'x', NULL, 'main', '{}')",
                     [(f"20261129T235149_{n:08x}",) for n in range(5000)])
    conn.commit()
    conn.close()
    monkeypatch.setattr(reader, "SQLITE_STEP_BUDGET", 20_000 - db.stat().st_size)  # 20k steps in all
    with pytest.raises(SourceError, match=r"gave up after 20,000 SQLite steps in one statement"):
        open_source(db)
    monkeypatch.undo()
    with open_source(db) as source:
        assert len(source.records) == 5000


def test_sqlite_is_opened_read_only_bounded_and_leaves_nothing(tmp_path: Path) -> None:
    db = tmp_path / "cp.db"
    shutil.copy(FIXTURES / "crew_sqlite_star" / "cp.db", db)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.close()
    before = (db.read_bytes(), db.stat().st_mtime_ns, sorted(os.listdir(tmp_path)))
    with open_source(db) as source:
        c = source.conn  # type: ignore[attr-defined]
        assert c.execute("PRAGMA temp_store").fetchone() == (2,)  # memory: nothing spills to /var/tmp
        assert c.execute("PRAGMA trusted_schema").fetchone() == (0,)
        assert c.execute("PRAGMA query_only").fetchone() == (1,)
        with pytest.raises(sqlite3.DatabaseError):
            c.execute("DELETE FROM checkpoints")
        assert len(list(source.checkpoints())) == 26
    import_checkpoints(Store.init(tmp_path.parent / f"{tmp_path.name}-s"), db)
    assert (db.read_bytes(), db.stat().st_mtime_ns, sorted(os.listdir(tmp_path))) == before


def test_oversized_and_non_utf8_sqlite_rows_are_skipped_the_rest_imported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "cp.db"
    shutil.copy(FIXTURES / "crew_sqlite_star" / "cp.db", db)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("INSERT INTO checkpoints VALUES ('20261129T235150_0000000a', 'x', NULL, 'main', "
                     "zeroblob(600000))")
        conn.execute("INSERT INTO checkpoints VALUES ('20261129T235150_0000000b', 'x', NULL, 'main', "
                     "printf('%.*c', 600000, 'x'))")
        conn.execute("INSERT INTO checkpoints VALUES (CAST(x'32303236ff' AS TEXT), 'x', NULL, 'main', '{}')")
        conn.execute("INSERT INTO checkpoints VALUES ('20261129T235150_0000000c', 'x', NULL, 'main', "
                     "CAST(x'7bff7d' AS TEXT))")
    conn.close()
    monkeypatch.setenv("CKPT_MAX_CHECKPOINT_BYTES", "500000")  # the fixture's rows are at most 235 KB
    store = Store.init(tmp_path / "s")
    report = import_checkpoints(store, db)
    reasons = skipped(report)
    assert reasons["20261129T235150_0000000a"] == ("data is 600,000 bytes, over the 500,000-byte limit for one "
                                                   "checkpoint; not read (set CKPT_MAX_CHECKPOINT_BYTES to import it)")
    assert any("over the 500,000-byte limit" in r and "cell" in r for r in reasons.values())  # the text row
    assert any(r.startswith("row has no text id (b'2026") for r in reasons.values())
    assert reasons["20261129T235150_0000000c"] == "data is text that is not valid UTF-8"
    assert len(report.imported) == 26 and len(report.skipped) == 4  # type: ignore[attr-defined]


# -- export temp file (item 10) --------------------------------------------------------------------------


def test_export_never_writes_through_a_link_planted_at_its_temp_name(tmp_path: Path) -> None:
    store = Store.init(tmp_path / "s")
    store.commit({"entities": [], "v": 1}, branch="main", alias=GOOD_ID, time_ns=1_800_000_000 * 10**9)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    dest = tmp_path / "view"
    (dest / "main").mkdir(parents=True)
    name = f"{GOOD_ID}_p-none.json"
    planted = dest / "main" / f".{name}.{os.getpid()}.tmp"
    planted.symlink_to(victim)
    report = export_checkpoints(store, dest, fmt="json")
    assert victim.read_text() == "precious"
    assert planted.is_symlink() and os.readlink(planted) == str(victim)  # not ours: left alone
    out = dest / "main" / name
    assert not out.is_symlink() and json.loads(out.read_text()) == {"entities": [], "v": 1}
    assert report.outcome.written == [str(out)]
    assert sorted(p.name for p in (dest / "main").iterdir() if p.name.endswith(".tmp")) == [planted.name]


@pytest.mark.parametrize(("cid", "parent", "named"), [
    ("20261129T234523_\x1b]0;T\x07", None, "checkpoint id"),
    ("20261129T234523_a/b", None, "checkpoint id"),
    ("20261129T234523_ok", "20261129T234522_\x9b31m", "parent id"),
    ("20261129T234523_ok", "..\\x", "parent id"),
])
def test_an_id_holding_a_separator_or_a_control_character_never_becomes_a_file_name(
        tmp_path: Path, cid: str, parent: str | None, named: str) -> None:
    # before: an id from an imported SQLite row wrote a file whose name held ESC/BEL, and a bad parent id
    # was blamed on the child
    from crewckpt.errors import ViewWriteError
    from crewckpt.views.writer import JsonFolderWriter, ViewEntry

    w = JsonFolderWriter(tmp_path / "out")
    with pytest.raises(ViewWriteError) as info:
        w.path_for(ViewEntry(cid, parent, "main", "{}", "20261129T234523"))
    assert str(info.value).startswith(f"{named} {(cid if named == 'checkpoint id' else parent)!r}")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*"))

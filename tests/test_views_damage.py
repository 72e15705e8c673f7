"""Damaged CrewAI sources: the rest imports, the report says what was skipped and why; bad paths fail cleanly."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from crewai_fixtures import FIXTURES  # vendored copy of the CrewAI 1.15.30 fixtures

from crewckpt.errors import CkptError
from crewckpt.history.store import Store
from crewckpt.views.exporter import export_crewai
from crewckpt.views.importer import import_crewai
from crewckpt.views.reader import SourceError, open_source
from crewckpt.views.writer import SqliteWriter, ViewWriteError

STAR = "20261129T234227_{}"


def by_id(problems: list, kind: str) -> dict[str | None, str]:
    return {p.checkpoint_id: p.reason for p in problems if p.kind == kind}


def test_damaged_json_folder(tmp_path: Path) -> None:
    loc = tmp_path / "loc"
    shutil.copytree(FIXTURES / "crew_json_star", loc)
    main = loc / "main"
    truncated = next(main.glob(STAR.format("b015875c") + "_p-*.json"))
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    garbage = next(main.glob(STAR.format("874b92db") + "_p-*.json"))
    garbage.write_bytes(b'{"entities": [\xff\xfe]}')
    as_list = next(main.glob(STAR.format("d76dceb1") + "_p-*.json"))
    as_list.write_text("[1, 2, 3]")
    next(main.glob(STAR.format("4e04ef61") + "_p-*.json")).unlink()  # parent of 46afb789 and f7f0509e
    (main / "notes.json").write_text('{"hello": "world"}')  # no checkpoint name, no entities
    (main / "scratch.json").write_text('{"hello": ')  # no checkpoint name, unreadable

    store = Store.memory()
    report = import_crewai(store, loc, progress=False)
    skipped = by_id(report.problems, "skipped")
    assert skipped[STAR.format("b015875c")].startswith("truncated JSON")
    assert skipped[STAR.format("874b92db")] == "not UTF-8 text (byte 14)"
    assert skipped[STAR.format("d76dceb1")] == "data is a JSON list, not an object"
    assert {p.source for p in report.skipped if p.checkpoint_id is None} == {str(main / "notes.json"),
                                                                              str(main / "scratch.json")}
    # children of the deleted file and of the unreadable ones come in as orphans (root commits)
    orphans = by_id(report.problems, "orphan")
    assert {STAR.format("46afb789"), STAR.format("f7f0509e")} <= orphans.keys()
    assert STAR.format("b196afb0") in orphans  # its parent b015875c was truncated
    assert "is not in the source or the store" in orphans[STAR.format("46afb789")]
    assert len(report.imported) == 26 - 4
    assert store.info(STAR.format("46afb789")).parents == ()
    assert report.summary().endswith(f"{len(orphans)} without their parent, 5 skipped")
    # export keeps the recorded parent in the file name, so CrewAI still sees the missing link
    export_crewai(store, tmp_path / "out", "json")
    assert (tmp_path / "out" / "main" / f"{STAR.format('46afb789')}_p-{STAR.format('4e04ef61')}.json").exists()
    # repairing the source later links nothing retroactively but imports the missing ones
    shutil.copy(FIXTURES / "crew_json_star" / "main" / truncated.name, truncated)
    again = import_crewai(store, loc, progress=False)
    assert [cid for cid, _ in again.imported] == [STAR.format("b015875c")]


def test_damaged_sqlite_rows(tmp_path: Path) -> None:
    db = tmp_path / "cp.db"
    shutil.copy(FIXTURES / "crew_sqlite_star" / "cp.db", db)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE checkpoints SET data = ? WHERE id = '20261129T234249_58124a62'", ('{"entities": [',))
        conn.execute("UPDATE checkpoints SET data = substr(data, 1, 1000) WHERE id = '20261129T234249_0e33f8d5'")
        conn.execute("UPDATE checkpoints SET data = x'DEADBEEF' WHERE id = '20261129T234249_b8231373'")
        conn.execute("INSERT INTO checkpoints VALUES (NULL, '20261129T234249', NULL, 'main', '{}')")
        conn.execute("INSERT INTO checkpoints VALUES ('20261129T234250_0000beef', '20261129T234250', "
                     "'20261129T234249_ffffffff', 'main', '{\"entities\": []}')")
    conn.close()
    store = Store.memory()
    report = import_crewai(store, db, progress=False)
    skipped = by_id(report.problems, "skipped")
    assert skipped["20261129T234249_58124a62"].startswith("truncated JSON")
    assert skipped["20261129T234249_0e33f8d5"].startswith("invalid JSONB data: truncated")
    assert skipped["20261129T234249_b8231373"].startswith("invalid JSONB data")
    assert [p.reason for p in report.skipped if p.checkpoint_id is None] == ["row has no text id (None)"]
    orphans = by_id(report.problems, "orphan")
    assert "20261129T234250_0000beef" in orphans and "20261129T234249_ffffffff" in orphans["20261129T234250_0000beef"]
    assert len(report.imported) == 26 - 3 + 1
    export_crewai(store, tmp_path / "out.db", "sqlite")
    row = sqlite3.connect(tmp_path / "out.db").execute(
        "SELECT parent_id FROM checkpoints WHERE id = '20261129T234250_0000beef'").fetchone()
    assert row == ("20261129T234249_ffffffff",)


def test_bad_paths_fail_with_one_line_errors(tmp_path: Path) -> None:
    store = Store.memory()
    with pytest.raises(SourceError, match="no such file or folder"):
        import_crewai(store, tmp_path / "nope")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(SourceError, match="without a 'checkpoints' table"):
        open_source(other)
    wrong = tmp_path / "wrong.db"
    sqlite3.connect(wrong).execute("CREATE TABLE checkpoints (id TEXT, blob BLOB)").connection.commit()
    with pytest.raises(SourceError, match="lacks column"):
        open_source(wrong)
    with pytest.raises(ViewWriteError, match="not CrewAI's"):
        SqliteWriter(wrong)
    notdb = tmp_path / "notes.db"
    notdb.write_text("hello")
    with pytest.raises(ViewWriteError, match="not an SQLite database"):
        SqliteWriter(notdb)
    with pytest.raises(SourceError, match="no checkpoint with id"):
        open_source(f"{FIXTURES / 'crew_sqlite_star' / 'cp.db'}#20990101T000000_00000000")
    with pytest.raises(ValueError, match="unknown view format"):
        export_crewai(store, tmp_path / "x", "yaml")
    for err in (SourceError, ViewWriteError):
        assert issubclass(err, CkptError)


def test_bad_branch_names_are_skipped_not_fatal(tmp_path: Path) -> None:
    loc = tmp_path / "loc"
    shutil.copytree(FIXTURES / "flow_json" / "main", loc / "main")
    shutil.copytree(FIXTURES / "flow_json" / "experiment-1", loc / "bad..name")
    report = import_crewai(Store.memory(), loc, progress=False)
    assert len(report.imported) == 3
    assert len(report.skipped) == 2 and all("'bad..name' is not a valid name" in p.reason for p in report.skipped)


def test_an_export_to_a_db_named_like_an_sqlite_uri_writes_that_file(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """This SQLite reads a plain name starting with "file:" as a URI: "?mode=memory" exported into memory and
    wrote nothing (attacker finding). The name is a file name, whatever it looks like."""
    s = Store.init(tmp_path / "s")
    import_crewai(s, FIXTURES / "agent_json")
    monkeypatch.chdir(tmp_path)  # the name must be relative to look like a URI
    name = "file:x.db?mode=memory"
    n = len(s.list())
    export_crewai(s, name, "sqlite")
    s.close()
    db = tmp_path / name
    assert db.is_file()
    with sqlite3.connect(db.as_uri() + "?mode=ro", uri=True) as c:
        assert c.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == n

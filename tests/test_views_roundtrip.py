"""Import/export of every CrewAI fixture: lineage, branches, aliases, idempotence, exact round trips."""

from __future__ import annotations

import functools
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from crewai_fixtures import FIXTURES  # vendored copy of the CrewAI 1.15.30 fixtures

from crewckpt.history.store import Store
from crewckpt.views.exporter import export_crewai
from crewckpt.views.importer import import_crewai
from crewckpt.views.jsonb import jsonb_to_value
from crewckpt.views.layout import parse_filename
from crewckpt.views.reader import open_source

JSON_FIXTURES = ["crew_default/.checkpoints", "crew_json_star", "crew_json_star_n6", "crew_restore_src",
                 "flow_json", "flow_dict_star", "agent_json"]
ALL_FIXTURES = [*JSON_FIXTURES, "crew_sqlite_star/cp.db"]


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the read-only fixtures (copytree keeps mtimes)."""
    dst = tmp_path_factory.mktemp("fixtures")
    for name in ALL_FIXTURES:
        top = name.split("/")[0]
        if not (dst / top).exists():
            shutil.copytree(FIXTURES / top, dst / top)
    return dst


def expected_checkpoints(path: Path) -> dict[str, tuple[str | None, str, object]]:
    """CrewAI id -> (recorded parent id, branch, JSON value), read without crewckpt's reader."""
    out: dict[str, tuple[str | None, str, object]] = {}
    if path.suffix == ".db":
        for cid, parent, branch, data in sqlite3.connect(path).execute(
                "SELECT id, parent_id, branch, data FROM checkpoints"):
            out[cid] = (parent, branch, jsonb_to_value(data) if isinstance(data, bytes) else json.loads(data))
        return out
    for f in path.rglob("*.json"):
        cid, parent = parse_filename(f.name)  # type: ignore[misc]
        out[cid] = (parent, f.parent.relative_to(path).as_posix(), json.loads(f.read_text()))
    return out


# what a fixture holds, read once per module run (the SQLite fixture's JSONB decode takes seconds); never mutated
fixture_checkpoints = functools.cache(expected_checkpoints)


def same_json(a: object, b: object) -> bool:
    """Same JSON value, key order included."""
    return json.dumps(a) == json.dumps(b)


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_import_keeps_lineage_branches_aliases_and_is_idempotent(fixtures: Path, name: str) -> None:
    src = fixtures / name
    want = fixture_checkpoints(src)
    store = Store.memory()
    report = import_crewai(store, src, progress=False)
    assert report.problems == [] and len(report.imported) == len(want)
    commit_of = dict(report.imported)
    for cid, (parent, branch, value) in want.items():
        info = store.info(cid)  # the CrewAI id resolves as a revision
        assert info.id == commit_of[cid] and info.alias == cid and info.branch == branch
        assert info.parents == ((commit_of[parent],) if parent else ())
        assert same_json(store.read(cid), value)
        assert info.trigger == value.get("trigger")  # type: ignore[union-attr]
        assert info.meta == {}  # nothing that export cannot rebuild from the rest
    # the tip of every branch is its newest checkpoint: latest second, then most events recorded
    for branch, tip in report.branches.items():
        on_branch = [store.info(c) for c, (_, b, _) in want.items() if b == branch]
        newest = max((c.alias[:15], c.summary["event_count"]) for c in on_branch)  # type: ignore[index]
        assert (store.info(tip).alias[:15], store.info(tip).summary["event_count"]) == newest  # type: ignore[index]
    before = store.list()
    again = import_crewai(store, src, progress=False)
    assert again.imported == [] and sorted(again.present) == sorted(report.imported)
    assert store.list() == before


def test_forks_and_several_runs_on_one_branch(fixtures: Path) -> None:
    store = Store.memory()
    import_crewai(store, fixtures / "crew_restore_src", progress=False)
    # Crew.fork(branch="alt") from main's b6baebfb: the fork's first commit has main's commit as parent
    fork_root = store.info("20261129T234528_31cc0c7b")
    assert fork_root.branch == "alt" and fork_root.parents == (store.resolve("20261129T234525_b6baebfb"),)
    assert store.merge_base("alt", "20261129T234527_ae545a26") == store.resolve("20261129T234525_b6baebfb")
    # one parent with several children (resumed runs restore the same checkpoint)
    children = [c for c in store.list("main") if c.parents == (store.resolve("20261129T234525_b6baebfb"),)]
    assert len(children) >= 2
    # agent_json: three separate runs on main (three roots), three run ids
    store2 = Store.memory()
    import_crewai(store2, fixtures / "agent_json", progress=False)
    roots = [c for c in store2.list("main") if not c.parents]
    assert len(roots) == 3 and len({c.run_id for c in roots}) == 3
    assert {c.run_id for c in store2.list("main")} == {c.alias for c in roots}


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_export_reproduces_every_fixture_exactly(fixtures: Path, tmp_path: Path, name: str) -> None:
    src = fixtures / name
    want = fixture_checkpoints(src)
    store = Store.memory()
    import_crewai(store, src, progress=False)
    json_view, db_view = tmp_path / "view", tmp_path / "view.db"
    assert len(export_crewai(store, json_view, "json").outcome.written) == len(want)
    assert len(export_crewai(store, db_view, "sqlite").outcome.written) == len(want)
    for view in (json_view, db_view):
        got = expected_checkpoints(view)
        assert got.keys() == want.keys()
        for cid, (parent, branch, value) in want.items():
            assert got[cid][:2] == (parent, branch) and same_json(got[cid][2], value)
    if src.suffix != ".db":  # CrewAI's own files come back byte for byte, under the same names
        for f in src.rglob("*.json"):
            assert (json_view / f.relative_to(src)).read_bytes() == f.read_bytes()
    rows = sqlite3.connect(db_view).execute("SELECT typeof(data), created_at, id FROM checkpoints").fetchall()
    assert all(t == "text" and created == cid[:15] for t, created, cid in rows)
    assert sqlite3.connect(db_view).execute("PRAGMA journal_mode").fetchone() == ("wal",)


@pytest.mark.parametrize("name", ["crew_json_star_n6", "crew_restore_src", "crew_sqlite_star/cp.db"])
def test_commit_ids_survive_json_and_sqlite_round_trips(fixtures: Path, tmp_path: Path, name: str) -> None:
    first = Store.memory()
    ids = [c for _, c in import_crewai(first, fixtures / name, progress=False).imported]
    export_crewai(first, tmp_path / "a", "json")
    second = Store.memory()
    assert [c for _, c in import_crewai(second, tmp_path / "a", progress=False).imported] == ids
    export_crewai(second, tmp_path / "b.db", "sqlite")
    third = Store.memory()
    assert [c for _, c in import_crewai(third, tmp_path / "b.db", progress=False).imported] == ids
    assert third.branches() == first.branches()
    # importing the other format's copy into the first store adds nothing
    assert import_crewai(first, tmp_path / "b.db", progress=False).imported == []


def test_export_mtimes_make_the_tip_crewais_latest(fixtures: Path, tmp_path: Path) -> None:
    store = Store.memory()
    import_crewai(store, fixtures / "crew_json_star", progress=False)
    export_crewai(store, tmp_path / "v", "json")
    newest = max((tmp_path / "v").rglob("*.json"), key=os.path.getmtime)
    assert parse_filename(newest.name)[0] == store.info("main").alias  # type: ignore[index]
    rows = sqlite3.connect(export_crewai(store, tmp_path / "v.db", "sqlite").dest).execute(
        "SELECT id FROM checkpoints ORDER BY rowid DESC LIMIT 1").fetchone()
    assert rows == (store.info("main").alias,)


def test_export_selection_and_incremental(fixtures: Path, tmp_path: Path) -> None:
    store = Store.memory()
    import_crewai(store, fixtures / "crew_restore_src", progress=False)
    out = export_crewai(store, tmp_path / "v", "json", branch="alt")
    assert len(out.outcome.written) == 2 and {p.parent.name for p in (tmp_path / "v").rglob("*.json")} == {"alt"}
    out = export_crewai(store, tmp_path / "v", "json", revs=["main", "main~1", "main"])
    assert len(out.outcome.written) == 2
    out = export_crewai(store, tmp_path / "v", "json")
    assert len(out.outcome.written) == 10 and len(out.outcome.present) == 4
    # a file of the same name with other content is left alone and reported
    victim = next((tmp_path / "v" / "alt").glob("*.json"))
    victim.write_text('{"entities": []}')
    db = export_crewai(store, tmp_path / "v", "json")
    assert db.outcome.conflicts == [str(victim)] and victim.read_text() == '{"entities": []}'
    # named in the summary (fresh-user trial: "1 left alone" did not say which file no longer matches)
    assert f"1 left alone (same id, other data: {str(victim)!r}; remove them and export again" in db.summary()


def test_branch_prefix_nested_fork_folders_and_single_files(fixtures: Path, tmp_path: Path) -> None:
    loc = tmp_path / "loc"
    shutil.copytree(fixtures / "flow_json" / "main", loc / "main")
    shutil.copytree(fixtures / "flow_json" / "experiment-1", loc / "fork" / "20261129T235149_b75d688a_a1b2c3")
    store = Store.memory()
    report = import_crewai(store, loc, branch_prefix="imported/", progress=False)
    assert set(report.branches) == {"imported/main", "imported/fork/20261129T235149_b75d688a_a1b2c3"}
    export_crewai(store, tmp_path / "out", "json", strip_prefix="imported/")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.json")) == \
        sorted(p.relative_to(loc).as_posix() for p in loc.rglob("*.json"))
    # a branch folder given directly, then a single file and <db>#<id>: nothing new
    assert import_crewai(store, loc / "main", branch_prefix="imported/", progress=False).imported == []
    one = next((loc / "main").glob("*_p-none.json"))
    single = import_crewai(Store.memory(), one, progress=False)
    assert len(single.imported) == 1 and single.branches.keys() == {"main"}
    db = fixtures / "crew_sqlite_star" / "cp.db"
    with open_source(f"{db}#20261129T234249_a2511a60") as src:
        assert [r.checkpoint_id for r in src.records] == ["20261129T234249_a2511a60"]
    lone = import_crewai(Store.memory(), f"{db}#20261129T234249_a2511a60", progress=False)
    assert len(lone.imported) == 1 and [p.kind for p in lone.problems] == ["orphan"]


def test_one_branch_option_keeps_crewai_branches_for_export(fixtures: Path, tmp_path: Path) -> None:
    store = Store.memory()
    report = import_crewai(store, fixtures / "flow_json", branch="flows", progress=False)
    assert set(report.branches) == {"flows"} and len(store.list("flows")) == 5
    export_crewai(store, tmp_path / "v", "json")
    assert sorted(p.parent.name for p in (tmp_path / "v").rglob("*.json")) == ["experiment-1"] * 2 + ["main"] * 3


def test_on_disk_store_and_progress_callback(fixtures: Path, tmp_path: Path) -> None:
    store = Store.init(tmp_path / ".ckpt")
    seen: list[tuple[str, int, int]] = []
    report = import_crewai(store, fixtures / "crew_json_star", progress=lambda *a: seen.append(a))
    assert len(report.imported) == 26
    assert seen[-1] == ("committing", 26, 26) and ("reading", 26, 26) in seen
    store.close()
    reopened = Store.open(tmp_path / ".ckpt")
    assert import_crewai(reopened, fixtures / "crew_json_star", progress=False).imported == []
    assert reopened.info("20261129T234227_0d859366").alias == "20261129T234227_0d859366"
    reopened.close()


def test_store_methods(fixtures: Path, tmp_path: Path) -> None:
    store = Store.memory()
    report = import_crewai(store, fixtures / "flow_json", branch_prefix="crewai/")
    assert len(report.imported) == 5 and set(report.branches) == {"crewai/main", "crewai/experiment-1"}
    out = export_crewai(store, tmp_path / "v.db", "sqlite", branch="crewai/main", strip_prefix="crewai/")
    assert len(out.outcome.written) == 3


def test_manual_checkpoint_style_and_duplicates(fixtures: Path, tmp_path: Path) -> None:
    """Pydantic's compact text (CrewAI's manual checkpoints) comes back byte for byte; a checkpoint id found
    twice is imported once and the copy reported."""
    loc = tmp_path / "loc"
    shutil.copytree(fixtures / "flow_json" / "main", loc / "main")
    manual = next((loc / "main").glob("*_p-none.json"))
    value = json.loads(manual.read_text())
    value["entities"][0]["name"] = "café ✓"  # non-ASCII stays raw in pydantic's output
    compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    manual.write_text(compact, encoding="utf-8")
    (loc / "copy").mkdir()
    shutil.copy(manual, loc / "copy" / manual.name)
    store = Store.memory()
    report = import_crewai(store, loc, progress=False)
    assert len(report.imported) == 3
    (dup,) = report.skipped
    assert dup.source == str(loc / "copy" / manual.name) and "duplicate of checkpoint id in" in dup.reason
    cid = parse_filename(manual.name)[0]  # type: ignore[index]
    assert store.info(cid).meta == {"crewai": {"json_style": "compact"}}
    export_crewai(store, tmp_path / "out", "json")
    assert (tmp_path / "out" / "main" / manual.name).read_text(encoding="utf-8") == compact
    for other in (loc / "main").glob("*.json"):
        assert (tmp_path / "out" / "main" / other.name).read_bytes() == other.read_bytes()

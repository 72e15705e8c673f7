"""CrewAI reads what crewckpt exports as one history (issue 11 item 6): the data's ``parent_id`` is the id
CrewAI knows for the parent, so CrewAI 1.15.30's own checkpoint TUI puts a fork under its parent; live
views honour ``max_checkpoints`` like CrewAI's providers."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from crewckpt import Store
from crewckpt.testing import crewai_offline, research_crew  # noqa: F401  (the fixture)
from crewckpt.views.exporter import export_crewai
from crewckpt.views.importer import import_crewai, lookup_alias
from crewckpt.views.layout import parse_filename

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]


def _tree_of(location: str) -> list[tuple[int, str, Any]]:
    """CrewAI's own checkpoint TUI, run headless on ``location``: its tree as (depth, label, entry data)."""
    from crewai_cli.checkpoint_tui import CheckpointTUI
    from textual.widgets import Tree

    rows: list[tuple[int, str, Any]] = []

    async def run() -> None:
        app = CheckpointTUI(location)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            tree = app.query_one("#tree-panel", Tree)
            stack = [(tree.root, -1)]
            while stack:
                node, depth = stack.pop()
                if depth >= 0:
                    rows.append((depth, str(node.label), node.data))
                stack.extend((child, depth + 1) for child in reversed(node.children))

    asyncio.run(run())
    return rows


def _forked_store() -> tuple[Store, str]:
    """A 3-task crew on main, then a fork "alt" from main~1 that reruns task 3 (one checkpoint)."""
    from crewckpt.crewai import CheckpointConfig, restore

    research_crew(3, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    store = Store.open(".ckpt")
    fork_point = store.resolve("main~1")
    restore("main~1", store=".ckpt", fork="alt").kickoff()
    assert store.info("alt").parents == (fork_point,)
    return store, fork_point


def test_crewais_tui_shows_an_exported_fork_under_its_parent(tmp_path):
    store, fork_point = _forked_store()
    export_crewai(store, "view")
    files = {parse_filename(p.name)[0]: p for p in Path("view").rglob("*.json")}  # type: ignore[index]
    assert len(files) == 4
    for cid, path in files.items():  # the data names the same parent as the file name
        data = json.loads(path.read_text())
        assert data["parent_id"] == parse_filename(path.name)[1], cid  # type: ignore[index]
        assert data["branch"] == path.parent.name
    export_crewai(store, "view.db", "sqlite")
    for location in ("view", "view.db"):
        rows = _tree_of(location)
        labels = [label for _, label, _ in rows]
        assert not any("orphaned" in label for label in labels), (location, labels)
        # the alt branch node sits right under the fork point's checkpoint node
        alt = next(i for i, (_, label, _) in enumerate(rows) if "alt" in label)
        depth = rows[alt][0]
        parent = next(rows[j] for j in range(alt - 1, -1, -1) if rows[j][0] == depth - 1)
        name = parent[2]["name"]
        parent_id = parse_filename(name)[0] if name.endswith(".json") else name  # type: ignore[index]
        assert lookup_alias(store, parent_id) == fork_point, location


def test_exported_checkpoints_imported_from_crewai_stay_byte_for_byte(tmp_path, fixtures_copy):
    store = Store.init(tmp_path / ".ckpt")
    src = fixtures_copy / "crew_restore_src"
    import_crewai(store, src)
    out = tmp_path / "out"
    export_crewai(store, out)
    for path in src.rglob("*.json"):
        assert (out / path.relative_to(src)).read_bytes() == path.read_bytes()


@pytest.mark.parametrize("view", [".checkpoints", "view.db"])
def test_live_view_keeps_max_checkpoints_per_branch_like_crewai(view):
    from crewckpt.crewai import CheckpointConfig, flush_views

    research_crew(4, checkpoint=CheckpointConfig(view=view, max_checkpoints=2)).kickoff(inputs={"topic": "x"})
    assert flush_views(timeout=60)
    store = Store.open(".ckpt")
    kept = [c.id for c in store.list("main")]
    assert len(kept) == 2
    if view.endswith(".db"):
        with sqlite3.connect(view) as db:
            ids = [r[0] for r in db.execute("SELECT id FROM checkpoints ORDER BY rowid")]
    else:
        paths = sorted(Path(view, "main").glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        ids = [parse_filename(p.name)[0] for p in paths]  # type: ignore[index]
    assert len(ids) == 2  # CrewAI's provider would keep the same two
    assert [lookup_alias(store, i) for i in ids] == kept


def _view_files(out: Path) -> dict[str, tuple[str | None, Any]]:
    """checkpoint id -> (parent named by the file, parent_id in its data), asserting one file per id."""
    found: dict[str, tuple[str | None, Any]] = {}
    for path in out.rglob("*.json"):
        cid, parent = parse_filename(path.name)  # type: ignore[misc]
        assert cid not in found, f"two files for {cid}"
        found[cid] = (parent, json.loads(path.read_text()).get("parent_id"))
    return found


@pytest.mark.parametrize("source", ["crewckpt", "crewai"])
def test_export_names_a_pruned_parent_alike_before_and_after_gc(tmp_path, fixtures_copy, source):
    store = Store.init(tmp_path / ".ckpt")
    if source == "crewai":
        import_crewai(store, fixtures_copy / "crew_restore_src")
    else:  # crewckpt's CrewAI writer records the parent's commit id in the data
        parent = None
        for i in range(6):
            parent = store.commit({"step": i, "parent_id": parent, "branch": "main"}, branch="main",
                                  parents=[parent] if parent else None, time_ns=1_800_000_000_000_000_000 + i * 10**9)
    assert store.prune("main", keep=3)
    out = tmp_path / "ex"
    before = _view_files(out) if export_crewai(store, out).outcome.written else {}
    store.gc()
    again = export_crewai(store, out)
    assert again.outcome.written == [] and again.outcome.conflicts == []  # nothing new after gc
    after = _view_files(out)
    assert after == before and len(after) == len(store.list())
    for cid, (named, data) in after.items():
        assert named == data, cid  # the file name and the data name the same parent
        assert not (named or "").startswith("pruned_"), cid  # an id CrewAI never had
        if source == "crewckpt":  # a pruned parent is gone from the view: none, not a dangling id
            assert named is None or named in after, cid
    if source == "crewai":  # imported data keeps CrewAI's own parent ids: the originals
        src = {parse_filename(p.name)[0]: parse_filename(p.name)[1]  # type: ignore[index]
               for p in (fixtures_copy / "crew_restore_src").rglob("*.json")}
        assert all(src[cid] == named for cid, (named, _) in after.items())


def test_export_after_prune_never_writes_a_second_file_for_an_exported_checkpoint(tmp_path):
    store = Store.init(tmp_path / ".ckpt")
    parent = None
    for i in range(4):
        parent = store.commit({"step": i}, branch="main", parents=[parent] if parent else None,
                              time_ns=1_800_000_000_000_000_000 + i * 10**9)
    out = tmp_path / "ex"
    assert len(export_crewai(store, out).outcome.written) == 4
    store.prune("main", keep=2)
    store.gc()
    again = export_crewai(store, out)  # the oldest kept one's parent is gone: its name would change
    assert again.outcome.written == [] and len(_view_files(out)) == 4

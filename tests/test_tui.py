"""The checkpoint browser driven with Textual's Pilot (no CrewAI run needed)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import TabbedContent, TextArea, Tree
from tui_helpers import NOW, T0, build_store, crew_doc, settle, text_of

from crewckpt import Store
from crewckpt.tui import app as app_mod
from crewckpt.tui.app import CheckpointBrowser, ConfirmRun
from crewckpt.tui.model import build_history, progress_bar, relative_time

SIZE = (170, 48)


def drive(store: Store, body, **kw):
    """Run ``body(app, pilot)`` inside a headless app; returns (app, body's result)."""

    async def main():
        app = CheckpointBrowser(store, now_ns=NOW, **kw)
        app.animation_level = "none"  # Pilot waits for animations (the tabs' underline slides 0.3 s)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            result = await body(app, pilot)
        return app, result

    return asyncio.run(main())


@pytest.fixture
def store(tmp_path: Path):
    s, ids = build_store(tmp_path / ".ckpt")
    s.ids = ids  # type: ignore[attr-defined]
    yield s
    s.close()


def test_model_nests_forks_under_their_parent_and_splits_lines(tmp_path: Path):
    s, ids = build_store(tmp_path / ".ckpt")
    s.commit(crew_doc(1), branch="main", parents=[], trigger="crew_kickoff_started", time_ns=T0)  # 2nd run
    h = build_history(s.list(), s.branches())
    assert len(h.lines) == 3 and h.count == 8
    alt = h.lines[h.line_of[ids["a4"]]]
    assert alt.fork_point == ids["m2"] and [c.id for c in alt.commits] == [ids["a3"], ids["a4"]]
    assert h.forks_at[ids["m2"]] == [alt.index] and alt.tip_of == ["alt"]
    assert len(h.top) == 2 and h.lines[h.top[0]].branch == "main"  # newest activity first: the second run
    assert h.path_to(ids["a3"]) == [h.line_of[ids["m0"]], alt.index]
    assert sorted(h.children[ids["m2"]]) == sorted([ids["m3"], ids["a3"]])
    assert relative_time(T0, T0 + 90 * 10**9) == "1m ago" and relative_time(T0 + 5 * 10**9, T0) == "in 5s"
    assert progress_bar(1, 4, 4) == "█░░░ 1/4" and progress_bar(0, 0) == ""
    s.close()


def test_tree_navigation_and_fork_nesting(store: Store):
    ids = store.ids

    async def body(app, pilot):
        tree = app.query_one("#tree", Tree)
        assert app.selected == ids["a4"]  # the newest checkpoint, revealed inside its nested fork line
        alt_node = app._line_nodes[app.history.line_of[ids["a4"]]]
        assert alt_node.parent is app._commit_nodes[ids["m2"]]  # fork nested under the checkpoint it left
        assert "alt" in str(alt_node.label) and "2 checkpoints" in str(alt_node.label)
        label = str(app._commit_nodes[ids["m4"]].label)
        assert ids["m4"][:8] in label and "task_completed" in label and "4/4" in label and "(main)" in label
        assert "ago" in label and "20m ago" in str(app._commit_nodes[ids["m0"]].label)
        app.now_ns = NOW + 3 * 3600 * 10**9
        app._relabel_all()  # what the poll timer does every RELABEL_S
        assert "3h ago" in str(app._commit_nodes[ids["m0"]].label)
        assert "3h ago" in str(alt_node.label)
        app.now_ns = NOW
        seen = []
        for _ in range(3):
            await pilot.press("down")
            await settle(pilot)
            seen.append(app.selected)
        assert seen == [ids["a3"], ids["m1"], ids["m0"]]
        await pilot.press("up", "up", "up", "up", "up")  # m1, a3, a4, the alt line, m2
        await settle(pilot)
        assert app.selected == ids["m2"] and tree.cursor_node is app._commit_nodes[ids["m2"]]
        assert ids["m2"] in text_of(app, "#overview-body")
        assert "alt" in text_of(app, "#overview-body")  # children listed with their branch

    drive(store, body)


def test_lazy_pages_newer_and_older_placeholders(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(app_mod, "PAGE", 5)
    s = Store.init(tmp_path / ".ckpt")
    ids = [s.commit(crew_doc(min(k, 4)), trigger="task_completed", time_ns=T0 + k) for k in range(12)]

    async def body(app, pilot):
        assert len(app._commit_nodes) == 5 and app._window == {0: (0, 5)}  # only the newest page exists
        older = app._older_nodes[0]
        assert "7 older" in str(older.label) and not app._newer_nodes
        app.move_cursor(older)
        await pilot.press("enter")
        await settle(pilot)
        assert len(app._commit_nodes) == 10 and app.selected == ids[6]
        app.reveal(ids[0])
        await settle(pilot)
        assert len(app._commit_nodes) == 12 and not app._older_nodes and app.selected == ids[0]
        # a fresh tree opened on an old checkpoint loads only that checkpoint's page
        app.reload(keep=ids[1])
        await settle(pilot)
        assert app._window == {0: (10, 12)} and len(app._commit_nodes) == 2 and app.selected == ids[1]
        newer = app._newer_nodes[0]
        assert "10 newer" in str(newer.label)
        labels = [str(n.label) for n in app._line_nodes[0].children]
        assert "10 newer" in labels[0] and ids[1][:8] in labels[1] and ids[0][:8] in labels[2]
        app.move_cursor(newer)
        await pilot.press("enter")
        await settle(pilot)
        assert app._window == {0: (5, 12)} and app.selected == ids[2]  # the one next to the placeholder
        order = [n.data[1] for n in app._line_nodes[0].children if n.data[0] == "commit"]
        assert order == list(reversed(ids[:7]))  # newest first, no gaps
        assert "5 newer" in str(app._newer_nodes[0].label)

    drive(s, body)
    s.close()


def test_tabs_overview_events_inputs_and_diff(store: Store):
    ids = store.ids

    async def body(app, pilot):
        tabs = app.query_one("#tabs", TabbedContent)
        overview = text_of(app, "#overview-body")
        assert ids["a4"] in overview and "task_completed" in overview and "crew:research" in overview
        await pilot.press("2")
        assert tabs.active == "tasks"
        areas = list(app.query(TextArea))
        assert [a.id for a in areas] == ["out-0-0", "out-0-1", "out-0-2", "out-0-3"]
        assert areas[0].text == "hand edit"
        await pilot.press("3")
        assert tabs.active == "inputs"
        assert [i.value for i in app.query("#inputs-body Input")] == ["beavers", "3"]
        await pilot.press("5")
        events = text_of(app, "#events-body")
        assert "task_completed" in events and "Newest first (14 events)" in events
        assert events.index("\n14 │") < events.index("\n13 │") < events.index("\n 1 │")  # newest first
        await pilot.press("4")
        await settle(pilot)
        diff = text_of(app, "#diff-body")
        assert f"{ids['a3'][:12]} (parent) → {ids['a4'][:12]}" in diff and "task4" in diff
        # mark main's tip, come back: the diff is against the marked checkpoint
        app.reveal(ids["m4"])
        await settle(pilot)
        await pilot.press("m")
        assert app.marked == ids["m4"] and "◆" in str(app._commit_nodes[ids["m4"]].label)
        app.reveal(ids["a4"])
        await settle(pilot)
        diff = text_of(app, "#diff-body")
        assert "(marked ◆)" in diff and '"otters" -> "beavers"' in diff and "hand edit" in diff
        await pilot.press("1")
        assert tabs.active == "overview"

    drive(store, body)


def test_edit_output_marks_downstream_and_discard(store: Store):
    ids = store.ids

    async def body(app, pilot):
        app.reveal(ids["m4"])
        await settle(pilot)
        await pilot.press("2")
        area = app.query_one("#out-0-1", TextArea)
        area.focus()
        await pilot.press("end", *" EDITED")
        assert area.text.endswith("part 2 EDITED")
        edits = app.edits[ids["m4"]]
        assert edits.outputs == {(0, 1): area.text}
        assert "edited" in str(app._commit_nodes[ids["m4"]].label)
        assert "runs again on Fork" in str(app._task_notes[(0, 2)].content)  # completed at m4: reruns
        assert "runs again on Fork" in str(app._task_notes[(0, 3)].content)
        assert "✎ edited" in str(app._task_notes[(0, 1)].content)
        assert str(app._task_notes[(0, 0)].content) == ""  # upstream untouched
        await pilot.press("escape")  # back to the tree; edits survive navigation
        await pilot.press("down")
        await settle(pilot)
        app.reveal(ids["m4"])
        await settle(pilot)
        assert app.query_one("#out-0-1", TextArea).text.endswith("EDITED")
        await pilot.press("escape", "x")
        await settle(pilot)
        assert ids["m4"] not in app.edits and "edited" not in str(app._commit_nodes[ids["m4"]].label)
        assert not app.query_one("#out-0-1", TextArea).text.endswith("EDITED")
        area = app.query_one("#out-0-1", TextArea)
        area.focus()
        await pilot.press("end", "!", "escape", "q")  # unsaved edits: the first q only warns
        await pilot.pause()
        assert app.is_running and app.return_value is None
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running

    drive(store, body)


def test_fork_confirmation_panel_returns_the_plan(store: Store, monkeypatch):
    ids = store.ids
    monkeypatch.setattr(app_mod, "crewai_available", lambda: True)

    async def body(app, pilot):
        app.reveal(ids["m3"])
        await settle(pilot)
        await pilot.press("3")
        field = app.query_one("#in-0")
        field.focus()
        await pilot.press("ctrl+a", *"sea otters")  # ctrl+a: home in Input; then type in front
        assert app.edits[ids["m3"]].inputs == {"topic": "sea ottersotters"}
        field.value = "sea otters"
        await pilot.press("escape", "2")  # digits type into a focused field: leave it first
        area = app.query_one("#out-0-0", TextArea)
        area.focus()
        await pilot.press("f7", *"New findings")  # f7 selects all; typing replaces it
        await pilot.press("escape", "f")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ConfirmRun)
        body_text = text_of(screen, "#confirm-body")
        assert "input topic: otters → sea otters" in body_text
        assert "task 1 output edited: New findings" in body_text
        assert "run again: task2, task3, task4" in body_text  # task4 was running at m3
        assert "kept" not in body_text  # task1 is edited, so not 'kept'
        branch = screen.query_one("#confirm-branch")
        assert branch.value == f"fork/{ids['m3'][:8]}"
        branch.value = "alt"  # taken
        await pilot.pause()
        assert "already exists" in text_of(screen, "#confirm-error")
        await pilot.press("enter")
        assert app.screen is screen  # not accepted
        branch.value = "bad..name"
        await pilot.press("enter")
        assert app.screen is screen and "branch" in text_of(screen, "#confirm-error").lower()
        await pilot.press("escape")  # cancel: back to the browser, nothing planned
        assert not isinstance(app.screen, ConfirmRun) and app.return_value is None
        await pilot.press("f")
        await pilot.pause()
        app.screen.query_one("#confirm-branch").value = "sea"
        await pilot.press("enter")
        await pilot.pause()

    app, _ = drive(store, body)
    plan = app.return_value
    assert plan is not None and plan.action == "fork" and plan.rev == ids["m3"] and plan.branch == "sea"
    assert plan.inputs == {"topic": "sea otters", "n": 3} and plan.task_outputs == {(0, 0): "New findings"}


def test_resume_of_another_branchs_only_tip_says_it_continues_that_branch(store: Store, monkeypatch):
    """`ckpt fork main~2` makes fork/ID at a commit of main: resuming it continues fork/ID (restore's rule),
    and the panel said "new branch main-from-ID"."""
    ids = store.ids
    store.create_branch(f"fork/{ids['m2'][:8]}", ids["m2"])
    monkeypatch.setattr(app_mod, "crewai_available", lambda: True)

    async def body(app, pilot):
        app.reveal(ids["m2"])
        await settle(pilot)
        await pilot.press("e")
        await pilot.pause()
        text = text_of(app.screen, "#confirm-body")
        assert f"New checkpoints continue branch fork/{ids['m2'][:8]}." in text and "main-from" not in text

    drive(store, body)


def test_resume_confirmation_and_crewai_missing(store: Store, monkeypatch):
    ids = store.ids
    notes = []

    async def body(app, pilot):
        monkeypatch.setattr(app_mod, "crewai_available", lambda: False)
        monkeypatch.setattr(app, "notify", lambda message, **kw: notes.append(message))
        await pilot.press("f")
        await pilot.press("e")
        assert not isinstance(app.screen, ConfirmRun)
        monkeypatch.setattr(app_mod, "crewai_available", lambda: True)
        app.reveal(ids["m2"])  # not a branch tip: the panel says where new checkpoints go
        await settle(pilot)
        await pilot.press("e")
        await pilot.pause()
        text = text_of(app.screen, "#confirm-body")
        assert f"new branch main-from-{ids['m2'][:8]}" in text and "to run: task3, task4" in text
        await pilot.press("enter")
        await pilot.pause()

    app, _ = drive(store, body)
    assert len(notes) == 2 and all("crewai extra" in n and "pip install 'crewckpt[crewai]'" in n for n in notes)
    assert notes[0].startswith("Fork") and notes[1].startswith("Resume")
    assert app.return_value.action == "resume" and app.return_value.rev == ids["m2"]


def test_copy_id_and_refresh(store: Store, monkeypatch):
    copied = []

    async def body(app, pilot):
        monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
        notes = []
        monkeypatch.setattr(app, "notify", lambda message, **kw: notes.append(message))
        await pilot.press("c")
        new = store.commit(crew_doc(4, topic="new"), branch="main", trigger="manual", time_ns=NOW)
        assert new not in app.history.by_id
        app._poll()
        assert notes[-1] == "the store has new checkpoints: press r to refresh"
        app._poll()
        assert notes[0].startswith("copied ") and len(notes) == 2  # said once
        await pilot.press("r")
        await settle(pilot)
        assert new in app.history.by_id and new in app._commit_nodes
        assert app.selected == store.ids["a4"]  # the cursor stays where it was

    drive(store, body)
    assert copied == [store.ids["a4"]]


def test_empty_store_and_non_crewai_json(tmp_path: Path):
    s = Store.init(tmp_path / ".ckpt")

    async def empty(app, pilot):
        assert app.selected is None and "no checkpoints" in text_of(app, "#overview-body")

    drive(s, empty)
    cid = s.commit({"hello": [1, 2, 3]}, trigger=None)

    notes = []

    async def plain(app, pilot):
        assert app.selected == cid and "Not a CrewAI checkpoint" in text_of(app, "#overview-body")
        await pilot.press("2")
        assert "No tasks" in text_of(app, "#tasks-body Static")
        app.notify = lambda message, **kw: notes.append(message)
        app_mod.crewai_available = lambda: True
        try:
            await pilot.press("f")
        finally:
            app_mod.crewai_available = crewai_available
        assert not isinstance(app.screen, ConfirmRun)

    from crewckpt.tui.runner import crewai_available

    drive(s, plain)
    assert notes == ["Fork: this checkpoint holds no CrewAI crew, flow or agent to run"]
    s.close()


def test_browsing_and_diff_work_with_crewai_blocked(store: Store, tmp_path: Path):
    """A fresh interpreter where `import crewai` fails: the app browses, diffs, and Fork explains."""
    script = f"""
import asyncio, sys
sys.modules["crewai"] = None  # import crewai -> ImportError, find_spec -> ValueError
sys.path.insert(0, {str(Path(__file__).parent)!r})
from tui_helpers import settle, text_of
from crewckpt import Store
from crewckpt.tui.app import CheckpointBrowser
notes = []
async def main():
    app = CheckpointBrowser(Store.open({str(store.path)!r}))
    app.notify = lambda m, **kw: notes.append(m)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)
        print("DIFF", "(parent)" in text_of(app, "#diff-body"))
        await pilot.press("f")
        print("NOTE", notes)
asyncio.run(main())
print("MODULES", sorted(m for m in sys.modules if m.split(".")[0] == "crewai" and sys.modules[m] is not None))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "DIFF True" in proc.stdout and "MODULES []" in proc.stdout
    assert "needs the crewai extra" in proc.stdout and "pip install 'crewckpt[crewai]'" in proc.stdout


def test_ckpt_tui_command_needs_a_terminal(store: Store):
    from click.testing import CliRunner

    from crewckpt.cli.main import cli

    result = CliRunner().invoke(cli, ["tui", "--store", str(store.path)])
    assert result.exit_code == 1 and "`ckpt tui` needs a terminal" in result.output
    assert "Browse checkpoints" in CliRunner().invoke(cli, ["tui", "--help"]).output


def test_every_tab_on_real_crewai_checkpoints(tmp_path: Path):
    """Real CrewAI 1.15.30 crew, flow and agent checkpoints (imported): a tip of each run through every tab,
    and the lineage forks of CrewAI's thread-pool writer nested as lines."""
    from crewai_fixtures import FIXTURES

    from crewckpt.views.transfer import import_checkpoints

    s = Store.init(tmp_path / ".ckpt")
    for name in ("crew_restore_src", "flow_json", "flow_dict_star", "agent_json", "crew_json_star"):
        import_checkpoints(s, FIXTURES / name, branch_prefix=f"{name}/")

    async def body(app, pilot):
        h = app.history
        assert h.count == len(s.list()) and any(ln.fork_point for ln in h.lines)
        one_per_fixture = {ln.branch.split("/")[0]: ln.index for ln in reversed(h.lines)}
        assert len(one_per_fixture) == 5
        for li in one_per_fixture.values():
            app.reveal(h.lines[li].last.id)
            for key in "12345":
                await pilot.press(key)
                await settle(pilot)
            overview = text_of(app, "#overview-body")
            assert h.lines[li].last.id in overview and "cannot read" not in overview
            assert "(parent)" in text_of(app, "#diff-body") or not h.lines[li].last.parents
        kinds = {kind for c in h.by_id.values() for kind, _ in c.summary["entities"]}
        assert {"crew", "flow", "agent"} <= kinds

    drive(s, body)
    s.close()


def test_go_to_a_revision(store: Store):
    ids = store.ids

    async def body(app, pilot):
        await pilot.press("g", *"main~3", "enter")
        await settle(pilot)
        assert app.selected == ids["m1"] and not isinstance(app.screen, app_mod.GoTo)
        await pilot.press("g", *"nosuchbranch", "enter")
        await pilot.pause()
        assert isinstance(app.screen, app_mod.GoTo)
        assert "unknown revision 'nosuchbranch'" in text_of(app.screen, "#goto-error")
        app.screen.query_one("#goto-rev").value = "alt^"
        await pilot.press("enter")
        await settle(pilot)
        assert app.selected == ids["a3"]
        await pilot.press("g", "escape")
        assert app.selected == ids["a3"] and not isinstance(app.screen, app_mod.GoTo)

    drive(store, body)


def test_rapid_cursor_moves_decode_only_where_the_cursor_rests(store: Store, monkeypatch):
    reads = []
    real = store.read
    monkeypatch.setattr(store, "read", lambda rev: reads.append(rev) or real(rev))

    async def body(app, pilot):
        reads.clear()
        tree = app.query_one("#tree", Tree)
        for _ in range(4):  # a held key: no pause between moves
            tree.action_cursor_down()
        await settle(pilot)
        assert app.selected == store.ids["m0"] and reads == [store.ids["m0"]]
        assert store.ids["m0"] in text_of(app, "#overview-body")

    drive(store, body)

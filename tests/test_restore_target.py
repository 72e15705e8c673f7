"""Resumed and forked runs write into the store they were restored from (issue 11 item 1, issue 12 items 2
and 10): never into a store found from the working folder, never where a location, view or max_checkpoints
stored inside the checkpoint points. Real CrewAI 1.15.30, the scripted offline LLM, the real `ckpt` CLI in
its own process where the bug is the CLI's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

# crewckpt.testing first: it sets CrewAI's offline variables and registers ScriptedLLM for restore.
from crewckpt.testing import crewai_offline, research_crew  # noqa: F401  (crewai_offline: pytest fixture)

pytestmark = pytest.mark.crewai

CKPT = [sys.executable, "-c", "from crewckpt.cli.main import main; main()"]


def ckpt_proc(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `ckpt ARGS...` in its own process, in ``cwd`` (environment: the test's, offline)."""
    return subprocess.run([*CKPT, *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


def three_task_store(folder: Path) -> list[str]:
    """Run a 3-task crew checkpointing into ``folder/.ckpt`` (from ``folder``); its commit ids, oldest first."""
    from crewckpt import Store
    from crewckpt.crewai import CheckpointConfig

    here = os.getcwd()
    os.chdir(folder)
    try:
        research_crew(3, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    finally:
        os.chdir(here)
    with Store.open(folder / ".ckpt") as store:
        return [c.id for c in store.log("main")][::-1]


def commits(path: Path) -> set[str]:
    from crewckpt import Store

    with Store.open(path) as store:
        return {c.id for c in store.list()}


def test_resume_in_a_subfolder_and_with_store_continue_the_store_read_from(crewai_offline):  # noqa: F811
    from crewckpt import Store

    ids = three_task_store(crewai_offline)
    sub = crewai_offline / "src" / "pkg"
    sub.mkdir(parents=True)
    proc = ckpt_proc(sub, "resume", "main~1", "--json")
    assert proc.returncode == 0, proc.stderr
    record = orjson.loads(proc.stdout)
    assert not (sub / ".ckpt").exists()  # no new store in the working folder
    with Store.open(crewai_offline / ".ckpt") as store:
        new = [c for c in store.list() if c.id not in ids]
        assert [c.id for c in new] == [record["head"]] and new[0].parents == (ids[1],)
        assert record["branch"] == new[0].branch != "main"  # main's tip is not main~1: a new branch
        assert store.branches()["main"] == ids[-1]

    other = crewai_offline / "other"
    shutil.copytree(crewai_offline / ".ckpt", other / ".ckpt")
    before = commits(crewai_offline / ".ckpt")
    proc = ckpt_proc(sub, "--store", "../../other/.ckpt", "resume", "HEAD~2")
    assert proc.returncode == 0, proc.stderr
    assert commits(crewai_offline / ".ckpt") == before  # the original store is untouched
    with Store.open(other / ".ckpt") as store:
        new = [c for c in store.list() if c.id not in before]
        first = next(c for c in new if c.parents == (ids[0],))  # task2 and task3 ran again from HEAD~2
        last = next(c for c in new if c.parents == (first.id,))
        assert len(new) == 2 and last.branch == first.branch
    assert f"latest checkpoint now {last.id[:8]} on branch {last.branch}" in proc.stdout
    assert not (sub / ".ckpt").exists()


def test_restore_and_from_checkpoint_write_into_the_store_named(crewai_offline):  # noqa: F811
    from crewai import Crew

    from crewckpt.crewai import CheckpointConfig, restore

    ids = three_task_store(crewai_offline)
    copy = crewai_offline / "copy" / ".ckpt"
    shutil.copytree(crewai_offline / ".ckpt", copy)
    original = commits(crewai_offline / ".ckpt")
    os.chdir(crewai_offline / "copy")  # a working folder with no store of its own below it
    (crewai_offline / "copy" / "work").mkdir()
    os.chdir(crewai_offline / "copy" / "work")

    restore("main~1", store=str(copy)).kickoff()
    Crew.from_checkpoint(CheckpointConfig(location=str(copy), restore_from="main~2")).kickoff()
    Crew.fork(CheckpointConfig(location=str(copy), restore_from="main~2"), branch="exp").kickoff()
    research_crew(3).kickoff(from_checkpoint=CheckpointConfig(restore_from=f"{copy}#main~1"))

    assert commits(crewai_offline / ".ckpt") == original
    assert not (crewai_offline / "copy" / "work" / ".ckpt").exists()
    added = commits(copy) - original
    assert len(added) == 1 + 2 + 2 + 1
    from crewckpt import Store

    with Store.open(copy) as store:
        exp = [c.id for c in store.log("exp")]
        assert len(exp) == 3 and exp[-1] == ids[0]  # task2 and task3 on exp, on top of main~2


def test_tui_resume_and_fork_on_a_copied_store_stay_in_the_copy(crewai_offline, monkeypatch):  # noqa: F811
    from crewckpt import Store
    from crewckpt.tui import run
    from crewckpt.tui.app import CheckpointBrowser
    from crewckpt.tui.runner import RunPlan

    ids = three_task_store(crewai_offline)
    copy = crewai_offline / "demo-copy" / ".ckpt"
    shutil.copytree(crewai_offline / ".ckpt", copy)
    original = commits(crewai_offline / ".ckpt")

    plans = iter([RunPlan("fork", ids[0], "sea", {"topic": "sea otters"}), RunPlan("resume", ids[1])])
    monkeypatch.setattr(CheckpointBrowser, "run", lambda self: next(plans))
    printed: list[str] = []
    run(str(copy), echo=printed.append)
    run(str(copy), echo=printed.append)

    assert commits(crewai_offline / ".ckpt") == original  # the fork once landed in the original store
    with Store.open(copy) as store:
        sea = [c.id for c in store.log("sea")]
        assert len(sea) == 4 and sea[-1] == ids[0]  # fork checkpoint, task2, task3 on top of task1
        resumed = [c for c in store.list() if c.id not in original and c.id not in sea]
        assert len(resumed) == 1 and resumed[0].parents == (ids[1],)
    done = [line for line in printed if line.startswith("Done: latest checkpoint")]
    assert done[0].startswith(f"Done: latest checkpoint {sea[0][:12]} on branch sea.")
    assert done[1].startswith(f"Done: latest checkpoint {resumed[0].id[:12]} on branch {resumed[0].branch}.")


def test_settings_stored_in_a_checkpoint_never_choose_where_writes_go(crewai_offline):  # noqa: F811
    """An imported checkpoint names location, view and max_checkpoints of the sender's choosing."""
    from crewckpt import Store

    ids = three_task_store(crewai_offline)
    with Store.open(crewai_offline / ".ckpt") as store:
        doc = store.read(ids[0])
        hostile = crewai_offline / "sender"
        doc["entities"][0]["checkpoint"].update(
            location=str(hostile / "store"), view=str(hostile / "view"), max_checkpoints=1)
        for agent in doc["entities"][0]["agents"]:  # CrewAI's own JSON provider config, as CrewAI writes it
            agent["checkpoint"] = {"location": str(hostile / "json"), "on_events": ["task_completed"],
                                   "provider": {"provider_type": "json"}, "max_checkpoints": 1,
                                   "restore_from": None}
        sent = store.commit(doc, branch="imported", parents=[], trigger="task_completed")
    proc = ckpt_proc(crewai_offline, "resume", "imported", "--json")
    assert proc.returncode == 0, proc.stderr
    assert not hostile.exists()  # no store, no live view, no JSON files where the sender said
    with Store.open(crewai_offline / ".ckpt") as store:
        imported = [c.id for c in store.log("imported")]
        assert len(imported) == 3 and imported[-1] == sent  # nothing pruned: the sender's max_checkpoints=1
        assert [c.id for c in store.log("main")][::-1] == ids
    assert orjson.loads(proc.stdout)["head"] == imported[0]


def test_resume_json_prints_only_json_on_stdout(crewai_offline):  # noqa: F811
    from crewckpt.crewai import CheckpointConfig
    from crewckpt.testing import ScriptedLLM, ScriptedLLMError

    with pytest.raises(ScriptedLLMError):
        research_crew(2, llm=ScriptedLLM(fail_at_call=2), checkpoint=CheckpointConfig(),
                      verbose=True).kickoff(inputs={"topic": "otters"})
    proc = ckpt_proc(crewai_offline, "resume", "--json")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout[:2000]
    assert orjson.loads(lines[0])["entity"] == "Crew"
    assert "task2" in proc.stderr  # CrewAI's verbose panels went to stderr


def test_view_set_on_the_restoring_config_is_published(crewai_offline):  # noqa: F811
    """The user's own settings still apply: a view named on the config restored with gets the run."""
    from crewai import Crew

    from crewckpt.crewai import CheckpointConfig, flush_views

    three_task_store(crewai_offline)
    view = crewai_offline / "view"
    Crew.from_checkpoint(CheckpointConfig(restore_from="main~1", view=str(view))).kickoff()
    assert flush_views(60)
    assert len(list(view.rglob("*.json"))) == 1  # the one checkpoint the resumed run wrote

"""`ckpt resume` with real CrewAI 1.15.30 and the scripted offline LLM."""

from __future__ import annotations

import orjson
import pytest
from cli_helpers import ckpt, ok

# crewckpt.testing first: it sets CrewAI's offline variables and registers ScriptedLLM for restore.
from crewckpt.testing import crewai_offline, research_crew  # noqa: F401  (crewai_offline: pytest fixture)

pytestmark = pytest.mark.crewai


def test_resume_runs_the_remaining_tasks_and_forks_with_new_inputs(crewai_offline):  # noqa: F811
    from crewckpt import Store
    from crewckpt.crewai import CheckpointConfig

    research_crew(3, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    with Store.open(".ckpt") as store:
        before = [c.id for c in store.list()]
    assert len(before) == 3  # one checkpoint per completed task

    record = orjson.loads(ok(ckpt(None, "resume", "main~1", "--json")).stdout)
    assert record["id"] == before[1] and record["entity"] == "Crew"
    assert "task3" in record["output"] and "otters" in record["output"]
    with Store.open(".ckpt") as store:
        new = [c for c in store.list() if c.id not in before]
        assert [c.id for c in new] == [record["head"]]
        assert new[0].parents == (before[1],)  # the resumed run continues from the checkpoint
        assert store.read(record["head"])["entities"][0]["tasks"][2]["output"] is not None
        # main~1 was not a tip: the run went on a new branch, and `ckpt resume` made it the current branch
        assert record["branch"] != "main" and store.current_branch() == record["branch"]
        assert store.reflog("HEAD")[-1].message == f"resume: moving from main to {record['branch']}"
        assert store.resolve("HEAD") == record["head"] and store.resolve("@{-1}") == before[-1]

    out = ok(ckpt(None, "resume", "main~2", "--branch", "sea", "--inputs", '{"topic": "sea otters"}')).stdout
    assert out.startswith(f"Resumed Crew from {before[0][:8]}")
    with Store.open(".ckpt") as store:
        sea = [c.id for c in store.log("sea")]
        assert len(sea) == 3 and sea[-1] == before[0]  # two new tasks on branch sea, forked at main~2
        assert store.current_branch() == "sea" and "(now the current branch)" in out
    from crewckpt.crewai import restore

    restore("main~1", store=".ckpt").kickoff()  # a Python restore writes checkpoints but never moves HEAD
    with Store.open(".ckpt") as store:
        assert store.current_branch() == "sea" and store.resolve("latest") not in sea
    stat = ok(ckpt(None, "diff", "main", "sea", "--stat")).stdout
    assert '~ topic: "otters" -> "sea otters"' in stat
    assert (
        "~ task2  completed  output +1 -1 lines" in stat and "~ task3  completed  output +1 -1 lines" in stat
    )


def test_fork_with_an_edited_output_reruns_the_later_tasks(crewai_offline):  # noqa: F811
    from crewckpt import Store
    from crewckpt.crewai import CheckpointConfig

    research_crew(3, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    with Store.open(".ckpt") as store:
        done = [c.id for c in store.list()]
    bad = ckpt(None, "fork", "main", "--set-output", "task9=x")
    assert (
        bad.exit_code == 2 and "no task 'task9' in this checkpoint; tasks: task1, task2, task3" in bad.stderr
    )

    record = orjson.loads(
        ok(ckpt(None, "fork", "main", "--branch", "short", "--set-output", "1=EDITED", "--json")).stdout
    )
    assert record["branch"] == "short" and record["forked_from"] == done[-1]
    assert record["edited"] == ["task1"] and record["rerun"] == ["task2", "task3"]
    with Store.open(".ckpt") as store:
        fork_doc = store.read("short")
        assert store.info("short").trigger == "fork" and store.info("short").parents == (done[-1],)
    tasks = fork_doc["entities"][0]["tasks"]
    assert tasks[0]["output"]["raw"] == "EDITED" and tasks[1]["output"] is None and tasks[2]["output"] is None

    ok(ckpt(None, "resume", "short"))
    stat = ok(ckpt(None, "diff", "main", "short", "--stat")).stdout
    assert "~ task1  completed  output +1 -1 lines" in stat
    with Store.open(".ckpt") as store:
        final = store.read("short")["entities"][0]["tasks"]
    assert final[0]["output"]["raw"] == "EDITED" and all(t["output"] is not None for t in final)
    assert "EDITED" in final[1]["prompt_context"]  # the rerun task saw the edited output as context


def test_fork_with_new_inputs_then_resume_uses_them(crewai_offline):  # noqa: F811
    from crewckpt import Store
    from crewckpt.crewai import CheckpointConfig

    research_crew(3, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    out = ok(ckpt(None, "fork", "main~2", "--branch", "sea", "--inputs", '{"topic": "sea otters"}')).stdout
    assert out.startswith("Forked main~2") and "Resume it with: ckpt resume sea" in out
    record = orjson.loads(ok(ckpt(None, "resume", "sea", "--json")).stdout)  # inputs: as the fork recorded
    assert "sea otters" in record["output"]
    with Store.open(".ckpt") as store:
        tasks = store.read("sea")["entities"][0]["tasks"]
    assert "about otters" in tasks[0]["output"]["raw"]  # done before the fork: kept
    assert all("about sea otters" in t["output"]["raw"] for t in tasks[1:])  # run after it: new topic


def test_resume_of_a_finished_run_says_so_and_makes_its_branch_current(crewai_offline):  # noqa: F811
    """README: `ckpt resume` makes the branch current; a finished run has nothing to run, and says that."""
    from crewckpt import Store
    from crewckpt.crewai import CheckpointConfig

    research_crew(2, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    ok(ckpt(None, "branch", "sea2", "main"))
    with Store.open(".ckpt") as store:
        tip, count = store.resolve("main"), len(store.list())
        assert store.current_branch() == "main"
    out = ok(ckpt(None, "resume", "sea2")).stdout
    assert out.splitlines()[0] == f"nothing left to run: every task of {tip[:8]} is completed; sea2 is now the " \
                                  "current branch"
    with Store.open(".ckpt") as store:
        assert store.current_branch() == "sea2" and len(store.list()) == count  # switched, nothing written
        assert store.reflog("HEAD")[-1].message == "resume: moving from main to sea2"
    again = ok(ckpt(None, "resume", "sea2")).stdout
    assert again.splitlines()[0].endswith("; sea2 is the current branch")
    # inputs given to a run that has nothing left are said to be unused, not dropped silently
    told = ok(ckpt(None, "resume", "sea2", "--inputs", '{"topic": "x"}')).stdout.splitlines()[0]
    assert told.endswith("; sea2 is the current branch; --inputs not used: nothing ran (resume an earlier "
                         "checkpoint, e.g. sea2~1, to rerun with them)"), told
    with Store.open(".ckpt") as store:
        assert len(store.list()) == count


def test_resume_of_a_finished_star_run_writes_nothing(crewai_offline):  # noqa: F811
    """With on_events=["*"] a kickoff of a finished crew would still write kickoff checkpoints of a run that
    did nothing; `ckpt resume` of it says nothing is left, writes nothing and prints the crew's last output."""
    from crewckpt import Store
    from crewckpt.crewai import CheckpointConfig

    research_crew(2, checkpoint=CheckpointConfig(on_events=["*"])).kickoff(inputs={"topic": "otters"})
    with Store.open(".ckpt") as store:
        tip, count = store.resolve("main"), len(store.list())
        last = store.read(tip)["entities"][0]["tasks"][-1]["output"]["raw"]
    out = ok(ckpt(None, "resume", "main")).stdout
    assert out.splitlines()[0] == f"nothing left to run: every task of {tip[:8]} is completed; main is the " \
                                  "current branch", out
    assert out.rstrip("\n").endswith(last.rstrip("\n"))
    with Store.open(".ckpt") as store:
        assert len(store.list()) == count and store.resolve("main") == tip  # nothing written
    record = orjson.loads(ok(ckpt(None, "--json", "resume", "main")).stdout)
    assert record["head"] == tip and record["branch"] == "main"

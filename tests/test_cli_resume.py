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

    out = ok(ckpt(None, "resume", "main~2", "--branch", "sea", "--inputs", '{"topic": "sea otters"}')).stdout
    assert out.startswith(f"Resumed Crew from {before[0][:8]}")
    with Store.open(".ckpt") as store:
        sea = [c.id for c in store.log("sea")]
        assert len(sea) == 3 and sea[-1] == before[0]  # two new tasks on branch sea, forked at main~2
    stat = ok(ckpt(None, "diff", "main", "sea", "--stat")).stdout
    assert '~ topic: "otters" -> "sea otters"' in stat
    assert (
        "~ task2  completed  output +1 -1 lines" in stat and "~ task3  completed  output +1 -1 lines" in stat
    )

"""crewckpt.crewai with real crewai Crews and the scripted LLM: write, resume, fork, restore by rev."""

from __future__ import annotations

import pytest
from crewai import Crew
from crewai.state.runtime import RuntimeState

from crewckpt import Store
from crewckpt.crewai import CheckpointConfig, restore
from crewckpt.crewai.hooks import load_state
from crewckpt.errors import BranchExists, UnknownRevision
from crewckpt.testing import ScriptedLLM, crew_llms, crewai_offline, research_crew  # noqa: F401
from crewckpt.views.document import crewai_json

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]

PER_TASK = ["task_started", "agent_execution_started", "agent_logs_started", "agent_logs_execution",
            "agent_execution_completed", "task_completed"]


def star_triggers(n: int) -> list[str]:
    return ["crew_kickoff_started", *PER_TASK * n, "crew_kickoff_completed"]


def chain_of(store: Store, branch: str = "main") -> list[str]:
    return [c.id for c in store.log(branch)][::-1]


def assert_linear(store: Store, ids: list[str]) -> None:
    for parent, child in zip(ids, ids[1:]):
        assert store.info(child).parents == (parent,) or list(store.info(child).parents) == [parent]


def task_outputs(crew: Crew) -> list[str | None]:
    return [t.output.raw if t.output is not None else None for t in crew.tasks]


def test_star_crew_writes_38_checkpoints_in_one_chain_over_20_runs():
    runs: list[list[str]] = []
    for i in range(20):
        loc = f".ckpt{i}"
        crew = research_crew(6, checkpoint=CheckpointConfig(location=loc, on_events=["*"]))
        crew.kickoff(inputs={"topic": "otters"})
        store = Store.open(loc)
        commits = store.list()
        assert len(commits) == 38 == 2 + 6 * 6
        assert [c.trigger for c in commits] == star_triggers(6)
        ids = [c.id for c in commits]
        assert chain_of(store) == ids  # write order == parent chain order, one branch
        assert_linear(store, ids)
        assert len({c.run_id for c in commits}) == 1
        runs.append(ids)
    store = Store.open(".ckpt0")
    for k, cid in enumerate(runs[0]):
        doc = crewai_json(store.read(cid))
        assert doc["trigger"] == star_triggers(6)[k]
        assert doc["parent_id"] == (runs[0][k - 1] if k else None)
        state = load_state(RuntimeState, doc, context={"from_checkpoint": True})
        crew = next(e for e in state.root if isinstance(e, Crew))
        done = sum(t.output is not None for t in crew.tasks)
        assert done == store.info(cid).summary["tasks_done"]
    # consistent with the trigger: the trigger is the newest event each snapshot holds, and every
    # snapshot holds all events of the one before
    previous: set[str] = set()
    for cid in runs[0]:
        doc = store.read(cid)
        events = [n["event"] for n in doc["event_record"]["nodes"].values()
                  if not n["event"]["type"].startswith("checkpoint_")]
        newest = max(events, key=lambda e: e["emission_sequence"])
        assert newest["type"] == doc["trigger"]
        ids = {e["event_id"] for e in events}
        assert previous <= ids
        previous = ids


def test_resume_after_failure_makes_exactly_the_remaining_calls():
    llm = ScriptedLLM(fail_at_call=4)
    crew = research_crew(6, llm=llm, checkpoint=CheckpointConfig(on_events=["*"]))
    with pytest.raises(Exception, match="simulated failure"):
        crew.kickoff(inputs={"topic": "otters"})
    store = Store.open(".ckpt")
    before = store.list()
    assert before[-1].trigger == "crew_kickoff_failed"
    assert before[-1].summary["tasks_done"] == 3
    failed_tip = before[-1].id

    resumed = Crew.from_checkpoint(CheckpointConfig(restore_from="latest"))
    assert all(task_outputs(resumed)[:3]) and not any(task_outputs(resumed)[3:])
    out = resumed.kickoff()
    assert sum(l.calls for l in crew_llms(resumed)) == 3
    assert "task6" in out.raw and "otters" in out.raw
    after = store.list()
    new = after[len(before):]
    assert [c.trigger for c in new] == PER_TASK * 3 + ["crew_kickoff_completed"]
    assert list(store.info(new[0].id).parents) == [failed_tip]
    assert_linear(store, [failed_tip, *[c.id for c in new]])
    assert store.branches() == {"main": new[-1].id}


@pytest.mark.parametrize("k", [1, 3, 5])
def test_resume_from_task_k_runs_the_rest_on_a_new_branch_and_keeps_the_old(k):
    research_crew(6, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    store = Store.open(".ckpt")
    done = store.list()
    assert [c.trigger for c in done] == ["task_completed"] * 6
    old_doc = store.read(done[k - 1].id)
    crew = Crew.from_checkpoint(CheckpointConfig(restore_from=f"main~{6 - k}"))
    assert sum(o is not None for o in task_outputs(crew)) == k
    crew.kickoff()
    assert sum(l.calls for l in crew_llms(crew)) == 6 - k
    branches = store.branches()
    assert branches["main"] == done[-1].id  # the old continuation is untouched
    new_branch = f"main-from-{done[k - 1].id[:8]}"
    assert set(branches) == {"main", new_branch}
    new_chain = chain_of(store, new_branch)
    assert new_chain[: k] == [c.id for c in done[:k]]
    assert len(new_chain) == 6
    assert store.read(done[k - 1].id) == old_doc  # restoring never changes a stored checkpoint


def test_fork_with_edited_input_and_branch_rules():
    research_crew(4, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    store = Store.open(".ckpt")
    main_tip = store.branches()["main"]
    fork = Crew.fork(CheckpointConfig(restore_from="main~2"), branch="sea")
    out = fork.kickoff(inputs={"topic": "sea otters"})
    assert "sea otters" in out.raw
    assert sum(l.calls for l in crew_llms(fork)) == 2
    assert store.branches()["main"] == main_tip
    sea = chain_of(store, "sea")
    assert sea[:2] == chain_of(store, "main")[:2] and len(sea) == 4
    assert store.merge_base("main", "sea") == sea[1]
    assert store.read("sea")["branch"] == "sea"
    # the fork's results differ from main's only after the fork point
    main_doc, sea_doc = store.read("main"), store.read("sea")
    main_out = [t["output"]["raw"] for t in main_doc["entities"][0]["tasks"]]
    sea_out = [t["output"]["raw"] for t in sea_doc["entities"][0]["tasks"]]
    assert main_out[:2] == sea_out[:2] and main_out[2] != sea_out[2]

    with pytest.raises(BranchExists, match="sea"):
        Crew.fork(CheckpointConfig(restore_from="main~3"), branch="sea")
    auto = Crew.fork(CheckpointConfig(restore_from="main~3"))
    auto.kickoff()
    forks = [b for b in store.branches() if b.startswith("fork/")]
    assert len(forks) == 1 and forks[0].startswith(f"fork/{store.resolve('main~3')[:12]}_")


def test_kickoff_from_checkpoint_and_restore_helper():
    research_crew(3, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    store = Store.open(".ckpt")
    first = store.resolve("main~2")
    fresh = research_crew(3)
    out = fresh.kickoff(from_checkpoint=CheckpointConfig(restore_from=first[:8]))
    assert "task3" in out.raw
    assert len(store.list()) == 5  # 3 + the two remaining tasks, on a new branch
    crew = restore("main", store=store)
    assert isinstance(crew, Crew) and all(task_outputs(crew))
    crew2 = restore(first, store=".ckpt", fork="alt")
    crew2.kickoff()
    assert chain_of(store, "alt")[0] == first and len(chain_of(store, "alt")) == 3
    with pytest.raises(UnknownRevision):
        restore("nope", store=store)


def test_plain_crewai_config_restores_from_store_location():
    from crewai.state.checkpoint_config import CheckpointConfig as CrewAIConfig

    research_crew(2, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    store = Store.open(".ckpt")
    crew = Crew.from_checkpoint(CrewAIConfig(restore_from=f".ckpt#{store.resolve('main~1')}"))
    assert sum(o is not None for o in task_outputs(crew)) == 1
    crew.kickoff()
    assert len(store.list()) == 3


def test_concurrent_crews_in_threads_each_write_one_linear_chain():
    import threading

    errors: list[BaseException] = []

    def run(topic: str) -> None:
        try:
            research_crew(3, checkpoint=CheckpointConfig(on_events=["*"])).kickoff(inputs={"topic": topic})
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in ("otters", "beavers", "seals")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    store = Store.open(".ckpt")
    commits = store.list()
    assert len(commits) == 3 * 20
    by_run: dict[str, list] = {}
    for c in commits:
        by_run.setdefault(c.run_id, []).append(c)
    assert len(by_run) == 3
    for run in by_run.values():
        assert [c.trigger for c in run] == star_triggers(3)
        ids = [c.id for c in run]
        for parent, child in zip(ids, ids[1:]):
            assert list(store.info(child).parents) == [parent]
        topic = store.read(ids[-1])["entities"][0]["checkpoint_inputs"]["topic"]
        assert all(topic in (t["output"]["raw"]) for t in store.read(ids[-1])["entities"][0]["tasks"])


def test_async_kickoff_writes_the_same_chain():
    import asyncio

    crew = research_crew(2, checkpoint=CheckpointConfig(on_events=["*"]))
    asyncio.run(crew.kickoff_async(inputs={"topic": "otters"}))
    store = Store.open(".ckpt")
    commits = store.list()
    assert [c.trigger for c in commits] == star_triggers(2)
    assert chain_of(store) == [c.id for c in commits]


def test_document_equals_crewais_own_serialization():
    import orjson

    from crewckpt.crewai.snapshot import SnapshotBuilder, plain

    research_crew(3, checkpoint=CheckpointConfig(on_events=["*"])).kickoff(inputs={"topic": "otters"})
    store = Store.open(".ckpt")
    for rev in ("main~12", "main"):
        state = load_state(RuntimeState, crewai_json(store.read(rev)), context={"from_checkpoint": True})
        ours = crewai_json(plain(SnapshotBuilder().document(state, parent_id=state._parent_id,
                                                            branch=state._branch, trigger=None)))
        theirs = state.model_dump(mode="json", warnings=False)
        assert list(ours) == list(theirs)  # CrewAI's key order
        assert orjson.dumps(ours) == orjson.dumps(theirs)  # byte for byte, nested key order included

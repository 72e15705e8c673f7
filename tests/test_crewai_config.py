"""CheckpointConfig semantics with real crewai: inheritance, on_events, max_checkpoints, best-effort writes,
unserializable fields, the callbacks gate."""

from __future__ import annotations

import functools
import os
import subprocess
import time
import warnings
from pathlib import Path

import pytest
from crewai import Crew
from crewai.events.event_bus import crewai_event_bus
from crewai.events.types.checkpoint_events import (
    CheckpointCompletedEvent,
    CheckpointFailedEvent,
    CheckpointPrunedEvent,
)
from pydantic import ValidationError

from crewckpt import PrunedCommit, Store
from crewckpt.crewai import CheckpointConfig, CrewckptProvider, UnserializableFieldWarning
from crewckpt.crewai.writer import forget_stores
from crewckpt.testing import ScriptedLLM, crewai_offline, research_crew  # noqa: F401

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]

CALLBACK_OUTPUTS: list[str] = []


def record_output(output: object) -> None:
    """A module-level task callback: stored as a dotted path, restorable behind the gate."""
    CALLBACK_OUTPUTS.append(str(output))


class Sink:
    def take(self, output: object) -> None:
        CALLBACK_OUTPUTS.append(str(output))


class Collector:
    """Collects CrewAI checkpoint events for the duration of a ``with`` block."""

    def __init__(self) -> None:
        self.events: list[object] = []

    def __enter__(self) -> Collector:
        self._scope = crewai_event_bus.scoped_handlers()
        self._scope.__enter__()
        for cls in (CheckpointCompletedEvent, CheckpointFailedEvent, CheckpointPrunedEvent):
            crewai_event_bus.on(cls)(self._on)
        return self

    def _on(self, source: object, event: object) -> None:
        self.events.append(event)

    def __exit__(self, *exc: object) -> None:
        crewai_event_bus.flush()
        self._scope.__exit__(*exc)

    def of(self, cls: type) -> list:
        return [e for e in self.events if isinstance(e, cls)]


def test_defaults_and_validation():
    cfg = CheckpointConfig()
    assert cfg.location == "./.ckpt" and cfg.on_events == ["task_completed"]
    assert cfg.max_checkpoints is None and cfg.restore_from is None
    assert isinstance(cfg.provider, CrewckptProvider)
    assert CheckpointConfig.model_validate(cfg.model_dump(mode="json")) == cfg
    with pytest.raises(ValidationError, match="crewckpt store"):
        CheckpointConfig(provider={"provider_type": "json"})
    with pytest.raises(ValidationError):
        CheckpointConfig(on_events=["no_such_event"])
    assert CheckpointConfig(on_events=["SIGTERM", "task_started"]).signals == {"SIGTERM"}
    assert CheckpointConfig(on_events=["*"]).triggers("anything")
    with pytest.raises(ValidationError, match="max_checkpoints must be at least 1"):
        CheckpointConfig(max_checkpoints=0)


def test_inheritance_override_and_opt_out():
    crew = research_crew(3, checkpoint=CheckpointConfig())
    crew.agents[1].checkpoint = False  # Writer (task2) opts out
    crew.agents[0].checkpoint = CheckpointConfig(location=".agent", on_events=["task_started"])
    crew.kickoff(inputs={"topic": "otters"})
    main = Store.open(".ckpt").list()
    assert [(c.trigger, c.summary["tasks_done"]) for c in main] == [("task_completed", 3)]
    agent = Store.open(".agent").list()
    assert [(c.trigger, c.summary["tasks_done"]) for c in agent] == [("task_started", 0)]

    # None on the crew, a config on one agent: only that agent's tasks checkpoint
    crew = research_crew(3)
    crew.agents[2].checkpoint = CheckpointConfig(location=".editor")
    crew.kickoff(inputs={"topic": "otters"})
    assert [c.summary["tasks_done"] for c in Store.open(".editor").list()] == [3]


def test_on_events_filtering():
    research_crew(3, checkpoint=CheckpointConfig(on_events=["task_started", "agent_execution_completed"])
                  ).kickoff(inputs={"topic": "otters"})
    triggers = [c.trigger for c in Store.open(".ckpt").list()]
    assert triggers == ["task_started", "agent_execution_completed"] * 3
    research_crew(2, checkpoint=CheckpointConfig(location=".k", on_events=["crew_kickoff_completed"])
                  ).kickoff(inputs={"topic": "otters"})
    assert [c.trigger for c in Store.open(".k").list()] == ["crew_kickoff_completed"]


def test_max_checkpoints_prunes_the_branch_after_each_write():
    with Collector() as seen:
        research_crew(3, checkpoint=CheckpointConfig(on_events=["*"], max_checkpoints=3)
                      ).kickoff(inputs={"topic": "otters"})
    store = Store.open(".ckpt")
    live = store.list("main")
    assert [c.trigger for c in live] == ["agent_execution_completed", "task_completed",
                                         "crew_kickoff_completed"]
    log = list(store.log("main"))
    assert len(log) == 20 and sum(isinstance(c, PrunedCommit) or not c.live for c in log) == 17
    pruned = seen.of(CheckpointPrunedEvent)
    assert len(pruned) == 20 and sum(e.removed_count for e in pruned) == 17
    assert all(e.max_checkpoints == 3 for e in pruned)
    crew = Crew.from_checkpoint(CheckpointConfig(restore_from="main~2"))
    assert sum(t.output is not None for t in crew.tasks) == 2


def _freeze(path: Path, on: bool) -> bool:
    """Make a store folder read-only (chattr +i for root, chmod otherwise); False if not possible."""
    files = [path, *path.iterdir()]
    if os.geteuid() == 0:
        flag = "+i" if on else "-i"
        result = subprocess.run(["chattr", flag, *map(str, files)], capture_output=True)
        return result.returncode == 0
    for f in files:
        f.chmod(0o555 if on and f.is_dir() else 0o444 if on else 0o755 if f.is_dir() else 0o644)
    return True


def test_read_only_store_does_not_stop_the_run(caplog):
    research_crew(2, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    forget_stores()
    store_dir = Path(".ckpt")
    if not _freeze(store_dir, True):
        pytest.skip("cannot make a folder read-only here")
    try:
        with Collector() as seen:
            out = research_crew(3, checkpoint=CheckpointConfig(on_events=["*"])).kickoff(
                inputs={"topic": "otters"})
        assert "task3" in out.raw
        failed = seen.of(CheckpointFailedEvent)
        assert len(failed) == 20 and not seen.of(CheckpointCompletedEvent)
        assert all(e.provider == "CrewckptProvider" and e.error for e in failed)
        assert any("checkpoint on" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records)
    finally:
        _freeze(store_dir, False)
        forget_stores()
    assert len(Store.open(".ckpt").list()) == 2  # nothing stored was lost or changed


def test_unserializable_field_dropped_with_one_warning():
    crew = research_crew(3, checkpoint=CheckpointConfig(on_events=["*"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CrewAI's own warning at assignment
        crew.tasks[0].callback = functools.partial(record_output)
        crew.tasks[1].callback = Sink().take  # a bound method: its dotted path would not restore
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        crew.kickoff(inputs={"topic": "otters"})
    ours = [w for w in caught if issubclass(w.category, UnserializableFieldWarning)]
    assert len(ours) == 1 and "Task.callback" in str(ours[0].message)
    store = Store.open(".ckpt")
    assert len(store.list()) == 20
    doc = store.read("main")
    assert [t["callback"] for t in doc["entities"][0]["tasks"]] == [None, None, None]
    restored = Crew.from_checkpoint(CheckpointConfig(restore_from="main"))
    assert restored.tasks[0].callback is None


def test_callbacks_gate_both_ways(monkeypatch):
    crew = research_crew(2, checkpoint=CheckpointConfig())
    crew.tasks[0].callback = record_output
    crew.kickoff(inputs={"topic": "otters"})
    doc = Store.open(".ckpt").read("main")
    assert doc["entities"][0]["tasks"][0]["callback"] == f"{__name__}.record_output"
    monkeypatch.delenv("CREWAI_DESERIALIZE_CALLBACKS", raising=False)
    with pytest.raises(ValueError, match="CREWAI_DESERIALIZE_CALLBACKS"):
        Crew.from_checkpoint(CheckpointConfig(restore_from="main~1"))
    monkeypatch.setenv("CREWAI_DESERIALIZE_CALLBACKS", "1")
    crew = Crew.from_checkpoint(CheckpointConfig(restore_from="main~1"))
    assert crew.tasks[0].callback is record_output


def test_true_keeps_crewais_default_and_crewckpt_never_writes_json():
    crew = research_crew(3, checkpoint=CheckpointConfig())
    crew.agents[0].checkpoint = True  # CrewAI's documented default: JsonProvider in ./.checkpoints
    seen: list[object] = []  # not Collector: its scoped handlers would switch CrewAI's own listener off

    def on(source: object, event: object) -> None:
        seen.append(event)

    kinds = (CheckpointCompletedEvent, CheckpointFailedEvent)
    for cls in kinds:
        crewai_event_bus.on(cls)(on)
    try:
        crew.kickoff(inputs={"topic": "otters"})
        deadline = time.monotonic() + 120  # the outcome event is emitted by a pool handler: wait for it
        while not any(getattr(e, "provider", "") == "JsonProvider" for e in seen) and time.monotonic() < deadline:
            crewai_event_bus.flush(timeout=1.0)
            time.sleep(0.01)
    finally:
        for cls in kinds:
            crewai_event_bus.off(cls, on)
    json_files = sorted(Path(".checkpoints").rglob("*.json"))
    # task1 (Researcher) only, by CrewAI's own pool writer, which may lose it (its dump races the run; then
    # it emits a failed event): either way exactly one CrewAI checkpoint, and a file only if it completed
    ours = [e for e in seen if getattr(e, "provider", "") == "JsonProvider"]
    done = [e for e in ours if isinstance(e, CheckpointCompletedEvent)]
    assert len(ours) == 1 and len(json_files) == len(done), seen
    assert [c.summary["tasks_done"] for c in Store.open(".ckpt").list()] == [2, 3]

    research_crew(2, checkpoint=CheckpointConfig(location=".only", on_events=["*"])).kickoff(
        inputs={"topic": "otters"})
    crewai_event_bus.flush()
    assert sorted(Path(".checkpoints").rglob("*.json")) == json_files  # CrewAI's listener stayed out
    assert len(Store.open(".only").list()) == 14
    crew = Crew.from_checkpoint(CheckpointConfig(restore_from=str(Path(".only").resolve())))
    assert all(t.output is not None for t in crew.tasks)  # a store folder restores its HEAD


def test_deleting_the_store_between_runs_starts_a_new_one():
    import shutil

    research_crew(1, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    assert len(Store.open(".ckpt").list()) == 1
    shutil.rmtree(".ckpt")
    research_crew(2, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    assert [c.summary["tasks_done"] for c in Store.open(".ckpt").list()] == [1, 2]


@pytest.mark.parametrize("view", [".checkpoints", "view.db"])
def test_live_view_is_readable_by_crewai_itself(view):
    from crewai.state.checkpoint_config import CheckpointConfig as CrewAIConfig

    from crewckpt.crewai import flush_views

    research_crew(3, checkpoint=CheckpointConfig(view=view)).kickoff(inputs={"topic": "otters"})
    assert flush_views(timeout=30)
    store = Store.open(".ckpt")
    commits = store.list()
    assert len(commits) == 3
    if view.endswith(".db"):
        import sqlite3

        with sqlite3.connect(view) as db:
            rows = db.execute("SELECT id, parent_id, branch FROM checkpoints ORDER BY rowid").fetchall()
        assert len(rows) == 3 and [r[2] for r in rows] == ["main"] * 3
        assert rows[1][1] == rows[0][0]
        target = f"{view}#{rows[1][0]}"
    else:
        files = sorted(Path(view, "main").glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        assert len(files) == 3
        target = str(files[1])
    crew = Crew.from_checkpoint(CrewAIConfig(restore_from=target))  # CrewAI's own restore, no crewckpt
    assert sum(t.output is not None for t in crew.tasks) == 2
    assert "otters" in crew.tasks[1].output.raw

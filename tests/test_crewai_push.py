"""CheckpointConfig(push_to=..., push_every=N): a worker publishes its run's branch to a shared store, best
effort, never interrupting the run (issue 16 item 6)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from crewai.events.event_bus import crewai_event_bus
from crewai.events.types.checkpoint_events import CheckpointFailedEvent
from pydantic import ValidationError

from crewckpt import Store
from crewckpt.crewai import CheckpointConfig, publish
from crewckpt.testing import crewai_offline, research_crew  # noqa: F401

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]


@pytest.fixture(autouse=True)
def _fresh_publishers() -> Iterator[None]:
    def clear() -> None:
        publish.flush_pushes()
        publish._publishers.clear()
        publish._counts.clear()

    clear()
    yield
    clear()  # no publisher (nor its exit report) leaks out of a test


def _stats(store: str, dest: str) -> dict[str, object]:
    return publish.push_stats()[f"{store} -> {dest}"]


def test_push_to_a_location_publishes_the_branch_when_the_run_ends(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    Store.init(shared).close()
    out = research_crew(2, checkpoint=CheckpointConfig(location=str(tmp_path / "w"), on_events=["*"],
                                                       push_to=str(shared))).kickoff(inputs={"topic": "otters"})
    assert out.raw
    assert publish.flush_pushes(30)
    with Store.open(tmp_path / "w") as w, Store.open(shared) as s:
        assert s.branches() == w.branches()
        assert [c.id for c in s.list()] == [c.id for c in w.list()]  # arrival order = the writer's order
        assert {c.alias for c in s.list()} == {c.alias for c in w.list()}
    assert _stats(str(tmp_path / "w"), str(shared))["failed"] == 0


def test_push_every_n_checkpoints_to_a_named_remote(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    Store.init(shared).close()
    with Store.init(tmp_path / "w") as w:
        w.add_remote("team", str(shared))
    research_crew(3, checkpoint=CheckpointConfig(location=str(tmp_path / "w"), on_events=["*"], push_to="team",
                                                 push_every=2)).kickoff(inputs={"topic": "otters"})
    assert publish.flush_pushes(30)
    with Store.open(tmp_path / "w") as w, Store.open(shared) as s:
        n = len(w.list())
        assert s.resolve("main") == w.resolve("main") and len(s.list()) == n
        assert w.resolve("team/main") == w.resolve("main")  # the remote-tracking ref follows
    st = _stats(str(tmp_path / "w"), "team")
    assert st["failed"] == 0 and 1 <= st["pushed"] <= n // 2 + 1  # type: ignore[operator]
    assert publish._counts[(str(tmp_path / "w"), "team", "main")] == n


def test_a_failing_push_never_interrupts_the_run_and_is_reported_like_a_failed_checkpoint(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    failed: list[CheckpointFailedEvent] = []
    with crewai_event_bus.scoped_handlers():
        crewai_event_bus.on(CheckpointFailedEvent)(lambda source, e: failed.append(e))
        with caplog.at_level(logging.WARNING, logger="crewckpt"):
            out = research_crew(2, checkpoint=CheckpointConfig(
                location=str(tmp_path / "w"), on_events=["task_completed"], push_to=str(tmp_path / "nowhere"),
                push_every=1)).kickoff(inputs={"topic": "otters"})
            assert publish.flush_pushes(30)
            crewai_event_bus.flush()
    assert out.raw
    with Store.open(tmp_path / "w") as w:
        assert len(w.list()) == 2  # every checkpoint was written
    st = _stats(str(tmp_path / "w"), str(tmp_path / "nowhere"))
    assert st["pushed"] == 0 and st["failed"] >= 1 and "nowhere" in str(st["last_error"])
    assert failed and all(e.trigger == "push" for e in failed)
    assert any("push of branch main" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="crewckpt"):
        publish.report_push_failures()  # what interpreter exit says
    assert any("pushes" in r.getMessage() and "failed; last error" in r.getMessage() for r in caplog.records)


def test_a_rejected_push_is_counted_as_a_failure(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    with Store.init(shared) as s:
        s.commit({"someone": "else"}, branch="main")  # the shared main has history the worker lacks
    research_crew(1, checkpoint=CheckpointConfig(location=str(tmp_path / "w"), push_to=str(shared))).kickoff(
        inputs={"topic": "otters"})
    assert publish.flush_pushes(30)
    st = _stats(str(tmp_path / "w"), str(shared))
    assert st["failed"] == 1 and "rejected" in str(st["last_error"])
    with Store.open(shared) as s:
        assert len(s.list()) == 1  # untouched


def test_push_every_must_be_positive() -> None:
    with pytest.raises(ValidationError, match="push_every must be at least 1"):
        CheckpointConfig(push_to="origin", push_every=0)


def test_a_push_to_stored_in_a_checkpoint_is_dropped_on_restore(tmp_path: Path) -> None:
    """Whoever wrote (or sent) a checkpoint does not choose where the restoring user's store publishes to."""
    from crewckpt.crewai.hooks import retarget_configs, write_target

    def doc() -> dict[str, object]:
        return {"checkpoint": {"provider": {"provider_type": "crewckpt"}, "location": "x", "on_events": ["*"],
                               "push_to": "postgresql://evil/db", "push_every": 1}}

    store, overrides = write_target(CheckpointConfig(), str(tmp_path))
    cfg = retarget_configs(doc(), store, overrides)["checkpoint"]
    assert cfg.push_to is None and cfg.push_every is None and cfg.on_events == ["*"]
    _, overrides = write_target(CheckpointConfig(push_to="team"), str(tmp_path))
    assert retarget_configs(doc(), store, overrides)["checkpoint"].push_to == "team"


def test_from_checkpoint_by_a_remote_tracking_revision(tmp_path: Path) -> None:
    """A run written on one machine resumes on another from `origin/main~2` after a clone."""
    research_crew(2, checkpoint=CheckpointConfig(location=str(tmp_path / "w"), on_events=["*"])).kickoff(
        inputs={"topic": "otters"})
    with Store.clone(str(tmp_path / "w"), tmp_path / "c") as c:
        start = c.resolve("origin/main~2")
        before = {x.id for x in c.list()}
    out = research_crew(2, checkpoint=CheckpointConfig(location=str(tmp_path / "c"), on_events=["*"])).kickoff(
        from_checkpoint=CheckpointConfig(location=str(tmp_path / "c"), restore_from="origin/main~2"))
    assert out.raw
    with Store.open(tmp_path / "c") as c:
        new = [x for x in c.list() if x.id not in before]
        assert new and new[0].parents == (start,)  # the continuation starts at the tracking revision
        assert new[-1].trigger == "crew_kickoff_completed"

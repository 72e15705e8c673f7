"""Store locations through the CrewAI integration: CheckpointConfig(location=...), restore_from and the
writer's handle cache take the same location strings as Store.open (crewckpt.backends.registry)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from crewai import Crew
from crewai.events.event_bus import crewai_event_bus
from crewai.events.types.checkpoint_events import CheckpointCompletedEvent

from crewckpt import Store
from crewckpt.backends import registry
from crewckpt.crewai import CheckpointConfig, restore
from crewckpt.crewai.writer import open_store
from crewckpt.errors import BackendMissing, BadLocation
from crewckpt.testing import crewai_offline, research_crew  # noqa: F401

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]


@pytest.fixture
def no_remote_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL and S3 backends as on a machine without their extras (whatever this venv holds)."""
    for scheme in ("postgresql", "postgres", "s3"):
        monkeypatch.delitem(registry._openers, scheme, raising=False)
    for module in ("crewckpt.backends.postgres", "crewckpt.backends.s3", "psycopg", "psycopg_pool"):
        monkeypatch.setitem(sys.modules, module, None)


@pytest.mark.usefixtures("no_remote_backends")
@pytest.mark.parametrize(("location", "error", "needle"), [
    ("s3://bucket/x", BackendMissing, "pip install 'crewckpt[s3]'"),
    ("postgresql://host/db", BackendMissing, "pip install 'crewckpt[postgres]'"),
    ("s4://bucket/x", BadLocation, "unknown store scheme 's4'"),
    ("s3:bucket", BadLocation, "./s3:bucket"),
])
def test_a_location_no_backend_serves_fails_in_one_line_and_creates_nothing(
        location: str, error: type[Exception], needle: str) -> None:
    before = sorted(os.listdir("."))
    with pytest.raises(error) as e:
        CheckpointConfig(location=location)
    assert "\n" not in str(e.value) and needle in str(e.value), str(e.value)
    with pytest.raises(error):
        open_store(location, create=True)  # what a write does, also for a config built without validation
    assert sorted(os.listdir(".")) == before  # no folder "s3:" (today's first write made one)


def test_a_crew_checkpoints_into_a_named_memory_store_and_restores_from_it() -> None:
    events: list[CheckpointCompletedEvent] = []

    def seen(source: object, event: CheckpointCompletedEvent) -> None:
        events.append(event)

    # on/off, not scoped_handlers(): CrewAI registers its own checkpoint listener on the first kickoff, and a
    # scope would drop it for the rest of the process
    crewai_event_bus.on(CheckpointCompletedEvent)(seen)
    try:
        research_crew(3, checkpoint=CheckpointConfig(location="memory:crew-loc")).kickoff(
            inputs={"topic": "otters"})
        crewai_event_bus.flush()
    finally:
        crewai_event_bus.off(CheckpointCompletedEvent, seen)
    store = Store.open("memory:crew-loc")
    commits = store.list("main")
    assert [c.summary["tasks_done"] for c in commits] == [1, 2, 3]
    assert [e.location for e in events] == [f"memory:crew-loc#{c.id}" for c in commits]
    assert os.listdir(".") == ["home"]  # nothing on disk
    crew = Crew.from_checkpoint(CheckpointConfig(restore_from="memory:crew-loc#main~1"))
    assert sum(t.output is not None for t in crew.tasks) == 2
    again = restore("main~2", store="memory:crew-loc")
    assert sum(t.output is not None for t in again.tasks) == 1
    crew.kickoff()  # keeps writing into the store it was read from
    assert len(Store.open("memory:crew-loc").list()) == 4


def test_restore_from_a_location_alone_means_its_head(tmp_path: Path) -> None:
    research_crew(2, checkpoint=CheckpointConfig(location="memory:crew-head")).kickoff(inputs={"topic": "x"})
    crew = Crew.from_checkpoint(CheckpointConfig(restore_from="memory:crew-head"))
    assert sum(t.output is not None for t in crew.tasks) == 2
    with pytest.raises(BadLocation, match="unknown store scheme 's4'"):
        Crew.from_checkpoint(CheckpointConfig(restore_from="s4://x#main"))


def test_the_writer_caches_one_handle_per_store_identity(tmp_path: Path) -> None:
    a = open_store("k", create=True)
    assert open_store("./k") is a and open_store(tmp_path / "k") is a and open_store(f"sqlite:{tmp_path}/k") is a
    assert a.location == str(tmp_path / "k")
    m = open_store("memory:cache-1", create=True)
    assert open_store("memory:cache-1") is m and m is not a

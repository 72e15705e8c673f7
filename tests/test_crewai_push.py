"""CheckpointConfig(push_to=..., push_every=N): a worker publishes its run's branch to a shared store, best
effort, never interrupting the run (issue 16 item 6)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import ckpt, ok
from crewai.events.event_bus import crewai_event_bus
from crewai.events.types.checkpoint_events import CheckpointFailedEvent
from pydantic import ValidationError

from crewckpt import Store
from crewckpt.crewai import CheckpointConfig, publish
from crewckpt.testing import crewai_offline, research_crew  # noqa: F401  (crewai_offline: a fixture)

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
    with Store.open(tmp_path / "w") as w:
        (run_id, _), = w.runs().items()
    assert publish._counts[(str(tmp_path / "w"), "team", run_id)] == n  # counted per run


@pytest.mark.parametrize("push_every", [None, 2])
def test_a_failed_push_does_not_keep_the_run_end_push_from_landing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, push_every: int | None) -> None:
    """The first push that carries the run's last checkpoint (written on crew_kickoff_completed) fails: a
    store busy for a moment, a network blip. It is tried again: the destination gets the run's last
    checkpoint, and the failure is counted once (push_every=2: background pushes run besides)."""
    from crewckpt.errors import StoreBusy
    shared = tmp_path / "shared"
    Store.init(shared).close()
    real = Store.publish_run
    failed: list[str] = []

    def flaky(self: Store, remote: Any, run_id: str, *a: Any, **kw: Any) -> Any:
        if not failed and self.info(f"refs/runs/{run_id}").trigger == "crew_kickoff_completed":
            failed.append(run_id)
            raise StoreBusy("the destination is busy (injected)")
        return real(self, remote, run_id, *a, **kw)

    monkeypatch.setattr(Store, "publish_run", flaky)
    research_crew(2, checkpoint=CheckpointConfig(location=str(tmp_path / "w"), on_events=["*"],
                                                 push_to=str(shared), push_every=push_every)).kickoff(
        inputs={"topic": "otters"})
    assert publish.flush_pushes(30)
    assert failed  # the injected failure did happen
    st = _stats(str(tmp_path / "w"), str(shared))
    assert st["failed"] == 1 and "injected" in str(st["last_error"]) and st["pushed"] >= 1
    with Store.open(tmp_path / "w") as w, Store.open(shared) as s:
        assert s.resolve("main") == w.resolve("main") and len(s.list()) == len(w.list())


def test_a_rejected_run_end_push_is_not_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rejection is the destination's answer, not a blip: one push, one failure."""
    shared = tmp_path / "shared"
    Store.init(shared).close()
    real = Store.publish_run
    calls: list[int] = []

    def rejected(self: Store, *a: Any, **kw: Any) -> Any:
        calls.append(1)
        rep = real(self, *a, dry_run=True, **kw)
        return dataclasses.replace(rep, refs=[dataclasses.replace(r, status="rejected", reason="injected")
                                              for r in rep.refs])

    monkeypatch.setattr(Store, "publish_run", rejected)
    research_crew(1, checkpoint=CheckpointConfig(location=str(tmp_path / "w"), push_to=str(shared))).kickoff(
        inputs={"topic": "otters"})
    assert publish.flush_pushes(30)
    st = _stats(str(tmp_path / "w"), str(shared))
    assert len(calls) == 1 and st["failed"] == 1 and "rejected: injected" in str(st["last_error"])


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
    warned = [r.getMessage() for r in caplog.records if "push of branch main" in r.getMessage()
              and r.levelno == logging.WARNING]
    assert len(warned) == 1 and "further failures are counted and reported at exit" in warned[0]  # one per streak
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="crewckpt"):
        publish.report_push_failures()  # what interpreter exit says
    assert any("pushes" in r.getMessage() and "failed; last error" in r.getMessage() for r in caplog.records)


def test_hand_pushed_work_on_the_shared_branch_stays_and_the_run_is_published_under_its_run_ref(
        tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    with Store.init(shared) as s, Store.memory() as person:
        hand = person.commit({"someone": "else"}, branch="main")
        person.push(s, "main")  # the shared main has history no run of the worker wrote
    research_crew(1, checkpoint=CheckpointConfig(location=str(tmp_path / "w"), push_to=str(shared))).kickoff(
        inputs={"topic": "otters"})
    assert publish.flush_pushes(30)
    st = _stats(str(tmp_path / "w"), str(shared))
    assert st["failed"] == 0 and st["kept"] == st["pushed"] == 1
    with Store.open(tmp_path / "w") as w, Store.open(shared) as s:
        assert s.resolve("main") == hand  # untouched
        assert s.runs() == w.runs() and len(s.list()) == 1 + len(w.list())


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


def _shared(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A new empty shared store: an SQLite folder, or a PostgreSQL schema."""
    loc = str(tmp_path / "shared") if kind == "sqlite" else request.getfixturevalue("pg_url")
    Store.init(loc).close()
    return loc


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_every_kickoff_of_one_crew_is_published_and_found_on_the_shared_side(
        tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> None:
    """The reported bug: from the second kickoff of a crew (a new lineage: a root commit that moves `main`)
    every push was rejected as not a fast-forward, and the pull it suggested refused too."""
    shared, local = _shared(kind, tmp_path, request), str(tmp_path / "w")
    for _ in range(3):  # a worker running its crew 3 times (a new Crew each time: CrewAI 1.15's second kickoff
        # of one checkpointed Crew object resumes it, skipping its completed tasks)
        crew = research_crew(2, checkpoint=CheckpointConfig(location=local, push_to=shared))
        assert crew.kickoff(inputs={"topic": "otters"}).raw
    assert publish.flush_pushes(60)
    st = _stats(local, shared)
    assert st["failed"] == 0 and st["kept"] == 0, st
    with Store.open(local) as w, Store.open(shared) as s:
        runs = w.runs()
        assert len(runs) == 3 and s.runs() == runs  # each kickoff under its own run ref
        assert s.resolve("main") == w.resolve("main")  # the shared main names the latest run, as here
        assert [c.id for c in s.list()] == [c.id for c in w.list()]
        assert all(s.fsck(full=True).ok for s in (w, s))
        first, second = sorted(runs, key=lambda r: s.info(runs[r]).seq)[:2]
        start = s.resolve(f"refs/runs/{first}~1")  # the first run after its task1
        before = {c.id for c in s.list()}
    log = ok(ckpt(shared, "log", "--all", "--oneline")).stdout
    assert all(f"refs/runs/{r}" in log for r in (first, second)) and "HEAD -> main" in log
    assert len(log.splitlines()) == 6  # 3 runs x 2 task checkpoints
    fork = json.loads(ok(ckpt(shared, "fork", f"refs/runs/{second}", "--branch", "second", "--json")).stdout)
    assert fork["tip"] == runs[second]
    out = research_crew(2, checkpoint=CheckpointConfig(location=shared)).kickoff(
        from_checkpoint=CheckpointConfig(location=shared, restore_from=f"refs/runs/{first}~1"))
    assert out.raw
    with Store.open(shared) as s:
        new = [c for c in s.list() if c.id not in before]
        assert [c.parents for c in new] == [(start,)] and new[0].branch.startswith("main-from-")  # task2 again
        assert new[0].summary["tasks_done"] == 2


def test_push_every_n_counts_each_run_on_its_own(tmp_path: Path) -> None:
    shared, local = tmp_path / "shared", str(tmp_path / "w")
    Store.init(shared).close()
    for _ in range(2):
        research_crew(2, checkpoint=CheckpointConfig(location=local, on_events=["*"], push_to=str(shared),
                                                     push_every=3)).kickoff(inputs={"topic": "otters"})
    assert publish.flush_pushes(60)
    with Store.open(local) as w, Store.open(shared) as s:
        runs = w.runs()
        counts = {k[2]: n for k, n in publish._counts.items() if k[0] == local}
        assert set(counts) == set(runs) and all(n == len(list(w.log(runs[r]))) for r, n in counts.items())
        assert s.runs() == runs and s.resolve("main") == w.resolve("main")
    assert _stats(local, str(shared))["failed"] == 0


UNREACHABLE = """
import sys
import crewckpt.testing as t
from crewckpt.crewai import CheckpointConfig

for _ in range(2):
    crew = t.research_crew(2, checkpoint=CheckpointConfig(location=sys.argv[1], push_to=sys.argv[2], push_every=1))
    crew.kickoff(inputs={"topic": "otters"})
print("run finished")
"""


def test_an_unreachable_remote_never_stops_the_runs_and_is_reported_once_at_exit(crewai_offline: Path) -> None:  # noqa: F811
    """A real process publishing every checkpoint to a PostgreSQL server that refuses connections: both
    kickoffs finish, every checkpoint is written locally, and stderr has one warning for the failing streak
    and one summary at exit (not one line per failed push)."""
    pytest.importorskip("psycopg")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused at once
    with sock:
        port = sock.getsockname()[1]
        dest = f"postgresql://u@127.0.0.1:{port}/db?schema=x"
        script = crewai_offline / "worker.py"
        script.write_text(UNREACHABLE)
        done = subprocess.run([sys.executable, str(script), str(crewai_offline / "w"), dest], cwd=crewai_offline,
                              env=dict(os.environ), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and "run finished" in done.stdout, done.stderr[-3000:]
    with Store.open(crewai_offline / "w") as w:
        assert len(w.runs()) == 2 and len(w.list()) == 4  # nothing lost locally
    lines = [ln for ln in done.stderr.splitlines() if "crewckpt:" in ln and "push" in ln]
    streak = [ln for ln in lines if "push of branch main" in ln]
    summary = [ln for ln in lines if "failed; last error" in ln]
    assert len(streak) == 1 and "further failures are counted and reported at exit" in streak[0], lines
    assert len(summary) == 1 and f"127.0.0.1:{port}" in summary[0], lines
    assert summary[0].endswith(f"publish what is missing with `ckpt --store {crewai_offline / 'w'} publish '{dest}'`")
    n = int(summary[0].split("crewckpt: ")[1].split(" of ")[0])
    assert n >= 2 and len(lines) == 2  # one failure per push request (at least one per kickoff)


WORKER = """
import json, pathlib, sys, time
import crewckpt.testing as t
from crewckpt.crewai import CheckpointConfig, publish

local, shared, go = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
pathlib.Path(local + ".ready").touch()
deadline = time.monotonic() + 120
while not go.exists() and time.monotonic() < deadline:  # start together with the other worker
    time.sleep(0.005)
for _ in range(2):
    crew = t.research_crew(2, checkpoint=CheckpointConfig(location=local, on_events=["*"], push_to=shared,
                                                          push_every=1))
    crew.kickoff(inputs={"topic": "otters"})
assert publish.flush_pushes(120)
print(json.dumps(publish.push_stats()))
"""


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_two_workers_publishing_to_one_shared_store_at_once_lose_nothing(
        crewai_offline: Path, kind: str, request: pytest.FixtureRequest) -> None:  # noqa: F811
    shared = _shared(kind, crewai_offline, request)
    script = crewai_offline / "worker.py"
    script.write_text(WORKER)
    go = crewai_offline / "go"
    locals_ = [str(crewai_offline / f"w{i}") for i in (1, 2)]
    procs = [subprocess.Popen([sys.executable, str(script), loc, shared, str(go)], cwd=crewai_offline,
                              env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for loc in locals_]
    try:
        deadline = time.monotonic() + 180
        while not all(Path(loc + ".ready").exists() for loc in locals_):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a worker did not start"
            time.sleep(0.01)
        go.touch()
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        (st,) = json.loads(out.strip().splitlines()[-1]).values()
        assert st["failed"] == 0 and st["pushed"] >= 2, st
    with Store.open(shared) as s:
        everything = {c.id for c in s.list()}
        tips = {}
        for loc in locals_:
            with Store.open(loc) as w:
                assert len(w.runs()) == 2
                tips.update(w.runs())
                assert {c.id for c in w.list()} <= everything  # every checkpoint of both workers arrived
        assert s.runs() == tips  # all four runs, each at its last checkpoint
        assert s.resolve("main") in tips.values()  # the run that published last
        assert s.fsck(full=True).ok

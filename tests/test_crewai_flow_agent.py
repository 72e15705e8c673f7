"""crewckpt.crewai with Flows (pydantic and dict state), Agents, manual checkpoints and signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from crewai import Agent, Crew
from crewai.events.event_bus import crewai_event_bus
from crewai.events.types.task_events import TaskCompletedEvent
from crewai.flow.flow import Flow, listen, start
from pydantic import BaseModel

from crewckpt import CkptError, Store
from crewckpt.crewai import CheckpointConfig, acheckpoint, checkpoint, restore
from crewckpt.testing import ScriptedLLM, crew_llms, crewai_offline, research_crew  # noqa: F401

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]

RUNS: list[str] = []  # every method execution, across original and resumed runs


class Steps(BaseModel):
    id: str = ""
    topic: str = "otters"
    steps: list[str] = []


class StepFlow(Flow[Steps]):
    fail_draft = False  # a test's failing run

    @start()
    def gather(self) -> str:
        RUNS.append("gather")
        self.state.steps.append("gather")
        return "gathered"

    @listen(gather)
    def draft(self, _: str) -> str:
        RUNS.append("draft")
        if StepFlow.fail_draft:
            raise RuntimeError("boom in draft")
        self.state.steps.append("draft")
        return "drafted"

    @listen(draft)
    def polish(self, _: str) -> str:
        RUNS.append("polish")
        self.state.steps.append("polish")
        return "polished"


class DictFlow(Flow):
    @start()
    def one(self) -> int:
        RUNS.append("one")
        self.state["n"] = 1
        return 1

    @listen(one)
    def two(self, value: int) -> int:
        RUNS.append("two")
        self.state["n"] = value + 1
        return value + 1


def flow_entity(doc: dict) -> dict:
    return next(e for e in doc["entities"] if e["entity_type"] == "flow")


@pytest.mark.parametrize("flow_cls, methods", [(StepFlow, ["gather", "draft", "polish"]),
                                               (DictFlow, ["one", "two"])])
def test_flow_checkpoints_are_consistent_and_resume_runs_each_method_once(flow_cls, methods):
    RUNS.clear()
    flow = flow_cls(checkpoint=CheckpointConfig(on_events=["*"]))
    flow.kickoff()
    assert RUNS == methods
    store = Store.open(".ckpt")
    commits = store.list()
    assert [c.trigger for c in commits].count("method_execution_finished") == len(methods)
    assert [c.id for c in store.log("main")][::-1] == [c.id for c in commits]
    for c in commits:
        entity = flow_entity(store.read(c.id))
        done = set(entity["checkpoint_completed_methods"] or [])
        state = entity["checkpoint_state"] or {}
        changed = set(state.get("steps", [])) if flow_cls is StepFlow else (
            {"one", "two"} if state.get("n") == 2 else {"one"} if state.get("n") == 1 else set())
        assert changed <= done, f"{c.trigger}: state shows {changed - done} before it is marked complete"
    for c in commits:
        RUNS.clear()
        resumed = flow_cls.from_checkpoint(CheckpointConfig(restore_from=c.id))
        done_before = set(resumed._completed_methods)
        resumed.kickoff()
        assert sorted(RUNS) == sorted(m for m in methods if m not in done_before)
        if flow_cls is StepFlow:
            assert resumed.state.steps == methods
        else:
            assert resumed.state["n"] == 2


def test_restore_returns_a_flow_and_fork_keeps_main():
    StepFlow(checkpoint=CheckpointConfig(on_events=["method_execution_finished"])).kickoff()
    store = Store.open(".ckpt")
    assert len(store.list()) == 3
    plain = restore("main~1", store=".ckpt")
    assert isinstance(plain, Flow) and set(plain._completed_methods) == {"gather", "draft"}
    RUNS.clear()
    forked = StepFlow.fork(CheckpointConfig(restore_from="main~1"), branch="experiment-1")
    forked.kickoff()
    assert RUNS == ["polish"]
    assert len(Store.open(".ckpt").list("experiment-1")) == 1
    assert store.read("experiment-1")["branch"] == "experiment-1"


def test_agent_checkpoints_and_restore():
    llm = ScriptedLLM()
    agent = Agent(role="Researcher", goal="g", backstory="b", llm=llm,
                  checkpoint=CheckpointConfig(on_events=["*"]))
    result = agent.kickoff(messages="Tell me about otters")
    assert "Researcher" in result.raw and llm.calls == 1
    store = Store.open(".ckpt")
    triggers = [c.trigger for c in store.list()]
    assert triggers[0] == "lite_agent_execution_started" and "lite_agent_execution_completed" in triggers
    restored = Agent.from_checkpoint(CheckpointConfig(restore_from="main"))
    assert isinstance(restored, Agent) and restored.role == "Researcher"
    assert isinstance(restore("main", store=store), Agent)
    again = restored.kickoff(messages="And about sea otters?")
    assert "Researcher" in again.raw and sum(l.calls for l in crew_llms(restored)) == 1
    assert len(store.list()) > len(triggers)


def test_manual_checkpoints_sync_and_async():
    written: list[str | None] = []
    with crewai_event_bus.scoped_handlers():
        @crewai_event_bus.on(TaskCompletedEvent)
        def on_done(source, event, state):  # the docs' recipe, pointed at crewckpt
            written.append(checkpoint(state, ".manual", branch="handlers"))

        research_crew(3).kickoff(inputs={"topic": "otters"})
        crewai_event_bus.flush()
    assert len(written) == 3 and all(written)
    store = Store.open(".manual")
    commits = store.list("handlers")
    assert [c.id for c in commits] == written and {c.trigger for c in commits} == {"manual"}
    assert [c.id for c in store.log("handlers")][::-1] == written
    assert "trigger" not in store.read("handlers")
    assert sorted(c.summary["tasks_done"] for c in commits)[-1] == 3

    async_written: list[str | None] = []
    with crewai_event_bus.scoped_handlers():
        @crewai_event_bus.on(TaskCompletedEvent)
        async def on_done_async(source, event, state):
            async_written.append(await acheckpoint(state, ".manual", branch="async"))

        research_crew(2).kickoff(inputs={"topic": "otters"})
        crewai_event_bus.flush()
    assert len(async_written) == 2 and all(async_written)
    assert sorted(c.id for c in store.list("async")) == sorted(async_written)
    assert len(list(store.log("async"))) == 2


SIGTERM_CHILD = textwrap.dedent("""
    from crewai.events.event_bus import crewai_event_bus
    from crewai.events.types.llm_events import LLMCallStartedEvent
    from crewckpt.testing import ScriptedLLM, research_crew
    from crewckpt.crewai import CheckpointConfig
    crew = research_crew(3, llm=ScriptedLLM(), checkpoint=CheckpointConfig(on_events=["SIGTERM"]))
    crew.tasks[1].agent.llm = ScriptedLLM(delay=300)  # task 2's call lasts until the parent's SIGTERM

    @crewai_event_bus.on(LLMCallStartedEvent)
    def tell_parent(source, event):
        if event.task_name == "task2":  # task 1 is complete: its output is in the state
            print("in task2", flush=True)

    print("started", flush=True)
    crew.kickoff(inputs={"topic": "otters"})
    print("finished", flush=True)
""")


def test_sigterm_triggers_a_checkpoint_then_terminates():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])}
    child = subprocess.Popen([sys.executable, "-c", SIGTERM_CHILD], stdout=subprocess.PIPE, text=True,
                             env=env)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "started"
        assert child.stdout.readline().strip() == "in task2"  # a condition, not a sleep: no race under load
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate(timeout=60)
    assert child.returncode == -signal.SIGTERM and "finished" not in out
    store = Store.open(".ckpt")
    commits = store.list()
    assert [c.trigger for c in commits] == ["SIGTERM"]
    assert commits[0].summary["tasks_done"] == 1
    crew = Crew.from_checkpoint(CheckpointConfig(restore_from="main"))
    for agent in crew.agents:
        agent.llm.delay = 0
    crew.kickoff()
    assert sum(l.calls for l in crew_llms(crew)) == 2


OFF_MAIN_SIGTERM_CHILD = textwrap.dedent("""
    import signal, threading
    from crewckpt.testing import ScriptedLLM, research_crew
    from crewckpt.crewai import CheckpointConfig

    class OffMainLLM(ScriptedLLM):
        def _respond(self, messages, from_task, from_agent):
            assert threading.current_thread() is not threading.main_thread()  # CrewAI's executor thread
            print("in task2", flush=True)
            # what the kernel may do with the parent's process-directed SIGTERM under load: hand it to this
            # running thread while the main thread waits in epoll (asyncio.run) for this very call
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
            return super()._respond(messages, from_task, from_agent)

    crew = research_crew(3, llm=ScriptedLLM(), checkpoint=CheckpointConfig(on_events=["SIGTERM"]))
    crew.tasks[1].agent.llm = OffMainLLM(delay=300)  # the call never returns by itself
    print("started", flush=True)
    crew.kickoff(inputs={"topic": "otters"})
    print("finished", flush=True)
""")


def test_a_sigterm_taken_by_an_executor_thread_checkpoints_and_terminates():
    """The CI hang: CPython runs handlers only in the main thread, which sat in epoll until the LLM call
    returned; the wakeup fd's byte now reaches crewckpt's thread, which wakes the main thread."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])}
    child = subprocess.Popen([sys.executable, "-c", OFF_MAIN_SIGTERM_CHILD], stdout=subprocess.PIPE, text=True,
                             env=env)
    try:
        out, _ = child.communicate(timeout=150)  # the child's start included: 45 s on a loaded machine
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate(timeout=60)
    assert child.returncode == -signal.SIGTERM and out.split() == ["started", "in", "task2"]
    commits = Store.open(".ckpt").list()
    assert [c.trigger for c in commits] == ["SIGTERM"]
    assert commits[0].summary["tasks_done"] == 1


LOST_HANDLER_PREFIX = textwrap.dedent("""
    import os, time
    from crewckpt.crewai import signals as sg

    real_send, lost = sg._send_to_main, []

    def send_that_cpython_leaves_unhandled(signum):
        # CPython 3.11 under load: the main thread's C-level handler ran (its byte reaches the wakeup fd)
        # but another thread's eval-breaker recomputation dropped the pending bit, so no Python handler runs
        # and the main thread goes on to wait in epoll. The first send to the main thread is lost so.
        if lost or signum in sg._echoes:
            return real_send(signum)
        lost.append(signum)
        print("lost", flush=True)
        sg._sent[signum] = sg._echoes[signum] = time.monotonic()
        os.write(sg._wake_w.fileno(), bytes([signum]))

    sg._send_to_main = send_that_cpython_leaves_unhandled
""")


def test_a_signal_the_main_thread_took_but_never_handled_is_sent_again():
    """The second CI hang (1 child in ~20 under load): the main thread's C handler wrote its byte, its Python
    handler never ran, and nothing sent the signal again; commands not carried out are now resent."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])}
    child = subprocess.Popen([sys.executable, "-c", LOST_HANDLER_PREFIX + OFF_MAIN_SIGTERM_CHILD],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        out, _ = child.communicate(timeout=150)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate(timeout=60)
    assert child.returncode == -signal.SIGTERM and out.split() == ["started", "in", "task2", "lost"]
    assert [c.trigger for c in Store.open(".ckpt").list()] == ["SIGTERM"]


LOCKED_SIGNAL_CHILD = textwrap.dedent("""
    import os, signal, threading, time
    from crewai.events.event_bus import crewai_event_bus
    from crewai.state.runtime import RuntimeState
    from crewckpt.crewai import CheckpointConfig
    from crewckpt.crewai.writer import EMIT_LOCK
    from crewckpt.testing import research_crew

    # one signal per lock (a signal repeated within 0.5 s counts once); each handed on to a handler of ours
    held = {"SIGHUP": "executor", "SIGINT": "futures", "SIGCONT": "emit"}
    handed = []
    for name in held:
        signal.signal(getattr(signal, name), lambda signum, frame: handed.append(signum))
    crew = research_crew(1, checkpoint=CheckpointConfig(on_events=list(held)))  # installs crewckpt's handlers
    crewai_event_bus.set_runtime_state(RuntimeState(root=[crew]))
    crewai_event_bus._ensure_executor_initialized()
    locks = {
        # what CrewAI's emit holds while the executor starts a handler thread (the SIGTERM hang in CI)
        "executor": crewai_event_bus._sync_executor._shutdown_lock,
        "futures": crewai_event_bus._futures_lock,  # emit's bookkeeping of pending handlers
        "emit": EMIT_LOCK,  # a checkpoint being written
    }
    for n, (signame, name) in enumerate(held.items(), 1):
        with locks[name]:
            signal.pthread_kill(threading.get_ident(), getattr(signal, signame))  # the handler runs here
            print("returned", name, flush=True)
        while len(handed) < n:  # the checkpoint is written, then the signal handed on
            time.sleep(0.01)
        print("handed on", name, flush=True)
""")


def test_a_signal_arriving_while_the_main_thread_holds_a_lock_checkpoints_and_is_handed_on():
    """The handler runs in the thread it interrupted, which may hold any lock: the old handler emitted and
    wrote right there, and blocked for ever on CrewAI's executor lock (SIGTERM children that never exited)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])}
    child = subprocess.Popen([sys.executable, "-c", LOCKED_SIGNAL_CHILD], stdout=subprocess.PIPE, text=True,
                             env=env)
    try:
        out, _ = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        child.kill()
        out, _ = child.communicate(timeout=60)
    assert out.split("\n") == [f"{what} {name}" for name in ("executor", "futures", "emit")
                               for what in ("returned", "handed on")] + [""]
    assert child.returncode == 0
    assert [c.trigger for c in Store.open(".ckpt").list()] == ["SIGHUP", "SIGINT", "SIGCONT"]


KILL_CHILD = textwrap.dedent("""
    from crewckpt.testing import ScriptedLLM, research_crew
    from crewckpt.crewai import CheckpointConfig
    crew = research_crew(4, llm=ScriptedLLM(delay=0.35), checkpoint=CheckpointConfig(on_events=["*"]))
    print("started", flush=True)
    crew.kickoff(inputs={"topic": "otters"})
    print("finished", flush=True)
""")


def test_kill_9_mid_run_leaves_every_written_checkpoint_restorable():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])}
    child = subprocess.Popen([sys.executable, "-c", KILL_CHILD], stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "started"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # kill once task 1 is checkpointed (tasks 2-4 still take >= 1 s)
        try:
            probe = Store.open(".ckpt")
        except CkptError:  # not created yet, or being created
            probe = None
        if probe is not None:
            busy = any(c.summary["tasks_done"] >= 1 for c in probe.list())
            probe.close()
            if busy:
                break
        time.sleep(0.05)
    time.sleep(0.2)
    child.kill()
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    store = Store.open(".ckpt")
    assert store.fsck(full=True).ok
    commits = store.list()
    assert 8 <= len(commits) < 26
    assert [c.id for c in store.log("main")][::-1] == [c.id for c in commits]
    done = commits[-1].summary["tasks_done"]
    assert 1 <= done < 4
    crew = Crew.from_checkpoint(CheckpointConfig(restore_from="latest"))
    for agent in crew.agents:
        agent.llm.delay = 0
    out = crew.kickoff()
    assert sum(l.calls for l in crew_llms(crew)) == 4 - done
    assert "task4" in out.raw
    final = store.read("main")["entities"][0]["tasks"]
    assert all(t["output"] is not None for t in final)


def test_signal_event_checkpoints_the_running_state_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from crewai.events.types.system_events import SigHupEvent, SigTermEvent
    from crewai.state.runtime import RuntimeState

    from crewckpt.crewai import signals

    # the 0.5 s repeat window on a clock of our own: a slow first write (a loaded machine) cannot widen it
    clock = [1.0e9]
    monkeypatch.setattr(signals, "time", types.SimpleNamespace(monotonic=lambda: clock[0],
                                                               perf_counter=time.perf_counter))
    monkeypatch.setattr(signals, "_last_signal_event", {})
    crew = research_crew(1, checkpoint=CheckpointConfig(on_events=["SIGTERM"]))
    crewai_event_bus.set_runtime_state(RuntimeState(root=[crew]))
    source = object()  # CrewAI's own signal events come from its Telemetry object, not an entity
    crewai_event_bus.emit(source, SigTermEvent())
    crewai_event_bus.emit(source, SigTermEvent())  # telemetry's and crewckpt's handler both emitting
    crewai_event_bus.emit(source, SigHupEvent())  # not in on_events
    store = Store.open(".ckpt")
    assert [c.trigger for c in store.list()] == ["SIGTERM"]
    clock[0] += 0.6
    crewai_event_bus.emit(source, SigTermEvent())
    assert [c.trigger for c in store.list()] == ["SIGTERM", "SIGTERM"]
    assert [c.id for c in store.log("main")][::-1] == [c.id for c in store.list()]


def test_restoring_a_flow_subclass_leaves_the_branch_where_it_was():
    """Fresh-user trial (session 19): `MyFlow.from_checkpoint(restore_from="main")` of a failed run builds a
    fresh MyFlow, whose `flow_created` event was checkpointed: main moved to a new root checkpoint with
    empty state, the resumed run went to a `main-from-...` branch, and restoring "main" again re-ran every
    method. Building the instance now writes nothing; the resumed run continues main."""
    StepFlow.fail_draft = True
    RUNS.clear()
    try:
        with pytest.raises(Exception, match="boom in draft"):
            StepFlow(checkpoint=CheckpointConfig(on_events=["*"])).kickoff()
    finally:
        StepFlow.fail_draft = False
    store = Store.open(".ckpt")
    failed = store.resolve("main")
    RUNS.clear()
    resumed = StepFlow.from_checkpoint(CheckpointConfig(restore_from="main"))
    assert Store.open(".ckpt").resolve("main") == failed and Store.open(".ckpt").branches() == {"main": failed}
    resumed.kickoff()
    assert RUNS == ["draft", "polish"] and resumed.state.steps == ["gather", "draft", "polish"]
    store = Store.open(".ckpt")
    assert store.branches().keys() == {"main"}
    assert failed in [c.id for c in store.log("main")]  # the resumed run continues the failed one on main
    RUNS.clear()
    StepFlow.from_checkpoint(CheckpointConfig(restore_from="main")).kickoff()
    assert RUNS == []  # main is the finished run, not an empty flow_created checkpoint

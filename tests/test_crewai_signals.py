"""crewckpt.crewai.signals: a signal any thread takes wakes the main thread (the wakeup fd), and the wakeup fd
crewckpt finds, or that is set after it, keeps getting its bytes. Each case runs in a child process: signal
handlers and the wakeup fd are process-wide."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crewckpt import Store
from crewckpt.testing import crewai_offline  # noqa: F401

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]

PRELUDE = textwrap.dedent("""
    import asyncio, os, signal, socket, sys, threading, time
    from crewai.events.event_bus import crewai_event_bus
    from crewai.state.runtime import RuntimeState
    from crewckpt.crewai import CheckpointConfig, signals
    from crewckpt.testing import research_crew

    def checkpointing(*names):  # installs crewckpt's handlers; the signal events checkpoint this crew
        crew = research_crew(1, checkpoint=CheckpointConfig(on_events=list(names)))
        crewai_event_bus.set_runtime_state(RuntimeState(root=[crew]))

    def off_main(signum):  # a thread other than the main one takes the signal (the kernel's choice)
        t = threading.Thread(target=lambda: signal.pthread_kill(threading.get_ident(), signum))
        t.start()
        t.join()

    def waiting_in(line):  # the main thread is blocked at this line of the child's code
        main = threading.main_thread()
        with open(f"/proc/self/task/{main.native_id}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return sys._current_frames()[main.ident].f_lineno == line and state == "S"
""")


def run_child(code: str, timeout: float = 150) -> tuple[int, list[str]]:
    """Run PRELUDE + code in a child; (exit status, stdout lines). A hang fails at the deadline (importing
    crewai alone takes 10-40 s on a loaded machine)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])}
    source = PRELUDE + textwrap.dedent(code)
    if "SLEEP_LINE" in source:  # the line number of the main thread's blocking call
        lines = source.split("\n")
        line = next(n for n, text in enumerate(lines, 1) if "time.sleep(300)" in text)
        source = source.replace("SLEEP_LINE", str(line))
    child = subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, text=True, env=env)
    try:
        out, _ = child.communicate(timeout=timeout)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate(timeout=60)
    return child.returncode, out.split("\n")[:-1]


def test_a_signal_taken_by_another_thread_interrupts_a_blocking_call_of_the_main_thread():
    status, out = run_child("""
        class HandedOn(Exception):
            pass

        def previous(signum, frame):
            raise HandedOn(threading.current_thread().name)

        signal.signal(signal.SIGHUP, previous)
        checkpointing("SIGHUP")
        def send():  # once the main thread sleeps: a handler it runs before that proves nothing
            while not waiting_in(SLEEP_LINE):
                time.sleep(0.01)
            off_main(signal.SIGHUP)
        threading.Thread(target=send).start()
        try:
            time.sleep(300)  # the handler's exception ends it (CPython alone: it ends after 300 s)
        except HandedOn as exc:
            print("handed on in", exc)
    """)
    assert (status, out) == (0, ["handed on in MainThread"])
    assert [c.trigger for c in Store.open(".ckpt").list()] == ["SIGHUP"]


def test_the_wakeup_fd_found_is_chained_and_given_back():
    status, out = run_child("""
        theirs, mine = socket.socketpair()
        theirs.setblocking(False)
        signal.set_wakeup_fd(theirs.fileno())
        handed = []
        signal.signal(signal.SIGHUP, lambda signum, frame: handed.append(signum))
        checkpointing("SIGHUP")
        off_main(signal.SIGHUP)
        deadline = time.monotonic() + 50
        while not handed and time.monotonic() < deadline:
            time.sleep(0.01)
        print("handed", handed)
        mine.settimeout(50)
        print("their fd got", list(mine.recv(64)))  # the delivered signal once (not what crewckpt sent itself)
        signals.uninstall_signal_handlers()
        print("given back", signal.set_wakeup_fd(-1) == theirs.fileno(),
              signal.getsignal(signal.SIGHUP) is not signals._on_signal)
    """)
    assert status == 0
    assert out == [f"handed [{int(signal.SIGHUP)}]", f"their fd got [{int(signal.SIGHUP)}]", "given back True True"]


def test_a_wakeup_fd_set_after_crewckpt_is_chained_at_the_next_signal():
    """asyncio's loop.add_signal_handler replaces the wakeup fd (without chaining); crewckpt takes it back
    at the next signal, chained, so both asyncio's handler and a signal taken off the main thread work."""
    status, out = run_child("""
        running = {}
        def previous(signum, frame):
            running["loop"].call_soon_threadsafe(running["handed"].put_nowait, 1)
        signal.signal(signal.SIGHUP, previous)
        checkpointing("SIGHUP")  # outside the loop's task, where Crew/Flow.kickoff set the runtime state

        async def main():
            loop = asyncio.get_running_loop()
            handed = running["handed"] = asyncio.Queue()
            running["loop"] = loop
            usr1 = asyncio.Event()
            loop.add_signal_handler(signal.SIGUSR1, usr1.set)  # asyncio's fd replaces crewckpt's
            signal.pthread_kill(threading.get_ident(), signal.SIGHUP)  # taken by the main thread
            await asyncio.wait_for(handed.get(), 50)
            print("first handed on")
            off_main(signal.SIGUSR1)  # asyncio's own signal still reaches its loop, through crewckpt's fd
            await asyncio.wait_for(usr1.wait(), 50)
            print("asyncio got SIGUSR1")
            while time.monotonic() - signals._last_signal_event["SIGHUP"] <= 0.5:  # else a repeat: no checkpoint
                await asyncio.sleep(0.05)
            off_main(signal.SIGHUP)  # the main thread waits in epoll: crewckpt's thread must wake it
            await asyncio.wait_for(handed.get(), 50)
            print("second handed on")
        asyncio.run(main())
    """)
    assert (status, out) == (0, ["first handed on", "asyncio got SIGUSR1", "second handed on"])
    assert [c.trigger for c in Store.open(".ckpt").list()] == ["SIGHUP", "SIGHUP"]


def test_a_handler_the_user_sets_after_crewckpt_runs_once_per_signal():
    """User code that replaces crewckpt's handler (signal.signal after a crew was set up) gets each signal
    once: crewckpt's thread still reads the signal's byte, and before this asked the main thread for its
    context by sending the signal again, which ran the user's handler a second time ('press Ctrl-C twice')."""
    status, out = run_child("""
        theirs, mine = socket.socketpair()  # chained by crewckpt: its byte proves crewckpt's thread saw one
        theirs.setblocking(False)
        signal.set_wakeup_fd(theirs.fileno())
        checkpointing("SIGINT", "SIGTERM")
        calls = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda s, f: calls.append(s))
        mine.settimeout(50)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.pthread_kill(threading.get_ident(), signum)
            assert list(mine.recv(64)) == [signum]  # crewckpt's thread took the byte (and acted on it)
            deadline = time.monotonic() + 50
            while (signals._echoes or signals._kill_wanted) and time.monotonic() < deadline:
                time.sleep(0.01)  # a signal it sent the main thread has come back: any handler run is done
            for _ in range(100):
                pass  # bytecodes: a signal CPython noted runs its handler here
        print("calls", calls)
        print("capture asked", dict(signals._capture))
    """)
    assert (status, out) == (0, [f"calls {[int(signal.SIGINT), int(signal.SIGTERM)]}", "capture asked {}"])


def test_a_signal_whose_checkpoint_is_written_when_crewckpt_is_uninstalled_still_reaches_the_previous_handler():
    """crewckpt's handler holds a signal back while its checkpoint is written; uninstalling meanwhile puts the
    previous handler back, and that one still gets the signal once the checkpoint is done."""
    status, out = run_child("""
        handed = []
        signal.signal(signal.SIGHUP, lambda s, f: handed.append(s))
        checkpointing("SIGHUP")
        go = threading.Event()
        emit = signals._emit_signal_event
        signals._emit_signal_event = lambda name: (go.wait(50), emit(name))
        signal.pthread_kill(threading.get_ident(), signal.SIGHUP)
        deadline = time.monotonic() + 50
        while not signals._inflight and time.monotonic() < deadline:
            time.sleep(0.01)  # the checkpoint is being written
        signals.uninstall_signal_handlers()
        go.set()
        while not handed and time.monotonic() < deadline:
            time.sleep(0.01)
        print("handed", handed)
    """)
    assert (status, out) == (0, [f"handed [{int(signal.SIGHUP)}]"])

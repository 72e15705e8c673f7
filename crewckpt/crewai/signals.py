"""Signal checkpoints: crewckpt's handlers for SIGTERM, SIGINT, SIGHUP, SIGTSTP and SIGCONT.

A signal handler runs in the main thread between two bytecodes of whatever it interrupted, and that code may
hold any lock: CrewAI's event-bus executor lock while it starts a handler thread, the emit lock in the middle
of a checkpoint, a store's write lock. So crewckpt's handler takes no lock, emits nothing and starts no
thread: it hands the signal to a thread of its own (started with the handlers; a reentrant
``SimpleQueue.put`` is the only call) and returns, so the interrupted code goes on and releases its locks.
That thread emits CrewAI's signal event (which the ordered writer checkpoints when ``on_events`` names it;
the emit lock makes it wait for a write in progress), then sends the signal to the main thread again; the
handler then hands it to the handler that was there before, or takes the default action (SIGTERM still
terminates). The checkpoint is best effort: one that takes longer than :data:`SIGNAL_WRITE_TIMEOUT_S` is
given up, and a second signal of the same kind while it is written acts at once.
"""

from __future__ import annotations

import atexit
import contextvars
import logging
import os
import queue
import signal
import threading
import time
from typing import Any

from crewai.events.event_bus import crewai_event_bus
from crewai.events.types.system_events import (
    SigContEvent,
    SigHupEvent,
    SigIntEvent,
    SigTermEvent,
    SigTStpEvent,
)

logger = logging.getLogger("crewckpt.crewai")

SIGNAL_EVENTS: frozenset[str] = frozenset({"SIGTERM", "SIGINT", "SIGHUP", "SIGTSTP", "SIGCONT"})
"""CrewAI's signal event types (``on_events`` names that make crewckpt install a handler)."""

SIGNAL_WRITE_TIMEOUT_S = 30.0
"""Seconds a signal's checkpoint may take before the signal is handed on without it (a store that does not
answer must not keep a SIGTERM'd process alive)."""


# -- signals -------------------------------------------------------------------------------------------------

_SIGNAL_EVENT_CLASSES = {"SIGTERM": SigTermEvent, "SIGINT": SigIntEvent, "SIGHUP": SigHupEvent,
                         "SIGTSTP": SigTStpEvent, "SIGCONT": SigContEvent}
_signal_previous: dict[int, Any] = {}
_last_signal_event: dict[str, float] = {}


class _SignalSource:
    """The source of signal events crewckpt emits (CrewAI's own come from its Telemetry object)."""

    entity_type = None


_SIGNAL_SOURCE = _SignalSource()


class _Delivery:
    """One signal on its way: the main thread's context when it arrived (the event's scope), and an event
    set once its checkpoint is written or given up."""

    __slots__ = ("signum", "context", "finished")

    def __init__(self, signum: int, context: contextvars.Context) -> None:
        self.signum = signum
        self.context = context
        self.finished = threading.Event()


# Handler <-> signal thread, without locks (single dict operations are atomic): a delivery is in _inflight
# while its checkpoint is written; whoever pops it first decides (the signal thread: it moves it to
# _released and re-sends the signal; the handler, for a second signal meanwhile: it hands the signal on now).
_requests: queue.SimpleQueue[_Delivery] = queue.SimpleQueue()
_inflight: dict[int, _Delivery] = {}
_released: dict[int, _Delivery] = {}
_handing_on: set[str] = set()  # signals being handed to the previous handler now
_signal_thread_pid: int | None = None  # the process whose signal thread runs (a forked child has none)


def install_signal_handlers(names: frozenset[str] | set[str]) -> None:
    """Install crewckpt's handler for each named signal (idempotent; no-op off the main thread) and start
    the thread that writes signal checkpoints."""
    if threading.current_thread() is not threading.main_thread():
        logger.debug("crewckpt: signal checkpoints need the main thread; %s not installed", sorted(names))
        return
    _start_signal_thread()
    for name in sorted(names):
        signum = getattr(signal, name, None)
        if signum is None or signum in _signal_previous:
            continue
        try:
            _signal_previous[signum] = signal.getsignal(signum)
            signal.signal(signum, _on_signal)
        except (ValueError, OSError) as exc:
            _signal_previous.pop(signum, None)
            logger.warning("crewckpt: cannot handle %s: %s", name, exc)


def _start_signal_thread() -> None:
    global _signal_thread_pid
    if _signal_thread_pid == os.getpid():
        return
    threading.Thread(target=_signal_loop, name="crewckpt-signals", daemon=True).start()
    _signal_thread_pid = os.getpid()


def _forget_signal_thread() -> None:  # in a forked child: the thread stayed in the parent
    global _signal_thread_pid, _requests
    _signal_thread_pid = None
    _requests = queue.SimpleQueue()
    _inflight.clear()
    _released.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_signal_thread)


def _on_signal(signum: int, frame: Any) -> None:
    """The handler: no lock, no emit, no thread start here (see the module docstring)."""
    name = signal.Signals(signum).name
    if _released.pop(signum, None) is not None or _inflight.pop(signum, None) is not None:
        # the checkpoint is written (or given up), or a second signal came meanwhile: hand it on now; a
        # signal event the previous handler emits (CrewAI's telemetry) is a repeat, not a second checkpoint
        _handing_on.add(name)
        try:
            _hand_on(signum, frame)
        finally:
            _handing_on.discard(name)
        return
    if time.monotonic() - _last_signal_event.get(name, -1.0) <= 0.5 or _signal_thread_pid != os.getpid():
        # CrewAI's telemetry handler (when telemetry is on) emitted this signal just before chaining here;
        # or a forked child whose handlers were never installed in it: no thread to write
        _hand_on(signum, frame)
        return
    delivery = _Delivery(signum, contextvars.copy_context())
    _inflight[signum] = delivery
    _requests.put(delivery)


def _signal_loop() -> None:
    if hasattr(signal, "pthread_sigmask"):  # a signal sent to the process never lands here (nor in the writers
        # started from here): the kernel then picks the main thread, whose blocking call it interrupts
        signal.pthread_sigmask(signal.SIG_BLOCK, {getattr(signal, n) for n in SIGNAL_EVENTS if hasattr(signal, n)})
    while True:
        delivery = _requests.get()
        try:
            _write_then_release(delivery)
        except Exception:  # the thread must outlive one failure: later signals need it
            logger.warning("crewckpt: delivering a signal failed", exc_info=True)


def _write_then_release(delivery: _Delivery) -> None:
    """Checkpoint (in a thread of its own, so one that hangs is given up), then send the signal again."""
    name = signal.Signals(delivery.signum).name
    writer = threading.Thread(target=delivery.context.run, args=(_emit_signal_event, name),
                              name=f"crewckpt-{name}-checkpoint", daemon=True)
    writer.start()
    writer.join(SIGNAL_WRITE_TIMEOUT_S)
    if writer.is_alive():
        logger.warning("crewckpt: the checkpoint on %s took more than %.0f s; handing the signal on without it",
                       name, SIGNAL_WRITE_TIMEOUT_S)
    if _inflight.pop(delivery.signum, None) is delivery:  # else a second signal was handed on already
        _released[delivery.signum] = delivery
        _resend(delivery.signum)
    delivery.finished.set()  # after the resend: an exit waiting for it is then interrupted by the signal


def _emit_signal_event(name: str) -> None:
    try:
        crewai_event_bus.emit(_SIGNAL_SOURCE, _SIGNAL_EVENT_CLASSES[name]())
    except Exception as exc:  # best effort: the signal is handed on anyway
        logger.warning("crewckpt: checkpoint on %s failed: %s", name, exc)


def _resend(signum: int) -> None:
    """The signal again, to the main thread (so a blocking call there returns and its handler runs)."""
    try:
        signal.pthread_kill(threading.main_thread().ident or 0, signum)
    except (AttributeError, OSError, ValueError):  # no pthread_kill (Windows), or the main thread is gone
        os.kill(os.getpid(), signum)


def _hand_on(signum: int, frame: Any) -> None:
    """What would have happened without crewckpt: the previous handler, or the default action."""
    previous = _signal_previous.get(signum)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL or previous is None:
        if signum == getattr(signal, "SIGCONT", None):
            return
        signal.signal(signum, signal.SIG_DFL)  # default action (terminate / stop), then re-arm
        os.kill(os.getpid(), signum)
        signal.signal(signum, _on_signal)


def _finish_deliveries(timeout: float = SIGNAL_WRITE_TIMEOUT_S) -> None:
    """At interpreter exit: let a signal's checkpoint in progress end (the signal thread is a daemon)."""
    deadline = time.monotonic() + timeout
    for delivery in list(_inflight.values()):
        delivery.finished.wait(max(0.0, deadline - time.monotonic()))


atexit.register(_finish_deliveries)


def repeat_signal(event: Any) -> bool:
    """Note a signal event; True when the same signal was already emitted within 0.5 s (CrewAI's telemetry
    handler and crewckpt's both emit it when both are installed: one checkpoint is enough)."""
    if event.type not in SIGNAL_EVENTS:
        return False
    now = time.monotonic()
    repeat = event.type in _handing_on or now - _last_signal_event.get(event.type, -1.0) <= 0.5
    _last_signal_event[event.type] = now
    return repeat

"""Signal checkpoints: crewckpt's handlers for SIGTERM, SIGINT, SIGHUP, SIGTSTP and SIGCONT.

A handler emits CrewAI's signal event (which the ordered writer checkpoints when ``on_events`` names it), then
chains to the previous handler or the default action. A signal that arrives inside a write is held until the
write ends (:func:`drain_signals`, called by the hooks after each event).
"""

from __future__ import annotations

import logging
import os
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

from crewckpt.crewai.writer import EMIT_LOCK

logger = logging.getLogger("crewckpt.crewai")

SIGNAL_EVENTS: frozenset[str] = frozenset({"SIGTERM", "SIGINT", "SIGHUP", "SIGTSTP", "SIGCONT"})
"""CrewAI's signal event types (``on_events`` names that make crewckpt install a handler)."""


def pending_signals() -> bool:
    """True when a signal arrived during a write and waits for :func:`drain_signals`."""
    return bool(_pending_signals)


# -- signals -------------------------------------------------------------------------------------------------

_SIGNAL_EVENT_CLASSES = {"SIGTERM": SigTermEvent, "SIGINT": SigIntEvent, "SIGHUP": SigHupEvent,
                         "SIGTSTP": SigTStpEvent, "SIGCONT": SigContEvent}
_signal_previous: dict[int, Any] = {}
_pending_signals: list[tuple[int, Any]] = []
_last_signal_event: dict[str, float] = {}


class _SignalSource:
    """The source of signal events crewckpt emits (CrewAI's own come from its Telemetry object)."""

    entity_type = None


_SIGNAL_SOURCE = _SignalSource()


def install_signal_handlers(names: frozenset[str] | set[str]) -> None:
    """Install crewckpt's handler for each named signal (idempotent; no-op off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        logger.debug("crewckpt: signal checkpoints need the main thread; %s not installed", sorted(names))
        return
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


def _on_signal(signum: int, frame: Any) -> None:
    if EMIT_LOCK._is_owned():  # type: ignore[attr-defined]  # interrupted inside a write: finish it first
        _pending_signals.append((signum, frame))
        return
    _deliver(signum, frame)


def drain_signals() -> None:
    while _pending_signals and not EMIT_LOCK._is_owned():  # type: ignore[attr-defined]
        signum, frame = _pending_signals.pop(0)
        _deliver(signum, frame)


def _deliver(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    # CrewAI's telemetry handler (when telemetry is on) may have emitted this signal just before chaining here
    if time.monotonic() - _last_signal_event.get(name, -1.0) > 0.5:
        try:
            crewai_event_bus.emit(_SIGNAL_SOURCE, _SIGNAL_EVENT_CLASSES[name]())
        except Exception as exc:  # a signal handler must never fail
            logger.warning("crewckpt: checkpoint on %s failed: %s", name, exc)
    previous = _signal_previous.get(signum)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL or previous is None:
        if signum == getattr(signal, "SIGCONT", None):
            return
        signal.signal(signum, signal.SIG_DFL)  # default action (terminate / stop), then re-arm
        os.kill(os.getpid(), signum)
        signal.signal(signum, _on_signal)


def repeat_signal(event: Any) -> bool:
    """Note a signal event; True when the same signal was already emitted within 0.5 s (CrewAI's telemetry
    handler and crewckpt's both emit it when both are installed: one checkpoint is enough)."""
    if event.type not in SIGNAL_EVENTS:
        return False
    now = time.monotonic()
    repeat = now - _last_signal_event.get(event.type, -1.0) <= 0.5
    _last_signal_event[event.type] = now
    return repeat

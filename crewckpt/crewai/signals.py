"""Signal checkpoints: crewckpt's handlers for SIGTERM, SIGINT, SIGHUP, SIGTSTP and SIGCONT.

Two CPython facts shape this module. A Python signal handler runs in the main thread between two bytecodes
of whatever it interrupted, and that code may hold any lock (CrewAI's event-bus executor lock, the emit lock
in the middle of a checkpoint, a store's write lock): so the handler takes no lock, emits nothing and starts
no thread. And the kernel hands a process-directed signal to any thread that does not block it: when that is
one of CrewAI's executor threads (an LLM call) while the main thread waits in ``epoll`` (``asyncio.run``),
CPython only notes the signal, and the main thread runs no handler until its wait ends (for ever, with a
call that does not return).

So the thread ``crewckpt-signals`` decides. Its socket is the process's wakeup fd
(:func:`signal.set_wakeup_fd`): CPython's C-level handler writes the signal number to it from whichever
thread took the signal. On that byte the thread asks the main thread for its context (the event's scope:
CrewAI's runtime state is a context variable) by sending it the signal again (``pthread_kill``: its wait
returns and the handler runs there); it emits CrewAI's signal event with that context (which the ordered
writer checkpoints when ``on_events`` names it; the emit lock makes it wait for a write in progress), then
sends the signal to the main thread once more, whose handler now hands it to the handler that was there
before, or takes the default action (SIGTERM still terminates). The handler itself only carries out what
the thread asked for (single dict operations and a ``SimpleQueue.put``), so a handler run that is not asked
for anything does nothing: the bytes, one per delivered signal, are what counts. So a command the handler has
not carried out after :data:`_RESEND_S` is sent again (CPython 3.11 can leave a signal the main thread took
unhandled while that thread goes on to wait in ``epoll``: another thread's recomputation of the eval breaker
clears its pending bit; gh-109369 fixed that in 3.13).

Best effort: a checkpoint that takes longer than :data:`SIGNAL_WRITE_TIMEOUT_S` is given up, and a second
signal of the same kind while it is written acts at once. A wakeup fd that was set before crewckpt's is
chained (every signal byte is forwarded to it); one set after crewckpt's (``loop.add_signal_handler``) is
taken back, and chained, at the next signal, which the handler then reports itself (as it does where there is
no ``pthread_kill``).
"""

from __future__ import annotations

import atexit
import contextvars
import logging
import os
import queue
import signal
import socket
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

_ECHO_LOST_S = 2.0  # a signal we sent the main thread whose byte has not come back by then is taken as lost
_RESEND_S = 0.5  # a command the handler has not carried out by then is sent again (module docstring)
_USE_WAKEUP = hasattr(signal, "pthread_kill") and hasattr(signal, "set_wakeup_fd")  # POSIX


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
    """One signal on its way: the main thread's context when it arrived (the event's scope), the thread that
    writes its checkpoint, and an event set once that is written or given up."""

    __slots__ = ("signum", "context", "finished", "written", "writer", "deadline")

    def __init__(self, signum: int, context: contextvars.Context) -> None:
        self.signum = signum
        self.context = context
        self.finished = threading.Event()
        self.written = False  # set by its writer, just before it wakes the signal thread
        self.writer: threading.Thread | None = None
        self.deadline = time.monotonic() + SIGNAL_WRITE_TIMEOUT_S


# Signal thread -> handler: commands (set, then the signal is sent to the main thread; the handler pops them).
_capture: dict[int, bool] = {}  # "send me the main thread's context" (the arrival is known from its byte)
_release: dict[int, _Delivery] = {}  # "hand this signal on now"
# Handler / writers -> signal thread: messages, and a 0 byte on the socket to wake it.
_messages: queue.SimpleQueue[tuple[str, int, contextvars.Context | None]] = queue.SimpleQueue()
# Signal thread only (atexit reads a copy of _inflight):
_inflight: dict[int, _Delivery] = {}  # signum -> its delivery while the checkpoint is written
_echoes: dict[int, float] = {}  # signum -> when we sent it to the main thread (its byte is then ours, not news)
_sent: dict[int, float] = {}  # signum -> when it was last sent to the main thread (to resend a command not done)
_kill_wanted: set[int] = set()  # a send that waits for the previous one's byte (two pending would merge into one)
_handing_on: set[str] = set()  # signals being handed to the previous handler now
_signal_thread_pid: int | None = None  # the process whose signal thread runs (a forked child has none)
_wake_r: socket.socket | None = None  # the signal thread reads it
_wake_w: socket.socket | None = None  # the wakeup fd (non-blocking); handler and writers write 0 bytes to it
_chain: tuple[int, int, int] | None = None  # (fd, st_dev, st_ino): the wakeup fd before ours, fed every byte


def install_signal_handlers(names: frozenset[str] | set[str]) -> None:
    """Install crewckpt's handler for each named signal (idempotent; no-op off the main thread), start the
    thread that writes signal checkpoints and make its socket the wakeup fd (chaining the one there)."""
    if threading.current_thread() is not threading.main_thread():
        logger.debug("crewckpt: signal checkpoints need the main thread; %s not installed", sorted(names))
        return
    _start_signal_thread()
    _wakeup_was_ours()
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


def uninstall_signal_handlers() -> None:
    """Put back the handlers and the wakeup fd crewckpt found (main thread only; a handler installed over
    crewckpt's stays). The signal thread stays, idle, for a later :func:`install_signal_handlers`.

    Raises:
        ValueError: off the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        raise ValueError("crewckpt: uninstall_signal_handlers needs the main thread")
    for signum, previous in list(_signal_previous.items()):
        if signal.getsignal(signum) is _on_signal:
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        del _signal_previous[signum]
    _restore_wakeup()


def _start_signal_thread() -> None:
    global _signal_thread_pid, _wake_r, _wake_w
    if _signal_thread_pid == os.getpid():
        return
    _wake_r, _wake_w = socket.socketpair()
    _wake_w.setblocking(False)  # set_wakeup_fd wants it so: a full buffer drops a byte, never blocks a handler
    threading.Thread(target=_signal_loop, args=(_wake_r,), name="crewckpt-signals", daemon=True).start()
    _signal_thread_pid = os.getpid()


def _wakeup_was_ours() -> bool:
    """Make the signal thread's socket the wakeup fd (main thread: install, handler); True when it was
    already. Another fd found there is chained, so whoever set it still gets every signal byte."""
    if not _USE_WAKEUP or _wake_w is None or _signal_thread_pid != os.getpid():
        return False
    ours = _wake_w.fileno()
    try:
        previous = signal.set_wakeup_fd(ours, warn_on_full_buffer=False)
    except (ValueError, OSError):  # off the main thread, or a closed socket
        return False
    if previous != ours:
        _chain_to(previous)
        return False
    return True


def _chain_to(fd: int) -> None:
    global _chain
    try:
        st = os.fstat(fd) if fd >= 0 else None
    except OSError:
        st = None
    _chain = (fd, st.st_dev, st.st_ino) if st is not None else None


def _restore_wakeup() -> None:
    """The wakeup fd back to the chained one (if it is still that file), when ours is the one set."""
    global _chain
    if not _USE_WAKEUP or _wake_w is None:
        return
    chain, _chain = _chain, None
    target = chain[0] if chain is not None and _same_file(chain) else -1
    try:
        current = signal.set_wakeup_fd(target)
        if current != _wake_w.fileno():  # not ours (a later owner's): leave it
            signal.set_wakeup_fd(current)
    except (ValueError, OSError):
        pass


def _same_file(chain: tuple[int, int, int]) -> bool:
    try:
        st = os.fstat(chain[0])
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == chain[1:]


def _forget_signal_thread() -> None:  # in a forked child: the thread stayed in the parent
    global _signal_thread_pid, _messages, _wake_r, _wake_w
    if _wake_w is not None:
        _restore_wakeup()  # the parent's socket must not get the child's signals
        for sock in (_wake_r, _wake_w):
            if sock is not None:
                sock.close()
    _wake_r = _wake_w = None
    _signal_thread_pid = None
    _messages = queue.SimpleQueue()
    for state in (_capture, _release, _inflight, _echoes, _sent, _kill_wanted):
        state.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_signal_thread)


def _on_signal(signum: int, frame: Any) -> None:
    """The handler: carries out what the signal thread asked for; no lock, emit or thread start here."""
    name = signal.Signals(signum).name
    if _release.pop(signum, None) is not None:
        # the checkpoint is written (or given up), or a second signal came meanwhile: hand it on now; a
        # signal event the previous handler emits (CrewAI's telemetry) is a repeat, not a second checkpoint
        _handing_on.add(name)
        try:
            _hand_on(signum, frame)
        finally:
            _handing_on.discard(name)
        return
    if _signal_thread_pid != os.getpid():  # a forked child whose handlers were never installed in it
        _hand_on(signum, frame)
        return
    if _capture.pop(signum, None) is not None:
        _post("context", signum, contextvars.copy_context())
        return
    if _wakeup_was_ours():
        return  # the signal thread reads this signal's byte and asks for what it needs
    # no wakeup fd of ours (none on this platform, or another was set since): this signal's byte went
    # elsewhere, so report it ourselves
    if time.monotonic() - _last_signal_event.get(name, -1.0) <= 0.5:
        _hand_on(signum, frame)  # CrewAI's telemetry handler emitted this signal just before chaining here
        return
    _post("arrival", signum, contextvars.copy_context())


def _post(kind: str, signum: int, context: contextvars.Context | None) -> None:
    """A message to the signal thread (from the handler or a writer): a reentrant put and a 0 byte."""
    _messages.put((kind, signum, context))
    w = _wake_w
    if w is not None:
        try:
            w.send(b"\0")
        except OSError:  # full (it is being read) or closed (a fork): nothing to wake
            pass


def _signal_loop(r: socket.socket) -> None:
    if hasattr(signal, "pthread_sigmask"):  # a signal sent to the process never lands here (nor in the writers
        # started from here)
        signal.pthread_sigmask(signal.SIG_BLOCK, {getattr(signal, n) for n in SIGNAL_EVENTS if hasattr(signal, n)})
    while True:
        try:
            if not _signal_step(r):
                return
        except Exception:  # the thread must outlive one failure: later signals need it
            logger.warning("crewckpt: delivering a signal failed", exc_info=True)


def _signal_step(r: socket.socket) -> bool:
    """Wait for a byte (or the next deadline), then act on bytes, messages and finished writers; False when
    the socket is closed (a fork)."""
    r.settimeout(_next_timeout())
    try:
        data = r.recv(512)
        if not data:
            return False
    except TimeoutError:
        data = b""
    except OSError:
        return False
    news = bytes(signum for signum in data if signum and _on_byte(signum))
    if news:
        _forward(news)
    while True:
        try:
            kind, signum, context = _messages.get_nowait()
        except queue.Empty:
            break
        if kind == "arrival":  # our wakeup fd had been replaced: a byte we wait for may have gone elsewhere
            _echoes.clear()
            for wanted in list(_kill_wanted):
                _kill_wanted.discard(wanted)
                _send_to_main(wanted)
            _arrival(signum, context)
        elif kind == "context" and signum not in _inflight and context is not None:
            _start_delivery(signum, context)
    _check_deadlines()
    return True


def _next_timeout() -> float | None:
    deadlines = [d.deadline for d in _inflight.values()]
    deadlines += [_echoes.get(n, 0.0) + _ECHO_LOST_S for n in _kill_wanted]
    deadlines += [_sent.get(n, 0.0) + _RESEND_S for n in _undone()]
    return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None


def _forward(data: bytes) -> None:
    """Signal bytes to the wakeup fd there was before ours (if it is still that file)."""
    global _chain
    chain = _chain
    if chain is None:
        return
    try:
        if not _same_file(chain):
            raise OSError("the chained wakeup fd was closed")
        os.write(chain[0], data)
    except BlockingIOError:  # full: dropped, as CPython's own handler would
        pass
    except OSError:
        if _chain is chain:
            _chain = None


def _on_byte(signum: int) -> bool:
    """Act on one signal byte; False for the byte of a signal we sent the main thread (not news, not
    forwarded: whoever chained sees each delivered signal once)."""
    if _echoes.pop(signum, None) is not None:
        if signum in _kill_wanted:
            _kill_wanted.discard(signum)
            _send_to_main(signum)
        return False
    if signum in _signal_previous:
        _arrival(signum, None)
    return True


def _arrival(signum: int, context: contextvars.Context | None) -> None:
    """A signal was delivered (to some thread): checkpoint it, or hand it on at once if it is a second one."""
    delivery = _inflight.get(signum)
    if delivery is not None:
        _release_now(delivery)
    elif context is None:
        if not _ours(signum):
            return  # a handler set over crewckpt's took this signal: sending it again would run that one twice
        _capture[signum] = True
        _send_to_main(signum)
    else:
        _start_delivery(signum, context)


def _ours(signum: int) -> bool:
    """Whether crewckpt's handler is the one installed for ``signum`` now (user code may set its own later)."""
    try:
        return signal.getsignal(signum) is _on_signal
    except (ValueError, OSError):
        return False


def _start_delivery(signum: int, context: contextvars.Context) -> None:
    """Checkpoint in a thread of its own, so one that hangs is given up at the delivery's deadline."""
    delivery = _Delivery(signum, context)
    name = signal.Signals(signum).name
    delivery.writer = threading.Thread(target=_write, args=(delivery, name), name=f"crewckpt-{name}-checkpoint",
                                       daemon=True)
    _inflight[signum] = delivery
    delivery.writer.start()


def _write(delivery: _Delivery, name: str) -> None:
    try:
        delivery.context.run(_emit_signal_event, name)
    finally:
        delivery.written = True
        _post("written", delivery.signum, None)


def _check_deadlines() -> None:
    now = time.monotonic()
    for delivery in list(_inflight.values()):
        if delivery.written:
            _release_now(delivery)
        elif now >= delivery.deadline:
            logger.warning("crewckpt: the checkpoint on %s took more than %.0f s; handing the signal on without it",
                           signal.Signals(delivery.signum).name, SIGNAL_WRITE_TIMEOUT_S)
            _release_now(delivery)
    for signum in list(_kill_wanted):  # its predecessor's byte never came (the wakeup fd was replaced)
        if now - _echoes.get(signum, 0.0) >= _ECHO_LOST_S:
            _echoes.pop(signum, None)
            _kill_wanted.discard(signum)
            _send_to_main(signum)
    for signum in _undone():  # sent, its byte maybe back, yet the handler has not run: send it again
        if now - _sent.get(signum, 0.0) >= _RESEND_S:
            _send_to_main(signum)


def _undone() -> list[int]:
    """Signals whose command (capture or release) the main thread's handler has not popped yet, and none of
    whose sends waits for an earlier one's byte."""
    return [n for n in {*_capture, *_release} if n not in _kill_wanted and _ours(n)]


def _release_now(delivery: _Delivery) -> None:
    if _inflight.get(delivery.signum) is delivery:
        del _inflight[delivery.signum]
    if _ours(delivery.signum):  # else no handler of ours is there to pop the command
        _release[delivery.signum] = delivery
    # crewckpt's handler held this signal back: whichever handler is installed now gets it (the previous
    # one after uninstall_signal_handlers, or one set over crewckpt's meanwhile)
    _send_to_main(delivery.signum)
    delivery.finished.set()  # after the send: an exit waiting for it is then interrupted by the signal


def _emit_signal_event(name: str) -> None:
    try:
        crewai_event_bus.emit(_SIGNAL_SOURCE, _SIGNAL_EVENT_CLASSES[name]())
    except Exception as exc:  # best effort: the signal is handed on anyway
        logger.warning("crewckpt: checkpoint on %s failed: %s", name, exc)


def _send_to_main(signum: int) -> None:
    """The signal to the main thread (its blocking call returns and its handler runs there). One at a time
    per signal: two pending at once would merge into one delivery, one byte, and the count of ours is off."""
    if signum in _echoes:
        _kill_wanted.add(signum)
        return
    _sent[signum] = now = time.monotonic()
    if _USE_WAKEUP:
        _echoes[signum] = now
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

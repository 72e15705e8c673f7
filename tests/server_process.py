"""What every throwaway server of the test suite (PostgreSQL, PgBouncer, SeaweedFS) does the same way: read
the end of its log, wait until it answers (a deadline, never a fixed sleep), and stop it by its pid."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def log_tail(path: Path, chars: int = 3000) -> str:
    """The last ``chars`` characters of the log file at ``path``, or "(no log)"."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def wait_ready(proc: subprocess.Popen[bytes], ready: Callable[[], bool], log: Path, name: str, timeout_s: float,
               port_taken: tuple[str, ...]) -> bool:
    """Poll ``ready()`` until it returns True (then True) or ``timeout_s`` seconds pass. False when the
    process exited with one of the ``port_taken`` phrases in its log (the caller picks other ports).

    Raises:
        RuntimeError: the process exited for another reason, or never became ready (with its log's end).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_tail(log)
            if any(p in tail for p in port_taken):
                return False
            raise RuntimeError(f"{name} exited with {proc.returncode}; log:\n{tail}")
        if ready():
            return True
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)  # poll again soon; returns at once if it died
    raise RuntimeError(f"{name} was not ready within {timeout_s:.0f} s; log:\n{log_tail(log)}")


def stop(proc: subprocess.Popen[bytes] | None, sig: signal.Signals = signal.SIGTERM, group: bool = False) -> None:
    """Send ``sig`` to the process (its whole process group with ``group``), wait up to 30 s, then SIGKILL.
    Nothing happens for None or a process that already exited."""
    if proc is None or proc.poll() is not None:
        return

    def send(s: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, s)
            else:
                proc.send_signal(s)

    send(sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        proc.wait(timeout=30)

"""Publishing a run to a shared store (``CheckpointConfig(push_to=..., push_every=N)``).

A worker publishes what a run wrote when the run ends (``crew_kickoff_completed``/``_failed``,
``flow_finished``, an agent's ``*_execution_completed``) and, with ``push_every=N``, after every N-th
checkpoint of that run. What moves in the destination is decided by
:func:`crewckpt.history.publish.publish_run`: the run's own ref ``refs/runs/<run id>`` (every run keeps its
name there, so a second kickoff of the same crew, a new lineage, publishes as well as the first), and the
run's branch when no tip loses its name (a branch holding checkpoints pushed by hand is kept; the run is
published all the same, counted as ``kept``).

Best effort and never in the run's way: pushes run on one background thread per (store, destination),
requests for the same run coalesce, and a failure (remote unreachable, a rejected run ref) is emitted as
CrewAI's ``CheckpointFailedEvent`` with trigger ``"push"``, counted in :func:`push_stats` and summed up in
one warning at exit, like failed checkpoints; the first failure of a streak is logged as a warning, the
repeats of a streak at INFO (a run publishing every checkpoint to a dead remote does not flood the log).
The push at a run's end is the one that must land: when it fails (a store busy for a moment, a network
blip), it is tried again after each of RUN_END_RETRY_S (a rejection is final), so a failed push, also a
background one it was coalesced with, never leaves the destination without the run's last checkpoint.
:func:`flush_pushes` waits for the pending pushes; it also runs at interpreter exit (timeout 30 s), so a
script's last push completes.
"""

from __future__ import annotations

import atexit
import logging
import shlex
import threading
from typing import Any

from crewckpt.backends import registry

logger = logging.getLogger("crewckpt")

RUN_END_EVENTS = frozenset({"crew_kickoff_completed", "crew_kickoff_failed", "flow_finished",
                            "agent_execution_completed", "lite_agent_execution_completed"})
RUN_END_RETRY_S = (0.5, 2.0)  # seconds before each new try of a failed run-end push


class _Rejected(RuntimeError):
    """The destination refused the run's ref: trying again changes nothing."""


class Publisher:
    """Publishes runs of the store at ``store_path`` to ``push_to`` (a remote name of that store, or a
    location) on a background thread."""

    def __init__(self, store_path: str, push_to: str) -> None:
        self.store_path, self.push_to = store_path, push_to
        self._cond = threading.Condition()
        # run id -> (branch, config to report with, whether the run ended), the latest request for that run
        self._pending: dict[str, tuple[str, Any, bool]] = {}
        self._busy = False
        self._thread: threading.Thread | None = None
        self.pushed = 0
        self.failed = 0
        self.kept = 0  # published, but the destination's branch stayed where it was (see publish_run)
        self.last_error: str | None = None
        self._streak = 0  # failures since the last success

    def request(self, branch: str, run_id: str, cfg: Any, *, final: bool = False) -> None:
        """Publish run ``run_id`` (written on ``branch``) soon; coalesced with a pending request for it.
        ``final``: the run ended (a failed push is then tried again, see RUN_END_RETRY_S)."""
        with self._cond:
            was = self._pending.get(run_id)
            self._pending[run_id] = (branch, cfg, final or (was is not None and was[2]))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="crewckpt-push", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until nothing is pending or being pushed; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._cond.wait_for(lambda: bool(self._pending), timeout=5.0):
                    self._thread = None  # idle: the next request starts a new thread
                    return
                run_id, (branch, cfg, final) = next(iter(self._pending.items()))
                del self._pending[run_id]
                self._busy = True
            try:
                for delay in (0.0, *(RUN_END_RETRY_S if final else ())):
                    if delay and self._handed_over(run_id, delay):
                        break
                    if self._push(branch, run_id, cfg) is not False:
                        break
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _handed_over(self, run_id: str, seconds: float) -> bool:
        """Wait up to ``seconds`` for a new request for run ``run_id`` (whose run-end push failed); True when one
        came: it takes over, pushed next and tried again like the run-end push it replaces."""
        with self._cond:
            if not self._cond.wait_for(lambda: run_id in self._pending, seconds):
                return False
            branch, cfg, _ = self._pending[run_id]
            self._pending[run_id] = (branch, cfg, True)
            return True

    def _push(self, branch: str, run_id: str, cfg: Any) -> bool | None:
        """One push; True when it landed, False when it failed, None when the destination rejected it."""
        from crewckpt.history.publish import KEPT
        from crewckpt.history.store import Store

        try:
            with Store.open(self.store_path) as store:  # its own handle: the run's writer keeps writing
                rep = store.publish_run(self.push_to, run_id, branch)
            bad = rep.rejected
            if bad:
                raise _Rejected(f"publishing run {run_id} ({branch}) to {self.push_to} was rejected: "
                                f"{bad[0].reason}")
        except Exception as exc:  # best effort: the run never sees it
            with self._cond:
                self.failed += 1
                self._streak += 1
                self.last_error = str(exc)
                first = self._streak == 1
            logger.log(logging.WARNING if first else logging.INFO,
                       "crewckpt: push of branch %s (run %s) from %s to %s failed: %s%s", branch, run_id,
                       self.store_path, self.push_to, exc,
                       "; further failures are counted and reported at exit" if first else "",
                       exc_info=logger.isEnabledFor(logging.DEBUG))
            _report_failure(cfg, self.store_path, branch, str(exc))
            return None if isinstance(exc, _Rejected) else False
        kept = [r for r in rep.refs if r.status == KEPT]
        with self._cond:
            self.pushed += 1
            self._streak = 0
            self.kept += bool(kept)
        logger.info("crewckpt: published run %s (%s) to %s (%d checkpoint(s), %d bytes)%s", run_id, branch,
                    registry.redact(self.push_to), rep.commits, rep.bytes, f"; {kept[0].reason}" if kept else "")
        return True


def _report_failure(cfg: Any, location: str, branch: str, error: str) -> None:
    try:
        from crewai.events.event_bus import crewai_event_bus
        from crewai.events.types.checkpoint_events import CheckpointFailedEvent

        crewai_event_bus.emit(cfg, CheckpointFailedEvent(location=location, provider="CrewckptProvider",
                                                         trigger="push", branch=branch, parent_id=None, error=error))
    except Exception:  # reporting must not fail either
        logger.debug("crewckpt: reporting a failed push failed", exc_info=True)


_publishers: dict[tuple[str, str], Publisher] = {}
_lock = threading.Lock()
_counts: dict[tuple[str, str, str], int] = {}  # (store, destination, run id) -> checkpoints


def publisher(store_path: str, push_to: str) -> Publisher:
    """The one Publisher for ``(store_path, push_to)`` in this process."""
    key = (store_path, push_to)
    with _lock:
        p = _publishers.get(key)
        if p is None:
            p = _publishers[key] = Publisher(store_path, push_to)
        return p


def after_checkpoint(cfg: Any, store_path: str, branch: str, run_id: str) -> None:
    """Called after each checkpoint run ``run_id`` wrote with ``cfg`` on ``branch``: a push every
    ``cfg.push_every`` checkpoints of that run."""
    if not cfg.push_to or not cfg.push_every:
        return
    key = (store_path, cfg.push_to, run_id)
    with _lock:
        n = _counts[key] = _counts.get(key, 0) + 1
    if n % cfg.push_every == 0:
        publisher(store_path, cfg.push_to).request(branch, run_id, cfg)


def at_run_end(cfg: Any, store_path: str, branch: str, run_id: str) -> None:
    """Called when run ``run_id``, whose config is ``cfg``, ends on ``branch``: publish it (tried again when
    it fails)."""
    if cfg.push_to:
        publisher(store_path, cfg.push_to).request(branch, run_id, cfg, final=True)


def flush_pushes(timeout: float | None = 30.0) -> bool:
    """Wait until every requested push is done (or failed); False on timeout."""
    with _lock:
        pubs = list(_publishers.values())
    return all([p.flush(timeout) for p in pubs])


def push_stats() -> dict[str, dict[str, Any]]:
    """``"<store> -> <destination>" -> {"pushed": n, "failed": n, "kept": n, "last_error": str | None}`` in
    this process (``kept``: pushes that published the run but left the destination's branch as it was)."""
    with _lock:
        pubs = list(_publishers.values())
    return {f"{p.store_path} -> {p.push_to}": {"pushed": p.pushed, "failed": p.failed, "kept": p.kept,
                                                   "last_error": p.last_error}
            for p in pubs}


def report_push_failures() -> None:
    """Log one warning per (store, destination) where pushes failed (at interpreter exit, after the last
    pushes finished), as :func:`crewckpt.crewai.writer.report_failures` does for checkpoints."""
    with _lock:
        pubs = list(_publishers.values())
    for p in pubs:
        if p.failed:
            logger.warning("crewckpt: %d of %d pushes %s -> %s failed; last error: %s; publish what is missing "
                           "with `ckpt --store %s publish %s`", p.failed, p.pushed + p.failed,
                           registry.redact(p.store_path), registry.redact(p.push_to), registry.scrub(str(p.last_error)),
                           shlex.quote(registry.strip_secrets(p.store_path)),
                           shlex.quote(registry.strip_secrets(p.push_to)))  # a log line holds no password


atexit.register(report_push_failures)  # atexit runs last-registered first: the flush, then this report
atexit.register(flush_pushes)

"""Export commits of a crewckpt store to CrewAI's layouts (JSON folder or SQLite db), in bulk or live.

How a commit is named in CrewAI's terms (:func:`view_entry`):

* checkpoint id: its alias (the CrewAI id it was imported with or written under), else
  ``<UTC second of its time>_<first 8 hex of its commit id>``;
* parent id: the CrewAI id of its first parent; for an imported orphan, the parent id it was recorded
  with; none for a root. A pruned parent (collected by gc or not, so a view is the same before and after
  ``ckpt gc``): the CrewAI id the checkpoint's data records when imported from CrewAI, else none. The same id goes into the data's ``parent_id`` (CrewAI's TUI reads it there to
  put a fork under its parent), see :func:`crewai_lineage`;
* branch: its branch (``strip_prefix`` removed); created_at: the recorded one, else its UTC second;
* data: the exact stored JSON value, rendered as CrewAI renders it (``json.dumps`` style, or pydantic's
  compact style when it was imported in that style), so JSON imported from CrewAI is exported byte for byte.
  One rewrite (``native=True``, the default): a checkpoint config that names crewckpt's provider
  (``{"provider": {"provider_type": "crewckpt"}, ...}``, written by crewckpt's CrewAI integration) becomes
  the CrewAI config of the view itself (``json`` provider and the folder, or ``sqlite`` and the db), because
  CrewAI alone cannot validate crewckpt's provider; a crew restored from the view by plain CrewAI then
  keeps checkpointing into the view. Checkpoints written by CrewAI contain no such config: untouched.

:class:`LiveViewExporter` publishes commits as they are made (the ``views=`` option of
``crewckpt.crewai.CheckpointConfig``): on its own thread, never raising into or blocking the caller.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from crewckpt.errors import CkptError
from crewckpt.views import layout
from crewckpt.views.document import crewai_json
from crewckpt.views.reader import Problem
from crewckpt.views.writer import JsonFolderWriter, SqliteWriter, ViewEntry, ViewWriteError, WriteOutcome

if TYPE_CHECKING:
    from crewckpt.history.commits import CommitInfo
    from crewckpt.history.store import Store

log = logging.getLogger("crewckpt.views")

ViewFormat = Literal["json", "sqlite"]
ProgressFn = Callable[[str, int, int], None]
FORMATS: tuple[str, ...] = ("json", "sqlite")
_MTIME_STEP_NS = 1_000_000  # successive files get mtimes >= 1 ms apart: CrewAI sorts "latest" by mtime


@dataclasses.dataclass
class ExportReport:
    """Outcome of an export: destination, format, what was written / already there / in conflict (as
    CrewAI location strings) and the commits that could not be exported (problems)."""

    dest: str
    fmt: str
    outcome: WriteOutcome = dataclasses.field(default_factory=WriteOutcome)
    problems: list[Problem] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Compact JSON form: counts and problems as one-line strings."""
        o = self.outcome
        return {"dest": self.dest, "format": self.fmt, "written": len(o.written), "already_there": len(o.present),
                "conflicts": o.conflicts, "problems": [str(p) for p in self.problems]}

    def summary(self) -> str:
        o = self.outcome
        line = f"{self.dest}: {len(o.written)} written, {len(o.present)} already there"
        if o.conflicts:  # named: the folder is no longer a faithful copy of what was exported
            shown = ", ".join(repr(c) for c in o.conflicts[:3]) + (", ..." if len(o.conflicts) > 3 else "")
            line += (f", {len(o.conflicts)} left alone (same id, other data: {shown}; remove them and export again "
                     f"to write this store's)")
        if self.problems:
            line += f", {len(self.problems)} not exported"
        return line


def export_crewai(store: Store, dest: str | Path, fmt: str = "json", *, revs: Sequence[str] | None = None,
                  branch: str | None = None, strip_prefix: str | None = None,
                  progress: ProgressFn | None = None, native: bool = True) -> ExportReport:
    """Write commits to ``dest`` in CrewAI's ``fmt`` layout (``json``: a location folder; ``sqlite``: a db).

    Selection: ``revs`` (any revisions, exactly those commits) else ``branch`` (its live commits) else
    every live commit; written in store write order. Existing checkpoints are kept (incremental).
    ``progress(phase, done, total)`` is called with phase ``"reading"`` as commits are prepared.

    Raises:
        ValueError: unknown format. UnknownRevision/AmbiguousRevision/BadRefName: a bad selection.
        ViewWriteError: ``dest`` is not a writable view of that format. OSError from the file system.
    """
    fmt = _check_format(fmt)
    if revs:
        commits = sorted({c.id: c for c in (store.info(r) for r in revs)}.values(), key=lambda c: c.seq)
    else:
        commits = store.list(branch)
    report = ExportReport(str(dest), fmt)
    namer = _Namer(store)
    entries: list[ViewEntry] = []
    last_mtime = 0
    for n, info in enumerate(commits, 1):
        if progress is not None:
            progress("reading", n, len(commits))
        try:
            entry = view_entry(store, info, namer, strip_prefix=strip_prefix,
                               native=(fmt, str(dest)) if native else None)
        except (CkptError, ValueError) as exc:
            report.problems.append(Problem(info.id, info.alias, "skipped", str(exc)))
            continue
        last_mtime = max(info.time_ns, last_mtime + _MTIME_STEP_NS)
        entries.append(dataclasses.replace(entry, mtime_ns=last_mtime))
    report.outcome = write_entries(dest, fmt, entries, report.problems)
    return report


def write_entries(dest: str | Path, fmt: str, entries: list[ViewEntry],
                  problems: list[Problem] | None = None) -> WriteOutcome:
    """Write prepared entries to a view; entries whose branch cannot be a folder go to ``problems``."""
    if fmt == "sqlite":
        with SqliteWriter(dest) as w:
            return w.write(entries)
    writer = JsonFolderWriter(dest)
    out = WriteOutcome()
    for e in entries:
        try:
            out.merge(writer.write([e]))
        except ViewWriteError as exc:
            if problems is None:
                raise
            problems.append(Problem(str(dest), e.checkpoint_id, "skipped", str(exc)))
    return out


def prune_view(dest: str | Path, fmt: str, branches: Iterable[str], keep: int) -> int:
    """Keep the newest ``keep`` checkpoints of each of ``branches`` in a view, by CrewAI's providers' rule;
    returns how many were removed. Raises ViewWriteError (unsafe branch, not CrewAI's table) or OSError."""
    if fmt == "sqlite":
        with SqliteWriter(dest) as w:
            return sum(w.prune(b, keep) for b in branches)
    writer = JsonFolderWriter(dest)
    return sum(writer.prune(b, keep) for b in branches)


def view_entry(store: Store, info: CommitInfo, namer: _Namer | None = None, *,
               strip_prefix: str | None = None, native: tuple[str, str] | None = None) -> ViewEntry:
    """How commit ``info`` appears in CrewAI's layouts (see the module docstring); reads its document.
    ``native=(fmt, location)`` rewrites crewckpt checkpoint configs into that view's CrewAI config.

    Raises:
        MissingObject/IntegrityError: the commit's snapshot cannot be read.
    """
    namer = namer or _Namer(store)
    found = info.meta.get("crewai")
    crewai: dict[str, Any] = found if isinstance(found, dict) else {}
    branch = crewai["branch"] if isinstance(crewai.get("branch"), str) else info.branch
    stored = crewai_json(store.read(info.id), info.id[:12])  # CrewAI's JSON: agent references expanded
    if not branch:  # a pruned commit outside the index has no branch here: the one its document names, or main
        named = stored.get("branch") if isinstance(stored, dict) else None
        branch = named if isinstance(named, str) and named else "main"
    if "parent_id" in crewai:
        parent_id = crewai["parent_id"]
    else:
        parent_id = namer.parent_id(info.parents[0], stored) if info.parents else None
    if strip_prefix and branch.startswith(strip_prefix) and len(branch) > len(strip_prefix):
        branch = branch[len(strip_prefix):]
    doc = crewai_lineage(stored, parent_id, branch, info.branch)
    text = layout.render_json(doc, crewai.get("json_style"))
    if native is not None and '"crewckpt"' in text:  # cheap test first: CrewAI's own checkpoints skip the walk
        text = layout.render_json(crewai_native(doc, *native), crewai.get("json_style"))
    created = crewai.get("created_at") or layout.ns_to_ts(info.time_ns)
    return ViewEntry(namer.of_info(info), parent_id, branch, text, created, info.time_ns)


def crewai_lineage(doc: Any, parent_id: str | None, branch: str, store_branch: str) -> Any:
    """``doc`` with its ``parent_id`` and ``branch`` fields as CrewAI must read them in the view.

    CrewAI's ``checkpoint list`` and TUI take a checkpoint's parent and branch from its data, and find a
    fork's parent by its checkpoint id. crewckpt's writer records the parent's commit id (64 hex) and the
    store's branch; those become the parent's id in the view (``parent_id``) and the view's ``branch``.
    Checkpoints imported from CrewAI already hold CrewAI's values and come back unchanged (byte for byte).
    Returns a shallow copy when something changes, else ``doc`` itself.
    """
    if not isinstance(doc, dict):
        return doc
    changes: dict[str, Any] = {}
    recorded = doc.get("parent_id", parent_id)
    if recorded != parent_id and (recorded is None or _is_commit_id(recorded)):
        changes["parent_id"] = parent_id
    if "branch" in doc and doc["branch"] == store_branch != branch:
        changes["branch"] = branch
    return {**doc, **changes} if changes else doc


def _is_commit_id(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


CREWAI_CONFIG_FIELDS = ("location", "on_events", "provider", "max_checkpoints", "restore_from")
"""Fields of ``crewai.state.checkpoint_config.CheckpointConfig`` (1.15.30), in its serialization order."""


def crewai_native(doc: Any, fmt: str, location: str) -> Any:
    """Replace, in place, every serialized checkpoint config whose provider is crewckpt's by CrewAI's own
    config for the view (``fmt`` json/sqlite, ``location`` its folder or db); returns ``doc``. Other
    values (all of CrewAI's own checkpoints) are left as they are."""
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                if _is_crewckpt_config(child):
                    native = {k: child[k] for k in CREWAI_CONFIG_FIELDS if k in child}
                    native.update(location=location, provider={"provider_type": fmt}, restore_from=None)
                    node[key] = native
                else:
                    stack.append(child)
        elif isinstance(node, list):
            for i, child in enumerate(node):
                if _is_crewckpt_config(child):
                    node[i] = crewai_native({"c": child}, fmt, location)["c"]
                else:
                    stack.append(child)
    return doc


def _is_crewckpt_config(v: Any) -> bool:
    return (isinstance(v, dict) and isinstance(v.get("provider"), dict)
            and v["provider"].get("provider_type") == "crewckpt")


class _Namer:
    """CrewAI ids of commits, with a cache (parents are looked up once)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.ids: dict[str, str] = {}
        self.live: dict[str, bool] = {}  # parent commit id -> in the live set

    def of_info(self, info: CommitInfo) -> str:
        cid = info.alias or layout.make_checkpoint_id(info.time_ns, info.id)
        self.ids[info.id] = cid
        return cid

    def parent_id(self, commit_id: str, doc: Any) -> str | None:
        """The CrewAI id of parent ``commit_id`` of a commit whose stored data is ``doc``.

        A live parent: its id (:meth:`of_info`). A pruned parent: only what gc leaves unchanged, so the
        view names the child alike before and after ``ckpt gc`` (no second file, data and file name
        agreeing): the CrewAI id the child's data records (imported from CrewAI: the parent's alias),
        else None (a root in CrewAI's eyes; its time and alias go with gc).
        """
        if commit_id not in self.live:
            try:
                info = self.store.info(commit_id)
            except CkptError:  # pruned and collected
                self.live[commit_id] = False
            else:
                self.live[commit_id] = info.live
                if info.live:
                    self.of_info(info)
        if self.live[commit_id]:
            return self.ids[commit_id]
        recorded = doc.get("parent_id") if isinstance(doc, dict) else None
        return recorded if isinstance(recorded, str) and recorded and not _is_commit_id(recorded) else None


def _check_format(fmt: str) -> ViewFormat:
    if fmt not in FORMATS:
        raise ValueError(f"unknown view format {fmt!r}; use json or sqlite")
    return fmt  # type: ignore[return-value]


class LiveViewExporter:
    """Publishes commits to a CrewAI view (JSON folder or SQLite db) as they are made.

    ``publish(commit_id)`` only enqueues (O(1), never raises, never blocks: when ``max_pending`` commits
    are waiting, further ones are dropped and counted in ``dropped``); a daemon thread writes them
    incrementally (a commit already in the view is not written again). Failures are logged on the
    ``crewckpt.views`` logger (once per distinct message), counted in ``errors`` and kept in
    ``last_error``; the view can be completed later with :func:`export_crewai`, which is incremental.

    Args:
        store: the Store (or the path of one: the thread then opens its own) holding the commits.
        dest: the view: a JSON location folder or an SQLite db path.
        fmt: ``json`` or ``sqlite``.
        strip_prefix: removed from branch names in the view.
        max_checkpoints: after each write keep only the newest N checkpoints of each branch written in the
            view, as CrewAI's providers prune (JSON: by file mtime; SQLite: by rowid); None keeps all.
    Raises:
        ValueError: unknown format, or ``max_checkpoints`` below 1 (the only errors, at construction).
    """

    def __init__(self, store: Store | str | Path, dest: str | Path, fmt: str = "json", *,
                 strip_prefix: str | None = None, max_pending: int = 10_000,
                 max_checkpoints: int | None = None) -> None:
        if max_checkpoints is not None and max_checkpoints < 1:
            raise ValueError(f"max_checkpoints must be at least 1, got {max_checkpoints}")
        self.max_checkpoints = max_checkpoints
        self.pruned = 0
        self.fmt = _check_format(fmt)
        self.dest = str(dest)
        self.strip_prefix = strip_prefix
        self._store_arg = store
        self._queue: queue.Queue[str | None] = queue.Queue(max_pending)
        self._done: set[str] = set()
        self._logged: set[str] = set()
        self._lock = threading.Lock()
        self.published = 0
        self.errors = 0
        self.dropped = 0
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name="crewckpt-live-view", daemon=True)
        self._thread.start()

    def publish(self, commit_id: str) -> None:
        """Queue one commit for the view. Never raises."""
        try:
            self._queue.put_nowait(commit_id)
        except queue.Full:
            self.dropped += 1
        except Exception:  # noqa: BLE001 - never fail the caller's run
            self.dropped += 1

    def publish_many(self, commit_ids: Iterable[str]) -> None:
        """Queue several commits. Never raises."""
        for cid in commit_ids:
            self.publish(cid)

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every queued commit has been handled; False on timeout. Never raises."""
        done = threading.Event()

        def waiter() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=waiter, daemon=True).start()
        return done.wait(timeout)

    def close(self, timeout: float | None = 10.0) -> bool:
        """Flush, then stop the thread; True when everything queued was handled. Never raises."""
        ok = self.flush(timeout)
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            return False
        self._thread.join(timeout)
        return ok

    # -- the writer thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        store: Store | None = None
        while True:
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = None in batch
            try:
                ids = [c for c in batch if c is not None and c not in self._done]
                if ids:
                    store = store or self._open_store()
                    self._write(store, ids)
            except Exception as exc:  # noqa: BLE001 - a view must never break the run
                self._fail(exc)
            finally:
                for _ in batch:
                    self._queue.task_done()
            if stop:
                self._close_store(store)
                return

    def _open_store(self) -> Store:
        from crewckpt.history.store import Store

        if isinstance(self._store_arg, (str, Path)):
            return Store.open(self._store_arg)
        location = getattr(self._store_arg, "location", None)  # its own handle: the writer thread's
        return Store.open(location) if location is not None else self._store_arg

    def _close_store(self, store: Store | None) -> None:
        if store is not None and store is not self._store_arg:
            try:
                store.close()
            except Exception as exc:  # noqa: BLE001 - closing must not raise out of the thread
                log.debug("live view: closing the store failed: %s", exc)

    def _write(self, store: Store, ids: list[str]) -> None:
        namer = _Namer(store)
        entries = []
        for cid in ids:
            try:
                entries.append(view_entry(store, store.info(cid), namer, strip_prefix=self.strip_prefix,
                                          native=(self.fmt, self.dest)))
            except Exception as exc:  # noqa: BLE001 - one bad commit must not hold back the others
                self._fail(exc)
        problems: list[Problem] = []
        out = write_entries(self.dest, self.fmt, entries, problems)
        for p in problems:
            self._fail(CkptError(str(p)))
        self._done.update(ids)
        self.published += len(out.written)
        if self.max_checkpoints is not None and entries:
            self.pruned += prune_view(self.dest, self.fmt, sorted({e.branch for e in entries}),
                                      self.max_checkpoints)

    def _fail(self, exc: BaseException) -> None:
        self.errors += 1
        msg = f"live view {self.dest}: {type(exc).__name__}: {exc}"
        self.last_error = msg
        if msg not in self._logged:
            self._logged.add(msg)
            log.warning("%s (the run goes on; `ckpt export` can fill the view later)", msg)

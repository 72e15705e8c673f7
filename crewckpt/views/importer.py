"""Import CrewAI checkpoints (JSON folder, JSON file, SQLite db) into a crewckpt store.

Each checkpoint becomes one commit on its branch (``branch_prefix + CrewAI branch``) with:

* parents: the commit of its CrewAI parent (found in the same source or already in the store by alias);
  none when that parent is missing (an *orphan*, reported; its CrewAI parent id is kept in
  ``meta["crewai"]["parent_id"]`` so export names the file as before);
* alias: its CrewAI id (``ckpt show 20261129T234227_0d859366`` works);
* time_ns: the UTC second of its id; trigger: the ``trigger`` field of its data;
* run_id: the CrewAI id of the first checkpoint of its lineage (several runs on one branch stay apart);
* a store's existing tips keep a name (:mod:`crewckpt.history.lineage`): a continuation whose parent is not
  the tip its branch had before the import (CrewAI resumed from an older checkpoint since the last import)
  goes on a new branch ``<branch>-from-<parent id[:8]>`` as a new run, with CrewAI's branch kept in
  ``meta["crewai"]["branch"]``, and its children follow it there; a root (a fresh CrewAI kickoff) moves
  its branch to itself (a new lineage) when the old tip keeps its run ref, else it goes on ``<branch>-2``.
  Within one import CrewAI's own lineage forks stay on the one local branch chosen for that CrewAI
  branch where the lineage entered the import (as CrewAI lists them: all on one branch);
* meta ``{"crewai": {...}}`` only for what the rest cannot restore: an orphan's parent id, a
  ``created_at`` that differs from the id, the text style when it is pydantic's compact JSON;
* secrets redacted (:mod:`crewckpt.views.redaction`): the string of every secret-named key (``api_key``,
  tokens, passwords) and every secret environment value of the importing process, counted in the report;
  a redacted key is rebuilt from the environment by CrewAI on restore.

Determinism: commits are made in one order computed from the checkpoints alone (parents first; then by
timestamp, number of events recorded, id), never from file mtimes, rowids or listing order, and redaction
depends only on the checkpoint and the environment's secret values, so the same checkpoints give the same
commit ids whether they come from a JSON folder or an SQLite db. Idempotence:
a checkpoint whose CrewAI id is already an alias in the store is not committed again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crewckpt.errors import BadRefName, CkptError, DecodeError, IntegrityError
from crewckpt.history import refnames
from crewckpt.history.lineage import continuation_branch, free_branch
from crewckpt.views import layout
from crewckpt.views.document import CREWAI, refuse_shape_key
from crewckpt.views.reader import (
    Checkpoint,
    CheckpointRecord,
    CrewaiSource,
    DamagedCheckpoint,
    Problem,
    open_source,
)
from crewckpt.views.redaction import Redactor

if TYPE_CHECKING:
    from crewckpt.history.store import Store

CACHE_BUDGET_BYTES = 256 * 1024 * 1024
"""Parsed checkpoints kept between the ordering pass and the commit pass (by stored size); beyond it
they are parsed again when committed."""

PROGRESS_MIN = 20
"""Show a progress bar (when stderr is a terminal) from this many checkpoints on."""

ProgressFn = Callable[[str, int, int], None]
"""``progress(phase, done, total)``; phase is ``"reading"`` or ``"committing"``."""


@dataclasses.dataclass
class ImportReport:
    """Outcome of one import.

    imported / present: ``(CrewAI id, commit id)`` of new commits and of checkpoints already in the store;
    problems: what was skipped, imported as an orphan, or noted (each with a one-line reason);
    branches: ``branch -> tip`` for every branch the import touched;
    redacted: ``(CrewAI id, number of values redacted)`` of each imported checkpoint that held secrets.
    """

    source: str
    kind: str
    imported: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    present: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    problems: list[Problem] = dataclasses.field(default_factory=list)
    branches: dict[str, str] = dataclasses.field(default_factory=dict)
    redacted: list[tuple[str, int]] = dataclasses.field(default_factory=list)

    @property
    def skipped(self) -> list[Problem]:
        return [p for p in self.problems if p.kind == "skipped"]

    @property
    def orphans(self) -> list[Problem]:
        return [p for p in self.problems if p.kind == "orphan"]

    def to_json(self) -> dict[str, Any]:
        """Compact JSON form: counts, branch tips, problems as one-line strings."""
        return {"source": self.source, "kind": self.kind, "imported": len(self.imported),
                "already_present": len(self.present), "orphans": len(self.orphans),
                "skipped": len(self.skipped), "branches": dict(self.branches),
                "problems": [str(p) for p in self.problems],
                "redacted": {"values": self.redacted_values, "checkpoints": len(self.redacted)}}

    @property
    def redacted_values(self) -> int:
        """Secret values redacted over all imported checkpoints."""
        return sum(n for _, n in self.redacted)

    def summary(self) -> str:
        """One line: counts of imported, present, orphaned and skipped checkpoints (and of redacted secrets)."""
        line = (f"{self.source}: {len(self.imported)} imported, {len(self.present)} already present, "
                f"{len(self.orphans)} without their parent, {len(self.skipped)} skipped")
        if self.redacted:
            line += (f"; {self.redacted_values} secret value(s) redacted in {len(self.redacted)} checkpoint(s), "
                     "not stored in clear")
        return line


def import_crewai(store: Store, path: str | Path, *, branch_prefix: str | None = None,
                  branch: str | None = None, progress: bool | ProgressFn | None = None) -> ImportReport:
    """Import every readable checkpoint at ``path`` into ``store``; see the module docstring.

    Args:
        store: an open Store.
        path: a CrewAI JSON location folder, a branch folder, one ``.json`` checkpoint, an SQLite db, or
            ``<db>#<checkpoint id>``.
        branch_prefix: prepended to every CrewAI branch name (``"imported/"`` gives ``imported/main``).
        branch: put every checkpoint on this one branch instead (lineage is kept through parents; the
            CrewAI branch is then kept in ``meta["crewai"]["branch"]`` so export restores it).
        progress: True shows a rich progress bar, False none, None one when stderr is a terminal and
            there are at least :data:`PROGRESS_MIN` checkpoints; or a callable ``(phase, done, total)``.
    Returns:
        An :class:`ImportReport`; damaged checkpoints are in its problems, never raised.
    Raises:
        SourceError: ``path`` is not a CrewAI location. BadRefName: ``branch_prefix`` makes bad names.
        CkptError subclasses from the store (StoreBusy, damaged store).
    """
    if branch_prefix:
        refnames.check_branch(branch_prefix.rstrip("/") or "x")
    if branch is not None:
        branch = refnames.check_branch(branch)
    with open_source(path) as src:
        report = ImportReport(src.path, src.kind)
        with _progress_reporter(progress, len(src.records)) as tick:
            _Importer(store, src, branch_prefix or "", report, tick, branch).run()
        report.problems[:0] = src.problems
    return report


class _Importer:
    def __init__(self, store: Store, src: CrewaiSource, prefix: str, report: ImportReport,
                 tick: ProgressFn, branch: str | None) -> None:
        self.store, self.src, self.prefix, self.report, self.tick = store, src, prefix, report, tick
        self.branch = branch
        self.cache: dict[str, Checkpoint] = {}
        self.cached_bytes = 0
        self.commit_of: dict[str, str] = {}  # CrewAI id -> commit id (this import or already present)
        self.run_of: dict[str, str] = {}  # CrewAI id -> run id
        self.moved: dict[str, tuple[str, str]] = {}  # commit id -> (branch wanted, branch it went on instead)
        self.placed: dict[str, tuple[str, str]] = {}  # commit id made here -> (branch wanted, branch it went on)
        self.root_branch: dict[str, str] = {}  # branch wanted -> the branch this import's roots go on
        self.before = set(store.branches().values())  # tips named before the import: they must stay named
        self.redactor = Redactor()  # the importing process's secret environment values, read once

    def run(self) -> None:
        entries = self._scan()
        order = _lineage_order(entries, self.report)
        total = len(order)
        for n, (rec, key) in enumerate(order, 1):
            try:
                self._commit_one(rec, key)
            except _UNSTORABLE as exc:  # this checkpoint's data (NaN, too deep, ...): skip it, import the rest
                if isinstance(exc, (DecodeError, IntegrityError)):  # the store's own damage: not this entry's
                    raise
                self._problem(rec, "skipped", "cannot be stored: " + " ".join(str(exc).split())[:200])
            self.tick("committing", n, total)
        tips = self.store.branches()
        present = {cid for cid, _ in self.report.present}  # branches written to, or holding what was there
        touched = {b for _, b in self.placed.values()} | {self._target(r) for r, _ in order if r.checkpoint_id in present}
        for branch in sorted(touched):
            if branch in tips:
                self.report.branches[branch] = tips[branch]

    def _target(self, rec: CheckpointRecord) -> str:
        return self.branch if self.branch is not None else self.prefix + rec.branch

    def _scan(self) -> dict[str, tuple[CheckpointRecord, tuple[str, int, str]]]:
        """Parse every record once: drop damaged ones and duplicates, compute each one's order key."""
        entries: dict[str, tuple[CheckpointRecord, tuple[str, int, str]]] = {}
        total = len(self.src.records)
        for n, rec in enumerate(self.src.records, 1):
            self.tick("reading", n, total)
            try:
                cp = self.src.load(rec)
                refuse_shape_key(cp.value)
            except DamagedCheckpoint as exc:
                self._problem(rec, "skipped", str(exc))
                continue
            if not self._branch_ok(rec):
                continue
            if not _TIME_NS_MIN <= _time_ns(rec.created_at) <= _TIME_NS_MAX:
                self._problem(rec, "skipped", f"its date {rec.created_at} is outside what the store records "
                                              "(1677-09-21 to 2262-04-11 UTC, 64-bit nanoseconds)")
                continue
            if rec.checkpoint_id in entries:
                first = entries[rec.checkpoint_id][0]
                first_cp = self.cache.get(first.checkpoint_id) or self.src.load(first)
                # Keep the copy on the branch its data records (a file copied to another folder is the dup).
                if first_cp.value.get("branch") == first.branch or cp.value.get("branch") != rec.branch:
                    self._duplicate(rec, first, first_cp.value == cp.value)
                    continue
                self._duplicate(first, rec, first_cp.value == cp.value)
                self.cache.pop(first.checkpoint_id, None)
            events = cp.value.get("event_record")
            nodes = events.get("nodes") if isinstance(events, dict) else None
            key = (rec.created_at, len(nodes) if isinstance(nodes, (dict, list)) else 0, rec.checkpoint_id)
            entries[rec.checkpoint_id] = (rec, key)
            if self.cached_bytes + rec.size <= CACHE_BUDGET_BYTES:
                self.cache[rec.checkpoint_id] = cp
                self.cached_bytes += rec.size
        return entries

    def _duplicate(self, dropped: CheckpointRecord, kept: CheckpointRecord, same: bool) -> None:
        self._problem(dropped, "skipped", f"duplicate of checkpoint id in {kept.source}"
                      + ("" if same else f" with different data ({kept.branch!r} kept)"))

    def _branch_ok(self, rec: CheckpointRecord) -> bool:
        try:
            refnames.check_branch(self._target(rec))
        except BadRefName as exc:
            self._problem(rec, "skipped", f"branch {self._target(rec)!r} is not a valid name: {exc}")
            return False
        return True

    def _load(self, rec: CheckpointRecord) -> Checkpoint:
        cp = self.cache.pop(rec.checkpoint_id, None)
        return cp if cp is not None else self.src.load(rec)

    def _problem(self, rec: CheckpointRecord, kind: str, reason: str) -> None:
        self.report.problems.append(Problem(rec.source, rec.checkpoint_id, kind, reason))  # type: ignore[arg-type]

    def _commit_one(self, rec: CheckpointRecord, key: tuple[str, int, str]) -> None:
        cid = rec.checkpoint_id
        existing = lookup_alias(self.store, cid)
        if existing is not None:
            self.commit_of[cid] = existing
            self.run_of[cid] = self.store.info(existing).run_id
            self.report.present.append((cid, existing))
            return
        try:
            cp = self._load(rec)
            refuse_shape_key(cp.value)
        except DamagedCheckpoint as exc:  # changed on disk since the scan
            self._problem(rec, "skipped", str(exc))
            return
        crewai_meta: dict[str, Any] = {}
        parents: list[str] = []
        run_id = _run_id(cid)
        if rec.parent_id is not None:
            parent = self.commit_of.get(rec.parent_id) or lookup_alias(self.store, rec.parent_id)
            if parent is None:
                crewai_meta["parent_id"] = rec.parent_id
                self._problem(rec, "orphan", f"parent {rec.parent_id} is not in the source or the store; "
                                             "imported as a root commit")
            else:
                parents = [parent]
                run_id = self.run_of.get(rec.parent_id) or self.store.info(parent).run_id
        target = self._placement(parents[0] if parents else None, self._target(rec))
        if parents and target != self._target(rec) and self.moved.get(parents[0], ("", ""))[1] != target:
            run_id = _run_id(cid)  # a new continuation: its own run, so the old tip keeps its run ref
        if target != self._target(rec) or (self.branch is not None and rec.branch != self.branch):
            crewai_meta["branch"] = rec.branch
        if layout.timestamp_of(cid) != rec.created_at:
            crewai_meta["created_at"] = rec.created_at
        if cp.text is not None and layout.detect_style(cp.value, cp.text) == layout.JSON_STYLE_COMPACT:
            crewai_meta["json_style"] = layout.JSON_STYLE_COMPACT
        before = self.redactor.redacted
        value = self.redactor.apply(cp.value, cp.text)  # after the style check, which compares with the text
        trigger = value.get("trigger")
        commit_id = self.store.commit(
            value, branch=target, parents=parents,
            meta={"crewai": crewai_meta} if crewai_meta else None, run_id=run_id,
            trigger=trigger if isinstance(trigger, str) else None,
            time_ns=_time_ns(rec.created_at), alias=cid, profile=CREWAI,
        )
        self.commit_of[cid] = commit_id
        self.run_of[cid] = run_id
        if target != self._target(rec):
            self.moved[commit_id] = (self._target(rec), target)
        self.placed[commit_id] = (self._target(rec), target)
        if not parents:
            self.root_branch.setdefault(self._target(rec), target)
        self.report.imported.append((cid, commit_id))
        if self.redactor.redacted > before:
            self.report.redacted.append((cid, self.redactor.redacted - before))

    def _placement(self, parent: str | None, wanted: str) -> str:
        """The branch a commit that wants ``wanted`` goes on, decided where a lineage enters the import and
        then kept: a child of a commit made by this import for ``wanted`` goes where that parent went (so
        CrewAI's own forks within one import stay on one branch, whichever the tips); a child of an older
        commit whose branch tip is a tip from before the import and not its parent goes on a new
        ``<wanted>-from-<parent[:8]>``; a root goes where this import's first root for ``wanted`` went, which
        is ``<wanted>-2`` when moving ``wanted`` would leave a tip from before the import without any name."""
        tips = self.store.branches()
        if parent is None:
            if wanted in self.root_branch:
                return self.root_branch[wanted]
            tip = tips.get(wanted)
            if tip in self.before and sum(t == tip for t in tips.values()) == 1 and tip not in self.store.runs().values():
                return free_branch(self.store, wanted)
            return wanted
        placed = self.placed.get(parent)
        if placed is not None and placed[0] == wanted:
            return placed[1]
        tip = tips.get(wanted)
        if tip is not None and tip != parent and tip in self.before:
            return continuation_branch(self.store, parent, wanted)
        return wanted


def _run_id(checkpoint_id: str) -> str:
    """The run (lineage) id for a lineage starting at ``checkpoint_id``: the id itself when it is a valid ref
    name (every id CrewAI makes), else a digest of it, so a hostile id (``../x``) cannot abort the import."""
    try:
        return refnames.check_branch(checkpoint_id)
    except BadRefName:
        return "crewai-" + hashlib.blake2b(checkpoint_id.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


_TIME_NS_MIN, _TIME_NS_MAX = -(1 << 63), (1 << 63) - 1
_UNSTORABLE = (ValueError, TypeError, OverflowError, RecursionError)
"""What Store.commit raises for a document it cannot hold (NaN, Infinity, nesting, sizes)."""


def _time_ns(ts: str) -> int:
    try:
        return layout.ts_to_ns(ts)
    except (ValueError, OverflowError):
        return 0


def _lineage_order(entries: dict[str, tuple[CheckpointRecord, tuple[str, int, str]]],
                   report: ImportReport) -> list[tuple[CheckpointRecord, tuple[str, int, str]]]:
    """Parents before children; among the ready ones, the smallest (timestamp, events, id) first.

    A lineage cycle (impossible for CrewAI, possible in edited data) is broken at its smallest key; that
    checkpoint is then imported as an orphan.
    """
    children: dict[str, list[str]] = {}
    waiting: dict[str, int] = {}
    ready: list[tuple[tuple[str, int, str], str]] = []
    for cid, (rec, key) in entries.items():
        if rec.parent_id is not None and rec.parent_id in entries and rec.parent_id != cid:
            children.setdefault(rec.parent_id, []).append(cid)
            waiting[cid] = 1
        else:
            heapq.heappush(ready, (key, cid))
    order: list[tuple[CheckpointRecord, tuple[str, int, str]]] = []
    while len(order) < len(entries):
        if not ready:  # only cycles remain
            key, cid = min((entries[c][1], c) for c, w in waiting.items() if w)
            rec = entries[cid][0]
            report.problems.append(Problem(rec.source, cid, "note", "lineage cycle broken here"))
            entries[cid] = (dataclasses.replace(rec, parent_id=None), key)
            waiting[cid] = 0
            heapq.heappush(ready, (key, cid))
        key, cid = heapq.heappop(ready)
        order.append(entries[cid])
        for child in children.get(cid, ()):
            if waiting.get(child):
                waiting[child] = 0
                heapq.heappush(ready, (entries[child][1], child))
    return order


def lookup_alias(store: Store, alias: str) -> str | None:
    """The commit a CrewAI checkpoint id names in ``store``, or None.

    Exact alias first; else, for an id of the shape export gives commits without an alias
    (``<UTC second>_<8 hex of the commit id>``), the commit with that id prefix and that second, so a view
    exported from the store (and checkpoints CrewAI wrote on top of it) import back onto the same commits.
    """
    fn = getattr(store, "lookup_alias", None)
    if fn is not None:
        found = fn(alias)
    else:
        raw = store.backend.alias_get(alias)
        found = raw.hex() if raw else None
    if found is not None:
        return found  # type: ignore[no-any-return]
    m = layout.CHECKPOINT_ID_RE.fullmatch(alias)
    if m is None:
        return None
    try:
        info = store.info(m.group(2))
    except CkptError:
        return None
    if info.id.startswith(m.group(2)) and layout.ns_to_ts(info.time_ns) == m.group(1) and info.alias is None:
        return info.id
    return None


class _progress_reporter:
    """Context manager giving a ``tick(phase, done, total)`` function (rich bar, callback, or no-op)."""

    def __init__(self, progress: bool | ProgressFn | None, total: int) -> None:
        self.callback: ProgressFn | None = progress if callable(progress) else None
        show = progress if isinstance(progress, bool) else (progress is None and total >= PROGRESS_MIN
                                                             and sys.stderr.isatty())
        self.bar: Any = None
        self.tasks: dict[str, Any] = {}
        if show and self.callback is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=True)

    def __enter__(self) -> ProgressFn:
        if self.bar is not None:
            self.bar.start()
        return self.tick

    def tick(self, phase: str, done: int, total: int) -> None:
        if self.callback is not None:
            self.callback(phase, done, total)
        if self.bar is not None:
            if phase not in self.tasks:
                self.tasks[phase] = self.bar.add_task(phase, total=total)
            self.bar.update(self.tasks[phase], completed=done)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


"""The checkpoint browser: a Textual app over a crewckpt store (``ckpt`` / ``ckpt tui``).

Left: the tree of lines (runs and branches; forks nested under the checkpoint they forked from), built from
the commit index only (:mod:`crewckpt.tui.model`) and filled lazily, :data:`PAGE` checkpoints at a time.
Right: tabs for the highlighted checkpoint (Overview, Tasks, Inputs, Diff, Events); its document is read in a
worker thread when the cursor rests on it. Task outputs and kickoff inputs are edited in place; Fork and
Resume end the app with a :class:`~crewckpt.tui.runner.RunPlan` that :func:`crewckpt.tui.run` carries out in
the terminal. Nothing here imports crewai.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from typing import Any, ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import (
    Button,
    Footer,
    Header,
    Input,
    Label,
    Static,
    TabbedContent,
    TabPane,
    TextArea,
    Tree,
)
from textual.widgets.tree import TreeNode
from textual.worker import get_current_worker

from crewckpt.errors import CkptError
from crewckpt.history.commits import CommitInfo
from crewckpt.history.store import Store
from crewckpt.tui import details
from crewckpt.tui.model import History, build_history, entity_kind, line_title, progress_bar, relative_time
from crewckpt.tui.runner import INSTALL_HINT, RunPlan, crewai_available
from crewckpt.views import diff as diff_mod
from crewckpt.views import diff_render
from crewckpt.views.document import crew_summary

PAGE = 100
"""Checkpoints added to a line's node per page (a '... older' node loads the next page)."""

DOC_CACHE = 8
"""Decoded documents kept in memory (the highlighted one, its diff base, recent ones)."""

SETTLE_S = 0.04
"""Seconds the cursor must rest on a checkpoint before its document is read (holding an arrow key scrolls
without decoding every checkpoint it passes)."""

RELABEL_S = 60.0
"""Seconds between redraws of the tree's relative times."""

POLL_S = 2.0
"""Seconds between checks of the store's branch refs (to say that new checkpoints arrived)."""

MAX_EVENT_ROWS = 300
MAX_DIFF_LINES = 3000

_DIFF_STYLE = {"header": "bold", "added": "green", "removed": "red", "changed": "yellow", "hunk": "cyan",
               "meta": "dim", "plain": ""}
_STATUS_MARK = {"completed": ("✓", "green"), "running": ("▶", "yellow"), "pending": ("○", "dim")}
TABS = ("overview", "tasks", "inputs", "diff", "events")


class Edits:
    """Pending edits of one checkpoint: input text per key, output text per (entity, task) index."""

    def __init__(self) -> None:
        self.inputs: dict[str, str] = {}
        self.outputs: dict[tuple[int, int], str] = {}

    def __bool__(self) -> bool:
        return bool(self.inputs or self.outputs)

    def count(self) -> int:
        return len(self.inputs) + len(self.outputs)


class GoTo(ModalScreen[str | None]):
    """Ask for a revision (id or prefix, branch, ``main~2``, ``exp@{1}``, ``HEAD``, a CrewAI checkpoint id) and
    dismiss with the full commit id it names; errors (unknown, ambiguous, pruned) show under the field."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, store: Store, live: set[str]) -> None:
        super().__init__()
        self._store, self._live = store, live

    def compose(self) -> ComposeResult:
        with Vertical(id="goto"):
            yield Label("Go to revision (id, branch, main~2, HEAD, CrewAI checkpoint id)")
            yield Input(placeholder="main~2", id="goto-rev")
            yield Static("", id="goto-error")

    def on_mount(self) -> None:
        self.query_one("#goto-rev", Input).focus()

    @on(Input.Submitted, "#goto-rev")
    def _submitted(self, event: Input.Submitted) -> None:
        rev = event.value.strip()
        try:
            cid = self._store.resolve(rev) if rev else None
        except CkptError as exc:
            self.query_one("#goto-error", Static).update(Text(str(exc), style="bold red"))
            return
        if cid is None:
            return
        if cid not in self._live:
            self.query_one("#goto-error", Static).update(Text(
                f"{cid[:12]} is not in the tree (pruned, or written after the last refresh: press r)",
                style="bold red"))
            return
        self.dismiss(cid)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmRun(ModalScreen[str | None]):
    """Confirm panel for Fork (with the new branch name, validated) and Resume. Dismisses with the branch
    name (Fork), ``""`` (Resume) or None (cancelled)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, lines: list[Text], *, branch: str | None, taken: set[str],
                 ok_label: str) -> None:
        super().__init__()
        self._title, self._lines, self._branch, self._taken, self._ok = title, lines, branch, taken, ok_label

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(Text(self._title, style="bold"), id="confirm-title")
            yield Static(Group(*self._lines) if self._lines else "", id="confirm-body")
            if self._branch is not None:
                yield Label("New branch name")
                yield Input(self._branch, id="confirm-branch")
            yield Static("", id="confirm-error")
            with Horizontal(id="confirm-buttons"):
                yield Button(self._ok, variant="primary", id="confirm-ok")
                yield Button("Cancel", id="confirm-cancel")

    def on_mount(self) -> None:
        self.query_one("#confirm-branch" if self._branch is not None else "#confirm-ok").focus()

    def _error(self) -> str | None:
        if self._branch is None:
            return None
        from crewckpt.errors import BadRefName
        from crewckpt.history.refnames import check_branch

        name = self.query_one("#confirm-branch", Input).value.strip()
        try:
            name = check_branch(name)
        except BadRefName as exc:
            return str(exc)
        if name in self._taken:
            return f"branch {name!r} already exists; choose another name"
        return None

    def action_confirm(self) -> None:
        error = self._error()
        if error:
            self.query_one("#confirm-error", Static).update(Text(error, style="bold red"))
            return
        self.dismiss(self.query_one("#confirm-branch", Input).value.strip() if self._branch is not None else "")

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted, "#confirm-branch")
    def _submitted(self) -> None:
        self.action_confirm()

    @on(Input.Changed, "#confirm-branch")
    def _changed(self) -> None:
        error = self._error()
        self.query_one("#confirm-error", Static).update(Text(error or "", style="bold red"))

    @on(Button.Pressed, "#confirm-ok")
    def _ok_pressed(self) -> None:
        self.action_confirm()

    @on(Button.Pressed, "#confirm-cancel")
    def _cancel_pressed(self) -> None:
        self.dismiss(None)


def escape_terminal_controls() -> None:
    """Make every rich/Textual text in this process show terminal-active characters escaped (``\\x1b``,
    ``\\u202e``), as the CLI does (crewckpt.cli.fmt.safe_text): names, triggers, task outputs and events come
    from a store someone else may have written, and both libraries pass ESC through to the terminal (they
    strip only BEL, BS, VT, FF and CR). Done once, by updating their control-code translation tables, so no
    widget can be missed."""
    from rich import control
    from textual import content

    from crewckpt.cli.fmt import control_escape_table

    table = control_escape_table()
    for t in (control._CONTROL_STRIP_TRANSLATE, content._CONTROL_STRIP_TRANSLATE):
        t.update(table)  # type: ignore[arg-type]


class CheckpointBrowser(App[RunPlan | None]):
    """Browse a crewckpt store; returns a :class:`RunPlan` (Fork or Resume confirmed) or None (quit).

    Args:
        store: an open :class:`crewckpt.Store` (the caller closes it).
        now_ns: fixed 'now' for relative times (screenshots and tests); None = the clock.
    """

    TITLE = "crewckpt"
    CSS = """
    #main { height: 1fr; }
    #tree { width: 56%; border: round $primary-darken-2; }
    #tree:focus-within { border: round $accent; }
    #detail { width: 1fr; }
    #status { height: 1; width: 1fr; padding: 0 1; color: $text-muted; }
    .pane { padding: 0 1; }
    .section { margin: 1 0 0 0; text-style: bold; }
    .task-label { margin: 1 0 0 0; }
    .task-desc { color: $text-muted; padding: 0 0 0 4; }
    .task-note { color: $warning; padding: 0 0 0 4; }
    .output { height: auto; max-height: 10; margin: 0 0 0 4; }
    .output.edited { border: round $warning; }
    .input-row { height: 3; }
    .input-row Label { width: 24; padding: 1 1 0 0; text-style: bold; }
    .input-row Input { width: 1fr; }
    .input-row Input.edited { border: tall $warning; }
    .empty { color: $text-muted; padding: 1; }
    ConfirmRun, GoTo { align: center middle; }
    #goto { width: 84; height: auto; border: thick $accent; background: $surface; padding: 1 2; }
    #goto-error { height: auto; }
    #confirm { width: 84; height: auto; max-height: 90%; border: thick $accent; background: $surface;
               padding: 1 2; }
    #confirm-body { margin: 1 0; }
    #confirm-error { height: auto; margin: 0 0 1 0; }
    #confirm-buttons { height: 3; align-horizontal: right; }
    #confirm-buttons Button { margin: 0 0 0 2; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("r", "refresh", "Refresh"),
        Binding("f", "fork", "Fork"),
        Binding("e", "resume", "Resume"),
        Binding("c", "copy_id", "Copy id"),
        Binding("m", "mark", "Mark for diff"),
        Binding("x", "discard", "Discard edits"),
        Binding("g", "goto", "Go to"),
        Binding("escape", "focus_tree", "Tree", show=False),
        *[Binding(str(i + 1), f"tab('{t}')", t.title(), show=False) for i, t in enumerate(TABS)],
    ]

    def __init__(self, store: Store, *, now_ns: int | None = None) -> None:
        super().__init__()
        escape_terminal_controls()
        self.store = store
        self.now_ns = now_ns
        self.history: History = build_history([])
        self.branches: dict[str, str] = {}
        self.selected: str | None = None
        self.marked: str | None = None
        self.edits: dict[str, Edits] = {}
        self._docs: OrderedDict[str, Any] = OrderedDict()
        self._docs_lock = threading.Lock()
        self._stale_noted = False
        self._quit_armed = False
        self._labelled_at = time.monotonic()
        self._line_nodes: dict[int, TreeNode[Any]] = {}
        self._commit_nodes: dict[str, TreeNode[Any]] = {}
        self._window: dict[int, tuple[int, int]] = {}  # line -> loaded display positions [lo, hi)
        self._newer_nodes: dict[int, TreeNode[Any]] = {}
        self._older_nodes: dict[int, TreeNode[Any]] = {}
        self._forks_filled: set[str] = set()
        self._shown: str | None = None  # commit whose document the tabs show
        self._diff_for: tuple[str, str | None] | None = None
        self._task_originals: dict[str, str] = {}
        self._input_keys: dict[str, tuple[str, Any]] = {}
        self._task_notes: dict[tuple[int, int], Static] = {}
        self._rendered: dict[str, str] = {}  # tab -> commit it shows
        self._task_status: dict[tuple[int, int], str] = {}
        self.load_seconds: float = 0.0

    # -- layout ----------------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            tree: Tree[Any] = Tree("checkpoints", id="tree")
            tree.show_root = False
            tree.guide_depth = 2
            yield tree
            with Vertical(id="detail"):
                yield Static("", id="status")
                with TabbedContent(id="tabs", initial="overview"):
                    with TabPane("Overview", id="overview"):
                        yield VerticalScroll(Static("", id="overview-body"), classes="pane")
                    with TabPane("Tasks", id="tasks"):
                        yield VerticalScroll(id="tasks-body", classes="pane")
                    with TabPane("Inputs", id="inputs"):
                        yield VerticalScroll(id="inputs-body", classes="pane")
                    with TabPane("Diff", id="diff"):
                        yield VerticalScroll(Static("", id="diff-body"), classes="pane")
                    with TabPane("Events", id="events"):
                        yield VerticalScroll(Static("", id="events-body"), classes="pane")
        yield Footer()

    def on_mount(self) -> None:
        self._render_lock = asyncio.Lock()
        self.sub_title = str(self.store.path or self.store.location or "memory store")
        self.reload()
        self.query_one("#tree", Tree).focus()
        self.set_interval(POLL_S, self._poll)

    def _poll(self) -> None:
        """Say (once) when the store has moved on since the tree was built; r rebuilds it. The tree is not
        rebuilt by itself: it would move under the cursor while you read. Relative times are redrawn every
        :data:`RELABEL_S`."""
        if time.monotonic() - self._labelled_at >= RELABEL_S:
            self._relabel_all()
        if self._stale_noted:
            return
        try:
            branches = self.store.branches()
        except CkptError:
            return
        if branches != self.branches:
            self._stale_noted = True
            self.notify("the store has new checkpoints: press r to refresh", timeout=6)

    # -- tree ------------------------------------------------------------------------------------------------

    def reload(self, keep: str | None = None) -> None:
        """Re-read the commit index and rebuild the tree; put the cursor on ``keep`` (else the newest)."""
        start = time.perf_counter()
        self.branches = self.store.branches()
        self._stale_noted = False
        self.history = build_history(self.store.list(), self.branches)
        tree = self.query_one("#tree", Tree)
        tree.clear()
        self._line_nodes.clear()
        self._commit_nodes.clear()
        self._window.clear()
        self._newer_nodes.clear()
        self._older_nodes.clear()
        self._forks_filled.clear()
        self._docs.clear()
        self._diff_for = None
        self._shown = None
        self._rendered.clear()
        for li in self.history.top:
            self._add_line_node(tree.root, li)
        target = keep if keep in self.history.by_id else None
        if target is None:
            newest = self.history.newest()
            target = newest.id if newest else None
        if target is not None:
            self.reveal(target)
        else:
            self._set_status("no checkpoints in this store yet")
            self.query_one("#overview-body", Static).update(Text(
                "This store has no checkpoints. Run a crew with crewckpt.crewai.CheckpointConfig, or "
                "`ckpt import PATH` CrewAI checkpoints.", style="dim"))
        self.load_seconds = time.perf_counter() - start

    def _now(self) -> int:
        return self.now_ns if self.now_ns is not None else time.time_ns()

    def _line_label(self, li: int) -> Text:
        line = self.history.lines[li]
        nested = line.fork_point is not None
        text = Text()
        text.append("↳ " if nested else "● ", style="magenta" if nested else "cyan")
        text.append(line.branch, style="bold magenta" if nested else "bold cyan")
        text.append(f"  {line_title(line)}", style="bold")
        n = len(line.commits)
        text.append(f"  {n} checkpoint{'s' if n != 1 else ''}", style="dim")
        text.append(f"  {relative_time(line.last.time_ns, self._now())}", style="dim")
        if not nested and line.first.parents:
            text.append("  (parent pruned)", style="dim italic")
        return text

    def _commit_label(self, c: CommitInfo) -> Text:
        s = crew_summary(c.summary)
        text = Text()
        text.append("◆ " if c.id == self.marked else "  ", style="bold magenta")
        text.append(c.id[:8], style="yellow")
        text.append(f" {relative_time(c.time_ns, self._now()):>8}", style="dim")
        trigger = c.trigger or "manual"
        text.append(f"  {trigger[:25]:<25}", style="bold" if trigger in ("fork", "manual") else "")
        bar = progress_bar(s.tasks_done, s.tasks_total)
        if bar:
            text.append(f"  {bar}", style="green" if s.tasks_done == s.tasks_total else "cyan")
        tips = [b for b, t in self.branches.items() if t == c.id]
        if tips:
            text.append(f"  ({', '.join(tips)})", style="bold cyan")
        if self.edits.get(c.id):
            text.append("  ✎ edited", style="bold yellow")
        return text

    def _add_line_node(self, parent: TreeNode[Any], li: int) -> TreeNode[Any]:
        node = parent.add(self._line_label(li), data=("line", li), allow_expand=True)
        self._line_nodes[li] = node
        return node

    def _fill_line(self, li: int, upto: int = 0) -> None:
        """Make display position ``upto`` (0 = newest) of line ``li`` exist in the tree.

        A line shows a window of its checkpoints, newest first: the first fill loads the PAGE-aligned page
        holding ``upto``; later fills extend the window up or down to reach it. '… newer' / '… older'
        placeholders stand for the rest (enter loads the next page), so revealing a checkpoint deep in a
        long line costs one page, not every node above it.
        """
        n = len(self.history.lines[li].commits)
        upto = max(0, min(upto, n - 1))
        if li not in self._window:
            lo = upto // PAGE * PAGE
            self._window[li] = (lo, lo)
        lo, hi = self._window[li]
        if upto >= hi:
            self._add_commits(li, hi, max(upto + 1, min(n, hi + PAGE)), before=None)
        elif upto < lo:
            new_lo = min(upto, max(0, lo - PAGE))
            self._add_commits(li, new_lo, lo, before=self._node_at(li, lo))
        self._placeholders(li)

    def _node_at(self, li: int, pos: int) -> TreeNode[Any]:
        line = self.history.lines[li]
        return self._commit_nodes[line.commits[len(line.commits) - 1 - pos].id]

    def _add_commits(self, li: int, start: int, end: int, before: TreeNode[Any] | None) -> None:
        """Add display positions [start, end) of line ``li`` (before ``before``, else at the end)."""
        line = self.history.lines[li]
        node = self._line_nodes[li]
        n = len(line.commits)
        if before is None:  # growing downward: the '… older' placeholder moves below the new nodes
            older = self._older_nodes.pop(li, None)
            if older is not None:
                older.remove()
        for i in range(start, end):
            c = line.commits[n - 1 - i]
            fork = c.id in self.history.forks_at
            self._commit_nodes[c.id] = node.add(self._commit_label(c), data=("commit", c.id), before=before,
                                                allow_expand=fork)
        lo, hi = self._window[li]
        self._window[li] = (min(lo, start), max(hi, end))

    def _placeholders(self, li: int) -> None:
        lo, hi = self._window[li]
        n = len(self.history.lines[li].commits)
        node = self._line_nodes[li]
        newer = self._newer_nodes.pop(li, None)
        if newer is not None:
            newer.remove()
        if lo > 0:
            self._newer_nodes[li] = node.add(
                Text(f"  … {lo} newer checkpoints (enter: load {min(PAGE, lo)} more)", style="dim italic"),
                data=("newer", li), before=self._node_at(li, lo), allow_expand=False)
        if hi < n and li not in self._older_nodes:
            self._older_nodes[li] = node.add_leaf(
                Text(f"  … {n - hi} older checkpoints (enter: load {min(PAGE, n - hi)} more)",
                     style="dim italic"), data=("older", li))

    def _fill_forks(self, cid: str) -> None:
        if cid in self._forks_filled:
            return
        self._forks_filled.add(cid)
        for li in self.history.forks_at.get(cid, []):
            self._add_line_node(self._commit_nodes[cid], li)

    def reveal(self, cid: str) -> None:
        """Load, expand and scroll the tree so that ``cid``'s node exists, then put the cursor on it."""
        h = self.history
        path = h.path_to(cid)
        for k, li in enumerate(path):
            line = h.lines[li]
            if k > 0:
                fp = line.fork_point
                assert fp is not None
                self._fill_forks(fp)
                self._commit_nodes[fp].expand()
            target = path[k + 1] if k + 1 < len(path) else None
            goal = h.lines[target].fork_point if target is not None else cid
            self._fill_line(li, len(line.commits) - 1 - h.pos_of[goal or cid])
            self._line_nodes[li].expand()
        self.move_cursor(self._commit_nodes[cid])
        self._select(cid)

    def move_cursor(self, node: TreeNode[Any]) -> None:
        """Put the tree's cursor on ``node`` (rebuilding the tree's lines first, so a node added in this same
        step has its line number)."""
        tree = self.query_one("#tree", Tree)
        tree._tree_lines  # noqa: B018 - the property rebuilds stale line numbers
        tree.move_cursor(node)

    @on(Tree.NodeExpanded, "#tree")
    def _expanded(self, event: Tree.NodeExpanded[Any]) -> None:
        if event.node.data is None:
            return
        kind, key = event.node.data[0], event.node.data[1]
        if kind == "line" and key not in self._window:  # first expansion: the newest page
            self._fill_line(key)
        elif kind == "commit":
            self._fill_forks(key)

    @on(Tree.NodeHighlighted, "#tree")
    def _highlighted(self, event: Tree.NodeHighlighted[Any]) -> None:
        data = event.node.data
        if data and data[0] == "commit":
            self._select(data[1])

    @on(Tree.NodeSelected, "#tree")
    def _selected(self, event: Tree.NodeSelected[Any]) -> None:
        data = event.node.data
        if data and data[0] in ("newer", "older"):
            li = data[1]
            lo, hi = self._window[li]
            pos = lo - 1 if data[0] == "newer" else hi  # the checkpoint next to the placeholder
            self._fill_line(li, pos)
            cid = self.history.lines[li].commits[len(self.history.lines[li].commits) - 1 - pos].id
            self.move_cursor(self._commit_nodes[cid])  # may be the placeholder's line: no highlight event
            self._select(cid)

    def _relabel_all(self) -> None:
        """Redraw every loaded node's label (relative times move on)."""
        self._labelled_at = time.monotonic()
        for li, node in self._line_nodes.items():
            node.set_label(self._line_label(li))
        for cid in self._commit_nodes:
            self._relabel(cid)

    def _relabel(self, cid: str | None) -> None:
        if cid is not None and cid in self._commit_nodes and cid in self.history.by_id:
            self._commit_nodes[cid].set_label(self._commit_label(self.history.by_id[cid]))

    # -- detail ----------------------------------------------------------------------------------------------

    def _select(self, cid: str) -> None:
        if cid == self.selected and self._shown == cid:
            return
        self.selected = cid
        self._set_status()
        self._load(cid)

    def _set_status(self, text: str | None = None) -> None:
        status = self.query_one("#status", Static)
        if text is not None:
            status.update(text, layout=False)  # one fixed line: no screen reflow per key
            return
        cid = self.selected
        out = Text()
        if cid is None:
            status.update(out, layout=False)
            return
        c = self.history.by_id[cid]
        out.append(cid[:12], style="bold yellow")
        out.append(f"  {c.branch}", style="cyan")
        out.append(f"  {self.history.count} checkpoints, {len(self.history.lines)} lines", style="dim")
        if self.marked:
            out.append(f"  diff base ◆ {self.marked[:8]}", style="magenta")
        edits = self.edits.get(cid)
        if edits:
            out.append(f"  ✎ {edits.count()} edit(s) · f fork · x discard", style="bold yellow")
        status.update(out, layout=False)

    def _cached(self, cid: str) -> Any | None:
        with self._docs_lock:  # the detail and diff workers read in threads
            if cid in self._docs:
                self._docs.move_to_end(cid)
                return self._docs[cid]
        return None

    def _read(self, cid: str) -> Any:
        doc = self._cached(cid)
        if doc is None:
            doc = self.store.read(cid)  # verifies every object's hash; CkptError on damage
            with self._docs_lock:
                self._docs[cid] = doc
                while len(self._docs) > DOC_CACHE:
                    self._docs.popitem(last=False)
        return doc

    @work(thread=True, exclusive=True, group="detail")
    def _load(self, cid: str) -> None:
        worker = get_current_worker()
        if self._cached(cid) is None:
            time.sleep(SETTLE_S)
            if worker.is_cancelled or self.selected != cid:
                return
        try:
            doc = self._read(cid)
        except CkptError as exc:
            self.call_from_thread(self._show_error, cid, str(exc))
            return
        if not worker.is_cancelled and self.selected == cid:
            self.call_from_thread(self._show, cid, doc)  # type: ignore[arg-type]  # awaits the coroutine

    def _show_error(self, cid: str, message: str) -> None:
        self._shown = cid
        self._rendered.clear()
        self.query_one("#overview-body", Static).update(Text(f"cannot read {cid[:12]}: {message}", style="red"))

    async def _show(self, cid: str, doc: Any) -> None:
        async with self._render_lock:  # one render at a time: widget ids are reused between checkpoints
            if self.selected == cid:
                await self._show_now(cid, doc)

    async def _show_now(self, cid: str, doc: Any) -> None:
        self._shown = cid
        self._diff_for = None
        self._rendered.clear()
        await self._render_tab(self.query_one("#tabs", TabbedContent).active)

    async def _render_tab(self, tab: str) -> None:
        """Fill one tab for the shown checkpoint, once (only the visible tab is built: moving the cursor
        through the tree never builds editors for tabs nobody looks at)."""
        cid = self._shown
        doc = self._cached(cid) if cid is not None else None
        if cid is None or doc is None or self._rendered.get(tab) == cid:
            return
        self._rendered[tab] = cid
        if tab == "overview":
            self.query_one("#overview-body", Static).update(self._overview(cid, doc))
        elif tab == "events":
            self.query_one("#events-body", Static).update(self._events(doc))
        elif tab == "tasks":
            await self._render_tasks(cid, doc)
        elif tab == "inputs":
            await self._render_inputs(cid, doc)
        elif tab == "diff":
            self._start_diff()

    async def _render_tab_locked(self, tab: str) -> None:
        async with self._render_lock:
            await self._render_tab(tab)

    def _overview(self, cid: str, doc: Any) -> Group:
        c = self.history.by_id[cid]
        s = crew_summary(c.summary)
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        local = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c.time_ns / 1e9))
        grid.add_row("id", Text(c.id, style="yellow"))
        grid.add_row("branch", Text(c.branch, style="cyan"))
        tips = [b for b, t in self.branches.items() if t == c.id]
        if tips:
            grid.add_row("tip of", ", ".join(tips))
        grid.add_row("trigger", c.trigger or "manual")
        grid.add_row("time", f"{local}  ({relative_time(c.time_ns, self._now())})")
        grid.add_row("parent", ", ".join(p[:12] for p in c.parents) or "(root)")
        kids = self.history.children.get(cid, [])
        if kids:
            kid_text = ", ".join(f"{k[:8]} ({self.history.by_id[k].branch})" for k in kids[:4])
            grid.add_row("children", kid_text + (f" +{len(kids) - 4}" if len(kids) > 4 else ""))
        grid.add_row("run", c.run_id)
        if c.alias:
            grid.add_row("CrewAI id", c.alias)
        if isinstance(doc, dict) and doc.get("crewai_version"):
            grid.add_row("crewai", str(doc["crewai_version"]))
        grid.add_row("size", f"{diff_render.human_bytes(s.logical_bytes)} as JSON")
        grid.add_row("events", str(s.event_count))
        if s.tasks_total:
            grid.add_row("tasks", Text(progress_bar(s.tasks_done, s.tasks_total, 20),
                                       style="green" if s.tasks_done == s.tasks_total else "cyan"))
        if c.meta:
            import orjson

            grid.add_row("meta", orjson.dumps(c.meta).decode()[:300])
        parts: list[Any] = [grid]
        ents = details.main_entities(doc)
        if ents:
            parts.append(Text("\nEntities", style="bold underline"))
            for _, e in ents:
                line = Text(f"  {diff_mod.entity_label(e)}", style="bold")
                tasks = [t for t in e.get("tasks") or [] if isinstance(t, dict)]
                if tasks:
                    done = sum(1 for t in tasks if t.get("output") is not None)
                    line.append(f"  {progress_bar(done, len(tasks), 12)}", style="cyan")
                agents = [a.get("role") for a in e.get("agents") or [] if isinstance(a, dict)]
                if agents:
                    line.append(f"   agents: {', '.join(str(a) for a in agents[:5])}", style="dim")
                methods = e.get("checkpoint_completed_methods")
                if e.get("entity_type") == "flow" and methods:
                    line.append(f"  methods done: {', '.join(map(str, methods))[:120]}", style="dim")
                parts.append(line)
        elif not details.entities(doc):
            parts.append(Text("\nNot a CrewAI checkpoint: browse it with `ckpt show`.", style="dim"))
        return Group(*parts)

    def _events(self, doc: Any) -> Group:
        rows = details.events(doc)
        if not rows:
            return Group(Text("No events recorded in this checkpoint.", style="dim"))
        counts = Table(title="Events by type", title_justify="left", show_edge=False, pad_edge=False)
        counts.add_column("type")
        counts.add_column("count", justify="right")
        for kind, n in details.event_counts(rows):
            counts.add_row(kind, str(n))
        recent = Table(title=f"Newest first ({len(rows)} events)", title_justify="left", show_edge=False,
                       pad_edge=False)
        for col in ("#", "time", "type", "task", "agent"):
            recent.add_column(col, justify="right" if col == "#" else "left", no_wrap=True)
        for r in rows[:MAX_EVENT_ROWS]:
            recent.add_row(str(r.seq), r.timestamp[11:19], r.type, r.task, r.agent)
        parts: list[Any] = [counts, Text(""), recent]
        if len(rows) > MAX_EVENT_ROWS:
            parts.append(Text(f"… {len(rows) - MAX_EVENT_ROWS} older events", style="dim"))
        return Group(*parts)

    async def _render_tasks(self, cid: str, doc: Any) -> None:
        body = self.query_one("#tasks-body", VerticalScroll)
        await body.remove_children()
        self._task_originals.clear()
        self._task_notes.clear()
        self._task_status.clear()
        rows = details.tasks(doc)
        if not rows:
            await body.mount(Static("No tasks in this checkpoint (flows and agents have none).", classes="empty"))
            return
        edits = self.edits.get(cid) or Edits()
        widgets: list[Any] = []
        entity = None
        for r in rows:
            if r.entity != entity:
                entity = r.entity
                mine = [x for x in rows if x.entity == entity]
                done = sum(1 for x in mine if x.status == "completed")
                widgets.append(Static(Text.assemble((entity, "bold"), "  ",
                                                    (progress_bar(done, len(mine), 16), "cyan")),
                                      classes="section"))
            mark, style = _STATUS_MARK[r.status]
            label = Text.assemble((f"{mark} ", style), (f"{r.key[1] + 1}. {r.name}", "bold"),
                                  (f"  → {r.agent}" if r.agent else "", "dim"), (f"  {r.status}", style))
            widgets.append(Static(label, classes="task-label"))
            widgets.append(Static(Text(_clip(r.description, 300)), classes="task-desc"))
            self._task_status[r.key] = r.status
            note = Static("", classes="task-note")
            self._task_notes[r.key] = note
            widgets.append(note)
            if r.output is not None:
                wid = f"out-{r.key[0]}-{r.key[1]}"
                self._task_originals[wid] = r.output
                text = edits.outputs.get(r.key, r.output)
                area = TextArea(text, id=wid, classes="output" + (" edited" if r.key in edits.outputs else ""))
                widgets.append(area)
        await body.mount_all(widgets)
        self._update_task_notes(cid, doc)

    def _update_task_notes(self, cid: str, doc: Any) -> None:
        edits = self.edits.get(cid) or Edits()
        counts = {ei: len(e.get("tasks") or []) for ei, e in enumerate(details.entities(doc))}
        rerun = set(details.invalidated_tasks(counts, edits.outputs))
        for key, note in self._task_notes.items():
            if key in edits.outputs:
                note.update("✎ edited: Fork (f) runs the tasks after it again with this output")
            elif key in rerun:
                row = self._task_status.get(key)
                note.update("↻ runs again on Fork: an earlier output was edited" if row != "pending" else
                            "↻ runs on Fork with the edited output as context")
            else:
                note.update("")

    async def _render_inputs(self, cid: str, doc: Any) -> None:
        body = self.query_one("#inputs-body", VerticalScroll)
        await body.remove_children()
        self._input_keys.clear()
        values = details.inputs(doc)
        if not values:
            await body.mount(Static("No kickoff inputs recorded in this checkpoint.", classes="empty"))
            return
        edits = self.edits.get(cid) or Edits()
        rows: list[Widget] = [Static(Text("Kickoff inputs (edit; Fork passes them to kickoff)", style="bold"),
                                     classes="section")]
        for i, (key, value) in enumerate(values.items()):
            wid = f"in-{i}"
            self._input_keys[wid] = (key, value)
            text = edits.inputs.get(key, details.format_value(value))
            field = Input(text, id=wid, classes="edited" if key in edits.inputs else "")
            rows.append(Horizontal(Label(key), field, classes="input-row"))
        await body.mount_all(rows)

    @on(TextArea.Changed)
    def _output_changed(self, event: TextArea.Changed) -> None:
        wid = event.text_area.id or ""
        if self._shown is None or wid not in self._task_originals:
            return
        _, ei, ti = wid.split("-")
        key = (int(ei), int(ti))
        edits = self.edits.setdefault(self._shown, Edits())
        if event.text_area.text == self._task_originals[wid]:
            edits.outputs.pop(key, None)
            event.text_area.remove_class("edited")
        else:
            edits.outputs[key] = event.text_area.text
            event.text_area.add_class("edited")
        self._edits_changed()

    @on(Input.Changed, "#inputs-body Input")
    def _input_changed(self, event: Input.Changed) -> None:
        wid = event.input.id or ""
        if self._shown is None or wid not in self._input_keys:
            return
        key, original = self._input_keys[wid]
        edits = self.edits.setdefault(self._shown, Edits())
        if event.value == details.format_value(original):
            edits.inputs.pop(key, None)
            event.input.remove_class("edited")
        else:
            edits.inputs[key] = event.value
            event.input.add_class("edited")
        self._edits_changed()

    def _edits_changed(self) -> None:
        self._quit_armed = False
        cid = self._shown
        if cid is None:
            return
        if not self.edits.get(cid):
            self.edits.pop(cid, None)
        self._relabel(cid)
        self._set_status()
        doc = self._cached(cid)
        if doc is not None and self._rendered.get("tasks") == cid:
            self._update_task_notes(cid, doc)

    # -- diff ------------------------------------------------------------------------------------------------

    @on(TabbedContent.TabActivated, "#tabs")
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id:
            self.run_worker(self._render_tab_locked(event.pane.id), group="tab")

    def _diff_base(self, cid: str) -> str | None:
        if self.marked and self.marked != cid:
            return self.marked
        c = self.history.by_id[cid]
        return c.parents[0] if c.parents else None

    def _start_diff(self) -> None:
        cid = self._shown
        if cid is None:
            return
        base = self._diff_base(cid)
        if self._diff_for == (cid, base):
            return
        self._diff_for = (cid, base)
        body = self.query_one("#diff-body", Static)
        if base is None:
            body.update(Text("Root checkpoint: no parent to compare with. Mark another checkpoint (m) to diff "
                             "against it.", style="dim"))
            return
        body.update(Text(f"computing diff {base[:8]} → {cid[:8]} …", style="dim"))
        self._compute_diff(cid, base)

    @work(thread=True, exclusive=True, group="diff")
    def _compute_diff(self, cid: str, base: str) -> None:
        worker = get_current_worker()
        try:
            old, new = self._read(base), self._read(cid)
        except CkptError as exc:
            self.call_from_thread(self.query_one("#diff-body", Static).update,
                                  Text(f"cannot diff: {exc}", style="red"))
            return
        result = diff_mod.diff_documents(old, new)
        lines = diff_render.render_full(result)
        if worker.is_cancelled or self._diff_for != (cid, base):
            return
        which = "marked ◆" if base == self.marked else "parent"
        text = Text()
        text.append(f"{base[:12]} ({which}) → {cid[:12]}\n", style="bold")
        for tag, line in lines[:MAX_DIFF_LINES]:
            text.append(line + "\n", style=_DIFF_STYLE.get(tag, ""))
        if len(lines) > MAX_DIFF_LINES:
            text.append(f"… {len(lines) - MAX_DIFF_LINES} more lines: `ckpt diff {base[:12]} {cid[:12]}`",
                        style="dim")
        self.call_from_thread(self.query_one("#diff-body", Static).update, text)

    # -- actions ---------------------------------------------------------------------------------------------

    def action_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab

    def action_focus_tree(self) -> None:
        self.query_one("#tree", Tree).focus()

    def action_refresh(self) -> None:
        self.reload(keep=self.selected)
        self.notify(f"{self.history.count} checkpoints on {len(self.branches)} branches", timeout=2)

    def action_copy_id(self) -> None:
        if self.selected is None:
            return
        self.copy_to_clipboard(self.selected)
        self.notify(f"copied {self.selected}", timeout=3)

    def action_mark(self) -> None:
        if self.selected is None:
            return
        old = self.marked
        self.marked = None if old == self.selected else self.selected
        self._relabel(old)
        self._relabel(self.selected)
        self._set_status()
        self._diff_for = None
        self._rendered.pop("diff", None)
        if self.query_one("#tabs", TabbedContent).active == "diff":
            self._start_diff()
        self.notify(f"diff base: {self.marked[:8]} (m again to clear)" if self.marked else "diff base: parent",
                    timeout=2)

    async def action_quit(self) -> None:
        """Quit; with unsaved edits, the first q warns and a second q quits."""
        if self.edits and not self._quit_armed:
            self._quit_armed = True
            n = len(self.edits)
            self.notify(f"edits on {n} checkpoint{'s' if n != 1 else ''} are not forked yet: q again quits and "
                        "drops them, f forks", severity="warning", timeout=6)
            return
        self.exit(None)

    def action_goto(self) -> None:
        def done(cid: str | None) -> None:
            if cid is not None:
                self.reveal(cid)
                self.query_one("#tree", Tree).focus()

        self.push_screen(GoTo(self.store, set(self.history.by_id)), done)

    def action_discard(self) -> None:
        cid = self.selected
        if cid is None or not self.edits.pop(cid, None):
            return
        self._relabel(cid)
        self._set_status()
        doc = self._cached(cid)
        if doc is not None and self._shown == cid:
            self.run_worker(self._show(cid, doc), exclusive=True, group="show")
        self.notify("edits discarded", timeout=2)

    def _can_run(self, action: str) -> bool:
        if self.selected is None:
            self.notify("select a checkpoint first", severity="warning")
            return False
        if not crewai_available():
            self.notify(f"{action} needs the crewai extra, which is not installed: {INSTALL_HINT}. "
                        "Browsing and diffing work without it.", title=f"{action} unavailable",
                        severity="error", timeout=10)
            return False
        doc = self._cached(self.selected)
        if doc is None:
            self.notify("still reading this checkpoint; try again", severity="warning")
            return False
        if entity_kind(doc) is None:
            self.notify(f"{action}: this checkpoint holds no CrewAI crew, flow or agent to run",
                        severity="error", timeout=6)
            return False
        return True

    def action_fork(self) -> None:
        if not self._can_run("Fork"):
            return
        cid = self.selected
        assert cid is not None
        doc = self._cached(cid)
        edits = self.edits.get(cid) or Edits()
        inputs = self._edited_inputs(doc, edits)
        lines = self._plan_lines(cid, doc, edits)
        default = self._free_branch(f"fork/{cid[:8]}")

        def done(branch: str | None) -> None:
            if branch is None:
                return
            self.exit(RunPlan("fork", cid, branch, inputs, dict(edits.outputs)))

        c = self.history.by_id[cid]
        self.push_screen(ConfirmRun(f"Fork {cid[:12]} ({c.branch}, {c.trigger or 'manual'}) and run it",
                                    lines, branch=default, taken=set(self.branches), ok_label="Fork and run"),
                         done)

    def action_resume(self) -> None:
        if not self._can_run("Resume"):
            return
        cid = self.selected
        assert cid is not None
        doc = self._cached(cid)
        c = self.history.by_id[cid]
        tips = [b for b, t in self.branches.items() if t == cid]
        lines = self._plan_lines(cid, doc, Edits())
        where = (f"New checkpoints continue branch {c.branch}." if c.branch in tips else
                 f"{cid[:8]} is not the tip of {c.branch}: new checkpoints go on a new branch "
                 f"{c.branch}-from-{cid[:8]}.")
        lines.insert(0, Text(where))
        if self.edits.get(cid):
            lines.append(Text("Your edits are not used by Resume (it runs the checkpoint as recorded); "
                              "cancel and press f to fork with them.", style="bold yellow"))

        def done(answer: str | None) -> None:
            if answer is not None:
                self.exit(RunPlan("resume", cid))

        self.push_screen(ConfirmRun(f"Resume {cid[:12]} ({c.branch}, {c.trigger or 'manual'})", lines,
                                    branch=None, taken=set(), ok_label="Resume"), done)

    def _free_branch(self, base: str) -> str:
        name, n = base, 2
        while name in self.branches:
            name, n = f"{base}-{n}", n + 1
        return name

    def _edited_inputs(self, doc: Any, edits: Edits) -> dict[str, Any] | None:
        if not edits.inputs:
            return None
        values = details.inputs(doc)
        return {k: details.parse_value(edits.inputs[k], v) if k in edits.inputs else v for k, v in values.items()}

    def _plan_lines(self, cid: str, doc: Any, edits: Edits) -> list[Text]:
        rows = details.tasks(doc)
        counts = {ei: len(e.get("tasks") or []) for ei, e in enumerate(details.entities(doc))}
        rerun = set(details.invalidated_tasks(counts, edits.outputs))
        lines: list[Text] = []
        values = details.inputs(doc)
        for key, text in edits.inputs.items():
            lines.append(Text(f"input {key}: {_clip(details.format_value(values.get(key)), 30)} → "
                              f"{_clip(text, 30)}", style="yellow"))
        for (_, task_index), output in sorted(edits.outputs.items()):
            lines.append(Text(f"task {task_index + 1} output edited: {_clip(output, 60)}", style="yellow"))
        keep = [r for r in rows if r.status == "completed" and r.key not in rerun and r.key not in edits.outputs]
        again = [r for r in rows if r.key in rerun and r.status != "pending"]
        todo = [r for r in rows if r.status != "completed" and r not in again]
        if keep:
            lines.append(Text("kept (not run): " + ", ".join(r.name for r in keep), style="green"))
        if again:
            lines.append(Text("run again: " + ", ".join(r.name for r in again), style="bold yellow"))
        if todo:
            lines.append(Text("to run: " + ", ".join(r.name for r in todo), style="cyan"))
        if not lines:
            lines.append(Text("No edits: the new branch continues this checkpoint as recorded."))
        lines.append(Text("The app exits and the run prints in this terminal.", style="dim"))
        return lines


def _clip(text: str, width: int) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= width else one[: width - 1] + "…"


__all__ = ["PAGE", "CheckpointBrowser", "ConfirmRun", "Edits", "GoTo"]

"""The checkpoint browser: a Textual app over a crewckpt store (``ckpt`` / ``ckpt tui``).

Left: the tree of lines (runs and branches; forks nested under the checkpoint they forked from), built from
the commit index only (:mod:`crewckpt.tui.model`) and filled lazily, :data:`PAGE` checkpoints at a time
(:mod:`crewckpt.tui.tree`). Right: tabs for the highlighted checkpoint (Overview, Tasks, Inputs, Diff,
Events); its document is read in a worker thread when the cursor rests on it (:mod:`crewckpt.tui.tabs`).
Task outputs and kickoff inputs are edited in place (:mod:`crewckpt.tui.edits`); Fork and Resume end the app
with a :class:`~crewckpt.tui.runner.RunPlan` that :func:`crewckpt.tui.run` carries out in the terminal, after
a confirm panel (:mod:`crewckpt.tui.screens`). This module assembles the parts and keeps the layout, the key
bindings and the actions. Nothing here imports crewai.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane, Tree

from crewckpt.errors import CkptError
from crewckpt.history.lineage import pick_resume_branch
from crewckpt.tui.base import escape_terminal_controls
from crewckpt.tui.edits import EditHandlers, Edits
from crewckpt.tui.model import entity_kind
from crewckpt.tui.runner import INSTALL_HINT, RunPlan, crewai_available
from crewckpt.tui.screens import ConfirmRun, GoTo
from crewckpt.tui.tabs import DetailTabs
from crewckpt.tui.tree import TreePane

PAGE = 100
"""Checkpoints added to a line's node per page (a '... older' node loads the next page)."""

RELABEL_S = 60.0
"""Seconds between redraws of the tree's relative times."""

POLL_S = 2.0
"""Seconds between checks of the store's branch refs (to say that new checkpoints arrived)."""

TABS = ("overview", "tasks", "inputs", "diff", "events")


class CheckpointBrowser(TreePane, DetailTabs, EditHandlers):
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

    @property
    def page_size(self) -> int:
        return PAGE  # read at each use: tests and benchmarks set PAGE

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
        goes = pick_resume_branch(c.branch, tips, None)  # the rule restore(cid) applies
        where = (f"New checkpoints continue branch {goes}." if goes in tips else
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


__all__ = ["PAGE", "CheckpointBrowser", "ConfirmRun", "Edits", "GoTo", "escape_terminal_controls"]

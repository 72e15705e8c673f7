"""The browser's tree of lines (runs and branches, forks nested under the checkpoint they forked from), built
from the commit index only (:mod:`crewckpt.tui.model`) and filled lazily, a page of checkpoints at a time
(``CheckpointBrowser.page_size``, i.e. :data:`crewckpt.tui.app.PAGE`): :class:`TreePane`.
"""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import on
from textual.widgets import Static, Tree
from textual.widgets.tree import TreeNode

from crewckpt.history.commits import CommitInfo
from crewckpt.tui.base import BrowserBase
from crewckpt.tui.model import build_history, line_title, progress_bar, relative_time
from crewckpt.views.document import crew_summary


class TreePane(BrowserBase):
    """The left pane: building, paging, revealing and relabelling the tree; cursor moves select a checkpoint."""

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
            lo = upto // self.page_size * self.page_size
            self._window[li] = (lo, lo)
        lo, hi = self._window[li]
        if upto >= hi:
            self._add_commits(li, hi, max(upto + 1, min(n, hi + self.page_size)), before=None)
        elif upto < lo:
            new_lo = min(upto, max(0, lo - self.page_size))
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
                Text(f"  … {lo} newer checkpoints (enter: load {min(self.page_size, lo)} more)", style="dim italic"),
                data=("newer", li), before=self._node_at(li, lo), allow_expand=False)
        if hi < n and li not in self._older_nodes:
            self._older_nodes[li] = node.add_leaf(
                Text(f"  … {n - hi} older checkpoints (enter: load {min(self.page_size, n - hi)} more)",
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


__all__ = ["TreePane"]

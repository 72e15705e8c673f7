"""The browser's detail tabs for the highlighted checkpoint (Overview, Tasks, Inputs, Diff, Events): its document
is read in a worker thread when the cursor rests on it, and only the visible tab is built: :class:`DetailTabs`.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.containers import Horizontal, VerticalScroll
from textual.widget import Widget
from textual.widgets import Input, Label, Static, TabbedContent, TextArea
from textual.worker import get_current_worker

from crewckpt.errors import CkptError
from crewckpt.tui import details
from crewckpt.tui.base import BrowserBase, clip
from crewckpt.tui.edits import Edits
from crewckpt.tui.model import progress_bar, relative_time
from crewckpt.views import diff as diff_mod
from crewckpt.views import diff_render
from crewckpt.views.document import crew_summary, crewai_json

DOC_CACHE = 8
"""Decoded documents kept in memory (the highlighted one, its diff base, recent ones)."""

SETTLE_S = 0.04
"""Seconds the cursor must rest on a checkpoint before its document is read (holding an arrow key scrolls
without decoding every checkpoint it passes)."""

MAX_EVENT_ROWS = 300
MAX_DIFF_LINES = 3000

_DIFF_STYLE = {"header": "bold", "added": "green", "removed": "red", "changed": "yellow", "hunk": "cyan",
               "meta": "dim", "plain": ""}
_STATUS_MARK = {"completed": ("✓", "green"), "running": ("▶", "yellow"), "pending": ("○", "dim")}


class DetailTabs(BrowserBase):
    """The right pane: status line, document cache, the five tabs and the diff worker."""

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
            # verifies every object's hash; CkptError on damage; tasks' agent references expanded (CrewAI's JSON)
            doc = crewai_json(self.store.read(cid), cid[:12])
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
            from crewckpt.history import jsontext

            grid.add_row("meta", jsontext.dumps(c.meta)[:300])
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
            widgets.append(Static(Text(clip(r.description, 300)), classes="task-desc"))
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


__all__ = ["DOC_CACHE", "MAX_DIFF_LINES", "MAX_EVENT_ROWS", "SETTLE_S", "DetailTabs"]

"""Editing in the browser: task outputs and kickoff inputs edited in place, kept per checkpoint until Fork
(or discarded), and the summary the Fork/Resume panel shows: :class:`Edits`, :class:`EditHandlers`.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.widgets import Input, TextArea

from crewckpt.tui import details
from crewckpt.tui.base import BrowserBase, clip


class Edits:
    """Pending edits of one checkpoint: input text per key, output text per (entity, task) index."""

    def __init__(self) -> None:
        self.inputs: dict[str, str] = {}
        self.outputs: dict[tuple[int, int], str] = {}

    def __bool__(self) -> bool:
        return bool(self.inputs or self.outputs)

    def count(self) -> int:
        return len(self.inputs) + len(self.outputs)



class EditHandlers(BrowserBase):
    """Record edits as the user types, discard them, and turn them into a run plan's inputs and summary."""

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
            lines.append(Text(f"input {key}: {clip(details.format_value(values.get(key)), 30)} → "
                              f"{clip(text, 30)}", style="yellow"))
        for (_, task_index), output in sorted(edits.outputs.items()):
            lines.append(Text(f"task {task_index + 1} output edited: {clip(output, 60)}", style="yellow"))
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


__all__ = ["EditHandlers", "Edits"]

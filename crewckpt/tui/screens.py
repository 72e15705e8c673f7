"""The browser's modal screens: :class:`GoTo` (jump to a revision) and :class:`ConfirmRun` (the Fork/Resume
panel). Their styles are in ``CheckpointBrowser.CSS``.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from crewckpt.errors import CkptError
from crewckpt.history.store import Store


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



__all__ = ["ConfirmRun", "GoTo"]

"""What the browser's parts share: :class:`BrowserBase` (the app's state, and the hooks each part offers the
others) and :func:`clip`.

:class:`crewckpt.tui.app.CheckpointBrowser` is assembled from parts, one per concern: the tree
(:mod:`crewckpt.tui.tree`), the detail tabs (:mod:`crewckpt.tui.tabs`), editing (:mod:`crewckpt.tui.edits`)
and the modal screens (:mod:`crewckpt.tui.screens`); the app itself keeps the layout, key bindings and
actions. Each part subclasses :class:`BrowserBase`, a Textual ``App``, because Textual collects ``@on``
handlers per class through App's metaclass (a plain mixin's handlers would never run).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from textual.app import App
from textual.widgets import Static
from textual.widgets.tree import TreeNode

from crewckpt.history.store import Store
from crewckpt.tui.model import History, build_history
from crewckpt.tui.runner import RunPlan

if TYPE_CHECKING:
    from crewckpt.tui.edits import Edits


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



class BrowserBase(App[RunPlan | None]):
    """The browser's state (see :class:`crewckpt.tui.app.CheckpointBrowser` for the arguments)."""

    _render_lock: asyncio.Lock  # made in on_mount (it needs the running loop)

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

    def _now(self) -> int:
        return self.now_ns if self.now_ns is not None else time.time_ns()


    @property
    def page_size(self) -> int:
        """Checkpoints per page of the tree (the app reads :data:`crewckpt.tui.app.PAGE`)."""
        raise NotImplementedError

    if TYPE_CHECKING:  # provided by the other parts; declared here so each part type-checks alone
        def _select(self, cid: str) -> None: ...
        def _set_status(self, text: str | None = None) -> None: ...
        def _cached(self, cid: str) -> Any | None: ...
        async def _show(self, cid: str, doc: Any) -> None: ...
        def _update_task_notes(self, cid: str, doc: Any) -> None: ...
        def _relabel(self, cid: str | None) -> None: ...


def clip(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    one = " ".join(str(text).split())
    return one if len(one) <= width else one[: width - 1] + "…"


__all__ = ["BrowserBase", "clip", "escape_terminal_controls"]

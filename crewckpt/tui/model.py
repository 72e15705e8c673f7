"""The checkpoint tree the TUI draws, built from commit-index rows only (no snapshot is decoded).

Commits are grouped into *lines*: a line is a chain of commits of one branch, each the first child of the
one before. A commit starts a new line when it has no parent, when its parent is gone (pruned), when its
parent is on another branch (a fork), or when its parent already has a child in the same line (a second
continuation of one checkpoint on the same branch, e.g. two runs resumed from it). Lines whose first commit
has a live parent are nested under that parent; the others are top level (one per run that started from
scratch). Building is O(commits) with dictionaries; nothing here touches Textual.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from typing import Any

from crewckpt.history.commits import CommitInfo
from crewckpt.views.document import crew_summary


@dataclasses.dataclass
class Line:
    """A chain of commits of one branch (oldest first); ``fork_point`` is the parent of its first commit when
    that commit is live (None for a top-level line). ``tip_of`` lists branch names whose ref is the last
    commit."""

    index: int
    branch: str
    commits: list[CommitInfo]
    fork_point: str | None
    tip_of: list[str] = dataclasses.field(default_factory=list)

    @property
    def first(self) -> CommitInfo:
        return self.commits[0]

    @property
    def last(self) -> CommitInfo:
        return self.commits[-1]


@dataclasses.dataclass
class History:
    """Every live commit arranged as lines. ``by_id`` maps id -> CommitInfo, ``line_of`` id -> line index,
    ``forks_at`` commit id -> indexes of the lines nested under it, ``top`` the top-level line indexes
    (newest activity first), ``children`` id -> ids of its live children (any branch), ``pos_of`` id -> its
    position in its line (0 = oldest)."""

    lines: list[Line]
    by_id: dict[str, CommitInfo]
    line_of: dict[str, int]
    forks_at: dict[str, list[int]]
    top: list[int]
    children: dict[str, list[str]]
    pos_of: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.by_id)

    def newest(self) -> CommitInfo | None:
        """The most recently written commit (highest seq), if any."""
        return max(self.by_id.values(), key=lambda c: c.seq, default=None)

    def path_to(self, cid: str) -> list[int]:
        """Line indexes from a top-level line down to the line holding ``cid``."""
        out = []
        li: int | None = self.line_of.get(cid)
        while li is not None:
            out.append(li)
            fp = self.lines[li].fork_point
            li = self.line_of.get(fp) if fp is not None else None
        return out[::-1]


def build_history(commits: Iterable[CommitInfo], branches: dict[str, str] | None = None) -> History:
    """Arrange commits (any order; write order is cheapest) into lines; see the module docstring."""
    ordered = sorted(commits, key=lambda c: c.seq)
    by_id = {c.id: c for c in ordered}
    lines: list[Line] = []
    line_of: dict[str, int] = {}
    children: dict[str, list[str]] = {}
    extended: set[str] = set()  # commits that already have their same-line child
    pos_of: dict[str, int] = {}
    for c in ordered:
        parent = c.parents[0] if c.parents else None
        p = by_id.get(parent) if parent is not None else None
        if p is not None and p.seq >= c.seq:  # a self-parent or parent cycle (hostile index): treat as a root
            p = parent = None
        if parent is not None and parent in by_id:
            children.setdefault(parent, []).append(c.id)
        if p is not None and p.branch == c.branch and parent not in extended and parent in line_of:
            li = line_of[parent]
            lines[li].commits.append(c)
            extended.add(parent)
        else:
            li = len(lines)
            lines.append(Line(li, c.branch, [c], parent if p is not None else None))
        line_of[c.id] = li
        pos_of[c.id] = len(lines[li].commits) - 1
    forks_at: dict[str, list[int]] = {}
    for line in lines:
        if line.fork_point is not None:
            forks_at.setdefault(line.fork_point, []).append(line.index)
    for name, tip in (branches or {}).items():
        tip_line = line_of.get(tip)
        if tip_line is not None and lines[tip_line].last.id == tip:
            lines[tip_line].tip_of.append(name)
    top = [ln.index for ln in lines if ln.fork_point is None]
    top.sort(key=lambda i: lines[i].last.seq, reverse=True)
    return History(lines, by_id, line_of, forks_at, top, children, pos_of)


def relative_time(time_ns: int, now_ns: int | None = None) -> str:
    """``12s ago``, ``5m ago``, ``3h ago``, ``2d ago``, ``7w ago``; ``in 5m`` for a future time."""
    now = time.time_ns() if now_ns is None else now_ns
    delta = (now - time_ns) / 1e9
    ahead = delta < 0
    delta = abs(delta)
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if delta >= size * (2 if unit == "w" else 1):
            text = f"{int(delta // size)}{unit}"
            break
    else:
        text = f"{int(delta)}s"
    return f"in {text}" if ahead else f"{text} ago"


def progress_bar(done: int, total: int, width: int = 8) -> str:
    """``███░░░░░ 3/8`` (empty string when there are no tasks)."""
    if total <= 0:
        return ""
    filled = min(width, round(width * done / total))
    return "█" * filled + "░" * (width - filled) + f" {done}/{total}"


def line_title(line: Line) -> str:
    """``crew research`` style name of what a line ran: its first named entity, else the first entity type."""
    ents = crew_summary(line.last.summary).entities
    for kind, name in ents:
        if name:
            return f"{kind} {name}"
    return ents[0][0] if ents else "checkpoints"


def entity_kind(doc: Any) -> str | None:
    """``crew`` / ``flow`` / ``agent`` of a checkpoint document's first entity, else None."""
    if isinstance(doc, dict) and isinstance(doc.get("entities"), list):
        for e in doc["entities"]:
            if isinstance(e, dict) and e.get("entity_type") in ("crew", "flow", "agent"):
                return str(e["entity_type"])
    return None


__all__ = ["History", "Line", "build_history", "entity_kind", "line_title", "progress_bar", "relative_time"]

"""ASCII commit graph in the style of ``git log --graph`` (pure layout, no I/O).

Input: commits newest first, each as ``(id, parent ids)``; a parent is always listed after its children
(crewckpt writes parents before children, so descending write order works). Output, per commit: the
connector lines to print before it (``|/`` where two lines join at a fork point, ``|\\`` after a merge)
and the prefix of its own row (``* |``). Each lane takes two characters: the lane at index k sits at
character 2k, a line moving between lanes k and k-1 is drawn at 2k-1.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple


class GraphRow(NamedTuple):
    """One commit's share of the graph: connector lines before it, then its row prefix."""

    commit_id: str
    before: list[str]
    row: str


def graph_rows(commits: Iterable[tuple[str, list[str]]]) -> Iterator[GraphRow]:
    """Lay out ``commits`` (newest first) into lanes; yields one GraphRow per commit, lazily.

    Lanes hold the id each line is waiting for. A commit takes the leftmost lane waiting for it (or a new
    lane on the right when it is a tip); other lanes waiting for it join it with ``/`` first (a fork point:
    several children share this parent). After the row the lane waits for the first parent; extra parents
    (merges) open lanes to its right; a root closes its lane.
    """
    lanes: list[str] = []
    pending: list[str] = []  # lines to print before the next commit (lane closed after a root)
    for commit_id, parents in commits:
        before = pending
        pending = []
        waiting = [k for k, lane in enumerate(lanes) if lane == commit_id]
        if waiting:
            here = waiting[0]
            for k in reversed(waiting[1:]):
                before.append(_join_line(len(lanes), here, k))
                del lanes[k]
        else:
            lanes.append(commit_id)
            here = len(lanes) - 1
        row = " ".join("*" if k == here else "|" for k in range(len(lanes)))
        yield GraphRow(commit_id, before, row)
        if not parents:
            if here < len(lanes) - 1:
                pending.append(_join_line(len(lanes), here, here + 1, closing=True))
            del lanes[here]
            continue
        lanes[here] = parents[0]
        extra = [p for p in parents[1:] if p not in lanes]
        if extra:
            pending.append(_split_line(len(lanes), here, len(extra)))
            lanes[here + 1 : here + 1] = extra


def _join_line(width: int, target: int, moving: int, *, closing: bool = False) -> str:
    """Lane ``moving`` joins lane ``target`` (to its left); lanes right of it shift left one place.

    ``closing``: lane ``target`` itself ended (a root), so it is drawn blank.
    """
    chars = [" "] * (2 * width)
    for k in range(width):
        if k < moving:
            chars[2 * k] = " " if (closing and k == target) else "|"
        else:
            chars[2 * k - 1] = "/"
    for k in range(target + 1, moving):
        chars[2 * k - 1] = "_"  # crossing the lanes in between on the way to ``target``
    return "".join(chars).rstrip()


def _split_line(width: int, source: int, count: int) -> str:
    """``count`` new lanes branch off lane ``source`` to the right (a merge commit's extra parents)."""
    chars = [" "] * (2 * (width + count) + 1)
    for k in range(width):
        if k <= source:
            chars[2 * k] = "|"
        else:
            chars[2 * k + 1] = "\\"
    for n in range(count):
        chars[2 * source + 1 + 2 * n] = "\\"
    return "".join(chars).rstrip()

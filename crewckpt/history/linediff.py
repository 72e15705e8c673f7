"""A near-linear sequence diff (patience anchors, as git's --patience) behind difflib's interfaces.

difflib.SequenceMatcher is quadratic on long inputs with scattered edits (a 20,000-line task output took
11 s, 60,000 lines 74 s). Here: common prefix and suffix are matched first, then lines that occur exactly
once on each side are anchors, kept in order by a longest increasing subsequence (O(k log k)); the gaps
between anchors are solved the same way. A gap without anchors is handed to SequenceMatcher only when it is
small (``SMALL_PAIRS`` element pairs), else it is a plain replacement. Work is O(n log n) in the input size
and every step is counted (``Diff.work``) so tests bound it without timers.
"""

from __future__ import annotations

import bisect
import difflib
from collections.abc import Hashable, Iterator, Sequence

SMALL_PAIRS = 250_000  # element pairs a gap without anchors may cost SequenceMatcher


class FastMatcher(difflib.SequenceMatcher):  # type: ignore[type-arg]
    """difflib.SequenceMatcher whose matching blocks come from :func:`matching_blocks` (so get_opcodes,
    get_grouped_opcodes and ratio keep difflib's meaning, at near-linear cost). ``work`` counts the steps."""

    def __init__(self, a: Sequence[Hashable], b: Sequence[Hashable]) -> None:
        super().__init__(None, a, b, autojunk=False)
        self.work = 0

    def get_matching_blocks(self) -> list[difflib.Match]:
        done: list[difflib.Match] | None = getattr(self, "matching_blocks", None)
        if done is None:
            blocks, self.work = matching_blocks(getattr(self, "a"), getattr(self, "b"))  # noqa: B009
            done = [difflib.Match(i, j, n) for i, j, n in blocks]
            self.matching_blocks = done
        return done

    def chain_b(self) -> None:  # type: ignore[override]
        """difflib indexes ``b`` for its own matcher on every set_seq2: not needed here."""


# difflib calls __chain_b (name-mangled) from set_seq2
FastMatcher._SequenceMatcher__chain_b = FastMatcher.chain_b  # type: ignore[attr-defined]


def matching_blocks(a: Sequence[Hashable], b: Sequence[Hashable]) -> tuple[list[tuple[int, int, int]], int]:
    """``([(i, j, n), ...] ending with (len(a), len(b), 0), work)``: increasing, non-adjacent runs with
    ``a[i:i+n] == b[j:j+n]``, as difflib's get_matching_blocks returns them."""
    singles: list[tuple[int, int]] = []
    work = 0
    todo: list[tuple[int, int, int, int] | tuple[int, int]] = [(0, len(a), 0, len(b))]
    while todo:
        task = todo.pop()
        if len(task) == 2:
            singles.append(task)  # type: ignore[arg-type]
            continue
        alo, ahi, blo, bhi = task  # type: ignore[misc]
        work += (ahi - alo) + (bhi - blo) + 1
        while alo < ahi and blo < bhi and a[alo] == b[blo]:
            singles.append((alo, blo))
            alo, blo = alo + 1, blo + 1
        tail: list[tuple[int, int]] = []
        while alo < ahi and blo < bhi and a[ahi - 1] == b[bhi - 1]:
            ahi, bhi = ahi - 1, bhi - 1
            tail.append((ahi, bhi))
        later: list[tuple[int, int, int, int] | tuple[int, int]] = [*tail]  # pushed so they pop in order
        if alo < ahi and blo < bhi:
            anchors = _anchors(a, b, alo, ahi, blo, bhi)
            if anchors:
                pieces: list[tuple[int, int, int, int] | tuple[int, int]] = []
                pa, pb = alo, blo
                for i, j in anchors:
                    pieces.append((pa, i, pb, j))
                    pieces.append((i, j))
                    pa, pb = i + 1, j + 1
                pieces.append((pa, ahi, pb, bhi))
                later.extend(reversed(pieces))
            elif (ahi - alo) * (bhi - blo) <= SMALL_PAIRS:
                work += (ahi - alo) * (bhi - blo)
                sm = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
                for i, j, n in sm.get_matching_blocks():
                    singles.extend((alo + i + k, blo + j + k) for k in range(n))
        todo.extend(later)
    singles.sort()
    return _runs(singles, len(a), len(b)), work


def _anchors(a: Sequence[Hashable], b: Sequence[Hashable], alo: int, ahi: int, blo: int,
             bhi: int) -> list[tuple[int, int]]:
    """Pairs (i, j) of elements occurring exactly once in a[alo:ahi] and once in b[blo:bhi], the longest
    subsequence increasing on both sides (patience sorting)."""
    count_a: dict[Hashable, int] = {}
    pos_a: dict[Hashable, int] = {}
    for i in range(alo, ahi):
        x = a[i]
        count_a[x] = count_a.get(x, 0) + 1
        pos_a[x] = i
    count_b: dict[Hashable, int] = {}
    pos_b: dict[Hashable, int] = {}
    for j in range(blo, bhi):
        x = b[j]
        if count_a.get(x) == 1:
            count_b[x] = count_b.get(x, 0) + 1
            pos_b[x] = j
    pairs = sorted((pos_a[x], pos_b[x]) for x, n in count_b.items() if n == 1)
    # longest increasing subsequence of the b positions
    tails: list[int] = []
    tail_idx: list[int] = []
    prev = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        p = bisect.bisect_left(tails, j)
        if p == len(tails):
            tails.append(j)
            tail_idx.append(k)
        else:
            tails[p] = j
            tail_idx[p] = k
        prev[k] = tail_idx[p - 1] if p else -1
    out: list[tuple[int, int]] = []
    k = tail_idx[-1] if tail_idx else -1
    while k >= 0:
        out.append(pairs[k])
        k = prev[k]
    return out[::-1]


def _runs(singles: list[tuple[int, int]], la: int, lb: int) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for i, j in singles:
        if out and out[-1][0] + out[-1][2] == i and out[-1][1] + out[-1][2] == j:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + 1)
        else:
            out.append((i, j, 1))
    out.append((la, lb, 0))
    return out


def unified_diff(a: Sequence[str], b: Sequence[str], fromfile: str = "", tofile: str = "", n: int = 3,
                 lineterm: str = "") -> Iterator[str]:
    """difflib.unified_diff's output (same header, hunks and context), computed with :class:`FastMatcher`."""
    started = False
    for group in FastMatcher(a, b).get_grouped_opcodes(n):
        if not started:
            started = True
            yield f"--- {fromfile}{lineterm}"
            yield f"+++ {tofile}{lineterm}"
        first, last = group[0], group[-1]
        file1 = difflib._format_range_unified(first[1], last[2])  # type: ignore[attr-defined]
        file2 = difflib._format_range_unified(first[3], last[4])  # type: ignore[attr-defined]
        yield f"@@ -{file1} +{file2} @@{lineterm}"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for line in a[i1:i2]:
                    yield " " + line
                continue
            if tag in {"replace", "delete"}:
                for line in a[i1:i2]:
                    yield "-" + line
            if tag in {"replace", "insert"}:
                for line in b[j1:j2]:
                    yield "+" + line

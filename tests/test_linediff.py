"""The output diff is near-linear: bounded by counted work, not by a timer (difflib was quadratic: a
20,000-line task output took 11 s, 60,000 lines 74 s)."""

from __future__ import annotations

import difflib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crewckpt.history import linediff
from crewckpt.history.linediff import FastMatcher, matching_blocks, unified_diff
from crewckpt.views.diff import diff_documents


def _edited(n: int, every: int) -> tuple[list[str], list[str]]:
    a = [f"line {i}" for i in range(n)]
    b = [f"line {i}{' edited' if i % every == 0 else ''}" for i in range(n)]
    return a, b


@pytest.mark.parametrize("n", [20_000, 60_000])
def test_work_grows_linearly_with_scattered_edits(n: int) -> None:
    a, b = _edited(n, 97)
    blocks, work = matching_blocks(a, b)
    assert work <= 8 * n  # difflib's SequenceMatcher does ~n*n/97 steps here
    assert sum(size for _, _, size in blocks) == n - len(range(0, n, 97))


def test_a_crewai_diff_of_a_60000_line_output_calls_no_quadratic_matcher(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _edited(60_000, 50)
    pairs: list[int] = []
    real = difflib.SequenceMatcher

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, isjunk: object = None, x: object = "", y: object = "", autojunk: bool = True) -> None:
            if not isinstance(self, FastMatcher):
                pairs.append(len(x) * len(y))  # type: ignore[arg-type]
            super().__init__(isjunk, x, y, autojunk)

    monkeypatch.setattr(linediff.difflib, "SequenceMatcher", Counting)
    doc = {"entities": [{"entity_type": "crew", "name": "c", "tasks": [{"id": "t", "output": {"raw": "\n".join(a)}}]}]}
    new = {"entities": [{"entity_type": "crew", "name": "c", "tasks": [{"id": "t", "output": {"raw": "\n".join(b)}}]}]}
    d = diff_documents(doc, new)
    assert d["entities"][0]["tasks"][0]["output_diff"].count("\n+line") == 1200
    assert sum(pairs) <= linediff.SMALL_PAIRS * 10


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from("abcdefgh"), max_size=40), st.lists(st.sampled_from("abcdefgh"), max_size=40))
def test_blocks_are_valid_matches_and_the_diff_rebuilds_the_new_side(a: list[str], b: list[str]) -> None:
    blocks, _ = matching_blocks(a, b)
    pi = pj = 0
    for i, j, n in blocks:
        assert i >= pi and j >= pj and a[i:i + n] == b[j:j + n]
        pi, pj = i + n, j + n
    assert blocks[-1] == (len(a), len(b), 0)
    rebuilt: list[str] = []
    for tag, i1, i2, j1, j2 in FastMatcher(a, b).get_opcodes():
        rebuilt.extend(a[i1:i2] if tag == "equal" else b[j1:j2])
    assert rebuilt == b


def test_unified_output_matches_difflib_on_a_simple_edit() -> None:
    a = [f"l{i}" for i in range(30)]
    b = a[:10] + ["new"] + a[11:25] + a[26:]
    assert list(unified_diff(a, b, "a/x", "b/x", n=3)) == list(
        difflib.unified_diff(a, b, "a/x", "b/x", n=3, lineterm=""))


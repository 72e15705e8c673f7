"""crewckpt.crewai.allocator: the C allocator's free pages go back to the system every TRIM_EVERY checkpoints
(issue 13: a long run's RSS grew with the holes glibc keeps)."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys
from typing import Any

import pytest

from crewckpt.crewai import allocator

GLIBC = sys.platform.startswith("linux") and "libc.so.6" in str(ctypes.util.find_library("c"))


def test_every_trim_every_th_checkpoint_trims(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(allocator, "_malloc_trim", lambda: calls.append)
    monkeypatch.setattr(allocator, "_count", 0)
    trimmed = [allocator.after_checkpoint() for _ in range(3 * allocator.TRIM_EVERY + 1)]
    assert calls == [0, 0, 0]
    assert [i + 1 for i, t in enumerate(trimmed) if t] == [allocator.TRIM_EVERY * k for k in (1, 2, 3)]


def test_ckpt_malloc_trim_0_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CKPT_MALLOC_TRIM", "0")
    assert allocator._malloc_trim.__wrapped__() is None  # type: ignore[attr-defined]
    monkeypatch.setenv("CKPT_MALLOC_TRIM", "1")
    assert (allocator._malloc_trim.__wrapped__() is not None) is GLIBC  # type: ignore[attr-defined]


CHILD = """
from crewckpt.crewai import allocator
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4096
keep, big = [], []
for i in range(100_000):  # 300 MB of buffers between small survivors: freed, they leave holes
    big.append(bytes(3000) + str(i).encode())
    keep.append(str(i) * 20)
del big
before = rss()
assert allocator.trim_now()
print(before - rss())
"""


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_trimming_gives_freed_holes_back_to_the_system(tmp_path: Any) -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert int(out.stdout.strip()) > 150_000_000  # of the 300 MB freed (glibc kept them without the trim)

"""scripts/demo.py end to end, as a user runs it (a real process, offline)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from crewckpt import Store

pytestmark = pytest.mark.crewai

ROOT = Path(__file__).resolve().parents[1]


def run_demo(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(cwd), "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180, check=False)


def test_demo_crashes_resumes_forks_and_compares(tmp_path: Path) -> None:
    done = run_demo(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "run failed in task 4" in out
    assert "-> 3 LLM calls (tasks 4-6 only)" in out
    assert "-> 4 LLM calls" in out and "sea otters" in out
    assert re.search(r"\(main\)", out) and re.search(r"\(sea-otters\)", out)
    assert re.search(r"≠ task3 .*otters.*sea otters", out)
    ratio = float(re.search(r"crewckpt stores ([0-9.]+)x fewer bytes", out).group(1))
    assert ratio > 5
    store = Store.open(tmp_path / ".ckpt")
    assert set(store.branches()) == {"main", "sea-otters"}
    assert store.read("sea-otters")["entities"][0]["checkpoint_inputs"] == {"topic": "sea otters"}

    again = run_demo(tmp_path)
    assert again.returncode == 2 and "--reset" in again.stderr

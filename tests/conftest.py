"""Shared pytest fixtures (CrewAI fixture copies) and the suite's timing report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from crewai_fixtures import FIXTURES

_SECONDS_PER_FILE: dict[str, float] = {}


@pytest.fixture
def fixtures_copy(tmp_path: Path) -> Path:
    """A private, writable copy of the vendored CrewAI fixtures."""
    dst = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, dst)
    return dst


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's duration (setup, call, teardown; seconds) to its test file's total."""
    path = report.nodeid.split("::")[0]
    _SECONDS_PER_FILE[path] = _SECONDS_PER_FILE.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the slowest test files and the time spent in tests (so a slow suite says where it goes)."""
    if not _SECONDS_PER_FILE:
        return
    terminalreporter.section("time per test file (slowest 10)")
    for path, seconds in sorted(_SECONDS_PER_FILE.items(), key=lambda kv: -kv[1])[:10]:
        terminalreporter.write_line(f"{seconds:7.1f} s  {path}")
    total = sum(_SECONDS_PER_FILE.values())
    terminalreporter.write_line(f"{total:7.1f} s  in all {len(_SECONDS_PER_FILE)} files ({total / 60:.1f} min; "
                                "the last line adds collection and start-up)")

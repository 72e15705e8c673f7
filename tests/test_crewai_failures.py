"""A best-effort CrewAI run whose store cannot be written keeps going, counts the checkpoints it lost, and
says so once at the end (crewckpt.crewai.writer.checkpoint_failures / report_failures)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from crewckpt.testing import crewai_offline  # noqa: F401  (pytest fixture)

pytestmark = pytest.mark.crewai


def test_a_run_into_an_unwritable_store_finishes_and_reports_its_failed_checkpoints(
        crewai_offline: Path, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    from crewckpt.crewai import CheckpointConfig, writer
    from crewckpt.testing import research_crew

    bad = crewai_offline / "not-a-folder"
    bad.write_text("a file where the store should be")
    result = research_crew(2, checkpoint=CheckpointConfig(location=str(bad / "store"), on_events=["task_completed"])).kickoff(
        inputs={"topic": "otters"})
    assert result is not None and bad.read_text() == "a file where the store should be"
    mine = {loc: t for loc, t in writer.checkpoint_failures().items() if "not-a-folder" in loc}
    assert len(mine) == 1
    (loc, (written, failed, last)), = mine.items()
    assert written == 0 and failed == 2 and "not-a-folder is a file, not a folder; choose another" in last
    with caplog.at_level(logging.WARNING, logger="crewckpt.crewai"):
        writer.report_failures()
    writer._tally.pop(loc)  # this session's exit report is not about this test
    lines = [m for m in (r.getMessage() for r in caplog.records)
             if "could not be written" in m and loc in m]  # the tally also holds other tests' stores
    assert lines == [f"crewckpt: 2 of 2 checkpoints could not be written to {loc}; last error: {last}"]

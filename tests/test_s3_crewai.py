"""A CrewAI run checkpointed into an S3 store (real SeaweedFS) is resumed by another process."""

from __future__ import annotations

from pathlib import Path

import pytest
from crewai_worker import run_worker

from crewckpt import Store
from crewckpt.testing import crewai_offline  # noqa: F401  (pytest fixture)

pytestmark = [pytest.mark.s3, pytest.mark.crewai]


def test_a_crewai_run_into_s3_is_resumed_by_another_process(crewai_offline: Path,  # noqa: F811
                                                            s3_url: str) -> None:
    done = run_worker(crewai_offline / "worker-a", "run", s3_url)
    assert done.returncode == 0, done.stderr[-2000:]
    with Store.open(s3_url) as s:
        assert len(list(s.log("main"))) == 3
        before = {c.id for c in s.list()}
    done = run_worker(crewai_offline / "worker-b", "resume", s3_url, "main~1")
    assert done.returncode == 0, done.stderr[-2000:]
    with Store.open(s3_url) as s:
        new = [c for c in s.list() if c.id not in before]
        assert new and all(c.trigger == "task_completed" for c in new)
        assert s.info("main~1").id in {c.id for c in s.log(new[-1].id)}  # continues what worker A wrote
    for w in ("worker-a", "worker-b"):  # nothing local: no folder named after the URL
        assert sorted(p.name for p in (crewai_offline / w).iterdir()) == ["crew_script.py"]

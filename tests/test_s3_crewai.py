"""A CrewAI run checkpointed into an S3 store (real SeaweedFS) is resumed by another process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from crewckpt import Store
from crewckpt.testing import crewai_offline  # noqa: F401  (pytest fixture)

pytestmark = [pytest.mark.s3, pytest.mark.crewai]

SCRIPT = """
import sys
import crewckpt.testing as t
from crewckpt.crewai import CheckpointConfig

url = sys.argv[2]
crew = t.research_crew(3, checkpoint=CheckpointConfig(location=url, on_events=["task_completed"]))
if sys.argv[1] == "run":
    crew.kickoff(inputs={"topic": "otters"})
else:
    crew.kickoff(from_checkpoint=CheckpointConfig(location=url, restore_from=url + "#" + sys.argv[3]))
"""


def _python(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(exist_ok=True)
    (cwd / "crew_script.py").write_text(SCRIPT)
    return subprocess.run([sys.executable, str(cwd / "crew_script.py"), *args], cwd=cwd, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)


def test_a_crewai_run_into_s3_is_resumed_by_another_process(crewai_offline: Path,  # noqa: F811
                                                            s3_url: str) -> None:
    done = _python(crewai_offline / "worker-a", "run", s3_url)
    assert done.returncode == 0, done.stderr[-2000:]
    with Store.open(s3_url) as s:
        assert len(list(s.log("main"))) == 3
        before = {c.id for c in s.list()}
    done = _python(crewai_offline / "worker-b", "resume", s3_url, "main~1")
    assert done.returncode == 0, done.stderr[-2000:]
    with Store.open(s3_url) as s:
        new = [c for c in s.list() if c.id not in before]
        assert new and all(c.trigger == "task_completed" for c in new)
        assert s.info("main~1").id in {c.id for c in s.log(new[-1].id)}  # continues what worker A wrote
    for w in ("worker-a", "worker-b"):  # nothing local: no folder named after the URL
        assert sorted(p.name for p in (crewai_offline / w).iterdir()) == ["crew_script.py"]

"""A CrewAI worker in its own process: the 3-task research crew checkpointing on task_completed into a store
given by location, run fresh or resumed from a revision there (tests of shared stores: PostgreSQL, S3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def run_worker(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the crew in a new process in ``cwd`` (created): ``("run", LOCATION)`` or
    ``("resume", LOCATION, REVISION)``. The folder holds only the script, so a test can check that nothing
    was written next to it."""
    cwd.mkdir(exist_ok=True)
    script = cwd / "crew_script.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)

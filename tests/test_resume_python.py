"""Resuming in Python (``kickoff(from_checkpoint=...)``) writes the same checkpoints as ``ckpt resume``.

Real processes: each run is its own interpreter that exits right after ``kickoff`` returns, as a user's
script does, so a checkpoint still queued at exit or a config that stops triggering would show as a lost
commit on the resumed branch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import ckpt, ok

from crewckpt.testing import crewai_offline  # noqa: F401  (pytest fixture)

pytestmark = pytest.mark.crewai

SCRIPT = """
import sys
import crewckpt.testing as t
from crewckpt.crewai import CheckpointConfig

crew = t.research_crew(3, checkpoint=CheckpointConfig(on_events=["*"]))
if sys.argv[1] == "run":
    crew.kickoff(inputs={"topic": "otters"})
else:
    crew.kickoff(from_checkpoint=CheckpointConfig(restore_from=sys.argv[2]))
"""


def _python(cwd: Path, *args: str) -> None:
    script = cwd / "crew_script.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def _new_triggers(store_path: Path, before: set[str]) -> dict[str, list[str | None]]:
    """Branch -> triggers of the commits on it that were not in ``before``, oldest first."""
    from crewckpt import Store

    with Store.open(store_path) as store:
        return {name: [c.trigger for c in reversed(list(store.log(name))) if c.id not in before]
                for name in store.branches() if name != "main"}


def test_python_resume_keeps_the_stored_events_like_ckpt_resume(crewai_offline):  # noqa: F811
    from crewckpt import Store

    _python(crewai_offline, "run")
    with Store.open(".ckpt") as store:
        before = {c.id for c in store.list()}
        assert store.info("main~2").trigger == "agent_execution_completed"

    _python(crewai_offline, "resume", "main~2")
    python_branches = _new_triggers(crewai_offline / ".ckpt", before)
    assert len(python_branches) == 1
    (python_triggers,) = python_branches.values()
    assert python_triggers[-2:] == ["task_completed", "crew_kickoff_completed"], python_triggers

    ok(ckpt(None, "resume", "main~2", "--branch", "cli"))
    cli_triggers = _new_triggers(crewai_offline / ".ckpt", before)["cli"]
    assert python_triggers == cli_triggers


def test_next_step_hints_carry_the_store_named_with_store(crewai_offline, monkeypatch):  # noqa: F811
    import shlex

    from crewckpt import Store
    from crewckpt.crewai import CheckpointConfig
    from crewckpt.testing import research_crew

    store = crewai_offline / "kf" / ".ckpt"
    research_crew(2, checkpoint=CheckpointConfig(location=str(store))).kickoff(inputs={"topic": "otters"})
    elsewhere = crewai_offline / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    out = ok(ckpt(str(store), "fork", "main~1", "--inputs", '{"topic":"seals"}', "--branch", "seals")).stdout
    hint = f"Resume it with: ckpt --store {shlex.quote(str(store))} resume seals"
    assert hint in out.splitlines(), out
    words = shlex.split(hint.split(": ", 1)[1])
    ok(ckpt(words[2], *words[3:]))  # run the printed command from this other folder
    with Store.open(store) as opened:
        assert opened.info("seals").trigger == "task_completed"  # the hint's command resumed the fork

    out = ok(ckpt(str(store), "fork", "main~1", "--branch", "plain")).stdout
    assert f"Resume it with: ckpt --store {shlex.quote(str(store))} resume plain [--inputs JSON]" in out
    monkeypatch.chdir(store.parent)
    out = ok(ckpt(None, "fork", "main~1", "--branch", "here")).stdout
    assert "Resume it with: ckpt resume here [--inputs JSON]" in out  # found from here: no --store needed

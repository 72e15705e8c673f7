"""Hostile checkpoints (issue 8): a callback path stored in an imported (untrusted) CrewAI checkpoint is
never imported as code unless the user opts in with CrewAI's ``CREWAI_DESERIALIZE_CALLBACKS``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from reliability_harness import fixtures_root

from crewckpt.history.store import Store
from crewckpt.views.transfer import import_checkpoints

pytestmark = pytest.mark.crewai

SENTINEL: list[str] = []


def evil(*args: object, **kwargs: object) -> None:
    """Stands for any importable callable (``os.system``); records that it was reached."""
    SENTINEL.append("called")


@pytest.mark.parametrize("target", [f"{__name__}.evil", "os.system", "builtins.exec"])
def test_imported_callback_is_not_resolved_without_opt_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          target: str) -> None:
    from crewckpt.testing import OFFLINE_ENV
    for k, v in OFFLINE_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("CREWAI_DESERIALIZE_CALLBACKS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "src"
    shutil.copytree(fixtures_root() / "crew_default" / ".checkpoints", src)
    victim = max((src / "main").glob("*.json"))
    doc = json.loads(victim.read_text())
    doc["entities"][0]["tasks"][0]["callback"] = target
    victim.write_text(json.dumps(doc))
    store = Store.init(tmp_path / ".ckpt")
    rep = import_checkpoints(store, src)
    cid = dict(rep.imported)[victim.name.split("_p-")[0]]
    store.close()
    from crewckpt.crewai import restore
    SENTINEL.clear()
    with pytest.raises(ValueError, match="CREWAI_DESERIALIZE_CALLBACKS"):
        restore(cid, store=tmp_path / ".ckpt")
    assert SENTINEL == []


UNSAVEABLE_SCRIPT = """
import sys
from crewai import Agent, Crew, Task
from crewckpt.crewai import CheckpointConfig
from crewckpt.testing import ScriptedLLM
agent = Agent(role="r", goal="g", backstory="b", llm=ScriptedLLM())
tasks = [Task(description="d", expected_output="e", agent=agent, callback=lambda out: None)]
crew = Crew(agents=[agent], tasks=tasks, checkpoint=CheckpointConfig(location=sys.argv[1], on_events=["*"]))
crew.kickoff()
"""


def test_one_warning_per_unsaveable_callback(tmp_path: Path) -> None:
    """Issue 11 item 8: a fresh interpreter (default warning filters, no logging set up) prints one line
    about a lambda task callback, not CrewAI's construction warning plus crewckpt's log record plus its
    warning."""
    import os
    import subprocess
    import sys

    from crewckpt.testing import OFFLINE_ENV

    env = {**os.environ, **OFFLINE_ENV, "HOME": str(tmp_path)}
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.run([sys.executable, "-c", UNSAVEABLE_SCRIPT, str(tmp_path / ".ckpt")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    about = [line for line in proc.stderr.splitlines() if "callback" in line.lower() and "Warning" in line
             or line.startswith("crewckpt:")]
    assert len(about) == 1, proc.stderr
    assert "UnserializableFieldWarning" in about[0] and "Task.callback" in about[0]
    doc = Store.open(tmp_path / ".ckpt").read("HEAD")
    assert doc["entities"][0]["tasks"][0]["callback"] is None

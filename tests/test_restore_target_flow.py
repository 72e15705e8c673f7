"""Flow resume from `ckpt resume` and the TUI runs the flow's remaining methods (issue 11 item 2): the flow
class is recorded with each checkpoint and imported again; when it cannot be, restoring says so in one line
naming the class path. Real CrewAI 1.15.30 flows in real processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from crewckpt.testing import crewai_offline  # noqa: F401  (pytest fixture)

pytestmark = pytest.mark.crewai

CKPT = [sys.executable, "-c", "from crewckpt.cli.main import main; main()"]

FLOW_MODULE = textwrap.dedent('''
    import os

    from crewai.flow.flow import Flow, listen, start
    from pydantic import BaseModel


    class Steps(BaseModel):
        id: str = ""
        steps: list[str] = []


    class OtterFlow(Flow[Steps]):
        @start()
        def gather(self) -> str:
            self.state.steps.append("gather")
            return "gathered"

        @listen(gather)
        def draft(self, _: str) -> str:
            if os.environ.get("OTTER_FAIL"):
                raise RuntimeError("the draft step failed")
            self.state.steps.append("draft")
            return "drafted"

        @listen(draft)
        def polish(self, _: str) -> str:
            self.state.steps.append("polish")
            return "polished"
''')

RUN = textwrap.dedent('''
    import sys
    from crewckpt.crewai import CheckpointConfig
    from {module} import OtterFlow
    try:
        OtterFlow(checkpoint=CheckpointConfig(on_events=["method_execution_finished"])).kickoff()
    except RuntimeError:
        sys.exit(3)
''')


def crashed_flow(folder: Path, module: str) -> str:
    """Write ``module`` in ``folder``, run its flow there until its second method fails; the checkpoint."""
    from crewckpt import Store

    (folder / f"{module}.py").write_text(FLOW_MODULE)
    env = {**__import__("os").environ, "OTTER_FAIL": "1"}
    proc = subprocess.run([sys.executable, "-c", RUN.format(module=module)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 3, proc.stderr[-3000:]
    with Store.open(folder / ".ckpt") as store:
        (commit,) = store.list()
        assert store.info(commit.id).meta == {"flow_class": f"{module}.OtterFlow"}
        return commit.id


def steps(folder: Path, rev: str) -> list[str]:
    from crewckpt import Store

    with Store.open(folder / ".ckpt") as store:
        flow = next(e for e in store.read(rev)["entities"] if e["entity_type"] == "flow")
    return flow["checkpoint_state"]["steps"]


def test_ckpt_resume_runs_the_flow_and_names_a_missing_class(crewai_offline):  # noqa: F811
    crashed = crashed_flow(crewai_offline, "otterflow")
    assert steps(crewai_offline, crashed) == ["gather"]
    sub = crewai_offline / "sub"  # the flow's module is beside the store, not in the working folder
    sub.mkdir()
    proc = subprocess.run([*CKPT, "resume", "--json"], cwd=sub, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = orjson.loads(proc.stdout)
    assert record["entity"] == "OtterFlow" and record["output"] == "polished"
    assert record["head"] != crashed and steps(crewai_offline, record["head"]) == ["gather", "draft", "polish"]

    (crewai_offline / "otterflow.py").rename(crewai_offline / "renamed.py")
    proc = subprocess.run([*CKPT, "resume", crashed[:12]], cwd=crewai_offline, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "otterflow.OtterFlow" in lines[0] and "renamed or removed" in lines[0]


def test_tui_resume_runs_the_flow(crewai_offline, monkeypatch):  # noqa: F811
    from crewckpt.tui import run
    from crewckpt.tui.app import CheckpointBrowser
    from crewckpt.tui.runner import RunPlan

    crashed = crashed_flow(crewai_offline, "otterflow_tui")
    monkeypatch.setattr(sys, "path", list(sys.path))  # the restore may add the store's folder
    monkeypatch.delitem(sys.modules, "otterflow_tui", raising=False)
    monkeypatch.setattr(CheckpointBrowser, "run", lambda self: RunPlan("resume", crashed))
    printed: list[str] = []
    try:
        run(str(crewai_offline / ".ckpt"), echo=printed.append)
    finally:
        sys.modules.pop("otterflow_tui", None)
    assert printed[0] == f"Resuming OtterFlow from {crashed[:12]}" and "polished" in printed
    head = printed[-1].split("Done: latest checkpoint ")[1].split()[0]
    assert steps(crewai_offline, head) == ["gather", "draft", "polish"]

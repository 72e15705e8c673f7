"""Flow resume from `ckpt resume` and the TUI runs the flow's remaining methods (issue 11 item 2): the flow
class is recorded with each checkpoint and imported again once the user opts in (--flow-class, or
CREWAI_DESERIALIZE_CALLBACKS=1; tests/test_flow_class_opt_in.py has the refusals); when it cannot be,
restoring says so in one line naming the class path. Real CrewAI 1.15.30 flows in real processes."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
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


_CRASHED: dict[str, Path] = {}  # module name -> a folder holding its crashed run (module file, .ckpt), pristine


def crashed_flow(folder: Path, module: str) -> str:
    """Write ``module`` in ``folder``, run its flow there until its second method fails; the checkpoint.
    The run (a process: ~7 s of CrewAI start-up) happens once per module name and session; each caller
    gets a copy of its folder (the same store, the same commit id)."""
    from crewckpt import Store

    ran = _CRASHED.get(module)
    if ran is None:
        ran = Path(tempfile.mkdtemp(prefix=f"crashed-{module}-"))
        atexit.register(shutil.rmtree, ran, True)
        (ran / f"{module}.py").write_text(FLOW_MODULE)
        env = {**os.environ, "OTTER_FAIL": "1"}
        proc = subprocess.run([sys.executable, "-c", RUN.format(module=module)], cwd=ran, env=env,
                              capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 3, proc.stderr[-3000:]
        _CRASHED[module] = ran
    shutil.copyfile(ran / f"{module}.py", folder / f"{module}.py")
    shutil.copytree(ran / ".ckpt", folder / ".ckpt")
    with Store.open(folder / ".ckpt") as store:
        (commit,) = store.list()
        assert store.info(commit.id).meta == {"flow_class": f"{module}.OtterFlow"}
        return commit.id


def steps(folder: Path, rev: str) -> list[str]:
    from crewckpt import Store

    with Store.open(folder / ".ckpt") as store:
        flow = next(e for e in store.read(rev)["entities"] if e["entity_type"] == "flow")
    return flow["checkpoint_state"]["steps"]


def test_ckpt_resume_runs_the_flow_and_names_a_missing_class(crewai_offline, monkeypatch):  # noqa: F811
    monkeypatch.delenv("CREWAI_DESERIALIZE_CALLBACKS", raising=False)
    crashed = crashed_flow(crewai_offline, "otterflow")
    assert steps(crewai_offline, crashed) == ["gather"]
    sub = crewai_offline / "sub"  # the flow's module is beside the store, not in the working folder
    sub.mkdir()
    proc = subprocess.run([*CKPT, "resume", "--flow-class", "otterflow.OtterFlow"], cwd=sub,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 1  # the store's folder is not searched: only sys.path and the working folder
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "otterflow.OtterFlow" in lines[0] and "renamed or removed" in lines[0]
    assert steps(crewai_offline, "HEAD") == ["gather"]  # nothing ran, nothing written

    proc = subprocess.run([*CKPT, "resume", "--json", "--flow-class", "otterflow.OtterFlow"],
                          cwd=crewai_offline, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = orjson.loads(proc.stdout)
    assert record["entity"] == "OtterFlow" and record["output"] == "polished"
    assert record["head"] != crashed and steps(crewai_offline, record["head"]) == ["gather", "draft", "polish"]

    (crewai_offline / "otterflow.py").rename(crewai_offline / "renamed.py")
    for opt_in, env in (([], {"CREWAI_DESERIALIZE_CALLBACKS": "1"}), (["--flow-class", "otterflow.OtterFlow"], {})):
        proc = subprocess.run([*CKPT, "resume", crashed[:12], *opt_in], cwd=crewai_offline, capture_output=True,
                              text=True, timeout=600, check=False, env={**os.environ, **env})
        assert proc.returncode == 1
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "otterflow.OtterFlow" in lines[0] and "renamed or removed" in lines[0]
    # the fix for a renamed class: name it
    proc = subprocess.run([*CKPT, "resume", crashed[:12], "--flow-class", "renamed.OtterFlow", "--json"],
                          cwd=crewai_offline, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert orjson.loads(proc.stdout)["output"] == "polished"


def test_tui_resume_runs_the_flow(crewai_offline, monkeypatch):  # noqa: F811
    from crewckpt.errors import CkptError
    from crewckpt.tui import run
    from crewckpt.tui.app import CheckpointBrowser
    from crewckpt.tui.runner import RunPlan

    crashed = crashed_flow(crewai_offline, "otterflow")
    monkeypatch.setattr(sys, "path", list(sys.path))  # the restore may add the working folder
    monkeypatch.delitem(sys.modules, "otterflow", raising=False)
    monkeypatch.setattr(CheckpointBrowser, "run", lambda self: RunPlan("resume", crashed))
    monkeypatch.delenv("CREWAI_DESERIALIZE_CALLBACKS", raising=False)
    printed: list[str] = []
    try:
        with pytest.raises(CkptError) as refused:  # no terminal to ask on, no opt-in: nothing imported
            run(str(crewai_offline / ".ckpt"), echo=printed.append)
        assert "otterflow" not in sys.modules and printed == []
        text = str(refused.value)
        assert "\n" not in text and "otterflow.OtterFlow" in text and "--flow-class" in text
        assert "CREWAI_DESERIALIZE_CALLBACKS=1" in text

        monkeypatch.setenv("CREWAI_DESERIALIZE_CALLBACKS", "1")
        run(str(crewai_offline / ".ckpt"), echo=printed.append)
    finally:
        sys.modules.pop("otterflow", None)
    assert printed[0] == f"Resuming OtterFlow from {crashed[:12]}" and "polished" in printed
    head = printed[-1].split("Done: latest checkpoint ")[1].split()[0]
    assert steps(crewai_offline, head) == ["gather", "draft", "polish"]

"""A checkpoint is data (issue 12 item 1, issue 11 item 2): `ckpt resume` imports the Flow class a checkpoint's
metadata names only when the user opted in (--flow-class, CREWAI_DESERIALIZE_CALLBACKS=1, or a yes at the
prompt on a terminal); without it, one line naming the class and both opt-ins, exit 1, nothing imported. A
module planted beside a received store is never searched. Real CLI processes on a real flow checkpoint."""

from __future__ import annotations

import os
import select
import subprocess
import time
from pathlib import Path

import pytest
from test_restore_target_flow import CKPT, FLOW_MODULE, crashed_flow

from crewckpt import Store
from crewckpt.testing import crewai_offline  # noqa: F401  (pytest fixture)

pytestmark = pytest.mark.crewai

HOSTILE = '''
from pathlib import Path

Path({marker!r}).write_text("imported")  # what a hostile module would do: run code at import
'''


def hostile_checkpoint(folder: Path, class_path: str = "hostile_mod.Evil") -> tuple[str, Path]:
    """A real flow checkpoint in ``folder/.ckpt`` re-committed on branch ``hostile`` with metadata naming
    ``class_path``, and ``folder/hostile_mod.py`` that writes a marker when imported; (commit, marker)."""
    crashed = crashed_flow(folder, "otterflow")
    marker = folder / "imported.marker"
    (folder / "hostile_mod.py").write_text(HOSTILE.format(marker=str(marker))
                                           + FLOW_MODULE.replace("OtterFlow", "Evil"))
    with Store.open(folder / ".ckpt") as store:
        commit = store.commit(store.read(crashed), branch="hostile", parents=[crashed],
                              meta={"flow_class": class_path})
    return commit, marker


def ckpt(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "CREWAI_DESERIALIZE_CALLBACKS"}
    return subprocess.run([*CKPT, *args], cwd=cwd, env={**full, **env}, capture_output=True, text=True,
                          timeout=600, check=False, stdin=subprocess.DEVNULL)


def assert_refused(proc: subprocess.CompletedProcess[str], class_path: str) -> None:
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert class_path in lines[0] and f"--flow-class {class_path}" in lines[0]
    assert "CREWAI_DESERIALIZE_CALLBACKS=1" in lines[0] and "not imported" in lines[0]


def test_recorded_flow_class_is_not_imported_without_opt_in(crewai_offline):  # noqa: F811
    commit, marker = hostile_checkpoint(crewai_offline)
    for args in (["resume", "hostile"], ["resume", "hostile", "--json"], ["resume", commit[:12], "--branch", "x"]):
        proc = ckpt(crewai_offline, *args)
        assert_refused(proc, "hostile_mod.Evil")
        assert not marker.exists() and proc.stdout == ""
    with Store.open(crewai_offline / ".ckpt") as store:
        assert store.resolve("hostile") == commit and "x" not in store.branches()  # nothing written


def test_a_stdlib_module_named_by_a_checkpoint_is_not_imported(crewai_offline):  # noqa: F811
    hostile_checkpoint(crewai_offline, "this.Zen")
    proc = ckpt(crewai_offline, "resume", "hostile")
    assert_refused(proc, "this.Zen")
    assert "Zen of Python" not in proc.stdout + proc.stderr  # `import this` prints it


def test_flow_class_option_and_env_var_import_and_run(crewai_offline):  # noqa: F811
    commit, marker = hostile_checkpoint(crewai_offline)
    proc = ckpt(crewai_offline, "resume", "hostile", "--flow-class", "hostile_mod.Evil")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert marker.read_text() == "imported" and "Resumed Evil" in proc.stdout and "polished" in proc.stdout
    marker.unlink()
    proc = ckpt(crewai_offline, "resume", commit[:12], "--branch", "env", CREWAI_DESERIALIZE_CALLBACKS="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert marker.read_text() == "imported" and "Resumed Evil" in proc.stdout


def test_a_module_beside_a_received_store_is_never_searched(crewai_offline):  # noqa: F811
    received = crewai_offline / "received"
    received.mkdir()
    _, marker = hostile_checkpoint(received)
    project = crewai_offline / "project"
    project.mkdir()
    store = str(received / ".ckpt")
    for args, env in ((["--flow-class", "hostile_mod.Evil"], {}), ([], {"CREWAI_DESERIALIZE_CALLBACKS": "1"}),
                      ([], {})):
        proc = ckpt(project, "--store", store, "resume", "hostile", *args, **env)
        assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "hostile_mod" in proc.stderr and "renamed or removed" in proc.stderr
        assert not marker.exists()


def _converse(proc: subprocess.Popen[bytes], master: int, answer: bytes, deadline_s: float = 300) -> str:
    """Read the pty until the prompt shows, answer it, then read to the end; everything read, decoded."""
    seen = b""
    answered = False
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed its side
                break
            if not chunk:
                break
            seen += chunk
        if not answered and b"[y/N]" in seen:
            os.write(master, answer)
            answered = True
        if answered and proc.poll() is not None and not ready:
            break
    proc.wait(timeout=60)
    return seen.decode(errors="replace")


@pytest.mark.parametrize("answer", [b"n\n", b"y\n"])
def test_on_a_terminal_resume_asks_before_importing(crewai_offline, answer):  # noqa: F811
    _, marker = hostile_checkpoint(crewai_offline)
    master, slave = os.openpty()
    env = {k: v for k, v in os.environ.items() if k != "CREWAI_DESERIALIZE_CALLBACKS"}
    try:
        proc = subprocess.Popen([*CKPT, "resume", "hostile"], cwd=crewai_offline, env=env, stdin=slave,
                                stdout=slave, stderr=slave)
        os.close(slave)
        seen = _converse(proc, master, answer)
    finally:
        os.close(master)
    assert "Resume imports flow class hostile_mod.Evil (module file " in seen
    assert str(crewai_offline / "hostile_mod.py") in seen and "Import it? [y/N]" in seen
    if answer == b"n\n":
        assert proc.returncode == 1 and not marker.exists() and "not imported" in seen
    else:
        assert proc.returncode == 0, seen[-3000:]
        assert marker.read_text() == "imported" and "polished" in seen

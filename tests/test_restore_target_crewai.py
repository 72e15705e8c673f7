"""Coming from CrewAI in one step (issue 11 item 7): CrewAI JSON files and SQLite dbs restore through
crewckpt's config (imported on the fly into the config's store), `ckpt` on a CrewAI folder or db points at
`ckpt import` (or offers it in the browser), never at `ckpt init` inside it, and the CrewAI habits
``location="./x.db"`` and ``provider=JsonProvider()`` get one clear line each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import ckpt, ok
from crewai_fixtures import FIXTURES

# crewckpt.testing first: it sets CrewAI's offline variables and registers ScriptedLLM for restore.
from crewckpt.testing import crewai_offline, research_crew  # noqa: F401  (crewai_offline: pytest fixture)

pytestmark = pytest.mark.crewai

CKPT = [sys.executable, "-c", "from crewckpt.cli.main import main; main()"]


def ckpt_proc(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CKPT, *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


def crewai_exports(root: Path) -> tuple[Path, Path, list[str]]:
    """A 3-task run exported as CrewAI's JSON folder ``root/cw/.checkpoints`` and SQLite db
    ``root/cw/runs.db``; returns them and the run's commit ids (oldest first). The run's own store is
    elsewhere (``root/origin``)."""
    from crewckpt import Store
    from crewckpt.crewai import CheckpointConfig
    from crewckpt.views import transfer

    origin = root / "origin"
    research_crew(3, checkpoint=CheckpointConfig(location=str(origin))).kickoff(inputs={"topic": "otters"})
    cw = root / "cw"
    cw.mkdir()
    with Store.open(origin) as store:
        transfer.export_checkpoints(store, cw / ".checkpoints", fmt="json")
        transfer.export_checkpoints(store, cw / "runs.db", fmt="sqlite")
        ids = [c.id for c in store.log("main")][::-1]
    return cw / ".checkpoints", cw / "runs.db", ids


def first_checkpoint(folder: Path) -> tuple[Path, str]:
    """The JSON file of the run's first checkpoint (one task done) and its CrewAI id."""
    (path,) = folder.glob("main/*_p-none.json")
    return path, path.name.split("_p-")[0]


def test_restore_from_crewai_json_and_sqlite_continues_in_the_crewckpt_store(crewai_offline):  # noqa: F811
    from crewai import Crew

    from crewckpt import Store
    from crewckpt.crewai import CheckpointConfig

    folder, db, _ = crewai_exports(crewai_offline)
    work = crewai_offline / "work"
    work.mkdir()
    os.chdir(work)
    json_files = sorted(p.name for p in folder.rglob("*.json"))
    path, crewai_id = first_checkpoint(folder)

    research_crew(3).kickoff(from_checkpoint=CheckpointConfig(restore_from=os.path.relpath(path)))
    with Store.open(work / ".ckpt") as store:
        imported = store.resolve(crewai_id)  # the CrewAI id is an alias of the imported commit
        run = [c for c in store.list() if c.id != imported]
        assert len(run) == 2 and {c.summary["tasks_done"] for c in run} == {2, 3}
        assert any(c.parents == (imported,) for c in run)
    assert sorted(p.name for p in folder.rglob("*.json")) == json_files  # nothing written to CrewAI's folder

    Crew.from_checkpoint(CheckpointConfig(restore_from=f"{db}#{crewai_id}")).kickoff()
    Crew.from_checkpoint(CheckpointConfig(location=str(work / "b"), restore_from=str(db))).kickoff()
    with Store.open(work / ".ckpt") as store:
        assert len(store.list()) == 1 + 2 + 2  # the same checkpoint again: imported once, run again
    with Store.open(work / "b") as store:
        assert [c.summary["tasks_done"] for c in store.list()] == [3]  # the db's newest checkpoint, nothing left


def test_crewai_habits_get_one_clear_line(crewai_offline):  # noqa: F811
    from crewai.state.provider.json_provider import JsonProvider
    from pydantic import ValidationError

    from crewckpt.crewai import CheckpointConfig

    with pytest.raises(ValidationError, match=r"a crewckpt store is a folder.*view='\./x\.db'"):
        CheckpointConfig(location="./x.db")
    assert not (crewai_offline / "x.db").exists()
    with pytest.raises(ValidationError, match=r"view='\./\.checkpoints'"):
        CheckpointConfig(provider=JsonProvider())


def test_ckpt_on_a_crewai_folder_points_at_import_and_imports_in_one_step(crewai_offline):  # noqa: F811
    from crewckpt import Store

    folder, db, ids = crewai_exports(crewai_offline)
    cw = folder.parent
    for target in (folder, db):
        proc = ckpt_proc(crewai_offline, "--store", str(target), "log")
        assert proc.returncode == 1
        (line,) = proc.stderr.strip().splitlines()
        assert f"`ckpt import {target}`" in line and "ckpt init" not in line
    assert not (folder / "store.db").exists()
    proc = ckpt_proc(cw, "log")
    assert proc.returncode == 1 and "import them with `ckpt import ./.checkpoints`" in proc.stderr

    proc = ckpt_proc(cw, "import", "./.checkpoints")  # no store yet: created, then imported
    assert proc.returncode == 0, proc.stderr
    with Store.open(cw / ".ckpt") as store:
        assert len(store.list()) == len(ids)


def test_browser_on_a_crewai_folder_offers_to_import_it(crewai_offline):  # noqa: F811
    from crewckpt import Store
    from crewckpt.cli.cmd_tui import tui_store_path
    from crewckpt.errors import StoreNotFound

    folder, _db, ids = crewai_exports(crewai_offline)
    asked: list[str] = []
    with pytest.raises(StoreNotFound, match="ckpt import"):
        tui_store_path(str(folder), confirm=lambda q: asked.append(q) or False)
    assert not (crewai_offline / ".ckpt").exists() and "Import it into" in asked[0]
    dest = tui_store_path(str(folder), confirm=lambda q: True)
    assert dest == str(crewai_offline / ".ckpt") and not (folder / "store.db").exists()
    with Store.open(dest) as store:
        assert len(store.list()) == len(ids)


def test_restore_from_a_missing_path_says_the_file_does_not_exist(crewai_offline):  # noqa: F811
    from crewai import Crew

    from crewckpt import Store
    from crewckpt.crewai import CheckpointConfig
    from crewckpt.errors import UnknownRevision

    research_crew(1, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    for missing in (str(crewai_offline / "none.json"), "./gone/x.db", "/no/such/store#main", "../nope.sqlite"):
        with pytest.raises(UnknownRevision, match=r"the file '.*' does not exist; give an existing CrewAI"):
            research_crew(1).kickoff(from_checkpoint=CheckpointConfig(restore_from=missing))
    with pytest.raises(UnknownRevision, match=r"'exp/b'.*does not exist"):  # neither a file nor a branch
        Crew.from_checkpoint(CheckpointConfig(restore_from="exp/b"))
    with Store.open(".ckpt") as store:
        store.create_branch("exp/a", "main")
    assert Crew.from_checkpoint(CheckpointConfig(restore_from="exp/a")) is not None  # a branch with a slash


def test_resume_with_an_unregistered_llm_type_names_it_and_the_fix(crewai_offline):  # noqa: F811
    import shutil

    shutil.copytree(FIXTURES / "crew_default" / ".checkpoints", crewai_offline / "cp")
    ok(ckpt(None, "import", "cp"))
    bad = ckpt(None, "resume", "main~1")
    assert bad.exit_code == 1
    (line,) = bad.stderr.strip().splitlines()
    assert "unknown llm_type 'fake': no LLM class is registered" in line
    assert "_LLM_TYPE_REGISTRY['fake']" in line and "crewckpt.testing" in line and "agent.llm" in line
    assert "validation errors for RuntimeState" not in line and "…" not in line


def test_other_validation_errors_give_the_count_and_the_first_one():
    from pydantic import BaseModel, ValidationError

    from crewckpt.cli.cmd_crewai import _restore_problem

    class Doc(BaseModel):
        a: int
        b: int

    with pytest.raises(ValidationError) as caught:
        Doc.model_validate({"a": "x", "b": "y"})
    assert _restore_problem(caught.value) == (
        "2 validation errors for Doc; first: a: Input should be a valid integer, unable to parse string as an "
        "integer")

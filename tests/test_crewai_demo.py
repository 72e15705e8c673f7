"""scripts/demo.py end to end, as a user runs it (a real process, offline)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from crewckpt import Store
from crewckpt.backends.base import writing

pytestmark = pytest.mark.crewai

ROOT = Path(__file__).resolve().parents[1]


def run_demo(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(cwd), "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180, check=False)


def check_demo_output(done: subprocess.CompletedProcess[str]) -> None:
    """The demo ran to the end, printed every step, and showed none of CrewAI's crash output."""
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "run failed in task 4" in out
    assert "-> 3 LLM calls (tasks 4-6 only)" in out
    assert "-> 4 LLM calls" in out and "sea otters" in out
    assert re.search(r"\(main\)", out) and re.search(r"\(sea-otters\)", out)
    assert re.search(r"≠ task3 .*otters.*sea otters", out)
    ours = int(re.search(r"crewckpt +(\d+) checkpoints", out).group(1))
    theirs = int(re.search(r"CrewAI +(\d+) JSON files", out).group(1))
    assert theirs == ours  # CrewAI's side is counted from the same checkpoints: none lost to its pool writer
    ratio = float(re.search(r"crewckpt stores ([0-9.]+)x fewer bytes", out).group(1))
    assert ratio > 5
    for noise in ("panicked", "Traceback", "StopIteration", "dictionary changed size"):
        assert noise not in out and noise not in done.stderr


def test_demo_crashes_resumes_forks_and_compares_and_reruns(tmp_path: Path) -> None:
    first = run_demo(tmp_path)
    check_demo_output(first)
    store = Store.open(tmp_path / ".ckpt")
    assert set(store.branches()) == {"main", "sea-otters"}
    assert store.read("sea-otters")["entities"][0]["checkpoint_inputs"] == {"topic": "sea otters"}
    first_ids = {c.id for c in store.list()}
    store.close()

    again = run_demo(tmp_path)  # the README line run a second time in the same folder
    check_demo_output(again)
    assert f"demo: replaced an earlier demo run's store at {tmp_path / '.ckpt'} ({len(first_ids)} checkpoints)" \
        in again.stdout.splitlines()[0]
    store = Store.open(tmp_path / ".ckpt")
    assert set(store.branches()) == {"main", "sea-otters"}
    rerun = store.list()
    assert len(rerun) == len(first_ids) and not first_ids & {c.id for c in rerun}  # afresh, not appended


def test_demo_leaves_a_store_it_did_not_write_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("crewckpt_demo", ROOT / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)  # in this process: the refusal comes before any crew runs
    mine = Store.init(tmp_path / ".ckpt")
    cid = mine.commit({"step": 1})
    mine.close()
    before = sorted((p.name, p.read_bytes()) for p in (tmp_path / ".ckpt").iterdir() if p.is_file())
    assert demo.main(["--store", str(tmp_path / ".ckpt")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        (f"demo: {tmp_path / '.ckpt'} exists and was not written by this demo; run with --reset to replace it "
         "or --store DIR to use another folder")]
    assert sorted((p.name, p.read_bytes()) for p in (tmp_path / ".ckpt").iterdir() if p.is_file()) == before
    assert Store.open(tmp_path / ".ckpt").resolve("main") == cid


def load_demo() -> Any:
    spec = importlib.util.spec_from_file_location("crewckpt_demo", ROOT / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


def fake_demo_store(demo: Any, path: Path) -> Store:
    """A store shaped like the demo's (a main chain, a sea-otters fork), with the marker a finished demo run
    writes: what the store holds at its end."""
    store = Store.init(path)
    first = store.commit({"step": 1}, run_id="r1")
    store.commit({"step": 2}, run_id="r1")
    store.commit({"step": 3}, branch="sea-otters", parents=[first], run_id="r2")
    demo.write_marker(path, demo.store_record(store))
    return store


def files(folder: Path) -> list[tuple[str, bytes]]:
    return sorted((p.name, p.read_bytes()) for p in folder.iterdir() if p.is_file())


def test_demo_rerun_keeps_a_demo_store_the_user_added_to(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo, path = load_demo(), tmp_path / ".ckpt"
    store = fake_demo_store(demo, path)
    # as a user resuming into the demo store: one commit on main, two new branches
    store.commit({"step": 4})
    store.commit({"step": 5}, branch="main-from-4da8cdfc", parents=["main~1"])
    store.create_branch("sea-otters-from-7939bab0", "sea-otters")
    ids = {c.id for c in store.list()}
    store.close()
    before = files(path)
    assert demo.main(["--store", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"demo: left {path} as it is: it changed since the demo wrote it (2 checkpoints, 2 branches and 1 run "
        f"added; branch main moved), so a rerun would lose that; {FIX}"]
    assert files(path) == before
    again = Store.open(path)
    assert {c.id for c in again.list()} == ids
    assert set(again.branches()) == {"main", "sea-otters", "main-from-4da8cdfc", "sea-otters-from-7939bab0"}
    again.close()


FIX = ("pass --store NEW_DIR for a fresh demo store elsewhere, or delete that folder yourself (or pass --reset) to "
       "run the demo there again")


def test_demo_rerun_after_a_resume_and_a_prune_says_what_changed_in_one_sentence(tmp_path: Path) -> None:
    """The user resumed in the demo store (a new branch and run) and pruned main: the refusal says what was
    added and what went in one parenthesis, then the fix (it was a garbled "... not written by the demo, and
    ref refs/runs/... deleted and 4 demo checkpoints removed; nothing was changed: ..."); a run's ref goes
    with its pruned checkpoints, so it is "gone", not "deleted" (the user deleted nothing)."""
    demo, path = load_demo(), tmp_path / ".ckpt"
    store = Store.init(path)
    first = store.commit({"step": 1}, run_id="run-a")
    for i in range(2, 6):
        store.commit({"step": i}, branch="main", run_id="run-a")
    store.commit({"step": 3}, branch="sea-otters", parents=[first], run_id="run-b")
    demo.write_marker(path, demo.store_record(store))
    store.commit({"step": 9}, branch="main-from-x", parents=["sea-otters"], run_id="run-u")
    store.commit({"step": 10}, branch="main-from-x", run_id="run-u")
    assert len(store.prune("main", keep=1)) == 3  # `first` stays: the forks' history
    with writing(store.backend) as w:  # as a prune that also drops a run's ref
        w.set_ref_if_equals("refs/runs/run-b", w.get_ref("refs/runs/run-b"), None)
    store.close()
    before = files(path)
    with pytest.raises(demo.NotOurs) as e:
        demo.prepare_store(path, reset=False)
    assert str(e.value) == (
        f"demo: left {path} as it is: it changed since the demo wrote it (2 checkpoints, 1 branch and 1 run added; "
        f"run run-b gone; 3 demo checkpoints removed), so a rerun would lose that; {FIX}")
    assert files(path) == before


@pytest.mark.parametrize("change", ["branch", "deleted", "renamed", "none"])
def test_demo_rerun_replaces_only_exactly_its_own_store(tmp_path: Path, change: str) -> None:
    demo, path = load_demo(), tmp_path / ".ckpt"
    store = fake_demo_store(demo, path)
    if change == "branch":  # a bare branch: no new commit, but a ref the user made
        store.create_branch("keep-me", "main~1")
    elif change == "deleted":  # nothing new, but the store is not what the demo left
        store.delete_branch("sea-otters")
    elif change == "renamed":
        store.rename_branch("main", "mine")
    store.close()
    before = files(path)
    if change == "none":
        assert demo.prepare_store(path, reset=False) == \
            f"demo: replaced an earlier demo run's store at {path} (3 checkpoints); --store DIR keeps runs apart"
        assert not path.exists()
        return
    with pytest.raises(demo.NotOurs, match=r"changed since the demo wrote it \((1 branch added|branch sea-otters "
                                           r"deleted|1 branch added; branch main deleted)\)"):
        demo.prepare_store(path, reset=False)
    assert files(path) == before
    assert demo.prepare_store(path, reset=True) is not None and not path.exists()  # --reset still deletes it


@pytest.mark.parametrize("reset", [True, False])
def test_demo_never_deletes_a_folder_holding_files_that_are_not_the_stores(tmp_path: Path, reset: bool) -> None:
    # before: `demo.py --store . --reset` in a project folder deleted the whole folder, the user's files too
    demo, path = load_demo(), tmp_path / ".ckpt"
    fake_demo_store(demo, path).close()
    (path / "notes.txt").write_text("important\n")
    (path / "sub").mkdir()
    before = files(path)
    with pytest.raises(demo.NotOurs) as e:
        demo.prepare_store(path, reset=reset)
    assert str(e.value) == (f"demo: left {path} as it is: it holds files that are not a crewckpt store's (notes.txt, "
                            f"sub); pass --store NEW_DIR for the demo store")
    assert files(path) == before and (path / "notes.txt").read_text() == "important\n"
    lone = tmp_path / "report.md"
    lone.write_text("mine\n")
    with pytest.raises(demo.NotOurs, match="it is a file, not a store folder"):
        demo.prepare_store(lone, reset=True)
    assert lone.read_text() == "mine\n"


def test_demo_rerun_keeps_a_store_whose_demo_run_did_not_record(tmp_path: Path) -> None:
    demo, path = load_demo(), tmp_path / ".ckpt"
    fake_demo_store(demo, path).close()
    (path / demo.MARKER).write_text("Written by scripts/demo.py: running the demo again replaces this store.\n")
    before = files(path)
    with pytest.raises(demo.NotOurs, match="did not record its checkpoints .*delete that folder yourself"):
        demo.prepare_store(path, reset=False)
    assert files(path) == before


def test_the_demos_crewai_files_and_diff_use_crewais_json_not_the_stored_shape(tmp_path: Path) -> None:
    """Stored CrewAI tasks name their agent by reference; the JSON files the demo compares against, and its
    diff, must be CrewAI's own JSON (references expanded), as `ckpt export` and `ckpt diff` give."""
    import json

    from crewckpt.views.document import CREWAI, crewai_json

    spec = importlib.util.spec_from_file_location("crewckpt_demo", ROOT / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    agent = {"role": "Researcher", "goal": "g"}
    doc = {"entities": [{"entity_type": "crew", "name": "c", "agents": [agent],
                         "tasks": [{"name": "t1", "agent": {"$ref": "#/entities/0/agents/0"}}]}],
           "$crewckpt": {"agent_refs": [0]}}
    with Store.init(tmp_path / ".ckpt") as store:
        store.commit(doc, profile=CREWAI)
        files, _ = demo.crewai_json_output(store, tmp_path / "json")
        written = [json.loads(p.read_text()) for p in (tmp_path / "json").rglob("*.json")]
    assert files == 1 and written == [crewai_json(doc)]
    assert written[0]["entities"][0]["tasks"][0]["agent"] == agent and "$crewckpt" not in written[0]


def test_demo_takes_an_empty_folder_and_does_not_offer_reset_where_reset_is_refused(tmp_path: Path) -> None:
    # fresh-user trial: `mkdir runs && demo.py --store runs` was refused ("not written by this demo"), and a
    # folder holding the user's files was told to "run with --reset", which then refused it too
    demo = load_demo()
    empty = tmp_path / "runs"
    empty.mkdir()
    assert demo.prepare_store(empty, reset=False) is None and empty.is_dir()
    mixed = tmp_path / "project"
    mixed.mkdir()
    (mixed / "keep.txt").write_text("mine\n")
    with pytest.raises(demo.NotOurs) as e:
        demo.prepare_store(mixed, reset=False)
    assert "--reset" not in str(e.value) and "holds files that are not a crewckpt store's (keep.txt)" in str(e.value)
    assert (mixed / "keep.txt").read_text() == "mine\n"

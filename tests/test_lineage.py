"""Lineage (issue 11 item 3): a fresh kickoff starts a new lineage as CrewAI does, earlier runs keep a name,
imports of continuations never leave a tip unnamed, and `ckpt branch` / `ckpt reflog` agree on the branch
the next checkpoint goes to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import ckpt, fixture_doc, ndjson, ok

from crewckpt import Store
from crewckpt.backends.base import writing
from crewckpt.errors import UnknownRevision
from crewckpt.history import refnames
from crewckpt.testing import crewai_offline  # noqa: F401  (the fixture)
from crewckpt.views.exporter import export_crewai
from crewckpt.views.importer import import_crewai


def _names_of(store: Store) -> dict[str, list[str]]:
    """commit id -> every branch or run ref naming it."""
    names: dict[str, list[str]] = {}
    for b, tip in store.branches().items():
        names.setdefault(tip, []).append(b)
    for r, tip in store.runs().items():
        names.setdefault(tip, []).append(refnames.RUNS + r)
    return names


# -- the CrewAI writer -----------------------------------------------------------------------------------


@pytest.mark.crewai
@pytest.mark.usefixtures("crewai_offline")
def test_a_fresh_kickoff_is_a_root_and_the_earlier_run_keeps_its_run_ref():
    from crewckpt.crewai import CheckpointConfig
    from crewckpt.testing import research_crew

    research_crew(2, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    store = Store.open(".ckpt")
    first = [c.id for c in store.list()]
    first_run = store.info(first[-1]).run_id
    research_crew(2, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "owls"})
    second = [c.id for c in store.list()][len(first):]
    assert len(first) == len(second) == 2
    assert store.info(second[0]).parents == ()  # CrewAI's rule: a fresh kickoff has no parent
    assert store.read(second[0])["parent_id"] is None
    assert store.branches()["main"] == second[-1]
    assert store.resolve("main~1") == second[0]
    with pytest.raises(UnknownRevision, match="goes past the first checkpoint"):
        store.resolve("main~2")  # never walks into the unrelated earlier run
    # the earlier run stays listed and reachable by name
    assert store.runs()[first_run] == first[-1]
    assert store.resolve(f"refs/runs/{first_run}") == first[-1]
    assert store.resolve("main@{2}") == first[-1]  # main@{1} is second[0]
    assert {c.id for c in store.list()} == set(first + second)
    log = ok(ckpt(".ckpt", "log", "--oneline")).stdout
    assert first[-1][:8] not in log
    log_all = ok(ckpt(".ckpt", "log", "--all", "--oneline")).stdout
    assert f"refs/runs/{first_run}" in log_all  # the earlier run's tip is shown with its name


@pytest.mark.crewai
@pytest.mark.usefixtures("crewai_offline")
def test_resuming_the_earlier_run_forks_it_instead_of_moving_main_back():
    from crewai import Crew

    from crewckpt.crewai import CheckpointConfig
    from crewckpt.testing import research_crew

    research_crew(2, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    store = Store.open(".ckpt")
    old_first = store.list()[0].id
    research_crew(2, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "owls"})
    tip = store.branches()["main"]
    crew = Crew.from_checkpoint(CheckpointConfig(restore_from=old_first))
    crew.kickoff()
    assert store.branches()["main"] == tip
    assert f"main-from-{old_first[:8]}" in store.branches()


# -- ckpt import of a continuation -------------------------------------------------------------------------


def _crewai_file(folder: Path, branch: str, cid: str, parent: str | None, doc: dict) -> None:
    doc = dict(doc, parent_id=parent, branch=branch)
    d = folder / branch
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{cid}_p-{parent or 'none'}.json").write_text(json.dumps(doc))


def test_import_of_a_continuation_from_an_older_checkpoint_keeps_the_old_tip_named(tmp_path):
    doc = fixture_doc("crew_restore_src/main/*_9e065638_p-*.json")
    src = tmp_path / "cp"
    ids = [f"20261129T2345{n:02d}_{n:08x}" for n in range(1, 6)]
    for i, cid in enumerate(ids[:3]):  # a run: 1 <- 2 <- 3
        _crewai_file(src, "main", cid, ids[i - 1] if i else None, doc)
    store = Store.init(tmp_path / ".ckpt")
    import_crewai(store, src)
    old_tip = store.branches()["main"]
    # CrewAI resumed from checkpoint 2 and wrote 4 <- 5 on main: import them
    _crewai_file(src, "main", ids[3], ids[1], doc)
    _crewai_file(src, "main", ids[4], ids[3], doc)
    report = import_crewai(store, src)
    assert len(report.imported) == 2
    assert store.branches()["main"] == old_tip  # the old tip keeps its branch
    new = store.lookup_alias(ids[4])
    fork = next(b for b, t in store.branches().items() if t == new)
    assert fork.startswith("main-from-")
    assert store.resolve(f"{fork}~2") == store.lookup_alias(ids[1])
    assert report.branches[fork] == new
    # exported back, every checkpoint sits on CrewAI's branch again
    out = tmp_path / "out"
    export_crewai(store, out)
    assert sorted(p.name for p in (out / "main").iterdir()) == sorted(p.name for p in (src / "main").iterdir())


def test_import_keeps_crewais_own_lineage_forks_on_crewais_branch(tmp_path):
    """Within one import, CrewAI's pool-writer forks (one parent, two children) stay on CrewAI's branch, as
    CrewAI lists them: only tips the store had before the import are protected."""
    doc = fixture_doc("crew_restore_src/main/*_9e065638_p-*.json")
    src = tmp_path / "cp"
    a, b, c, d = (f"20261129T2345{n:02d}_{n:08x}" for n in range(1, 5))
    _crewai_file(src, "main", a, None, doc)
    _crewai_file(src, "main", b, a, doc)
    _crewai_file(src, "main", c, a, doc)  # a second child of a
    _crewai_file(src, "main", d, c, doc)
    store = Store.init(tmp_path / ".ckpt")
    import_crewai(store, src)
    assert store.branches() == {"main": store.lookup_alias(d)}


def test_a_second_crewai_folder_keeps_its_whole_run_on_one_branch(tmp_path, fixtures_copy):
    """Imported after another run, crew_json_star's run (26 checkpoints, CrewAI's own forks among them)
    goes on one new branch with the tip it has when imported alone; the old tips keep their names."""
    alone = Store.init(tmp_path / "alone")
    import_crewai(alone, fixtures_copy / "crew_json_star" / "main")
    assert set(alone.branches()) == {"main"}
    tip_alias = alone.info("main").alias
    store = Store.init(tmp_path / ".ckpt")
    import_crewai(store, fixtures_copy / "crew_restore_src")
    old = store.branches()
    report = import_crewai(store, fixtures_copy / "crew_json_star" / "main")
    assert len(report.imported) == 26
    assert store.branches() == {**old, "main-2": store.lookup_alias(tip_alias)}  # no main-from-* branches
    assert len(store.list("main-2")) == 26 and report.branches == {"main-2": store.branches()["main-2"]}


def test_import_of_a_fresh_run_never_unnames_the_old_tip(tmp_path):
    store = Store.init(tmp_path / ".ckpt")
    c1 = store.commit({"entities": [], "n": 1}, branch="main", run_id="r1")
    c2 = store.commit({"entities": [], "n": 2}, branch="main", run_id="r1")
    store.commit({"entities": [], "n": 3}, branch="other", parents=[c1], run_id="r1")  # r1's ref moves on
    assert c2 not in store.runs().values()
    src = tmp_path / "cp"
    _crewai_file(src, "main", "20261129T234501_00000001", None, fixture_doc("crew_restore_src/main/*_9e065638_p-*.json"))
    report = import_crewai(store, src)
    assert store.branches()["main"] == c2  # moving main to the new root would leave c2 without a name
    new = store.lookup_alias("20261129T234501_00000001")
    assert report.branches["main-2"] == new
    assert store.info(new).parents == ()


def test_import_of_two_runs_on_one_branch_makes_two_lineages(tmp_path):
    doc = fixture_doc("crew_restore_src/main/*_9e065638_p-*.json")
    src = tmp_path / "cp"
    a, b, c, d = (f"20261129T2345{n:02d}_{n:08x}" for n in range(1, 5))
    _crewai_file(src, "main", a, None, doc)
    _crewai_file(src, "main", b, a, doc)
    _crewai_file(src, "main", c, None, doc)  # a second fresh kickoff
    _crewai_file(src, "main", d, c, doc)
    store = Store.init(tmp_path / ".ckpt")
    import_crewai(store, src)
    assert store.branches() == {"main": store.lookup_alias(d)}
    assert store.lookup_alias(b) in _names_of(store)
    with pytest.raises(UnknownRevision):
        store.resolve("main~2")


# -- ckpt branch and ckpt reflog ---------------------------------------------------------------------------


def test_branch_star_and_reflog_default_follow_head_not_the_last_write(tmp_path):
    path = str(tmp_path / ".ckpt")
    store = Store.init(path)
    doc = {"entities": [], "n": 1}
    c1 = store.commit(doc, branch="main")
    c2 = store.commit(dict(doc, n=2), branch="exp", parents=[])  # a writer on exp does not switch HEAD
    store.create_branch("copy", c2)
    store.close()
    lines = ok(ckpt(path, "branch")).stdout.splitlines()
    starred = [line.split()[1] for line in lines if line.startswith("*")]
    assert starred == ["main"]
    rows = ndjson(ok(ckpt(path, "branch", "--json")).stdout)
    assert [r["branch"] for r in rows if r["head"]] == ["main"]
    reflog = ok(ckpt(path, "reflog", "--json")).stdout
    assert [r["id"] for r in ndjson(reflog)] == [c1]
    assert "HEAD@{0}: commit: manual" in ok(ckpt(path, "reflog")).stdout
    ok(ckpt(path, "switch", "exp"))
    starred = [line.split()[1] for line in ok(ckpt(path, "branch")).stdout.splitlines() if line.startswith("*")]
    assert starred == ["exp"]
    assert [r["id"] for r in ndjson(ok(ckpt(path, "reflog", "--json")).stdout)] == [c2, c1]


def test_log_all_names_a_run_that_a_later_run_continued(tmp_path: Path) -> None:
    """Fresh-user trial (session 20): the README says `ckpt log --all` shows every run (`refs/runs/...`), but a
    run ref was named only where no shown commit continued it: in a shared store the runs a resumed run
    continued had no name, so `ckpt publish RUN` ids were nowhere in the log. Every run ref no branch names
    decorates its tip now, as git decorates every ref."""
    store = Store.init(tmp_path / ".ckpt")
    failed = [store.commit({"step": i}, branch="main", run_id="run-a") for i in range(2)]
    resumed = [store.commit({"step": i}, branch="main", run_id="run-b") for i in range(2, 4)]
    with writing(store.backend) as w:  # a second run ref at the same commit: git shows every ref
        w.set_ref_if_equals(refnames.RUNS + "run-z", None, bytes.fromhex(failed[-1]))
    store.close()
    assert store.info(resumed[0]).parents == (failed[-1],)  # run-b continues run-a's lineage
    for args in (["log", "--all", "--oneline"], ["log", "--oneline"]):
        out = ok(ckpt(str(tmp_path / ".ckpt"), *args)).stdout
        line = next(x for x in out.splitlines() if x.startswith(failed[-1][:8]))
        assert "refs/runs/run-a, refs/runs/run-z" in line and "refs/runs/run-b" not in out, out  # b's tip: main's

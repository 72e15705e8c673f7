"""Commit format 2 and the version-1 -> 2 migration path (objects_format.md sections 5 and 10).

``tests/data/format1-store`` was written by the release that wrote commit format 1 (crewckpt at 4e2366f, by
``scripts/make_format1_store.py``); ``format1-store.json`` records its commit ids, index fields and documents.
Tests copy it first: opening a store may create its WAL files beside it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from crewckpt.format import objects as ob
from crewckpt.history.commits import UNINDEXED_SEQ, PrunedCommit
from crewckpt.history.store import Store

DATA = Path(__file__).resolve().parent / "data"
MANIFEST: dict[str, Any] = json.loads((DATA / "format1-store.json").read_text())
BY_LABEL = {c["label"]: c for c in MANIFEST["commits"]}


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    dest = tmp_path / "format1-store"
    shutil.copytree(DATA / "format1-store", dest)
    return dest


def test_the_fixture_is_a_version_1_store_of_format_1_commits(v1: Path) -> None:
    with Store.open(v1) as s:
        assert s.backend.meta_get("format_version") == "1"
        for c in MANIFEST["commits"]:
            commit = s.objects.commit(bytes.fromhex(c["id"]))
            assert commit.version == 1 and commit.v1_seq == c["seq"] or not c["live"]


def test_a_format_1_store_reads_every_commit_with_its_old_id_and_document(v1: Path) -> None:
    with Store.open(v1) as s:
        for c in MANIFEST["commits"]:
            assert s.resolve(c["id"]) == c["id"]
            assert s.read(c["id"]) == c["doc"], c["label"]
            info = s.info(c["id"]).to_json()
            assert ob.object_id(ob.COMMIT, s.objects.get(bytes.fromhex(c["id"]))[1]).hex() == c["id"]
            for k in ("parents", "time_ns", "run_id", "trigger", "alias", "meta", "live", "summary"):
                assert info[k] == c[k], (c["label"], k)
            if c["live"]:  # the local fields come from the index, which the old release wrote
                assert (info["seq"], info["branch"]) == (c["seq"], c["branch"])
            else:  # pruned but present: only its object remains, and a commit holds no seq or branch
                assert (info["seq"], info["branch"]) == (UNINDEXED_SEQ, "")
        assert [x.id for x in s.log("main")] == MANIFEST["log_main"]
        assert s.branches() == MANIFEST["branches"] and s.runs() == MANIFEST["runs"]
        assert s.resolve("crewai-ckpt-0002") == BY_LABEL["m2"]["id"]
        assert s.resolve("main^2") == BY_LABEL["f2"]["id"] and s.resolve("main~2") == BY_LABEL["m3"]["id"]
        assert s.merge_base("main^1", "feature") == BY_LABEL["m2"]["id"]
        assert [c.id for c in s.list()] == [c["id"] for c in MANIFEST["commits"] if c["live"]]
        assert s.fsck(full=True).ok
        assert s.backend.meta_get("format_version") == "1"  # reading and fsck change nothing


def test_new_commits_in_a_format_1_store_are_format_2_and_everything_stays_readable(v1: Path) -> None:
    old_tip = MANIFEST["branches"]["main"]
    with Store.open(v1) as s:
        n1 = s.commit({"step": 8, "after": "migration"}, branch="main", run_id="run-new")
        n2 = s.commit({"step": 4, "on": "feature"}, branch="feature", run_id="run-new")
        s.create_branch("from-m3", BY_LABEL["m3"]["id"])
        n3 = s.commit({"forked": "from a format-1 commit"}, branch="from-m3", run_id="run-new")
        for cid in (n1, n2, n3):
            assert s.objects.commit(bytes.fromhex(cid)).version == 2
        assert s.info(n1).parents == (old_tip,) and s.info(n1).seq > max(c["seq"] for c in MANIFEST["commits"])
        assert s.info(n2).parents == (BY_LABEL["f2"]["id"],)
        assert s.info(n3).parents == (BY_LABEL["m3"]["id"],) and s.info(n3).branch == "from-m3"
        # plain JSON needs commit format 2 only: version 2 (3 is for documents whose profile needs it)
        assert s.backend.meta_get("format_version") == str(ob.COMMIT_FORMAT) == "2"
        assert [x.id for x in s.log("main")] == [n1, *MANIFEST["log_main"]]
        assert s.fsck(full=True).ok
    with Store.open(v1) as s:  # reopened: both formats side by side
        assert s.read(n1) == {"step": 8, "after": "migration"} and s.read(n3) == {"forked": "from a format-1 commit"}
        for c in MANIFEST["commits"]:
            assert s.read(c["id"]) == c["doc"]
        s.delete_branch("from-m3")  # else n3's history keeps m3; feature's keeps m1 and m2
        assert s.prune("main", keep=3) == [BY_LABEL["m3"]["id"]]
        s.gc()
        assert s.fsck(full=True).ok
        walk = list(s.log("main"))
        assert [x.id for x in walk] == [n1, MANIFEST["branches"]["main"], BY_LABEL["m4"]["id"],
                                        BY_LABEL["m3"]["id"]]
        assert isinstance(walk[-1], PrunedCommit)  # pruned and collected (parents are weak)
        assert [x.id for x in s.log("feature")][-2:] == [BY_LABEL["m2"]["id"], BY_LABEL["m1"]["id"]]
        for label in ("m4", "f1", "f2", "merge"):
            assert s.read(BY_LABEL[label]["id"]) == BY_LABEL[label]["doc"]


def test_a_pruned_format_2_commit_reads_from_its_object_with_no_local_fields() -> None:
    s = Store.memory()
    a = s.commit({"n": 1}, run_id="r", trigger="t", meta={"k": 1})
    b = s.commit({"n": 2}, run_id="r")
    c = s.commit({"n": 3}, run_id="r")
    assert s.prune("main", keep=1) == [a, b]
    info = s.info(a)
    assert (info.live, info.seq, info.branch, info.summary) == (False, UNINDEXED_SEQ, "", {})
    assert (info.run_id, info.trigger, info.meta) == ("r", "t", {"k": 1})
    assert [x.id for x in s.log("main")] == [c, b, a] and s.resolve("main~2") == a
    assert s.read("main~2") == {"n": 1}


def test_a_pruned_commit_exports_under_the_branch_its_document_names_or_main(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    a = s.commit({"x": 1, "branch": "crew-branch"})
    b = s.commit({"x": 2})
    s.commit({"x": 3})
    s.prune("main", keep=1)
    from crewckpt.views.exporter import export_crewai

    report = export_crewai(s, tmp_path / "out", "json", revs=[a, b])
    assert report.to_json()["written"] == 2 and not report.problems, report.to_json()
    assert {p.parent.name for p in (tmp_path / "out").rglob("*.json")} == {"crew-branch", "main"}


def _history(s: Store, branch: str, n: int) -> None:
    for i in range(n):
        s.commit({"unrelated": branch, "i": i}, branch=branch, run_id=f"other-{branch}")


def test_the_same_commit_has_the_same_id_in_two_stores_with_different_histories(tmp_path: Path) -> None:
    """Identity holds only what is true everywhere: no store-wide seq, no branch name in the id."""
    doc = {"entities": [{"entity_type": "crew", "name": "c", "tasks": [{"output": None}]}], "x": "y" * 20_000}
    base = {"hello": "world"}
    a, b = Store.memory(), Store.init(tmp_path / "b")
    _history(a, "main", 3)
    _history(b, "zeta", 1)
    _history(b, "alpha", 4)
    pa = a.commit(base, branch="trunk", parents=[], run_id="run-1", time_ns=10**18)
    pb = b.commit(base, branch="work/other", parents=[], run_id="run-1", time_ns=10**18)
    assert pa == pb
    ca = a.commit(doc, branch="trunk", run_id="run-1", trigger="task_completed", time_ns=10**18 + 5,
                  meta={"m": 1})
    cb = b.commit(doc, branch="feature/x", parents=[pb], run_id="run-1", trigger="task_completed",
                  time_ns=10**18 + 5, meta={"m": 1})
    assert ca == cb
    assert (a.info(ca).seq, a.info(ca).branch) == (5, "trunk")  # the local fields differ, as they should
    assert (b.info(cb).seq, b.info(cb).branch) == (7, "feature/x")
    assert a.objects.get(bytes.fromhex(ca)) == b.objects.get(bytes.fromhex(cb))
    b.close()

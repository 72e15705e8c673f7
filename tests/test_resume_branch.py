"""Which branch a resumed run continues (crewckpt.history.lineage.resume_branch): a branch's tip resumed by
its name, or by a hash that is exactly one branch's tip, continues that branch, in the CLI and in Python;
anything else goes on a new ``<branch>-from-<id[:8]>`` (git's detached HEAD, kept under a name)."""

from __future__ import annotations

import orjson
import pytest
from cli_helpers import ckpt, ok

from crewckpt import Store
from crewckpt.history.lineage import named_branch, pick_resume_branch, resume_branch
from crewckpt.testing import crewai_offline, research_crew  # noqa: F401  (crewai_offline: pytest fixture)


def _store_with_a_forked_branch() -> tuple[Store, list[str]]:
    store = Store.memory()
    ids = [store.commit({"n": i}, branch="main") for i in range(3)]
    store.create_branch("fork/x", ids[1])
    return store, ids


def test_the_rule_by_name_by_hash_and_for_shared_tips():
    store, (a, b, c) = _store_with_a_forked_branch()
    # rule 1: a branch named by itself, at its tip; rule 2: a hash that is exactly one branch's tip
    assert resume_branch(store, "fork/x", b) == "fork/x"
    assert resume_branch(store, "refs/heads/fork/x", b) == "fork/x"
    assert resume_branch(store, b, b) == "fork/x" and resume_branch(store, b[:8], b) == "fork/x"
    assert resume_branch(store, "main", c) == "main" and resume_branch(store, "HEAD", c) == "main"
    # rule 4: no branch's tip: the commit's own branch (the run then goes on main-from-<id>)
    assert resume_branch(store, "main~2", a) == "main"
    # main~1 IS fork/x's tip (one branch): an expression is a hash, and that hash has one branch
    assert resume_branch(store, "main~1", b) == "fork/x"
    store.create_branch("other", b)
    # several tips: the named one; by hash none named and the own branch (main) is no tip -> main-from-...
    assert resume_branch(store, "other", b) == "other" and resume_branch(store, "fork/x", b) == "fork/x"
    assert resume_branch(store, b, b) == "main"
    store.create_branch("exp", c)
    assert resume_branch(store, c, c) == "main"  # rule 3: the branch it was written on, among several
    assert resume_branch(store, "exp", c) == "exp"


def test_named_branch_only_for_a_bare_local_branch():
    store, (_, b, _) = _store_with_a_forked_branch()
    assert named_branch(store, "fork/x") == "fork/x" and named_branch(store, "@") == "main"
    for rev in ("fork/x~0", "fork/x^0", "fork/x@{0}", "latest", b, b[:8], "nope", "refs/runs/r", "a..b"):
        assert named_branch(store, rev) is None, rev
    assert pick_resume_branch("main", [], None) == "main"
    assert pick_resume_branch("main", ["a", "b"], None) == "main"
    assert pick_resume_branch("main", ["a", "b"], "b") == "b"


@pytest.mark.crewai
def test_ckpt_resume_of_a_fork_ref_continues_the_fork(crewai_offline):  # noqa: F811
    """The README's `ckpt fork REV` then `ckpt resume fork/ID` (the new user's report): the run went on a
    third branch sea-otters-from-ID because the rule looked at the commit's own branch, not the ref named."""
    from crewckpt.crewai import CheckpointConfig

    research_crew(3, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    out = ok(ckpt(None, "fork", "main~1")).stdout
    with Store.open(".ckpt") as store:
        point = store.resolve("main~1")
        before = store.branches()
    fork = f"fork/{point[:8]}"
    assert f"Resume it with: ckpt resume {fork}" in out
    record = orjson.loads(ok(ckpt(None, "resume", fork, "--json")).stdout)
    with Store.open(".ckpt") as store:
        assert record["branch"] == fork and store.branches()[fork] == record["head"]
        assert set(store.branches()) == set(before)  # no third branch
        assert store.info(record["head"]).parents == (point,)
        assert store.branches()["main"] == before["main"]
        assert store.current_branch() == fork  # the CLI moves HEAD to the branch the run wrote


@pytest.mark.crewai
def test_python_resume_of_a_branch_tip_continues_it_and_never_moves_head(crewai_offline):  # noqa: F811
    from crewckpt.crewai import CheckpointConfig, restore

    research_crew(3, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    with Store.open(".ckpt") as store:
        point = store.resolve("main~1")
        store.create_branch("alt", point)
        store.create_branch("b2", store.resolve("main~2"))
        main_tip = store.branches()["main"]
    # by name, through CrewAI's own entry point
    research_crew(3, checkpoint=CheckpointConfig()).kickoff(
        from_checkpoint=CheckpointConfig(restore_from="alt"))
    with Store.open(".ckpt") as store:
        alt = store.branches()["alt"]
        assert alt != point and store.info(alt).parents == (point,)
        assert set(store.branches()) == {"main", "alt", "b2"}
        assert store.current_branch() == "main" and store.branches()["main"] == main_tip
        b2 = store.resolve("b2")
    # by a hash that is exactly one branch's tip (b2's)
    restore(b2, store=".ckpt").kickoff()
    with Store.open(".ckpt") as store:
        chain = [c.id for c in store.log("b2")]
        assert chain[-1] == b2 and len(chain) == 3  # the 2 remaining tasks ran on b2
        assert set(store.branches()) == {"main", "alt", "b2"}
        assert store.current_branch() == "main"

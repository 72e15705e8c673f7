"""`ckpt branch -d` of unmerged work. As git ("the branch 'x' is not fully merged; ... run 'git branch -D x'"):
-d deletes a branch only when another branch or a remote-tracking ref reaches its tip (else prune and gc
would drop checkpoints nothing else keeps); -D / -d --force deletes anyway. The Python API keeps deleting by
default (``Store.delete_branch(name)``); ``force=False`` is the CLI's check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import ckpt, ok

from crewckpt import Store
from crewckpt.errors import BranchInUse, BranchNotMerged, UnknownRevision


def _store(path: Path) -> tuple[str, str, str]:
    """main: m1 - m2; side: m1 - s1 (unmerged); old: at m1 (reached by main)."""
    s = Store.init(path)
    m1 = s.commit({"n": 1}, branch="main")
    m2 = s.commit({"n": 2}, branch="main")
    s.create_branch("side", m1)
    s1 = s.commit({"n": 3}, branch="side")
    s.create_branch("old", m1)
    s.close()
    return m1, m2, s1


def _branches(path: Path) -> dict[str, str]:
    with Store.open(path) as s:
        return s.branches()


def test_d_refuses_a_branch_no_other_branch_reaches_and_D_deletes_it(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _, _, s1 = _store(path)
    before = _branches(path)
    r = ckpt(str(path), "branch", "-d", "side")
    assert r.exit_code == 1 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert "branch 'side'" in r.stderr and s1[:12] in r.stderr and "not fully merged" in r.stderr
    assert "`ckpt branch -D side`" in r.stderr
    assert _branches(path) == before  # nothing changed
    with Store.open(path) as s:
        assert s.reflog("side")  # its reflog too
    # prune and gc still keep side's checkpoint: it is still a branch
    ok(ckpt(str(path), "gc"))
    assert ok(ckpt(str(path), "show", "side", "--json")).stdout
    out = ok(ckpt(str(path), "branch", "-D", "side")).stdout
    assert out == f"Deleted branch side (was {s1[:8]})\n"
    assert "side" not in _branches(path)


def test_d_force_deletes_and_json_says_what_went(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _, _, s1 = _store(path)
    record = json.loads(ok(ckpt(str(path), "branch", "-d", "side", "--force", "--json")).stdout)
    assert record == {"deleted": "side", "tip": s1}


def test_d_deletes_a_branch_whose_tip_another_branch_reaches_or_equals(tmp_path: Path) -> None:
    path = tmp_path / "s"
    m1, m2, _ = _store(path)
    assert ok(ckpt(str(path), "branch", "-d", "old")).stdout == f"Deleted branch old (was {m1[:8]})\n"
    ok(ckpt(str(path), "branch", "same", "main"))  # equal tips: main reaches it
    assert ok(ckpt(str(path), "branch", "-d", "same")).stdout == f"Deleted branch same (was {m2[:8]})\n"
    assert set(_branches(path)) == {"main", "side"}


def test_a_remote_tracking_ref_counts_as_reaching_the_tip(tmp_path: Path) -> None:
    there = Store.init(tmp_path / "there")
    there.commit({"n": 1}, branch="main")
    there.close()
    here_path = tmp_path / "here"
    here = Store.clone(str(tmp_path / "there"), here_path)
    here.create_branch("topic", "main")
    t1 = here.commit({"n": 2}, branch="topic")
    here.close()
    refused = ckpt(str(here_path), "branch", "-d", "topic")
    assert refused.exit_code == 1 and "`ckpt branch -D topic`" in refused.stderr
    ok(ckpt(str(here_path), "push", "origin", "topic"))  # now origin/topic holds it (git counts the upstream)
    assert ok(ckpt(str(here_path), "branch", "-d", "topic")).stdout == f"Deleted branch topic (was {t1[:8]})\n"


def test_the_current_branch_is_refused_first_even_with_D(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _store(path)
    ok(ckpt(str(path), "switch", "side"))
    for flags in (["-d", "side"], ["-D", "side"]):
        r = ckpt(str(path), "branch", *flags)
        assert r.exit_code == 1 and "it is the current branch" in r.stderr


def test_d_and_D_together_or_with_a_name_are_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _store(path)
    for args in (["-d", "side", "-D", "old"], ["x", "-D", "side"], ["--force"], ["x", "--force"]):
        r = ckpt(str(path), "branch", *args)
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, (args, r.stderr)
    assert set(_branches(path)) == {"main", "side", "old"}


def test_the_python_api_deletes_by_default_and_checks_with_force_false(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _, _, s1 = _store(path)
    with Store.open(path) as s:
        with pytest.raises(BranchNotMerged, match=r"ckpt branch -D side"):
            s.delete_branch("side", force=False)
        assert s.branches()["side"] == s1
        s.delete_branch("old", force=False)  # main reaches it
        s.delete_branch("side")  # existing callers: deleted as before
        assert set(s.branches()) == {"main"}
        with pytest.raises(BranchInUse):
            s.delete_branch("main", force=False)


def test_a_deleted_branchs_checkpoints_are_pruned_by_name_and_gc_frees_them(tmp_path: Path) -> None:
    """Fresh-user trial: after `ckpt branch -D big` and `ckpt gc`, big's 400 checkpoints stayed listed and
    their bytes stayed, and `ckpt prune --branch big` said "unknown revision 'big'": nothing could free
    them. -D says what stays; `prune --branch big` alone prunes what no other branch reaches."""
    path = tmp_path / "s"
    m1, _, s1 = _store(path)
    with Store.open(path) as s:
        s2 = s.commit({"n": 4, "big": "x" * 5000}, branch="side")
    r = ok(ckpt(str(path), "branch", "-D", "side"))
    assert r.stdout == f"Deleted branch side (was {s2[:8]})\n"
    assert r.stderr == "its 2 checkpoint(s) stay listed until `ckpt prune --branch side`; `ckpt gc` then frees " \
                       "their space\n"
    r = ckpt(str(path), "prune", "--branch", "main")  # an existing branch still needs a rule
    assert r.exit_code == 2 and "say what to prune of main: --keep N and/or --older-than AGE" in r.stderr
    r = ckpt(str(path), "prune", "--branch", "sied")  # a typo is still one line naming the branches
    assert r.exit_code == 1 and "unknown revision 'sied'" in r.stderr
    out = ok(ckpt(str(path), "prune", "--branch", "side")).stdout
    assert out.endswith("2 checkpoint(s) pruned; run `ckpt gc` to free the space\n")
    gc = json.loads(ok(ckpt(str(path), "gc", "--json")).stdout)
    assert gc["deleted_objects"] >= 2
    with Store.open(path) as s:
        assert [c.branch for c in s.list()] == ["main", "main"] and s.read(m1) == {"n": 1}
        assert s.fsck(full=True).ok
        for gone in (s1, s2):
            with pytest.raises(UnknownRevision):
                s.read(gone)


def test_the_python_api_prunes_a_deleted_branch_without_a_rule_and_only_that(tmp_path: Path) -> None:
    path = tmp_path / "s"
    m1, _, s1 = _store(path)
    with Store.open(path) as s:
        s.create_branch("keeper", s1)  # another branch reaches side's checkpoint: it stays
        s.delete_branch("side")
        assert s.prune("side") == []
        with pytest.raises(ValueError, match="prune needs keep=N or older_than_ns=NS"):
            s.prune("main")
        s.delete_branch("keeper")
        assert s.prune("side") == [s1]
        with pytest.raises(UnknownRevision):  # nothing was ever written on it: no such branch now
            s.prune("keeper")


def test_prune_without_a_rule_is_refused_for_a_remote_tracking_name(tmp_path: Path) -> None:
    """`ckpt prune --branch origin/main` alone must not read a remote-tracking ref as a deleted branch."""
    a, b = tmp_path / "a", tmp_path / "b"
    _store(a)
    with Store.open(a) as src, Store.init(b) as dst:
        dst.fetch(src, name="origin")
        with pytest.raises(ValueError, match="prune needs keep=N"):
            dst.prune("origin/main")
    r = ckpt(str(b), "prune", "--branch", "origin/main")
    assert r.exit_code == 2 and "say what to prune of origin/main" in r.stderr


def test_prune_of_a_deleted_branch_rechecks_inside_its_transaction(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Hostile review: a writer re-created the deleted branch and committed to it while `prune` of that name
    ran (5 of 20 trials lost 11-12 acknowledged new checkpoints): the check ran before the transaction."""
    path = tmp_path / "s"
    _store(path)
    with Store.open(path) as s, Store.open(path) as other:
        s.delete_branch("side")
        real = s._writing
        again: list[str] = []

        def racing() -> Any:  # the other writer lands between the caller's decision and the prune's transaction
            again.append(other.commit({"again": 1}, branch="side"))
            return real()

        monkeypatch.setattr(s, "_writing", racing)
        with pytest.raises(ValueError, match="prune needs keep=N or older_than_ns=NS"):
            s.prune("side")
        monkeypatch.undo()
        assert again[0] in {c.id for c in s.list("side")} and len(s.list("side")) == 2


def test_a_deleted_branch_keeps_what_a_remote_tracking_ref_reaches(tmp_path: Path) -> None:
    """Hostile review: `branch -d topic` is allowed because origin/topic reaches it; `prune --branch topic`
    then cut origin/topic's history (only its tip stayed: `show origin/topic~1` failed after gc)."""
    here, there = tmp_path / "here", tmp_path / "there"
    with Store.init(here) as s, Store.init(there) as r:
        s.commit({"n": 0}, branch="main")
        s.create_branch("topic", "main")
        for i in range(4):
            s.commit({"t": i}, branch="topic")
        s.push(r, "topic", name="origin")
    ok(ckpt(str(here), "branch", "-d", "topic"))
    out = ok(ckpt(str(here), "prune", "--branch", "topic")).stdout
    assert out.startswith("0 checkpoint(s) pruned") and "(origin/topic)" in out
    ok(ckpt(str(here), "gc"))
    with Store.open(here) as s:
        assert s.read("origin/topic~3") == {"t": 0} and s.fsck(full=True).ok

"""Store.publish_run: a run (lineage) is published under refs/runs/<run id>, and its branch moves in the shared
store only when no tip loses its name (crewckpt.history.publish; what CheckpointConfig(push_to=...) uses).
The CrewAI side, with real crews, is tests/test_crewai_push.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from crewckpt.errors import PullDiverged, PushRejected, UnknownRevision
from crewckpt.history.publish import KEPT, REPLACED, SKIPPED
from crewckpt.history.store import Store


def run(store: Store, run_id: str, steps: int, *, branch: str = "main", parent: str | None = None) -> str:
    """Write one lineage of ``steps`` commits as a CrewAI writer does (the first is a root unless ``parent``)."""
    tip = ""
    for i in range(steps):
        parents = ([parent] if parent else []) if i == 0 else [tip]
        tip = store.commit({"run": run_id, "step": i, "pad": "x" * 500}, branch=branch, parents=parents,
                           run_id=run_id)
    return tip


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    with Store.init(tmp_path / "worker") as w, Store.init(tmp_path / "shared") as s:
        yield w, s


def statuses(rep: object) -> dict[str, str]:
    return {r.ref: r.status for r in rep.refs}  # type: ignore[attr-defined]


def assert_clean(*stores: Store) -> None:
    for s in stores:
        r = s.fsck(full=True)
        assert r.ok, (r.broken, r.problems)


def test_every_run_on_one_branch_publishes_and_the_shared_branch_follows_the_latest(pair: tuple[Store, Store]) -> None:
    w, s = pair
    a = run(w, "run-a", 3)
    rep = w.publish_run(s, "run-a")
    assert statuses(rep) == {"refs/runs/run-a": "new", "refs/heads/main": "new"} and rep.commits == 3
    b = run(w, "run-b", 2)  # a second kickoff: a new root, main moves to it (run-a keeps its run ref)
    assert w.runs() == {"run-a": a, "run-b": b} and w.resolve("main") == b
    with pytest.raises(PushRejected, match="two lineages"):  # what a plain push says now
        w.push(s, "main")
    rep = w.publish_run(s, "run-b")
    assert not rep.rejected and rep.commits == 2
    assert statuses(rep) == {"refs/runs/run-b": "new", "refs/heads/main": REPLACED}
    assert "kept by refs/runs/run-a" in s.reflog("main")[-1].message
    c = run(w, "run-c", 2)
    w.publish_run(s, "run-c")
    assert s.runs() == w.runs() == {"run-a": a, "run-b": b, "run-c": c}
    assert s.resolve("main") == c and [x.id for x in s.list()] == [x.id for x in w.list()]
    assert [e.new.hex() for e in s.reflog("main")] == [a, b, c]
    assert statuses(w.publish_run(s, "run-c")) == {"refs/runs/run-c": "up-to-date", "refs/heads/main": "up-to-date"}
    assert_clean(w, s)


def test_a_run_published_mid_way_fast_forwards_both_refs(pair: tuple[Store, Store]) -> None:
    w, s = pair
    run(w, "run-a", 2)
    w.publish_run(s, "run-a")
    tip = w.commit({"more": 1}, branch="main", run_id="run-a")  # the same run goes on
    rep = w.publish_run(s, "run-a")
    assert statuses(rep) == {"refs/runs/run-a": "fast-forward", "refs/heads/main": "fast-forward"}
    assert rep.commits == 1 and s.resolve("main") == tip == s.runs()["run-a"]


def test_hand_pushed_work_on_the_shared_branch_is_never_displaced(pair: tuple[Store, Store]) -> None:
    w, s = pair
    with Store.memory() as person:  # `ckpt push` sends branches only: no run ref names this in the shared store
        hand = person.commit({"someone": "else"}, branch="main")
        person.push(s, "main")
    tip = run(w, "run-a", 2)
    rep = w.publish_run(s, "run-a")
    assert not rep.rejected
    assert statuses(rep) == {"refs/runs/run-a": "new", "refs/heads/main": KEPT}
    assert "no run ref names" in (rep.refs[1].reason or "")
    assert s.resolve("main") == hand and s.runs()["run-a"] == tip
    assert_clean(s)


def test_the_shared_branch_is_never_moved_backwards(pair: tuple[Store, Store]) -> None:
    w, s = pair
    tip = run(w, "run-a", 2)
    w.publish_run(s, "run-a")
    ahead = s.commit({"resumed": "there"}, branch="main", run_id="run-z")  # someone continued it in the shared store
    rep = w.publish_run(s, "run-a")
    assert statuses(rep)["refs/heads/main"] == KEPT and "already continues" in (rep.refs[1].reason or "")
    assert s.resolve("main") == ahead and s.runs()["run-a"] == tip


def test_a_run_whose_branch_moved_on_here_publishes_only_its_run_ref(pair: tuple[Store, Store]) -> None:
    w, s = pair
    a = run(w, "run-a", 2)
    run(w, "run-b", 1)  # another run of this store took main since
    rep = w.publish_run(s, "run-a", "main")
    assert statuses(rep) == {"refs/runs/run-a": "new", "refs/heads/main": SKIPPED}
    assert s.runs() == {"run-a": a} and s.branches() == {}


def test_a_run_ref_that_names_other_work_in_the_shared_store_is_rejected(pair: tuple[Store, Store]) -> None:
    w, s = pair
    other = s.commit({"not": "yours"}, branch="x", run_id="run-a")
    run(w, "run-a", 1)
    rep = w.publish_run(s, "run-a")
    assert [r.ref for r in rep.rejected] == ["refs/runs/run-a"] and "nothing was published" in (rep.refs[0].reason or "")
    assert s.runs() == {"run-a": other} and "main" not in s.branches() and len(s.list()) == 1


def test_publishing_to_a_named_remote_moves_its_tracking_ref(pair: tuple[Store, Store]) -> None:
    w, s = pair
    w.add_remote("team", s.location)  # type: ignore[arg-type]
    run(w, "run-a", 1)
    b = run(w, "run-b", 1)
    w.publish_run("team", "run-a")
    rep = w.publish_run("team", "run-b")
    assert rep.verb == "publish" and rep.remote == "team"
    assert w.resolve("team/main") == b


def test_an_unknown_run_is_one_clear_error(pair: tuple[Store, Store]) -> None:
    w, s = pair
    with pytest.raises(UnknownRevision, match="no run 'run-x' in this store"):
        w.publish_run(s, "run-x")


def test_push_rejection_messages_name_a_way_out_that_works(pair: tuple[Store, Store]) -> None:
    """After a second kickoff, `push` used to say "pull first", and that pull refused (diverged)."""
    w, s = pair
    run(w, "run-a", 1)
    w.push(s, "main")
    run(w, "run-b", 1)
    with pytest.raises(PushRejected) as e:
        w.push(s, "main")
    msg = str(e.value)
    assert "pull" not in msg.replace("pull cannot", "") and "ckpt branch NEW main" in msg and "--force" in msg
    with pytest.raises(PullDiverged) as d:
        w.pull(s.location, "main")  # indeed no pull helps here; its advice names the remote as it was given
    assert f"`ckpt push --force {s.location} main`" in str(d.value) and "`ckpt branch main-origin origin/main`" in str(d.value)
    # the remote ahead of a behind local branch: then pull is the way out, and it works
    with Store.memory() as behind:
        behind.pull(s, "main", name="origin")
        s.commit({"more": 1}, branch="main")
        behind.fetch(s, name="origin")
        with pytest.raises(PushRejected, match="the remote is ahead of yours.*ckpt pull"):
            behind.push(s, "main")
        behind.pull(s, "main", name="origin")
        assert behind.resolve("main") == s.resolve("main")


def test_ckpt_publish_catches_up_on_every_run_and_reports_like_push(tmp_path: Path) -> None:
    """`ckpt publish` (what push_to does, for runs whose push failed): every run, oldest first, changed refs
    only in the human form, every ref in --json; exit 1 with one line for an unknown or rejected run."""
    from cli_helpers import ckpt, ok

    w_loc, s_loc = str(tmp_path / "worker"), str(tmp_path / "shared")
    with Store.init(w_loc) as w, Store.init(s_loc) as s:
        tips = [run(w, f"run-{k}", 2) for k in "abc"]
        s.commit({"x": 1}, branch="other", run_id="run-z")
    out = ok(ckpt(w_loc, "publish", s_loc))
    assert out.stdout.count("* [new]") == 4 and "(new lineage)" not in out.stdout  # 3 run refs + main
    assert "[skipped]" not in out.stdout and "sent 6 checkpoint(s)" in out.stderr
    with Store.open(s_loc) as s:
        assert s.runs() == {"run-a": tips[0], "run-b": tips[1], "run-c": tips[2], "run-z": s.resolve("other")}
        assert s.resolve("main") == tips[2]
    assert ok(ckpt(w_loc, "publish", s_loc)).stdout.startswith("Everything up-to-date (3 run(s))")
    rep = json.loads(ok(ckpt(w_loc, "publish", s_loc, "run-a", "--json")).stdout)
    assert rep["verb"] == "publish" and [r["status"] for r in rep["refs"]] == ["up-to-date", "skipped"]
    r = ckpt(w_loc, "publish", s_loc, "run-nope")
    assert r.exit_code == 1 and r.stderr.strip().splitlines() == [
        "ckpt: error: no run 'run-nope' in this store; its runs are listed by `ckpt log --all`"]
    with Store.open(w_loc) as w:
        run(w, "run-z", 1)  # the shared store's run-z is other work: never overwritten
    r = ckpt(w_loc, "publish", s_loc, "run-z")
    assert r.exit_code == 1 and "! [rejected]  refs/runs/run-z" in r.stdout and "nothing was published" in r.stdout


def _state(store: Store) -> tuple[object, ...]:
    b = store.backend
    return (b.refs(""), sorted(m.oid for m in b.iter_objects()), [(e.ref, e.new) for e in _all_reflogs(store)])


def _all_reflogs(store: Store) -> list[object]:
    return [e for ref in store.backend.refs("") for e in store.backend.reflog(ref)]


def test_publish_dry_run_says_what_would_move_and_writes_nothing(pair: tuple[Store, Store]) -> None:
    w, s = pair
    w.add_remote("team", s.location)
    run(w, "run-a", 3)
    w.publish_run("team", "run-a")
    run(w, "run-b", 2)  # a second kickoff: publishing would replace main's lineage
    before = _state(w), _state(s)
    dry = w.publish_run("team", "run-b", dry_run=True)
    assert dry.dry_run and statuses(dry) == {"refs/runs/run-b": "new", "refs/heads/main": REPLACED}
    assert dry.commits == 2 and dry.objects > 0 and dry.bytes > 0
    assert (_state(w), _state(s)) == before  # nothing in either store, not even the tracking ref
    real = w.publish_run("team", "run-b")
    assert not real.dry_run and statuses(real) == statuses(dry) and real.commits == dry.commits
    assert statuses(w.publish_run("team", "run-b", dry_run=True)) == {
        "refs/runs/run-b": "up-to-date", "refs/heads/main": "up-to-date"}


def test_ckpt_publish_dry_run_writes_nothing(tmp_path: Path) -> None:
    from cli_helpers import ckpt, ok

    w_loc, s_loc = str(tmp_path / "worker"), str(tmp_path / "shared")
    with Store.init(w_loc) as w, Store.init(s_loc):
        run(w, "run-a", 2)
    for flag in ("--dry-run", "-n"):
        out = ok(ckpt(w_loc, "publish", s_loc, flag))
        assert "publish " in out.stderr and "would send 2 checkpoint(s)" in out.stderr
        assert out.stdout.count("* [new]") == 2  # refs/runs/run-a and main
    rep = json.loads(ok(ckpt(w_loc, "publish", "-n", s_loc, "--json")).stdout)
    assert rep["dry_run"] is True and [r["status"] for r in rep["refs"]] == ["new", "new"]
    with Store.open(s_loc) as s:
        assert s.runs() == {} and s.branches() == {} and not list(s.backend.iter_objects())
    assert "sent 2 checkpoint(s)" in ok(ckpt(w_loc, "publish", s_loc)).stderr


def test_a_rejected_push_of_a_runs_new_lineage_names_ckpt_publish_first(tmp_path: Path) -> None:
    """After a kickoff without push_to, `ckpt push team main` is rightly rejected; its one line must name
    `ckpt publish team` (the fix for a run's new lineage) before the branch/--force ways out."""
    from cli_helpers import ckpt, ok

    w_loc, s_loc = str(tmp_path / "worker"), str(tmp_path / "shared")
    with Store.init(w_loc) as w, Store.init(s_loc):
        w.add_remote("team", s_loc)
        run(w, "run-a", 2)
        w.push("team", "main")
        run(w, "run-b", 2)
        with pytest.raises(PushRejected) as e:
            w.push("team", "main")
        msg = str(e.value)
        assert ("`ckpt publish team` publishes refs/runs/run-b under its own name (and moves main to it, "
                "refs/runs/run-a keeping the old tip)") in msg
        assert msg.index("ckpt publish team") < msg.index("ckpt branch NEW main") < msg.index("--force")
    r = ckpt(w_loc, "push", "team", "main")
    lines = [x for x in r.stdout.splitlines() if "[rejected]" in x]
    assert r.exit_code == 1 and len(lines) == 1 and "`ckpt publish team` publishes refs/runs/run-b" in lines[0]
    ok(ckpt(w_loc, "publish", "team"))  # the advice works
    with Store.open(w_loc) as w, Store.open(s_loc) as s:
        assert s.resolve("main") == w.resolve("main") and set(s.runs()) == {"run-a", "run-b"}
        # a remote tip no run ref names (pushed by hand): publish would keep that branch, and says so
        s.commit({"by hand": 1}, branch="main")
        for rid, tip in s.runs().items():
            s.backend.set_ref_if_equals(f"refs/runs/{rid}", bytes.fromhex(tip), None)
        run(w, "run-c", 1)
        with pytest.raises(PushRejected) as e:
            w.push("team", "main")
        assert "`ckpt publish team` publishes refs/runs/run-c under its own name (main there stays" in str(e.value)


def test_a_branch_that_loses_every_race_to_another_publisher_is_kept_not_a_failure(
        pair: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch) -> None:
    # before: two workers publishing every checkpoint to one store; one lost 5 compare-and-swaps on main
    # in a row and its publish failed ("moved it to ... meanwhile (another writer won)"), though its run
    # was published and the branch named the run that published later, as the rule says
    import crewckpt.history.publish as publish

    w, s = pair
    a = run(w, "run-a", 2)
    orig = publish.transfer
    others: list[str] = []

    def another_publisher_first(here, there, updates, **kw):  # type: ignore[no-untyped-def]
        if any(u.ref == "refs/heads/main" for u in updates):  # it moves main between our read and our swap
            others.append(s.commit({"other": len(others)}, branch="main", parents=[], run_id=f"run-o{len(others)}"))
        return orig(here, there, updates, **kw)

    monkeypatch.setattr(publish, "transfer", another_publisher_first)
    rep = w.publish_run(s, "run-a")
    assert not rep.rejected, rep.refs
    assert statuses(rep)["refs/heads/main"] == KEPT  # the report is the last attempt's: its run ref is up to date
    assert "another publisher moved main 5 times" in (rep.refs[-1].reason or "")
    assert s.runs()["run-a"] == a and s.resolve("main") == others[-1] and len(others) == 5
    assert_clean(w, s)

"""`ckpt remote`, `clone`, `fetch`, `pull`, `push` on real CrewAI checkpoints (issue 16), human and --json."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from cli_helpers import build_demo_store, ckpt, ndjson, ok

from crewckpt.errors import CkptError
from crewckpt.history.store import Store


def test_clone_log_diff_and_remote_config_from_the_command_line(tmp_path: Path) -> None:
    demo = build_demo_store(tmp_path / "demo")
    dest = str(tmp_path / "copy")
    rep = json.loads(ok(ckpt(None, "clone", demo.path, dest, "--json")).stdout)
    assert rep["verb"] == "clone" and rep["commits"] == len(demo.main) + len(demo.alt)
    assert {r["ref"] for r in rep["refs"]} == {"refs/heads/main", "refs/heads/alt", "refs/remotes/origin/main",
                                              "refs/remotes/origin/alt"}
    assert ndjson(ok(ckpt(dest, "remote", "--json")).stdout) == [[{"name": "origin", "location": demo.path}]]
    assert ok(ckpt(dest, "remote", "-v")).stdout == f"origin\t{demo.path}\n"
    log = ok(ckpt(dest, "log", "--oneline", "origin/alt")).stdout
    assert demo.alt[-1][:8] in log and "origin/alt" in log  # decorated with the tracking ref
    assert ok(ckpt(dest, "rev-parse", "origin/main~2")).stdout.strip() == demo.main[-3]
    ok(ckpt(dest, "diff", "main", "origin/alt"))
    # git branch -a / -r (fresh-user trial: the tracking refs were listed only by `log --all`)
    names = [line[2:].split()[0] for line in ok(ckpt(dest, "branch", "-a")).stdout.splitlines()]
    assert names == ["alt", "main", "remotes/origin/alt", "remotes/origin/main"]
    rows = ndjson(ok(ckpt(dest, "branch", "-r", "--json")).stdout)
    assert [(r["branch"], r["tip"], r["remote"], r["head"]) for r in rows] == [
        ("origin/alt", demo.alt[-1], True, False), ("origin/main", demo.main[-1], True, False)]
    assert [r["remote"] for r in ndjson(ok(ckpt(dest, "branch", "--json")).stdout)] == [False, False]
    assert "use them alone" in ckpt(dest, "branch", "-a", "x").stderr
    r = ok(ckpt(dest, "remote", "remove", "origin", "--json"))
    assert json.loads(r.stdout)["refs"] == ["refs/remotes/origin/alt", "refs/remotes/origin/main"]
    r = ckpt(dest, "fetch")
    assert r.exit_code == 1 and "no remote named 'origin'" in r.stderr


def test_push_rejected_then_pull_refused_then_forced(tmp_path: Path) -> None:
    demo = build_demo_store(tmp_path / "demo")
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    ok(ckpt(None, "clone", demo.path, a))
    ok(ckpt(None, "clone", demo.path, b))
    with Store.open(a) as s:
        s.commit({"from": "a"}, branch="main")
    with Store.open(b) as s:
        mine = s.commit({"from": "b"}, branch="main")
    out = json.loads(ok(ckpt(a, "push", "--json")).stdout)
    assert [r["status"] for r in out["refs"]] == ["fast-forward"]
    r = ckpt(b, "push", "origin", "main")
    assert r.exit_code == 1 and "[rejected]" in r.stdout and "do not have" in r.stdout
    r = ckpt(b, "pull")
    assert r.exit_code == 1 and "have diverged" in r.stderr and mine[:12] in r.stderr
    dry = json.loads(ok(ckpt(b, "push", "--force", "--dry-run", "--json")).stdout)
    assert dry["dry_run"] and dry["refs"][0]["status"] == "forced"
    with Store.open(demo.path) as s:
        assert s.resolve("main") != mine  # the dry run changed nothing
    ok(ckpt(b, "push", "--force"))
    with Store.open(demo.path) as s:
        assert s.resolve("main") == mine
    out = json.loads(ok(ckpt(a, "fetch", "--json")).stdout)
    assert {r["status"] for r in out["refs"]} == {"forced", "up-to-date"}
    r = ok(ckpt(a, "push", "--all", "--dry-run"), 1)  # a's main is behind the forced one: not a fast-forward
    assert "= [up to date]" in r.stdout and "! [rejected]  refs/heads/main  (not a fast-forward" in r.stdout


def _one_line(r: object, *needles: str) -> str:
    """The error of a failed command: exactly one line (after `ckpt: error:`) holding every needle."""
    assert r.exit_code != 0, r.stdout  # type: ignore[attr-defined]
    lines = r.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1, lines
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_a_plain_diverged_push_gives_gits_advice_and_no_publish_hint(tmp_path: Path) -> None:
    """Two plain (non-CrewAI) clones both commit to main; the second push is rejected with git's way out
    (pull then push again, a new branch, or --force) and no `ckpt publish` hint: a plain Store.commit's
    anonymous ``w-...`` run ref is no run anyone publishes. A named run's lineage still gets the hint."""
    origin, a, b = str(tmp_path / "origin"), str(tmp_path / "a"), str(tmp_path / "b")
    with Store.init(origin) as o:
        o.commit({"n": 0})
    for dest in (a, b):
        ok(ckpt(origin, "clone", origin, dest))
    for path in (a, b):
        with Store.open(path) as s:
            s.commit({"n": path})
    ok(ckpt(a, "push"))
    for step in ("unknown", "fetched"):
        r = ckpt(b, "push")
        assert r.exit_code == 1, r.stderr
        [line] = [x for x in r.stdout.splitlines() if "[rejected]" in x]
        assert "publish" not in line, line
        assert "--force" in line and "`ckpt branch NEW main` then `ckpt push origin NEW`" in line
        if step == "unknown":
            assert "(the remote has checkpoints you do not have" in line
            assert line.index("`ckpt pull origin main` then push again") < line.index("--force")
            ok(ckpt(b, "fetch"))
        else:
            assert "(not a fast-forward" in line
    with Store.open(b) as s:
        s.commit({"n": "named"}, run_id="nightly-1")
    line = next(x for x in ckpt(b, "push").stdout.splitlines() if "[rejected]" in x)
    assert "`ckpt publish origin` publishes refs/runs/nightly-1 under its own name" in line


def test_remote_add_refuses_a_local_location_without_a_store_unless_no_check(tmp_path: Path) -> None:
    """A typo at `remote add` is caught there (not at the first fetch, which used to suggest `ckpt init` at
    the typo); --no-check records it anyway, and a fetch through it then says how to fix the config."""
    here = str(tmp_path / "here")
    ok(ckpt(None, "init", here))
    (tmp_path / "afile").write_text("x")
    (tmp_path / "empty").mkdir()
    for where, why in ((tmp_path / "nothere", "no such folder"), (tmp_path / "afile", "a file, not a store folder"),
                       (tmp_path / "empty", "a folder without a crewckpt store"),
                       ("sqlite:" + str(tmp_path / "nothere"), "no such folder"),
                       (f"memory:nothere-{tmp_path.name}", "no in-memory store")):
        line = _one_line(ckpt(here, "remote", "add", "typo", str(where)), why, "--no-check typo")
        assert "ckpt init" not in line
    assert ok(ckpt(here, "remote", "-v")).stdout == ""  # nothing was added
    # a URL is not contacted (the server may be down), as git does
    ok(ckpt(here, "remote", "add", "pg", "postgresql://u@127.0.0.1:1/db"))
    r = ok(ckpt(here, "remote", "add", "--no-check", "typo", str(tmp_path / "nothere")))
    assert "Added remote typo" in r.stdout
    for what in ("nothere", "afile"):
        with Store.open(here) as s:
            s.remove_remote("typo")
            s.add_remote("typo", str(tmp_path / what), check=False)
        line = _one_line(ckpt(here, "fetch", "typo"), f"remote typo ({tmp_path / what})", "ckpt remote remove typo")
        assert "ckpt init" not in line
    for verb in ("fetch", "push"):  # a location typed on the command line: no `ckpt init` at the typo either
        line = _one_line(ckpt(here, verb, str(tmp_path / "nothere")), "neither a remote (pg, typo) nor a store",
                         "no such folder; check the name or location")
        assert "ckpt init" not in line
    Store.init(tmp_path / "nothere").close()  # created later: the recorded remote works now
    ok(ckpt(here, "remote", "remove", "typo"))
    ok(ckpt(here, "remote", "add", "typo", str(tmp_path / "nothere")))
    ok(ckpt(here, "fetch", "typo"))
    assert _one_line(ckpt(here, "remote", "--no-check"), "--no-check goes with")


def test_a_store_is_never_its_own_remote_however_spelled(tmp_path: Path) -> None:
    """`remote add`, fetch, pull and push refuse the store itself: trailing '/', './' and '..' spellings, a
    symlink to its folder, the project folder holding it as .ckpt, with or without --no-check."""
    proj = tmp_path / "proj"
    here = str(proj / ".ckpt")
    ok(ckpt(None, "init", here))
    with Store.open(here) as s:
        s.commit({"x": 1}, branch="main")
    (tmp_path / "link").symlink_to(proj / ".ckpt")
    spellings = [here + "/", f"{proj}/./.ckpt", f"{proj}/x/../.ckpt", str(tmp_path / "link"), str(proj),
                 "sqlite:" + here]
    for loc in spellings:
        for flags in ((), ("--no-check",)):
            _one_line(ckpt(here, "remote", "add", *flags, "me", loc), "this store itself")
        for verb in (("fetch", loc), ("pull", loc, "main"), ("push", loc, "main")):
            _one_line(ckpt(here, *verb), "is this store itself")
    with Store.open(here) as s:
        assert s.remotes() == {} and s.backend.refs("refs/remotes/") == {}
        with pytest.raises(CkptError, match="is this store itself"):
            s.fetch(s)
        with Store.open(str(tmp_path / "link")) as same:
            with pytest.raises(CkptError, match="is this store itself"):
                s.push(same, "main")


def test_fetch_prune_deletes_tracking_refs_of_branches_deleted_on_the_remote(tmp_path: Path) -> None:
    """git's `fetch --prune`/`-p` and `remote prune`: without them a deleted remote branch keeps its
    REMOTE/BRANCH; with them it goes (`--dry-run` only says so), and the checkpoints only it reached are no
    longer listed (gc collects them) while what a local branch reaches stays."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with Store.init(a) as s:
        s.commit({"m": 1}, branch="main")
        for br in ("exp", "tmp", "old"):
            s.create_branch(br, "main")
            s.commit({br: 1}, branch=br)
    ok(ckpt(None, "init", b))
    ok(ckpt(b, "remote", "add", "origin", a))
    ok(ckpt(b, "fetch"))
    ok(ckpt(b, "branch", "keep", "origin/tmp"))  # local work on top of a fetched branch
    with Store.open(a) as s:
        gone = {br: s.resolve(br) for br in ("exp", "tmp", "old")}
        for br in gone:
            s.delete_branch(br)
    ok(ckpt(b, "fetch"))
    with Store.open(b) as s:
        assert set(s.backend.refs("refs/remotes/")) == {f"refs/remotes/origin/{x}" for x in
                                                        ("main", "exp", "tmp", "old")}
    dry = json.loads(ok(ckpt(b, "fetch", "--prune", "--dry-run", "--json")).stdout)
    assert [(r["ref"], r["status"]) for r in dry["refs"] if r["status"] == "pruned"] == [
        ("refs/remotes/origin/exp", "pruned"), ("refs/remotes/origin/old", "pruned"),
        ("refs/remotes/origin/tmp", "pruned")]
    with Store.open(b) as s:
        assert len(s.backend.refs("refs/remotes/")) == 4  # the dry run changed nothing
    r = ok(ckpt(b, "fetch", "-p", "origin"))
    assert "- [deleted]" in r.stdout and "refs/remotes/origin/exp" in r.stdout
    with Store.open(b) as s:
        assert set(s.backend.refs("refs/remotes/")) == {"refs/remotes/origin/main"}
        listed = {c.id for c in s.list()}
        assert gone["exp"] not in listed and gone["old"] not in listed
        assert gone["tmp"] in listed and s.resolve("keep") == gone["tmp"]  # a local branch still reaches it
        s.gc()
        assert not s.backend.has_many([bytes.fromhex(gone["exp"])])
        assert s.read("keep") == {"tmp": 1} and s.fsck(full=True).ok
    # `remote prune`: no transfer, only the stale refs
    with Store.open(a) as s:
        s.create_branch("new", "main")
    ok(ckpt(b, "fetch"))
    with Store.open(a) as s:
        s.delete_branch("new")
    out = json.loads(ok(ckpt(b, "remote", "prune", "origin", "--json")).stdout)
    assert out["verb"] == "prune" and [r["ref"] for r in out["refs"]] == ["refs/remotes/origin/new"]
    assert ok(ckpt(b, "remote", "prune", "origin", "--json")).stdout.count("pruned") == 0
    with Store.open(b) as s:
        assert set(s.backend.refs("refs/remotes/")) == {"refs/remotes/origin/main"}


def test_fetch_of_a_bare_location_never_touches_a_configured_remotes_tracking_refs(tmp_path: Path) -> None:
    """`ckpt fetch B` (a location, not a remote name) while remote origin is A: git writes only FETCH_HEAD.
    origin's tracking refs stay as A left them, `--prune B` is refused (it would delete origin/exp and
    un-index what came from A), A's own location spelled out is origin, and `ckpt pull B` still works."""
    a, b, here = str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "here")
    with Store.init(a) as s:
        s.commit({"a": 1}, branch="main")
        s.create_branch("exp", "main")
        s.commit({"a": 2}, branch="exp")
        a_tips = {f"refs/remotes/origin/{br}": bytes.fromhex(s.resolve(br)) for br in ("main", "exp")}
    with Store.init(b) as s:
        b_main = s.commit({"b": 1}, branch="main")
    ok(ckpt(None, "init", here))
    ok(ckpt(here, "remote", "add", "origin", a))
    ok(ckpt(here, "fetch"))
    r = ok(ckpt(here, "fetch", b))
    assert "refs/remotes/origin/" not in r.stdout and "refs/remotes/FETCH_HEAD/main" in r.stdout
    r = ckpt(here, "fetch", "--prune", b)
    assert r.exit_code != 0 and "--prune needs a configured remote" in r.stderr and "ckpt remote add" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    with Store.open(here) as s:
        assert s.backend.refs("refs/remotes/origin/") == a_tips
        assert s.resolve("FETCH_HEAD/main") == b_main
        listed = {c.id for c in s.list()}
        assert {t.hex() for t in a_tips.values()} <= listed
    r = ok(ckpt(here, "fetch", "--prune", a + "/"))  # origin's location in another spelling: origin's refs
    assert "refs/remotes/origin/main" in r.stdout and "FETCH_HEAD" not in r.stdout
    ok(ckpt(here, "pull", b, "main"))
    with Store.open(here) as s:
        assert s.resolve("main") == b_main and s.backend.refs("refs/remotes/origin/") == a_tips
    with pytest.raises(CkptError, match="reserved"):
        with Store.open(here) as s:
            s.add_remote("FETCH_HEAD", b)


def test_a_branch_named_like_a_tracking_ref_is_warned_about_and_not_created_here(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A source's local branch literally named origin/main comes with the clone (its data), with a warning;
    `origin/main` then names two refs: git's "refname 'origin/main' is ambiguous" (one line, saying which
    was used). Creating or renaming a local branch to REMOTE/... of a configured remote is refused."""
    a, dest = str(tmp_path / "a"), str(tmp_path / "dest")
    with Store.init(a) as s:
        main = s.commit({"m": 1}, branch="main")
        odd = s.commit({"odd": 1}, branch="origin/main")
    def warnings() -> list[str]:  # the CLI prints these on stderr, one line each (logging's last resort)
        out = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        caplog.clear()
        return out

    with caplog.at_level(logging.WARNING, logger="crewckpt"):
        ok(ckpt(None, "clone", a, dest))
        (w,) = warnings()
        assert "has a branch named origin/main" in w and "ckpt branch -m origin/main NEW" in w
        assert ok(ckpt(dest, "rev-parse", "origin/main")).stdout.strip() == odd
        (w,) = warnings()
        assert "refname 'origin/main' is ambiguous: using the local branch origin/main" in w and "\n" not in w
        assert ok(ckpt(dest, "rev-parse", "refs/remotes/origin/main")).stdout.strip() == main
        ok(ckpt(dest, "rev-parse", "main"))
        assert warnings() == []
    for args in (("branch", "origin/exp", "main"), ("switch", "-c", "origin/exp"), ("branch", "-m", "main",
                                                                                     "origin/x")):
        r = ckpt(dest, *args)
        assert r.exit_code != 0 and "begins with 'origin/', the name of remote origin" in r.stderr, args
        assert len(r.stderr.strip().splitlines()) == 1
    ok(ckpt(dest, "branch", "originals/exp", "main"))  # only REMOTE + '/' is taken
    with Store.open(dest) as s:
        assert set(s.branches()) == {"main", "origin/main", "originals/exp"}


def test_fetch_pull_and_clone_say_fetched_push_says_sent(tmp_path: Path) -> None:
    """The transfer line is from the user's side: what came in was fetched, what went out was sent."""
    demo = build_demo_store(tmp_path / "demo")
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert "clone origin: fetched " in ok(ckpt(None, "clone", demo.path, a)).stderr
    ok(ckpt(None, "clone", demo.path, b))
    with Store.open(a) as s:
        s.commit({"from": "a"}, branch="main")
    pushed = ok(ckpt(a, "push")).stderr
    assert "push origin: sent 1 checkpoint(s)" in pushed and "fetched" not in pushed
    assert "fetch origin: would fetch 1 checkpoint(s)" in ok(ckpt(b, "fetch", "--dry-run")).stderr
    pulled = ok(ckpt(b, "pull")).stderr
    assert "pull origin: fetched 1 checkpoint(s)" in pulled and "sent" not in pulled
    with Store.open(demo.path) as s:
        s.commit({"from": "demo"}, branch="main")
    fetched = ok(ckpt(b, "fetch")).stderr
    assert "fetch origin: fetched 1 checkpoint(s)" in fetched and "sent" not in fetched


def test_push_origin_head_pushes_the_current_branch(tmp_path: Path) -> None:
    """Fresh-user trial (session 20): `ckpt push origin HEAD` said "bad branch name 'HEAD': reserved word";
    git pushes the current branch to the same name."""
    origin, here = str(tmp_path / "origin"), str(tmp_path / "here")
    with Store.init(origin) as s:
        s.commit({"n": 0}, branch="main")
    ok(ckpt(None, "clone", origin, here))
    with Store.open(here) as s:
        s.switch("exp", create=True, start="main")
        tip = s.commit({"n": 1})
    out = json.loads(ok(ckpt(here, "push", "origin", "HEAD", "--json")).stdout)
    assert [(r["ref"], r["status"]) for r in out["refs"]] == [("refs/heads/exp", "new")], out
    with Store.open(origin) as s:
        assert s.resolve("exp") == tip and s.read("exp") == {"n": 1}
    out = json.loads(ok(ckpt(here, "push", "origin", "@", "--json")).stdout)  # git: '@' alone is HEAD
    assert [(r["ref"], r["status"]) for r in out["refs"]] == [("refs/heads/exp", "up-to-date")], out
    r = ckpt(here, "push", "origin", "")
    assert r.exit_code == 2 and "bad branch name" in r.stderr, r.stderr  # git refuses an empty refspec

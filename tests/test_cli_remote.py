"""`ckpt remote`, `clone`, `fetch`, `pull`, `push` on real CrewAI checkpoints (issue 16), human and --json."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import build_demo_store, ckpt, ndjson, ok

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

"""Remotes between every pair of backends, both ways (issues 16 and 17): clone, fetch, pull (fast-forward and
the diverged refusal), push (fast-forward, non-fast-forward rejected, --force, --all, --dry-run) from a store
of one kind to a store of another, by location strings, with ids, aliases and a clean fsck on both sides.

The memory, SQLite, PostgreSQL (a real server, tests/pg_server.py) and S3 (a real SeaweedFS,
tests/s3_server.py) stores are opened through the location registry, as a user's would be. The pairs with
S3 or PostgreSQL on one side in the default run are sqlite<->s3 and s3<->postgresql; the rest of the
matrix is in conftest's SLOW tuple.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from test_remotes import assert_clean, commit_chain, doc, ids

from crewckpt.errors import PullDiverged, PushRejected
from crewckpt.history import remotes
from crewckpt.history.store import Store

KINDS = ["memory", "sqlite", "postgres", "s3"]
MARKS = {"postgres": [pytest.mark.postgres], "s3": [pytest.mark.s3]}
PAIRS = [pytest.param(a, b, marks=MARKS.get(a, []) + MARKS.get(b, []), id=f"{a}-{b}")
         for a, b in itertools.product(KINDS, KINDS) if a != b or a == "s3"]
_N = itertools.count()

Locate = Callable[[str], str]


@pytest.fixture
def locate(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Locate]:
    """``locate(kind)``: the location of a new, not yet created store of that kind (a fresh memory name,
    folder, PostgreSQL schema or S3 prefix each call; the schemas are dropped afterwards)."""
    schemas: list[str] = []

    def _locate(kind: str) -> str:
        n = next(_N)
        if kind == "memory":
            return f"memory:matrix-{os.getpid()}-{n}"
        if kind == "sqlite":
            return str(tmp_path / f"s{n}")
        if kind == "postgres":
            server = request.getfixturevalue("pg_server")
            schemas.append(f"m{os.getpid()}_{n}")
            return f"{server.url}?schema={schemas[-1]}"
        base: str = request.getfixturevalue("s3_url")
        return base.replace("?", f"-m{n}?", 1)

    yield _locate
    if schemas:
        import psycopg
        server = request.getfixturevalue("pg_server")
        with contextlib.suppress(psycopg.Error), psycopg.connect(server.url, autocommit=True) as c:
            for s in schemas:
                c.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_clone_fetch_pull_push_between_backends(locate: Locate, src_kind: str, dst_kind: str) -> None:
    """``a`` (of ``src_kind``) is cloned into ``b`` (of ``dst_kind``); then every verb runs between them,
    so each pair is exercised in both directions (fetch/pull bring a's work to b, push sends b's to a)."""
    src, dst = locate(src_kind), locate(dst_kind)
    with Store.init(src) as a:
        tips = commit_chain(a, 3)
        a.create_branch("exp", "main~1")
        exp = commit_chain(a, 1, branch="exp", start=5)
        with Store.clone(src, dst) as b:
            # clone: every branch, tracking refs, the same ids, aliases and documents
            assert b.branches() == a.branches() == {"main": tips[-1], "exp": exp[-1]}
            assert remotes.tracking_refs(b) == {"origin/main": tips[-1], "origin/exp": exp[-1]}
            assert b.remotes() == {"origin": remotes.canonical(src)}
            assert ids(b, "main") == ids(a, "main") and ids(b, "exp") == ids(a, "exp")
            assert b.lookup_alias("cp-main-1") == tips[1] and b.lookup_alias("cp-exp-5") == exp[0]
            assert b.read("exp") == a.read("exp")

            # fetch moves only the tracking ref; pull fast-forwards; a second fetch sends nothing
            new = a.commit(doc(3), branch="main", alias="cp-main-3")
            rep = b.fetch()
            assert rep.commits == 1 and b.resolve("origin/main") == new and b.resolve("main") == tips[-1]
            assert [r.status for r in b.pull("origin", "main").refs] == ["up-to-date", "fast-forward"]
            assert b.resolve("main") == new and b.lookup_alias("cp-main-3") == new
            assert b.fetch().commits == 0

            # push: fast-forward, then a new branch with --all after a --dry-run that writes nothing
            mine = b.commit(doc(4), branch="main", alias="cp-main-4")
            rep = b.push("origin", "main")
            assert rep.commits == 1 and [r.status for r in rep.refs] == ["fast-forward"]
            assert a.resolve("main") == mine and a.lookup_alias("cp-main-4") == mine
            b.create_branch("feat", "main")
            feat = b.commit(doc(6, "f"), branch="feat", alias="cp-feat-6")
            before = (a.backend.refs(), len(a.list()))
            rep = b.push("origin", all_branches=True, dry_run=True)
            assert rep.dry_run and rep.commits == 1 and rep.bytes > 0
            assert {r.ref: r.status for r in rep.refs}["refs/heads/feat"] == "new"
            assert (a.backend.refs(), len(a.list())) == before
            rep = b.push("origin", all_branches=True)
            assert {r.ref: r.status for r in rep.refs} == {"refs/heads/exp": "up-to-date", "refs/heads/feat": "new",
                                                          "refs/heads/main": "up-to-date"}
            assert a.branches() == b.branches() and a.lookup_alias("cp-feat-6") == feat
            assert remotes.tracking_refs(b)["origin/feat"] == feat

            # diverged: push rejected, pull refused naming both tips, push --force replaces
            theirs = a.commit(doc(7, "a"), branch="main")
            ours = b.commit(doc(7, "b"), branch="main")
            with pytest.raises(PushRejected, match="do not have"):
                b.push("origin", "main")
            assert a.resolve("main") == theirs
            with pytest.raises(PullDiverged) as info:
                b.pull("origin", "main")
            assert ours[:12] in str(info.value) and theirs[:12] in str(info.value)
            assert b.resolve("main") == ours and b.resolve("origin/main") == theirs
            rep = b.push("origin", "main", check=False)  # b knows a's tip now: "not a fast-forward"
            assert rep.refs[0].status == "rejected" and "not a fast-forward" in (rep.refs[0].reason or "")
            assert a.resolve("main") == theirs
            assert b.push("origin", "main", force=True).refs[0].status == "forced"
            assert a.resolve("main") == ours == b.resolve("origin/main")

            # both sides agree on every branch, id and alias; both are clean
            assert a.branches() == b.branches()
            for branch in a.branches():
                assert ids(a, branch) == ids(b, branch)
            assert {c.alias for c in b.list()} <= {c.alias for c in a.list()}
            assert a.read("main") == b.read("main")
            assert_clean(a, b)


@pytest.mark.parametrize("kind", [pytest.param("s3", marks=pytest.mark.s3),
                                  pytest.param("postgres", marks=pytest.mark.postgres)])
def test_ckpt_clone_push_pull_with_a_shared_remote_on_the_command_line(locate: Locate, tmp_path: Any,
                                                                       kind: str) -> None:
    """Two users' SQLite stores share real CrewAI checkpoints through an s3:// (or postgresql://) store with
    the ckpt commands alone: clone up, clone down, push, pull, a rejected push, --force, --all --dry-run."""
    import json

    from cli_helpers import build_demo_store, ckpt, ok

    demo = build_demo_store(tmp_path / "demo")
    shared, a, b = locate(kind), str(tmp_path / "a"), str(tmp_path / "b")
    up = json.loads(ok(ckpt(None, "clone", demo.path, shared, "--json")).stdout)
    assert up["commits"] == len(demo.main) + len(demo.alt)
    ok(ckpt(None, "clone", shared, a))
    ok(ckpt(None, "clone", shared, b))
    assert ok(ckpt(a, "rev-parse", "origin/alt")).stdout.strip() == demo.alt[-1]
    with Store.open(a) as s:
        mine = s.commit({"from": "a"}, branch="main")
    out = json.loads(ok(ckpt(a, "push", "--json")).stdout)
    assert [r["status"] for r in out["refs"]] == ["fast-forward"] and out["commits"] == 1
    assert json.loads(ok(ckpt(b, "pull", "--json")).stdout)["refs"][-1]["status"] == "fast-forward"
    assert ok(ckpt(b, "rev-parse", "main")).stdout.strip() == mine
    with Store.open(a) as s:
        s.commit({"from": "a", "n": 2}, branch="main")
    with Store.open(b) as s:
        theirs = s.commit({"from": "b"}, branch="main")
    ok(ckpt(a, "push"))
    r = ckpt(b, "push", "origin", "main")
    assert r.exit_code == 1 and "[rejected]" in r.stdout
    r = ckpt(b, "pull")
    assert r.exit_code == 1 and "have diverged" in r.stderr and theirs[:12] in r.stderr
    ok(ckpt(b, "push", "--force"))
    with Store.open(shared) as s:
        assert s.resolve("main") == theirs
        assert s.fsck(full=True).ok
    dry = ok(ckpt(a, "push", "--all", "--dry-run"), 1)  # a's main is behind the forced one
    assert "! [rejected]  refs/heads/main  (the remote has checkpoints you do not have" in dry.stdout
    with Store.open(shared) as s:
        assert s.resolve("main") == theirs

"""`ckpt prune` reads the commit index once per branch: what goes and what other branches hold back come from
one walk (crewckpt.history.prune), with the same results as the per-branch rule (Store.prune / prune_held)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from cli_helpers import DemoStore, build_demo_store, ckpt, ok

from crewckpt import Store
from crewckpt.backends import sqlite
from crewckpt.history import refnames


@pytest.fixture
def demo(tmp_path: Path) -> DemoStore:
    return build_demo_store(tmp_path / ".ckpt")


def _count_full_scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of index_rows() without a branch (a read of the whole commit index) from now on."""
    calls = [0]
    orig = sqlite._SqlReader.index_rows  # the backend's and its transactions' reads

    def spy(self: Any, branch: str | None = None) -> Any:
        if branch is None:
            calls[0] += 1
        return orig(self, branch)

    monkeypatch.setattr(sqlite._SqlReader, "index_rows", spy)
    return calls


def test_prune_walks_the_other_branches_history_once_per_branch(demo: DemoStore,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with Store.open(demo.path) as store:
        store.create_branch("try1", demo.main[0])
    scans = _count_full_scans(monkeypatch)
    rep = orjson.loads(ok(ckpt(demo.path, "prune", "--keep", "1", "--json", "--dry-run")).stdout)
    assert {"branch": "main", "count": 2, "by": ["alt", "try1"]} in rep["held"]
    n_branches = 3  # main, alt, try1
    assert scans[0] == n_branches, scans[0]  # was 2 per branch (prune, then prune_held, each walked)
    scans[0] = 0
    out = ok(ckpt(demo.path, "prune", "--keep", "1", "--branch", "main")).stdout.splitlines()
    assert out[-2:] == ["2 older checkpoint(s) of main are history of other branches (alt, try1); prune those "
                        "branches or delete them first", "1 checkpoint(s) pruned; run `ckpt gc` to free the space"]
    assert scans[0] == 1


def _oracle(store: Store, branch: str, keep: int) -> tuple[list[str], int, list[str]]:
    """The rule walked branch by branch (as prune and prune_held did before they shared one walk)."""
    be = store.backend
    live = {r.id: r for r in be.index_rows()}

    def anc(starts: list[bytes]) -> set[bytes]:
        out: set[bytes] = set()
        todo = list(starts)
        while todo:
            c = todo.pop()
            if c not in out and c in live:
                out.add(c)
                todo.extend(live[c].parents)
        return out

    heads = {ref[len(refnames.HEADS):]: t for ref, t in be.refs(refnames.HEADS).items()}
    remotes = {ref[len(refnames.REMOTES):]: t for ref, t in be.refs(refnames.REMOTES).items()}
    rows = be.index_rows(branch)
    cands = {r.id for r in rows[:-keep] if r.id != heads.get(branch)}
    held: set[bytes] = set()
    names: set[str] = set()
    needed: set[bytes] = set()
    for name, tip in heads.items():
        if name == branch:
            continue
        reach = anc([r.id for r in live.values() if r.branch == name] + [tip])
        needed |= reach
        if reach & cands:
            held |= reach & cands
            names.add(name)
    for name, tip in remotes.items():
        if tip in cands:
            held.add(tip)
            names.add(name)
    tips = set(heads.values()) | set(remotes.values())
    gone = [r.id.hex() for r in rows[:-keep] if r.id in cands and r.id not in tips and r.id not in needed]
    return gone, len(held), sorted(names)


def test_one_walk_gives_what_the_branch_by_branch_rule_gives() -> None:
    seen: set[str] = set()
    for seed in range(12):
        _random_store_agrees(random.Random(seed), seen)
    assert seen == {"removed", "held", "held by a tracking ref"}  # the random stores cover every case


def _random_store_agrees(rnd: random.Random, seen: set[str]) -> None:
    store = Store.memory()
    branches = ["main"]
    ids: list[str] = [store.commit({"n": 0}, branch="main")]
    for n in range(1, 40):
        r = rnd.random()
        if r < 0.15:  # fork a new branch at a random commit
            name = f"b{n}"
            store.create_branch(name, rnd.choice(ids))
            branches.append(name)
        elif r < 0.2 and len(branches) > 2:
            gone = rnd.choice(branches[1:])
            store.delete_branch(gone)  # its rows stay live but no longer hold anything
            branches.remove(gone)
        elif r < 0.25:
            store.backend.set_ref_if_equals(refnames.REMOTES + f"origin/x{n}", None, bytes.fromhex(rnd.choice(ids)))
        b = rnd.choice(branches)
        parents = [store.resolve(b)]
        other = rnd.choice(ids)
        if rnd.random() < 0.2 and other != parents[0]:  # a merge commit
            parents.append(other)
        ids.append(store.commit({"n": n}, branch=b, parents=parents))
    for b in branches:
        for keep in (1, 3):
            want = _oracle(store, b, keep)
            got = store.prune_report(b, keep=keep, dry_run=True)
            assert (got.removed, got.held, got.held_by) == want
            seen |= {"removed"} if want[0] else set()
            seen |= {"held"} if want[1] else set()
            seen |= {"held by a tracking ref"} if any(n.startswith("origin/") for n in want[2]) else set()
            assert store.prune_held(b, keep=keep) == want[1:]
            assert store.prune(b, keep=keep, dry_run=True) == want[0]
    for b in branches:  # for real: the same ids go
        want = _oracle(store, b, 2)
        assert store.prune_report(b, keep=2).removed == want[0]

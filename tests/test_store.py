"""Store API: exact round trips, commits, refs, revisions, history, prune, gc, fsck, opening errors."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crewckpt import Store
from crewckpt.errors import (
    AmbiguousRevision,
    BadRefName,
    BranchExists,
    CorruptStore,
    FormatVersionError,
    IntegrityError,
    StoreExists,
    StoreNotFound,
    UnknownRevision,
)
from crewckpt.history.commits import PrunedCommit
from crewckpt.history.snapshot import Frozen
from crewckpt.views.document import CREWAI

json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text())
json_values = st.recursive(
    json_scalars,
    lambda kids: st.lists(kids, max_size=80) | st.dictionaries(st.text(max_size=8), kids, max_size=80),
    max_leaves=400,
)


def same(a: Any, b: Any) -> bool:
    """Equal including dict key order and float sign/type (0.0 vs -0.0, 1 vs 1.0)."""
    return json.dumps(a, sort_keys=False) == json.dumps(b, sort_keys=False) and type(a) is type(b) and (
        repr(a) == repr(b))


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return Store.memory() if request.param == "memory" else Store.init(tmp_path / ".ckpt")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=json_values)
def test_round_trip_random_json(doc: Any) -> None:
    s = Store.memory()
    assert same(s.read(s.commit(doc)), doc)


EDGE_CASES = [
    {"nul": "a\x00b", "emoji": "🦦", "lone": "\ud800", "pair": "\ud83e\udda6", "key\ud800": 1},
    {"big": 2**70, "neg": -(2**64), "u64": 2**64 - 1, "i64": -(2**63)},
    {"f": [-0.0, 1e308, 5e-324, 0.1, 1.0, 1]},
    {"empty": [{}, [], "", {"": {}}]},
    [], {}, "", 0, None, True, 1.5, "x" * 100_000,
    {"long": "otter " * 20_000, "z": 1, "a": 2},
    {"events": {f"e{i:05d}": {"i": i, "edges": {"child": [f"c{j}" for j in range(i % 7)]}} for i in range(3000)}},
    [list(range(i % 50)) for i in range(2000)],
]


@pytest.mark.parametrize("doc", EDGE_CASES, ids=range(len(EDGE_CASES)))
def test_round_trip_edge_cases(store: Store, doc: Any) -> None:
    assert same(store.read(store.commit(doc)), doc)


def _nested(depth: int, leaf: Any = "leaf") -> Any:
    doc: Any = leaf
    for i in range(depth):
        doc = [doc] if i % 2 else {"k": doc}
    return doc


def test_nesting_up_to_the_limit_round_trips(store: Store) -> None:
    from crewckpt.history.limits import MAX_DEPTH
    back = store.read(store.commit(_nested(MAX_DEPTH, 2**70)))
    for i in reversed(range(MAX_DEPTH)):
        back = back[0] if i % 2 else back["k"]
    assert back == 2**70


@pytest.mark.parametrize("depth", [256, sys.getrecursionlimit() * 3])
def test_nesting_deeper_than_the_limit_is_refused_at_commit(store: Store, depth: int) -> None:
    from crewckpt.errors import DocumentTooLarge
    with pytest.raises(DocumentTooLarge, match="deeper than 255 levels"):
        store.commit(_nested(depth))
    with pytest.raises(DocumentTooLarge):  # big ints make orjson refuse first: the walk checks depth too
        store.commit(_nested(depth, 2**70))
    assert store.list() == []


def test_a_document_that_contains_itself_fails_at_once(store: Store) -> None:
    d: dict[str, Any] = {"a": 1}
    d["self"] = d
    with pytest.raises(ValueError, match=r"contains itself \(circular reference at \$\.self\)"):
        store.commit(d)
    lst: list[Any] = [1]
    lst.append({"x": lst})
    with pytest.raises(ValueError, match=r"circular reference at \$\[1\]\.x"):
        store.commit(lst)
    assert store.list() == []


def test_not_json_is_a_type_error_and_writes_nothing(store: Store) -> None:
    for bad in ({"a": b"bytes"}, {"a": {1, 2}}, {1: "int key"}, {"a": object()}):
        with pytest.raises(TypeError):
            store.commit(bad)
    for bad in ({"f": float("nan")}, [1, float("inf")], {"x": {"deep": [float("-inf")]}}):
        with pytest.raises(ValueError, match="not a JSON number"):
            store.commit(bad)
    assert store.list() == [] and store.branches() == {}


def test_frozen_values_round_trip_and_reuse(store: Store) -> None:
    node = {"event": {"type": "task_started", "text": "t" * 5000}, "edges": {"child": ["a"]}}
    f = Frozen(node, json.dumps(node, separators=(",", ":")).encode())
    c1 = store.commit({"event_record": {"nodes": {"n1": f}}})
    c2 = store.commit({"event_record": {"nodes": {"n1": f, "n2": Frozen(3)}}}, profile=CREWAI)
    assert store.read(c1) == {"event_record": {"nodes": {"n1": node}}}
    assert store.read(c2) == {"event_record": {"nodes": {"n1": node, "n2": 3}}}
    assert store.info(c2).summary["event_count"] == 2


def test_dedup_unchanged_parts_are_stored_once(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    base = {"events": {f"e{i}": {"payload": f"event {i} " * 40} for i in range(5000)}}
    s.commit(base)
    body1 = s.stats()["body_bytes"]
    base["events"]["e999"]["payload"] = "edited"
    base["events"]["new"] = {"payload": "appended"}
    s.commit(base)
    body2 = s.stats()["body_bytes"]
    assert body2 - body1 < body1 / 15, (body1, body2)  # two ~16 KiB leaves and the path to the root


def test_commit_records_parents_branch_time_seq_summary(store: Store) -> None:
    doc = {"entities": [{"entity_type": "crew", "name": "research",
                         "tasks": [{"output": {"raw": "x"}}, {"output": None}]}],
           "event_record": {"nodes": {"a": {}, "b": {}}}}
    c1 = store.commit(doc, trigger="task_completed", meta={"note": "first"}, run_id="run-a", profile=CREWAI)
    c2 = store.commit(doc, time_ns=5)  # a clock that jumped back
    i1, i2 = store.info(c1), store.info(c2)
    assert i2.parents == (c1,) and i1.parents == ()
    assert i2.seq > i1.seq and i2.time_ns == 5
    assert store.list("main")[-1].id == c2  # write order, not time order
    assert i1.summary == {"entities": [["crew", "research"]], "tasks_done": 1, "tasks_total": 2, "event_count": 2,
                          "logical_bytes": len(json.dumps(doc, separators=(",", ":")))}
    assert i2.summary == {"logical_bytes": i1.summary["logical_bytes"]}  # the store's generic profile
    assert i1.trigger == "task_completed" and i1.meta == {"note": "first"} and i1.run_id == "run-a"
    assert store.runs()["run-a"] == c1
    root = store.commit({"x": 1}, parents=[])
    assert store.info(root).parents == ()


def test_two_runs_on_main_stay_reachable(store: Store) -> None:
    a1 = store.commit({"run": "a", "n": 1}, run_id="ra")
    b1 = store.commit({"run": "b", "n": 1}, run_id="rb", parents=[])
    a2 = store.commit({"run": "a", "n": 2}, run_id="ra", parents=[a1])
    assert store.runs() == {"ra": a2, "rb": b1}
    assert store.branches()["main"] == a2
    assert {c.id for c in store.list("main")} == {a1, b1, a2}


@pytest.mark.parametrize("name", ["", "../x", "/abs", "a//b", "a..b", "-x", "x.lock", "x/", "a b", "a\x00b",
                                  "a~1", "a^", "a:b", "a?", "a*", "a[", "a\\b", "@", "HEAD", "latest", "x@{1}",
                                  ".hidden", "a/.b", "end.", "x" * 201, "tab\t", "refs/heads/main", "refs"])
def test_bad_branch_names_fail_before_writing(store: Store, name: str) -> None:
    with pytest.raises(BadRefName) as e:
        store.commit({"a": 1}, branch=name)
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)
    assert store.list() == []


def test_unicode_branch_names_are_normalized(store: Store) -> None:
    c1 = store.commit({"a": 1}, branch="caf\u00e9")
    c2 = store.commit({"a": 2}, branch="cafe\u0301")
    assert list(store.branches()) == ["caf\u00e9"] and store.info(c2).parents == (c1,)


def test_revisions(store: Store) -> None:
    ids = [store.commit({"n": i}, alias=f"20261129T23422{i}_0d85936{i}") for i in range(5)]
    fork = store.commit({"n": "f"}, branch="exp", parents=[ids[2]])
    merge = store.commit({"n": "m"}, branch="exp", parents=[fork, ids[4]])
    r = store.resolve
    assert r(ids[3]) == ids[3] and r(ids[3].upper()) == ids[3]
    assert r("main") == ids[4] and r("main~2") == ids[2] and r("main^") == ids[3] and r("main^^") == ids[2]
    assert r("main~0") == ids[4] and r("exp^2") == ids[4] and r("exp^1") == fork and r("exp^0") == merge
    assert r("exp~1~1") == ids[2] and r("exp^~2") == ids[1]
    # HEAD names the current branch (main: writing on exp did not switch it); latest is the last written
    assert r("HEAD") == ids[4] == r("@") and r("latest") == merge and r("HEAD~1") == ids[3] == r("@~1")
    assert r("main@{0}") == ids[4] and r("main@{4}") == ids[0] and r("refs/heads/exp") == merge
    assert r("20261129T234221_0d859361") == ids[1] and r("20261129T234221_0d859361~1") == ids[0]
    assert store.read("main~4") == {"n": 0}
    short = {c[:4] for c in ids}
    uniq = [c for c in ids if sum(x.startswith(c[:6]) for x in ids + [fork, merge]) == 1]
    assert r(uniq[0][:6]) == uniq[0] and len(short) >= 1
    for bad in ("nope", "main~9", "exp^3", "main@{9}", "main~x", "", "~1", "abc", "zzzz", "a" * 2000):
        with pytest.raises(UnknownRevision) as e:
            r(bad)
        assert "\n" not in str(e.value) and len(str(e.value)) < 300
    with pytest.raises(UnknownRevision, match="at least 4 hex"):
        r(ids[0][:3])
    with pytest.raises(UnknownRevision, match="only 4 ancestor"):
        r("main~9")
    with pytest.raises(UnknownRevision, match="is a tree, not a commit"):
        r(store.info(ids[0]).tree)


def test_ambiguous_prefix_lists_candidates() -> None:
    # Fixed times and run id make the ids a pure function of the contents: commit until two ids share 4
    # hex digits (the same 270 commits every run; a collision is certain long before 5,000).
    s = Store.memory()
    by4: dict[str, list[str]] = {}
    for i in range(5000):
        c = s.commit({"n": i}, branch=f"b{i % 3}", run_id="ambiguity", time_ns=1_700_000_000_000_000_000 + i)
        by4.setdefault(c[:4], []).append(c)
        if len(by4[c[:4]]) == 2:
            break
    prefix, cands = c[:4], by4[c[:4]]
    assert len(cands) == 2
    with pytest.raises(AmbiguousRevision) as e:
        s.resolve(prefix)
    msg = str(e.value)
    assert all(c[:12] in msg for c in cands) and " on b" in msg
    assert s.resolve(cands[0][:12]) == cands[0]  # more characters pick one


def test_log_follows_10000_commits_and_marks_pruned_parents(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    for i in range(10_000):
        s.commit({"i": i})
    log = list(s.log("main"))
    assert len(log) == 10_000 and log[0].summary["logical_bytes"] > 0 and log[-1].parents == ()
    assert [c.id for c in log[:3]] == [s.resolve("main"), s.resolve("main~1"), s.resolve("main~2")]
    assert len(list(s.log("main", limit=20))) == 20
    s.prune("main", keep=3)
    s.gc()
    entries = list(s.log("main"))
    assert len(entries) == 4 and isinstance(entries[-1], PrunedCommit)


def test_prune_is_per_branch_with_identical_timestamps(store: Store) -> None:
    mains = [store.commit({"m": i}, time_ns=1_000) for i in range(6)]
    exps = [store.commit({"e": i}, branch="exp", time_ns=1_000) for i in range(4)]
    future = store.commit({"m": "future"}, time_ns=2**62)
    last = store.commit({"m": "last"}, time_ns=1_000)
    assert store.prune("main", keep=2, dry_run=True) == mains
    gone = store.prune("main", keep=2)
    assert gone == mains  # the future-dated commit is not 'newest': the sequence decides
    assert [c.id for c in store.list("main")] == [future, last]
    assert [c.id for c in store.list("exp")] == exps
    with pytest.raises(ValueError):
        store.prune("main")
    with pytest.raises(ValueError):
        store.prune("main", keep=0)


def test_prune_dry_run_lists_exactly_and_older_than(store: Store) -> None:
    old = [store.commit({"i": i}, time_ns=1) for i in range(3)]
    new = store.commit({"i": "new"})
    assert store.prune("main", keep=1, dry_run=True) == old
    assert len(store.list("main")) == 4
    assert store.prune("main", older_than_ns=10**9) == old
    assert [c.id for c in store.list("main")] == [new]


def test_branch_create_rename_delete_and_merge_base(store: Store) -> None:
    a = [store.commit({"a": i}) for i in range(3)]
    store.create_branch("exp", "main~1")
    e = store.commit({"e": 1}, branch="exp")
    assert store.merge_base("main", "exp") == a[1]
    with pytest.raises(BranchExists):
        store.create_branch("exp", "main")
    store.rename_branch("exp", "trial")
    assert "exp" not in store.branches() and store.resolve("trial") == e
    assert store.info(e).branch == "trial" and store.resolve("trial@{2}") == a[1]  # the rename is logged, as in git
    store.delete_branch("trial")
    assert set(store.branches()) == {"main"}
    with pytest.raises(UnknownRevision):
        store.delete_branch("trial")
    assert store.read(e) == {"e": 1}  # commits outlive their branch until pruned


def test_gc_sweeps_pruned_snapshots_and_the_file_shrinks(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    rnd = random.Random(7)
    for i in range(40):
        s.commit({"i": i, "blob": rnd.randbytes(30_000).hex(), "shared": "same " * 2000})
    s.gc()
    before = s.stats()["file_bytes"]
    s.prune("main", keep=2)
    report = s.gc()
    after = s.stats()["file_bytes"]
    assert report.deleted_objects > 0 and after < before / 3, (before, after)
    assert s.read("main~1")["i"] == 38 and s.fsck(full=True).ok
    assert s.gc(dry_run=True).deleted_objects == 0


def test_fsck_names_a_truncated_object_and_the_commit_that_needs_it(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    keep = s.commit({"keep": "k" * 3000})
    victim = s.commit({"text": "z" * 3000, "other": ["o" * 3000]}, branch="b")
    tree = s.info(victim).tree
    s.close()
    db = sqlite3.connect(tmp_path / "s" / "store.db")
    frame = db.execute("SELECT frame FROM objects WHERE oid=?", (bytes.fromhex(tree),)).fetchone()[0]
    db.execute("UPDATE objects SET frame=? WHERE oid=?", (frame[: len(frame) // 2], bytes.fromhex(tree)))
    db.commit()
    db.close()
    s = Store.open(tmp_path / "s")
    report = s.fsck()
    assert not report.ok and tree in report.broken
    assert report.affected == {victim: [tree]}
    with pytest.raises(IntegrityError):
        s.read(victim)
    assert s.read(keep) == {"keep": "k" * 3000}


def test_fsck_is_clean_on_a_document_that_is_one_long_string(tmp_path: Path) -> None:
    # a string of 8,193-16,383 bytes is one blob and the commit links it directly (objects_format.md 5.1: the
    # root is ext 0 or ext 3); quick fsck read every root as a tree and called it damaged (hostile-input review)
    s = Store.init(tmp_path / "s")
    ids = [s.commit("a" * 9000), s.commit("é" * 6000), s.commit("b" * 20000), s.commit({"k": "c" * 9000})]
    assert s.fsck().ok and s.fsck(full=True).ok
    assert [s.read(c) for c in ids] == ["a" * 9000, "é" * 6000, "b" * 20000, {"k": "c" * 9000}]
    # and a root blob whose stored object is a tree is still reported, on the commit that links it
    blob = s.info(ids[0]).tree
    tree = s.info(ids[3]).tree
    s.close()
    db = sqlite3.connect(tmp_path / "s" / "store.db")
    kind = db.execute("SELECT kind FROM objects WHERE oid=?", (bytes.fromhex(tree),)).fetchone()[0]
    db.execute("UPDATE objects SET kind=? WHERE oid=?", (kind, bytes.fromhex(blob)))
    db.commit()
    db.close()
    report = Store.open(tmp_path / "s").fsck()
    assert not report.ok and ids[0] in report.broken and "as a blob, but it is a tree" in report.broken[ids[0]]


def test_opening_bad_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(StoreNotFound, match="no such folder"):
        Store.open(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(StoreNotFound, match="not a crewckpt store"):
        Store.open(tmp_path / "plain")
    assert not (tmp_path / "plain" / "store.db").exists()  # nothing silently created
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "store.db").write_bytes(b"this is not sqlite" * 10)
    with pytest.raises(CorruptStore, match="junk"):
        Store.open(tmp_path / "junk")
    s = Store.init(tmp_path / "good")
    for i in range(50):
        s.commit({"i": i, "pad": "p" * 20_000})
    s.gc()
    s.close()
    data = (tmp_path / "good" / "store.db").read_bytes()
    (tmp_path / "trunc").mkdir()
    (tmp_path / "trunc" / "store.db").write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptStore, match="truncated"):
        Store.open(tmp_path / "trunc")
    with pytest.raises(StoreExists):
        Store.init(tmp_path / "good")
    db = sqlite3.connect(tmp_path / "good" / "store.db")
    db.execute("UPDATE meta SET value='99' WHERE key='format_version'")
    db.commit()
    db.close()
    with pytest.raises(FormatVersionError, match="newer"):
        Store.open(tmp_path / "good")
    # discovery: CKPT_STORE, then walking up from the working directory
    Store.init(tmp_path / "proj" / ".ckpt").close()
    (tmp_path / "proj" / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "proj" / "a" / "b")
    monkeypatch.delenv("CKPT_STORE", raising=False)
    assert Store.open().path == tmp_path / "proj" / ".ckpt"
    monkeypatch.setenv("CKPT_STORE", str(tmp_path / "plain"))
    with pytest.raises(StoreNotFound):
        Store.open()


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    c = s.commit({"a": [1, 2, {"b": "c" * 5000}]}, alias="crewai-id", meta={"m": 1})
    s.close()
    s2 = Store.open(tmp_path / "s")
    assert s2.read("crewai-id") == {"a": [1, 2, {"b": "c" * 5000}]} and s2.info(c).meta == {"m": 1}
    c2 = s2.commit({"a": 2})
    assert s2.info(c2).parents == (c,)


def test_automatic_repack_merges_small_packs_and_keeps_every_commit(tmp_path: Path) -> None:
    from crewckpt.format import objects as ob
    s = Store.init(tmp_path / "s")
    docs = [{"i": i, "events": {f"e{j}": {"text": f"event {j} " * 30} for j in range(i + 2)}} for i in range(48)]
    ids = [s.commit(d) for d in docs]
    packs = [m for m in s.backend.iter_objects() if m.kind == ob.PACK]
    assert len(packs) < 32, len(packs)  # without merging there would be one pack per checkpoint
    fresh = Store.open(tmp_path / "s")
    assert all(fresh.read(c) == d for c, d in zip(ids, docs))
    assert fresh.fsck(full=True).ok


def test_gc_waits_for_a_short_lock_holder(tmp_path: Path) -> None:
    import threading
    import time
    s = Store.init(tmp_path / "s")
    s.commit({"a": 1})
    held = threading.Event()

    def hold() -> None:
        with s.backend.gc_lock() as got:
            assert got
            held.set()
            time.sleep(0.5)  # like a writer's automatic repack

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    other = Store.open(tmp_path / "s")
    report = other.gc(wait_s=10)  # waits instead of failing with GcBusy
    t.join()
    assert report.live_objects > 0 and other.fsck().ok


def test_prune_of_one_branch_keeps_the_history_other_branches_reach(tmp_path: Path) -> None:
    """`ckpt prune --branch main --keep 5` on the demo store cut `sea-otters` off its fork point (a new user's
    finding): prune of one branch never removes what another branch's history needs."""
    with Store.init(tmp_path / "s") as s:
        main = [s.commit({"i": i}) for i in range(6)]
        fork = s.commit({"f": 1}, branch="fork", parents=[main[2]])
        s.commit({"f": 2}, branch="fork")
        s.create_branch("pin", main[1])  # a branch with no commits of its own, at an old main commit
        gone = s.prune("main", keep=1)
        assert gone == [main[3], main[4]]  # main[0..2]: fork's and pin's history
        assert [c.id for c in s.log("fork")][-4:] == [fork, main[2], main[1], main[0]]
        assert [c.id for c in s.log("pin")] == [main[1], main[0]]
        assert s.prune("main", keep=1) == [] and s.fsck().ok


@pytest.mark.parametrize("via", ["branch", "alias"])
def test_a_name_that_is_another_commits_short_id_is_ambiguous(tmp_path: Path, via: str) -> None:
    # before: an imported CrewAI id (or branch folder) named like a commit's short id silently took that id
    # over: `ckpt show <id copied from ckpt log>` showed the sender's checkpoint
    s = Store.init(tmp_path / "s")
    mine = s.commit({"mine": 1}, branch="main")
    short = mine[:8]
    if via == "branch":
        theirs = s.commit({"theirs": 1}, branch=short, parents=[])
    else:
        theirs = s.commit({"theirs": 1}, branch="imported", parents=[], alias=short)
    with pytest.raises(AmbiguousRevision, match=rf"'{short}' is ambiguous: .*{theirs[:12]}.*short id of "
                                                rf"checkpoint {mine[:12]}; give more characters of the id"):
        s.resolve(short)
    assert s.resolve(mine[:12]) == mine and s.resolve(mine) == mine
    if via == "branch":
        assert s.resolve(f"refs/heads/{short}") == theirs
    named = s.commit({"named": 1}, branch="n", parents=[])
    s.create_branch(named[:8], named)  # a branch named after its own commit's short id is not a shadow
    assert s.resolve(named[:8]) == named


def _lists(n: int) -> Any:
    v: Any = 1
    for _ in range(n):
        v = [v]
    return v


def test_hinted_values_cannot_nest_past_what_a_read_accepts_or_contain_themselves() -> None:
    # a Parts piece and a sized Frozen value were not measured for depth (the summary takes a Frozen's size and
    # a piece on its own): the commit landed and every read refused it; a cycle inside one ran until memory ran
    # out (hostile-input review). Now refused in one line before anything is stored, as for a plain document.
    from crewckpt.errors import DocumentTooLarge
    from crewckpt.history.snapshot import Parts
    s = Store.memory()
    ok = [s.commit(doc) for doc in ({"w": Parts([{"k": _lists(253)}])}, Parts([{"a": _lists(254)}]), _lists(255),
                                    Frozen(_lists(255), size=511))]
    assert [s.read(c) for c in ok][2] == _lists(255)
    loop: list[Any] = []
    loop.append(loop)
    self_map: dict[str, Any] = {}
    self_map["me"] = Frozen(self_map)
    bad = [({"w": Parts([{"k": _lists(254)}])}, DocumentTooLarge, "deeper than (the )?255"),
           (Frozen(_lists(300), size=601), DocumentTooLarge, "deeper than (the )?255"),
           ({"f": Frozen(loop, size=5)}, ValueError, r"contains itself \(circular reference at \$\.f\[0\]\)"),
           ({"f": Parts([Frozen({"a": loop}, size=9)])}, ValueError, r"circular reference at \$\.f\.a\[0\]"),
           (self_map, ValueError, r"circular reference at \$\.me\)")]
    for doc, error, message in bad:
        with pytest.raises(error, match=message):
            s.commit(doc)
    assert [c.id for c in s.log("main")] == ok[::-1] and s.fsck(full=True).ok


def test_int_and_dict_subclasses_are_stored_as_the_values_they_hold() -> None:
    # hostile-input review: a big int subclass with its own __str__ (IntEnum's on Python 3.10) stored its name
    # as the decimal (every read: "bad big integer"); a dict subclass whose __iter__ differs from its values'
    # order stored keys against the wrong values
    import enum

    class Huge(enum.IntEnum):
        BIG = 2**70
        __str__ = enum.Enum.__str__

    class Reversed(dict):  # type: ignore[type-arg]
        def __iter__(self) -> Any:
            return reversed(list(super().__iter__()))

    s = Store.memory()
    assert s.read(s.commit({"n": Huge.BIG, "m": [Huge.BIG]})) == {"n": 2**70, "m": [2**70]}
    back = s.read(s.commit({"x": Reversed(a=1, b=2)}))
    assert back["x"]["a"] == 1 and back["x"]["b"] == 2
    assert s.fsck(full=True).ok


def test_a_refreezer_does_not_reuse_an_earlier_version_for_a_datetime_or_dataclass() -> None:
    # hostile-input review: Refreezer compared orjson text, which writes a datetime as its ISO string and a
    # dataclass as a dict, so after an equal-looking version the commit was accepted and read back that version
    import dataclasses
    import datetime

    from crewckpt.history.snapshot import Refreezer

    @dataclasses.dataclass
    class Point:
        x: int

    when = datetime.datetime(2026, 12, 7, tzinfo=datetime.timezone.utc)
    pad = "p" * 600
    for earlier, later in ((when.isoformat(), when), ({"x": 1}, Point(1))):
        s, r = Store.memory(), Refreezer()
        s.commit(r({"a": earlier, "pad": pad}))
        with pytest.raises(TypeError, match="is not JSON"):
            s.commit(r({"a": later, "pad": pad}))
        assert len(s.list()) == 1


@pytest.mark.parametrize("value", [b"x", {1, 2}, frozenset(), bytearray(b"x"), complex(1, 2)])
def test_a_value_json_cannot_hold_is_refused_naming_its_type_and_the_fix(value: Any) -> None:
    # before: "Object of type bytes is not JSON serializable" (json's message, from the document's size)
    s = Store.memory()
    with pytest.raises(TypeError, match=rf"value of type {type(value).__name__} at \$\.a\[0\] is not JSON; give strings") as info:
        s.commit({"a": [value]})
    assert "\n" not in str(info.value) and s.list() == []


def test_an_append_map_entry_that_is_not_frozen_is_refused_at_once() -> None:
    # before: set("a", 1) was taken and parts() failed later with "'int' object has no attribute 'size'"
    from crewckpt.history.snapshot import AppendMap
    log = AppendMap()
    with pytest.raises(TypeError, match=r"a string key and a Frozen value, got str and int; wrap the value"):
        log.set("a", 1)  # type: ignore[arg-type]
    log.set("b", Frozen({"x": 1}))
    s = Store.memory()
    assert s.read(s.commit({"log": log.parts()})) == {"log": {"b": {"x": 1}}}


def test_a_parts_value_among_its_own_pieces_and_deep_or_cyclic_meta_are_refused_in_one_line() -> None:
    # second hostile-input review: a sized Frozen group holding itself ran until memory ran out (a group adds no
    # level, so the depth limit never stopped it); an unsized one escaped as RecursionError; meta with tuples
    # nested 3,000 deep or holding itself crashed the process inside orjson (3.13 does not count tuple levels)
    from crewckpt.history.snapshot import Parts
    s = Store.memory()
    first = s.commit({"a": 1})
    sized = Frozen(Parts([{"a": 1}]), size=7)
    sized.value.pieces.append(sized)
    plain_group = Parts([{"a": 1}])
    plain_group.pieces.append(plain_group)
    for doc in ({"r": Parts([sized])}, {"x": plain_group}):
        with pytest.raises(ValueError, match="contains itself") as info:
            s.commit(doc)
        assert "\n" not in str(info.value)
    deep: Any = 1
    for _ in range(3000):
        deep = (deep,)
    loop: list[Any] = []
    loop.append((loop,))
    for meta in ({"t": deep}, {"l": loop}):
        with pytest.raises(ValueError, match="meta nests deeper than 255 levels or contains itself"):
            s.commit({"a": 2}, meta=meta)
    assert [c.id for c in s.log()] == [first] and s.fsck(full=True).ok
    assert s.info(s.commit({"a": 3}, meta={"ok": (1, [2, (3,)])})).meta == {"ok": [1, [2, [3]]]}


def test_a_document_of_tuples_nested_thousands_deep_is_refused_in_one_line_not_a_crash() -> None:
    # orjson 3.13 does not count tuple levels: sizing such a document before the splitter refused it aborted the
    # process (free(): invalid next size); a child process, so the old code fails this test instead of the run
    script = textwrap.dedent("""
        from crewckpt.history.snapshot import Frozen, Parts
        from crewckpt.history.store import Store
        deep = "x"
        for _ in range(3000):
            deep = (deep,)
        s = Store.memory()
        first = s.commit({"a": 1})
        for doc in ({"a": deep}, {"a": {"b": [deep]}}, {"a": Frozen(deep)}, {"a": Frozen({"b": deep}, size=10)},
                    {"a": Parts([{"x": 1}, {"y": deep}])}, {"a": Parts([Frozen({"z": deep})])}):
            try:
                s.commit(doc)
            except ValueError as e:
                assert "deeper than 255 levels" in str(e) and "\\n" not in str(e), e
            else:
                raise AssertionError("committed")
        assert [c.id for c in s.log()] == [first] and s.fsck(full=True).ok
        print("refused all")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout.strip()) == (0, "refused all"), out.stderr[-2000:]


def test_a_cycle_through_a_parts_piece_is_named_by_its_path() -> None:
    # before: "nests containers deeper than 255 levels" (the size walk rebuilt each Parts value with plain(), so
    # it never saw the repeat); the splitter, which now runs first, tracks what is on the path
    from crewckpt.history.snapshot import Parts
    s = Store.memory()
    d: dict[str, Any] = {}
    p = Parts([d])
    d["x"] = p
    for doc, path in (({"a": p}, "$.a.x"), ({"a": Frozen(p)}, "$.a.x"),
                      ({"a": Parts([{"y": 1}, Frozen(Parts([d]))])}, "$.a.x.x")):
        with pytest.raises(ValueError, match=rf"contains itself \(circular reference at {path.replace('$', '[$]')}\)"):
            s.commit(doc)
    assert s.list() == []


def test_revisions_into_pruned_history_name_the_revision_and_where_history_ends(tmp_path: Path) -> None:
    # fresh-user trial: `ckpt show main~6` after a prune said only "commit eb5a0b4b34b9 was pruned; its parents
    # are unknown" (no revision, no fix), and an id `ckpt prune` had just printed was "not a commit id"
    from crewckpt.errors import UnknownRevision
    s = Store.init(tmp_path / "s")
    ids = [s.commit({"step": i}) for i in range(10)]
    s.prune(keep=3, branch="main")
    s.gc()
    for rev, want in (("main~5", r"revision 'main~5' goes past pruned history: 3 step\(s\) from main is commit "
                                 rf"{ids[6][:12]}, which was pruned, so its parents are unknown; `ckpt log main`"),
                      ("main~3", rf"revision 'main~3': commit {ids[6][:12]} was pruned and collected; `ckpt log main`"),
                      (ids[2][:8], rf"unknown revision '{ids[2][:8]}': commit {ids[2][:12]} was pruned and collected "
                                   r"by gc \(a reflog still names it\)"),
                      ("abcdef12", r"not a commit id, branch or checkpoint id; see `ckpt list`")):
        with pytest.raises(UnknownRevision, match=want) as info:
            s.resolve(rev)
        assert "\n" not in str(info.value)
    assert s.resolve("main~2") == ids[7]
    s.close()


def test_commit_fields_a_reader_would_refuse_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    # hostile review: time_ns=time.time() * 1e9 (a float), trigger=5 or alias=b"x" were stored; main moved to a
    # commit whose object every read refused ("commit fields have wrong types"), so the branch was unreadable
    import time
    s = Store.init(tmp_path / "s")
    first = s.commit({"a": 1})
    c1 = first
    for kw, err, want in (
            ({"time_ns": time.time() * 1e9}, TypeError, r"time_ns must be an int .* use time.time_ns\(\)"),
            ({"time_ns": True}, TypeError, "got bool"), ({"time_ns": "1"}, TypeError, "got str"),
            ({"time_ns": 2**63}, ValueError, r"outside 0..2\*\*63-1"), ({"time_ns": -1}, ValueError, "outside"),
            ({"trigger": 5}, TypeError, "trigger must be a string or None, got int"),
            ({"trigger": ["a"]}, TypeError, "got list"), ({"alias": b"x"}, TypeError, "alias must be a string"),
            ({"alias": "\ud800"}, ValueError, "alias holds a lone surrogate"),
            ({"run_id": 5}, TypeError, "run_id must be a string or None"),
            ({"parents": c1}, TypeError, r"parents must be a list of revisions"),
            ({"parents": [5]}, TypeError, r"parents must be a list of revisions"),
            ({"parents": {c1: 1}}, TypeError, r"parents must be a list of revisions"),
            ({"profile": "crewai"}, TypeError, "profile must be a crewckpt Profile")):
        with pytest.raises(err, match=want) as info:
            s.commit({"a": 2}, **kw)
        assert "\n" not in str(info.value)
    assert [c.id for c in s.log("main")] == [first] and s.read("main") == {"a": 1} and s.fsck(full=True).ok
    assert s.info(s.commit({"a": 3}, time_ns=5, trigger="t", alias="x", run_id="r")).time_ns == 5
    # second review: the check consumed a generator of parents, and the commit became a root
    assert s.info(s.commit({"a": 4}, parents=(p for p in [first]))).parents == (first,)
    s.close()


def test_prune_of_a_branch_that_does_not_exist_or_with_a_wrong_typed_rule_is_refused(store: Store) -> None:
    # hostile review: prune("mian", keep=1) returned [] silently; keep=1.5 said "slice indices must be integers"
    from crewckpt.errors import UnknownRevision
    for _ in range(3):
        store.commit({"a": 1}, branch="main")
    with pytest.raises(UnknownRevision, match=r"no branch named 'mian'; did you mean the branch 'main'\?"):
        store.prune("mian", keep=1)
    for kw, want in (({"keep": 1.5}, "keep must be an int, got float"), ({"keep": True}, "got bool"),
                     ({"keep": "1"}, "got str"), ({"older_than_ns": 1.0}, "older_than_ns must be an int")):
        with pytest.raises(TypeError, match=want):
            store.prune("main", **kw)
    assert len(store.list("main")) == 3
    assert len(store.prune("main", keep=1)) == 2


def test_gc_and_read_bounds_of_another_type_are_refused_in_one_line(store: Store) -> None:
    # hostile review: gc(grace_s="5") said "can't multiply sequence by non-int"; read(max_nodes="5") "'>' not
    # supported"
    c = store.commit({"a": 1})
    for call, want in ((lambda: store.gc(grace_s="5"), "grace_s must be a number of seconds"),  # type: ignore[arg-type]
                       (lambda: store.gc(wait_s=float("nan")), "wait_s must be a number"),
                       (lambda: store.read(c, max_nodes="5"), "max_nodes must be an int or None, got str"),  # type: ignore[arg-type]
                       (lambda: store.read(c, max_bytes=1.5), "max_bytes must be an int or None")):  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=want):
            call()
    assert store.read(c, max_nodes=5) == {"a": 1}


def test_a_commit_whose_transaction_was_replayed_against_a_moved_branch_is_made_anew(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL replays a transaction after a lost connection (or a deadlock); when what it read changed
    meanwhile it aborts with RefConflict, "nothing of it was written; retry". Store.commit raised it to the
    caller (the PostgreSQL contract's 4 processes committing to one branch failed once in a CI run); it now
    makes the checkpoint anew on the tip it then reads."""
    from crewckpt.errors import RefConflict

    s = Store.init(tmp_path / "s")
    first = s.commit({"n": 1})
    other = Store.open(tmp_path / "s")
    real = s.backend.transaction
    calls: list[int] = []

    def replayed() -> Any:
        calls.append(1)
        if len(calls) == 1:  # another writer moves the branch, then this transaction is aborted on replay
            other.commit({"n": 2})
            raise RefConflict("the store changed while this transaction was replayed after a lost connection; "
                              "nothing of it was written; retry")
        return real()

    monkeypatch.setattr(s.backend, "transaction", replayed)
    third = s.commit({"n": 3})
    monkeypatch.undo()
    assert [c.id for c in s.log("main")][:3] == [third, other.resolve("main~1"), first]
    assert s.read("main~1") == {"n": 2} and len(calls) == 2
    other.close()

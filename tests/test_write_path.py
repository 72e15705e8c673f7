"""Issue 13: a checkpoint's work follows what changed (Parts, AppendMap, Refreezer, the CrewAI builder), and
reuse never serves stale content."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from crewckpt import Frozen, Store
from crewckpt.format import objects as ob
from crewckpt.history.snapshot import AppendMap, Parts, Refreezer, Splitter
from crewckpt.history.summary import json_size
from crewckpt.testing import crewai_offline  # noqa: F401  (fixture)
from crewckpt.views.document import SHAPE_KEY, crewai_json, expand_entity


def bare(v: Any) -> Any:
    """The plain JSON value of a document holding Frozen / Parts values."""
    while isinstance(v, Frozen):
        v = v.value
    if isinstance(v, Parts):
        v = v.plain()
    if isinstance(v, dict):
        return {k: bare(x) for k, x in v.items()}
    if isinstance(v, list):
        return [bare(x) for x in v]
    return v


def F(v: Any) -> Frozen:
    return Frozen(v, orjson.dumps(v))


BIG = {f"k{i}": "x" * 300 for i in range(100)}
CASES = [
    Parts([F({"a": 1}), {"b": [1, 2]}, F({})]),
    Parts([F({"a": 1}), {"b": [1, 2]}, F({})], join=True),
    Parts([], join=True),
    Parts([]),
    Parts([[1], [2, 3]], array=True),
    Parts([[1], F([2, 3])], array=True, join=True),
    Parts([F(BIG), F({"z": 1})]),
    Parts([F(BIG), F({"z": 1})], join=True),  # too big for one body: stored as a chunk list, reads the same
    {"x": Frozen(Parts([F({"a": 1}), F({"agent": {"role": "r" * 400}}), F({"c": [1] * 5})], join=True))},
    [Frozen(Parts([F({"a": i}), F({"agent": {"role": "r" * 400}})], join=True)) for i in range(100)],
    {"deep": Parts([F({"a": {"b": {"c": [1, {"d": None}]}}}), F({"e": 1.5})], join=True)},
]


@pytest.mark.parametrize("doc", CASES, ids=range(len(CASES)))
def test_parts_read_back_as_the_plain_value_and_size_as_its_json(doc: Any) -> None:
    s = Store.memory()
    for _ in range(2):  # the second commit reuses the representations cached on the Frozen values
        assert s.read(s.commit(doc)) == bare(doc)
    assert json_size(doc) == len(orjson.dumps(bare(doc)))


def test_a_frozen_seen_inline_elsewhere_first_is_still_a_valid_piece() -> None:
    s = Store.memory()
    small = F({"a": 1})
    s.commit({"inline": small})  # its cached representation is the inline body
    doc = {"inline": small, "parts": Parts([small, F({"b": 2})])}
    assert s.read(s.commit(doc)) == bare(doc)


def test_pieces_must_match_the_container_kind() -> None:
    with pytest.raises(TypeError, match="piece of a Parts object must be a dict"):
        Store.memory().commit(Parts([[1]]))
    with pytest.raises(TypeError, match="Frozen"):
        Store.memory().commit(Frozen(Frozen(1)))


def count_puts(splitter: Splitter, doc: Any) -> int:
    n = 0

    def put(kind: int, body: bytes) -> bytes:
        nonlocal n
        n += 1
        return ob.object_id(kind, body)

    splitter.split(doc, put)
    splitter.keep()
    return n


def append_costs(log: AppendMap, n: int, text: int) -> list[int]:
    """Objects the splitter needs per commit while ``n`` event nodes (``text`` bytes of text each) are appended
    to ``log``, the first node changing every 7th step (as CrewAI's parent nodes gain edges)."""
    sp = Splitter()
    costs = []
    for i in range(n):
        log.set(f"event-{i:05d}", F({"event": {"i": i, "text": "y" * text}, "edges": {}}))
        if i and i % 7 == 0:
            log.set("event-00000", F({"event": {"i": 0}, "edges": {"child": [f"event-{i:05d}"]}}))
        costs.append(count_puts(sp, {"nodes": log.parts(), "step": i}))
    return costs


def test_appending_to_an_append_map_costs_the_same_at_any_length() -> None:
    costs = append_costs(AppendMap(), 3000, 200)
    # objects written per commit: the changed pieces and the path to the root, not the whole record
    assert max(costs[-500:]) <= max(costs[100:600]) <= 8


def test_append_map_reuses_unchanged_pieces_and_keeps_order() -> None:
    log = AppendMap(piece_entries=4)
    for i in range(10):
        log.set(f"e{i}", F(i))
    first = log.parts()
    log.set("e1", F(-1))  # in place
    second = log.parts()
    assert [a is b for a, b in zip(first.pieces, second.pieces)] == [False, True, True]
    assert bare(second) == {f"e{i}": (-1 if i == 1 else i) for i in range(10)}
    assert list(log.keys()) == [f"e{i}" for i in range(10)] and log.last_key() == "e9" and len(log) == 10


def _groups(v: Any, depth: int = 0) -> list[tuple[Any, int]]:
    """Every group (a Frozen Parts piece) under a Parts value, with its depth."""
    out = []
    for p in v.pieces:
        if isinstance(p, Frozen) and isinstance(p.value, Parts):
            out.append((p, depth))
            out.extend(_groups(p.value, depth + 1))
    return out


def test_append_map_groups_sealed_pieces_and_rebuilds_only_the_groups_that_changed(tmp_path: Any) -> None:
    """Every group_pieces sealed pieces become one group (a Frozen Parts: one subtree of the chunk list), every
    group_pieces groups a group of groups; an old entry that changes rebuilds its piece and the groups above
    it only; the top holds a few items per level; every version reads back whole."""
    log = AppendMap(piece_entries=2, group_pieces=3)
    store = Store.init(tmp_path / "s")
    want: dict[str, Any] = {}
    seen: set[int] = set()
    keep: list[Any] = []  # the groups stay alive, so their ids are not reused
    for i in range(120):
        log.set(f"e{i}", F({"i": i, "pad": "p" * (i % 7)}))
        want[f"e{i}"] = {"i": i, "pad": "p" * (i % 7)}
        if i % 5 == 4:  # an old entry changes in place, as a CrewAI node gains an edge
            log.set(f"e{i // 4}", F({"i": -i}))
            want[f"e{i // 4}"] = {"i": -i}
        parts = log.parts()
        assert bare(parts) == want and len(parts) == len(want)
        assert json_size({"nodes": parts}) == len(orjson.dumps({"nodes": want}))
        groups = _groups(parts)
        assert all(len(g.value.pieces) == 3 for g, _ in groups)
        levels = max((d for _, d in groups), default=-1) + 1
        assert len(parts.pieces) <= 3 * (levels + 1)
        new = [g for g, _ in groups if id(g) not in seen]
        assert len(new) <= 2 * levels, (i, len(new), levels)  # the edited path and a newly sealed group per level
        seen.update(id(g) for g, _ in groups)
        keep.extend(new)
        cid = store.commit({"nodes": parts})
        assert store.read(cid) == {"nodes": want}
    assert levels >= 3 and store.fsck().ok
    store.close()


def test_a_grouped_append_map_costs_the_same_at_any_length() -> None:
    """Objects the splitter needs per checkpoint (new or not) grow with the number of group levels only:
    sealed groups are reused whole, not re-walked (without groups the link list is rebuilt every time)."""
    grouped = append_costs(AppendMap(piece_entries=2, group_pieces=4), 2000, 50)
    flat = append_costs(AppendMap(piece_entries=2, group_pieces=10**9), 2000, 50)
    assert max(grouped[-300:]) <= 12 < min(flat[-300:])  # 1,000 pieces: 5 levels of 4; 16 chunk lists of 64


def test_an_append_maps_parts_know_their_length_without_visiting_the_pieces() -> None:
    """The CrewAI summary counts the event record's nodes on every checkpoint: len() of the record's Parts
    must not visit its (hundreds of) pieces."""
    from crewckpt.views.document import summarize

    log = AppendMap(piece_entries=4)
    for i in range(10):
        log.set(f"e{i}", F(i))
    log.set("e3", F(-3))  # in place: still 10 entries
    parts = log.parts()
    assert len(parts) == len(bare(parts)) == 10
    parts.pieces = [F({}) for _ in parts.pieces]  # what len() would count if it walked them (0)
    assert len(parts) == 10 and summarize({"event_record": {"nodes": parts}})["event_count"] == 10
    assert len(Parts([F({"a": 1}), {"b": 2, "c": 3}])) == 3  # without a known length: counted


def test_refreezer_reuses_only_byte_equal_parts() -> None:
    r = Refreezer(small=0)
    v1 = {"a": {"x": [1, 2, 3], "y": "s"}, "b": {"n": 1}, "c": [{"k": 1}, {"k": 2}]}
    out1 = r(orjson.loads(orjson.dumps(v1)))
    v2 = orjson.loads(orjson.dumps(v1))
    v2["b"]["n"] = 1.0  # equal in Python (1 == 1.0), not in JSON: must not be reused
    v2["c"][1]["k"] = True  # True == 1 in Python too
    out2 = r(v2)
    assert bare(out2) == v2 and orjson.dumps(bare(out2)) == orjson.dumps(v2)
    assert bare(out1) == v1
    s = Store.memory()
    assert s.read(s.commit(out2)) == v2
    assert orjson.dumps(s.read(s.commit(out2))) == orjson.dumps(v2)
    out3 = r(orjson.loads(orjson.dumps(v2)))  # unchanged: the very same value comes back
    assert out3 is out2


def test_refreezer_keeps_digests_of_the_previous_version_not_its_json_bytes() -> None:
    r = Refreezer(small=0)
    v = {"a": {"x": ["p" * 2000, "q" * 2000], "y": "s" * 3000}, "b": [{"k": "r" * 1500}, {"k": 2}]}
    out = r(orjson.loads(orjson.dumps(v)))
    held: list[bytes] = []
    frozen: list[Frozen] = []

    def walk(x: Any) -> None:  # the Refreezer's own state: node tuples and their kids, down every level
        if isinstance(x, tuple):
            if isinstance(x[0], bytes):
                held.append(x[0])
            for y in x[1:]:
                walk(y)
        elif isinstance(x, (list, dict)):
            for y in (x.values() if isinstance(x, dict) else x):
                walk(y)
        elif isinstance(x, Frozen):
            frozen.append(x)
        elif isinstance(x, Parts):
            for y in x.pieces:
                walk(y)

    walk(r._prev)
    assert held and all(len(d) == 32 for d in held)  # BLAKE3 digests, whatever the part's size
    assert frozen and all(f.json_bytes is None for f in frozen)
    assert all(f.size == len(orjson.dumps(bare(f))) for f in frozen)  # sizes still exact: summaries stay right
    assert json_size(out) == len(orjson.dumps(v))
    v2 = orjson.loads(orjson.dumps(v))
    v2["a"]["x"][1] = "Q" + "q" * 1999  # same length, one byte different: must not be reused
    out2 = r(v2)
    assert orjson.dumps(bare(out2)) == orjson.dumps(v2)
    assert r(orjson.loads(orjson.dumps(v2))) is out2


def test_summary_counts_tasks_and_events_inside_parts() -> None:
    doc = {"entities": [{"entity_type": "crew", "name": "c",
                         "tasks": [Frozen(Parts([F({"name": "t1"}), F({"output": {"raw": "r"}})], join=True)),
                                   Frozen(Parts([F({"name": "t2"}), F({"output": None})], join=True))]}],
           "event_record": {"nodes": Parts([F({"e1": {}}), F({"e2": {}, "e3": {}})])}}
    from crewckpt.views.document import CREWAI

    s = CREWAI.summary(doc)
    assert (s["tasks_done"], s["tasks_total"], s["event_count"]) == (1, 2, 3)
    assert s["logical_bytes"] == len(orjson.dumps(bare(doc)))


# -- CrewAI ----------------------------------------------------------------------------------------------


def edit_finished_work(output: Any) -> None:
    """Task 2's callback: change task 1's finished output and an agent's field while the run goes on."""
    crew = EDIT["crew"]
    crew.tasks[0].output.raw = "EDITED AFTER THE FACT"
    crew.agents[0].goal = "a goal changed mid-run"


EDIT: dict[str, Any] = {}


@pytest.mark.crewai
@pytest.mark.usefixtures("crewai_offline")
def test_every_checkpoint_equals_crewais_dump_and_shows_mid_run_edits() -> None:
    from crewai.state.runtime import RuntimeState

    from crewckpt.crewai import CheckpointConfig
    from crewckpt.crewai import snapshot as snap
    from crewckpt.testing import research_crew

    theirs: list[bytes] = []
    ours: list[Any] = []
    dumpers: list[Any] = []
    document = snap.SnapshotBuilder.document

    def spy(self: Any, state: RuntimeState, **kw: Any) -> Any:
        doc = document(self, state, **kw)
        want = state.model_dump(mode="json", warnings=False)  # CrewAI's own serializer, at the same moment
        theirs.append(orjson.dumps(want["entities"]))
        ours.append(snap.plain(doc))  # as stored: tasks may name their agent by reference
        dumpers.extend(d for _, d in self._dumpers._d.values())
        return doc

    snap.SnapshotBuilder.document = spy  # type: ignore[method-assign]
    try:
        crew = research_crew(3, checkpoint=CheckpointConfig(on_events=["*"]))
        crew.tasks[1].callback = edit_finished_work
        EDIT["crew"] = crew
        crew.kickoff(inputs={"topic": "otters"})
    finally:
        snap.SnapshotBuilder.document = document  # type: ignore[method-assign]
    store = Store.open(".ckpt")
    commits = store.list()
    assert len(commits) == len(ours) == 2 + 6 * 3
    assert dumpers and all(d.ok and d.held_ok for d in dumpers)  # the pieced path stayed on, fields held
    for c, doc, want in zip(commits, ours, theirs):
        # byte for byte, key order included, once the agent references are expanded
        assert orjson.dumps(crewai_json(doc)["entities"]) == want
        assert store.read(c.id) == doc
    # the tasks named their agent by reference (the crew is entity 0; task 1 is the Writer's, agents[1])
    assert ours[-1][SHAPE_KEY] == {"agent_refs": [0]}
    assert ours[-1]["entities"][0]["tasks"][1]["agent"] == {"$ref": "#/entities/0/agents/1"}
    last = crewai_json(store.read("main"))["entities"][0]
    assert last["tasks"][0]["output"]["raw"] == "EDITED AFTER THE FACT"
    assert last["agents"][0]["goal"] == "a goal changed mid-run"
    assert last["tasks"][0]["agent"]["goal"] == "a goal changed mid-run"  # the copy embedded in the task
    first_edit = next(i for i, d in enumerate(ours)
                      if d["entities"][0]["tasks"][0]["output"]
                      and d["entities"][0]["tasks"][0]["output"]["raw"] == "EDITED AFTER THE FACT")
    assert all(d["entities"][0]["agents"][0]["goal"] == "a goal changed mid-run" for d in ours[first_edit:])


@pytest.mark.crewai
@pytest.mark.usefixtures("crewai_offline")
def test_wide_edge_lists_are_sealed_pieces_that_read_back_as_crewais_edges(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node whose edge list outgrows _WIDE (a crew's kickoff gains a child per event) is split as sealed
    pieces plus a tail: every checkpoint reads back with exactly the edges CrewAI's record held at that moment,
    and a sealed piece is the same object from one checkpoint to the next (reused, not rebuilt)."""
    from crewai.state.runtime import RuntimeState

    from crewckpt.crewai import CheckpointConfig
    from crewckpt.crewai import snapshot as snap
    from crewckpt.testing import research_crew

    monkeypatch.setattr(snap, "_WIDE", 6)  # a 3-task crew's kickoff then has a wide child list
    monkeypatch.setattr(snap, "_EDGE_PIECE", 4)
    theirs: list[dict[str, Any]] = []
    wide: list[dict[tuple[str, str], list[int]]] = []
    document = snap.SnapshotBuilder.document

    def spy(self: Any, state: RuntimeState, **kw: Any) -> Any:
        doc = document(self, state, **kw)
        theirs.append({eid: {k: list(v) for k, v in n.edges.items()} for eid, n in state.event_record.nodes.items()})
        wide.append({key: [id(p) for p in pieces] for key, pieces in self._sealed.items()})
        return doc

    monkeypatch.setattr(snap.SnapshotBuilder, "document", spy)
    research_crew(3, checkpoint=CheckpointConfig(on_events=["*"])).kickoff(inputs={"topic": "otters"})
    store = Store.open(".ckpt")
    commits = store.list()
    assert len(commits) == len(theirs) == 2 + 6 * 3
    for c, want in zip(commits, theirs):
        nodes = store.read(c.id)["event_record"]["nodes"]
        assert list(nodes) == list(want)
        assert {eid: n["edges"] for eid, n in nodes.items()} == want
    assert any(len(ids) > snap._WIDE for n in theirs[-1].values() for ids in n.values())
    sealed = [w for w in wide if w]
    assert len(sealed) > 3 and max(len(p) for w in sealed for p in w.values()) >= 3
    for a, b in zip(sealed, sealed[1:]):  # sealed pieces stay the same objects while the list grows
        for key, pieces in a.items():
            assert b[key][:len(pieces)] == pieces


def test_wide_edges_reseal_when_a_list_no_longer_starts_with_its_sealed_pieces(monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    from crewckpt.crewai import snapshot as snap

    monkeypatch.setattr(snap, "_WIDE", 6)
    monkeypatch.setattr(snap, "_EDGE_PIECE", 4)
    b = snap.SnapshotBuilder()
    ids = [f"e{i}" for i in range(15)]
    first = b._wide_edges("k", {"child": ids, "next": ["n"]})
    assert bare(first) == {"child": ids, "next": ["n"]}
    pieces = first["child"].pieces
    assert [len(bare(p)) for p in pieces] == [4, 4, 4, 3]
    grown = b._wide_edges("k", {"child": [*ids, "e15", "e16"], "next": ["n"]})
    assert grown["child"].pieces[:3] == pieces[:3] and bare(grown)["child"] == [*ids, "e15", "e16"]
    edited = [*ids[:5], "X", *ids[6:]]  # not an append: the second piece and the rest are sealed again
    again = b._wide_edges("k", {"child": edited})
    assert again["child"].pieces[0] is pieces[0] and again["child"].pieces[1] is not pieces[1]
    assert bare(again) == {"child": edited}
    assert json_size(again) == len(orjson.dumps({"child": edited}))


# -- small on disk while running -------------------------------------------------------------------------


def test_finish_writes_merges_the_writers_packs_and_truncates_the_wal(tmp_path: Any) -> None:
    s = Store.init(tmp_path / "s")
    ids = [s.commit({"step": i, "text": [f"line {i} {k} " * 900 for k in range(3)]}) for i in range(10)]
    wal = tmp_path / "s" / "store.db-wal"
    assert wal.stat().st_size > 0
    packs = lambda: sum(1 for m in s.backend.iter_objects() if m.kind == ob.PACK)  # noqa: E731
    assert packs() == 10
    s.finish_writes()
    # the handle released its connection: the last one took the WAL and the -shm index with it
    assert not wal.exists() and not (tmp_path / "s" / "store.db-shm").exists() and packs() == 1
    assert [s.read(c)["step"] for c in ids] == list(range(10))
    s.close()  # nothing more to do: close after finish_writes is cheap and leaves the store alike
    s = Store.open(tmp_path / "s")
    assert [s.read(c)["step"] for c in ids] == list(range(10)) and packs() == 1
    s.close()


def test_a_run_ends_with_one_pack_when_its_packs_are_small(tmp_path: Any) -> None:
    """A run longer than AUTO_PACKS checkpoints merged once on the way; at its end every pack it made becomes
    one (gc's zstd level: a short run's versions compress against each other), and nothing is lost."""
    from crewckpt.history import store as store_mod

    s = Store.init(tmp_path / "s")
    n = 2 * store_mod.AUTO_PACKS + 6
    ids = [s.commit({"step": i, "text": [f"line {i} {k} " * 400 for k in range(3)]}) for i in range(n)]
    packs = lambda: sorted(m.oid for m in s.backend.iter_objects() if m.kind == ob.PACK)  # noqa: E731
    assert 1 < len(packs()) < n // 2  # merged every AUTO_PACKS packs on the way, then one per checkpoint
    s.finish_writes()
    assert len(packs()) == 1
    assert [s.read(c)["step"] for c in ids] == list(range(n))
    assert s.fsck().ok
    for i in range(n, n + 4):  # the next run of the same handle starts a fresh tally
        s.commit({"step": i, "text": [f"line {i} {k} " * 400 for k in range(3)]})
    s.finish_writes()
    assert len(packs()) == 2 and s.read("main")["step"] == n + 3
    s.close()


def test_a_run_too_big_to_merge_whole_keeps_its_merged_packs(tmp_path: Any, monkeypatch: Any) -> None:
    from crewckpt.history import store as store_mod

    monkeypatch.setattr(store_mod, "AUTO_PACKS", 4)
    monkeypatch.setattr(store_mod, "RUN_MERGE_BYTES", 2000)
    s = Store.init(tmp_path / "s")
    ids = [s.commit({"step": i, "text": [f"line {i} {k} " * 400 for k in range(3)]}) for i in range(10)]
    s.finish_writes()  # merged 4 + 4 on the way (over 2000 bytes of bodies), then the last 2
    assert sum(1 for m in s.backend.iter_objects() if m.kind == ob.PACK) == 3
    assert [s.read(c)["step"] for c in ids] == list(range(10))
    s.close()


@pytest.mark.crewai
@pytest.mark.usefixtures("crewai_offline")
def test_a_finished_crew_run_leaves_a_compact_store_while_the_process_lives() -> None:
    from pathlib import Path

    from crewckpt.crewai import CheckpointConfig
    from crewckpt.crewai.writer import open_store
    from crewckpt.testing import research_crew

    research_crew(2, checkpoint=CheckpointConfig(location=".ckpt", on_events=["*"])).kickoff(
        inputs={"topic": "otters"})
    store = open_store(".ckpt")  # the writer's own handle, still open
    # one file while the process lives: the handle released its connection at the run's end (issue 13)
    assert sorted(p.name for p in Path(".ckpt").iterdir()) == ["gc.lock", "store.db"]
    assert sum(1 for m in store.backend.iter_objects() if m.kind == ob.PACK) == 1
    assert len(store.list()) == 2 + 6 * 2


def test_a_joined_object_is_one_body_like_the_plain_dict() -> None:
    joined = {"t": [Frozen(Parts([F({"a": i}), F({"agent": {"role": "r"}}), F({"z": [i]})], join=True))
                    for i in range(3)]}
    plain_doc = bare(joined)
    got, want = Splitter(), Splitter()
    assert count_puts(got, joined) == count_puts(want, plain_doc) == 1  # the root only: no chunk lists
    ids: list[bytes] = []
    for sp, doc in ((Splitter(), joined), (Splitter(), plain_doc)):
        ids.append(sp.split(doc, lambda k, b: ob.object_id(k, b)).oid)
    assert ids[0] == ids[1]  # the very same tree as the plain value


# -- memory and reuse of the CrewAI builder (h7) -----------------------------------------------------------


@pytest.mark.parametrize("event, edges", [
    ({"type": "task_started", "text": "caf\u00e9 \U0001f600 \u2028", "n": [1, 2.5, -0.0, None, True]}, {}),
    ({}, {"parent": ["a"], "next": ["b", "c"]}),
    ({"deep": {"a": [{"b": 1e300}]}}, {"x": []}),
])
def test_an_encoded_node_is_the_plain_node_byte_for_byte(event: Any, edges: Any) -> None:
    from crewckpt.crewai.entities import Encoded

    node = {"event": event, "edges": edges}
    enc = Encoded(b'{"event":' + orjson.dumps(event) + b',"edges":' + orjson.dumps(edges) + b"}")
    assert enc.json_bytes == orjson.dumps(node) and enc.size == len(enc.json_bytes)
    assert enc.value == node and enc.value is not enc.value  # parsed afresh: no caller shares it
    assert json_size({"n": enc}) == json_size({"n": node})
    assert Splitter().split({"n": enc}, ob.object_id) == Splitter().split({"n": node}, ob.object_id)
    store = Store.memory()
    assert store.read(store.commit({"nodes": {"e1": enc, "e2": Frozen(node)}})) == {"nodes": {"e1": node, "e2": node}}


def test_a_compressed_encoded_node_reads_back_the_same_bytes_and_splits_to_the_same_tree() -> None:
    import zstandard

    from crewckpt.crewai.entities import Encoded

    node = {"event": {"type": "task_started", "text": "caf\u00e9 " * 200, "n": [1, 2.5, -0.0]}, "edges": {"x": []}}
    raw = orjson.dumps(node)
    enc, plain_enc = Encoded(raw), Encoded(raw)
    before = Splitter().split({"n": plain_enc}, ob.object_id)
    enc.compress(zstandard.ZstdCompressor(level=1))
    assert enc.json_bytes is None and enc._z is not None and len(enc._z) < len(raw) / 3  # held compressed
    assert enc.encoded() == raw and enc.value == node and enc.size == len(raw)
    enc.compress(zstandard.ZstdCompressor(level=1))  # idempotent
    assert enc.encoded() == raw
    assert json_size({"n": enc}) == json_size({"n": node})
    assert Splitter().split({"n": enc}, ob.object_id) == before
    tiny = Encoded(b'{"event":{},"edges":{}}')
    tiny.compress(zstandard.ZstdCompressor(level=1))
    assert tiny.json_bytes == b'{"event":{},"edges":{}}'  # too small to gain: stays raw


def test_compressing_a_node_drops_the_representation_a_split_kept_and_the_next_split_makes_it_again() -> None:
    import zstandard

    from crewckpt.crewai.entities import Encoded

    node = {"event": {"type": "task_completed", "text": "ot" * 400}, "edges": {"parent": ["e0"]}}
    enc = Encoded(orjson.dumps(node))
    sp = Splitter()
    ids: list[bytes] = []

    def split() -> bytes:
        root = sp.split({"nodes": {"e1": enc}, "n": len(ids)}, ob.object_id)
        sp.keep()
        return root.oid

    ids.append(split())
    assert enc._rep is not None and len(enc._rep[0]) > len(orjson.dumps(node)) / 2  # inline: the whole node
    enc.compress(zstandard.ZstdCompressor(level=1))
    assert enc._rep is None  # the uncompressed msgpack is not held beside the compressed JSON
    ids.append(split())
    assert enc._rep is not None  # made again, the same: the document reads back exactly
    store = Store.memory()
    assert store.read(store.commit({"nodes": {"e1": enc}, "n": 1})) == {"nodes": {"e1": node}, "n": 1}
    assert Splitter().split({"nodes": {"e1": node}, "n": 1}, ob.object_id).oid == ids[1]


@pytest.mark.crewai
@pytest.mark.usefixtures("crewai_offline")
def test_a_compressed_node_holds_about_its_compressed_size_in_memory() -> None:
    """python-zstandard's compress() result keeps an allocation of the compress bound (about the input's size)
    behind its shorter bytes; a settled node must hold a right-sized copy, or the "compressed" event record
    costs as much memory as the raw one (a 300-task run: ~80 MB of RSS)."""
    import tracemalloc

    import zstandard

    from crewckpt.crewai.entities import Encoded

    raw = orjson.dumps({"event": {"text": "word " * 40_000}, "edges": {}})
    node = Encoded(raw)
    cctx = zstandard.ZstdCompressor(level=1)
    tracemalloc.start()
    try:
        node.compress(cctx)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert node.json_bytes is None and node.encoded() == raw
    assert held < 4 * len(node._z) + 4096 < len(raw) // 10, (held, len(node._z), len(raw))


def test_task_pieces_keep_their_size_not_their_json() -> None:
    from crewckpt.crewai.entities import _frozen

    piece = _frozen({"description": "d" * 1000, "n": 1})
    assert piece.json_bytes is None and piece.size == len(orjson.dumps({"description": "d" * 1000, "n": 1}))


def test_settled_event_nodes_are_held_compressed_and_rebuilt_nodes_keep_their_first_dump() -> None:
    from crewckpt.crewai import CheckpointConfig
    from crewckpt.crewai import snapshot as snap
    from crewckpt.crewai.entities import Encoded
    from crewckpt.testing import research_crew

    first: dict[str, bytes] = {}  # event id -> its dump when first checkpointed, made independently
    held: list[tuple[int, int]] = []  # per checkpoint: (bytes the builder holds for its nodes, their JSON size)
    rebuilt_from_compressed = 0
    document = snap.SnapshotBuilder.document

    def spy(self: Any, state: Any, **kw: Any) -> Any:
        nonlocal rebuilt_from_compressed
        was = {e: f for e, (f, _) in self._nodes.items() if isinstance(f, Encoded) and f.json_bytes is None}
        doc = document(self, state, **kw)
        rebuilt_from_compressed += sum(1 for e, f in was.items() if self._nodes[e][0] is not f)
        want = {}
        for eid, node in state.event_record.nodes.items():
            if eid not in first:
                first[eid] = orjson.dumps(self.dump_model(node.event))
            want[eid] = {"event": orjson.loads(first[eid]), "edges": {k: list(v) for k, v in node.edges.items()}}
        assert orjson.dumps(snap.plain(doc)["event_record"]["nodes"]) == orjson.dumps(want)
        nodes = [f for f, _ in self._nodes.values()]
        held.append((sum(len(f.json_bytes or f._z or b"") for f in nodes), sum(f.size for f in nodes)))
        return doc

    snap.SnapshotBuilder.document = spy  # type: ignore[method-assign]
    try:
        research_crew(3, checkpoint=CheckpointConfig(on_events=["*"])).kickoff(inputs={"topic": "otters"})
    finally:
        snap.SnapshotBuilder.document = document  # type: ignore[method-assign]
    assert rebuilt_from_compressed > 0  # a settled node gained an edge later: rebuilt from its compressed bytes
    kept, size = held[-1]
    assert kept < size / 2, held[-1]  # the record is held compressed, not as its JSON
    store = Store.open(".ckpt")
    last = store.read(store.list()[-1].id)
    assert {e: orjson.dumps(n["event"]) for e, n in last["event_record"]["nodes"].items()} == first


@pytest.mark.crewai
@pytest.mark.usefixtures("crewai_offline")
def test_event_nodes_are_kept_as_bytes_and_equal_each_events_first_dump() -> None:
    from crewckpt.crewai import CheckpointConfig
    from crewckpt.crewai import snapshot as snap
    from crewckpt.crewai.entities import Encoded
    from crewckpt.testing import research_crew

    first: dict[str, bytes] = {}  # event id -> its dump when first checkpointed, made independently
    docs: list[Any] = []
    document = snap.SnapshotBuilder.document

    def spy(self: Any, state: Any, **kw: Any) -> Any:
        doc = document(self, state, **kw)
        want = {}
        for eid, node in state.event_record.nodes.items():
            if eid not in first:
                first[eid] = orjson.dumps(self.dump_model(node.event))
            want[eid] = {"event": orjson.loads(first[eid]), "edges": {k: list(v) for k, v in node.edges.items()}}
        got = snap.plain(doc)
        assert orjson.dumps(got["event_record"]["nodes"]) == orjson.dumps(want)
        assert all(isinstance(f, Encoded) for f, _ in self._nodes.values())  # bytes only: no parsed dumps kept
        docs.append(got)
        return doc

    snap.SnapshotBuilder.document = spy  # type: ignore[method-assign]
    try:
        research_crew(2, checkpoint=CheckpointConfig(on_events=["*"])).kickoff(inputs={"topic": "otters"})
    finally:
        snap.SnapshotBuilder.document = document  # type: ignore[method-assign]
    store = Store.open(".ckpt")
    commits = store.list()
    assert len(commits) == len(docs) == 2 + 6 * 2
    assert all(store.read(c.id) == d for c, d in zip(commits, docs))


def _module_level_callback(output: Any) -> None:
    """A callback that round-trips (a module-level function)."""


@pytest.mark.crewai
@pytest.mark.usefixtures("crewai_offline")
def test_a_task_whose_dump_text_did_not_change_is_not_parsed_again_and_a_changed_one_is() -> None:
    import warnings

    from crewckpt.crewai.entities import CrewDumper, _callback_verdict, _held_names
    from crewckpt.crewai.snapshot import SnapshotBuilder, plain
    from crewckpt.testing import research_crew

    crew = research_crew(4)
    builder = SnapshotBuilder()
    dumper = CrewDumper(builder)

    def check() -> list[bool]:
        """Dump through the dumper; it equals the whole dump; returns which tasks were parsed again."""
        names = _held_names(crew.tasks)  # the dumper leaves these out of the text it compares
        assert "output" in names and "prompt_context" in names
        text = crew.model_dump_json(include={"tasks"}, exclude={"tasks": {"__all__": {"agent", *names}}},
                                    warnings=False)
        verdicts = [_callback_verdict(t) for t in crew.tasks]
        parsed = [raw is not None for raw in dumper._task_dumps(text, verdicts, dumper._tasks, True)[0]]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, whole = plain(dumper.dump(crew)), builder.dump_model(crew)
        assert dumper.refs and got["tasks"][0]["agent"] == {"$ref": "#/entities/0/agents/0"}
        got = expand_entity(got, 0, [got], "test")
        assert dumper.ok and orjson.dumps(got) == orjson.dumps(whole)
        return parsed

    check()
    assert check() == [False] * 4  # nothing changed: nothing parsed
    crew.tasks[2].name = "changed"
    assert check() == [False, False, True, False]  # only the task that changed: its end found by the next
    assert check() == [False] * 4
    crew.tasks[0].callback = _module_level_callback
    assert check() == [True, False, False, False]
    crew.tasks[3].name = "the last one"  # the last task: no next task to find its end by, parsed to the end
    assert check() == [False, False, False, True]
    crew.tasks[1].name = "changed"
    crew.tasks[2].name = "changed again"  # two in a row: each found by the one after it
    assert check() == [False, True, True, False]
    crew.tasks[1].name = ',' + crew.model_dump_json(include={"tasks": {2}}, exclude={"tasks": {"__all__": {
        "agent", *_held_names(crew.tasks)}}})[10:-2]  # the next task's text inside a string: escaped, not seen
    assert check() == [False, True, False, False]
    crew.tasks[1].config = {"copy": [0, orjson.loads(crew.model_dump_json(include={"tasks": {2}}, exclude={
        "tasks": {"__all__": {"agent", *_held_names(crew.tasks)}}})[10:-2])]}  # the next task's very text inside
    assert check() == [False, True, True, False]  # that end does not parse; the one after task 2 does
    assert plain(dumper.dump(crew))["tasks"][0]["callback"].endswith("_module_level_callback")
    # the same dotted text, but now a closure: not stored (null), so the task is parsed and cleaned again
    def _module_level_callback_closure(output: Any) -> None: ...  # noqa: E306
    _module_level_callback_closure.__module__ = _module_level_callback.__module__
    _module_level_callback_closure.__qualname__ = _module_level_callback.__qualname__ + ".<locals>.x"
    check()
    crew.tasks[0].callback = _module_level_callback_closure
    assert check()[0] is True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert plain(dumper.dump(crew))["tasks"][0]["callback"] is None


def test_a_tasks_long_fields_are_held_out_of_its_dump_only_while_provably_unchanged() -> None:
    """A task's output and long texts are left out of pydantic's dump while their fingerprint (every object
    reached, compared by identity, every container walked again) is last checkpoint's; any change, in place
    or by assignment, makes that task dumped whole again. Every document is byte-equal to CrewAI's whole
    dump, so nothing stale is ever reused."""
    import warnings

    from crewai.tasks.output_format import OutputFormat
    from crewai.tasks.task_output import TaskOutput

    from crewckpt.crewai.entities import CrewDumper, _fingerprint, _held_names, _unchanged
    from crewckpt.crewai.snapshot import SnapshotBuilder, plain
    from crewckpt.testing import research_crew

    crew = research_crew(12)
    builder = SnapshotBuilder()
    dumper = CrewDumper(builder)
    names = _held_names(crew.tasks)

    def dump() -> dict[str, Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, whole = plain(dumper.dump(crew)), builder.dump_model(crew)
        got = expand_entity(got, 0, [got], "test")
        assert orjson.dumps(got) == orjson.dumps(whole)
        return got  # type: ignore[no-any-return]

    def fresh() -> list[int]:
        return [j for j, t in enumerate(crew.tasks)
                if not _unchanged(dumper._tasks, j, t, _fingerprint(t, names))]

    for t in crew.tasks:
        t.output = TaskOutput(description=t.description, raw="r" * 600, agent="a", output_format=OutputFormat.RAW,
                              messages=[{"role": "user", "content": "hello"}])
        t.prompt_context = "context " * 100
    dump()
    dump()
    assert dumper._held_used and dumper.held_ok is True  # checked against a whole dump once
    assert fresh() == []
    out = crew.tasks[3].output
    assert out is not None
    out.messages[0]["content"] = "changed in place"  # a dict inside a list inside the model
    assert fresh() == [3]
    assert dump()["tasks"][3]["output"]["messages"][0]["content"] == "changed in place"
    assert fresh() == []
    out.messages.append({"role": "assistant", "content": "more"})
    out.raw = "new raw"
    assert fresh() == [3]
    assert dump()["tasks"][3]["output"]["raw"] == "new raw"
    crew.tasks[5].prompt_context = "".join(["context "] * 100)  # equal text, another object: dumped again
    assert fresh() == [5]
    dump()
    crew.tasks[7].description = "a new description"
    crew.tasks[8].output = None
    assert dump()["tasks"][7]["description"] == "a new description"
    assert dump()["tasks"][8]["output"] is None
    crew.tasks[9].name = "renamed"  # not a held field: seen in the text, the held ones spliced back
    got = dump()["tasks"][9]
    assert got["name"] == "renamed" and got["output"]["raw"] == "r" * 600
    for t in crew.tasks:  # most tasks changed: one dump of everything, then held again
        t.prompt_context = "other " * 100
    dump()
    assert not dumper._held_used
    dump()
    assert dumper._held_used


def test_only_values_pydantic_writes_from_their_content_are_fingerprinted() -> None:
    import enum

    from pydantic import BaseModel, Field, field_serializer

    from crewckpt.crewai.entities import _fingerprint, _held_type, _HeldMiss, _plain_model, _splice

    class Shown(BaseModel):
        x: str = ""

        @field_serializer("x")
        def _x(self, v: str) -> str:
            return v.upper()

    class Color(enum.Enum):
        RED = "red"

    class Holder(BaseModel):
        output: Any = None
        description: str = Field("", alias="d")

    assert _plain_model(Holder) and not _plain_model(Shown)
    assert _held_type(str) and _held_type(Shown | None) and not _held_type(int) and not _held_type(str | int)
    h = Holder()
    for held, provable in (([1, "a", None, 2.5, Color.RED], True), ({"k": [1, {"n": "v"}]}, True),
                           (Shown(), False), ({1: "int key"}, False), (object(), False), ({"f": lambda: 1}, False)):
        h.output = held
        assert (_fingerprint(h, ("output",)) is not None) is provable, held
    with pytest.raises(_HeldMiss):  # the fields around a held one moved: the dumper dumps them all instead
        _splice({"b": 1, "a": 2}, {"a": 0, "h": "x", "b": 0}, ("h",))
    assert list(_splice({"a": 1, "b": 2}, {"a": 0, "h": "x", "b": 0}, ("h",)).items()) == [
        ("a", 1), ("h", "x"), ("b", 2)]


def test_a_frozen_value_repeated_in_one_document_is_walked_once() -> None:
    class Counting(Splitter):
        finished = 0

        def _finish(self, f: Any) -> Any:
            Counting.finished += 1
            return super()._finish(f)

    piece = Frozen({"agent": {"role": "r" * 300, "executor": {"context": list(range(20)), "seq": 7}}})
    doc = {"tasks": [Frozen(Parts([F({"i": i}), piece, F({"out": "o" * i})], join=True)) for i in range(50)]}
    keys = frozenset({"agent", "executor"})
    got = Counting(separate_keys=keys).split(doc, ob.object_id)
    assert Counting.finished <= 3 * 50 + 10  # each task and its two own pieces once; the shared agent piece
    # (with its agent and executor) once, not 50 times
    assert got == Splitter(separate_keys=keys).split(bare(doc), ob.object_id)  # the tree of the plain value
    store = Store.memory()
    assert store.read(store.commit(doc)) == bare(doc)


@pytest.mark.crewai
def test_the_crew_top_reuses_each_agents_unchanged_executor_parts() -> None:
    from crewckpt.crewai.entities import _TOP_DEPTH

    def top(seq: int) -> dict[str, Any]:  # the shape of a crew without its tasks: only the emission sequence moves
        executor = {f"f{i}": {"outputs": [f"out {i} {k}" * 20 for k in range(3)]} for i in range(12)}
        executor["execution_context"] = {"emission_sequence": seq, "stack": [["a", "b"]] * 3}
        return {"agents": [{"role": f"r{a}", "agent_executor": executor, "tools": ["t" * 600]} for a in range(3)]}

    def frozen_parts(v: Any, out: list[Frozen]) -> list[Frozen]:
        if isinstance(v, Frozen):
            out.append(v)
            v = v.value
        for x in (v.pieces if isinstance(v, Parts) else v.values() if isinstance(v, dict)
                  else v if isinstance(v, list) else ()):
            frozen_parts(x, out)
        return out

    refreeze = Refreezer(depth=_TOP_DEPTH)
    first = frozen_parts(refreeze.values(top(1)), [])
    second = refreeze.values(top(2))
    assert bare(second) == top(2)
    again = frozen_parts(second, [])
    reused = sum(len(orjson.dumps(bare(f))) for f in again if any(f is g for g in first))
    assert reused > 0.9 * len(orjson.dumps(top(2)))  # all but the changed execution contexts' path is reused


@pytest.mark.crewai
def test_an_agent_piece_holding_reused_parts_is_sized_without_a_walk() -> None:
    from crewckpt.crewai.entities import _frozen, _joined_size

    value = {"agent": Parts([F({"role": "r"}), F({"agent_executor": {"seq": 3}})], join=True)}
    piece = _frozen(value)
    assert piece.size == len(orjson.dumps(bare(value)))
    task = (F({"name": "t"}), piece, F({"output": None}))
    assert _joined_size(task) == len(orjson.dumps(bare(Parts(list(task), join=True))))
    assert _joined_size((F({}), piece, F({}))) == piece.size


def _puts(splitter: Splitter, doc: Any) -> tuple[ob.Link, list[bytes]]:
    """The root link and every body ``splitter`` hands to ``put`` for ``doc``, then keeps the split."""
    bodies: list[bytes] = []
    root = splitter.split(doc, lambda k, b: bodies.append(b) or ob.object_id(k, b))
    splitter.keep()
    return root, bodies


def test_a_tasks_long_texts_are_blobs_so_a_changed_agent_does_not_rewrite_them() -> None:
    from crewckpt.views.document import SEPARATE_KEYS

    # a sequential crew: task i's prompt context holds every earlier output; every task embeds its agent, whose
    # executor CrewAI changes on every event, so every task's body is rewritten on every checkpoint
    outputs = [f"output of task {i}: " + "findings " * 40 for i in range(40)]

    def doc(seq: int) -> dict[str, Any]:
        agent = Frozen({"agent": {"role": "r", "agent_executor": {"seq": seq, "pad": "p" * 300}}})
        return {"tasks": [Frozen(Parts([F({"name": f"t{i}", "prompt_context": "\n".join(outputs[:i]),
                                            "description": f"Step {i}: " + "do it well. " * 30}),
                                         agent, F({"done": True})], join=True)) for i in range(40)]}

    splitter = Splitter(separate_keys=SEPARATE_KEYS)
    _puts(splitter, doc(1))
    root, bodies = _puts(splitter, doc(2))  # only the agent changed
    assert not any(b"findings findings" in b or b"do it well." in b for b in bodies)  # no text rewritten
    assert sum(map(len, bodies)) < 40 * 300  # the tasks' small fields and links, not their texts (~320 KB)
    assert root == Splitter(separate_keys=SEPARATE_KEYS).split(bare(doc(2)), ob.object_id)  # = a fresh split
    store = Store.memory()
    assert store.read(store.commit(doc(2))) == bare(doc(2))


def test_a_string_is_a_blob_only_under_a_split_hint_key_whatever_the_cache_holds() -> None:
    keys = frozenset({"description"})
    text, big = "y" * 1000, "z" * 9000
    docs = [{"other": text}, {"description": text}, {"other": [text], "description": text},
            {"description": Frozen(text)}, {"other": Frozen(text)}, {"description": big, "other": big},
            {"description": "short"}]
    fresh = [Splitter(separate_keys=keys).split(bare(d), ob.object_id) for d in docs]
    for order in (docs, docs[::-1]):  # a warm cache never changes an id
        warm = Splitter(separate_keys=keys)
        got = {id(d): _puts(warm, d)[0] for d in order}
        assert [got[id(d)] for d in docs] == fresh
    inline, blob = (_puts(Splitter(separate_keys=keys), d)[1] for d in ({"other": text}, {"description": text}))
    assert len(inline) == 1 and len(blob) == 2 and text.encode() in blob
    assert _puts(Splitter(separate_keys=keys), {"description": "short"})[1][0].count(b"short") == 1


# -- store bytes of a short run (issue 13: 80x under CrewAI's complete JSON after exit) ----------------------

def _pages(path: Any) -> int:
    import contextlib
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as c:
        return int(c.execute("PRAGMA page_count").fetchone()[0])


def test_a_new_store_uses_small_pages(tmp_path: Any) -> None:
    """Each of the store's tables and indexes takes at least one page: 2 KiB pages halve a short run's fixed
    overhead (SQLite's default is 4 KiB)."""
    import contextlib
    import sqlite3

    from crewckpt.backends.sqlite import PAGE_SIZE

    Store.init(tmp_path / "s").close()
    with contextlib.closing(sqlite3.connect(tmp_path / "s" / "store.db")) as c:
        assert c.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE == 2048


def test_the_last_handle_leaves_a_small_store_dense_and_one_file(tmp_path: Any) -> None:
    s = Store.init(tmp_path / "s")
    ids = [s.commit({"step": i, "text": [f"line {i} {k} " * 40 for k in range(3)], "n": list(range(i))})
           for i in range(120)]
    s.backend.maintain()  # freed pages given back first: what remains is the B-trees' slack
    before = _pages(tmp_path / "s" / "store.db")
    s.finish_writes()
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["gc.lock", "store.db"]
    assert _pages(tmp_path / "s" / "store.db") < before  # VACUUMed: it was the only connection
    assert [s.read(c)["step"] for c in ids] == list(range(120))  # the handle reopens on its next call
    s.commit({"step": 120})
    assert s.fsck().ok and s.read("main")["step"] == 120
    s.close()


def test_releasing_leaves_a_store_another_handle_has_open_alone(tmp_path: Any) -> None:
    """A second connection (here in this process; another process's alike) keeps the -shm file: no VACUUM,
    no wait, and both handles go on writing."""
    a = Store.init(tmp_path / "s")
    b = Store.open(tmp_path / "s")
    assert b.list() == []
    first = [a.commit({"step": i, "text": [f"line {i} {k} " * 400 for k in range(3)]}, branch="a") for i in range(5)]
    a.finish_writes()
    assert (tmp_path / "s" / "store.db-shm").exists()  # b's connection is still open
    b.commit({"from": "b"}, branch="b")
    a.commit({"step": 5}, branch="a")
    assert [b.read(c)["step"] for c in first] == list(range(5)) and a.read("b") == {"from": "b"}
    a.close()
    b.close()


def test_the_dense_rewrite_never_waits_for_another_writer(tmp_path: Any) -> None:
    """A writer that took the store between the last close and the VACUUM keeps it: the VACUUM is skipped
    at once (busy timeout 0), not after the 60 s busy timeout, and nothing changes."""
    import contextlib
    import sqlite3
    import time

    s = Store.init(tmp_path / "s")
    cid = s.commit({"step": 1, "text": [f"line {k} " * 400 for k in range(3)]})
    s.finish_writes()
    with contextlib.closing(sqlite3.connect(tmp_path / "s" / "store.db", isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO meta(key, value) VALUES ('other', 'writer')")
        t = time.monotonic()
        s.backend._vacuum_alone()  # type: ignore[attr-defined]
        assert time.monotonic() - t < s.backend._busy / 2  # type: ignore[attr-defined]
        other.execute("COMMIT")
    assert s.read(cid)["step"] == 1 and s.backend.meta_get("other") == "writer"
    s.close()


def test_a_container_cache_entry_is_keyed_by_a_digest_not_by_the_containers_bytes() -> None:
    """Issue 13 "bounded memory": the container cache keyed each entry by the container's msgpack bytes, so the
    keys held ~10 MB of a 100-task run's 15 MB of cache; a 32-byte BLAKE3 digest (plus a place tag) keys it
    now, and a hit still gives the same ids as a fresh splitter."""
    sp = Splitter()
    docs = [{"run": i, "rows": [{"n": k, "text": f"row {k} " * 200, "tags": list(range(50))} for k in range(30)]}
            for i in range(3)]
    ids = []
    for d in docs:
        ids.append(sp.split(d, lambda k, b: ob.object_id(k, b)).oid)
        sp.keep()
    assert len(sp._cache.d) >= 30  # the rows are cached
    assert max(len(k) for k in sp._cache.d) <= 33, sorted({len(k) for k in sp._cache.d})[-3:]
    assert ids == [Splitter().split(d, lambda k, b: ob.object_id(k, b)).oid for d in docs]


def test_the_splitter_caches_hold_at_most_their_bound_counting_keys_and_values() -> None:
    """Issue 13 "bounded memory": the bound counts what an entry holds (key, representation, ENTRY_BYTES), not
    only the key; a cache past its bound drops its oldest entries and a hit is still the same representation."""
    from crewckpt.history import snapshot as sn

    sp = Splitter(cache_bytes=20_000)
    docs = [{"run": i, "rows": [{"n": i, "k": k, "text": f"row {k} of {i} " * 30} for k in range(20)]}
            for i in range(40)]
    ids = []
    for d in docs:
        ids.append(sp.split(d, lambda k, b: ob.object_id(k, b)).oid)
        sp.keep()
    for cache in (sp._cache, sp._strs, sp._small):
        held = sum(sn._Cache._bytes(k, v) for k, v in cache.d.items())
        assert held == cache.size <= cache.limit
    assert sum(len(k) + len(v[0]) for k, v in sp._cache.d.items()) > 5_000  # it does cache
    again = [Splitter().split(d, lambda k, b: ob.object_id(k, b)).oid for d in docs]
    assert ids == again


def test_a_profile_sets_its_writers_cache_bound_and_ids_do_not_depend_on_it() -> None:
    """A profile may bound its writer's splitter caches (Profile.cache_bytes); None (the CrewAI profile's
    choice too: plain CrewAI documents, as `ckpt import` commits them, need the big one) is
    snapshot.CACHE_BYTES; the same document gets the same ids under any bound."""
    from crewckpt.history import snapshot as sn
    from crewckpt.views import document as vd

    small = dataclasses.replace(vd.CREWAI, cache_bytes=1 << 20)
    doc = {"tasks": [{"description": f"task {i} " * 40, "output": {"raw": "x" * i}} for i in range(30)]}
    ids = {}
    for name, prof, limit in (("generic", None, sn.CACHE_BYTES), ("crewai", vd.CREWAI, sn.CACHE_BYTES),
                              ("small", small, 1 << 20)):
        store = Store.memory() if prof is None else Store.memory(profile=prof)
        ids[name] = store.info(store.commit(doc)).tree
        (splitter,) = store._splitters.values()
        assert splitter._cache.limit == limit
        assert splitter._strs.limit == splitter._cache.limit // 4 and splitter._small.limit == splitter._cache.limit // 8
    assert ids["small"] == ids["crewai"]  # the bound changes memory, never ids


def test_a_held_field_changed_by_another_thread_during_its_dump_is_dumped_again_next_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fingerprint is taken before the dumps and again after a task's whole dump; when they differ (a
    change in between), the task is not taken as unchanged next checkpoint, whatever it holds then."""
    import warnings

    from crewckpt.crewai import entities
    from crewckpt.crewai.snapshot import SnapshotBuilder
    from crewckpt.testing import research_crew

    crew = research_crew(3)
    dumper = entities.CrewDumper(SnapshotBuilder())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dumper.dump(crew)
        dumper.dump(crew)
        assert all(t.print is not None for t in dumper._tasks)
        crew.tasks[1].prompt_context = "".join(["changed "] * 100)
        real = entities._fingerprint
        calls: list[int] = []

        def moving(task: Any, names: tuple[str, ...]) -> Any:
            calls.append(1)
            fp = real(task, names)
            if task is crew.tasks[1] and len(calls) > 3 and fp is not None:  # after its whole dump
                return (fp[0] + ["another object"], fp[1])
            return fp

        monkeypatch.setattr(entities, "_fingerprint", moving)
        dumper.dump(crew)
    assert dumper._tasks[1].print is None and dumper._tasks[0].print is not None
    monkeypatch.setattr(entities, "_fingerprint", real)
    assert not entities._unchanged(dumper._tasks, 1, crew.tasks[1], real(crew.tasks[1], entities._held_names(crew.tasks)))


class _Extra(BaseModel):
    x: int = 0
    tags: list[str] = []


_EDITS = ("raw", "msg_inplace", "msg_append", "json_new", "json_inplace", "json_nested_set", "prompt_same",
          "prompt_new", "prompt_none", "output_none", "output_new", "format", "name", "description",
          "pyd_model", "pyd_inplace", "pyd_tags", "swap_outputs")


def _edit(crew: Any, j: int, op: str, arg: int) -> None:
    """One change to task ``j`` as a user's callback or CrewAI could make it: by assignment or in place."""
    from crewai.tasks.output_format import OutputFormat
    from crewai.tasks.task_output import TaskOutput

    t = crew.tasks[j]
    if t.output is None and op not in ("prompt_same", "prompt_new", "prompt_none", "name", "description"):
        t.output = TaskOutput(description=f"d{arg}", raw=f"r{arg}", agent="a", output_format=OutputFormat.RAW,
                              messages=[{"role": "user", "content": f"hello {arg}"}])
    out = t.output
    if op == "raw":
        out.raw = f"raw {arg}"
    elif op == "msg_inplace" and out.messages:
        out.messages[0]["content"] = f"content {arg}"
    elif op == "msg_append":
        out.messages.append({"role": "assistant", "content": f"more {arg}"})
    elif op == "json_new":
        out.json_dict = {"k": [arg, {"deep": [arg]}]}
    elif op == "json_inplace" and out.json_dict:
        out.json_dict["k"].append(arg)
    elif op == "json_nested_set" and out.json_dict:
        out.json_dict["k"][1]["deep"][0] = arg * 1000 + 0.5  # a float where an int was: another JSON
    elif op == "prompt_same":
        t.prompt_context = t.prompt_context
    elif op == "prompt_new":
        t.prompt_context = f"context {arg} " * 60
    elif op == "prompt_none":
        t.prompt_context = None
    elif op == "output_none":
        t.output = None
    elif op == "output_new":
        t.output = out.model_copy(update={"raw": f"copy {arg}"})
    elif op == "format":
        out.output_format = OutputFormat.JSON if arg % 2 else OutputFormat.RAW
    elif op == "name":
        t.name = f"name {arg}"
    elif op == "description":
        t.description = f"description {arg}"
    elif op == "pyd_model":
        out.pydantic = _Extra(x=arg)
    elif op == "pyd_inplace" and out.pydantic is not None:
        out.pydantic.x = arg + 300
    elif op == "pyd_tags" and isinstance(out.pydantic, _Extra):
        out.pydantic.tags.append(f"tag {arg}")
    elif op == "swap_outputs":  # two tasks trade their output objects: same objects, other places
        other = crew.tasks[(j + 1) % len(crew.tasks)]
        t.output, other.output = other.output, t.output


@settings(max_examples=int(os.environ.get("CKPT_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(_EDITS), st.integers(0, 6)), min_size=1,
                max_size=30))
def test_held_fields_never_give_a_stale_document_whatever_changes(edits: list[tuple[int, str, int]]) -> None:
    """Any sequence of changes to tasks' held and other fields, by assignment or in place (nested dicts,
    lists, models, swapped objects), dumped after each: every document is byte-equal to pydantic's whole
    dump of the crew at that moment."""
    import warnings

    from crewckpt.crewai.entities import CrewDumper
    from crewckpt.crewai.snapshot import SnapshotBuilder, plain
    from crewckpt.testing import research_crew

    crew = research_crew(4)
    builder = SnapshotBuilder()
    dumper = CrewDumper(builder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step, (j, op, arg) in enumerate([(0, "name", 0), *edits]):
            _edit(crew, j, op, arg)
            got, whole = plain(dumper.dump(crew)), builder.dump_model(crew)
            got = expand_entity(got, 0, [got], "test") if dumper.refs else got
            assert orjson.dumps(got) == orjson.dumps(whole), (step, j, op, arg)
    assert dumper.ok is True and dumper.held_ok is True  # the held path ran (and was checked once)


def test_a_writer_forgets_the_ids_it_wrote_past_its_bound_and_stays_exact(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Any) -> None:
    # the set of ids a handle wrote was bounded at 2,000,000 (~200 MB); at KNOWN_IDS it is cleared, and an
    # object built again afterwards is framed again: its stored row stays as it was, every read exact
    import crewckpt.history.store as store_mod
    monkeypatch.setattr(store_mod, "KNOWN_IDS", 5)
    s = Store.init(tmp_path / "s")
    docs = [{"step": i % 3, "items": [{"k": j, "v": "x" * 40} for j in range(i % 4 + 2)]} for i in range(30)]
    ids = [s.commit(d) for d in docs]
    assert len(s._known) <= 5 + 20  # cleared past the bound (a commit adds its own few after clearing)
    assert [s.read(c) for c in ids] == docs
    assert s.fsck(full=True).ok
    s.close()


@pytest.mark.usefixtures("crewai_offline")
def test_big_int_inputs_and_a_task_field_turning_from_1_to_true_are_stored_exactly() -> None:
    """Hostile review: orjson reads ints beyond 64 bits as floats (kickoff inputs 2**64 were stored as
    1.8446744073709552e19 in every checkpoint); and a task whose dump changed only from 1 to true compared equal
    to its previous parse (Python's ``1 == True``), so its previous pieces (with 1) were stored again."""
    from crewai.events.event_bus import crewai_event_bus
    from crewai.events.types.task_events import TaskStartedEvent

    from crewckpt.crewai import CheckpointConfig
    from crewckpt.testing import research_crew

    crew = research_crew(3, checkpoint=CheckpointConfig(on_events=["*"]))
    crew.tasks[0].config = {"x": 1}
    flipped: list[int] = []

    def flip(source: Any, event: Any) -> None:  # once task 0 is done, its config changes type only
        if not flipped and crew.tasks[0].output is not None:
            crew.tasks[0].config = {"x": True}
            flipped.append(1)

    with crewai_event_bus.scoped_handlers():
        crewai_event_bus.on(TaskStartedEvent)(flip)
        crew.kickoff(inputs={"topic": "otters", "n": 2**64, "m": -2**63 - 1, "ok": 2**64 - 1})
    store = Store.open(".ckpt")
    docs = [store.read(c.id) for c in store.list()]
    assert flipped and len(docs) > 10
    given = [d["entities"][0]["checkpoint_inputs"] for d in docs]
    assert sum(i is not None for i in given) >= len(docs) - 2  # the kickoff's first checkpoints may precede them
    for inputs in filter(None, given):
        assert [type(inputs[k]) for k in ("n", "m", "ok")] == [int, int, int], inputs
        assert (inputs["n"], inputs["m"], inputs["ok"]) == (2**64, -2**63 - 1, 2**64 - 1)
    configs = [d["entities"][0]["tasks"][0]["config"]["x"] for d in docs]
    first_true = next((i for i, x in enumerate(configs) if x is True), None)
    assert first_true is not None, configs  # before: 1 in every checkpoint, the first pieces reused
    assert configs[0] == 1 and type(configs[0]) is int and all(x is True for x in configs[first_true:])
    assert type(configs[-1]) is bool
    store.close()

"""Store profiles (issue 14 item 6): the generic store knows no CrewAI; the CrewAI profile plugs in its summary
and split hints, and writes exactly the trees (ids) that the built-in CrewAI hints wrote before."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from cli_helpers import ckpt, ok
from crewai_fixtures import FIXTURES

from crewckpt.errors import DecodeError
from crewckpt.format import objects as ob
from crewckpt.history.commits import from_row
from crewckpt.history.profile import GENERIC, Profile
from crewckpt.history.snapshot import Splitter
from crewckpt.history.store import Store
from crewckpt.views.document import CREWAI, SEPARATE_KEYS, crew_summary

# Tree ids of real CrewAI checkpoints as main wrote them before the split hints moved out of history/
# (Splitter() with the built-in SEPARATE_KEYS, at 89c5173). The CrewAI profile must keep every one. Except
# crew_json_star's, re-pinned when the splitter's caches became per place (tests/test_splitter_determinism.py):
# its crew.agents[0] came first, inline, and the per-split memo then put that inline body into tasks[0].agent,
# which the policy (objects_format.md 4.1) makes its own tree; was df85d9a5dfd2a2346f186beb2ee049d4c5399d18...
TREE_IDS = {
    "crew_json_star/main/20261129T234227_f7f0509e_p-20261129T234227_4e04ef61.json":
        "9ab8ca2d29e10c90d9a00816fb5910d0d22204feec6cfde21e1ad1358f0146ed",
    "flow_json/main/20261129T235149_b75d688a_p-none.json":
        "b1fd848109d834ccb72054f1f6ad25324dbac0c46408d83d0203bc32ce3c04bd",
    "agent_json/main/20261129T235149_809e2c73_p-none.json":
        "43e71b86993922d0ad66301ee46342eb91b7a09faf6f8ffe0aa2f8d8a064430b",
}


def _doc(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def test_the_crewai_profile_writes_the_same_tree_ids_as_before() -> None:
    store = Store.memory(profile=CREWAI)
    for name, tree in TREE_IDS.items():
        assert store.info(store.commit(_doc(name))).tree == tree, name
        assert Splitter(separate_keys=SEPARATE_KEYS).split(_doc(name), ob.object_id).oid.hex() == tree


def test_a_plain_json_store_has_a_size_summary_and_no_crewai_split() -> None:
    store = Store.memory()
    assert store.profile is GENERIC and GENERIC.separate_keys == frozenset()
    doc = {"agent": {"role": "r" * 300}, "tasks": [{"output": {"raw": "x" * 300}}]}
    cid = store.commit(doc)
    assert store.info(cid).summary == {"logical_bytes": len(json.dumps(doc, separators=(",", ":")))}
    assert store.read(cid) == doc
    # generic split: the small containers under CrewAI's hint keys stay inline (one tree); CrewAI's: own trees
    generic, crewai = [], []
    Splitter().split(doc, lambda k, b: generic.append(b) or ob.object_id(k, b))
    Splitter(separate_keys=SEPARATE_KEYS).split(doc, lambda k, b: crewai.append(b) or ob.object_id(k, b))
    assert len(generic) == 1 and len(crewai) == 3
    # a CrewAI document in a generic store: read back the same, summary of the size only
    name = next(iter(TREE_IDS))
    other = store.commit(_doc(name))
    assert store.read(other) == _doc(name) and set(store.info(other).summary) == {"logical_bytes"}
    assert store.info(other).tree != TREE_IDS[name]


def test_a_commit_can_name_its_own_profile_and_summaries_list_in_the_old_order() -> None:
    store = Store.memory()
    doc = {"entities": [{"entity_type": "crew", "name": "c", "tasks": [{"output": {"raw": "a"}}, {"output": None}]},
                        {"entity_type": "agent", "role": "writer"}, {"name": "no type"}],
           "event_record": {"nodes": {"1": {}, "2": {}, "3": {}}}}
    info = store.info(store.commit(doc, profile=CREWAI))
    assert list(info.summary) == ["entities", "tasks_done", "tasks_total", "event_count", "logical_bytes"]
    assert info.summary["entities"] == [["crew", "c"], ["agent", "writer"]]
    assert crew_summary(info.summary).to_json() == info.to_json()["summary"] == info.summary
    assert (crew_summary(info.summary).tasks_done, crew_summary(info.summary).tasks_total) == (1, 2)
    assert crew_summary({"logical_bytes": 5}).tasks_total == 0  # a generic commit reads as no tasks


def test_a_summarizer_cannot_override_the_stores_size() -> None:
    liar = Profile("liar", summarize=lambda doc: {"logical_bytes": -1, "kind": "x"})
    store = Store.memory(profile=liar)
    assert store.info(store.commit([1, 2])).summary == {"kind": "x", "logical_bytes": 5}


def test_a_damaged_summary_in_an_index_row_is_refused_not_listed() -> None:
    store = Store.memory()
    cid = bytes.fromhex(store.commit({"a": 1}))
    row = store.backend.index_get(cid)
    assert row is not None
    for bad in (b"\xc1", ob.packb({"k": b"bytes"}), ob.packb([1, 2]), ob.packb("text")):
        try:
            from_row(dataclasses.replace(row, summary=bad))
        except DecodeError as e:
            assert "damaged" in str(e)
        else:
            raise AssertionError(f"summary {bad!r} was accepted")


def test_a_format_1_store_lists_the_same_log_columns(tmp_path: Path) -> None:
    """Commits written by the previous release keep their CrewAI summary columns in `ckpt log`."""
    dest = tmp_path / "v1"
    shutil.copytree(Path(__file__).parent / "data" / "format1-store", dest)
    out = ok(ckpt(str(dest), "log", "--oneline", "main")).stdout
    lines = {line.split()[0]: line for line in out.splitlines()}
    manifest = json.loads((Path(__file__).parent / "data" / "format1-store.json").read_text())
    m4 = next(c for c in manifest["commits"] if c["label"] == "m4")
    assert lines[m4["id"][:8]].endswith("crew:fixture crew [2/3 tasks]"), out


def test_the_generic_json_diff_knows_no_crewai_shape() -> None:
    from crewckpt.history.diff import diff_json, plain_text, render_changes

    old = {"entities": [{"entity_type": "crew", "tasks": [{"output": None}]}], "n": 1, "gone": [1]}
    new = {"entities": [{"entity_type": "crew", "tasks": [{"output": {"raw": "done"}}]}], "n": 2, "added": True}
    d = diff_json(old, new)
    assert d["schema"] == "crewckpt.jsondiff/1" and not d["identical"] and set(d) == {
        "schema", "identical", "sizes", "changes", "changes_truncated"}  # no entities/tasks/events sections
    assert [(c["path"], c["op"]) for c in d["changes"]] == [
        ("entities[0].tasks[0].output", "changed"), ("n", "changed"), ("gone", "removed"), ("added", "added")]
    assert plain_text(render_changes(d["changes"])).splitlines()[1] == "  ~ n: 1 -> 2"
    assert diff_json([1], [1])["identical"] and diff_json(1, 1.0)["changes"] == [
        {"path": "$", "op": "changed", "old": 1, "new": 1.0}]
    assert diff_json(list(range(10)), [], max_changes=3)["changes_truncated"] == 7


def test_a_crewai_summary_is_stored_positionally_and_reads_back_as_the_same_map() -> None:
    """The CrewAI profile's summary rows take the format-1 5-slot layout (no key names on every row); any other
    map, or the same keys with other types, stays a map. Both read back equal."""
    import msgpack

    from crewckpt.history import commits

    crew = {"entities": [["crew", "research"]], "tasks_done": 2, "tasks_total": 3, "event_count": 40,
            "logical_bytes": 9000}
    packed = commits.encode_summary(crew)
    assert msgpack.unpackb(packed) == [[["crew", "research"]], 2, 3, 40, 9000]
    assert commits._summary(packed) == crew
    for other in ({"logical_bytes": 5}, {**crew, "extra": 1}, {**crew, "tasks_done": True},
                  {**crew, "entities": [["crew", 7]]}, dict(reversed(list(crew.items())))):
        packed = commits.encode_summary(other)
        assert isinstance(msgpack.unpackb(packed), dict) and commits._summary(packed) == other

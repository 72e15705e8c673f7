"""Semantic diff of checkpoint documents, on real CrewAI 1.15.30 snapshots and on plain JSON."""

from __future__ import annotations

import copy
import glob
import json

import orjson
import pytest
from crewai_fixtures import FIXTURES  # vendored real CrewAI 1.15.30 checkpoints (read-only)

from crewckpt.history.jsonpath import JsonPathError, format_path, get_path, parse_path
from crewckpt.views.diff import SCHEMA, diff_documents, task_status
from crewckpt.views.diff_render import human_bytes, plain_text, render_full, render_stat


def _load(pattern: str) -> list[dict]:
    paths = sorted(glob.glob(str(FIXTURES / pattern)))
    assert paths, pattern
    return [orjson.loads(open(p, "rb").read()) for p in paths]


@pytest.fixture(scope="module")
def restore_docs() -> tuple[dict, dict]:
    """Two real crew checkpoints on different branches: main after task 2, alt after task 4."""
    return _load("crew_restore_src/main/*_b6baebfb_p-*.json")[0], _load(
        "crew_restore_src/alt/*_cf0ef2d2_p-*.json"
    )[0]


def test_identical_documents(restore_docs):
    main, _ = restore_docs
    d = diff_documents(main, copy.deepcopy(main))
    assert d["identical"] is True
    assert d["changes"] == [] and d["events"]["added_total"] == 0
    assert all(t["op"] == "unchanged" for t in d["entities"][0]["tasks"])
    assert plain_text(render_stat(d)) == "no differences"


def test_crew_tasks_inputs_events_sizes(restore_docs):
    main, alt = restore_docs
    alt = copy.deepcopy(alt)
    alt["entities"][0]["checkpoint_inputs"]["topic"] = "sea otters"
    d = diff_documents(main, alt)
    assert d["schema"] == SCHEMA and d["crewai"] is True and not d["identical"]
    assert d["inputs"]["changed"] == {"topic": {"old": "otters", "new": "sea otters"}}
    crew = d["entities"][0]
    assert crew["label"] == "crew:crew" and crew["matched_by"] == "id"
    by_name = {t["name"]: t for t in crew["tasks"]}
    assert by_name["task2"]["old_status"] == "completed" and by_name["task2"]["output_diff"] is None
    assert (by_name["task3"]["old_status"], by_name["task3"]["new_status"]) == ("pending", "completed")
    assert "+[Editor] deterministic answer for <task3>" in by_name["task3"]["output_diff"]
    assert by_name["task3"]["output_lines"] == {"added": 1, "removed": 0}
    assert "output" in by_name["task3"]["fields"]
    ev = d["events"]
    assert ev["old_count"] == len(main["event_record"]["nodes"])
    assert ev["new_count"] == len(alt["event_record"]["nodes"])
    assert ev["added"]["task_completed"] == 2 and ev["removed_total"] == 0
    assert sum(ev["added"].values()) == ev["added_total"] == ev["new_count"] - ev["old_count"]
    assert d["sizes"]["old_bytes"] == len(orjson.dumps(main))
    assert d["sizes"]["delta_bytes"] == d["sizes"]["new_bytes"] - d["sizes"]["old_bytes"] > 0
    paths = {c["path"] for c in d["changes"]}
    assert "branch" in paths and "parent_id" in paths
    assert not any(p.startswith("event_record") or ".tasks" in p for p in paths)
    json.dumps(d)  # JSON-serialisable


def test_tasks_matched_by_id_not_position(restore_docs):
    main, _ = restore_docs
    swapped = copy.deepcopy(main)
    tasks = swapped["entities"][0]["tasks"]
    tasks[0], tasks[1] = tasks[1], tasks[0]
    tasks[1]["output"]["raw"] = "edited first line\nsecond line"
    d = diff_documents(main, swapped)
    crew = d["entities"][0]
    changed = [t for t in crew["tasks"] if t["op"] != "unchanged"]
    assert [t["name"] for t in changed] == ["task1"]
    assert changed[0]["matched_by"] == "id"
    out = changed[0]["output_diff"]
    assert "-[Researcher] deterministic answer for <task1>" in out and "+edited first line" in out
    assert out.startswith("--- a/task1\n+++ b/task1")


def test_tasks_fall_back_to_name_and_report_added_removed(restore_docs):
    main, _ = restore_docs
    other = copy.deepcopy(main)
    tasks = other["entities"][0]["tasks"]
    tasks[0]["id"] = "new-id-for-task1"
    extra = copy.deepcopy(tasks[3])
    extra.update(id="t5", name="task5")
    tasks.append(extra)
    del tasks[2]
    d = diff_documents(main, other)
    ops = {t["name"]: (t["op"], t["matched_by"]) for t in d["entities"][0]["tasks"]}
    assert ops["task1"] == ("changed", "name")
    assert ops["task5"] == ("added", None)
    assert ops["task3"] == ("removed", None)
    assert ops["task2"] == ("unchanged", "id")


def test_agent_memory_change(restore_docs):
    main, _ = restore_docs
    other = copy.deepcopy(main)
    other["entities"][0]["agents"][1]["memory"] = {"facts": ["otters hold hands"]}
    d = diff_documents(main, other)
    agents = [a for a in d["entities"][0]["agents"] if a["op"] != "unchanged"]
    assert [a["role"] for a in agents] == ["Writer"]
    assert agents[0]["memory"] == {"old": None, "new": {"facts": ["otters hold hands"]}}
    text = plain_text(render_full(d))
    assert "agent Writer  memory changed" in text and "memory of agent Writer" in text


def test_flow_state_and_completed_methods():
    docs = {d["entities"][0]["checkpoint_state"].get("total"): d for d in _load("flow_json/main/*.json")}
    first, last = docs[11], docs[111]
    d = diff_documents(first, last)
    flow = d["entities"][0]["flow"]
    assert flow["completed_methods"] == {"added": ["draft", "finish"], "removed": []}
    state = {c["path"]: c for c in flow["state"]}
    assert state["checkpoint_state.total"] == {
        "path": "checkpoint_state.total",
        "op": "changed",
        "old": 11,
        "new": 111,
    }
    assert state["checkpoint_state.steps[2]"]["op"] == "added"
    assert flow["method_counts"]["added"] == {"draft": 1, "finish": 1}
    stat = plain_text(render_stat(d))
    assert "completed methods +draft +finish" in stat


def test_agent_entity_documents():
    docs = _load("agent_json/main/*.json")
    d = diff_documents(docs[0], docs[-1])
    assert d["crewai"] and d["entities"][0]["type"] == "agent"
    json.dumps(d)


def test_plain_json_generic_diff():
    old = {"a": 1, "b": {"c": [1, 2, 3]}, "gone": True}
    new = {"a": 2, "b": {"c": [1, 2, 4, 5]}, "fresh": "x y"}
    d = diff_documents(old, new)
    assert d["crewai"] is False and d["entities"] == [] and d["events"] is None
    assert d["changes"] == [
        {"path": "a", "op": "changed", "old": 1, "new": 2},
        {"path": "b.c[2]", "op": "changed", "old": 3, "new": 4},
        {"path": "b.c[3]", "op": "added", "new": 5},
        {"path": "gone", "op": "removed", "old": True},
        {"path": "fresh", "op": "added", "new": "x y"},
    ]
    assert diff_documents([1, "x"], [1, "y"])["changes"] == [
        {"path": "[1]", "op": "changed", "old": "x", "new": "y"}
    ]
    scalar = diff_documents(1, "1")
    assert scalar["changes"] == [{"path": "$", "op": "changed", "old": 1, "new": "1"}]


def test_change_cap_and_value_preview():
    old = {f"k{i}": i for i in range(50)}
    new = {f"k{i}": i + 1 for i in range(50)}
    d = diff_documents(old, new, max_changes=10)
    assert len(d["changes"]) == 10 and d["changes_truncated"] == 40
    big = diff_documents({"x": None}, {"x": "y" * 5000})
    assert big["changes"][0]["new"].startswith("<string: 5000 characters")


def test_task_status_rules():
    assert task_status({"output": None, "start_time": None}) == "pending"
    assert task_status({"output": None, "start_time": "2026-11-29T23:42:23"}) == "running"
    assert task_status({"output": {"raw": "x"}, "start_time": "t"}) == "completed"


def test_stat_fits_one_screen_on_long_run():
    docs = _load("crew_json_star_n6/main/*.json")
    small = min(docs, key=lambda d: len(d["event_record"]["nodes"]))
    big = max(docs, key=lambda d: len(d["event_record"]["nodes"]))
    lines = render_stat(diff_documents(small, big))
    assert len(lines) <= 40
    assert all(tag in {"header", "added", "removed", "changed", "meta", "plain", "hunk"} for tag, _ in lines)
    assert any("tasks 0/6 -> 6/6" in text for _, text in lines)


def test_human_bytes():
    assert (
        human_bytes(999) == "999 B" and human_bytes(1500) == "1.5 KB" and human_bytes(-2_500_000) == "-2.5 MB"
    )


@pytest.mark.parametrize(
    "text,parts",
    [
        ("entities[0].tasks[2].output.raw", ["entities", 0, "tasks", 2, "output", "raw"]),
        ('event_record.nodes["ab-1 2"].event', ["event_record", "nodes", "ab-1 2", "event"]),
        ("tasks[-1]", ["tasks", -1]),
        ("$", []),
    ],
)
def test_jsonpath_roundtrip(text, parts):
    assert parse_path(text) == parts
    if text != "$":
        assert parse_path(format_path(parts)) == parts


def test_jsonpath_errors_name_the_problem():
    doc = {"entities": [{"name": "crew"}]}
    assert get_path(doc, "entities[0].name") == "crew"
    with pytest.raises(JsonPathError, match=r"entities has 1 items: index \[3\] is out of range"):
        get_path(doc, "entities[3]")
    with pytest.raises(JsonPathError, match=r"has no key 'nme' \(keys: name\)"):
        get_path(doc, "entities[0].nme")
    with pytest.raises(JsonPathError, match="bad JSON path"):
        parse_path("entities[x]")


def test_stat_summarises_crewai_internal_changes(restore_docs):
    main, alt = restore_docs
    d = diff_documents(main, alt)
    executors = [e for e in d["entities"] if e["role"] == "executor"]
    assert executors and all(e["type"] == "flow" and e["label"].startswith("flow[") for e in executors)
    assert d["entities"][0]["role"] == "main" and len(executors) == len(d["entities"]) - 1
    stat = plain_text(render_stat(d))
    assert "task1" not in stat and "agent Writer" not in stat  # only their embedded copies changed
    assert "task3  pending -> completed  output +1 -0 lines" in stat
    assert "with only CrewAI-internal copies changed)" in stat
    assert "~ agent executors (CrewAI's per-agent flows): " in stat
    full = plain_text(render_full(d))
    assert "~ task1  completed  agent" in full and "~ agent Writer  agent_executor" in full
    assert "(agent executor)" in full


def test_flow_fork_pairs_the_real_flow_not_the_placeholder():
    first = _load("flow_json/main/*_b75d688a_p-none.json")[0]
    fork = _load("flow_json/experiment-1/*_a4588db8_p-*.json")[0]  # [placeholder, the forked DemoFlow]
    d = diff_documents(first, fork)
    main = [e for e in d["entities"] if e["role"] == "main"]
    assert len(main) == 1 and main[0]["label"] == "flow:DemoFlow"
    assert (main[0]["old_index"], main[0]["new_index"]) == (0, 1)
    assert main[0]["flow"]["completed_methods"] == {"added": ["draft", "finish"], "removed": []}
    placeholder = [e for e in d["entities"] if e["role"] == "placeholder"]
    assert [(p["op"], p["new_index"]) for p in placeholder] == [("added", 0)]
    assert d["inputs"] == {
        "added": {},
        "removed": {},
        "changed": {},
    }  # same kickoff inputs (from flow_started)
    stat = plain_text(render_stat(d))
    assert "~ flow:DemoFlow" in stat and "~ restore placeholders (CrewAI's stand-in flows): 1 added" in stat


def test_flow_inputs_come_from_flow_started():
    first = _load("flow_json/main/*_b75d688a_p-none.json")[0]
    other = copy.deepcopy(first)
    for node in other["event_record"]["nodes"].values():
        if node["event"]["type"] == "flow_started":
            node["event"]["inputs"] = {"topic": "sea otters"}
    d = diff_documents(first, other)
    assert d["inputs"]["changed"] == {"topic": {"old": "otters", "new": "sea otters"}}


def test_word_diff_marks_changed_words(restore_docs):
    main, _ = restore_docs
    other = copy.deepcopy(main)
    old_text = main["entities"][0]["tasks"][1]["output"]["raw"]
    other["entities"][0]["tasks"][1]["output"]["raw"] = (
        old_text.replace("deterministic", "scripted") + "\nmore"
    )
    lines = render_full(diff_documents(main, other), word_diff=True)
    text = plain_text(lines)
    assert "[Writer] [-deterministic-]{+scripted+} answer for <task2>" in text
    assert ("changed", "{+more+}") in lines  # an added line is all new words
    assert all(tag in {"header", "added", "removed", "changed", "meta", "plain", "hunk"} for tag, _ in lines)


def test_values_python_calls_equal_but_json_keeps_apart_are_changes() -> None:
    # hostile review: {"retries": 1} vs {"retries": true} (and 0.0 vs -0.0, or the same keys in another order)
    # were "identical" / "no differences", though the stored JSON and the commit ids differ
    from crewckpt.history.diff import diff_json
    from crewckpt.views.diff import diff_documents
    for old, new, paths in (({"retries": 1, "flags": [1, 0]}, {"retries": True, "flags": [True, False]},
                             ["retries", "flags[0]", "flags[1]"]),
                            ({"x": 1}, {"x": 1.0}, ["x"]), ({"x": -0.0}, {"x": 0.0}, ["x"]),
                            ({"a": 1, "b": 2}, {"b": 2, "a": 1}, ["$"])):
        for d in (diff_json(old, new), diff_documents(old, new)):
            assert not d["identical"] and [c["path"] for c in d["changes"]] == paths, d
    assert diff_json({"x": [1, 2**70]}, {"x": [1, 2**70]})["identical"]
    assert diff_documents({"x": "\ud800"}, {"x": "\ud800"})["identical"]

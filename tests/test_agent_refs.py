"""Issue 13, CPU: a stored CrewAI document's task names its agent by reference (``{"$ref":
"#/entities/I/agents/J"}``) when its dump is byte-equal to the crew's ``agents[J]``, so an unchanged task keeps
its value (and tree id) from one checkpoint to the next. Every CrewAI-facing read expands the references
(crewckpt.views.document.crewai_json) back to exactly CrewAI's JSON; the store format version 3 keeps older
crewckpt from handing CrewAI the references; hostile references and imports are refused in one line."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from crewai_fixtures import FIXTURES

from crewckpt import Store
from crewckpt.cli.main import cli
from crewckpt.errors import DamagedCheckpoint, FormatVersionError
from crewckpt.format import objects as ob
from crewckpt.testing import crewai_offline  # noqa: F401  (fixture)
from crewckpt.views.document import CREWAI, SHAPE_KEY, crewai_json
from crewckpt.views.importer import import_crewai

AGENT = {"role": "Researcher", "goal": "g", "agent_executor": {"execution_context": {"emission_sequence": 7}}}


def marked(*tasks: Any, agents: Any = None) -> dict[str, Any]:
    """A new-shape document: one crew with ``agents`` (default [AGENT]) and ``tasks``."""
    crew = {"entity_type": "crew", "name": "c", "agents": [AGENT] if agents is None else agents,
            "tasks": list(tasks), "after": 1}
    return {"crewai_version": "1.15.30", "entities": [crew], "event_record": {"nodes": {}},
            SHAPE_KEY: {"agent_refs": [0]}}


REF = {"$ref": "#/entities/0/agents/0"}


def test_references_expand_to_a_copy_of_the_agent_in_place_and_the_marker_goes() -> None:
    doc = marked({"name": "t1", "agent": REF, "output": None}, {"name": "t2", "agent": None})
    out = crewai_json(doc)
    assert list(out) == ["crewai_version", "entities", "event_record"]
    t1, t2 = out["entities"][0]["tasks"]
    assert list(t1) == ["name", "agent", "output"] and t1["agent"] == AGENT and t2["agent"] is None
    assert t1["agent"] is not out["entities"][0]["agents"][0]  # each task its own object, as CrewAI's JSON
    assert list(out["entities"][0]) == ["entity_type", "name", "agents", "tasks", "after"]
    assert doc["entities"][0]["tasks"][0]["agent"] == REF  # the stored value is not changed
    # the summary's logical_bytes is CrewAI's JSON (what `ckpt stats` calls logical), not the stored shape
    assert CREWAI.summary(doc)["logical_bytes"] == len(orjson.dumps(out)) != len(orjson.dumps(doc))


def test_a_document_without_the_marker_is_never_rewritten() -> None:
    """Imported or written before agent references: a task agent that looks like a reference is data."""
    doc = marked({"name": "t1", "agent": REF})
    del doc[SHAPE_KEY]
    assert crewai_json(doc) is doc
    unlisted = marked({"name": "t1", "agent": REF})
    unlisted[SHAPE_KEY] = {"agent_refs": []}  # the writer lists only crews whose tasks hold references
    assert crewai_json(unlisted)["entities"][0]["tasks"][0]["agent"] == REF


BAD = {
    "out of range": ({"$ref": "#/entities/0/agents/1"}, None, "out of range (entities[0] has 1 agent(s))"),
    "no such entity": ({"$ref": "#/entities/3/agents/0"}, None, "is not a crew with agents"),
    "into a task": ({"$ref": "#/entities/0/tasks/0/agent"}, None, "not an agent of a crew"),
    "not an object": (REF, ["a string"], "which is not an agent object"),
    "to a reference": (REF, [REF], "which is not an agent object"),
    "extra key": ({"$ref": "#/entities/0/agents/0", "role": "x"}, None, "is not a reference to an agent"),
    "not a string": ({"$ref": 0}, None, "is not a reference to an agent"),
    "leading zero": ({"$ref": "#/entities/00/agents/0"}, None, "not an agent of a crew"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_reference_is_one_line_naming_the_task(case: str) -> None:
    ref, agents, why = BAD[case]
    with pytest.raises(DamagedCheckpoint) as info:
        crewai_json(marked({"name": "t0"}, {"name": "t1", "agent": ref}, agents=agents), "abc123")
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("abc123: entities[0].tasks[1].agent ") and why in msg, msg


@pytest.mark.parametrize("shape", [{"agent_refs": [0], "more": 1}, {"agent_refs": "0"}, {"agent_refs": [-1]},
                                   "v4", None])
def test_an_unknown_shape_marker_says_upgrade(shape: Any) -> None:
    doc = marked({"name": "t1", "agent": REF})
    doc[SHAPE_KEY] = shape
    with pytest.raises(DamagedCheckpoint, match="a document shape this crewckpt does not know; upgrade crewckpt"):
        crewai_json(doc)


def test_a_hostile_reference_in_a_store_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    good = s.commit(marked({"name": "t1", "agent": REF}), profile=CREWAI)
    bad = s.commit(marked({"name": "t1", "agent": {"$ref": "#/entities/0/agents/9"}}), profile=CREWAI)
    before = [(c.id, c.branch) for c in s.list()]
    s.close()
    r = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "show", bad, "--raw"])
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "out of range" in r.stderr, r.stderr
    r = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "show", bad, "--json"])  # expanded: refused
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "out of range" in r.stderr, r.stderr
    r = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "show", bad, "--stored", "--json"])  # shown
    assert r.exit_code == 0 and json.loads(r.stdout)["entities"][0]["tasks"][0]["agent"]["$ref"].endswith("/9")
    r = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "show", good, "--raw"])
    assert r.exit_code == 0 and json.loads(r.stdout)["entities"][0]["tasks"][0]["agent"] == AGENT
    r = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "show", good, "--path", "entities[0].tasks[0].agent"])
    assert r.exit_code == 0 and json.loads(r.stdout) == AGENT, r.output  # CrewAI's document by default
    r = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "show", good, "--stored", "--json"])
    assert r.exit_code == 0 and "$crewckpt" in json.loads(r.stdout)
    r = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "show", good, "--stored", "--raw"])
    assert r.exit_code == 2 and "give one of them" in r.stderr
    with Store.open(tmp_path / "s") as s:
        assert [(c.id, c.branch) for c in s.list()] == before and s.fsck().ok


# -- the store format version -----------------------------------------------------------------------------


def test_the_first_document_with_references_raises_the_store_to_version_3(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    s = Store.init(tmp_path / "s")
    assert s.backend.meta_get("format_version") == "2"  # a new store: version 2 until it needs more
    s.commit({"plain": 1})
    s.commit(crewai_json(marked({"name": "t1", "agent": REF})), profile=CREWAI)  # CrewAI's JSON: no references
    assert s.backend.meta_get("format_version") == "2"
    s.commit(marked({"name": "t1", "agent": REF}), profile=CREWAI)
    assert s.backend.meta_get("format_version") == "3"
    s.commit({"plain": 2})  # never lowered
    assert s.backend.meta_get("format_version") == "3"
    s.close()
    monkeypatch.setattr(ob, "FORMAT_VERSION", 2)  # an older crewckpt
    with pytest.raises(FormatVersionError, match="store format version 3 is newer than this crewckpt understands"):
        Store.open(tmp_path / "s")


def test_a_stale_handle_never_lowers_the_version(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    shutil.copytree(Path(__file__).parent / "data" / "format1-store", v1)
    a, b = Store.open(v1), Store.open(v1)  # both opened at version 1
    a.commit(marked({"name": "t1", "agent": REF}), profile=CREWAI, branch="main")
    b.commit({"plain": 1}, branch="main")  # needs 2: the store records 3 already
    assert b.backend.meta_get("format_version") == "3"
    a.close()
    b.close()


@pytest.mark.parametrize("how", ["clone", "fetch", "push"])
def test_a_transfer_from_a_version_3_store_raises_the_receiver(tmp_path: Path, how: str) -> None:
    src = Store.init(tmp_path / "src")
    src.commit(marked({"name": "t1", "agent": REF}), profile=CREWAI)
    plain = Store.init(tmp_path / "plain")
    plain.commit({"plain": 1})
    if how == "clone":
        dst = Store.clone(src, tmp_path / "dst")
        assert Store.clone(plain, tmp_path / "dst2").backend.meta_get("format_version") == "2"
    else:
        dst = Store.init(tmp_path / "dst")
        other = Store.init(tmp_path / "other")
        if how == "fetch":
            other.fetch(plain, name="origin")
            dst.fetch(src, name="origin")
        else:
            plain.push(other, "main")
            src.push(dst, "main")
        assert other.backend.meta_get("format_version") == "2"  # from a version-2 store: stays 2
    assert dst.backend.meta_get("format_version") == "3"


# -- import: nothing is silently rewritten ----------------------------------------------------------------


def _one_crew_file(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    src = FIXTURES / "crew_json_star" / "main"
    first = sorted(src.iterdir())[-1]
    folder = tmp_path / "in" / "main"
    folder.mkdir(parents=True)
    return folder / first.name, json.loads(first.read_text())


def test_an_import_holding_the_marker_key_is_skipped_in_one_line(tmp_path: Path) -> None:
    path, doc = _one_crew_file(tmp_path)
    doc[SHAPE_KEY] = {"agent_refs": [0]}
    path.write_text(json.dumps(doc))
    store = Store.init(tmp_path / "s")
    report = import_crewai(store, tmp_path / "in")
    (problem,) = report.problems
    assert problem.kind == "skipped" and "'$crewckpt'" in problem.reason and "\n" not in problem.reason
    assert not store.list()


def test_an_imported_task_agent_that_looks_like_a_reference_comes_back_as_it_was(tmp_path: Path) -> None:
    path, doc = _one_crew_file(tmp_path)
    doc["entities"][0]["tasks"][0]["agent"] = {"$ref": "#/entities/0/agents/0"}
    text = json.dumps(doc)
    path.write_text(text)
    store = Store.init(tmp_path / "s")
    assert len(import_crewai(store, tmp_path / "in").imported) == 1
    assert store.backend.meta_get("format_version") == "2"
    from crewckpt.views.exporter import export_crewai

    export_crewai(store, tmp_path / "out")
    (out,) = (tmp_path / "out").rglob("*.json")
    assert out.read_text() == text


# -- CrewAI -------------------------------------------------------------------------------------------------


@pytest.mark.crewai
@pytest.mark.usefixtures("crewai_offline")
def test_unchanged_tasks_keep_their_value_and_every_read_gives_crewais_json(tmp_path: Path) -> None:
    from crewai import Crew

    from crewckpt.crewai import CheckpointConfig, restore
    from crewckpt.crewai import snapshot as snap
    from crewckpt.testing import research_crew
    from crewckpt.views.exporter import export_crewai, view_entry

    tasks: list[list[Any]] = []
    theirs: list[bytes] = []
    document = snap.SnapshotBuilder.document

    def spy(self: Any, state: Any, **kw: Any) -> Any:
        doc = document(self, state, **kw)
        tasks.append(list(doc["entities"][0]["tasks"]))
        theirs.append(orjson.dumps(state.model_dump(mode="json", warnings=False)["entities"]))
        return doc

    snap.SnapshotBuilder.document = spy  # type: ignore[method-assign]
    try:
        research_crew(6, checkpoint=CheckpointConfig(on_events=["*"])).kickoff(inputs={"topic": "otters"})
    finally:
        snap.SnapshotBuilder.document = document  # type: ignore[method-assign]
    # every agent has an executor whose context moves on every checkpoint; a task that did not change is
    # still the same value (so the store reuses its tree id without walking it): all but the running one
    reused = [sum(a is b for a, b in zip(x, y)) for x, y in zip(tasks, tasks[1:])]
    assert len(reused) == 37 and all(n >= 5 for n in reused[1:]), reused
    store = Store.open(".ckpt")
    assert store.backend.meta_get("format_version") == "3"
    commits = store.list()
    stored = [store.read(c.id) for c in commits]
    assert all(d[SHAPE_KEY] == {"agent_refs": [0]} for d in stored)
    assert [c.summary["logical_bytes"] for c in commits] == [len(orjson.dumps(crewai_json(d))) for d in stored]
    # export (JSON): byte-equal to CrewAI's own dump at that moment (entities; the rest is lineage)
    for c, want in zip(commits, theirs):
        assert orjson.dumps(json.loads(view_entry(store, c).text)["entities"]) == want
    # export (SQLite): the same documents
    export_crewai(store, tmp_path / "cp.db", "sqlite", native=False)  # configs as stored, not rewritten
    with sqlite3.connect(tmp_path / "cp.db") as db:
        rows = [r[0] for r in db.execute("SELECT json(data) FROM checkpoints")]
    assert sorted(orjson.dumps(json.loads(r)["entities"]) for r in rows) == sorted(theirs)
    # resume a mid-run checkpoint (its tasks hold references) and fork another: CrewAI validates the JSON
    mid = commits[len(commits) // 2].id
    crew = restore(mid, store=".ckpt")
    assert isinstance(crew, Crew) and [t.agent.role for t in crew.tasks][:3] == ["Researcher", "Writer", "Editor"]
    assert crew.tasks[0].agent is crew.agents[0]  # CrewAI re-links the agent by its id, as from its own JSON
    crew.kickoff()
    forked = restore(commits[3].id, store=".ckpt", fork="refs-fork")
    forked.kickoff()
    store = Store.open(".ckpt")
    assert store.read("refs-fork")[SHAPE_KEY] == {"agent_refs": [0]}
    assert all(t["output"] is not None for t in crewai_json(store.read("refs-fork"))["entities"][0]["tasks"])


def test_many_references_to_a_big_agent_are_bounded_like_any_read(tmp_path: Path, monkeypatch) -> None:
    """A small stored document of many references to one big agent expands by their product: an untrusted
    store's is refused in one line naming the read limit, as any read over it is; nothing stored changes."""
    big = {"role": "Researcher", "goal": "g" * 20_000}
    doc = marked(*[{"name": f"t{k}", "agent": REF} for k in range(200)], agents=[big])
    s = Store.init(tmp_path / "s")
    cid = s.commit(doc, profile=CREWAI)
    stored = s.info(cid).summary
    s.close()
    monkeypatch.setenv("CKPT_MAX_READ_BYTES", "1000000")  # the stored document is ~30 KB; expanded ~4 MB
    r = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "show", cid, "--raw"])
    assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "too large to expand" in r.stderr and "$CKPT_MAX_READ_BYTES" in r.stderr, r.stderr
    r = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "show", cid, "--stored", "--json"])
    assert r.exit_code == 0  # as stored: within the limit
    monkeypatch.setenv("CKPT_MAX_READ_BYTES", "10000000")
    r = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "show", cid, "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["entities"][0]["tasks"][199]["agent"] == big
    with Store.open(tmp_path / "s") as s:
        assert s.info(cid).summary == stored and s.fsck().ok

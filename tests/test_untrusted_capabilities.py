"""A checkpoint cannot turn on what the resumed run acts on: MCP servers (a stdio entry is a command CrewAI
runs), remote agents, platform apps, an agent fetched from a repository, skill folders, code execution, and
files CrewAI reads and hands to the LLM or writes. Each is refused in one line unless the user trusts the
checkpoint (CREWAI_DESERIALIZE_CALLBACKS=1); a checkpoint config stored on an entity never decides where the
resumed run checkpoints (found by a hostile-input review on 12-04: a stdio MCP entry ran its command on
`ckpt resume`, and a `checkpoint` dict without a provider sent the run's checkpoints to a folder it named)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_untrusted_code import crew_doc, plant
from test_untrusted_endpoint import _clean_env  # noqa: F401  (autouse: no endpoint or trust variable set)

from crewckpt.crewai import CheckpointConfig, restore
from crewckpt.crewai.gate import ENV_VAR, check
from crewckpt.errors import UntrustedCapability
from crewckpt.testing import crewai_offline  # noqa: F401

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]


def _agent(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["entities"][0]["agents"][0]  # type: ignore[no-any-return]


CASES = {
    "mcp-stdio": ("agents", "mcps", lambda marker: [{"command": "sh", "args": ["-c", f"touch {marker}"]}]),
    "mcp-url": ("agents", "mcps", lambda marker: ["https://mcp.example.com/sse"]),
    "a2a": ("agents", "a2a", lambda marker: {"endpoint": "https://agent.example.com/.well-known/agent.json"}),
    "apps": ("agents", "apps", lambda marker: ["gmail"]),
    "repository": ("agents", "from_repository", lambda marker: "someone/agent"),
    "skills": ("agents", "skills", lambda marker: ["/tmp/skills"]),
    "code-execution": ("agents", "allow_code_execution", lambda marker: True),
    "input-files": ("tasks", "input_files", lambda marker: {"f": "/etc/shadow"}),
    "input-url": ("tasks", "input_files", lambda marker: {"f": "https://example.com/x.pdf"}),
    "prompt-file": ("crew", "prompt_file", lambda marker: "/etc/passwd"),
    "trained-agents": ("crew", "trained_agents_file", lambda marker: "../../secrets.pkl"),
    "json-files": ("crew", "task_execution_output_json_files", lambda marker: ["/tmp/victim.json"]),
    "knowledge": ("agents", "knowledge_sources", lambda marker: [{"file_paths": ["/home/u/.ssh/id_rsa"]}]),
    # found by a second review on 12-04
    "crew-skills": ("crew", "skills", lambda marker: ["/tmp/skills"]),
    "memory-storage": ("crew", "memory", lambda marker: {"memory_kind": "memory", "storage": "/tmp/mem"}),
    "knowledge-sources-of-knowledge": ("crew", "knowledge",
                                       lambda marker: {"sources": [{"file_paths": ["../../etc/passwd"]}]}),
    "executor-persistence": ("executor", "persistence",
                             lambda marker: {"persistence_type": "SQLiteFlowPersistence", "db_path": str(marker)}),
}


def _set(doc: dict[str, Any], where: str, name: str, value: Any) -> str:
    crew = doc["entities"][0]
    if where == "agents":
        _agent(doc)[name] = value
        return f"entities[0].agents[0].{name}"
    if where == "executor":
        _agent(doc)["agent_executor"][name] = value
        return f"entities[0].agents[0].agent_executor.{name}"
    if where == "tasks":
        crew["tasks"][0][name] = value
        return f"entities[0].tasks[0].{name}"
    crew[name] = value
    return f"entities[0].{name}"


@pytest.mark.parametrize("case", list(CASES))
def test_a_field_the_resumed_run_would_act_on_is_refused_in_one_line(tmp_path: Path, case: str) -> None:
    where, name, make = CASES[case]
    marker = tmp_path / "RAN"
    store, doc = crew_doc(tmp_path)
    path = _set(doc, where, name, make(marker))
    cid = plant(store, doc)
    before = {c.id for c in store.list()}
    with pytest.raises(UntrustedCapability) as info:
        restore(cid, store=store.path)
    message = str(info.value)
    assert "\n" not in message and info.value.path.startswith(path) and ENV_VAR in message, message
    assert "ckpt import" in message
    assert not marker.exists()  # the MCP command never ran
    assert {c.id for c in store.list()} == before


def test_defaults_and_relative_files_pass_and_trusting_the_checkpoint_lifts_the_rule(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, doc = crew_doc(tmp_path)
    for name in ("mcps", "a2a", "apps", "from_repository", "skills"):
        _agent(doc)[name] = None
    _agent(doc)["allow_code_execution"] = False
    doc["entities"][0]["tasks"][0]["input_files"] = {"notes": "docs/notes.md"}
    doc["entities"][0]["prompt_file"] = "prompts/en.json"
    check(doc)  # unset, off, or a relative path under the working folder
    _agent(doc)["mcps"] = ["https://mcp.example.com/sse"]
    with pytest.raises(UntrustedCapability):
        check(doc)
    monkeypatch.setenv(ENV_VAR, "1")
    check(doc)


@pytest.mark.parametrize("stored", [
    {"location": "ESCAPED", "on_events": ["*"]},  # no provider: CrewAI would make it a JsonProvider config
    True,  # CrewAI's default config: JSON files under ./.checkpoints
], ids=["dict-without-provider", "true"])
def test_a_checkpoint_config_stored_on_an_entity_never_decides_where_the_resumed_run_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored: Any) -> None:
    monkeypatch.chdir(tmp_path)
    store, doc = crew_doc(tmp_path)
    doc["entities"][0]["checkpoint"] = stored
    _agent(doc)["checkpoint"] = stored
    crew = restore(plant(store, doc), store=store.path)
    for cfg in (crew.checkpoint, crew.agents[0].checkpoint):
        assert isinstance(cfg, CheckpointConfig), cfg
        assert Path(cfg.store_location()).resolve() == Path(store.path).resolve()
    if isinstance(stored, dict):
        assert crew.checkpoint.on_events == ["*"]  # the events it checkpoints on are kept
    crew.kickoff()
    assert not (tmp_path / "ESCAPED").exists() and not (tmp_path / ".checkpoints").exists()


@pytest.mark.parametrize("stored", ["true", 1, "yes", {"location": "ESCAPED"}], ids=["str-true", "one", "yes", "dict"])
def test_a_lax_true_or_an_agent_without_entity_type_cannot_keep_its_own_checkpoint_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored: Any) -> None:
    # found by a second review: "true" / 1 (pydantic reads them as True: CrewAI's JSON provider) and a nested
    # agent whose entity_type was deleted kept the checkpoint's own config, and wrote JSON files outside the store
    monkeypatch.chdir(tmp_path)
    store, doc = crew_doc(tmp_path)
    doc["entities"][0]["checkpoint"] = stored
    agent = _agent(doc)
    agent.pop("entity_type", None)
    agent["checkpoint"] = {"location": str(tmp_path / "ESCAPED_AGENT"), "on_events": ["*"]}
    crew = restore(plant(store, doc), store=store.path)
    for cfg in (crew.checkpoint, crew.agents[0].checkpoint):
        assert isinstance(cfg, CheckpointConfig), cfg
        assert Path(cfg.store_location()).resolve() == Path(store.path).resolve()
    crew.kickoff()
    assert not any((tmp_path / n).exists() for n in ("ESCAPED", "ESCAPED_AGENT", ".checkpoints"))


@pytest.mark.parametrize("off", [None, False, "false", 0, "no"])
def test_checkpointing_turned_off_in_a_checkpoint_stays_off(tmp_path: Path, off: Any) -> None:
    store, doc = crew_doc(tmp_path)
    _agent(doc)["checkpoint"] = off
    crew = restore(plant(store, doc), store=store.path)
    assert not isinstance(crew.agents[0].checkpoint, CheckpointConfig)


def test_an_llm_endpoint_in_its_client_params_is_checked_like_base_url(tmp_path: Path) -> None:
    # found by a second review: client_params={"base_url": ...} sent the user's OPENAI_API_KEY there
    from crewckpt.errors import UntrustedEndpoint

    _, doc = crew_doc(tmp_path)
    _agent(doc)["llm"] = {"llm_type": "openai", "model": "gpt-4o-mini",
                          "client_params": {"base_url": "http://192.0.2.2:8765/v1"}}
    with pytest.raises(UntrustedEndpoint) as info:
        check(doc)
    assert "entities[0].agents[0].llm.client_params.base_url" in str(info.value)


def test_crewais_default_flow_database_is_the_users_and_passes(tmp_path: Path) -> None:
    from crewai_core.paths import db_storage_path

    _, doc = crew_doc(tmp_path)
    _agent(doc)["agent_executor"]["persistence"] = {"persistence_type": "SQLiteFlowPersistence",
                                                    "db_path": str(Path(db_storage_path()) / "flow_states.db")}
    check(doc)

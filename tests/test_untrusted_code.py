"""Issue 12 item 1: restoring a checkpoint never imports or resolves code it names unless the user opted in
with ``CREWAI_DESERIALIZE_CALLBACKS=1``. One test per field of CrewAI 1.15.30's state that names an
importable object (see crewckpt/crewai/gate.py for the list and how each was found).

Each hostile checkpoint names a module written to ``tmp_path`` (on ``sys.path``) whose import appends to a
file: after the refused restore the module is not in ``sys.modules`` and the file does not exist. A control
test shows the same module *is* imported when the user opts in, so the probe can see an import.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from crewai import Agent, Crew, Task
from crewai.tools import BaseTool

from crewckpt import Store
from crewckpt.crewai import CheckpointConfig, restore
from crewckpt.crewai.gate import ENV_VAR, UntrustedCode, findings
from crewckpt.testing import ScriptedLLM, crewai_offline  # noqa: F401
from crewckpt.views.document import crewai_json

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]


class EchoTool(BaseTool):
    """A tool class defined (so registered) in this process: restoring it imports nothing."""

    name: str = "echo"
    description: str = "Echoes its input."

    def _run(self, text: str = "") -> str:
        return text


def echo_cache(_args: Any = None, _result: Any = None) -> bool:
    return True


class Probe:
    """A module on sys.path whose import is recorded in a file."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.name = f"h3_evil_{uuid.uuid4().hex[:10]}"
        self.log = tmp_path / f"{self.name}.imported"
        folder = tmp_path / "evil_pkgs"
        folder.mkdir(exist_ok=True)
        (folder / f"{self.name}.py").write_text(
            f"open({str(self.log)!r}, 'a').write('imported\\n')\n"
            "from crewai.tools import BaseTool\n"
            "def fn(*a, **k):\n    open(__file__ + '.called', 'a').write('called\\n')\n    return True\n"
            "class Provider:\n    def request_input(self, *a, **k):\n        return 'x'\n"
            "class Zen(BaseTool):\n    name: str = 'zen'\n    description: str = 'z'\n"
            "    def _run(self) -> str:\n        return 'z'\n")
        monkeypatch.syspath_prepend(str(folder))
        monkeypatch.delenv(ENV_VAR, raising=False)

    def imported(self) -> bool:
        return self.name in sys.modules or self.log.exists()


_CREW_RUN: list[Path] = []  # the store the crew below checkpointed into, once per session (kept pristine)


def crew_doc(tmp_path: Path) -> tuple[Store, dict[str, Any]]:
    """A real checkpoint of a finished one-task crew whose agent and task carry an EchoTool, in a store at
    ``tmp_path/.ckpt`` of the test's own: a copy of the store the crew ran into once per session."""
    if not _CREW_RUN:
        ran = Path(tempfile.mkdtemp(prefix="untrusted-crew-")) / ".ckpt"
        atexit.register(shutil.rmtree, ran.parent, True)
        llm = ScriptedLLM()
        agent = Agent(role="Researcher", goal="g", backstory="b", llm=llm, tools=[EchoTool()])
        task = Task(name="t1", description="Say hi.", expected_output="hi", agent=agent, tools=[EchoTool()])
        Crew(agents=[agent], tasks=[task], checkpoint=CheckpointConfig(location=str(ran), on_events=["*"])).kickoff()
        _CREW_RUN.append(ran)
    loc = tmp_path / ".ckpt"
    # the run's writer keeps its handle open: copy the database and its WAL (committed pages), not the -shm
    shutil.copytree(_CREW_RUN[0], loc, ignore=shutil.ignore_patterns("*-shm"))
    store = Store.open(loc)
    return store, crewai_json(store.read("HEAD"))  # CrewAI's JSON: planted as it is (no agent references)


def plant(store: Store, doc: dict[str, Any]) -> str:
    """Commit a hostile document as a sender would (its own branch)."""
    return store.commit(doc, branch="evil", parents=[])


def refuses(store: Store, cid: str, probe: Probe, path: str) -> UntrustedCode:
    with pytest.raises(UntrustedCode) as info:
        restore(cid, store=store.path)
    err = info.value
    message = str(err)
    assert "\n" not in message and ENV_VAR in message and path in message, message
    assert err.path == path
    assert not probe.imported()
    return err


def agent_event(doc: dict[str, Any]) -> dict[str, Any]:
    return next(n["event"] for n in doc["event_record"]["nodes"].values()
                if n["event"]["type"] == "agent_execution_started")


# -- callbacks (SerializableCallable fields) ----------------------------------------------------------------

CALLBACK_FIELDS = [
    ("tasks[0].callback", lambda d, v: d["entities"][0]["tasks"][0].__setitem__("callback", v)),
    ("step_callback", lambda d, v: d["entities"][0].__setitem__("step_callback", v)),
    ("task_callback", lambda d, v: d["entities"][0].__setitem__("task_callback", v)),
    ("before_kickoff_callbacks[0]", lambda d, v: d["entities"][0].__setitem__("before_kickoff_callbacks", [v])),
    ("after_kickoff_callbacks[0]", lambda d, v: d["entities"][0].__setitem__("after_kickoff_callbacks", [v])),
    ("agents[0].step_callback", lambda d, v: d["entities"][0]["agents"][0].__setitem__("step_callback", v)),
    ("agents[0].callbacks[0]", lambda d, v: d["entities"][0]["agents"][0].__setitem__("callbacks", [v])),
]


@pytest.mark.parametrize("field,setter", CALLBACK_FIELDS, ids=[f for f, _ in CALLBACK_FIELDS])
def test_callback_field_is_refused_without_opt_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  field: str, setter: Any) -> None:
    probe = Probe(tmp_path, monkeypatch)
    store, doc = crew_doc(tmp_path)
    setter(doc, f"{probe.name}.fn")
    refuses(store, plant(store, doc), probe, f"entities[0].{field}")


# -- tools -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["agents[0].tools[0]", "tasks[0].tools[0]", "tasks[0].agent.tools[0]"])
def test_tool_type_of_an_unloaded_class_is_not_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        where: str) -> None:
    probe = Probe(tmp_path, monkeypatch)
    store, doc = crew_doc(tmp_path)
    tool = eval(f"doc['entities'][0]{_subscripts(where)}")
    tool["tool_type"] = f"{probe.name}.Zen"
    refuses(store, plant(store, doc), probe, f"entities[0].{where}.tool_type")


def _subscripts(path: str) -> str:
    out = ""
    for part in path.split("."):
        name, _, index = part.partition("[")
        out += f"[{name!r}]" + (f"[{index}" if index else "")
    return out


def test_tool_type_inside_an_event_is_not_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = Probe(tmp_path, monkeypatch)
    store, doc = crew_doc(tmp_path)
    event = agent_event(doc)
    event["agent"]["tools"][0]["tool_type"] = f"{probe.name}.Zen"
    err = refuses_any(store, plant(store, doc), probe)
    assert err.path.endswith(".event.agent.tools[0].tool_type")


def refuses_any(store: Store, cid: str, probe: Probe) -> UntrustedCode:
    with pytest.raises(UntrustedCode) as info:
        restore(cid, store=store.path)
    assert "\n" not in str(info.value) and not probe.imported()
    return info.value


@pytest.mark.parametrize("target", ["os.system", "module"])
def test_tool_cache_function_is_not_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            target: str) -> None:
    from crewai.tools import base_tool

    probe = Probe(tmp_path, monkeypatch)
    resolved: list[str] = []
    real = base_tool._resolve_dotted_path
    monkeypatch.setattr(base_tool, "_resolve_dotted_path", lambda p: resolved.append(p) or real(p))
    store, doc = crew_doc(tmp_path)
    value = "os.system" if target == "os.system" else f"{probe.name}.fn"
    doc["entities"][0]["agents"][0]["tools"][0]["cache_function"] = value
    refuses(store, plant(store, doc), probe, "entities[0].agents[0].tools[0].cache_function")
    assert resolved == []


def test_default_cache_function_and_registered_tools_restore(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    store, doc = crew_doc(tmp_path)
    tool = doc["entities"][0]["agents"][0]["tools"][0]
    assert tool["cache_function"] == "crewai.tools.base_tool._default_cache_function"
    assert findings(doc) == []
    crew = restore("HEAD", store=store.path)
    assert isinstance(crew.agents[0].tools[0], EchoTool)


# -- JSON schemas: a non-local $ref would be fetched by jsonref ----------------------------------------------

def watch_fetches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """URIs jsonref opens (it reads file:// and fetches http:// refs through urllib's urlopen)."""
    import jsonref

    fetched: list[str] = []
    real = jsonref.urlopen
    monkeypatch.setattr(jsonref, "urlopen", lambda uri, *a, **k: fetched.append(uri) or real(uri, *a, **k))
    return fetched


SCHEMA_FIELDS = ["tasks[0].output_pydantic", "tasks[0].output_json", "tasks[0].response_model",
                 "agents[0].tools[0].args_schema", "agents[0].tools[0].result_schema"]


@pytest.mark.parametrize("field", SCHEMA_FIELDS)
def test_schema_with_an_external_ref_is_not_fetched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    field: str) -> None:
    probe = Probe(tmp_path, monkeypatch)
    fetched = watch_fetches(monkeypatch)
    store, doc = crew_doc(tmp_path)
    secret = tmp_path / "secret.json"
    secret.write_text('{"type": "string"}')
    parent = eval(f"doc['entities'][0]{_subscripts(field.rpartition('.')[0])}")
    parent[field.rpartition(".")[2]] = {
        "title": "Out", "type": "object", "properties": {"x": {"$ref": secret.as_uri()}}}
    refuses(store, plant(store, doc), probe, f"entities[0].{field}.properties.x.$ref")
    assert fetched == []


# -- LLMs -----------------------------------------------------------------------------------------------

def test_llm_callbacks_naming_integrations_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = Probe(tmp_path, monkeypatch)
    store, doc = crew_doc(tmp_path)
    doc["entities"][0]["agents"][0]["llm"] = {"llm_type": "litellm", "model": "gpt-4o-mini",
                                              "callbacks": [probe.name]}
    refuses(store, plant(store, doc), probe, "entities[0].agents[0].llm.callbacks[0]")


def test_llm_type_outside_the_registry_is_not_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``llm_type`` only selects from ``_LLM_TYPE_REGISTRY`` (classes the program registered): a module
    path there is refused by CrewAI itself and nothing is imported."""
    probe = Probe(tmp_path, monkeypatch)
    store, doc = crew_doc(tmp_path)
    doc["entities"][0]["agents"][0]["llm"]["llm_type"] = f"{probe.name}.Zen"
    with pytest.raises(ValueError, match="Unknown llm_type"):
        restore(plant(store, doc), store=store.path)
    assert not probe.imported()


# -- fields whose strings CrewAI does not resolve (covered so a regression would be seen) --------------------

def test_converter_cls_and_guardrail_strings_import_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = Probe(tmp_path, monkeypatch)
    store, doc = crew_doc(tmp_path)
    task = doc["entities"][0]["tasks"][0]
    task["converter_cls"] = f"{probe.name}.Zen"
    task["guardrails"] = [f"{probe.name}.fn"]
    monkeypatch.setenv(ENV_VAR, "1")  # even trusted, these strings are data (a prompt; dropped)
    crew = restore(plant(store, doc), store=store.path)
    assert crew.tasks[0].converter_cls is None and not probe.imported()


REGISTRY_FIELDS = [
    ("tasks[0].condition", lambda d, v: d["entities"][0]["tasks"][0].__setitem__("condition", f"{v}.fn")),
    ("agents[0].agent_executor.executor_type",
     lambda d, v: d["entities"][0]["agents"][0].__setitem__("agent_executor", {"executor_type": f"{v}.Zen"})),
    ("agents[0].executor_class", lambda d, v: d["entities"][0]["agents"][0].__setitem__("executor_class",
                                                                                         f"{v}.Zen")),
    ("agents[0].knowledge_sources[0].source_type",
     lambda d, v: d["entities"][0]["agents"][0].__setitem__("knowledge_sources", [{"source_type": f"{v}.Zen"}])),
    ("memory.memory_kind", lambda d, v: d["entities"][0].__setitem__("memory", {"memory_kind": f"{v}.Zen"})),
    ("event type", lambda d, v: agent_event(d).__setitem__("type", f"{v}.Zen")),
]


@pytest.mark.parametrize("field,setter", REGISTRY_FIELDS, ids=[f for f, _ in REGISTRY_FIELDS])
def test_registry_fields_never_import_even_when_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        field: str, setter: Any) -> None:
    """Strings CrewAI looks up in fixed registries (or ignores: a Task has no ``condition``; tasks restore as
    Task) select among classes the program loaded: whatever the restore does, the named module is not
    imported, with or without the opt-in."""
    probe = Probe(tmp_path, monkeypatch)
    store, doc = crew_doc(tmp_path)
    setter(doc, probe.name)
    cid = plant(store, doc)
    monkeypatch.setenv(ENV_VAR, "1")
    with contextlib.suppress(Exception):  # an unknown registry key is CrewAI's error; the import is the point
        restore(cid, store=store.path)
    assert not probe.imported()


# -- flows ---------------------------------------------------------------------------------------------

def flow_doc(fixtures_copy: Path) -> dict[str, Any]:
    import json

    files = sorted((fixtures_copy / "flow_json").rglob("*.json"))
    doc: dict[str, Any] = json.loads(files[-1].read_text())
    assert doc["entities"][0]["entity_type"] == "flow"
    return doc


@pytest.mark.parametrize("form", [":", "."])
def test_flow_input_provider_is_not_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             fixtures_copy: Path, form: str) -> None:
    probe = Probe(tmp_path, monkeypatch)
    store = Store.init(tmp_path / "flows")
    doc = flow_doc(fixtures_copy)
    doc["entities"][0]["input_provider"] = f"{probe.name}{form}Provider"
    refuses(store, plant(store, doc), probe, "entities[0].input_provider")


def test_flow_initial_state_schema_ref_is_not_fetched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      fixtures_copy: Path) -> None:
    probe = Probe(tmp_path, monkeypatch)
    fetched = watch_fetches(monkeypatch)
    store = Store.init(tmp_path / "flows")
    doc = flow_doc(fixtures_copy)
    secret = tmp_path / "secret.json"
    secret.write_text('{"type": "string"}')
    doc["entities"][0]["initial_state"] = {"__crewai_pydantic_class_schema__": {
        "type": "object", "properties": {"x": {"$ref": secret.as_uri()}}}}
    err = refuses_any(store, plant(store, doc), probe)
    assert fetched == []
    assert err.path == "entities[0].initial_state.__crewai_pydantic_class_schema__.properties.x.$ref"


# -- the opt-in, and the control that the probe sees imports ------------------------------------------------

def test_opt_in_restores_as_crewai_does_and_the_probe_sees_the_import(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    probe = Probe(tmp_path, monkeypatch)
    store, doc = crew_doc(tmp_path)
    hostile = copy.deepcopy(doc)
    hostile["entities"][0]["agents"][0]["tools"][0]["tool_type"] = f"{probe.name}.Zen"
    hostile["entities"][0]["tasks"][0]["callback"] = f"{probe.name}.fn"
    cid = plant(store, hostile)
    err = refuses_any(store, cid, probe)
    assert "and 1 more field" in str(err)
    monkeypatch.setenv(ENV_VAR, "1")
    crew = restore(cid, store=store.path)
    assert probe.imported()
    assert type(crew.agents[0].tools[0]).__name__ == "Zen"


def test_ckpt_resume_refuses_in_one_line_and_imports_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI in a fresh process (the module is importable there: it is on PYTHONPATH)."""
    import os
    import subprocess

    probe = Probe(tmp_path, monkeypatch)
    store, doc = crew_doc(tmp_path)
    doc["entities"][0]["agents"][0]["tools"][0]["tool_type"] = f"{probe.name}.Zen"
    cid = plant(store, doc)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "evil_pkgs")}
    env.pop(ENV_VAR, None)
    ckpt = Path(sys.executable).with_name("ckpt")
    proc = subprocess.run([str(ckpt), "--store", str(store.path), "resume", cid[:12]], check=False, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "tools[0].tool_type" in lines[0] and ENV_VAR in lines[0], proc.stderr
    assert not probe.log.exists()


def test_crewai_json_checkpoint_restored_by_crewai_is_gated_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With crewckpt installed, CrewAI's own restore of one of its JSON files gets the same gate."""
    import json

    from crewai.state.checkpoint_config import CheckpointConfig as CrewAIConfig

    probe = Probe(tmp_path, monkeypatch)
    _, doc = crew_doc(tmp_path)
    doc["entities"][0]["agents"][0]["tools"][0]["tool_type"] = f"{probe.name}.Zen"
    path = tmp_path / "cp" / "main" / "20261201T000000_abcd1234_p-none.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    with pytest.raises(UntrustedCode, match=r"entities\[0\]\.agents\[0\]\.tools\[0\]\.tool_type"):
        Crew.from_checkpoint(CrewAIConfig(restore_from=str(path)))
    assert not probe.imported()

"""The restore gate: a checkpoint is data, so restoring it never imports or runs code it names.

CrewAI 1.15.30 resolves code named by strings in a checkpoint in several places, and guards only some of
them with ``CREWAI_DESERIALIZE_CALLBACKS``:

* every ``SerializableCallable`` field (task ``callback``, ``ConditionalTask.condition``, crew
  ``step_callback`` / ``task_callback`` / ``before_kickoff_callbacks`` / ``after_kickoff_callbacks``, agent
  ``step_callback`` / ``callbacks``): guarded, with a multi-line pydantic error;
* a tool's ``tool_type`` (``crewai.tools.base_tool._resolve_tool_dict``): a class path not yet registered is
  imported with ``importlib.import_module``, unguarded;
* a tool's ``cache_function``: resolved with ``_resolve_dotted_path`` before validation, unguarded
  (``"os.system"`` becomes ``os.system``, later called with the tool's arguments);
* ``Flow.input_provider``: a ``"module:qualname"`` string is imported and instantiated, unguarded;
* JSON-schema fields (``output_json`` / ``output_pydantic`` / ``response_model`` of a task, a tool's
  ``args_schema`` / ``result_schema``, ``Flow.initial_state``): rebuilt by ``create_model_from_schema``,
  whose ``jsonref.replace_refs`` fetches any non-local ``$ref`` (``http://``, ``file://``);
* an LLM's ``callbacks`` strings name LiteLLM integrations that LiteLLM imports and sends calls to.

An LLM's endpoint fields (``base_url``, ``api_base``) are not code but decide where the user's API key and
prompts go: restoring sends both to whatever URL a checkpoint names. :func:`check` therefore also refuses an
endpoint that is not trusted (:func:`trusted_endpoint`): unset, a loopback host (a local Ollama or LM
Studio), a URL the environment already configures (``OPENAI_BASE_URL`` and the like), or one the user lists
in ``CREWCKPT_LLM_ENDPOINTS`` (comma-separated; ``*`` trusts every endpoint).

An embedder's endpoint (``embedder.config`` of a crew, agent or knowledge source: ``api_base``,
``base_url``, ``url``, ``api_url``, ``endpoint``, ``host``, ``azure_endpoint``) gets the same rule: CrewAI sends
the user's embedding key and the tasks' texts there.

Output files are not code either, but decide where the user's writes go: a task's ``output_file`` and a
crew's ``output_log_file`` are written (``"w"``: an existing file is replaced) when the resumed run goes on.
:func:`check` refuses a path a checkpoint could aim anywhere (:func:`trusted_path`): absolute, ``~``, a
``..`` component, a ``{placeholder}`` (CrewAI fills it from the kickoff inputs, which the checkpoint also
holds), a Windows drive or a NUL; a plain relative path (``report.md``, ``out/report.md``, as CrewAI writes
under the working folder) passes.

Some fields are neither code nor output files but make the resumed run act on what the checkpoint chose
(:class:`~crewckpt.errors.UntrustedCapability`): an agent's ``mcps`` (a stdio entry is a command CrewAI
runs; a URL a server it connects to), ``a2a`` (remote agents), ``apps`` (platform integrations),
``from_repository`` (an agent definition fetched at validation), ``skills`` (folders loaded),
``allow_code_execution`` (the agent may run code), a crew's ``skills``; and the files CrewAI reads and
hands to the LLM or writes: a task's ``input_files``, a crew's ``prompt_file``, ``trained_agents_file`` and
``task_execution_output_json_files``, a knowledge source's ``file_path`` / ``file_paths`` (under
``knowledge_sources`` or ``knowledge``), a memory's ``storage`` folder, a flow persistence's ``db_path``
(CrewAI's own default, in the user's data folder, passes), which pass only as :func:`trusted_path`
relative paths (no URL). Set and not empty, each is refused unless the user opted in. An LLM's
``client_params`` / ``additional_params`` / ``default_query`` are searched for endpoint keys as an
embedder's config is.

Resolved through fixed registries, so not a door: ``llm_type`` (``_LLM_TYPE_REGISTRY``), ``executor_type``,
``executor_class``, knowledge ``source_type``, memory ``memory_kind``, flow ``persistence_type``, event
``type``, ``converter_cls`` (dropped unless already a class), a task failure's exception class (looked up in
loaded modules only), guardrail strings (an LLM prompt, not code).

:func:`check` walks a document along CrewAI's own model annotations (so user data such as a flow's state
is never mistaken for a field) and raises :class:`UntrustedCode` naming the first such field, unless the
user opted in with ``CREWAI_DESERIALIZE_CALLBACKS=1`` (CrewAI's variable and values). Values that name
nothing new pass: a tool class already registered in this process, CrewAI's default cache function.
"""

from __future__ import annotations

import os
import sys
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from crewckpt.errors import UntrustedCapability, UntrustedCode, UntrustedEndpoint, UntrustedPath
from crewckpt.history import jsontext

ENDPOINT_VAR = "CREWCKPT_LLM_ENDPOINTS"
ENDPOINT_FIELDS = ("base_url", "api_base")
EMBEDDER_ENDPOINT_KEYS = frozenset({"api_base", "base_url", "url", "api_url", "endpoint", "host", "azure_endpoint",
                                    "platform_url", "bedrock_url"})
# an LLM's free-form option maps that its client reads an endpoint from (the same keys as an embedder's)
LLM_OPTION_FIELDS = ("client_params", "additional_params", "default_query")
PATH_FIELDS = frozenset({"output_file", "output_log_file"})  # Task.output_file, Crew.output_log_file
# BaseAgent fields whose value (when set and not empty) the resumed run acts on: what it would do
AGENT_CAPABILITIES = {"mcps": "start or connect to MCP servers", "a2a": "talk to remote agents",
                      "apps": "use platform apps", "from_repository": "fetch an agent definition",
                      "skills": "load skill folders", "allow_code_execution": "let the agent execute code"}
CREW_CAPABILITIES = {"skills": "load skill folders into every agent"}
KNOWLEDGE_FILE_KEYS = frozenset({"file_path", "file_paths"})
# fields naming paths CrewAI opens (reads and hands to the LLM, or writes): (the keys below which the strings
# are paths, None for the whole value; what it would do). Every such string must be a trusted_path, no URL
FILE_FIELDS: dict[str, tuple[frozenset[str] | None, str]] = {
    "input_files": (None, "read a file"), "prompt_file": (None, "read a file"),
    "trained_agents_file": (None, "read a file"), "task_execution_output_json_files": (None, "write a file"),
    "knowledge_sources": (KNOWLEDGE_FILE_KEYS, "read a file"), "knowledge": (KNOWLEDGE_FILE_KEYS, "read a file"),
    "persistence": (frozenset({"db_path", "path"}), "write a database file"),
    "memory": (frozenset({"storage", "path", "db_path"}), "keep its memory in a folder")}
# variables CrewAI's providers and LiteLLM read an endpoint from: a URL the user configured is trusted
ENDPOINT_ENV = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "AZURE_API_BASE",
                "AZURE_OPENAI_ENDPOINT", "OLLAMA_API_BASE", "OLLAMA_HOST", "GEMINI_API_BASE",
                "WATSONX_URL", "LITELLM_API_BASE", "OPENROUTER_API_BASE", "API_BASE")
_LOOPBACK = frozenset({"localhost"})

ENV_VAR = "CREWAI_DESERIALIZE_CALLBACKS"
_YES = frozenset({"1", "true", "yes"})  # crewai.types.callback._TRUSTED_DESERIALIZE_VALUES
DEFAULT_CACHE_FUNCTION = "crewai.tools.base_tool._default_cache_function"
_SEQ_ORIGINS = (list, set, frozenset, tuple, Sequence, typing.Sequence)
_MAP_ORIGINS = (dict, Mapping, typing.Mapping)


def _norm_url(url: str) -> str:
    return url.strip().rstrip("/").lower()


def trusted_endpoint(url: Any, environ: Mapping[str, str] | None = None) -> bool:
    """True when restoring may point an LLM at ``url``: empty, a loopback host, a URL configured in one of
    ENDPOINT_ENV, or listed in ``CREWCKPT_LLM_ENDPOINTS`` (comma-separated URLs, or ``*``)."""
    if url is None or (isinstance(url, str) and not url.strip()):
        return True
    if not isinstance(url, str):
        return False
    env = os.environ if environ is None else environ
    listed = {_norm_url(u) for u in env.get(ENDPOINT_VAR, "").split(",") if u.strip()}
    if "*" in listed:
        return True
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(url.strip() if "//" in url else "//" + url.strip()).hostname or "").lower()
    except ValueError:  # e.g. an unbalanced [ in the host: not a URL anyone configured
        return False
    if host in _LOOPBACK or _is_loopback_ip(host):
        return True
    configured = {_norm_url(env[v]) for v in ENDPOINT_ENV if env.get(v)}
    return _norm_url(url) in configured | listed


def trusted_path(value: Any) -> bool:
    """True when restoring may let CrewAI write the output file ``value`` names: unset (None, "", a bool:
    ``output_log_file=True`` is CrewAI's default name), or a relative path that stays under the working folder
    and holds no ``{placeholder}`` (filled from the checkpoint's own inputs)."""
    if value is None or isinstance(value, bool) or (isinstance(value, str) and not value.strip()):
        return True
    if not isinstance(value, str) or "\x00" in value or "{" in value or "}" in value:
        return False
    v = value.strip().replace("\\", "/")
    if v.startswith(("/", "~")) or (len(v) > 1 and v[1] == ":"):  # absolute, home, a Windows drive
        return False
    return ".." not in v.split("/")


def _is_loopback_ip(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name, not an address (127.0.0.1.attacker.example is a name)
        return False


def opted_in(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``CREWAI_DESERIALIZE_CALLBACKS`` is an explicit yes (CrewAI's rule: 1, true, yes)."""
    env = os.environ if environ is None else environ
    return env.get(ENV_VAR, "").strip().lower() in _YES


def check(doc: Any) -> None:
    """Refuse a checkpoint document that names code, unless the user opted in.

    Raises:
        UntrustedCode: one line naming the first field path and ``CREWAI_DESERIALIZE_CALLBACKS``.
        UntrustedCapability: no code named, but a field the resumed run would act on (module docstring).
        UntrustedPath: no code named, but an output file a checkpoint could aim anywhere (:func:`trusted_path`).
        UntrustedEndpoint: no code named, but an LLM or embedder endpoint that is not trusted
            (:func:`trusted_endpoint`).
    """
    if opted_in():
        return
    walker = _Walker()
    found = walker.run(doc)
    if found:
        raise UntrustedCode(found)
    if walker.acts:
        raise UntrustedCapability(walker.acts)
    if walker.paths:
        raise UntrustedPath(walker.paths)
    endpoints = [(p, u) for p, u in walker.endpoints if not trusted_endpoint(u)]
    if endpoints:
        raise UntrustedEndpoint(endpoints)


def check_crewai_location(location: Any) -> None:
    """:func:`check` for a checkpoint CrewAI itself restores (a JSON file or SQLite row ``restore_from``).

    Reads it the way ``RuntimeState.from_checkpoint`` does; a location that cannot be read is left to CrewAI
    (its own error).

    Raises:
        UntrustedCode: as :func:`check`.
    """
    if opted_in() or location is None:
        return
    from crewai.state.provider.utils import detect_provider

    try:
        raw = detect_provider(str(location)).from_checkpoint(str(location))
        doc = jsontext.loads(raw)
    except Exception:  # noqa: BLE001  (unreadable: CrewAI reports it)
        return
    check(doc)


def checkpoint_holders(doc: Any) -> list[dict[str, Any]]:
    """The dicts of ``doc``'s entities, at any depth (a crew's agents, a task's agent, a manager agent), whose
    CrewAI model has a ``checkpoint`` field that the dict sets, found along the model annotations as
    :func:`check` walks (an agent without ``entity_type`` is found too; user data such as a flow's state is
    not). Walks whatever the user opted into: where a resumed run writes is never the checkpoint's."""
    walker = _Walker()
    walker.run(doc)
    return walker.holders


def findings(doc: Any) -> list[tuple[str, str, str]]:
    """Every ``(field path, stored string, what restoring would do)`` in a checkpoint document."""
    return _Walker().run(doc)


# -- the walk ------------------------------------------------------------------------------------------------

def _expand(annotation: Any, out: list[tuple[str, Any]], depth: int = 0) -> list[tuple[str, Any]]:
    """Flatten an annotation into ("model", cls) / ("seq", item alternatives) / ("map", value alternatives)."""
    if depth > 20:
        return out
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _expand(typing.get_args(annotation)[0], out, depth + 1)
    if origin is typing.Union or origin is types.UnionType:
        for arg in typing.get_args(annotation):
            _expand(arg, out, depth + 1)
        return out
    if origin in _SEQ_ORIGINS:
        args = typing.get_args(annotation)
        out.append(("seq", _expand(args[0], [], depth + 1) if args else []))
        return out
    if origin in _MAP_ORIGINS:
        args = typing.get_args(annotation)
        out.append(("map", _expand(args[1], [], depth + 1) if len(args) == 2 else []))
        return out
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        out.append(("model", annotation))
    return out


def _validator_names(info: Any) -> set[str]:
    return {getattr(getattr(m, "func", None), "__name__", "") for m in info.metadata}


_SCHEMA_VALIDATORS = {"_deserialize_model_class", "_deserialize_schema", "_deserialize_initial_state"}


class _Walker:
    def __init__(self) -> None:
        from crewai import Agent, Crew
        from crewai.agents.agent_builder.base_agent import _LLM_TYPE_REGISTRY, BaseAgent
        from crewai.events.base_events import BaseEvent
        from crewai.flow.flow import Flow
        from crewai.llms.base_llm import BaseLLM
        from crewai.state import event_record
        from crewai.tools.base_tool import _TOOL_TYPE_REGISTRY, BaseTool

        if not event_record._event_type_map:
            event_record._build_event_type_map()
        self.events = event_record._event_type_map
        self.entities: dict[str, type[BaseModel]] = {"crew": Crew, "flow": Flow, "agent": Agent}
        self.tools, self.llms = _TOOL_TYPE_REGISTRY, _LLM_TYPE_REGISTRY
        self.BaseTool, self.BaseAgent, self.Agent = BaseTool, BaseAgent, Agent
        self.BaseLLM, self.BaseEvent, self.Flow, self.Crew = BaseLLM, BaseEvent, Flow, Crew
        self.found: list[tuple[str, str, str]] = []
        self.endpoints: list[tuple[str, Any]] = []  # (path, value) of every LLM / embedder endpoint field set
        self.paths: list[tuple[str, Any]] = []  # (path, value) of every output file not trusted_path
        self.acts: list[tuple[str, Any, str]] = []  # (path, value, what) of every capability field set
        self.holders: list[dict[str, Any]] = []  # entity models (crew, flow, agent, at any depth) with a checkpoint
        self.seen: set[tuple[int, type]] = set()
        self._plans: dict[type, list[tuple[str, str, list[tuple[str, Any]]]]] = {}

    def run(self, doc: Any) -> list[tuple[str, str, str]]:
        if not isinstance(doc, dict):
            return self.found
        stack: list[tuple[Any, list[tuple[str, Any]], str]] = []
        record = doc.get("event_record")
        nodes = record.get("nodes") if isinstance(record, dict) else None
        if isinstance(nodes, dict):
            for key, node in nodes.items():
                if isinstance(node, dict) and isinstance(node.get("event"), dict):
                    stack.append((node["event"], [("model", self.BaseEvent)],
                                  f"event_record.nodes[{key!r}].event"))
        entities = doc.get("entities")
        entities = entities if isinstance(entities, list) else []
        for i in reversed(range(len(entities))):  # popped first: entities are reported before events
            entity = entities[i]
            kind = entity.get("entity_type") if isinstance(entity, dict) else None
            cls = self.entities.get(kind) if isinstance(kind, str) else None
            if cls is not None:
                stack.append((entity, [("model", cls)], f"entities[{i}]"))
        while stack:
            value, alternatives, path = stack.pop()
            for kind, arg in alternatives:
                if kind == "model" and isinstance(value, dict):
                    self._model(value, arg, path, stack)
                elif kind == "seq" and isinstance(value, list):
                    stack.extend((v, arg, f"{path}[{i}]") for i, v in enumerate(value)
                                 if isinstance(v, (dict, list)))
                elif kind == "map" and isinstance(value, dict):
                    stack.extend((v, arg, f"{path}[{k!r}]") for k, v in value.items()
                                 if isinstance(v, (dict, list)))
        return self.found

    def _concrete(self, d: dict[str, Any], cls: type[BaseModel], path: str) -> type[BaseModel] | None:
        if issubclass(cls, self.BaseTool):
            dotted = d.get("tool_type")
            if isinstance(dotted, str):
                known = self.tools.get(dotted)
                if known is None:
                    self.found.append((f"{path}.tool_type", dotted, "a tool class restore would import"))
                    return None
                return known
            return cls
        if cls is self.BaseAgent:
            return self.Agent
        if issubclass(cls, self.BaseLLM):
            dotted = self.llms.get(d.get("llm_type") or "")
            if dotted:  # a class the program registered; use it only if loaded (the gate imports nothing)
                mod, _, name = dotted.rpartition(".")
                loaded = vars(sys.modules[mod]).get(name) if mod in sys.modules else None
                if isinstance(loaded, type) and issubclass(loaded, BaseModel):
                    return loaded
            return cls
        if cls is self.BaseEvent:
            return self.events.get(d.get("type") or "", cls)
        return cls

    def _plan(self, cls: type[BaseModel]) -> list[tuple[str, str, list[tuple[str, Any]]]]:
        """Per field of ``cls``: (name, check, annotation alternatives) with check in callback / schema /
        provider / llm_callbacks / ""."""
        plan = self._plans.get(cls)
        if plan is None:
            from crewckpt.crewai.snapshot import callback_fields

            callbacks = set(callback_fields(cls))
            plan = []
            for name, info in cls.model_fields.items():
                validators = _validator_names(info)
                if name in callbacks:
                    check = "callback"
                elif validators & _SCHEMA_VALIDATORS or (
                        issubclass(cls, self.BaseTool) and name in ("args_schema", "result_schema")):
                    check = "schema"
                elif "_validate_input_provider" in validators:
                    check = "provider"
                elif issubclass(cls, self.BaseLLM) and name == "callbacks":
                    check = "llm_callbacks"
                else:
                    check = ""
                plan.append((name, check, _expand(info.annotation, [])))
            self._plans[cls] = plan
        return plan

    def _model(self, d: dict[str, Any], cls: type[BaseModel], path: str,
               stack: list[tuple[Any, list[tuple[str, Any]], str]]) -> None:
        key = (id(d), cls)
        if key in self.seen:
            return
        self.seen.add(key)
        concrete = self._concrete(d, cls, path)
        if concrete is None:
            return
        if "checkpoint" in d and "checkpoint" in concrete.model_fields and path.startswith("entities"):
            self.holders.append(d)
        is_tool = issubclass(concrete, self.BaseTool)
        self._capabilities(d, concrete, path)
        if issubclass(concrete, self.BaseLLM):
            self.endpoints.extend((f"{path}.{n}", d[n]) for n in ENDPOINT_FIELDS if d.get(n) is not None)
            for n in LLM_OPTION_FIELDS:  # e.g. client_params={"base_url": ...}: the OpenAI client uses it
                if isinstance(d.get(n), dict):
                    self.endpoints.extend(_embedder_endpoints(d[n], f"{path}.{n}"))
        for name, check, alternatives in self._plan(concrete):
            if name not in d:
                continue
            value, field_path = d[name], f"{path}.{name}"
            if name in PATH_FIELDS and not trusted_path(value):
                self.paths.append((field_path, value))
            if name == "embedder" and isinstance(value, dict):
                self.endpoints.extend(_embedder_endpoints(value, field_path))
            if check == "callback":
                if is_tool and name == "cache_function" and value == DEFAULT_CACHE_FUNCTION:
                    continue
                self._strings(value, field_path, "a callable restore would import"
                              + (" and call with the tool's arguments" if is_tool else ""))
                continue
            if check == "schema":
                for ref_path, ref in _external_refs(value, field_path):
                    self.found.append((ref_path, ref, "a JSON-schema $ref restore would fetch"))
                continue
            if check == "provider" and isinstance(value, str):
                self.found.append((field_path, value, "a class restore would import and instantiate"))
                continue
            if check == "llm_callbacks":
                self._strings(value, field_path, "a LiteLLM integration the LLM would load")
                continue
            if alternatives and isinstance(value, (dict, list)):
                stack.append((value, alternatives, field_path))

    def _capabilities(self, d: dict[str, Any], cls: type[BaseModel], path: str) -> None:
        for base, fields in ((self.BaseAgent, AGENT_CAPABILITIES), (self.Crew, CREW_CAPABILITIES)):
            if issubclass(cls, base):
                self.acts.extend((f"{path}.{n}", d[n], what) for n, what in fields.items()
                                 if n in cls.model_fields and d.get(n) not in (None, False, "", [], {}))
        for name, (keys, what) in FILE_FIELDS.items():
            if name in d and name in cls.model_fields:
                self.acts.extend((p, v, what) for p, v in _strings_in(d[name], f"{path}.{name}", keys)
                                 if not _trusted_file(v) and not (name == "persistence" and v == _default_flow_db()))

    def _strings(self, value: Any, path: str, what: str) -> None:
        if isinstance(value, str):
            self.found.append((path, value, what))
        elif isinstance(value, list):
            self.found.extend((f"{path}[{i}]", v, what) for i, v in enumerate(value) if isinstance(v, str))


def _embedder_endpoints(value: dict[str, Any], path: str) -> list[tuple[str, Any]]:
    """``(path, value)`` of every endpoint key set in an embedder spec (``{"provider", "config": {...}}``, at
    any depth: providers nest their options differently)."""
    out: list[tuple[str, Any]] = []
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        v, p = stack.pop()
        if isinstance(v, dict):
            for k, child in v.items():
                if k in EMBEDDER_ENDPOINT_KEYS and child is not None and not isinstance(child, (dict, list)):
                    out.append((f"{p}.{k}", child))
                elif isinstance(child, (dict, list)):
                    stack.append((child, f"{p}.{k}"))
        elif isinstance(v, list):
            stack.extend((c, f"{p}[{i}]") for i, c in enumerate(v) if isinstance(c, (dict, list)))
    return out


def _external_refs(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """``$ref`` strings in a JSON schema that point outside the schema (anything not starting with #)."""
    stack = [(value, path)]
    while stack:
        v, p = stack.pop()
        if isinstance(v, dict):
            for k, child in v.items():
                if k == "$ref" and isinstance(child, str) and not child.startswith("#"):
                    yield f"{p}.$ref", child
                elif isinstance(child, (dict, list)):
                    stack.append((child, f"{p}.{k}"))
        elif isinstance(v, list):
            stack.extend((c, f"{p}[{i}]") for i, c in enumerate(v) if isinstance(c, (dict, list)))


def _default_flow_db() -> str:
    """The db_path CrewAI's SQLiteFlowPersistence defaults to (in the user's own CrewAI data folder): a flow
    checkpointed with ``@persist`` stores it, so it is the user's, not a place the checkpoint chose. Not cached:
    it follows the environment (CrewAI's data folder variables)."""
    try:
        try:  # crewai_core: where crewai 1.15 moved it (crewai.utilities.paths warns that it is deprecated)
            from crewai_core.paths import db_storage_path
        except ImportError:
            from crewai.utilities.paths import db_storage_path

        return str(Path(db_storage_path()) / "flow_states.db")
    except Exception:  # noqa: BLE001  (another crewai layout: nothing is trusted by default)
        return "\x00"


def _trusted_file(value: str) -> bool:
    """A file a checkpoint may name for CrewAI to read or write: :func:`trusted_path` and not a URL."""
    return trusted_path(value) and "://" not in value


def _strings_in(value: Any, path: str, under: frozenset[str] | None = None) -> Iterator[tuple[str, str]]:
    """``(path, string)`` of every non-blank string in ``value`` at any depth (only below the keys ``under``,
    when given)."""
    stack: list[tuple[Any, str, bool]] = [(value, path, under is None)]
    while stack:
        v, p, take = stack.pop()
        if isinstance(v, dict):
            stack.extend((c, f"{p}.{k}" if isinstance(k, str) and k.isidentifier() else f"{p}[{k!r}]",
                          take or (under is not None and k in under)) for k, c in v.items())
        elif isinstance(v, list):
            stack.extend((c, f"{p}[{i}]", take) for i, c in enumerate(v))
        elif take and isinstance(v, str) and v.strip():
            yield p, v

"""Offline test helpers for CrewAI: a scripted LLM and environment fixtures.

Imported lazily by :mod:`crewckpt.testing` (``from crewckpt.testing import ScriptedLLM`` loads it).

``ScriptedLLM`` is a real ``crewai.llms.base_llm.BaseLLM``: agents call it like any provider, it emits
CrewAI's ``llm_call_started`` / ``llm_call_completed`` events, and restoring a checkpoint rebuilds it
(its ``llm_type`` is registered in CrewAI's ``_LLM_TYPE_REGISTRY`` when this module is imported).

Typical use::

    from crewckpt.testing import ScriptedLLM, offline_env
    llm = ScriptedLLM(fail_at_call=4)          # 4th and later calls raise ScriptedLLMError
    agent = Agent(role="Researcher", goal="g", backstory="b", llm=llm)

``offline_env`` (a context manager) and the pytest fixture ``crewai_offline`` set the variables that keep
CrewAI from reaching the network (telemetry, version check, tracing) and point ``HOME`` at a temporary
folder, because every crew run writes ``~/.local/share/<cwd name>/latest_kickoff_task_outputs.db``.
Set the variables before ``import crewai`` when you can: some are read at import time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from crewai.agents.agent_builder.base_agent import _LLM_TYPE_REGISTRY, BaseAgent
from crewai.events.event_bus import crewai_event_bus
from crewai.events.types.llm_events import LLMCallType
from crewai.llms.base_llm import BaseLLM, llm_call_context
from pydantic import Field, PrivateAttr, model_validator

from crewckpt.testing import OFFLINE_ENV, set_offline_env  # noqa: F401  (the package set them already)

SCRIPTED_LLM_TYPE = "crewckpt_scripted"
"""The ``llm_type`` a ScriptedLLM serializes with; restore looks it up in ``_LLM_TYPE_REGISTRY``."""

DEFAULT_TEMPLATE = "[{role}] {task}: findings on {description} ({digest})"


class ScriptedLLMError(RuntimeError):
    """Raised by :class:`ScriptedLLM` from call number ``fail_at_call`` on, to simulate a provider outage."""


class ScriptedLLM(BaseLLM):
    """A deterministic offline LLM for CrewAI crews, flows and agents.

    Every call answers ``"Thought: ...\\nFinal Answer: <answer>"`` where ``<answer>`` is chosen by
    (agent role, task name): ``answers`` is looked up with the keys ``"<role>/<task>"``, ``"<role>"``,
    ``"<task>"`` in that order, else ``template`` is used. Answers are ``str.format`` templates with the
    fields ``role``, ``task`` (task name, or ``"chat"`` outside a task), ``description`` (the task's
    interpolated description, so kickoff inputs change answers), ``call`` (1-based call number on this
    instance) and ``digest`` (8 hex digits of SHA-256 over role, task and description).

    Fields (all optional; ``ScriptedLLM()`` works):
        model: model name (default ``"scripted"``).
        answers: mapping described above.
        template: fallback answer template.
        fail_at_call: raise :class:`ScriptedLLMError` at this call number (1-based) of this instance and at
            every later one (a provider outage: CrewAI retries a failed call, so a single failure would not
            stop the run). Not serialized into checkpoints: a restored LLM behaves like a recovered provider.
        delay: seconds each call sleeps before answering (to make room for signals in tests).

    Attributes:
        calls: number of calls made on this instance (failed call included); not serialized, so a
            restored LLM counts from 0.
        prompts: the last user message of each call, in call order.
    """

    llm_type: str = SCRIPTED_LLM_TYPE
    model: str = "scripted"
    provider: str = "crewckpt"
    answers: dict[str, str] = Field(default_factory=dict)
    template: str = DEFAULT_TEMPLATE
    fail_at_call: int | None = Field(default=None, exclude=True)
    delay: float = Field(default=0.0, ge=0.0)

    _calls: int = PrivateAttr(default=0)
    _prompts: list[str] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @model_validator(mode="before")
    @classmethod
    def _default_model(cls, data: Any) -> Any:
        # BaseLLM's own before-validator rejects a missing model; give it ours first.
        if isinstance(data, dict) and not data.get("model"):
            data = {**data, "model": "scripted"}
        return data

    @property
    def calls(self) -> int:
        """Number of calls made on this instance so far."""
        return self._calls

    @property
    def prompts(self) -> list[str]:
        """Last user message of every call made on this instance (a copy)."""
        with self._lock:
            return list(self._prompts)

    def reset(self) -> None:
        """Set :attr:`calls` back to 0 and forget prompts (``fail_at_call`` is kept)."""
        with self._lock:
            self._calls = 0
            self._prompts.clear()

    def answer_for(self, role: str, task: str, description: str = "", call: int = 0) -> str:
        """Return the final answer text for (role, task) without counting a call."""
        template = (
            self.answers.get(f"{role}/{task}") or self.answers.get(role) or self.answers.get(task)
            or self.template
        )
        digest = hashlib.sha256(f"{role}\0{task}\0{description}".encode()).hexdigest()[:8]
        return template.format(role=role, task=task, description=description, call=call, digest=digest)

    def supports_function_calling(self) -> bool:
        return False

    def supports_stop_words(self) -> bool:
        return False

    def get_context_window_size(self) -> int:
        return 1_000_000

    def get_input_tokens_count(self, messages: Any, tools: Any = None, response_model: Any = None) -> int:
        return max(1, len(str(messages)) // 4)

    def _respond(self, messages: Any, from_task: Any, from_agent: Any) -> str:
        with self._lock:
            self._calls += 1
            number = self._calls
            self._prompts.append(_last_user_message(messages))
        if self.delay:
            time.sleep(self.delay)
        if self.fail_at_call is not None and number >= self.fail_at_call:
            raise ScriptedLLMError(f"ScriptedLLM: simulated failure at call {number}")
        role = getattr(from_agent, "role", None) or "assistant"
        task = "chat"
        description = ""
        if from_task is not None:
            task = getattr(from_task, "name", None) or "task"
            description = str(getattr(from_task, "description", "") or "")
        answer = self.answer_for(str(role), str(task), description, number)
        return f"Thought: I now know the final answer\nFinal Answer: {answer}"

    def call(  # type: ignore[override]
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> str:
        """Answer one call (see the class docstring); raises ScriptedLLMError at ``fail_at_call``."""
        with llm_call_context():
            self._emit_call_started_event(
                messages=messages, tools=tools, callbacks=callbacks,
                available_functions=available_functions, from_task=from_task, from_agent=from_agent,
            )
            try:
                text = self._respond(messages, from_task, from_agent)
            except ScriptedLLMError as exc:
                self._emit_call_failed_event(error=str(exc), from_task=from_task, from_agent=from_agent)
                raise
            self._emit_call_completed_event(
                response=text, call_type=LLMCallType.LLM_CALL, from_task=from_task,
                from_agent=from_agent, messages=messages,
            )
            return text

    async def acall(self, messages: Any, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        """Async form of :meth:`call` (same arguments; answers immediately)."""
        return self.call(messages, *args, **kwargs)


def _last_user_message(messages: Any) -> str:
    if isinstance(messages, str):
        return messages
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, Mapping) and message.get("role") == "user":
                return str(message.get("content", ""))
    return str(messages)


_LLM_TYPE_REGISTRY[SCRIPTED_LLM_TYPE] = f"{ScriptedLLM.__module__}.{ScriptedLLM.__qualname__}"


ROLES: tuple[str, ...] = ("Researcher", "Writer", "Editor")


def research_crew(n_tasks: int = 6, *, llm: BaseLLM | None = None, checkpoint: Any = None,
                  roles: tuple[str, ...] = ROLES, **crew_kwargs: Any) -> Any:
    """A sequential research crew: ``len(roles)`` agents taking tasks ``task1..taskN`` round-robin.

    Task K's description is ``"Step K about {topic}: do part K."`` (kick off with ``inputs={"topic": ...}``).
    All agents share ``llm`` (default: a new :class:`ScriptedLLM`), so ``llm.calls`` counts the crew's calls.

    Args:
        n_tasks: number of tasks (>= 1).
        llm: the LLM every agent uses.
        checkpoint: the crew's ``checkpoint=`` value (None, True, False or a CheckpointConfig).
        roles: agent roles.
        crew_kwargs: more ``Crew(...)`` arguments.
    Returns:
        A ``crewai.Crew``.
    """
    from crewai import Agent, Crew, Task

    if n_tasks < 1:
        raise ValueError(f"n_tasks must be >= 1, got {n_tasks}")
    llm = llm if llm is not None else ScriptedLLM()
    agents: list[BaseAgent] = [
        Agent(role=role, goal=f"Do the {role.lower()}'s part well", backstory=f"An able {role.lower()}.",
              llm=llm)
        for role in roles
    ]
    tasks = [
        Task(name=f"task{k}", description=f"Step {k} about {{topic}}: do part {k}.",
             expected_output=f"A short paragraph for step {k}.", agent=agents[(k - 1) % len(agents)])
        for k in range(1, n_tasks + 1)
    ]
    return Crew(agents=agents, tasks=tasks, checkpoint=checkpoint, **crew_kwargs)


def crew_llms(entity: Any) -> list[ScriptedLLM]:
    """The distinct ScriptedLLM instances of a crew's agents (or an agent's): a restored crew has one per
    agent even if the original shared one. Sum their ``calls`` to count a resumed run's calls."""
    agents = getattr(entity, "agents", None) or [entity]
    seen: dict[int, ScriptedLLM] = {}
    for agent in agents:
        llm = getattr(agent, "llm", None)
        if isinstance(llm, ScriptedLLM):
            seen.setdefault(id(llm), llm)
    return list(seen.values())


@contextlib.contextmanager
def offline_env(home: str | os.PathLike[str] | None = None) -> Iterator[Path]:
    """Set :data:`OFFLINE_ENV` and a temporary ``HOME`` for the duration of the block.

    Args:
        home: folder to use as HOME (created if missing); a fresh temporary folder when None.
    Yields:
        The HOME path. Previous values of every touched variable are restored on exit.
    """
    keys = [*OFFLINE_ENV, "HOME"]
    saved = {k: os.environ.get(k) for k in keys}
    with contextlib.ExitStack() as stack:
        if home is None:
            home = stack.enter_context(tempfile.TemporaryDirectory(prefix="crewckpt-home-"))
        path = Path(home)
        path.mkdir(parents=True, exist_ok=True)
        os.environ.update(OFFLINE_ENV)
        os.environ["HOME"] = str(path)
        try:
            yield path
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _crewai_offline_fixture(tmp_path: Path, monkeypatch: Any) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    for key, value in OFFLINE_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    # a restore attaches its RuntimeState to the bus for the rest of the context: do not leak it
    crewai_event_bus.reset_runtime_state()
    try:
        yield tmp_path
    finally:
        crewai_event_bus.flush()
        crewai_event_bus.reset_runtime_state()


try:  # the fixture is optional: crewckpt.testing must import without pytest
    import pytest

    crewai_offline = pytest.fixture(_crewai_offline_fixture, name="crewai_offline")
    crewai_offline.__doc__ = (
        "pytest fixture: offline CrewAI variables, HOME=<tmp>/home, cwd=<tmp>, no RuntimeState left on the "
        "event bus before or after; yields the tmp folder. "
        "Use it from conftest.py: ``from crewckpt.testing import crewai_offline``."
    )
except ImportError:  # pragma: no cover - pytest is a dev dependency
    pass


__all__ = [
    "OFFLINE_ENV",
    "ROLES",
    "SCRIPTED_LLM_TYPE",
    "ScriptedLLM",
    "ScriptedLLMError",
    "crew_llms",
    "crewai_offline",
    "offline_env",
    "research_crew",
    "set_offline_env",
]

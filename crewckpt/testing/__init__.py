"""Test helpers shipped with crewckpt.

* :mod:`crewckpt.testing.contract`: the backend contract suite (docs/backends.md). A backend runs it by
  subclassing its test classes and providing one ``backend_factory`` fixture. Needs pytest and hypothesis,
  never crewai.
* Offline CrewAI helpers (:mod:`crewckpt.testing.scripted`, loaded on first use so the contract suite needs
  no crewai): ``ScriptedLLM``, ``ScriptedLLMError``, ``research_crew``, ``crew_llms``, ``offline_env``, the
  ``crewai_offline`` pytest fixture, ``ROLES``, ``SCRIPTED_LLM_TYPE``. Typical use::

      from crewckpt.testing import ScriptedLLM, offline_env

Importing this package sets :data:`OFFLINE_ENV` (without overriding explicit values): importing it before
crewai is the cheapest way to keep CrewAI offline, since some variables are read at import time.
"""

from __future__ import annotations

import os
from typing import Any

OFFLINE_ENV: dict[str, str] = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_VERSION_CHECK": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "OTEL_SDK_DISABLED": "true",
}
"""Environment variables that keep a CrewAI run offline (see shared notes 'Running CrewAI offline')."""


def set_offline_env(env: dict[str, str] | os._Environ[str] | None = None) -> None:
    """Set :data:`OFFLINE_ENV` in ``env`` (default ``os.environ``) without overriding explicit values."""
    target = os.environ if env is None else env
    for key, value in OFFLINE_ENV.items():
        target.setdefault(key, value)


set_offline_env()

_SCRIPTED = ("ROLES", "SCRIPTED_LLM_TYPE", "ScriptedLLM", "ScriptedLLMError", "crew_llms", "crewai_offline",
             "offline_env", "research_crew", "DEFAULT_TEMPLATE")


def __getattr__(name: str) -> Any:
    """The CrewAI helpers, imported from :mod:`crewckpt.testing.scripted` on first use (it imports crewai)."""
    if name in _SCRIPTED:
        from crewckpt.testing import scripted
        return getattr(scripted, name)
    raise AttributeError(f"module 'crewckpt.testing' has no attribute {name!r}")


__all__ = ["OFFLINE_ENV", "set_offline_env", *_SCRIPTED]

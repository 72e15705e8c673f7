"""Running a restored entity: the one place that knows how each CrewAI entity is kicked off again.

Used by ``ckpt resume`` and the TUI's Resume/Fork (so both behave alike).
"""

from __future__ import annotations

from typing import Any

from crewckpt.errors import CkptError

AGENT_RESUME_MESSAGE = "Resume execution."
"""What a restored standalone Agent is kicked off with (CrewAI's own TUI sends the same)."""


def kickoff_restored(entity: Any, inputs: dict[str, Any] | None = None) -> Any:
    """Run a restored Crew or Flow with ``kickoff(inputs=...)`` (None: its recorded inputs), or a standalone
    Agent with :data:`AGENT_RESUME_MESSAGE` (``Agent.kickoff`` requires ``messages`` in crewai 1.15; its
    recorded conversation continues, inputs do not apply). Returns what kickoff returns.

    Raises:
        CkptError: the object has no ``kickoff``; anything the run raises.
    """
    kickoff = getattr(entity, "kickoff", None)
    if kickoff is None:
        raise CkptError(f"restored object {type(entity).__name__} cannot be run: it has no kickoff()")
    if type(entity).__name__ in ("Agent", "LiteAgent"):
        return kickoff(messages=AGENT_RESUME_MESSAGE)
    if inputs is not None:
        return kickoff(inputs=inputs)
    return kickoff()

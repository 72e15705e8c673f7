"""Running a restored entity: the one place that knows how each CrewAI entity is kicked off again.

Used by ``ckpt resume`` and the TUI's Resume/Fork (so both behave alike). A Flow's methods live in its class,
not in the checkpoint: crewckpt records the class path in each flow checkpoint's commit metadata
(:data:`FLOW_CLASS_META`) and :func:`restore_class` imports it again, or says in one line why it cannot.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from crewckpt.crewai.snapshot import IdWeakMap
from crewckpt.errors import CkptError

AGENT_RESUME_MESSAGE = "Resume execution."
"""What a restored standalone Agent is kicked off with (CrewAI's own TUI sends the same)."""

FLOW_CLASS_META = "flow_class"
"""Commit-metadata key holding ``"<module>.<qualname>"`` of the Flow subclass a checkpoint was taken from."""

_restored_flow_class = IdWeakMap()  # restored RuntimeState -> the flow class its commit recorded


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What :func:`run_restored` returns: kickoff's result, and the last checkpoint of the run (the one it
    was restored from when the run wrote none) with its branch; both None when the state is unknown."""

    result: Any
    checkpoint_id: str | None
    branch: str | None


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


def run_restored(entity: Any, inputs: dict[str, Any] | None = None) -> RunResult:
    """:func:`kickoff_restored`, then the run's last checkpoint and branch, read from the RuntimeState the
    restore attached to CrewAI's event bus (not from the store's HEAD, which may be another branch)."""
    from crewai.events.event_bus import crewai_event_bus

    state = crewai_event_bus.runtime_state
    result = kickoff_restored(entity, inputs)
    state = crewai_event_bus.runtime_state or state
    if state is None:
        return RunResult(result, None, None)
    return RunResult(result, getattr(state, "_checkpoint_id", None), getattr(state, "_branch", None))


def entity_meta(state: Any) -> dict[str, Any] | None:
    """Commit metadata for a checkpoint of ``state``: ``{FLOW_CLASS_META: "<module>.<qualname>"}`` when its
    first flow is a Flow subclass, or (a plain ``Flow``, e.g. restored without its class by `ckpt fork`)
    the class recorded in the checkpoint it was restored from; else None."""
    for entity in getattr(state, "root", None) or []:
        if getattr(entity, "entity_type", None) != "flow":
            continue
        cls = type(entity)
        if cls.__module__.startswith("crewai."):
            recorded = _restored_flow_class.get(state)
            return {FLOW_CLASS_META: recorded} if recorded else None
        return {FLOW_CLASS_META: f"{cls.__module__}.{cls.__qualname__}"}
    return None


def remember_flow_class(state: Any, meta: dict[str, Any] | None) -> None:
    """Note the flow class recorded in the metadata of the commit ``state`` was restored from."""
    recorded = meta.get(FLOW_CLASS_META) if isinstance(meta, dict) else None
    if isinstance(recorded, str) and recorded:
        _restored_flow_class.set(state, recorded)


def restore_class(doc: Any, meta: dict[str, Any], *, search: Sequence[str | os.PathLike[str]] = ()) -> Any:
    """The class to restore a checkpoint into: Crew or Agent as the document says, or for a Flow the
    subclass its metadata records (imported; ``search`` folders are tried after ``sys.path``).

    Raises:
        CkptError: a flow checkpoint without a recorded class, or whose class cannot be imported (one line
            naming the class path and the fix).
        ValueError: the document holds no crew, flow or agent.
    """
    from crewai import Flow

    from crewckpt.crewai import entity_class

    cls = entity_class(doc)
    if cls is not Flow:
        return cls
    path = meta.get(FLOW_CLASS_META) if isinstance(meta, dict) else None
    if not isinstance(path, str) or not path:
        raise CkptError("this flow checkpoint does not record its Flow class (it was written by CrewAI or an "
                        "older crewckpt), so its methods cannot be run; restore it in code with "
                        "crewckpt.crewai.restore(rev, cls=YourFlow)")
    found = import_class(path, search)
    if not (isinstance(found, type) and issubclass(found, Flow)):
        raise CkptError(f"flow class {path} recorded in the checkpoint is not a crewai Flow subclass; restore "
                        f"it in code with crewckpt.crewai.restore(rev, cls=YourFlow)")
    return found


def import_class(path: str, search: Sequence[str | os.PathLike[str]] = ()) -> Any:
    """Import ``"<module>.<qualname>"``; ``search`` folders are appended to ``sys.path`` (after installed
    packages, so they never shadow them) when the module is not found.

    Raises:
        CkptError: one line naming the class path and why it cannot be imported.
    """
    module_name, _, qualname = path.rpartition(".")
    if module_name == "__main__":
        raise CkptError(f"cannot import flow class {path}: it was defined in the script that ran it; move it "
                        "into a module, or restore in code with crewckpt.crewai.restore(rev, cls=YourFlow)")
    while module_name:
        try:
            module = _import(module_name, search)
            break
        except ModuleNotFoundError as exc:
            if exc.name != module_name or "." not in module_name:
                raise CkptError(f"cannot import flow class {path} recorded in the checkpoint ({exc}); was it "
                                "renamed or removed? Run `ckpt resume` where its module is importable, or "
                                "restore in code with crewckpt.crewai.restore(rev, cls=YourFlow)") from None
            module_name, _, head = module_name.rpartition(".")  # a nested class: outer.Inner
            qualname = f"{head}.{qualname}"
        except Exception as exc:  # noqa: BLE001  (the module's own code failed while importing)
            raise CkptError(f"cannot import flow class {path}: importing {module_name} failed "
                            f"({type(exc).__name__}: {exc})") from None
    else:
        raise CkptError(f"cannot import flow class {path!r}: not a <module>.<class> path")
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise CkptError(f"cannot import flow class {path}: module {module_name} has no {qualname} (was it "
                            "renamed or removed?); restore in code with crewckpt.crewai.restore(rev, cls=...)")
    return found


def _import(module_name: str, search: Sequence[str | os.PathLike[str]]) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError:
        extra = [os.fspath(p) for p in search if os.fspath(p) not in sys.path]
        if not extra:
            raise
        sys.path.extend(extra)
        importlib.invalidate_caches()
        return importlib.import_module(module_name)

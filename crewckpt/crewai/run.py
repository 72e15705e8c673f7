"""Running a restored entity: the one place that knows how each CrewAI entity is kicked off again.

Used by ``ckpt resume`` and the TUI's Resume/Fork (so both behave alike). A Flow's methods live in its class,
not in the checkpoint: crewckpt records the class path in each flow checkpoint's commit metadata
(:data:`FLOW_CLASS_META`) and :func:`restore_class` imports it again, only with the user's opt-in (a
checkpoint is data: ``--flow-class``, ``CREWAI_DESERIALIZE_CALLBACKS=1`` or a yes at a terminal prompt), or says
in one line why it does not.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Callable
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


_ENTITY_CLASSES = ("crew", "flow", "agent")


def entity_class(doc: Any) -> type:
    """Crew, Flow or Agent for a checkpoint document's first entity (``entity_type``).

    Raises:
        ValueError: the document has no entity CrewAI can restore.
    """
    from crewai import Agent, Crew, Flow

    entities = doc.get("entities") if isinstance(doc, dict) else None
    for entity in entities or []:
        kind = entity.get("entity_type") if isinstance(entity, dict) else None
        if kind in _ENTITY_CLASSES:
            return {"crew": Crew, "flow": Flow, "agent": Agent}[kind]
    raise ValueError("the checkpoint holds no crew, flow or agent to restore")


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


def restore_class(doc: Any, meta: dict[str, Any], *, flow_class: str | None = None,
                  confirm: Callable[[str], bool] | None = None) -> Any:
    """The class to restore a checkpoint into: Crew or Agent as the document says, or for a Flow a subclass.

    A checkpoint is data, so the class path its metadata records is imported only when the user opted in:
    ``flow_class`` (``"<module>.<qualname>"`` the user named, e.g. ``ckpt resume --flow-class``; also the fix
    for a renamed class) is imported as given; else the recorded class is imported when
    ``CREWAI_DESERIALIZE_CALLBACKS=1`` is set, or when ``confirm`` (a yes/no question, e.g. a prompt on a
    terminal; None: non-interactive) answers yes. Modules are searched on ``sys.path``, then in the working
    folder (the user's project), never in a folder the store names.

    Raises:
        CkptError: a flow checkpoint without a recorded class, whose class cannot be imported, or that the
            user did not opt in to import (one line naming the class path and both ways to opt in).
        ValueError: the document holds no crew, flow or agent.
    """
    from crewai import Flow

    from crewckpt.crewai.gate import ENV_VAR, opted_in

    cls = entity_class(doc)
    if cls is not Flow:
        return cls
    if flow_class:
        return _flow_subclass(import_class(flow_class), flow_class, Flow)
    path = meta.get(FLOW_CLASS_META) if isinstance(meta, dict) else None
    if not isinstance(path, str) or not path:
        raise CkptError("this flow checkpoint does not record its Flow class (it was written by CrewAI or an "
                        "older crewckpt), so its methods cannot be run; name it with --flow-class "
                        "MODULE.CLASS, or restore it in code with crewckpt.crewai.restore(rev, cls=YourFlow)")
    if not opted_in():
        where = find_module_file(path)
        if where is None:  # nothing to ask about: importing would fail anyway (and runs nothing)
            raise CkptError(f"cannot import flow class {path} recorded in the checkpoint (no module of it on "
                            "sys.path or in the working folder); was it renamed or removed? Name the class "
                            "with --flow-class MODULE.CLASS")
        question = f"Resume imports flow class {path} (module file {where}). Import it?"
        if confirm is None or not confirm(question):
            raise CkptError(f"flow class {path} recorded in the checkpoint was not imported (a checkpoint is "
                            f"data; its code runs only if you opt in): pass --flow-class {path} to "
                            f"`ckpt resume` if you trust it, or set {ENV_VAR}=1")
    return _flow_subclass(import_class(path), path, Flow)


def _flow_subclass(found: Any, path: str, flow: type) -> Any:
    if not (isinstance(found, type) and issubclass(found, flow)):
        raise CkptError(f"flow class {path} is not a crewai Flow subclass; name the right one with "
                        f"--flow-class MODULE.CLASS, or restore in code with crewckpt.crewai.restore(rev, "
                        f"cls=YourFlow)")
    return found


def tty_confirm() -> Callable[[str], bool] | None:
    """A yes/no prompt (``click.confirm``, default no, on stderr so stdout stays clean) when stdin and
    stderr are terminals; None otherwise (non-interactive: nothing is imported without another opt-in)."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    import click

    return lambda question: bool(click.confirm(question, default=False, err=True))


def find_module_file(path: str) -> str | None:
    """The file of the module ``"<module>.<qualname>"`` names (the longest importable prefix, so a nested
    class ``mod.Outer.Inner`` finds ``mod``), located WITHOUT importing or running anything: loaded modules
    are looked up in ``sys.modules``; others through the import system's finders, one package level at a
    time (``importlib.util.find_spec`` would import parent packages). ``"built-in"`` for a module without a
    file; None when no prefix is found."""
    from importlib.machinery import PathFinder

    parts = path.split(".")
    for n in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:n])
        loaded = sys.modules.get(name)
        if loaded is not None:
            return getattr(loaded, "__file__", None) or "built-in"
        search: list[str] | None = None
        spec: Any = None
        for i in range(1, n + 1):
            head = ".".join(parts[:i])
            parent = sys.modules.get(head) if i < n else None
            if parent is not None:
                search = list(getattr(parent, "__path__", []) or [])
                continue
            spec = None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                try:
                    spec = find(head, search) if find is not None else None
                except Exception:  # noqa: BLE001  (a third-party finder failing: try the next one)
                    spec = None
                if spec is not None:
                    break
            if spec is None and search is None:  # top level: the working folder, after sys.path
                spec = PathFinder.find_spec(head, [os.getcwd()])
            if spec is None:
                break
            search = list(spec.submodule_search_locations or [])
        if spec is not None:
            if spec.has_location and spec.origin:
                return str(spec.origin)
            return next(iter(spec.submodule_search_locations or []), None) or "built-in"  # namespace package
    return None


def import_class(path: str) -> Any:
    """Import ``"<module>.<qualname>"`` (this runs the module's code: callers import only what the user
    opted in to); the working folder is searched after ``sys.path`` (after installed packages, so it never
    shadows them) when the module is not found there.

    Raises:
        CkptError: one line naming the class path and why it cannot be imported.
    """
    module_name, _, qualname = path.rpartition(".")
    if module_name == "__main__":
        raise CkptError(f"cannot import flow class {path}: it was defined in the script that ran it; move it "
                        "into a module, or restore in code with crewckpt.crewai.restore(rev, cls=YourFlow)")
    while module_name:
        try:
            module = _import(module_name)
            break
        except ModuleNotFoundError as exc:
            if exc.name != module_name or "." not in module_name:
                raise CkptError(f"cannot import flow class {path} recorded in the checkpoint ({exc}); was it "
                                "renamed or removed? Name the class with --flow-class MODULE.CLASS, or run "
                                "`ckpt resume` in the folder its module is in") from None
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


def _import(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError:
        cwd = os.getcwd()
        if cwd in sys.path or "" in sys.path:
            raise
        sys.path.append(cwd)  # the user's project, last: it never shadows an installed package
        importlib.invalidate_caches()
        return importlib.import_module(module_name)

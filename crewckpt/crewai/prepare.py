"""CrewAI's ``_prepare_entities``, run before every checkpoint, without its O(tasks) Python calls.

Before each checkpoint CrewAI gives every root entity a fresh execution context and copies private runtime
attributes into public checkpoint fields (``crewai.state.runtime._sync_checkpoint_fields``); for a crew that
is two pydantic assignments per task (``checkpoint_original_description`` / ``_expected_output`` from the
task's ``_original_*``), each read going through pydantic's Python-level ``__getattr__`` (private attributes
live in ``__pydantic_private__``): ~12 us a task, ~1.3 ms per checkpoint at 100 tasks, although after the
first checkpoint the fields nearly always already hold those very objects.

:func:`prepare_entities` leaves every entity exactly as CrewAI's would (same field values, same objects,
same ``model_fields_set``, same private attributes): a task whose field already holds the same object and is
already in ``model_fields_set`` is left alone, which is exactly what pydantic's plain assignment would do to
it; any other task is assigned as CrewAI does. The shortcut is taken only where that equivalence is known:

* CrewAI's two functions are the ones this module mirrors (their source text, hashed); otherwise
  (another crewai) CrewAI's own ``_prepare_entities`` runs unchanged.
* Per task class: pydantic's own ``__getattr__``/``__setattr__``, the private attributes plain (no
  descriptor), and the field's assignment handler pydantic memoized is its plain field handler
  (``__dict__[name] = value`` plus ``model_fields_set``; not ``validate_assignment``, a property, a frozen
  field or an extra). Until pydantic memoized one (the class's first assignment), tasks are assigned normally.
"""

from __future__ import annotations

import hashlib
import inspect
import threading
from typing import Any

from crewai.state import runtime

# sha256 of inspect.getsource(_prepare_entities) + "\0" + inspect.getsource(_sync_checkpoint_fields) for the
# crewai versions whose logic prepare_entities mirrors (1.15.30).
_MIRRORED = frozenset({"7d368edcc125c859ca2259da14139fdcce9af4762d93459bc88f9fd3c04a3329"})
_PAIRS = (("_original_description", "checkpoint_original_description"),
          ("_original_expected_output", "checkpoint_original_expected_output"))
_MISSING = object()

_lock = threading.Lock()
_mirrors: bool | None = None
_plain_task: dict[type, bool] = {}  # task class -> assignments of _PAIRS are pydantic's plain field handler


def crewai_source_digest() -> str | None:
    """The digest :data:`_MIRRORED` holds for the installed crewai's two functions (None: no source)."""
    try:
        text = inspect.getsource(runtime._prepare_entities) + "\0" + inspect.getsource(runtime._sync_checkpoint_fields)
    except (OSError, TypeError, AttributeError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def mirrors_crewai() -> bool:
    """True when the installed crewai's ``_prepare_entities`` is the one :func:`prepare_entities` mirrors."""
    global _mirrors
    if _mirrors is None:
        with _lock:
            if _mirrors is None:
                _mirrors = crewai_source_digest() in _MIRRORED
    return _mirrors


def _task_class_ok(cls: type) -> bool | None:
    """Whether ``cls``'s two checkpoint fields may take the shortcut; None: not known yet (pydantic has not
    memoized the fields' assignment handlers: the class was never assigned them)."""
    ok = _plain_task.get(cls)
    if ok is not None:
        return ok
    from pydantic import BaseModel
    from pydantic import main as pydantic_main

    handlers = getattr(cls, "__pydantic_setattr_handlers__", None)
    plain = getattr(pydantic_main, "_model_field_setattr_handler", None)
    private = getattr(cls, "__private_attributes__", None)
    if not isinstance(handlers, dict) or plain is None or not isinstance(private, dict):
        ok = False
    elif any(handlers.get(dst) is None for _, dst in _PAIRS):
        return None
    else:
        ok = (cls.__getattr__ is BaseModel.__getattr__ and cls.__setattr__ is BaseModel.__setattr__  # type: ignore[attr-defined]
              and all(handlers.get(dst) is plain for _, dst in _PAIRS)
              and all(src in private and not hasattr(private[src], "__get__")
                      and not any(src in vars(k) for k in cls.__mro__) for src, _ in _PAIRS))
    _plain_task[cls] = ok
    return ok


def prepare_entities(root: list[Any]) -> None:
    """Do what ``crewai.state.runtime._prepare_entities(root)`` does, leaving every entity in the same state,
    in O(root entities) Python calls plus one per task whose checkpoint fields change (see the module
    docstring). Raises what CrewAI's would."""
    if not mirrors_crewai():
        runtime._prepare_entities(root)
        return
    from crewai.agents.agent_builder.base_agent import BaseAgent
    from crewai.crew import Crew
    from crewai.flow.flow import Flow

    for entity in root:
        entity.execution_context = runtime.capture_execution_context()
        if not isinstance(entity, Crew) or isinstance(entity, (BaseAgent, Flow)):
            runtime._sync_checkpoint_fields(entity)
            continue
        entity.checkpoint_inputs = entity._inputs
        entity.checkpoint_train = entity._train
        entity.checkpoint_kickoff_event_id = entity._kickoff_event_id
        for task in entity.tasks:
            ok = _plain_task.get(type(task))
            if ok is None:
                ok = _task_class_ok(type(task))
            if ok:
                priv = task.__pydantic_private__
                d = task.__dict__
                fields_set = task.__pydantic_fields_set__
                if priv is not None:
                    src = priv.get("_original_description", _MISSING)
                    if src is not _MISSING and d.get("checkpoint_original_description", _MISSING) is src \
                            and "checkpoint_original_description" in fields_set:
                        src = priv.get("_original_expected_output", _MISSING)
                        if src is not _MISSING and d.get("checkpoint_original_expected_output", _MISSING) is src \
                                and "checkpoint_original_expected_output" in fields_set:
                            continue  # both assignments would change nothing
            task.checkpoint_original_description = task._original_description
            task.checkpoint_original_expected_output = task._original_expected_output

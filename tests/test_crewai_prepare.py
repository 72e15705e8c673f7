"""crewckpt's prepare step before a checkpoint (crewckpt.crewai.prepare, issue 13): it leaves every entity
exactly as CrewAI's own ``_prepare_entities`` would, and costs no Python call per unchanged task."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from crewckpt.testing import crewai_offline  # noqa: F401  (fixture)

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]


def _crew(n: int) -> Any:
    from crewckpt.testing import research_crew

    return research_crew(n)


def _describe(crew: Any, before: dict[int, tuple[dict[str, int], dict[str, int]]]) -> list[Any]:
    """The tasks' state relative to ``before`` (ids of each task's field and private values): per task, its
    fields set, and per field / private attribute 'same' (the object it held before), 'priv:<name>' (the
    very object of that private attribute) or the new value."""
    out: list[Any] = []
    for task in crew.tasks:
        fields, privs = before[id(task)]
        priv = task.__pydantic_private__ or {}

        def what(name: str, v: Any, old: dict[str, int], priv: dict[str, Any] = priv) -> Any:
            for p, pv in priv.items():
                if pv is v and v is not None and name != p:
                    return f"priv:{p}"
            return "same" if old.get(name) == id(v) else ("new", repr(v))

        out.append((sorted(task.model_fields_set),
                    {k: what(k, v, fields) for k, v in task.__dict__.items()},
                    {k: what(k, v, privs) for k, v in priv.items()}))
    return out


def _ids(crew: Any) -> dict[int, tuple[dict[str, int], dict[str, int]]]:
    return {id(t): ({k: id(v) for k, v in t.__dict__.items()},
                    {k: id(v) for k, v in (t.__pydantic_private__ or {}).items()}) for t in crew.tasks}


def _steps(crew: Any, prepare: Any) -> list[Any]:
    """Prepare ``crew`` four times, changing its tasks' private originals in between as a run does; the
    state description after each."""
    seen = []
    for step in range(4):
        if step == 1:  # the kickoff's interpolation sets the originals (new str objects)
            for t in crew.tasks:
                t._original_description = "".join(["orig ", t.description])
                t._original_expected_output = "".join(["exp ", t.expected_output])
        if step == 2:  # one task changes one original, another has its field assigned by hand
            crew.tasks[1]._original_expected_output = "".join(["changed ", "x"])
            crew.tasks[2].checkpoint_original_description = "".join(["by ", "hand"])
        if step == 3:  # an equal but different object must still be assigned (identity, not equality)
            t = crew.tasks[0]
            t._original_description = "".join(["orig ", t.description])
        before = _ids(crew)
        prepare([crew])
        ctx = crew.execution_context
        seen.append((_describe(crew, before), "execution_context" in crew.model_fields_set,
                     crew.checkpoint_inputs is crew._inputs, crew.checkpoint_train is crew._train,
                     crew.checkpoint_kickoff_event_id is crew._kickoff_event_id, type(ctx).__name__))
    return seen


def test_prepare_leaves_tasks_exactly_as_crewais_own() -> None:
    from crewai.state.runtime import _prepare_entities

    from crewckpt.crewai import prepare

    assert prepare.mirrors_crewai(), "the pinned crewai changed _prepare_entities: re-check prepare.py"
    crew = _crew(5)
    # before the first prepare, both sides are None and the fields unset: the assignment still counts
    assert crew.tasks[0]._original_description is crew.tasks[0].checkpoint_original_description is None
    assert "checkpoint_original_description" not in crew.tasks[0].model_fields_set
    theirs = _steps(_crew(5), _prepare_entities)
    ours = _steps(crew, prepare.prepare_entities)
    assert ours == theirs
    assert "checkpoint_original_description" in theirs[0][0][0][0]
    assert theirs[2][0][1][1]["checkpoint_original_expected_output"] == "priv:_original_expected_output"


def test_a_task_class_that_validates_assignments_is_assigned_every_time() -> None:
    from crewai import Task
    from crewai.state.runtime import _prepare_entities
    from pydantic import ConfigDict, field_validator

    from crewckpt.crewai import prepare

    calls: list[str] = []

    class Checked(Task):
        model_config = ConfigDict(validate_assignment=True, arbitrary_types_allowed=True)

        @field_validator("checkpoint_original_description")
        @classmethod
        def _seen(cls, v: Any) -> Any:
            calls.append("v")
            return v

    counts = []
    for fn in (_prepare_entities, prepare.prepare_entities):
        crew = _crew(3)
        crew.tasks = [Checked(description=t.description, expected_output=t.expected_output, agent=t.agent)
                      for t in crew.tasks]
        calls.clear()
        for _ in range(3):
            fn([crew])
        counts.append(len(calls))
    assert counts[0] == counts[1] == 3 * 3  # 3 tasks x 3 prepares: validated each time, as CrewAI does


def test_other_crewai_falls_back_to_its_own_prepare(monkeypatch: pytest.MonkeyPatch) -> None:
    from crewai.state import runtime

    from crewckpt.crewai import prepare

    got: list[Any] = []
    monkeypatch.setattr(prepare, "_mirrors", False)
    monkeypatch.setattr(runtime, "_prepare_entities", lambda root: got.append(root))
    root = [_crew(2)]
    prepare.prepare_entities(root)
    assert got == [root]
    monkeypatch.setattr(prepare, "_mirrors", None)
    monkeypatch.setattr(prepare, "_MIRRORED", frozenset({"another crewai"}))
    assert prepare.mirrors_crewai() is False


def _pydantic_attr_calls(n_tasks: int) -> int:
    """Python calls of pydantic's __getattr__/__setattr__ while the builder makes a document of an
    ``n_tasks`` crew (after a first document: the run's steady state)."""
    from crewai.state.runtime import RuntimeState
    from pydantic import BaseModel

    from crewckpt.crewai.snapshot import SnapshotBuilder

    crew = _crew(n_tasks)
    for t in crew.tasks:
        t._original_description = t.description
        t._original_expected_output = t.expected_output
    state = RuntimeState(root=[crew])
    builder = SnapshotBuilder()
    builder.document(state, parent_id=None, branch="main", trigger=None)
    codes = {BaseModel.__getattr__.__code__, BaseModel.__setattr__.__code__}
    count = 0

    def spy(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call" and frame.f_code in codes:
            count += 1

    sys.setprofile(spy)
    try:
        builder.document(state, parent_id=None, branch="main", trigger=None)
    finally:
        sys.setprofile(None)
    return count


def test_a_checkpoint_document_costs_no_pydantic_attribute_call_per_unchanged_task() -> None:
    small, big = _pydantic_attr_calls(4), _pydantic_attr_calls(40)
    assert big == small, (small, big)  # CrewAI's own prepare: 4 calls per task (2 private reads, 2 assignments)

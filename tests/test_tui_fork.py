"""Fork from the browser with real CrewAI 1.15.30 and the scripted offline LLM: an edited output makes the
later tasks run again, the earlier ones do not, and the new branch lands in the store nested under its
fork point."""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import TextArea
from tui_helpers import settle, text_of

# crewckpt.testing first: it sets CrewAI's offline variables and registers ScriptedLLM for restore.
from crewckpt.testing import crew_llms, crewai_offline, research_crew  # noqa: F401  (pytest fixture)

pytestmark = pytest.mark.crewai

EDITED = "Otters hold hands while sleeping."


def test_fork_with_edited_output_and_input_reruns_only_downstream_tasks(crewai_offline):  # noqa: F811
    from crewckpt import Store
    from crewckpt.crewai import CheckpointConfig
    from crewckpt.tui.app import CheckpointBrowser, ConfirmRun
    from crewckpt.tui.runner import execute

    research_crew(4, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
    store = Store.open(".ckpt")
    main = [c.id for c in store.log("main")]  # newest first: 4/4, 3/4, 2/4, 1/4 tasks done
    source = store.read(main[1])

    async def drive():
        app = CheckpointBrowser(store)
        app.animation_level = "none"
        async with app.run_test(size=(170, 48)) as pilot:
            await settle(pilot)
            assert app.selected == main[0]
            await pilot.press("down")  # main~1: three tasks done
            await settle(pilot)
            assert app.selected == main[1]
            await pilot.press("3")
            app.query_one("#in-0").focus()
            await pilot.press("end", *" in Norway")
            await pilot.press("escape", "2")
            area = app.query_one("#out-0-1", TextArea)
            area.focus()
            await pilot.press("f7", *EDITED)
            await pilot.press("escape", "f")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmRun)
            panel = text_of(app.screen, "#confirm-body")
            assert "kept (not run): task1" in panel and "run again: task3" in panel and "to run: task4" in panel
            app.screen.query_one("#confirm-branch").value = "edited"
            await pilot.press("enter")
            await pilot.pause()
        return app.return_value

    plan = asyncio.run(drive())
    assert plan.branch == "edited" and plan.task_outputs == {(0, 1): EDITED}
    assert plan.inputs == {"topic": "otters in Norway"}
    store.close()

    printed: list[str] = []
    outcome = execute(plan, ".ckpt", echo=printed.append)
    llms = crew_llms(outcome.entity)
    assert sum(llm.calls for llm in llms) == 2  # task3 again and task4; task1 and task2 not run
    prompts = [p for llm in llms for p in llm.prompts]
    assert all(EDITED in p for p in prompts)  # the edited output is the later tasks' context
    assert sorted(p.split("Current Task: ")[1].split(":")[0] for p in prompts) == [
        "Step 3 about otters in Norway", "Step 4 about otters in Norway"]
    assert outcome.rerun == [(0, 2)] and any("tasks to run again: 3" in line for line in printed)

    with Store.open(".ckpt") as store:
        assert store.branches()["main"] == main[0]  # main untouched
        new = [c for c in store.log("edited")][: 3]
        fork, done3, done4 = new[2], new[1], new[0]
        assert fork.id == outcome.fork_commit and fork.trigger == "fork" and fork.parents == (main[1],)
        assert [done3.trigger, done4.trigger] == ["task_completed", "task_completed"]
        assert fork.summary["tasks_done"] == 2 and done4.summary["tasks_done"] == 4
        edited_state = store.read(fork.id)["entities"][0]
        assert edited_state["tasks"][1]["output"]["raw"] == EDITED and edited_state["tasks"][2]["output"] is None
        assert edited_state["checkpoint_inputs"] == {"topic": "otters in Norway"}
        tip = store.read(done4.id)["entities"][0]["tasks"]
        assert tip[0]["output"] == source["entities"][0]["tasks"][0]["output"]  # upstream kept as it was
        assert tip[1]["output"]["raw"] == EDITED
        assert "otters in Norway" in tip[3]["output"]["raw"]

        async def reopen():
            app = CheckpointBrowser(store)
            app.animation_level = "none"
            async with app.run_test(size=(170, 48)) as pilot:
                await settle(pilot)
                line = app._line_nodes[app.history.line_of[done4.id]]
                assert line.parent is app._commit_nodes[main[1]] and "edited" in str(line.label)
                await pilot.press("4")
                await settle(pilot)
                app.reveal(fork.id)
                await settle(pilot)
                diff = text_of(app, "#diff-body")
                assert "(parent)" in diff and EDITED in diff and '"otters" -> "otters in Norway"' in diff

        asyncio.run(reopen())


def test_resume_from_the_browser_runs_the_remaining_tasks_in_the_terminal(crewai_offline, monkeypatch):  # noqa: F811
    from crewckpt import Store
    from crewckpt.crewai import CheckpointConfig
    from crewckpt.testing import ScriptedLLM, ScriptedLLMError
    from crewckpt.tui import run
    from crewckpt.tui.app import CheckpointBrowser
    from crewckpt.tui.runner import RunPlan

    with pytest.raises(ScriptedLLMError):  # the provider fails at task 2
        research_crew(3, llm=ScriptedLLM(fail_at_call=2), checkpoint=CheckpointConfig()).kickoff(
            inputs={"topic": "otters"})
    with Store.open(".ckpt") as store:
        crashed = store.resolve("main")
        assert store.info(crashed).summary["tasks_done"] == 1
    monkeypatch.setattr(CheckpointBrowser, "run", lambda self: RunPlan("resume", crashed))
    printed: list[str] = []
    run(".ckpt", echo=printed.append)
    with Store.open(".ckpt") as store:
        new = [c for c in store.log("main") if c.id != crashed][:2]
        assert [c.summary["tasks_done"] for c in new] == [3, 2] and new[1].parents == (crashed,)
        head = store.resolve("HEAD")
    assert printed[0] == f"Resuming Crew from {crashed[:12]}"
    assert printed[-1].startswith(f"Done: latest checkpoint {head[:12]} on branch main.")
    assert any("task3" in line and "otters" in line for line in printed)  # the crew's final output


def test_task_edits_refuse_tasks_without_output(crewai_offline):  # noqa: F811
    from crewckpt.crewai.edits import apply_task_edits

    crew = research_crew(2)
    with pytest.raises(ValueError, match="task 1 of crew .* has no output to edit"):
        apply_task_edits([crew], {(0, 0): "text"})
    with pytest.raises(ValueError, match="entity 3 of the checkpoint is not a crew with tasks"):
        apply_task_edits([crew], {(3, 0): "text"})
    with pytest.raises(ValueError, match="task 5 of crew"):
        apply_task_edits([crew], {(0, 4): "text"})

"""The checkpoint browser on shared stores (issue 15: "the same on a PostgreSQL store as on SQLite ... TUI"):
real CrewAI checkpoints imported into a PostgreSQL and an S3 store (the real servers the suite starts),
browsed with Textual's Pilot through every tab, as on a local store."""

from __future__ import annotations

import asyncio

import pytest
from tui_helpers import NOW, settle, text_of

from crewckpt import Store
from crewckpt.tui.app import CheckpointBrowser


@pytest.mark.parametrize("where", [pytest.param("pg_url", marks=pytest.mark.postgres),
                                   pytest.param("s3_url", marks=pytest.mark.s3)])
def test_the_browser_shows_every_tab_on_a_shared_store(where: str, request: pytest.FixtureRequest) -> None:
    from crewai_fixtures import FIXTURES

    from crewckpt.views.transfer import import_checkpoints

    url = request.getfixturevalue(where)
    with Store.init(url) as s:
        for name in ("crew_restore_src", "agent_json"):
            import_checkpoints(s, FIXTURES / name, branch_prefix=f"{name}/")
    with Store.open(url) as s:
        listed = {c.id for c in s.list()}

        async def main() -> None:
            app = CheckpointBrowser(s, now_ns=NOW)
            app.animation_level = "none"
            async with app.run_test(size=(170, 48)) as pilot:
                await settle(pilot)
                h = app.history
                assert {c for c in h.by_id} == listed
                tips = {ln.branch.split("/")[0]: ln.last.id for ln in h.lines}
                assert set(tips) == {"crew_restore_src", "agent_json"}
                for tip in tips.values():
                    app.reveal(tip)
                    for key in "12345":
                        await pilot.press(key)
                        await settle(pilot)
                    overview = text_of(app, "#overview-body")
                    assert tip in overview and "cannot read" not in overview, overview
                kinds = {kind for c in h.by_id.values() for kind, _ in c.summary["entities"]}
                assert {"crew", "agent"} <= kinds

        asyncio.run(main())

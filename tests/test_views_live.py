"""LiveViewExporter: incremental publishing of new commits; failures never reach the caller."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest

from crewckpt.history.store import Store
from crewckpt.views.exporter import LiveViewExporter
from crewckpt.views.layout import make_checkpoint_id
from crewckpt.views.reader import open_source


def doc(n: int, parent: str | None) -> dict[str, object]:
    return {"crewai_version": "1.15.30", "parent_id": parent, "branch": "main",
            "entities": [{"entity_type": "crew", "name": "c", "tasks": [{"output": None}] * n,
                          "checkpoint": {"location": ".ckpt", "on_events": ["*"],
                                         "provider": {"provider_type": "crewckpt"},
                                         "max_checkpoints": None, "restore_from": None}}],
            "event_record": {"nodes": {str(i): {"type": "e"} for i in range(n)}}}


@pytest.mark.parametrize("fmt", ["json", "sqlite"])
def test_publishes_each_new_commit_once(tmp_path: Path, fmt: str) -> None:
    store = Store.init(tmp_path / ".ckpt")
    dest = tmp_path / ("view.db" if fmt == "sqlite" else "view")
    live = LiveViewExporter(store, dest, fmt)
    ids: list[str] = []
    for n in range(1, 6):
        ids.append(store.commit(doc(n, ids[-1] if ids else None), time_ns=1_790_000_000_000_000_000 + n))
        live.publish(ids[-1])
    live.publish(ids[0])  # already published: not written again
    assert live.flush(10)
    store.commit(doc(9, ids[-1]), branch="exp")
    live.publish(store.resolve("exp"))
    assert live.close(10)
    assert (live.published, live.errors, live.dropped) == (6, 0, 0)
    with open_source(dest) as src:
        records = {r.checkpoint_id: r for r in src.records}
        names = [make_checkpoint_id(store.info(c).time_ns, c) for c in ids]
        assert set(names) <= records.keys() and records[names[3]].parent_id == names[2]
        assert {r.branch for r in records.values()} == {"main", "exp"}
        value = src.load(records[names[0]]).value
    # the view is CrewAI's own: its config names the view, not crewckpt's provider
    assert value["entities"][0]["checkpoint"]["provider"] == {"provider_type": fmt}
    assert value["entities"][0]["checkpoint"]["location"] == str(dest)
    if fmt == "sqlite":
        assert sqlite3.connect(dest).execute("SELECT count(*) FROM checkpoints").fetchone() == (6,)
    store.close()


def test_failures_are_counted_and_logged_never_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = Store.init(tmp_path / ".ckpt")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    live = LiveViewExporter(tmp_path / ".ckpt", blocker / "view", "json")  # cannot mkdir under a file
    c1 = store.commit(doc(1, None))
    with caplog.at_level(logging.WARNING, logger="crewckpt.views"):
        live.publish(c1)
        live.publish("0" * 64)  # unknown commit
        assert live.close(10)
    assert live.errors == 2 and live.published == 0 and live.last_error
    assert any("live view" in r.getMessage() and "ckpt export" in r.getMessage() for r in caplog.records)
    live.publish(c1)  # after close: still never raises
    with pytest.raises(ValueError, match="unknown view format"):
        LiveViewExporter(store, tmp_path / "x", "yaml")
    json.dumps(live.last_error)
    store.close()

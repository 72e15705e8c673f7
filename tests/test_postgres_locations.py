"""postgresql:// wherever a location is accepted (Store.init/open, CKPT_STORE, ckpt --store, CheckpointConfig),
and a CrewAI run resumed from another process through the shared store; an unreachable server."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import orjson
import pytest
from cli_helpers import ckpt, ok
from crewai_worker import run_worker

pytest.importorskip("psycopg")

from crewckpt import Store  # noqa: E402
from crewckpt.errors import CkptError  # noqa: E402
from crewckpt.testing import crewai_offline  # noqa: E402,F401  (pytest fixture)

pytestmark = pytest.mark.postgres


def test_store_init_open_cli_and_env_take_a_postgresql_location(pg_url: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ok(ckpt(None, "init", pg_url))
    assert "already" in ckpt(None, "init", pg_url).stderr
    with Store.open(pg_url) as s:
        first = s.commit({"step": 1}, branch="main")
        s.commit({"step": 2}, branch="main")
    out = ok(ckpt(pg_url, "log", "--oneline")).stdout
    assert first[:7] in out and out.count("\n") == 2
    monkeypatch.setenv("CKPT_STORE", pg_url.replace("postgresql://", "postgres://"))
    assert ok(ckpt(None, "show", "main~1")).stdout.strip().startswith("{")
    stats = ok(ckpt(None, "stats", "--json")).stdout
    assert '"file_bytes"' in stats
    assert list(tmp_path.iterdir()) == []  # no local folder named after the URL


def test_ckpt_commands_work_on_a_postgresql_store(pg_url: str) -> None:
    ok(ckpt(None, "init", pg_url))
    with Store.open(pg_url) as s:
        for i in range(4):
            s.commit({"step": i, "notes": ["n"] * i}, branch="main")
        s.commit({"step": 9}, branch="side", parents=["main~2"])
    for args in (("log", "--graph", "--all", "--oneline"), ("diff", "main~1", "main"), ("show", "main~1"),
                 ("branch",), ("branch", "copy", "main~1"), ("reflog",), ("prune", "--keep", "2", "--branch", "main"),
                 ("gc",), ("fsck", "--full"), ("stats",)):
        r = ckpt(pg_url, *args)
        assert r.exit_code == 0, (args, r.stdout, r.stderr)
    with Store.open(pg_url) as s:
        assert set(s.branches()) == {"main", "side", "copy"} and len(list(s.log("main"))) >= 2
        assert s.fsck(full=True).ok


def _closed_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused at once
    return s, s.getsockname()[1]


def test_opening_an_unreachable_store_is_one_line_naming_the_host() -> None:
    sock, port = _closed_port()
    with sock, pytest.raises(CkptError) as e:
        Store.open(f"postgresql://u@127.0.0.1:{port}/db?schema=x")
    assert f"127.0.0.1:{port}" in str(e.value) and "\n" not in str(e.value)
    r = ckpt(f"postgresql://u@127.0.0.1:{port}/db", "log")
    assert r.exit_code != 0 and f"127.0.0.1:{port}" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.crewai
def test_a_crewai_run_is_resumed_by_another_process_through_the_shared_store(crewai_offline: Path,  # noqa: F811
                                                                            pg_url: str) -> None:
    done = run_worker(crewai_offline / "worker-a", "run", pg_url)
    assert done.returncode == 0, done.stderr[-2000:]
    with Store.open(pg_url) as s:
        assert len(list(s.log("main"))) == 3
        before = {c.id for c in s.list()}
    done = run_worker(crewai_offline / "worker-b", "resume", pg_url, "main~1")
    assert done.returncode == 0, done.stderr[-2000:]
    with Store.open(pg_url) as s:
        new = [c for c in s.list() if c.id not in before]
        assert new and all(c.trigger == "task_completed" for c in new)
        resumed = new[-1]
        assert s.info("main~1").id in {c.id for c in s.log(resumed.id)}  # continues what worker A wrote
    for w in ("worker-a", "worker-b"):
        assert sorted(p.name for p in (crewai_offline / w).iterdir()) == ["crew_script.py"]


@pytest.mark.crewai
def test_a_best_effort_run_into_an_unreachable_server_finishes_and_reports_its_lost_checkpoints(
        crewai_offline: Path, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    import logging

    from crewckpt.crewai import CheckpointConfig, writer
    from crewckpt.testing import research_crew

    sock, port = _closed_port()
    with sock:
        url = f"postgresql://u@127.0.0.1:{port}/db?schema=x"
        result = research_crew(3, checkpoint=CheckpointConfig(location=url, on_events=["task_completed"])).kickoff(
            inputs={"topic": "otters"})
    assert result is not None  # the run went on
    mine = {loc: t for loc, t in writer.checkpoint_failures().items() if f":{port}/" in loc}
    (loc, (written, failed, last)), = mine.items()
    assert (written, failed) == (0, 3) and f"127.0.0.1:{port}" in last and "\n" not in last
    with caplog.at_level(logging.WARNING, logger="crewckpt.crewai"):
        writer.report_failures()
    writer._tally.pop(loc)  # this session's exit report is not about this test
    summary = [m for m in (r.getMessage() for r in caplog.records)
             if "could not be written" in m and loc in m]  # the tally also holds other tests' stores
    assert summary == [f"crewckpt: 3 of 3 checkpoints could not be written to {loc}; last error: {last}"]
    assert list(crewai_offline.glob("postgres*")) == []  # no local folder named after the URL


@pytest.mark.crewai
def test_a_crewai_checkpoint_costs_few_round_trips_whatever_the_number_of_branches(
        crewai_offline: Path, pg_url: str) -> None:  # noqa: F811
    """Placing a checkpoint reads its parent's row and its branch's tip (one ref, not every branch of a
    fleet's store), the commit resolves the parent: 6 round trips with the checkpoint's own 3 (the first
    of them prefetches what the previous checkpoint's transaction read)."""
    from crewai.events.event_bus import crewai_event_bus

    from crewckpt.crewai import CheckpointConfig, hooks, writer
    from crewckpt.testing import research_crew

    with Store.open(pg_url, create=True) as s:
        for k in range(30):  # other workers' branches
            s.commit({"k": k}, branch=f"other-{k}")
    store = writer.open_store(pg_url)
    b = store.backend
    costs: list[int] = []
    real = hooks.write_checkpoint

    def counted(*a: Any, **k: Any) -> Any:
        before = b.round_trips  # type: ignore[attr-defined]
        try:
            return real(*a, **k)
        finally:
            costs.append(b.round_trips - before)  # type: ignore[attr-defined]

    hooks.write_checkpoint = counted
    try:
        research_crew(1, checkpoint=CheckpointConfig(location=pg_url, on_events=["*"])).kickoff(
            inputs={"topic": "otters"})
        crewai_event_bus.flush()
    finally:
        hooks.write_checkpoint = real
    assert len(costs) >= 5
    assert max(costs[1:]) <= 6, costs  # the first one is a root: fewer


def test_import_into_and_export_from_a_postgresql_store_give_crewai_files_back_byte_for_byte(
        pg_url: str, fixtures_copy: Path, tmp_path: Path) -> None:
    src = fixtures_copy / "crew_json_star"
    r = ok(ckpt(pg_url, "import", str(src)))  # no store yet: the import creates it
    assert "imported" in (r.stdout + r.stderr).lower()
    ok(ckpt(pg_url, "import", str(src)))  # idempotent
    dest = tmp_path / "view"
    ok(ckpt(pg_url, "export", "--to", str(dest)))
    files = sorted(f.relative_to(src) for f in src.rglob("*.json"))
    assert files and all((dest / f).read_bytes() == (src / f).read_bytes() for f in files)


def test_gc_right_after_prune_on_postgresql_names_the_grace_that_kept_the_objects(pg_url: str) -> None:
    with Store.init(pg_url) as store:
        for i in range(4):
            store.commit({"step": i, "blob": "x" * 1000 * (i + 1)}, branch="main")
    ok(ckpt(pg_url, "prune", "--keep", "1", "--branch", "main"))
    out = ok(ckpt(pg_url, "gc")).stdout
    assert out.startswith("gc: deleted 0 unreachable object(s)") and out.count("\n") == 1
    assert "unreachable object(s) kept: younger than the 60 s grace (shared store); run gc again after " in out
    record = orjson.loads(ok(ckpt(pg_url, "gc", "--dry-run", "--json")).stdout)
    assert record["kept_young"] >= 3 and record["grace_shared"] is True and record["kept_until"].endswith("Z")

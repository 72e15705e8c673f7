"""The test suite's own PostgreSQL server (tests/pg_server.py, the ``pg_server`` fixture in conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.postgres


def test_session_server_accepts_connections_on_loopback_and_never_runs_as_root(pg_server: Any) -> None:
    with psycopg.connect(pg_server.url, autocommit=True) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)
        addr = c.execute("SELECT inet_server_addr()::text").fetchone()[0]
        assert addr.split("/")[0] in ("127.0.0.1", "::1")
        if getattr(pg_server, "proc", None) is not None:  # ours, not a $CKPT_TEST_PG_URL server
            assert os.stat(f"/proc/{pg_server.proc.pid}").st_uid != 0


def test_pg_url_gives_each_test_its_own_schema(pg_url: str, pg_server: Any) -> None:
    schema = pg_url.rsplit("schema=", 1)[1]
    assert schema and schema.isidentifier()
    assert pg_url.startswith(pg_server.url + "?")


def test_a_second_server_restarts_keeps_its_data_and_stop_removes_its_folder(pg_server: Any) -> None:
    pgs = pytest.importorskip("pg_server")
    if getattr(pg_server, "proc", None) is None:
        pytest.skip("an external server ($CKPT_TEST_PG_URL) is in use")
    srv = pgs.PgServer.start(pg_server.bindir)
    try:
        assert srv.port != pg_server.port
        with psycopg.connect(srv.url, autocommit=True) as c:
            c.execute("CREATE TABLE kept(x int)")
            c.execute("INSERT INTO kept VALUES (7)")
        srv.restart()  # immediate shutdown = a crash; committed rows survive it
        with psycopg.connect(srv.url, autocommit=True) as c:
            assert c.execute("SELECT x FROM kept").fetchall() == [(7,)]
    finally:
        srv.stop()
    assert not Path(srv.root).exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(srv.url, connect_timeout=2)


def test_find_bindir_honours_the_override_and_rejects_a_folder_without_binaries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pgs = pytest.importorskip("pg_server")
    real = pgs.find_bindir()
    if real is None:
        pytest.skip("no server binaries here")
    monkeypatch.setenv("CKPT_PG_BINDIR", str(real))
    assert pgs.find_bindir() == real
    monkeypatch.setenv("CKPT_PG_BINDIR", str(tmp_path))  # empty: not taken, the search goes on
    assert pgs.find_bindir() == real

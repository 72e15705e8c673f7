"""Issue 12 item 7 on import: ``ckpt import`` never stores a CrewAI file's or row's secrets in clear.

The inputs are fixture copies whose LLM objects are made OpenAI LLMs holding ``"api_key": "<marker>"`` (as
CrewAI dumps them when ``OPENAI_API_KEY`` was set at the run) and whose first task output echoes a second
marker, the value of ``MY_SERVICE_TOKEN`` in the importing process. After ``ckpt import`` neither marker is
in any byte of the store folder (``store.db``, ``-wal``, ``-shm``) or any decoded checkpoint, the report
counts what was redacted, a second import changes nothing, and restoring rebuilds the key from the
environment as CrewAI does.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from crewai_fixtures import FIXTURES
from test_secrets import store_bytes

from crewckpt import Store
from crewckpt.cli.main import cli
from crewckpt.testing import crewai_offline  # noqa: F401
from crewckpt.views.jsonb import jsonb_to_value
from crewckpt.views.redaction import REDACTED, Redactor

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]

TOKEN_ENV = "MY_SERVICE_TOKEN"


def plant(doc: dict[str, Any], key: str, token: str) -> int:
    """Make every LLM object of ``doc`` an OpenAI LLM holding ``key``; echo ``token`` into the first task
    output found. Returns the number of LLM objects changed."""
    n, echoed, stack = 0, False, [doc]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if "llm_type" in v:
                v.update(llm_type="openai", model="gpt-4o-mini", api_key=key, stream=False)
                n += 1
            if not echoed and isinstance(v.get("raw"), str) and "agent" in v:
                v["raw"] += f" (sent with {token})"
                echoed = True
            stack.extend(c for c in v.values() if isinstance(c, (dict, list)))
        elif isinstance(v, list):
            stack.extend(c for c in v if isinstance(c, (dict, list)))
    return n


def json_source(tmp_path: Path, key: str, token: str) -> Path:
    """A CrewAI JSON location (``crew_json_star``, 26 checkpoints) with planted secrets."""
    src = tmp_path / "json_src"
    shutil.copytree(FIXTURES / "crew_json_star", src)
    for f in sorted((src / "main").glob("*.json")):
        doc = json.loads(f.read_text())
        if plant(doc, key, token):
            f.write_text(json.dumps(doc))  # CrewAI's own rendering
    return src


def sqlite_source(tmp_path: Path, key: str, token: str) -> Path:
    """A copy of CrewAI's SqliteProvider db (JSONB rows) with planted secrets (rows rewritten as JSON text)."""
    db = tmp_path / "src.db"
    shutil.copy(FIXTURES / "crew_sqlite_star" / "cp.db", db)
    conn = sqlite3.connect(db)
    with conn:
        for rowid, blob in conn.execute("SELECT rowid, data FROM checkpoints").fetchall():
            doc = jsonb_to_value(blob) if isinstance(blob, bytes) else json.loads(blob)
            if plant(doc, key, token):
                conn.execute("UPDATE checkpoints SET data = ? WHERE rowid = ?", (json.dumps(doc), rowid))
    conn.close()
    return db


def ckpt_import(store: Path, src: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--store", str(store), "import", str(src), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout  # warnings (orphans of the fixture) are on stderr


@pytest.fixture
def markers(monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    key, token = f"sk-test-{uuid.uuid4().hex}", f"tok-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-at-import-0123456789")  # not the stored key: names redact it
    monkeypatch.setenv(TOKEN_ENV, token)
    return key, token


@pytest.mark.parametrize("kind", ["json", "sqlite"])
def test_imported_secrets_are_in_no_store_byte_and_restore_rebuilds_the_key(
        kind: str, tmp_path: Path, markers: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    key, token = markers
    src = (json_source if kind == "json" else sqlite_source)(tmp_path, key, token)
    loc = tmp_path / "store"
    out = ckpt_import(loc, src)
    store = Store.open(loc)
    commits = store.list()
    assert len(commits) >= 20
    assert f"secret value(s) redacted in {len(commits)} checkpoint(s)" in out, out
    echoed = 0
    for c in commits:
        doc = store.read(c.id)
        text = orjson.dumps(doc).decode()
        assert key not in text and token not in text
        assert doc["entities"][0]["agents"][0]["llm"]["api_key"] == REDACTED
        echoed += f"[redacted:{TOKEN_ENV}]" in text
    assert echoed >= sum(c.summary["tasks_done"] > 0 for c in commits) > 10  # the earliest have no task output
    files = store_bytes(loc)  # opened again: store.db, -wal and -shm are there
    assert {"store.db", "store.db-wal", "store.db-shm"} <= set(files)
    for name, raw in files.items():
        assert key.encode() not in raw and token.encode() not in raw, name
    # re-importing is still idempotent: same ids, nothing new, nothing redacted again
    again = orjson.loads(ckpt_import(loc, src, "--json"))
    assert again["imported"] == 0 and again["already_present"] == len(commits)
    assert again["redacted"] == {"values": 0, "checkpoints": 0}
    other = tmp_path / "other"
    report = orjson.loads(ckpt_import(other, src, "--json"))
    assert report["redacted"]["checkpoints"] == len(commits) and report["redacted"]["values"] > len(commits)
    assert {c.id for c in Store.open(other).list()} == {c.id for c in commits}
    # restore: CrewAI builds the key from the environment, as when the LLM was made
    from crewckpt.crewai import restore

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-at-resume-0123456789")
    last = max(commits, key=lambda c: (c.summary["tasks_done"], c.time_ns))
    crew = restore(last.id, store=loc)
    assert [a.llm.api_key for a in crew.agents] == ["sk-test-at-resume-0123456789"] * len(crew.agents)
    assert any(t.output is not None for t in crew.tasks)


def test_marker_is_visible_without_redaction(tmp_path: Path, markers: tuple[str, str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: the byte scan above sees a key an imported checkpoint holds in clear."""
    key, token = markers
    monkeypatch.setattr(Redactor, "apply", lambda self, value, text=None: value)
    src = json_source(tmp_path, key, token)
    ckpt_import(tmp_path / "store", src)
    raw = store_bytes(tmp_path / "store").values()
    assert any(key.encode() in r for r in raw) and any(token.encode() in r for r in raw)


def test_redaction_module_does_not_import_crewai() -> None:
    code = ("import sys, crewckpt.views.redaction, crewckpt.views.importer\n"
            "print(sorted(m for m in sys.modules if m == 'crewai' or m.startswith('crewai.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    from crewckpt.crewai import secrets
    from crewckpt.views import redaction

    assert secrets.Redactor is redaction.Redactor and secrets.prepare_restore is redaction.prepare_restore


def test_redactor_counts_and_is_deterministic() -> None:
    r = Redactor({"MY_SERVICE_TOKEN": "tok-0123456789"})
    doc = {"llm": {"api_key": "sk-1", "max_tokens": 5, "token": ""}, "out": ["x tok-0123456789 y", "z"],
           "headers": {"Authorization": REDACTED}}
    first = r.apply(json.loads(json.dumps(doc)))
    assert r.redacted == 2
    assert first == {"llm": {"api_key": REDACTED, "max_tokens": 5, "token": ""},
                     "out": ["x [redacted:MY_SERVICE_TOKEN] y", "z"], "headers": {"Authorization": REDACTED}}
    assert r.apply(json.loads(json.dumps(first))) == first and r.redacted == 2  # nothing more the 2nd time
    assert Redactor({"MY_SERVICE_TOKEN": "tok-0123456789"}).apply(json.loads(json.dumps(doc))) == first

"""Issue 12 item 7: secrets are not stored in clear, and new store files and folders are private.

CrewAI copies ``OPENAI_API_KEY`` into ``OpenAICompletion.api_key`` and dumps it with the state. The crew below
has one agent on ``crewai.LLM(model="gpt-4o-mini")`` (its calls answered by a patched ``call``; sockets are
refused, so no request can leave) and one on ScriptedLLM; the marker must be in no decoded checkpoint and in
no byte of any file in the store folder (``store.db``, ``-wal``, ``-shm``), and restoring rebuilds the key
from the environment as CrewAI does.
"""

from __future__ import annotations

import os
import socket
import stat
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from crewai import LLM, Agent, Crew, Task

from crewckpt import Store
from crewckpt.crewai import CheckpointConfig, CrewckptProvider, restore
from crewckpt.crewai.secrets import REDACTED, Redactor, is_secret_key
from crewckpt.testing import ScriptedLLM, crewai_offline  # noqa: F401

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every outgoing connection attempt is recorded and refused."""
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


def gpt_crew(marker: str, monkeypatch: pytest.MonkeyPatch, location: Path) -> tuple[Crew, list[str]]:
    from crewai.llms.providers.openai.completion import OpenAICompletion

    calls: list[str] = []

    def fake_call(self: Any, messages: Any, *args: Any, **kwargs: Any) -> str:
        calls.append(self.api_key)  # the key the real call would send
        return f"Thought: done\nFinal Answer: the key I was given is {self.api_key}"

    monkeypatch.setattr(OpenAICompletion, "call", fake_call)
    gpt = LLM(model="gpt-4o-mini")
    assert isinstance(gpt, OpenAICompletion) and gpt.api_key == marker
    writer = Agent(role="Writer", goal="g", backstory="b", llm=gpt)
    checker = Agent(role="Checker", goal="g", backstory="b", llm=ScriptedLLM())
    tasks = [Task(name="t1", description="Write.", expected_output="text", agent=writer),
             Task(name="t2", description="Check.", expected_output="text", agent=checker)]
    crew = Crew(agents=[writer, checker], tasks=tasks,
                checkpoint=CheckpointConfig(location=str(location), on_events=["*"]))
    return crew, calls


def store_bytes(folder: Path) -> dict[str, bytes]:
    """Every file of the store folder, raw, plus every stored object's decompressed body (frames are zstd:
    the raw bytes alone would hide a key)."""
    out = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    store = Store.open(folder)
    for meta in store.backend.iter_objects():
        out[f"object {meta.oid.hex()[:12]}"] = store.objects.get(meta.oid)[1]
    store.close()
    return out


def test_provider_key_is_in_no_checkpoint_and_no_store_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             no_network: list[Any]) -> None:
    marker = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", marker)
    loc = tmp_path / ".ckpt"
    crew, calls = gpt_crew(marker, monkeypatch, loc)
    crew.kickoff()
    assert calls == [marker] and no_network == []
    store = Store.open(loc)
    commits = store.list()
    assert len(commits) >= 10
    for c in commits:
        text = orjson.dumps(store.read(c.id)).decode()
        assert marker not in text
    doc = store.read("HEAD")
    llm = doc["entities"][0]["agents"][0]["llm"]
    assert llm["llm_type"] == "openai" and llm["api_key"] == REDACTED
    assert "[redacted:OPENAI_API_KEY]" in doc["entities"][0]["tasks"][0]["output"]["raw"]
    files = store_bytes(loc)  # the writer's connection is still open: the WAL is there too
    assert {"store.db", "store.db-wal"} <= set(files) and len(files) > 10
    for name, raw in files.items():
        assert marker.encode() not in raw, name
    # restore: CrewAI builds the key from the environment, as when the LLM was made
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-at-resume-0123456789")
    restored = restore(commits[3].id, store=loc)
    assert restored.agents[0].llm.api_key == "sk-test-at-resume-0123456789"


def test_marker_is_visible_without_redaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             no_network: list[Any]) -> None:
    """Control: the byte scan above can see a key a checkpoint holds in clear."""
    marker = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", marker)
    monkeypatch.setattr(Redactor, "apply", lambda self, value, text=None: value)
    loc = tmp_path / ".ckpt"
    crew, _ = gpt_crew(marker, monkeypatch, loc)
    crew.kickoff()
    assert any(marker.encode() in raw for raw in store_bytes(loc).values())


def test_headers_tokens_and_passwords_are_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   no_network: list[Any]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-9876543210fedcba")
    gpt = LLM(model="gpt-4o-mini", default_headers={"Authorization": "Bearer hdr-secret-1",
                                                     "X-Api-Key": "hdr-secret-2", "X-Trace": "keep-me"})
    agent = Agent(role="Writer", goal="g", backstory="b", llm=gpt)
    task = Task(name="t1", description="Write about {topic}.", expected_output="text", agent=agent)
    crew = Crew(agents=[agent], tasks=[task])
    crew._inputs = {"topic": "x", "password": "hunter2-long", "note": "uses tok-9876543210fedcba"}
    from crewai.state.runtime import RuntimeState

    from crewckpt.crewai import checkpoint

    state = RuntimeState(root=[crew])
    cid = checkpoint(state, tmp_path / ".ckpt")
    assert cid is not None
    doc = Store.open(tmp_path / ".ckpt").read(cid)
    headers = doc["entities"][0]["agents"][0]["llm"]["default_headers"]
    assert headers == {"Authorization": REDACTED, "X-Api-Key": REDACTED, "X-Trace": "keep-me"}
    inputs = doc["entities"][0]["checkpoint_inputs"]
    assert inputs["password"] == REDACTED
    assert inputs["note"] == "uses [redacted:MY_SERVICE_TOKEN]"
    text = orjson.dumps(doc).decode()
    for secret in ("hdr-secret-1", "hdr-secret-2", "hunter2-long", "tok-9876543210fedcba", "sk-test-0123456789"):
        assert secret not in text


def test_state_serialized_by_crewai_is_redacted_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``state.checkpoint(...)`` hands CrewckptProvider CrewAI's own JSON dump."""
    marker = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", marker)
    data = orjson.dumps({"entities": [{"entity_type": "agent", "llm": {"llm_type": "openai", "api_key": marker}}],
                         "event_record": {"nodes": {}}, "parent_id": None, "branch": "main"}).decode()
    location = CrewckptProvider().checkpoint(data, str(tmp_path / ".ckpt"))
    doc = Store.open(tmp_path / ".ckpt").read(location.rsplit("#", 1)[1])
    assert doc["entities"][0]["llm"]["api_key"] == REDACTED


def test_secret_key_names() -> None:
    for key in ("api_key", "API-KEY", "x-api-key", "apikey", "access_token", "refresh_token", "token",
                "password", "client_secret", "aws_secret_access_key", "aws_session_token", "Authorization",
                "Proxy-Authorization", "private_key", "credentials", "Cookie"):
        assert is_secret_key(key), key
    for key in ("max_tokens", "total_tokens", "prompt_tokens", "agent_key", "key", "tokenizer", "model",
                "secretary", "description", "checkpoint_kickoff_event_id"):
        assert not is_secret_key(key), key


# -- file permissions -------------------------------------------------------------------------------------

def modes(folder: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(folder.stat().st_mode)}
    out.update({p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()})
    return out


@pytest.fixture
def umask_022() -> Any:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_new_store_folder_and_files_are_private(tmp_path: Path, umask_022: None) -> None:
    store = Store.init(tmp_path / "a" / ".ckpt")
    for i in range(3):
        store.commit({"n": i})
    with store.backend.gc_lock() as got:  # type: ignore[attr-defined]
        assert got
    found = modes(tmp_path / "a" / ".ckpt")
    assert {"store.db", "store.db-wal", "store.db-shm", "gc.lock"} <= set(found)
    assert found == {".": 0o700, **{n: 0o600 for n in found if n != "."}}
    store.close()


def test_shared_store_honours_the_umask(tmp_path: Path, umask_022: None) -> None:
    from click.testing import CliRunner

    from crewckpt.cli.main import cli

    store = Store.init(tmp_path / "s", private=False)
    store.commit({"n": 1})
    found = modes(tmp_path / "s")
    assert found["."] == 0o755 and found["store.db"] == 0o644 and found["store.db-wal"] == 0o644
    store.close()
    result = CliRunner().invoke(cli, ["init", "--shared", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    assert modes(tmp_path / "c")["store.db"] == 0o644
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "p")])
    assert result.exit_code == 0 and modes(tmp_path / "p") == {".": 0o700, "store.db": 0o600}


def test_store_made_by_a_crewai_run_is_private(tmp_path: Path, umask_022: None) -> None:
    agent = Agent(role="Writer", goal="g", backstory="b", llm=ScriptedLLM())
    task = Task(name="t1", description="Write.", expected_output="text", agent=agent)
    Crew(agents=[agent], tasks=[task], checkpoint=CheckpointConfig(location=str(tmp_path / "run"))).kickoff()
    found = modes(tmp_path / "run")
    assert found["."] == 0o700 and all(m == 0o600 for n, m in found.items() if n != ".")

"""A checkpoint cannot point an LLM at an endpoint of its choosing: restoring would send the user's API key
(read from the environment; stored keys are redacted) and prompts there. Untrusted endpoints are refused in
one line unless the user trusts them (loopback, a URL the environment configures, CREWCKPT_LLM_ENDPOINTS,
or CREWAI_DESERIALIZE_CALLBACKS=1 for the whole checkpoint)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_untrusted_code import crew_doc, plant

from crewckpt.crewai import restore
from crewckpt.crewai.gate import ENDPOINT_VAR, ENV_VAR, UntrustedEndpoint, trusted_endpoint
from crewckpt.testing import crewai_offline  # noqa: F401

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]

EVIL = "https://collector.attacker.example/v1"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (ENDPOINT_VAR, ENV_VAR, "OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(var, raising=False)


def set_llm(doc: dict[str, Any], field: str, url: str) -> str:
    llm = doc["entities"][0]["agents"][0]["llm"]
    assert isinstance(llm, dict) and "llm_type" in llm, llm
    llm[field] = url
    return f"entities[0].agents[0].llm.{field}"


@pytest.mark.parametrize("field", ["base_url", "api_base"])
def test_untrusted_endpoint_is_refused_in_one_line_and_nothing_is_written(tmp_path: Path, field: str) -> None:
    store, doc = crew_doc(tmp_path)
    path = set_llm(doc, field, EVIL)
    cid = plant(store, doc)
    before = {c.id for c in store.list()}
    with pytest.raises(UntrustedEndpoint) as info:
        restore(cid, store=store.path)
    message = str(info.value)
    assert "\n" not in message and path in message and EVIL in message and ENDPOINT_VAR in message, message
    assert info.value.path == path and info.value.value == EVIL
    assert {c.id for c in store.list()} == before


def test_the_same_llm_on_a_task_and_in_events_is_checked(tmp_path: Path) -> None:
    """The walk covers every LLM the document holds, not only the crew's first agent."""
    store, doc = crew_doc(tmp_path)
    doc["entities"][0]["tasks"][0]["agent"]["llm"]["base_url"] = EVIL
    with pytest.raises(UntrustedEndpoint, match=r"tasks\[0\]\.agent\.llm\.base_url"):
        restore(plant(store, doc), store=store.path)


@pytest.mark.parametrize("url", ["http://localhost:11434", "http://127.0.0.1:1234/v1", "http://[::1]:8080", ""])
def test_loopback_and_empty_endpoints_restore(tmp_path: Path, url: str) -> None:
    store, doc = crew_doc(tmp_path)
    set_llm(doc, "base_url", url)
    crew = restore(plant(store, doc), store=store.path)
    assert (crew.agents[0].llm.base_url or "") == url


def test_endpoint_the_environment_configures_restores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, doc = crew_doc(tmp_path)
    set_llm(doc, "base_url", "https://gateway.example.com/v1/")
    cid = plant(store, doc)
    monkeypatch.setenv("OPENAI_BASE_URL", "https://Gateway.example.com/v1")  # case and trailing / ignored
    assert restore(cid, store=store.path).agents[0].llm.base_url == "https://gateway.example.com/v1/"


@pytest.mark.parametrize("listed", [f"https://other.example,{EVIL}/", "*"])
def test_listed_endpoint_restores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listed: str) -> None:
    store, doc = crew_doc(tmp_path)
    set_llm(doc, "base_url", EVIL)
    cid = plant(store, doc)
    monkeypatch.setenv(ENDPOINT_VAR, listed)
    assert restore(cid, store=store.path).agents[0].llm.base_url == EVIL


def test_trusting_the_checkpoint_restores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, doc = crew_doc(tmp_path)
    set_llm(doc, "base_url", EVIL)
    cid = plant(store, doc)
    monkeypatch.setenv(ENV_VAR, "1")
    assert restore(cid, store=store.path).agents[0].llm.base_url == EVIL


@pytest.mark.parametrize("url,ok", [
    (None, True), ("  ", True), ("localhost:11434", True), ("http://127.9.9.9", True),
    ("http://localhost.attacker.example", False), ("http://127.0.0.1.attacker.example", False),
    ("http://user@127.0.0.1@evil.example", False), ("http://[::1", False), (42, False),
    ("https://evil.example\n", False), (["http://x"], False),
])
def test_trusted_endpoint_rules(url: Any, ok: bool) -> None:
    assert trusted_endpoint(url, {}) is ok


def drop_tools(value: Any) -> None:
    """Empty every ``tools`` list: the EchoTool class is not registered in a fresh ``ckpt`` process."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if isinstance(v.get("tools"), list):
                v["tools"] = []
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def test_ckpt_resume_refuses_an_untrusted_endpoint_in_one_line(tmp_path: Path) -> None:
    store, doc = crew_doc(tmp_path)
    drop_tools(doc)
    set_llm(doc, "base_url", EVIL)
    cid = plant(store, doc)
    env = {k: v for k, v in os.environ.items() if k not in (ENDPOINT_VAR, ENV_VAR)}
    ckpt = Path(sys.executable).with_name("ckpt")
    proc = subprocess.run([str(ckpt), "--store", str(store.path), "resume", cid[:12]], check=False, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "llm.base_url" in lines[0] and ENDPOINT_VAR in lines[0], proc.stderr

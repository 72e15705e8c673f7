"""A checkpoint cannot choose where the resumed run writes, nor where an embedder sends the user's key:
``Task.output_file`` and ``Crew.output_log_file`` are written when the run goes on (CrewAI opens them with
"w"), and an embedder's endpoint receives the embedding key and the tasks' texts. Both are refused in one line
unless the path stays under the working folder (or the URL is trusted), or the user trusts the checkpoint
(CREWAI_DESERIALIZE_CALLBACKS=1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_untrusted_code import crew_doc, plant
from test_untrusted_endpoint import _clean_env  # noqa: F401  (autouse: no endpoint or trust variable set)

from crewckpt.crewai import restore
from crewckpt.crewai.gate import ENDPOINT_VAR, ENV_VAR, check, trusted_path
from crewckpt.errors import UntrustedEndpoint, UntrustedPath
from crewckpt.testing import crewai_offline  # noqa: F401

pytestmark = [pytest.mark.crewai, pytest.mark.usefixtures("crewai_offline")]

EVIL = "http://192.0.2.2:18080/v1"


@pytest.mark.parametrize(("where", "value"), [
    ("task", "/tmp/victim/settings.json"),
    ("task", "~/.bashrc"),
    ("task", "../../outside.txt"),
    ("task", "/home/u/.bashrc{pad}"),  # CrewAI keeps the leading / when the path holds a placeholder
    ("task", "out{pad}.md"),
    ("crew", "/tmp/victim/settings.json"),
    ("crew", "C:\\Users\\u\\notes.txt"),
], ids=["absolute", "home", "dotdot", "placeholder-absolute", "placeholder", "log-absolute", "drive"])
def test_an_output_file_the_checkpoint_aims_anywhere_is_refused(tmp_path: Path, where: str, value: str) -> None:
    # before: `ckpt resume` of such a checkpoint replaced the user's file with CrewAI's task log
    store, doc = crew_doc(tmp_path)
    crew = doc["entities"][0]
    if where == "task":
        crew["tasks"][0]["output_file"] = value
        crew["checkpoint_inputs"] = {**(crew.get("checkpoint_inputs") or {}), "pad": ""}
        path = "entities[0].tasks[0].output_file"
    else:
        crew["output_log_file"] = value
        path = "entities[0].output_log_file"
    cid = plant(store, doc)
    before = {c.id for c in store.list()}
    with pytest.raises(UntrustedPath) as info:
        restore(cid, store=store.path)
    message = str(info.value)
    assert "\n" not in message and path in message and ENV_VAR in message and "ckpt import" in message, message
    assert info.value.path == path and info.value.value == value
    assert {c.id for c in store.list()} == before


def test_a_relative_output_file_restores_and_trusting_the_checkpoint_lifts_the_rule(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, doc = crew_doc(tmp_path)
    doc["entities"][0]["tasks"][0]["output_file"] = "reports/summary.md"
    doc["entities"][0]["output_log_file"] = True  # CrewAI's default log name
    assert restore(plant(store, doc), store=store.path).tasks[0].output_file == "reports/summary.md"
    doc["entities"][0]["tasks"][0]["output_file"] = "/tmp/chosen/summary.md"
    cid = plant(store, doc)
    monkeypatch.setenv(ENV_VAR, "1")
    assert restore(cid, store=store.path).tasks[0].output_file.endswith("chosen/summary.md")


@pytest.mark.parametrize(("value", "ok"), [
    (None, True), ("", True), (True, True), (False, True), ("report.md", True), ("out/a/b.txt", True),
    ("a..b.md", True), ("/etc/passwd", False), ("~x", False), ("a/../../b", False), ("..", False),
    ("x{y}", False), ("x}", False), ("D:report.md", False), ("a\\..\\..\\b", False), ("a\x00b", False),
    (42, False), (["a"], False),
])
def test_trusted_path_rules(value: Any, ok: bool) -> None:
    assert trusted_path(value) is ok


def set_embedder(doc: dict[str, Any], config: dict[str, Any]) -> None:
    doc["entities"][0]["embedder"] = {"provider": "openai", "config": {"model_name": "text-embedding-3-small",
                                                                      **config}}


@pytest.mark.parametrize("key", ["api_base", "base_url", "url", "api_url", "endpoint", "host", "azure_endpoint"])
def test_an_embedder_endpoint_is_checked_like_an_llm_endpoint(tmp_path: Path, key: str) -> None:
    # before: only LLM base_url / api_base were checked; an embedder's api_base got the user's
    # OPENAI_API_KEY as a Bearer token on every memory write of the resumed run
    store, doc = crew_doc(tmp_path)
    set_embedder(doc, {key: EVIL})
    cid = plant(store, doc)
    with pytest.raises(UntrustedEndpoint) as info:
        restore(cid, store=store.path)
    message = str(info.value)
    path = f"entities[0].embedder.config.{key}"
    assert "\n" not in message and path in message and "points the embedder at" in message, message
    assert ENDPOINT_VAR in message and info.value.value == EVIL


def test_trusted_embedder_endpoints_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, doc = crew_doc(tmp_path)
    set_embedder(doc, {"api_base": "http://localhost:11434", "url": None})
    check(doc)  # loopback, and unset
    set_embedder(doc, {"api_base": EVIL})
    with pytest.raises(UntrustedEndpoint):
        check(doc)
    monkeypatch.setenv(ENDPOINT_VAR, EVIL)
    check(doc)

"""Hostile checkpoints (issue 8): a callback path stored in an imported (untrusted) CrewAI checkpoint is
never imported as code unless the user opts in with CrewAI's ``CREWAI_DESERIALIZE_CALLBACKS``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from reliability_harness import fixtures_root

from crewckpt.history.store import Store
from crewckpt.views.transfer import import_checkpoints

pytestmark = pytest.mark.crewai

SENTINEL: list[str] = []


def evil(*args: object, **kwargs: object) -> None:
    """Stands for any importable callable (``os.system``); records that it was reached."""
    SENTINEL.append("called")


@pytest.mark.parametrize("target", [f"{__name__}.evil", "os.system", "builtins.exec"])
def test_imported_callback_is_not_resolved_without_opt_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          target: str) -> None:
    from crewckpt.testing import OFFLINE_ENV
    for k, v in OFFLINE_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("CREWAI_DESERIALIZE_CALLBACKS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "src"
    shutil.copytree(fixtures_root() / "crew_default" / ".checkpoints", src)
    victim = max((src / "main").glob("*.json"))
    doc = json.loads(victim.read_text())
    doc["entities"][0]["tasks"][0]["callback"] = target
    victim.write_text(json.dumps(doc))
    store = Store.init(tmp_path / ".ckpt")
    rep = import_checkpoints(store, src)
    cid = dict(rep.imported)[victim.name.split("_p-")[0]]
    store.close()
    from crewckpt.crewai import restore
    SENTINEL.clear()
    with pytest.raises(ValueError, match="CREWAI_DESERIALIZE_CALLBACKS"):
        restore(cid, store=tmp_path / ".ckpt")
    assert SENTINEL == []

"""Shared helpers of the CLI tests: a store built from real CrewAI 1.15.30 checkpoints, and a runner."""

from __future__ import annotations

import glob
import json
from dataclasses import dataclass
from pathlib import Path

import orjson
from click.testing import CliRunner, Result
from crewai_fixtures import FIXTURES  # vendored real CrewAI 1.15.30 checkpoints (read-only)

from crewckpt.cli.main import cli
from crewckpt.history.store import Store
from crewckpt.views.document import CREWAI

MAIN_RUN = ["9e065638", "b6baebfb", "04befffc", "8465e992"]  # crew_restore_src/main, first run, in lineage
ALT_RUN = ["31cc0c7b", "cf0ef2d2"]  # crew_restore_src/alt, forked from b6baebfb


def fixture_doc(pattern: str) -> dict:
    """One fixture checkpoint (read-only source; callers get their own copy)."""
    paths = glob.glob(str(FIXTURES / pattern))
    assert len(paths) == 1, pattern
    return orjson.loads(Path(paths[0]).read_bytes())


@dataclass
class DemoStore:
    """A store with branch main (4 crew checkpoints) and branch alt forked at main's second commit, whose
    two checkpoints have kickoff input topic "sea otters" and an edited task4 output."""

    path: str
    main: list[str]  # commit ids, oldest first
    alt: list[str]

    @property
    def fork_point(self) -> str:
        return self.main[1]


def build_demo_store(path: Path) -> DemoStore:
    store = Store.init(path, profile=CREWAI)  # the CrewAI layer's store: CrewAI summaries
    main = []
    for cid in MAIN_RUN:
        doc = fixture_doc(f"crew_restore_src/main/*_{cid}_p-*.json")
        main.append(
            store.commit(doc, branch="main", trigger=doc.get("trigger"), alias=f"20261129T234525_{cid}")
        )
    store.create_branch("alt", main[1])
    alt = []
    for cid in ALT_RUN:
        doc = fixture_doc(f"crew_restore_src/alt/*_{cid}_p-*.json")
        doc["entities"][0]["checkpoint_inputs"]["topic"] = "sea otters"
        task4 = doc["entities"][0]["tasks"][3]
        if task4["output"] is not None:
            task4["output"]["raw"] = "Sea otters hold hands while sleeping.\nThey use rocks as tools."
        alt.append(store.commit(doc, branch="alt", trigger=doc.get("trigger")))
    store.close()
    return DemoStore(str(path), main, alt)


def ckpt(
    store: str | None, *args: str, env: dict[str, str] | None = None, input: str | None = None
) -> Result:
    """Run `ckpt [--store STORE] ARGS...` in-process (stdout and stderr kept apart)."""
    argv = (["--store", store] if store else []) + list(args)
    return CliRunner().invoke(cli, argv, env=env, input=input)


def ndjson(text: str) -> list[dict]:
    """Parse NDJSON output: one JSON value per non-empty line."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def ok(result: Result, code: int = 0) -> Result:
    """Assert the exit status (showing stdout and stderr when it differs); returns the result."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    return result

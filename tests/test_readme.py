"""The README's promises: CI runs its test command, and its Python example works."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _sh_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, re.DOTALL)


def test_ci_runs_the_readme_test_command_then_the_slow_tests() -> None:
    test_cmd = next(line for b in _sh_blocks() for line in b.splitlines() if "pytest" in line)
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_cmd in ci
    assert os.access(ROOT / ".ci" / "run", os.X_OK)
    # the default run leaves the `slow` tests out (pyproject addopts): CI runs them in a second step
    assert "addopts = \"-ra --durations=15 -m 'not slow'\"" in (ROOT / "pyproject.toml").read_text()
    assert ci.index("pytest -p no:cacheprovider -m slow") > ci.index(test_cmd)


def test_readme_has_exactly_two_setup_commands() -> None:
    setup = [line for b in _sh_blocks() for line in b.splitlines() if line.startswith("python3 -m venv")]
    assert len(setup) == 2 and any("scripts/demo.py" in s for s in setup) and any("pytest" in s for s in setup)


def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = next(b for b in re.findall(r"```python\n(.*?)```", README, re.DOTALL) if "Store.init" in b)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README example", "exec"), {})  # noqa: S102  (the README's own example)
    assert (tmp_path / ".ckpt" / "store.db").exists()


def test_readme_says_sqlite_path_is_the_store_folder(tmp_path: Path) -> None:
    """A new user read `sqlite:PATH` as a database file; `ckpt init sqlite:/tmp/x.db` makes a folder."""
    from crewckpt import Store

    text = " ".join(README.split())
    assert "PATH names the store's folder, not a database file: `sqlite:/tmp/x.db` is a folder `x.db/` holding " \
           "`store.db`" in text
    Store.init(f"sqlite:{tmp_path / 'x.db'}").close()
    assert (tmp_path / "x.db").is_dir() and (tmp_path / "x.db" / "store.db").is_file()


def test_readme_says_where_a_resumed_run_goes_and_that_python_keeps_head() -> None:
    text = " ".join(README.split())
    assert "**Where a resumed run's checkpoints go**" in text
    assert "`ckpt resume` prints the branch" in text and "a Python restore never moves HEAD" in text

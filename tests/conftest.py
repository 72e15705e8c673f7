"""Shared pytest fixtures: CrewAI fixture copies, stores."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from crewai_fixtures import FIXTURES  # noqa: F401  (re-exported for tests)


@pytest.fixture
def fixtures_copy(tmp_path: Path) -> Path:
    """A private, writable copy of the vendored CrewAI fixtures."""
    dst = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, dst)
    return dst

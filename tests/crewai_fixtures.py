"""Real CrewAI 1.15.30 checkpoints, vendored as tests/data/crewai-1.15.30.tar.zst (105 KB; 19 MB unpacked).

``FIXTURES`` is the unpacked folder (see its README.md). It is extracted once, next to the archive, so tests
and benchmarks run on a fresh machine without ../shared. Treat it as read-only: copy what a test changes.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from pathlib import Path

import zstandard

DATA = Path(__file__).resolve().parent / "data"
ARCHIVE = DATA / "crewai-1.15.30.tar.zst"
FIXTURES = DATA / "crewai-1.15.30"


def ensure() -> Path:
    """Unpack the archive if needed (atomically: extract to a temp folder, then rename); return FIXTURES."""
    if (FIXTURES / "README.md").exists():
        return FIXTURES
    raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(ARCHIVE.read_bytes())).read()
    tmp = Path(tempfile.mkdtemp(dir=DATA, prefix=".unpack-"))
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        try:
            tar.extractall(tmp, filter="data")
        except TypeError:  # Python without extraction filters (< 3.10.12 / 3.11.4); the archive is ours
            tar.extractall(tmp)
    try:
        os.rename(tmp / "crewai-1.15.30", FIXTURES)
    except OSError:  # another process won the race
        pass
    return FIXTURES


ensure()

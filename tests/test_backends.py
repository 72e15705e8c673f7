"""Backend-specific checks beyond the shipped contract suite (tests/test_backend_contract.py runs that one)."""

from __future__ import annotations

from pathlib import Path

from crewckpt.backends.sqlite import SqliteBackend


def test_sqlite_gc_lock_excludes_other_processes(tmp_path: Path) -> None:
    import subprocess
    import sys
    b = SqliteBackend.create(tmp_path)
    code = ("import sys; from crewckpt.backends.sqlite import SqliteBackend as S\n"
            "with S(sys.argv[1]).gc_lock() as got: print(got)")
    with b.gc_lock() as got:
        assert got
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
        assert out.stdout.strip() == "False", out.stderr
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert out.stdout.strip() == "True"

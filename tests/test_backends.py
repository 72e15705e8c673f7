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


def test_the_gc_lock_file_stays_the_owners_to_write_when_the_database_is_read_only_by_mode(tmp_path: Path) -> None:
    # before: a store.db of mode 0400 made filelock refuse the lock's mode with a raw ValueError (`ckpt gc`)
    import os
    import stat

    b = SqliteBackend.create(tmp_path)
    b.close()
    os.chmod(tmp_path / "store.db", 0o400)
    try:
        opened = SqliteBackend(tmp_path)
        if opened.read_only:  # not root: the mode binds, and gc says so in one line
            import pytest

            from crewckpt.errors import StoreWriteError
            with pytest.raises(StoreWriteError, match="read-only"), opened.lock("gc"):
                pass
            return
        with opened.lock("gc") as got:
            assert got
        assert stat.S_IMODE(os.stat(tmp_path / "gc.lock").st_mode) & 0o600 == 0o600
        assert stat.S_IMODE(os.stat(tmp_path / "gc.lock").st_mode) & 0o077 == 0  # as private as the database
    finally:
        os.chmod(tmp_path / "store.db", 0o600)

"""SqliteBackend.release() (a run's end closes the connection; the next call reopens) and the small-store
VACUUM after it, against what a user's folder may hold meanwhile: a store file replaced by another one, a
store.db that is a symlink into another folder, another connection (docs/backends.md, release)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from crewckpt import Store
from crewckpt.backends.sqlite import SqliteBackend
from crewckpt.errors import StoreNotFound

DOC = {"doc": {"x": "p" * 20_000, "y": {"z": "q" * 9_000}}}


def test_a_store_file_replaced_while_released_is_not_written_through_the_old_handle(tmp_path: Path) -> None:
    # before: the handle reopened whatever file was at the path, and its caches named objects of the old
    # store: the next commit landed in the new file linking to objects it never had (fsck quick: no problem)
    Store.init(tmp_path / "other").close()
    s = Store.init(tmp_path / "s")
    first = s.commit({**DOC, "n": 1}, branch="main")
    s.finish_writes()  # the connection is released
    os.replace(tmp_path / "s" / "store.db", tmp_path / "old.db")  # a backup restored over it
    os.replace(tmp_path / "other" / "store.db", tmp_path / "s" / "store.db")
    with pytest.raises(StoreNotFound, match=r"store\.db was replaced .*open the store again"):
        s.commit({**DOC, "n": 2}, branch="main")
    with pytest.raises(StoreNotFound, match="replaced"):
        s.read(first)
    s.close()
    fresh = Store.open(tmp_path / "s")
    assert fresh.list() == []  # the new file is unchanged
    fresh.close()
    os.replace(tmp_path / "old.db", tmp_path / "s" / "store.db")
    back = Store.open(tmp_path / "s")
    assert back.read(first)["n"] == 1 and back.fsck(full=True).ok
    back.close()


def _symlinked(tmp_path: Path) -> tuple[Store, Path]:
    s = Store.init(tmp_path / "s")
    s.close()
    real = tmp_path / "elsewhere" / "real.db"
    real.parent.mkdir()
    os.replace(tmp_path / "s" / "store.db", real)
    (tmp_path / "s" / "store.db").symlink_to(real)
    return Store.open(tmp_path / "s"), real


def test_a_symlinked_store_another_connection_has_open_is_not_vacuumed(tmp_path: Path,
                                                                       monkeypatch: Any) -> None:
    # before: release() looked for the -shm file beside the symlink, where SQLite never puts it (it opens the
    # resolved path), so it VACUUMed while another connection had the store open
    s, real = _symlinked(tmp_path)
    vacuums: list[int] = []
    orig = SqliteBackend._vacuum_alone
    monkeypatch.setattr(SqliteBackend, "_vacuum_alone", lambda self: (vacuums.append(1), orig(self))[1])
    with contextlib.closing(sqlite3.connect(real)) as other:
        other.execute("SELECT count(*) FROM meta").fetchall()
        cid = s.commit({**DOC, "n": 1}, branch="main")
        s.finish_writes()
        assert vacuums == [] and Path(f"{real}-shm").exists()
    s.commit({**DOC, "n": 2}, branch="main")  # alone now: the dense rewrite runs, next to the real file
    s.finish_writes()
    assert vacuums == [1]
    assert not Path(f"{real}-wal").exists() and not Path(f"{real}-shm").exists()
    assert s.read(cid)["n"] == 1 and s.fsck(full=True).ok
    s.close()

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
from crewckpt.errors import CorruptStore, StoreNotFound

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


def test_a_file_another_writer_is_still_growing_is_not_called_truncated(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # before: one look at size and header: a WAL checkpoint of another worker had written the new page
    # count and emptied its WAL but the file had not grown yet, so a publish failed with "database is
    # truncated (249856 of 256000 bytes); restore it from a backup" on a healthy store
    import crewckpt.backends.sqlite as sqlite_backend

    s = Store.init(tmp_path / "s")
    head = s.commit({**DOC, "n": 1}, branch="main")
    s.close()
    db = tmp_path / "s" / "store.db"
    whole = db.read_bytes()
    db.write_bytes(whole[: len(whole) - 4096])  # what a look in the middle of that checkpoint sees
    settles: list[int] = []

    def the_checkpoint_finishes() -> None:
        settles.append(1)
        if len(settles) == 3:
            db.write_bytes(whole)

    monkeypatch.setattr(sqlite_backend, "_settle", the_checkpoint_finishes)
    again = Store.open(tmp_path / "s")
    assert again.read(head)["n"] == 1 and len(settles) == 3
    again.close()
    # a file that stays short is truncated, after every re-read
    db.write_bytes(whole[: len(whole) - 4096])
    settles.clear()
    monkeypatch.setattr(sqlite_backend, "_settle", lambda: settles.append(1))
    with pytest.raises(CorruptStore, match=r"database is truncated \(\d+ of \d+ bytes\); restore it from a backup"):
        Store.open(tmp_path / "s")
    assert len(settles) == sqlite_backend._TRUNCATION_RECHECKS
    assert db.read_bytes() == whole[: len(whole) - 4096]  # nothing written to it

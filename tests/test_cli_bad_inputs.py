"""Defects a new user found by attacking the CLI (fresh-user trial): each must be a one-line error."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest
from cli_helpers import FIXTURES, DemoStore, build_demo_store, ckpt, ok

from crewckpt.history.store import Store


@pytest.fixture
def demo(tmp_path: Path) -> DemoStore:
    return build_demo_store(tmp_path / ".ckpt")


def one_line_error(result: object, code: int = 1) -> str:
    ok(result, code)  # type: ignore[arg-type]
    err = result.stderr.strip()  # type: ignore[attr-defined]
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_importing_something_that_is_not_a_checkpoint_fails(demo: DemoStore, tmp_path: Path) -> None:
    before = Store.open(demo.path).branches()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "ent.json").write_text('{"entities": 5}')
    (tmp_path / "text.txt").write_text("hello")
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "bad" / "ent.json", tmp_path / "text.txt", tmp_path / "empty"):
        result = ckpt(demo.path, "import", str(path))
        assert result.exit_code == 1 and "nothing imported" in result.stderr, result.stderr
    assert Store.open(demo.path).branches() == before  # no branch named after a folder, HEAD unmoved


@pytest.mark.parametrize(("text", "why"), [
    ("hello, not a checkpoint", "not JSON (it starts with 'h', a CrewAI checkpoint starts with '{'), nor an SQLite"),
    ("", "an empty file, not a checkpoint"),
    (" \n", "an empty file, not a checkpoint"),
    ('{"entities": [', "truncated JSON"),
    ('{"entities": "abc', "truncated JSON: Unterminated string starting at line 1 column 14"),  # was "at at"
], ids=["text", "empty", "blank", "cut", "cut-string"])
def test_a_file_that_never_was_json_is_not_called_truncated(demo: DemoStore, tmp_path: Path, text: str,
                                                            why: str) -> None:
    # before: "garbage.db" (text, not SQLite) was skipped as "truncated JSON: Expecting value"
    path = tmp_path / "garbage.db"
    path.write_text(text)
    result = ckpt(demo.path, "import", str(path))
    assert result.exit_code == 1 and f"skipped: {path}: {why}" in result.stderr, result.stderr


def test_export_into_a_file_is_a_one_line_error(demo: DemoStore, tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    for to in (str(afile), str(afile / "sub"), str(afile / "x.db")):
        assert "is a file" in one_line_error(ckpt(demo.path, "export", "main", "--to", to))
    assert afile.read_text() == "x"


def test_store_path_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    err = one_line_error(ckpt(str(tmp_path / "afile"), "log"))
    assert "is a file, not a store folder" in err and "ckpt init" not in err


def test_show_of_a_tree_id_is_not_called_corruption(demo: DemoStore) -> None:
    tree = Store.open(demo.path).info("main").tree
    err = one_line_error(ckpt(demo.path, "show", tree))
    assert "is a tree, not a commit" in err and "corrupt" not in err


def test_fsck_reports_a_damaged_database_file_instead_of_failing(demo: DemoStore) -> None:
    db = Path(demo.path) / "store.db"
    data = bytearray(db.read_bytes())
    rnd = random.Random(3)
    for _ in range(200):
        data[rnd.randrange(4096, len(data))] ^= 0xFF
    db.write_bytes(bytes(data))
    for args in (("fsck",), ("fsck", "--full")):
        result = ckpt(demo.path, *args)
        assert result.exit_code == 1
        text = result.stdout + result.stderr
        assert ("damaged" in text or "corrupt" in text or "problem" in text) and "Traceback" not in text


def test_fsck_names_the_damaged_checkpoints(demo: DemoStore) -> None:
    s = Store.open(demo.path)
    victim = s.resolve("main")
    tree = bytes.fromhex(s.info(victim).tree)
    frame = s.backend.get(tree).frame  # type: ignore[union-attr]
    with s.backend.transaction() as txn:
        txn.reframe([(tree, frame[:-1] + bytes([frame[-1] ^ 1]))])
    s.close()
    result = ckpt(demo.path, "fsck", "--full")
    assert result.exit_code == 1
    assert f"damaged checkpoint: {victim[:12]}" in result.stdout + result.stderr
    record = orjson.loads(ckpt(demo.path, "fsck", "--json").stdout)
    assert victim in record["affected"]


def test_long_bad_branch_names_are_not_echoed_in_full(demo: DemoStore) -> None:
    err = one_line_error(ckpt(demo.path, "branch", "x" * 5000), code=2)
    assert len(err) < 300


def test_stats_lists_branches_made_from_existing_commits(demo: DemoStore) -> None:
    ok(ckpt(demo.path, "branch", "made-later", "main~1"))
    record = orjson.loads(ok(ckpt(demo.path, "stats", "--json")).stdout)
    text = orjson.dumps(record).decode()
    assert "made-later" in text


def test_graph_marks_where_pruned_history_ends(demo: DemoStore) -> None:
    ok(ckpt(demo.path, "prune", "--keep", "1", "--branch", "alt"))  # else alt's history keeps main[0..1]
    ok(ckpt(demo.path, "prune", "--keep", "2", "--branch", "main"))
    out = ok(ckpt(demo.path, "log", "--graph", "--all", "--oneline")).stdout
    assert "~ (pruned: history continues no further)" in out
    full = ok(ckpt(demo.path, "log", "--graph", "--all", "--oneline", "-n", "3")).stdout
    assert "pruned" not in full  # a cut made by -n is not pruning


def test_a_branch_prefix_on_checkpoints_already_present_says_they_stay(tmp_path: Path) -> None:
    # before: a second import with --branch-prefix printed "0 imported, 2 already present" and created no
    # branch, with no word on why
    src = FIXTURES / "crew_json_star_n6"
    store = str(tmp_path / "s")
    ok(ckpt(store, "import", str(src)))
    result = ok(ckpt(store, "import", str(src), "--branch-prefix", "again/"))
    assert " 0 imported, " in result.stdout
    assert "were already in the store and stay on their branches (--branch-prefix places only new ones)" in result.stderr
    assert not [b for b in Store.open(store).branches() if b.startswith("again/")]


def test_exporting_into_a_stores_own_database_is_refused(demo: DemoStore) -> None:
    # before: `ckpt export --format sqlite --to STORE/store.db` wrote CrewAI's table into the store's database
    db = Path(demo.path) / "store.db"
    before = db.read_bytes()
    err = one_line_error(ckpt(demo.path, "export", "--all", "--format", "sqlite", "--to", str(db)))
    assert "is a crewckpt store's database, not a CrewAI one" in err
    assert db.read_bytes() == before

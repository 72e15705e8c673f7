"""What the CLI says about values and stores an attacker made: lone surrogates in documents, refs and reflog
entries naming a tree or nothing, a store.db that is not a regular file, a damaged format version, and the
store's own database file given as --store. Every answer is output or one line naming the problem and fix."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from crewckpt import Store
from crewckpt.cli.main import cli
from crewckpt.history import jsontext
from crewckpt.views import layout

SURROGATE_DOC = {"\ud800": 1, "v": "x\udcff", "n": [2**70, 1.5]}


def _run(args: list[str], store: Path | str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["--store", str(store), *args])
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture
def surrogate_store(tmp_path: Path) -> Path:
    s = Store.init(tmp_path / "s")
    s.commit({"a": 1})
    s.commit(SURROGATE_DOC)
    assert s.read("main") == SURROGATE_DOC
    s.close()
    return tmp_path / "s"


def test_jsontext_matches_orjson_and_escapes_what_orjson_refuses() -> None:
    import orjson

    plain = {"a": [1, 2.5, None, True, "é\n"], "b": {}, "c": float("nan")}
    assert jsontext.dumps(plain) == orjson.dumps(plain).decode()
    assert jsontext.dumps(plain, indent=True) == orjson.dumps(plain, option=orjson.OPT_INDENT_2).decode()
    text = jsontext.dumps({"\ud800": "a\udfff", "big": 2**70, "nan": float("inf")}, indent=True)
    assert text.encode("utf-8")  # writable as UTF-8
    assert "\\ud800" in text and "\\udfff" in text
    assert json.loads(text) == {"\ud800": "a\udfff", "big": 2**70, "nan": None}


@pytest.mark.parametrize("args", [
    ["show", "main"], ["show", "main", "--json"], ["show", "main", "--raw"], ["show", "main", "--path", "v"],
    ["diff", "main~1", "main"], ["diff", "main~1", "main", "--json"], ["diff", "main~1", "main", "--stat"],
    ["diff", "main"], ["log"], ["log", "--json"], ["info", "main"], ["info", "main", "--json"], ["list"],
])
def test_every_output_path_prints_a_lone_surrogate_as_an_escape(surrogate_store: Path, args: list[str]) -> None:
    code, out, err = _run(args, surrogate_store)
    assert code == 0, err
    assert "Error" not in err
    if "--json" in args or args[0] == "show" and "--path" not in args:
        value = json.loads(out.splitlines()[0] if args[0] in ("log", "list") else out)
        if args[0] == "show":
            assert value == SURROGATE_DOC
        elif args[0] == "diff":
            assert {"path": "v", "op": "added", "new": "x\udcff"} in value["changes"]
    if args[0] in ("show", "diff"):
        assert "\\ud800" in out or "\\udcff" in out, out


@pytest.mark.parametrize("fmt", ["json", "sqlite"])
def test_export_writes_a_lone_surrogate_as_its_json_escape(surrogate_store: Path, tmp_path: Path, fmt: str) -> None:
    dest = tmp_path / ("out.db" if fmt == "sqlite" else "out")
    code, _, err = _run(["export", "main", "--format", fmt, "--to", str(dest)], surrogate_store)
    assert code == 0, err
    if fmt == "json":
        (file,) = [p for p in dest.rglob("*") if p.is_file()]
        text = file.read_text("utf-8")
    else:
        with sqlite3.connect(dest) as c:
            ((text,),) = c.execute("SELECT json(data) FROM checkpoints").fetchall()
    assert json.loads(text) == SURROGATE_DOC
    compact = layout.render_json(SURROGATE_DOC, layout.JSON_STYLE_COMPACT)
    assert "\\ud800" in compact and json.loads(compact) == SURROGATE_DOC


# -- refs and reflog entries that name a tree, or nothing -----------------------------------------------------

def _sql(store: Path, sql: str, *args: object) -> None:
    with sqlite3.connect(store / "store.db", isolation_level=None) as c:
        c.execute(sql, args)


@pytest.fixture
def three(tmp_path: Path) -> tuple[Path, list[str], bytes]:
    s = Store.init(tmp_path / "s")
    ids = [s.commit({"n": i}) for i in range(3)]
    tree = s.objects.commit(bytes.fromhex(ids[0])).tree.oid
    s.close()
    return tmp_path / "s", ids, tree


GHOST = b"\x11" * 32


def test_a_reflog_entry_naming_a_tree_is_refused_and_fsck_reports_it(three: tuple[Path, list[str], bytes]) -> None:
    path, ids, tree = three
    _sql(path, "UPDATE reflog SET new=? WHERE n=(SELECT min(n) FROM reflog WHERE ref='HEAD')", tree)
    code, out, err = _run(["rev-parse", "HEAD@{2}"], path)
    assert code == 1 and out == "" and err.count("\n") == 1, (out, err)
    assert "reflog entry HEAD@{2}" in err and "a tree, not a commit" in err and "ckpt reflog HEAD" in err
    for full in ([], ["--full"]):
        code, out, _ = _run(["fsck", *full], path)
        assert code == 1 and f"reflog entry HEAD@{{2}} names {tree.hex()}, a tree, not a commit" in out, out
    assert _run(["rev-parse", "HEAD@{1}"], path)[1].strip() == ids[1]  # the other entries still answer
    with Store.open(path) as s:
        assert s.read("main") == {"n": 2}


def test_a_reflog_entry_naming_nothing_says_it_is_not_in_the_store(three: tuple[Path, list[str], bytes]) -> None:
    path, _, _ = three
    _sql(path, "UPDATE reflog SET new=? WHERE n=(SELECT min(n) FROM reflog WHERE ref='HEAD')", GHOST)
    code, _, err = _run(["rev-parse", "HEAD@{2}"], path)
    assert code == 1 and err.count("\n") == 1 and "111111111111, which is not in the store" in err, err
    assert "damaged reflog" in err
    assert _run(["fsck"], path)[0] == 0  # a reflog outlives pruned commits: not a problem by itself


@pytest.mark.parametrize("case", ["tree", "nothing"])
def test_a_branch_naming_no_commit_is_listed_as_damaged_with_its_fix(three: tuple[Path, list[str], bytes],
                                                                      case: str) -> None:
    path, ids, tree = three
    _sql(path, "INSERT INTO refs VALUES('refs/heads/evil', ?)", tree if case == "tree" else GHOST)
    want = "a tree, not a commit" if case == "tree" else "which is not in the store (a damaged ref)"
    code, out, err = _run(["branch"], path)
    assert code == 1 and "main" in out and "evil" in out and "damaged" in out, (out, err)
    assert err.count("\n") == 1 and "ref refs/heads/evil" in err and want in err and "ckpt branch -d evil" in err
    assert "pruned" not in err
    code, out, _ = _run(["branch", "--json"], path)
    rows = {r["branch"]: r for r in map(json.loads, out.splitlines())}
    assert code == 1 and rows["main"]["tip"] == ids[2] and want in rows["evil"]["damaged"]
    code, _, err = _run(["rev-parse", "evil"], path)
    assert code == 1 and want in err and "pruned" not in err
    assert _run(["branch", "-d", "evil"], path)[0] == 0
    code, out, _ = _run(["branch"], path)
    assert code == 0 and "evil" not in out
    assert _run(["fsck"], path)[0] == 0


# -- a store.db that is not a regular file; the store's own database file as --store ---------------------------

@pytest.mark.parametrize("kind", ["fifo", "folder", "device", "null", "dangling"])
def test_a_store_db_that_is_not_a_regular_file_is_named_never_opened(tmp_path: Path, kind: str) -> None:
    import os

    d = tmp_path / "d"
    d.mkdir()
    db = d / "store.db"
    {"fifo": lambda: os.mkfifo(db), "folder": db.mkdir, "device": lambda: db.symlink_to("/dev/zero"),
     "null": lambda: db.symlink_to("/dev/null"), "dangling": lambda: db.symlink_to(tmp_path / "gone")}[kind]()
    what = {"fifo": "a fifo", "folder": "a folder", "device": "a device", "null": "a device",
            "dangling": "a dangling symlink"}[kind]
    for args in (["log"], ["fsck"]):  # a FIFO opened for reading would block: the test would hang, not fail
        code, _, err = _run(args, d)
        assert code == 1 and err.count("\n") == 1 and f"{db} is not a regular file ({what}); move it away" in err, err
    r = CliRunner().invoke(cli, ["init", str(d)])
    assert r.exit_code == 1 and f"{db} is not a regular file ({what})" in r.stderr, r.stderr
    assert "already exists" not in r.stderr
    with pytest.raises(Exception, match="not a regular file"):
        Store.open(tmp_path / "d")
    assert os.path.lexists(db)  # left where it was


def test_the_stores_own_database_file_as_store_names_its_folder(tmp_path: Path) -> None:
    Store.init(tmp_path / ".ckpt").close()
    db = tmp_path / ".ckpt" / "store.db"
    code, _, err = _run(["log"], db)
    assert code == 1 and err.count("\n") == 1, err
    assert "is a crewckpt store's database file; use --store " + str(tmp_path / ".ckpt") in err
    assert "import" not in err and "CrewAI" not in err
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    code, _, err = _run(["log"], copy)
    assert code == 1 and "crewckpt store's database file" in err and "NEWFOLDER/store.db" in err, err


# -- a damaged format version -------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["x", "", "\u00b2"])
def test_an_unreadable_format_version_is_named_as_a_damaged_meta_row(tmp_path: Path, value: str) -> None:
    Store.init(tmp_path / "s").close()
    _sql(tmp_path / "s", "UPDATE meta SET value=? WHERE key='format_version'", value)
    code, _, err = _run(["log"], tmp_path / "s")
    assert code == 1 and err.count("\n") == 1, err
    assert f"the recorded format version {value!r} is unreadable (a damaged meta row" in err
    # the highest version this crewckpt knows: safe whatever the store holds (older readers then refuse it)
    assert "UPDATE meta SET value='3' WHERE key='format_version'" in err and "not a crewckpt store" not in err
    _sql(tmp_path / "s", "UPDATE meta SET value='3' WHERE key='format_version'")  # the fix it names works
    assert _run(["fsck"], tmp_path / "s")[0] == 0


def test_the_browser_formats_lone_surrogates_and_big_ints_without_crashing() -> None:
    """The TUI's panels print stored values too (output, values, meta): the same escapes as the CLI."""
    from crewckpt.tui.details import format_value, output_text

    assert format_value({"\ud800": 2 ** 70}) == '{"\\ud800":1180591620717411303424}'
    assert output_text({"output": {"raw": None, "x": "\udfff"}}) == '{\n  "raw": null,\n  "x": "\\udfff"\n}'


FAKE = "deadbeef (HEAD -> main) crew_kickoff_completed  crew:crew [4/4 tasks]"


@pytest.mark.parametrize("args", [["log", "--oneline"], ["log"], ["list"], ["log", "--oneline", "--graph"]],
                         ids=["oneline", "log", "list", "graph"])
def test_a_newline_in_a_name_or_trigger_does_not_fake_a_record(tmp_path: Path, args: list[str]) -> None:
    # before: an entity name "crew\n<fake line>" printed a second, made-up checkpoint line in `ckpt log`
    from crewckpt.views.document import CREWAI

    s = Store.init(tmp_path / "s", profile=CREWAI)
    doc = {"entities": [{"entity_type": "crew", "name": "crew\n" + FAKE, "tasks": []}], "event_record": {}}
    s.commit(doc, trigger="task_completed\r\nfake trigger")
    s.close()
    code, out, err = _run(["--no-pager", *args], tmp_path / "s")
    assert code == 0, err
    assert not any(line.startswith("deadbeef") or line.startswith("fake") for line in out.splitlines()), out
    assert "\\n" + FAKE in out or args == ["log"] and "\\n" in out, out
    if args[0] == "list" or "--oneline" in args:
        assert len(out.splitlines()) == 1, out


@pytest.mark.parametrize("bad", ["../../x", "a\x1b[31mRED\nfake", "-rf", "x.lock"])
def test_a_ref_name_crewckpt_never_writes_is_named_by_fsck_and_can_be_deleted(tmp_path: Path, bad: str) -> None:
    # before: a received store's refs/heads/../../x made `ckpt fsck` say ok, and `ckpt branch -D` refused
    # the name ("bad branch name"): no way to remove it
    s = Store.init(tmp_path / "s")
    cid = s.commit({"a": 1}, branch="main")
    s.close()
    db = sqlite3.connect(tmp_path / "s" / "store.db")
    db.execute("INSERT INTO refs(name, target) VALUES (?, ?)", ("refs/heads/" + bad, bytes.fromhex(cid)))
    db.commit()
    db.close()
    code, out, err = _run(["fsck"], tmp_path / "s")
    assert code == 1 and "has a name crewckpt never writes" in out + err, (out, err)
    assert repr("refs/heads/" + bad) in out + err and "ckpt branch -D" in out + err
    code, out, err = _run(["branch", "-D", bad], tmp_path / "s")
    assert code == 0, (out, err)
    code, out, err = _run(["fsck"], tmp_path / "s")
    assert code == 0, (out, err)
    with Store.open(tmp_path / "s") as again:
        assert again.branches() == {"main": cid}
    code, _, err = _run(["branch", "-D", "../../never"], tmp_path / "s")  # a bad name no ref has: refused
    assert code != 0 and "bad branch name" in err, err

"""Store locations as users type them (attacker findings, issue 16): a leading ``~`` or ``~user`` is expanded
as a shell would, wherever a location is given (Store.init/open/clone, ``--store``, ``$CKPT_STORE``,
``remote add``, ``clone``); a path longer than the system allows is one line naming the problem and the fix,
never a raw OSError, and nothing is created."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest
from cli_helpers import ckpt, ok

from crewckpt.backends import registry
from crewckpt.errors import BadLocation
from crewckpt.history.store import Store


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private $HOME, and a working folder beside it (so a literal "~" folder would show up there)."""
    h, work = tmp_path / "home", tmp_path / "work"
    h.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.chdir(work)
    return h


def test_tilde_is_expanded_wherever_a_location_is_given(home: Path) -> None:
    work = Path.cwd()
    with Store.init("~/a") as a:
        tip = a.commit({"n": 1}, branch="main")
        assert a.location == str(home / "a")
    assert (home / "a" / "store.db").is_file()
    with Store.open("sqlite:~/a") as a:
        assert a.resolve("main") == tip
    assert registry.identity("~/a") == str(home / "a") == registry.identity("sqlite:~/a")
    # the command line: --store given without a shell expanding it, and a quoted $CKPT_STORE
    ok(ckpt("~/b", "init"))
    assert (home / "b" / "store.db").is_file()
    assert tip[:8] in ok(ckpt(None, "log", "--oneline", env={"CKPT_STORE": "~/a"})).stdout
    # remote add and clone record and open the expanded location
    with Store.init(work / "c") as c:
        assert c.add_remote("origin", "~/a") == str(home / "a") and c.fetch().commits == 1
    ok(ckpt(str(work / "d"), "init"))
    ok(ckpt(str(work / "d"), "remote", "add", "up", "~/a"))
    with Store.open(work / "d") as d:
        assert d.remotes() == {"up": str(home / "a")}
    ok(ckpt(None, "clone", "~/a", "~/e"))
    with Store.open(home / "e") as e:
        assert e.resolve("main") == tip and e.remotes() == {"origin": str(home / "a")}
    with Store.clone("~/a", "~/f") as f:
        assert f.location == str(home / "f")
    assert not (work / "~").exists()  # no folder literally named "~" was made anywhere


def test_tilde_user_is_expanded_and_what_a_shell_keeps_is_kept(home: Path) -> None:
    me = pwd.getpwuid(os.getuid())
    assert registry.identity(f"~{me.pw_name}/x") == os.path.join(me.pw_dir, "x")
    work = Path.cwd()
    assert registry.identity("~no-such-user-h4/x") == str(work / "~no-such-user-h4" / "x")  # as a shell does
    assert registry.identity("./~/x") == str(work / "~" / "x")
    assert registry.identity("a~/x") == str(work / "a~" / "x")
    assert registry.identity(Path("~/x")) == str(work / "~" / "x")  # a Path object is taken as it is


LONG = {
    "name": lambda base: str(base / ("a" * 5000)),  # one folder name of 5,000 characters
    "path": lambda base: str(base / "/".join(["b" * 200] * 25)),  # 25 levels of short-enough names: 5,000+
}


@pytest.mark.parametrize("kind", LONG)
def test_a_path_longer_than_the_system_allows_is_one_line_and_creates_nothing(tmp_path: Path, kind: str) -> None:
    where = LONG[kind](tmp_path / "x")

    def check(msg: str) -> None:
        assert "\n" not in msg.strip() and len(msg) < 400, msg
        assert "choose a shorter one" in msg and ("folder name" in msg if kind == "name" else "bytes long" in msg)
        assert "Errno" not in msg and "unexpected" not in msg

    for verb in (Store.init, Store.open, registry.identity):
        with pytest.raises(BadLocation) as info:
            verb(where)
        check(str(info.value))
    for args, env in (([where, "init"], None), ([None, "log"], {"CKPT_STORE": where}),
                      ([None, "clone", where, str(tmp_path / "dest")], None),
                      ([None, "clone", str(tmp_path / "src"), where], None)):
        if args[-1] == where:
            Store.init(tmp_path / "src").close()
        r = ckpt(*args, env=env)
        assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr[:300])
        check(r.stderr)
    with Store.init(tmp_path / "s") as s, pytest.raises(BadLocation) as info:
        s.add_remote("origin", where)
    check(str(info.value))
    assert not (tmp_path / "x").exists() and not (tmp_path / "dest").exists()

"""Text from a store never reaches a terminal raw: escape sequences (CSI, OSC 52), C0/C1 controls, bidi
overrides and zero-width characters are shown escaped in every output mode; --json stays exact."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from crewckpt import Store
from crewckpt.cli.fmt import TerminalSafeStream, safe_text, terminal_safe
from crewckpt.cli.main import cli

OSC52 = "\x1b]52;c;aGVsbG8=\x07"  # writes the clipboard
CLEAR = "\x1b[2J\x1b[H"  # clears the screen
NASTY = f"{OSC52}{CLEAR}\x9b31m\u202eevil\u200b\u2066\ufeff\r"
_ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_SGR = re.compile(r"\x1b\[[0-9;]*m")
_PROGRESS = re.compile(r"\x1b\[\?25[lh]|\x1b\[2K|\x1b\[1A|\r")
MODES = {
    "no-color": {"NO_COLOR": "1", "FORCE_COLOR": ""},
    "dumb": {"TERM": "dumb", "NO_COLOR": "", "FORCE_COLOR": ""},
    "pipe": {"NO_COLOR": "", "FORCE_COLOR": ""},
    "color": {"FORCE_COLOR": "1", "NO_COLOR": ""},
}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("t") / "s"
    s = Store.init(path)
    doc = {"entities": [{"entity_type": "crew", "name": f"crew{NASTY}",
                         "tasks": [{"output": {"raw": f"line one\n{NASTY}\nline three"}}]}]}
    first = s.commit(doc, trigger=f"task_completed{NASTY}", meta={"note": NASTY})
    doc["entities"][0]["tasks"][0]["output"]["raw"] += f"\nmore {CLEAR}"
    s.commit(doc, trigger="x")
    s.close()
    with sqlite3.connect(path / "store.db") as c:  # a name the API would refuse, written by a hostile tool
        c.execute("INSERT INTO refs(name, target) VALUES (?, ?)", (f"refs/heads/b{NASTY}", bytes.fromhex(first)))
        c.execute("INSERT INTO reflog(ref, old, new, time_ns, message) VALUES (?, NULL, ?, 1, ?)",
                  ("refs/heads/main", bytes.fromhex(first), f"commit: {NASTY}"))
    return path


VERBS = [["log"], ["log", "--graph", "--all"], ["list"], ["info", "HEAD"], ["show", "HEAD~1"],
         ["show", "HEAD~1", "--path", "entities[0].tasks[0].output.raw"], ["branch"], ["reflog", "main"],
         ["diff", "HEAD~1", "HEAD"], ["diff", "--stat", "HEAD~1", "HEAD"], ["stats"], ["fsck"],
         ["show", f"no{NASTY}such"], ["branch", "-d", f"b{NASTY}"]]


def _assert_inert(text: str, color: bool) -> None:
    rest = _SGR.sub("", text) if color else text
    assert "\x1b" not in rest, rest[:300]
    bad = _ACTIVE.findall(rest.replace("\n", "").replace("\t", ""))
    assert not bad, (bad, rest[:300])


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("verb", VERBS, ids=lambda v: " ".join(v)[:40])
def test_stored_text_is_shown_escaped_in_every_mode(hostile: Path, mode: str, verb: list[str],
                                                     tmp_path: Path) -> None:
    store = hostile
    if verb[:2] == ["branch", "-d"]:  # deleting changes the store: work on a copy
        import shutil
        shutil.copytree(hostile, tmp_path / "s")
        store = tmp_path / "s"
    r = CliRunner().invoke(cli, ["--no-pager", "--store", str(store), *verb], env=MODES[mode])
    assert r.exit_code in (0, 1, 2), r.output
    _assert_inert(r.stdout, mode == "color")
    err = _PROGRESS.sub("", r.stderr) if mode == "color" else r.stderr  # rich's own progress-bar codes
    _assert_inert(err, mode == "color")
    assert r.stdout or r.stderr


def test_the_escaped_form_is_visible(hostile: Path) -> None:
    r = CliRunner().invoke(cli, ["--store", str(hostile), "log"], env=MODES["pipe"])
    assert "\\x1b]52;c;aGVsbG8=\\x07" in r.stdout and "\\u202eevil" in r.stdout and "\\x9b31m" in r.stdout


def test_json_output_stays_exact(hostile: Path) -> None:
    r = CliRunner().invoke(cli, ["--store", str(hostile), "list", "--json"], env=MODES["color"])
    records = [orjson.loads(line) for line in r.stdout.splitlines()]
    assert f"task_completed{NASTY}" in {rec["trigger"] for rec in records}
    r = CliRunner().invoke(cli, ["--store", str(hostile), "show", "HEAD~1", "--json"], env=MODES["pipe"])
    assert orjson.loads(r.stdout)["entities"][0]["name"] == f"crew{NASTY}"


def test_raw_redirected_stays_byte_exact(hostile: Path) -> None:
    r = CliRunner().invoke(cli, ["--store", str(hostile), "show", "HEAD~1", "--raw"], env=MODES["pipe"])
    assert orjson.loads(r.stdout)["entities"][0]["name"] == f"crew{NASTY}"


def test_safe_text_rules() -> None:
    assert safe_text("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert safe_text("x\u202ey\u200bz\x85\udcff") == "x\\u202ey\\u200bz\\x85\\udcff"
    assert safe_text("a\nb\tc") == "a\\nb\\tc"
    assert safe_text("a\nb\tc", multiline=True) == "a\nb\tc"
    assert safe_text("plain café ünï 日本") == "plain café ünï 日本"
    assert terminal_safe("\x1b[1;36mok\x1b[0m\x1b]52;c;x\x07", keep_sgr=True) == "\x1b[1;36mok\x1b[0m\\x1b]52;c;x\\x07"
    assert terminal_safe("\x1b[31mok", keep_sgr=False) == "\\x1b[31mok"


def test_the_stream_filter_passes_click_checks() -> None:
    import io
    buf = io.StringIO()
    s = TerminalSafeStream(buf, keep_sgr=False)
    with pytest.raises(TypeError):
        s.write(b"")  # type: ignore[arg-type]  # click probes text streams this way
    s.write("a\x1b]0;title\x07")
    assert buf.getvalue() == "a\\x1b]0;title\\x07"


def test_the_tui_shows_stored_text_escaped(hostile: Path) -> None:
    import asyncio

    from crewckpt.tui.app import CheckpointBrowser

    async def main() -> str:
        with Store.open(hostile) as s:
            app = CheckpointBrowser(s)
            app.animation_level = "none"
            async with app.run_test(size=(170, 48)) as pilot:
                for _ in range(50):  # wait (bounded) until the overview shows the selected checkpoint
                    await pilot.pause()
                    shot = app.export_screenshot()
                    if "crew" in shot and "task_completed" in shot:
                        break
                labels = [str(n.label.plain) for n in app.query_one("#tree").root.children]
                return shot + "".join(labels)

    text = asyncio.run(main())
    assert "task_completed" in text
    assert "\x1b" not in text and "\u202e" not in text and "\x9b" not in text
    assert "\\x1b]52" in text or "\\x1b[2J" in text or "\\u202e" in text


def test_resume_leaves_the_terminal_to_crewai() -> None:
    from crewckpt.cli.main import _verb
    assert _verb(["--store", "resume", "log"]) == "log"
    assert _verb(["--debug", "resume", "main"]) == "resume"
    assert _verb(["--store=x", "show", "resume"]) == "show"


@pytest.mark.parametrize("mode", list(MODES))
def test_a_remote_location_is_shown_escaped_not_stripped(tmp_path: Path, mode: str) -> None:
    # before: `remote -v` and `remote trust` printed it raw; off a terminal click stripped the ANSI sequences,
    # so the text the user was asked to trust differed from the stored one
    Store.init(tmp_path / "other").close()
    s = Store.init(tmp_path / "s")
    s.close()
    with sqlite3.connect(tmp_path / "s" / "store.db") as c:
        c.execute("INSERT INTO meta(key, value) VALUES ('remotes', ?)",
                  (orjson.dumps({"origin": f"{tmp_path / 'other'}{CLEAR}/../other"}).decode(),))
    for verb in (["remote", "-v"], ["remote", "trust", "origin"]):
        r = CliRunner().invoke(cli, ["--no-pager", "--store", str(tmp_path / "s"), *verb], env=MODES[mode])
        assert r.exit_code == 0, r.output
        _assert_inert(r.stdout, mode == "color")
        assert "\\x1b[2J\\x1b[H/../other" in r.stdout, r.stdout

"""`ckpt` verbs on a store of real CrewAI checkpoints: human output, --json schemas, exit codes."""

from __future__ import annotations

import json
import re

import orjson
import pytest
from cli_helpers import DemoStore, build_demo_store, ckpt, ndjson, ok

from crewckpt.cli.graph import graph_rows
from crewckpt.cli.main import cli
from crewckpt.history.store import Store

COMMIT_KEYS = {
    "id", "tree", "parents", "time_ns", "time", "seq", "branch", "run_id", "trigger", "alias", "live", "meta",
    "summary",
}  # fmt: skip
SUMMARY_KEYS = {"entities", "tasks_done", "tasks_total", "event_count", "logical_bytes"}
ANSI = re.compile(r"\x1b\[")


@pytest.fixture
def demo(tmp_path) -> DemoStore:
    return build_demo_store(tmp_path / ".ckpt")


# -- help ---------------------------------------------------------------------------------------------------


def test_every_verb_has_help_with_an_example():
    for name in cli.commands:
        result = ok(ckpt(None, name, "--help"))
        assert "Example" in result.stdout, name
        assert "Usage: ckpt " + name in result.stdout


def test_no_verb_prints_help_unless_on_a_terminal(monkeypatch):
    import crewckpt.cli.main as main_mod
    import crewckpt.tui

    seen = []
    monkeypatch.setattr(crewckpt.tui, "run", lambda store_path: seen.append(store_path), raising=False)
    result = ok(ckpt(None))  # CliRunner: not a terminal
    assert "Commands:" in result.stdout and "log" in result.stdout and seen == []
    monkeypatch.setattr(main_mod, "interactive", lambda: True)
    result = ok(ckpt("/some/store"))
    assert seen == ["/some/store"] and "Commands:" not in result.stdout
    no_terminal = ckpt("/other", "tui")  # CliRunner's stdin/stdout are not terminals
    assert no_terminal.exit_code == 1 and "`ckpt tui` needs a terminal" in no_terminal.stderr
    assert seen == ["/some/store"]


def test_unknown_option_is_usage_error():
    result = ckpt(None, "log", "--frobnicate")
    assert result.exit_code == 2
    assert result.stderr == "ckpt: error: No such option '--frobnicate'; see `ckpt log --help`\n"
    missing = ckpt(None, "rev-parse")
    assert missing.exit_code == 2 and missing.stderr == (
        "ckpt: error: Missing argument 'REV'; see `ckpt rev-parse --help`\n"
    )
    as_json = orjson.loads(ckpt(None, "prune", "--keep", "x", "--json").stderr)["error"]
    assert as_json["type"] == "BadParameter" and as_json["exit_code"] == 2


@pytest.mark.parametrize("args, name, fixed", [
    (("gc", "--store", "/tmp/x"), "--store", "ckpt --store /tmp/x gc"),
    (("log", "-n", "2", "--store=my store"), "--store", "ckpt '--store=my store' log -n 2"),
    (("log", "--debug", "main"), "--debug", "ckpt --debug log main"),
    (("gc", "--store", "postgresql://u:hunter2@db/ckpt"), "--store", "ckpt --store 'postgresql://u:***@db/ckpt' gc"),
])
def test_a_global_option_after_the_verb_says_where_it_goes(args, name, fixed):
    """`ckpt gc --store X`: click would suggest --json; the line names the option's place and the command."""
    result = ckpt(None, *args)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == f"ckpt: error: {name} is an option of ckpt itself: write `{fixed}`\n"


def test_an_unknown_option_of_neither_keeps_clicks_line():
    assert ckpt(None, "gc", "--bogus").stderr == "ckpt: error: No such option '--bogus'; see `ckpt gc --help`\n"


# -- init / store discovery ---------------------------------------------------------------------------------


def test_init_then_discovery_from_a_subfolder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CKPT_STORE", raising=False)
    result = ok(ckpt(None, "init"))
    assert f"Initialized empty crewckpt store in {tmp_path / '.ckpt'}" in result.stdout
    again = ckpt(None, "init")
    assert again.exit_code == 1 and again.stderr.startswith(
        "ckpt: error: .ckpt: a crewckpt store already exists"
    )
    assert "ckpt --store .ckpt" in again.stderr
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    Store.open(tmp_path / ".ckpt").commit({"x": 1})
    assert len(ndjson(ok(ckpt(None, "list", "--json")).stdout)) == 1


def test_init_json_and_global_store(tmp_path):
    result = ok(ckpt(None, "init", str(tmp_path / "s"), "--json"))
    assert orjson.loads(result.stdout) == {"path": str(tmp_path / "s")}
    assert (
        ok(ckpt(str(tmp_path / "g"), "init")).stdout
        == f"Initialized empty crewckpt store in {tmp_path / 'g'}\n"
    )
    assert (tmp_path / "g").is_dir()


def test_store_from_environment(demo, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    result = ok(ckpt(None, "rev-parse", "main", env={"CKPT_STORE": demo.path}))
    assert result.stdout.strip() == demo.main[-1]


def test_not_a_store(tmp_path):
    result = ckpt(str(tmp_path / "nothing"), "log")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "ckpt init" in result.stderr
    as_json = ckpt(str(tmp_path / "nothing"), "list", "--json")
    err = orjson.loads(as_json.stderr)["error"]
    assert err["type"] == "StoreNotFound" and err["exit_code"] == 1 and as_json.stdout == ""


# -- log ----------------------------------------------------------------------------------------------------


def test_log_follows_first_parents_newest_first(demo):
    out = ok(ckpt(demo.path, "log", "alt")).stdout
    shown = re.findall(r"^commit ([0-9a-f]{8,})", out, re.MULTILINE)
    expected = list(reversed(demo.main[:2] + demo.alt))
    assert [s for s in shown] == [e[: len(s)] for s, e in zip(shown, expected)] and len(shown) == 4
    assert "(alt)" in out.splitlines()[0]  # HEAD names main: the writer on alt did not switch it
    assert "(HEAD -> main)" in ok(ckpt(demo.path, "log")).stdout.splitlines()[0]
    assert "Trigger: task_completed" in out and "crew:crew [4/4 tasks]" in out
    assert "Parents: (root)" in out


def test_log_limit_oneline_and_branch_option(demo):
    out = ok(ckpt(demo.path, "log", "--branch", "main", "-n", "2", "--oneline")).stdout.splitlines()
    assert len(out) == 2
    assert out[0].startswith(demo.main[-1][:8]) and "(HEAD -> main)" in out[0]
    assert out[1].startswith(demo.main[-2][:8]) and "crew:crew [3/4 tasks]" in out[1]


def test_log_graph_all_shows_both_branches_and_the_fork_point(demo):
    out = ok(ckpt(demo.path, "log", "--graph", "--all", "--oneline")).stdout.splitlines()
    assert len(out) == 7  # 6 commits + one join line
    assert out[0].startswith("* ") and "(alt)" in out[0]
    tip_main = next(line for line in out if "(HEAD -> main)" in line)
    assert tip_main.startswith("| * ")
    join = out.index("|/")
    assert out[join + 1].startswith("* " + demo.fork_point[:8])
    assert out[-1].startswith("* " + demo.main[0][:8])


def test_log_json_is_ndjson_with_full_ids(demo):
    records = ndjson(ok(ckpt(demo.path, "log", "main", "--json")).stdout)
    assert [r["id"] for r in records] == list(reversed(demo.main))
    for record in records:
        assert set(record) == COMMIT_KEYS and set(record["summary"]) == SUMMARY_KEYS
        assert len(record["id"]) == 64 and record["branch"] == "main"
    assert records[0]["parents"] == [demo.main[-2]] and records[-1]["parents"] == []
    assert records[0]["summary"]["tasks_done"] == 4 and records[0]["summary"]["entities"][0] == [
        "crew",
        "crew",
    ]
    all_records = ndjson(ok(ckpt(demo.path, "log", "--all", "--json")).stdout)
    assert {r["id"] for r in all_records} == set(demo.main + demo.alt)
    assert [r["seq"] for r in all_records] == sorted((r["seq"] for r in all_records), reverse=True)


def test_prune_that_other_branches_hold_back_says_why(demo):
    """`prune --branch main` keeping checkpoints names the branches whose history holds them (alt forks at
    main[1]; try1 starts at main[0])."""
    with Store.open(demo.path) as store:
        store.create_branch("try1", demo.main[0])
    why = ("2 older checkpoint(s) of main are history of other branches (alt, try1); prune those branches or "
           "delete them first")
    out = ok(ckpt(demo.path, "prune", "--keep", "1", "--branch", "main")).stdout.splitlines()
    assert len(demo.main) == 4 and out[-2:] == [why, "1 checkpoint(s) pruned; run `ckpt gc` to free the space"]
    out = ok(ckpt(demo.path, "prune", "--keep", "1", "--branch", "main")).stdout
    assert out == f"0 checkpoint(s) pruned: {why}\n"
    rep = orjson.loads(ok(ckpt(demo.path, "prune", "--keep", "1", "--branch", "main", "--json")).stdout)
    assert rep["pruned"] == 0 and rep["held"] == [{"branch": "main", "count": 2, "by": ["alt", "try1"]}]
    ok(ckpt(demo.path, "branch", "-D", "try1"))
    ok(ckpt(demo.path, "branch", "-D", "alt"))
    out = ok(ckpt(demo.path, "prune", "--keep", "1", "--branch", "main")).stdout
    assert out.splitlines()[-1] == "2 checkpoint(s) pruned; run `ckpt gc` to free the space"
    assert orjson.loads(ok(ckpt(demo.path, "prune", "--keep", "1", "--json")).stdout)["held"] == []


def test_log_marks_pruned_history(demo):
    store = Store.open(demo.path)
    assert store.prune("main", keep=2) == []  # alt forks at main[1]: its history stays
    store.prune("alt", keep=1)  # alt[0] goes: nothing live reaches main[0..1] any more
    assert store.prune("main", keep=2) == demo.main[:2]
    store.gc()
    store.close()
    out = ok(ckpt(demo.path, "log", "main", "--oneline")).stdout.splitlines()
    assert len(out) == 3 and "pruned" in out[-1]
    records = ndjson(ok(ckpt(demo.path, "log", "main", "--json")).stdout)
    assert records[-1] == {"id": demo.main[1], "pruned": True}


# -- list ---------------------------------------------------------------------------------------------------


def test_list_newest_first_with_short_ids_branch_trigger_summary(demo):
    lines = ok(ckpt(demo.path, "list")).stdout.splitlines()
    order = list(reversed(demo.main[:2] + demo.main[2:] + demo.alt))
    assert len(lines) == 6
    for line, full in zip(lines, order):
        cols = line.split()
        short = cols[2]
        assert len(short) >= 8 and full.startswith(short)
        assert cols[3] in ("main", "alt") and cols[4] == "task_completed"
    assert lines[0].endswith("crew:crew [4/4 tasks]") and "alt" in lines[0]
    assert lines[-1].endswith("crew:crew [1/4 tasks]")


def test_list_branch_filter_and_json(demo):
    records = ndjson(ok(ckpt(demo.path, "list", "--branch", "alt", "--json")).stdout)
    assert [r["id"] for r in records] == list(reversed(demo.alt))
    assert all(set(r) == COMMIT_KEYS for r in records)
    unknown = ckpt(demo.path, "list", "--branch", "nope")
    assert unknown.exit_code == 1
    assert unknown.stderr == "ckpt: error: no branch named 'nope'; branches: alt, main\n"


def test_list_empty_store(tmp_path):
    Store.init(tmp_path / "s").close()
    result = ok(ckpt(str(tmp_path / "s"), "list"))
    assert result.stdout == "" and "no checkpoints yet" in result.stderr
    assert ok(ckpt(str(tmp_path / "s"), "list", "--json")).stdout == ""


# -- info / rev-parse ---------------------------------------------------------------------------------------


def test_info_human_and_json(demo):
    out = ok(ckpt(demo.path, "info", "main~1")).stdout
    assert f"commit    {demo.main[2]}" in out
    assert f"parents   {demo.main[1]}" in out and "tasks     3/4 completed" in out
    assert "entities  crew:crew (+3 unnamed flows)" in out  # CrewAI's agent-executor flows
    record = orjson.loads(ok(ckpt(demo.path, "info", "main", "--json")).stdout)
    assert set(record) == COMMIT_KEYS | {"branches_at"}
    assert record["id"] == demo.main[-1] and record["branches_at"] == ["main"]
    assert record["alias"] == "20261129T234525_8465e992"


def test_info_of_a_plain_json_checkpoint_counts_no_tasks_or_events(tmp_path):
    with Store.init(tmp_path / "s") as s:
        s.commit({"a": 1, "tasks": [1, 2]}, branch="main")
    out = ok(ckpt(str(tmp_path / "s"), "info", "main")).stdout
    assert "entities  -" in out and "tasks     -" in out and "events    -" in out
    assert "completed" not in out


def test_rev_parse_forms(demo):
    assert ok(ckpt(demo.path, "rev-parse", "main~2")).stdout.strip() == demo.main[1]
    assert ok(ckpt(demo.path, "rev-parse", demo.alt[0][:10])).stdout.strip() == demo.alt[0]
    assert ok(ckpt(demo.path, "rev-parse", "alt^")).stdout.strip() == demo.alt[0]
    assert ok(ckpt(demo.path, "rev-parse", "20261129T234525_04befffc")).stdout.strip() == demo.main[2]
    record = orjson.loads(ok(ckpt(demo.path, "rev-parse", "HEAD", "--json")).stdout)
    assert record == {"rev": "HEAD", "id": demo.main[-1]}  # the current branch's tip (main)


def test_unknown_revision_is_one_line(demo):
    result = ckpt(demo.path, "info", "no-such-thing")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (
        "ckpt: error: unknown revision 'no-such-thing': not a commit id, branch or checkpoint id; "
        "branches: 'alt', 'main'\n"
    )
    assert ckpt(demo.path, "rev-parse", "main~9").exit_code == 1
    # a misspelt branch gets git's "did you mean" (fresh-user trial: `--branch sea-otter` said "see ckpt list")
    assert ckpt(demo.path, "log", "mian").stderr.endswith("; did you mean the branch 'main'?\n")
    assert ckpt(demo.path, "prune", "--keep", "1", "--branch", "alt2").stderr.endswith(
        "did you mean the branch 'alt'?\n")
    assert ckpt(demo.path, "show", "abcdef99").stderr.endswith("; see `ckpt list`\n")  # an id: no branch to suggest


RANGES = ("ranges (A..B, A...B, ^A, A^!, A^@, A^-) are not supported; show one branch with `ckpt log B`, or compare tips with "
          "`ckpt diff A B`")
DATES = "dates in @{...} are not supported; use @{N} (the N-th previous value; see `ckpt reflog`)"


@pytest.mark.parametrize("rev, problem", [("main..alt", RANGES), ("main...alt", RANGES), ("^main", RANGES),
                                          ("main~1..alt", RANGES), ("HEAD@{yesterday}", DATES),
                                          ("main@{2.days.ago}", DATES), ("@{1 hour ago}~1", DATES)])
def test_git_ranges_and_reflog_dates_get_their_own_line(demo, rev, problem):
    """git syntax crewckpt does not take is named as such, not as a typo (one line, exit 1)."""
    result = ckpt(demo.path, "log", rev)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == f"ckpt: error: revision {rev!r}: {problem}\n"


def test_supported_reflog_forms_are_unaffected(demo):
    assert ok(ckpt(demo.path, "rev-parse", "HEAD@{0}")).stdout.strip() == demo.main[-1]
    assert "unknown revision 'nosuch': not a commit id" in ckpt(demo.path, "log", "nosuch").stderr


def test_ambiguous_prefix_lists_candidates(tmp_path):
    store = Store.init(tmp_path / "s")
    seen: dict[str, str] = {}
    for n in range(5000):
        cid = store.commit({"n": n})
        if cid[:4] in seen:
            pair = (seen[cid[:4]], cid)
            break
        seen[cid[:4]] = cid
    else:
        pytest.fail("no 4-hex prefix collision in 5000 commits")
    store.close()
    result = ckpt(str(tmp_path / "s"), "rev-parse", pair[0][:4])
    assert result.exit_code == 1 and "ambiguous" in result.stderr
    assert pair[0][:12] in result.stderr and pair[1][:12] in result.stderr
    assert result.stderr.count("\n") == 1
    err = orjson.loads(ckpt(str(tmp_path / "s"), "show", pair[0][:4], "--json").stderr)["error"]
    assert err["type"] == "AmbiguousRevision"


# -- show ---------------------------------------------------------------------------------------------------


def test_show_document_path_raw_json(demo):
    store = Store.open(demo.path)
    doc = store.read("alt")
    store.close()
    assert orjson.loads(ok(ckpt(demo.path, "show", "alt")).stdout) == doc
    raw = ok(ckpt(demo.path, "show", "alt", "--raw")).stdout
    assert raw == json.dumps(doc)  # CrewAI's rendering (json.dumps), no newline when not on a terminal
    assert ok(ckpt(demo.path, "show", "alt", "--json")).stdout == orjson.dumps(doc).decode() + "\n"
    text = ok(ckpt(demo.path, "show", "alt", "--path", "entities[0].tasks[3].output.raw")).stdout
    assert text == "Sea otters hold hands while sleeping.\nThey use rocks as tools.\n"
    quoted = ok(ckpt(demo.path, "show", "alt", "--path", "entities[0].tasks[3].output.raw", "--raw")).stdout
    assert orjson.loads(quoted) == doc["entities"][0]["tasks"][3]["output"]["raw"]
    inputs = orjson.loads(
        ok(ckpt(demo.path, "show", "alt", "--path", "entities[0].checkpoint_inputs", "--json")).stdout
    )
    assert inputs == {"topic": "sea otters"}


def test_show_bad_path_names_what_exists(demo):
    result = ckpt(demo.path, "show", "main", "--path", "entities[0].tasks[9]")
    assert result.exit_code == 1 and "has 4 items" in result.stderr and result.stderr.count("\n") == 1
    result = ckpt(demo.path, "show", "main", "--path", "entities[0].bogus")
    assert "has no key 'bogus'" in result.stderr


# -- diff ---------------------------------------------------------------------------------------------------


def test_diff_branch_tips_shows_edited_input_and_changed_outputs(demo):
    out = ok(ckpt(demo.path, "diff", "main", "alt")).stdout
    assert out.splitlines()[0] == f"diff main ({demo.main[-1][:12]}) alt ({demo.alt[-1][:12]})"
    assert '~ topic: "otters" -> "sea otters"' in out
    assert "~ task4  completed  output +2 -1 lines" in out
    assert "-[Researcher] deterministic answer for <task4>" in out
    assert "+Sea otters hold hands while sleeping." in out
    assert "events 48 -> 49" in out
    words = ok(ckpt(demo.path, "diff", "main", "alt", "--word-diff")).stdout
    assert "[-[Researcher] deterministic answer for <task4>-]{+Sea otters hold hands while sleeping." in words


def test_diff_stat_is_one_screen(demo):
    out = ok(ckpt(demo.path, "diff", "main", "alt", "--stat")).stdout
    assert len(out.splitlines()) <= 40
    assert "topic" in out and "task4" in out and "+Sea otters" not in out


def test_diff_json_schema(demo):
    record = orjson.loads(ok(ckpt(demo.path, "diff", "main~2", "main", "--json")).stdout)
    assert record["old"] == {"rev": "main~2", "id": demo.main[1]}
    assert record["new"] == {"rev": "main", "id": demo.main[-1]}
    assert record["schema"] == "crewckpt.diff/1" and record["crewai"] is True
    assert set(record) >= {
        "identical",
        "sizes",
        "inputs",
        "entities",
        "events",
        "changes",
        "changes_truncated",
    }
    tasks = {t["name"]: t for t in record["entities"][0]["tasks"]}
    assert (tasks["task3"]["old_status"], tasks["task3"]["new_status"]) == ("pending", "completed")
    # task1 was done in both: its output is the same (CrewAI re-serialises its agent, hence "changed")
    assert tasks["task1"]["output_diff"] is None and "output" not in tasks["task1"]["fields"]


def test_diff_single_rev_against_its_parent_and_files(demo, tmp_path):
    record = orjson.loads(ok(ckpt(demo.path, "diff", "alt", "--json")).stdout)
    assert record["old"]["id"] == demo.alt[0] and record["new"]["id"] == demo.alt[1]
    store = Store.open(demo.path)
    (tmp_path / "a.json").write_bytes(orjson.dumps(store.read("main")))
    store.close()
    same = orjson.loads(ok(ckpt(demo.path, "diff", str(tmp_path / "a.json"), "main", "--json")).stdout)
    assert same["identical"] is True and same["old"]["id"] is None
    root = ckpt(demo.path, "diff", demo.main[0][:8])
    assert root.exit_code == 1
    assert f"{demo.main[0][:8]} is a root checkpoint (no parent to compare with)" in root.stderr


# -- colour -------------------------------------------------------------------------------------------------


def test_colour_only_on_a_terminal_and_never_with_no_color(demo):
    plain = ok(ckpt(demo.path, "diff", "main", "alt")).stdout
    assert not ANSI.search(plain)
    forced = ok(ckpt(demo.path, "diff", "main", "alt", env={"FORCE_COLOR": "1", "NO_COLOR": None})).stdout
    assert ANSI.search(forced)
    assert not ANSI.search(ok(ckpt(demo.path, "list", env={"FORCE_COLOR": "1", "NO_COLOR": "1"})).stdout)


def test_debug_shows_traceback(demo):
    quiet = ckpt(demo.path, "info", "nope")
    loud = ckpt(demo.path, "--debug", "info", "nope")
    assert "Traceback" not in quiet.stderr
    assert "Traceback" in loud.stderr and "UnknownRevision" in loud.stderr and loud.exit_code == 1


# -- graph layout -------------------------------------------------------------------------------------------


def _draw(commits):
    lines = []
    for row in graph_rows(commits):
        lines += row.before
        lines.append(f"{row.row} {row.commit_id}")
    return lines


def test_graph_layout_fork_roots_and_merge():
    assert _draw([("d", ["c"]), ("y", ["x"]), ("c", ["b"]), ("x", ["b"]), ("b", ["a"]), ("a", [])]) == [
        "* d", "| * y", "* | c", "| * x", "|/", "* b", "* a",
    ]  # fmt: skip
    assert _draw([("r2", ["r1"]), ("b", ["a"]), ("r1", []), ("a", [])]) == [
        "* r2",
        "| * b",
        "* | r1",
        " /",
        "* a",
    ]
    assert _draw([("m", ["c", "y"]), ("y", ["b"]), ("c", ["b"]), ("b", [])]) == [
        "* m", "|\\", "| * y", "* | c", "|/", "* b",
    ]  # fmt: skip
    three = _draw([("p", ["a"]), ("q", ["z"]), ("s", ["a"]), ("z", []), ("a", [])])
    assert three == ["* p", "| * q", "| | * s", "| * | z", "|  /", "|/", "* a"]


def test_show_and_diff_crewai_files_need_no_store(tmp_path, monkeypatch):
    from crewai_fixtures import FIXTURES

    monkeypatch.chdir(tmp_path)  # no store anywhere up from here
    monkeypatch.delenv("CKPT_STORE", raising=False)
    folder = FIXTURES / "flow_json" / "main"
    first = str(next(folder.glob("*_b75d688a_p-none.json")))
    later = str(next(folder.glob("*_ac28b92b_p-*.json")))
    state = orjson.loads(
        ok(ckpt(None, "show", first, "--path", "entities[0].checkpoint_state", "--json")).stdout
    )
    assert state["total"] == 11 and state["steps"] == ["gather", "draft"]
    stat = ok(ckpt(None, "diff", first, later, "--stat")).stdout
    assert (
        "~ flow:DemoFlow\n" in stat
        and "completed methods +draft +finish" in stat
        and "state 2 changes: steps[2], total" in stat
    )
    record = orjson.loads(ok(ckpt(None, "diff", first, later, "--json")).stdout)
    assert record["old"] == {"rev": first, "id": None} and record["entities"][0]["role"] == "main"


def test_show_raw_gives_back_an_imported_crewai_file_byte_for_byte(tmp_path):
    from crewai_fixtures import FIXTURES

    store = str(tmp_path / "s")
    ok(ckpt(None, "init", store))
    for folder in ("crew_default/.checkpoints", "flow_json"):
        ok(ckpt(store, "import", str(FIXTURES / folder)))
    files = sorted((FIXTURES / "crew_default/.checkpoints/main").glob("*.json"))
    files += sorted((FIXTURES / "flow_json/main").glob("*.json"))
    for path in files:
        crewai_id = path.name.split("_p-")[0]
        assert ok(ckpt(store, "show", crewai_id, "--raw")).stdout.encode() == path.read_bytes(), path.name


def test_long_output_goes_through_the_pager_on_a_terminal(demo, tmp_path, monkeypatch):
    import sys

    from crewckpt.cli import context

    paged = tmp_path / "paged.txt"
    pager = f"{sys.executable} -c \"import sys; open({str(paged)!r}, 'w').write(sys.stdin.read())\""
    plain = ok(ckpt(demo.path, "log", "--oneline")).stdout
    monkeypatch.setattr(context, "stdout_is_terminal", lambda: True)
    result = ok(ckpt(demo.path, "log", "--oneline", env={"CKPT_PAGER": pager}))
    assert result.stdout == "" and paged.read_text() == plain  # all of it, through the pager
    paged.unlink()
    assert ok(ckpt(demo.path, "--no-pager", "log", "--oneline", env={"CKPT_PAGER": pager})).stdout == plain
    assert ok(ckpt(demo.path, "log", "--oneline", env={"CKPT_PAGER": "cat"})).stdout == plain
    assert ok(ckpt(demo.path, "log", "--json", env={"CKPT_PAGER": pager})).stdout  # JSON is never paged
    assert not paged.exists()
    missing = ok(ckpt(demo.path, "log", "--oneline", env={"CKPT_PAGER": "no-such-pager-xyz -R"}))
    assert missing.stdout == plain  # a pager that is not installed: printed as usual


def test_show_and_diff_rows_of_a_crewai_sqlite_db(tmp_path, monkeypatch):
    import shutil

    from crewai_fixtures import FIXTURES

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CKPT_STORE", raising=False)
    db = tmp_path / "cp.db"
    shutil.copy(FIXTURES / "crew_sqlite_star" / "cp.db", db)  # JSONB rows (SQLite 3.40 cannot read them)
    old, new = f"{db}#20261129T234249_f63cb4fa", f"{db}#20261129T234249_3c4b6bed"
    inputs = orjson.loads(
        ok(ckpt(None, "show", new, "--path", "entities[0].checkpoint_inputs", "--json")).stdout
    )
    assert inputs == {"topic": "otters"}
    stat = ok(ckpt(None, "diff", old, new, "--stat")).stdout
    assert "~ task4  running -> completed  output +1 -0 lines" in stat
    many = ckpt(None, "show", str(db))
    assert (
        many.exit_code == 2
        and "holds 26 checkpoints; name one" in many.stderr
        and many.stderr.count("\n") == 1
    )


def test_paint_styles_and_defuses_control_characters():
    from crewckpt.cli.context import paint

    assert (
        paint("abc", "yellow") == "\x1b[33mabc\x1b[0m"
        and paint("abc", None) == "abc"
        and paint("", "red") == ""
    )
    assert paint("x\x1b[2Jy", "bold") == "\x1b[1mx\\x1b[2Jy\x1b[0m"  # data cannot clear the screen


@pytest.mark.parametrize(("option", "value"), [("--branch-prefix", "../"), ("--branch", "a b"), ("--branch", "")])
def test_import_with_a_bad_branch_option_names_it_and_creates_no_store(tmp_path, option, value):
    # before: `--branch-prefix ../` created the store, then failed with "bad branch name '..'"
    from crewai_fixtures import FIXTURES

    r = ckpt(str(tmp_path / "new"), "import", str(FIXTURES / "crew_json_star_n6"), option, value)
    ok(r, 2)
    line = r.stderr.strip()
    assert "\n" not in line and line.startswith(f"ckpt: error: {option} {value!r} makes a bad branch name"), line
    assert not (tmp_path / "new").exists()


def test_a_mistyped_command_gets_its_suggestion_and_the_help_hint_in_one_readable_line(tmp_path):
    r = ckpt(None, "status")
    ok(r, 2)
    assert r.stderr.strip() == "ckpt: error: No such command 'status'. Did you mean 'stats'? See `ckpt --help`"

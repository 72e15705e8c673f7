"""`ckpt` branch, fork, resume, prune, gc, fsck, stats, import, export and CrewAI paths (list/info PATH)."""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

import orjson
import pytest
from cli_helpers import FIXTURES, DemoStore, build_demo_store, ckpt, ndjson, ok

from crewckpt.history.store import Store


def _branches(path: str) -> dict[str, str]:
    with Store.open(path) as store:
        return store.branches()


@pytest.fixture
def demo(tmp_path) -> DemoStore:
    return build_demo_store(tmp_path / ".ckpt")


# -- branch -------------------------------------------------------------------------------------------------


def test_branch_list_human_and_json(demo):
    lines = ok(ckpt(demo.path, "branch")).stdout.splitlines()
    assert lines[0].startswith("  alt ") and demo.alt[-1][:8] in lines[0]
    assert lines[1].startswith("* main") and "crew:crew [4/4 tasks]" in lines[1]  # HEAD names main
    records = ndjson(ok(ckpt(demo.path, "branch", "--json")).stdout)
    assert [(r["branch"], r["tip"], r["head"]) for r in records] == [
        ("alt", demo.alt[-1], False),
        ("main", demo.main[-1], True),
    ]
    assert records[0]["summary"]["tasks_done"] == 4 and records[0]["summary"]["entities"][0] == [
        "crew",
        "crew",
    ]


def test_branch_create_rename_delete(demo):
    out = ok(ckpt(demo.path, "branch", "try", "main~1")).stdout
    assert out == f"Created branch try at {demo.main[2][:8]}\n"
    assert _branches(demo.path)["try"] == demo.main[2]
    record = orjson.loads(ok(ckpt(demo.path, "branch", "-m", "try", "exp/one", "--json")).stdout)
    assert record == {"renamed": "try", "to": "exp/one", "tip": demo.main[2]}
    assert "try" not in _branches(demo.path)
    record = orjson.loads(ok(ckpt(demo.path, "branch", "-d", "exp/one", "--json")).stdout)
    assert record == {"deleted": "exp/one", "tip": demo.main[2]}
    assert set(_branches(demo.path)) == {"main", "alt"}
    created = orjson.loads(ok(ckpt(demo.path, "branch", "h", "--json")).stdout)
    assert created == {"created": "h", "tip": demo.main[-1]}  # REV defaults to HEAD (main's tip)


def test_branch_errors(demo):
    bad = ckpt(demo.path, "branch", "bad..name")
    assert (
        bad.exit_code == 2
        and bad.stderr.startswith("ckpt: error: bad branch name")
        and bad.stderr.count("\n") == 1
    )
    exists = ckpt(demo.path, "branch", "main", "alt")
    assert exists.exit_code == 1 and "already exists" in exists.stderr
    missing = ckpt(demo.path, "branch", "-d", "nope")
    assert missing.exit_code == 1 and "no branch named 'nope'" in missing.stderr
    both = ckpt(demo.path, "branch", "x", "-d", "alt")
    assert both.exit_code == 2
    assert _branches(demo.path) == {"alt": demo.alt[-1], "main": demo.main[-1]}  # nothing changed


def test_fork_default_and_named(demo):
    out = ok(ckpt(demo.path, "fork", "main~2")).stdout
    name = f"fork/{demo.main[1][:8]}"
    assert f"as branch {name}" in out and f"ckpt resume {name}" in out
    again = orjson.loads(ok(ckpt(demo.path, "fork", "main~2", "--json")).stdout)
    assert again == {"branch": name + "-2", "tip": demo.main[1], "rev": "main~2"}
    named = orjson.loads(ok(ckpt(demo.path, "fork", "alt", "--branch", "sea", "--json")).stdout)
    assert named["branch"] == "sea" and _branches(demo.path)["sea"] == demo.alt[-1]
    assert ckpt(demo.path, "fork", "alt", "--branch", "a b").exit_code == 2
    positional = orjson.loads(ok(ckpt(demo.path, "fork", "main~2", "exp", "--json")).stdout)  # git's NAME REV
    assert positional["branch"] == "exp" and _branches(demo.path)["exp"] == demo.main[1]
    assert ok(ckpt(demo.path, "fork", "main", "same", "--branch", "same", "--json")).stdout
    both = ckpt(demo.path, "fork", "main", "one", "--branch", "two")
    assert both.exit_code == 2 and "two names for the new branch (one and --branch two): give one" in both.stderr
    assert "one" not in _branches(demo.path) and "two" not in _branches(demo.path)


# -- resume -------------------------------------------------------------------------------------------------


def test_resume_without_crewai_says_how_to_install(demo, monkeypatch):
    monkeypatch.setitem(sys.modules, "crewai", None)  # import crewai now fails, as when it is not installed
    result = ckpt(demo.path, "resume", "main")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (
        "ckpt: error: `ckpt resume` needs CrewAI, which is not installed; "
        "install it with: pip install 'crewckpt[crewai]'\n"
    )
    err = orjson.loads(ckpt(demo.path, "resume", "--json").stderr)["error"]
    assert err["type"] == "CrewAIMissing"


def test_resume_bad_inputs_is_usage_error(demo):
    result = ckpt(demo.path, "resume", "main", "--inputs", "{topic: otters}")
    assert result.exit_code == 2 and "--inputs is not valid JSON" in result.stderr
    result = ckpt(demo.path, "resume", "main", "--inputs", "[1]")
    assert result.exit_code == 2 and "must be a JSON object" in result.stderr


def test_resume_calls_restore_and_kickoff(demo, monkeypatch):
    import contextlib
    import types

    calls = []

    class FakeCrew:
        def kickoff(self, inputs=None):
            calls.append(("kickoff", inputs))
            return type("Out", (), {"raw": "final answer"})()

    def restore(rev, store, cls=None, fork=False):
        calls.append(("restore", rev))
        return FakeCrew()

    def run_restored(entity, inputs):  # a run that wrote no checkpoint: head is the restored commit
        return types.SimpleNamespace(result=entity.kickoff(inputs=inputs), checkpoint_id=None, branch=None)

    # The integration's restore is tested with real CrewAI in its own tests; here only the CLI's part.
    monkeypatch.setitem(sys.modules, "crewckpt.crewai", types.SimpleNamespace(restore=restore))
    monkeypatch.setitem(sys.modules, "crewckpt.crewai.hooks", types.SimpleNamespace(
        resuming=lambda rev, cid: contextlib.nullcontext()))
    monkeypatch.setitem(sys.modules, "crewckpt.crewai.run", types.SimpleNamespace(
        restore_class=lambda doc, meta, **kw: None, run_restored=run_restored, tty_confirm=lambda: None))
    record = orjson.loads(
        ok(ckpt(demo.path, "resume", "main~1", "--inputs", '{"topic": "x"}', "--json")).stdout
    )
    assert calls == [("restore", demo.main[2]), ("kickoff", {"topic": "x"})]
    assert record == {"rev": "main~1", "id": demo.main[2], "entity": "FakeCrew", "output": "final answer",
                      "head": demo.main[2], "branch": "main"}  # fmt: skip
    human = ok(ckpt(demo.path, "resume", "main")).stdout
    assert human.endswith("final answer\n")  # a run that wrote nothing: it had nothing left to run
    assert human.startswith(f"nothing left to run: {demo.main[-1][:8]} records a finished fakecrew; main is the "
                            "current branch\n")


# -- prune / gc / fsck / stats --------------------------------------------------------------------------------


def test_prune_dry_run_lists_exactly_what_goes_and_changes_nothing(demo):
    out = ok(ckpt(demo.path, "prune", "--keep", "1", "--branch", "main", "--dry-run")).stdout.splitlines()
    would = [line.split()[2] for line in out if line.startswith("would prune")]
    assert [demo.main[2][: len(would[0])]] == would  # main[0..1] stay: alt's history (alt forks at main[1])
    assert out[-1] == "1 checkpoint(s) would be pruned (dry run: nothing changed)"
    assert len(ndjson(ok(ckpt(demo.path, "list", "--json")).stdout)) == 6
    result = orjson.loads(ok(ckpt(demo.path, "prune", "--keep", "1", "--dry-run", "--json")).stdout)
    assert {(r["branch"], r["id"]) for r in result["commits"]} == {("main", demo.main[2]), ("alt", demo.alt[0])}
    assert result["dry_run"] is True and result["pruned"] == 2


def test_prune_then_gc_frees_space(demo):
    result = orjson.loads(ok(ckpt(demo.path, "prune", "--keep", "1", "--branch", "main", "--json")).stdout)
    assert [r["id"] for r in result["commits"]] == demo.main[2:3] and result["dry_run"] is False
    live = {r["id"] for r in ndjson(ok(ckpt(demo.path, "list", "--json")).stdout)}
    assert live == set(demo.main[:2] + demo.main[3:] + demo.alt)
    dry = ok(ckpt(demo.path, "gc", "--dry-run")).stdout
    assert " -> " not in dry and " now; gc would free " in dry  # no "after" size that is not a prediction
    would = orjson.loads(ok(ckpt(demo.path, "gc", "--dry-run", "--json")).stdout)
    gc = orjson.loads(ok(ckpt(demo.path, "gc", "--json")).stdout)
    assert gc["deleted_objects"] > 0 and gc["dry_run"] is False and gc["bytes_after"] < gc["bytes_before"]
    assert f"would free {gc['deleted_objects'] - gc['deleted_packs']} unreachable object(s)" in dry
    assert (would["deleted_objects"], would["deleted_bytes"]) == (gc["deleted_objects"], gc["deleted_bytes"])
    again = orjson.loads(ok(ckpt(demo.path, "gc", "--dry-run", "--json")).stdout)
    assert again["deleted_objects"] == 0 and again["dry_run"] is True and again["bytes_after"] is None
    assert ok(ckpt(demo.path, "gc")).stdout.startswith("gc: deleted 0 unreachable object(s)")
    with Store.open(demo.path) as store:  # what is left still reads back
        assert store.read("alt")["entities"][0]["checkpoint_inputs"] == {"topic": "sea otters"}


def test_prune_usage_errors(demo):
    assert "say what to prune" in ckpt(demo.path, "prune").stderr
    bad = ckpt(demo.path, "prune", "--older-than", "soon")
    assert bad.exit_code == 2 and "bad duration 'soon'" in bad.stderr
    assert ckpt(demo.path, "prune", "--keep", "0").exit_code == 2
    old = orjson.loads(ok(ckpt(demo.path, "prune", "--older-than", "7d", "--json")).stdout)
    assert old == {"pruned": 0, "dry_run": False, "commits": [], "held": []}  # everything was written just now
    before = ok(ckpt(demo.path, "--json", "prune", "--keep", "1", "--dry-run")).stdout
    ok(ckpt(demo.path, "prune", "--keep", "1"))
    nothing = ok(ckpt(demo.path, "--json", "prune", "--keep", "1"))  # nothing left to prune: still an answer
    assert orjson.loads(nothing.stdout) == {"pruned": 0, "dry_run": False, "commits": [], "held": []}
    assert orjson.loads(before)["pruned"] == 2


def test_fsck_ok_and_corruption(demo):
    out = ok(ckpt(demo.path, "fsck", "--full")).stdout
    assert out.startswith("fsck --full: checked ") and out.rstrip().endswith("ok")
    record = orjson.loads(ok(ckpt(demo.path, "fsck", "--json")).stdout)
    assert record["ok"] is True and record["checked"] > 0 and record["broken"] == {}
    db = sqlite3.connect(f"{demo.path}/store.db")
    oid, frame = db.execute("SELECT oid, frame FROM objects WHERE kind = (SELECT kind FROM objects "
                            "GROUP BY kind ORDER BY count(*) DESC LIMIT 1) LIMIT 1").fetchone()  # fmt: skip
    db.execute("UPDATE objects SET frame = ? WHERE oid = ?", (frame[:-1] + bytes([frame[-1] ^ 0xFF]), oid))
    db.commit()
    db.close()
    bad = ckpt(demo.path, "fsck", "--full")
    assert bad.exit_code == 1 and f"problem: object {oid.hex()}" in bad.stdout
    bad_json = orjson.loads(ckpt(demo.path, "fsck", "--full", "--json").stdout)
    assert bad_json["ok"] is False and oid.hex() in bad_json["broken"] and bad_json["affected"]


def test_stats_human_and_json(demo):
    record = orjson.loads(ok(ckpt(demo.path, "stats", "--json")).stdout)
    assert record["commits"] == 6 and record["objects"] > 0
    assert record["branches"]["main"]["commits"] == 4 and record["branches"]["alt"]["commits"] == 2
    assert record["total_ratio"] == pytest.approx(record["logical_bytes"] / record["stored_bytes"])
    assert record["total_ratio"] > 2  # six overlapping checkpoints deduplicate
    out = ok(ckpt(demo.path, "stats")).stdout
    assert "dedup" in out and "compression" in out and f"{record['total_ratio']:.2f}x" in out
    assert any(line.split()[:2] == ["main", "4"] for line in out.splitlines())


def test_stats_counts_objects_as_fsck_full_does_and_names_the_packs_apart(demo, tmp_path):
    # before: stats counted packs as objects (705) where fsck --full checked 702 (+ 3 outside them)
    import shutil

    shutil.copytree(demo.path, tmp_path / "s")
    path = str(tmp_path / "s")
    ok(ckpt(path, "gc"))  # one pack holds the live objects
    record = orjson.loads(ok(ckpt(path, "stats", "--json")).stdout)
    assert record["packs"] >= 1
    full = orjson.loads(ok(ckpt(path, "fsck", "--full", "--json")).stdout)
    assert record["objects"] - record["packs"] == full["checked"]
    line = next(x for x in ok(ckpt(path, "stats")).stdout.splitlines() if x.startswith("objects"))
    assert line.split()[1] == str(full["checked"]) and f"+ {record['packs']} pack(s) holding them" in line


# -- CrewAI locations: list/info PATH, import, export ---------------------------------------------------------


def test_list_and_info_crewai_json_folder(tmp_path):
    src = tmp_path / "cps"
    shutil.copytree(FIXTURES / "crew_restore_src", src)
    lines = ok(ckpt(None, "list", str(src))).stdout.splitlines()
    assert len(lines) == 14
    assert sum(" alt " in line for line in lines) == 2
    records = ndjson(ok(ckpt(None, "list", str(src), "--branch", "alt", "--json")).stdout)
    assert [r["checkpoint_id"] for r in records] == ["20261129T234528_cf0ef2d2", "20261129T234528_31cc0c7b"]
    assert records[0]["parent_id"] == "20261129T234528_31cc0c7b" and records[0]["kind"] == "json-folder"
    assert (
        records[0]["summary"]["tasks_done"] == 4
        and records[0]["summary"]["entities"][0] == ["crew", "crew"]
        and records[0]["trigger"] == "task_completed"
    )
    info = orjson.loads(ok(ckpt(None, "info", str(src), "--json")).stdout)
    assert info["checkpoints"] == 14 and info["branches"] == ["alt", "main"]
    assert info["latest"]["inputs"] == {"topic": "otters"} and info["latest"]["crewai_version"] == "1.15.30"


def test_list_and_info_crewai_file_and_jsonb_sqlite(tmp_path):
    db = tmp_path / "cp.db"
    shutil.copy(FIXTURES / "crew_sqlite_star" / "cp.db", db)
    records = ndjson(ok(ckpt(None, "list", str(db), "--json")).stdout)
    assert len(records) == 26 and all(r["kind"] == "sqlite" and r["error"] is None for r in records)
    assert records[0]["trigger"] == "crew_kickoff_completed"  # newest first (rowid order within a second)
    assert records[-1]["parent_id"] is None and records[-1]["summary"]["tasks_done"] == 0
    human = ok(ckpt(None, "info", str(db))).stdout
    assert "(sqlite)" in human and "checkpoints  26" in human and '{"topic":"otters"}' in human
    one = next((FIXTURES / "crew_default/.checkpoints/main").glob("*_p-none.json"))
    shutil.copy(one, tmp_path / one.name)
    info = orjson.loads(ok(ckpt(None, "info", str(tmp_path / one.name), "--json")).stdout)
    assert info["kind"] == "json-file" and info["checkpoints"] == 1 and info["latest"]["parent_id"] is None


def test_list_crewai_damaged_file_is_reported_not_fatal(tmp_path):
    src = tmp_path / "main"
    shutil.copytree(FIXTURES / "crew_default/.checkpoints/main", src)
    victim = max(src.glob("*.json"))
    victim.write_bytes(victim.read_bytes()[:100])
    result = ok(ckpt(None, "list", str(src)))
    assert len(result.stdout.splitlines()) == 4 and "unreadable: truncated JSON" in result.stdout


def test_import_then_export_round_trip(tmp_path):
    store = str(tmp_path / "s")
    ok(ckpt(None, "init", store))
    src = tmp_path / "cps"
    shutil.copytree(FIXTURES / "flow_json", src)
    record = orjson.loads(ok(ckpt(store, "import", str(src), "--branch-prefix", "imp/", "--json")).stdout)
    assert record["imported"] == 5 and record["skipped"] == 0
    assert set(record["branches"]) == {"imp/main", "imp/experiment-1"}
    again = ok(ckpt(store, "import", str(src), "--branch-prefix", "imp/")).stdout
    assert "0 imported, 5 already present" in again
    assert len(ndjson(ok(ckpt(store, "list", "--json")).stdout)) == 5
    out = tmp_path / "out"
    exported = orjson.loads(
        ok(
            ckpt(
                store, "export", "--branch", "imp/main", "--strip-prefix", "imp/", "--to", str(out), "--json"
            )
        ).stdout
    )
    assert exported["written"] == 3 and exported["format"] == "json"
    assert sorted(p.name for p in (out / "main").iterdir()) == sorted(
        p.name for p in (src / "main").iterdir()
    )
    db = tmp_path / "out.db"
    assert "5 written" in ok(ckpt(store, "export", "--to", str(db))).stdout
    assert len(ndjson(ok(ckpt(None, "list", str(db), "--json")).stdout)) == 5


def test_import_export_errors(tmp_path, demo):
    missing = ckpt(demo.path, "import", str(tmp_path / "nope"))
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    both = ckpt(demo.path, "export", "main", "--all", "--to", str(tmp_path / "x"))
    assert both.exit_code == 2 and "choose one selection" in both.stderr
    unknown = ckpt(demo.path, "export", "--branch", "nope", "--to", str(tmp_path / "x"))
    assert unknown.exit_code == 1 and not (tmp_path / "x").exists()


def test_info_bare_name_prefers_the_branch_over_a_folder(demo, tmp_path, monkeypatch):
    (tmp_path / "main").mkdir()  # e.g. the cwd is a CrewAI location with a branch folder "main"
    shutil.copy(next((FIXTURES / "crew_default/.checkpoints/main").glob("*_p-none.json")), tmp_path / "main")
    monkeypatch.chdir(tmp_path)
    assert orjson.loads(ok(ckpt(demo.path, "info", "main", "--json")).stdout)["id"] == demo.main[-1]
    as_path = orjson.loads(ok(ckpt(demo.path, "info", "./main", "--json")).stdout)
    assert as_path["kind"] == "json-folder" and as_path["checkpoints"] == 1


def test_progress_bar_on_a_terminal_only(demo):
    quiet = ok(ckpt(demo.path, "fsck", "--full"))
    assert quiet.stderr == ""
    shown = ok(ckpt(demo.path, "fsck", "--full", env={"FORCE_COLOR": "1", "NO_COLOR": None}))
    assert "fsck --full" in shown.stderr  # rich's live bar (transient, so erased at the end)


# Key sets documented in docs/cli-json.md; a change here is a change to a public schema.
GC_KEYS = {
    "live_objects",
    "deleted_objects",
    "deleted_bytes",
    "bytes_before",
    "bytes_after",
    "dry_run",
    "kept_young",
    "grace_s",
    "grace_shared",
    "kept_until",
    "seconds",
    "deleted_packs",
    "deleted_pack_bytes",
}
FSCK_KEYS = {"ok", "full", "checked", "other_checked", "broken", "affected", "problems", "stale_rows", "seconds"}
STATS_KEYS = {"objects", "packs", "commits", "logical_bytes", "body_bytes", "stored_bytes", "file_bytes", "dedup_ratio",
              "compression_ratio", "total_ratio", "branches"}  # fmt: skip
CREWAI_RECORD_KEYS = {"checkpoint_id", "parent_id", "branch", "created_at", "trigger", "source", "kind", "size",
                      "summary", "error"}  # fmt: skip
IMPORT_KEYS = {"source", "kind", "imported", "already_present", "orphans", "skipped", "branches", "problems",
               "redacted"}
EXPORT_KEYS = {"dest", "format", "written", "already_there", "conflicts", "problems"}


def test_json_schemas_match_the_documentation(demo, tmp_path):
    assert set(orjson.loads(ok(ckpt(demo.path, "gc", "--dry-run", "--json")).stdout)) == GC_KEYS
    assert set(orjson.loads(ok(ckpt(demo.path, "fsck", "--json")).stdout)) == FSCK_KEYS
    stats = orjson.loads(ok(ckpt(demo.path, "stats", "--json")).stdout)
    assert set(stats) == STATS_KEYS and set(stats["branches"]["main"]) == {"commits", "logical_bytes"}
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "flow_json", src)
    listed = ndjson(ok(ckpt(None, "list", str(src), "--json")).stdout)
    assert listed and all(set(r) == CREWAI_RECORD_KEYS for r in listed)
    assert set(listed[0]["summary"]) == {
        "entities",
        "tasks_done",
        "tasks_total",
        "event_count",
        "logical_bytes",
    }
    info = orjson.loads(ok(ckpt(None, "info", str(src), "--json")).stdout)
    assert set(info) == {"path", "kind", "checkpoints", "branches", "stored_bytes", "latest", "problems"}
    assert set(info["latest"]) == CREWAI_RECORD_KEYS | {"crewai_version", "inputs"}
    assert set(orjson.loads(ok(ckpt(demo.path, "import", str(src), "--json")).stdout)) == IMPORT_KEYS
    exported = orjson.loads(
        ok(ckpt(demo.path, "export", "main", "--to", str(tmp_path / "o.db"), "--json")).stdout
    )
    assert set(exported) == EXPORT_KEYS and exported["format"] == "sqlite" and exported["written"] == 1
    docs = (Path(__file__).resolve().parents[1] / "docs" / "cli-json.md").read_text()
    for key in GC_KEYS | FSCK_KEYS | STATS_KEYS | CREWAI_RECORD_KEYS | IMPORT_KEYS | EXPORT_KEYS:
        assert f'"{key}"' in docs, key


def test_reflog_lists_the_positions_branch_at_n_names(demo):
    records = ndjson(ok(ckpt(demo.path, "reflog", "alt", "--json")).stdout)
    assert [r["id"] for r in records] == [demo.alt[1], demo.alt[0], demo.fork_point]  # newest first
    assert [r["selector"] for r in records] == ["alt@{0}", "alt@{1}", "alt@{2}"]
    assert records[-1]["message"].startswith("branch: created") and records[0]["old"] == demo.alt[0]
    for record in records:
        assert ok(ckpt(demo.path, "rev-parse", record["selector"])).stdout.strip() == record["id"]
    # without BRANCH: HEAD's reflog, as in git (HEAD names main: its commits, not alt's)
    lines = ok(ckpt(demo.path, "reflog", "-n", "2")).stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith(demo.main[-1][:8] + " HEAD@{0}: commit: task_completed")
    main = ok(ckpt(demo.path, "reflog", "main", "-n", "1")).stdout
    assert main.startswith(demo.main[-1][:8] + " main@{0}: commit: task_completed")
    missing = ckpt(demo.path, "reflog", "nope")
    assert missing.exit_code == 1 and "no branch named 'nope'; branches: alt, main" in missing.stderr


def test_list_or_info_of_a_store_folder(demo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CKPT_STORE", raising=False)
    records = ndjson(ok(ckpt(None, "list", demo.path, "--json")).stdout)  # the store itself, not CrewAI files
    assert len(records) == 6 and records[0]["id"] == demo.alt[-1]
    info = ckpt(None, "info", demo.path)
    assert (
        info.exit_code == 2
        and f"is a crewckpt store, not a checkpoint: ckpt --store {demo.path} info" in info.stderr
    )


def test_gc_right_after_prune_says_what_the_grace_kept_and_when_it_can_go(demo, monkeypatch):
    """A shared store's grace (60 s on PostgreSQL/S3) kept everything prune just cut off: gc must say so,
    not report a bare "deleted 0"."""
    import calendar
    import dataclasses
    import time as _time

    from crewckpt.backends.sqlite import SqliteBackend
    monkeypatch.setattr(SqliteBackend, "capabilities",
                        dataclasses.replace(SqliteBackend.capabilities, gc_grace_s=60.0))
    ok(ckpt(demo.path, "prune", "--keep", "1", "--branch", "main"))
    started = _time.time()
    human = ok(ckpt(demo.path, "gc", "--dry-run")).stdout
    record = orjson.loads(ok(ckpt(demo.path, "gc", "--json")).stdout)
    assert record["deleted_objects"] == 0 and record["kept_young"] > 0
    assert record["grace_s"] == 60.0 and record["grace_shared"] is True
    until = calendar.timegm(_time.strptime(record["kept_until"], "%Y-%m-%dT%H:%M:%SZ"))
    assert started + 55 <= until <= _time.time() + 61
    assert (f"{record['kept_young']} unreachable object(s) kept: younger than the 60 s grace (shared store); "
            "run gc again after ") in human
    text = ok(ckpt(demo.path, "gc")).stdout
    assert text.startswith("gc: deleted 0 unreachable object(s)") and text.count("\n") == 1
    assert f"; {record['kept_young']} unreachable object(s) kept: younger than the 60 s grace (shared store); " \
           f"run gc again after {_time.strftime('%H:%M:%S', _time.localtime(until))}" in text
    monkeypatch.undo()  # grace 0 (this machine's clock): the same objects go, and nothing is said about a grace
    done = orjson.loads(ok(ckpt(demo.path, "gc", "--json")).stdout)
    assert done["deleted_objects"] >= record["kept_young"] and done["kept_young"] == 0
    assert done["kept_until"] is None and "kept" not in ok(ckpt(demo.path, "gc")).stdout


def test_gc_names_replaced_packs_apart_from_unreachable_objects(tmp_path: Path) -> None:
    # before: a store with nothing unreachable (a fresh demo run) said "gc: deleted 3 object(s) (3.3 MB
    # uncompressed)": the 3 were packs repacking had replaced, read by a new user as data thrown away
    for n in range(3):  # three writers: three run-end packs
        with (Store.init(tmp_path / "s") if n == 0 else Store.open(tmp_path / "s")) as store:
            for i in range(5):
                store.commit({"writer": n, "i": i, "text": [f"line {k} of {n}/{i} " * 5 for k in range(400)]})
    dry = ok(ckpt(tmp_path / "s", "gc", "--dry-run", "--json")).stdout
    record = orjson.loads(dry)
    assert record["deleted_packs"] >= 2 and record["deleted_objects"] == record["deleted_packs"]
    line = ok(ckpt(tmp_path / "s", "gc")).stdout
    assert line.startswith(f"gc: deleted 0 unreachable object(s) (0 B uncompressed) and "
                           f"{record['deleted_packs']} pack(s) that repacking replaced; "), line
    with Store.open(tmp_path / "s") as store:
        assert [store.read(c.id)["i"] for c in store.log("main")][:2] == [4, 3]


def test_ctrl_c_says_the_store_is_consistent_and_a_rerun_finishes(
        demo: DemoStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh-user trial (session 18): Ctrl-C of `ckpt gc` / `ckpt push` printed "ckpt: interrupted" and
    nothing on whether the store was left damaged or a retry was safe."""
    def stop(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Store, "gc", stop)
    r = ckpt(demo.path, "gc")
    assert r.exit_code == 130
    assert r.stderr.strip() == "ckpt: interrupted; the store is consistent: run the command again to finish it"


def test_gc_without_a_grace_says_objects_written_while_it_ran_were_kept(demo):
    """Fresh-user trial (session 19): `ckpt gc` beside a running crew said "127 unreachable object(s) kept:
    younger than the 0 s grace": with no grace, what it keeps was written while it ran."""
    import time as _time

    from crewckpt.format import objects as ob

    with Store.open(demo.path) as s:  # an object a writer put after gc started (its stored time is later)
        s.backend.put_many([s.objects.frame(ob.BLOB, b'"written meanwhile"')], _time.time_ns() + 10**12)
    text = ok(ckpt(demo.path, "gc")).stdout
    assert "; 1 unreachable object(s) kept: written while gc ran; run gc again to collect them once no writer " \
           "needs them" in text and "grace" not in text, text


def test_a_command_inside_a_cloned_store_folder_says_to_pass_store_dot(tmp_path, monkeypatch):
    """Fresh-user trial (session 19): `ckpt clone SRC dest && cd dest && ckpt log` said "no .ckpt store in
    .../dest or any parent folder; run `ckpt init`": dest is itself the store."""
    Store.init(tmp_path / "dest").close()
    monkeypatch.chdir(tmp_path / "dest")
    monkeypatch.delenv("CKPT_STORE", raising=False)
    r = ckpt(None, "log")
    assert r.exit_code != 0 and "is itself a store; pass `--store .`" in r.stderr \
        and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "no checkpoints yet" in ckpt(".", "log").stderr  # the store is found with --store .

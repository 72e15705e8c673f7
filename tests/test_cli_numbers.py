"""Numbers and outputs that agree (issue 11 item 8): gc --dry-run predicts gc, log never lists a pruned
commit as an ordinary line, --json works wherever the help offers it, fsck and fsck --full count the same
objects."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_helpers import build_demo_store, ckpt, ndjson, ok

from crewckpt import Store


@pytest.fixture
def demo(tmp_path: Path):
    return build_demo_store(tmp_path / ".ckpt")


def _varied_store(path: Path, n: int = 12) -> None:
    """``n`` commits, each with its own pack of new objects (task outputs, events): after a prune, gc both
    deletes unreachable objects and repacks the live ones out of those small packs."""
    store = Store.init(path)
    for i in range(n):
        tasks = [{"output": {"raw": f"answer {k} of run {i}: " + "words " * 300}} for k in range(4)]
        nodes = {f"e{j}": {"event": {"type": "x", "n": j, "text": "t" * 400}} for j in range(i + 3)}
        store.commit({"entities": [{"name": "crew", "tasks": tasks}], "event_record": {"nodes": nodes}},
                     branch="main")
    store.close()


def test_gc_dry_run_predicts_what_gc_then_does(tmp_path):
    path = tmp_path / ".ckpt"
    _varied_store(path)
    ok(ckpt(str(path), "prune", "--keep", "3"))
    keys = ("live_objects", "deleted_objects", "deleted_bytes")
    dry = json.loads(ok(ckpt(str(path), "gc", "--dry-run", "--json")).stdout)
    real = json.loads(ok(ckpt(str(path), "gc", "--json")).stdout)
    assert dry["dry_run"] is True and real["dry_run"] is False
    assert [dry[k] for k in keys] == [real[k] for k in keys]
    assert real["deleted_objects"] > 0
    human = ok(ckpt(str(path), "gc", "--dry-run")).stdout
    assert "gc would free 0 unreachable object(s)" in human  # nothing is left, and the prediction says so
    assert dry["bytes_after"] is None and " -> " not in human  # no made-up "after" size
    assert json.loads(ok(ckpt(str(path), "gc", "--json")).stdout)["deleted_objects"] == 0


def test_log_never_lists_a_pruned_but_not_collected_commit_as_a_checkpoint(demo):
    store = Store.open(demo.path)
    store.prune("alt", keep=1)  # else alt's history keeps main[0..1]
    assert store.prune("main", keep=2) == demo.main[:2]
    store.close()
    before = ok(ckpt(demo.path, "log", "main", "--oneline")).stdout.splitlines()
    before_json = ndjson(ok(ckpt(demo.path, "log", "main", "--json")).stdout)
    assert "pruned" in before[-1] and len(before) == 3
    for line in before[:-1]:  # every ordinary line names a checkpoint `ckpt show` can read
        short = re.sub(r"\x1b\[[0-9;]*m", "", line).split()[1 if line.startswith("*") else 0]
        ok(ckpt(demo.path, "show", short, "--path", "trigger"))
    assert before_json[-1] == {"id": demo.main[1], "pruned": True}
    assert all(r.get("live", True) for r in before_json[:-1])
    long = ok(ckpt(demo.path, "log", "main")).stdout
    assert long.count("commit ") == 2
    ok(ckpt(demo.path, "gc"))
    assert ok(ckpt(demo.path, "log", "main", "--oneline")).stdout.splitlines() == before
    assert ndjson(ok(ckpt(demo.path, "log", "main", "--json")).stdout) == before_json


def _verbs() -> list[str]:
    text = ok(ckpt(None, "--help")).stdout
    block = text.split("Commands:")[1].split("\n\n")[0]
    return [line.split()[0] for line in block.splitlines() if line.strip()]


def test_json_is_accepted_wherever_the_help_offers_it(demo, tmp_path):
    verbs = _verbs()
    assert "log" in verbs and "tui" in verbs
    helps = {v: ok(ckpt(None, v, "--help")).stdout for v in verbs}
    assert "--json" in ok(ckpt(None, "--help")).stdout  # the global form
    offered = [v for v, h in helps.items() if "--json" in h]
    assert set(verbs) - set(offered) == {"tui"}  # what docs/cli-json.md says: every verb but tui
    doc = (Path(__file__).resolve().parents[1] / "docs" / "cli-json.md").read_text()
    assert "Every verb but `tui` takes `--json`" in doc
    # every `... --json | jq .KEY` example in a help text names a key the output has
    for verb, text in helps.items():
        for args, key in re.findall(r"ckpt (\S+(?: \S+)*?) --json \| jq \.(\w+)", text):
            argv = args.split()[1:] if args.split()[0] == verb else None
            if argv is None or any(a.startswith("fork/") for a in argv):
                continue
            record = ndjson(ok(ckpt(demo.path, verb, *argv, "--json")).stdout)[0]
            assert key in record, (verb, key)
    # `ckpt --json VERB` is `ckpt VERB --json`, for reading verbs and for errors
    for argv in (["log"], ["branch"], ["stats"], ["fsck"], ["reflog", "alt"], ["info", "main"]):
        assert ok(ckpt(demo.path, "--json", *argv)).stdout == ok(ckpt(demo.path, *argv, "--json")).stdout \
            or argv == ["fsck"]
    fsck = json.loads(ok(ckpt(demo.path, "--json", "fsck")).stdout)
    assert fsck["ok"] is True
    bad = ckpt(demo.path, "--json", "show", "nope")
    assert bad.exit_code == 1 and json.loads(bad.stderr)["error"]["type"] == "UnknownRevision"


def test_fsck_and_fsck_full_count_the_same_objects(demo):
    store = Store.open(demo.path)
    store.prune("main", keep=2)  # leaves objects only gc will remove: full re-hashes them as well
    store.close()
    quick = json.loads(ok(ckpt(demo.path, "fsck", "--json")).stdout)
    full = json.loads(ok(ckpt(demo.path, "fsck", "--full", "--json")).stdout)
    assert quick["ok"] and full["ok"]
    assert quick["checked"] == full["checked"] > 0
    assert quick["other_checked"] == 0 and full["other_checked"] > 0
    line = ok(ckpt(demo.path, "fsck")).stdout
    assert f"checked {quick['checked']} objects" in line
    line_full = ok(ckpt(demo.path, "fsck", "--full")).stdout
    assert f"checked {quick['checked']} objects" in line_full

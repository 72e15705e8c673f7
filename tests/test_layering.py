"""Layers match the folders (issue 14 item 6).

format -> backends -> history -> views / crewai -> cli / tui: the generic store (``history``) imports neither
the CrewAI-facing layers nor crewai; no two crewckpt modules import each other (directly or round a loop),
counting imports inside functions; every crewckpt error type is defined in ``crewckpt/errors.py``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import crewckpt

PKG = Path(crewckpt.__file__).parent


def _module_name(f: Path, pkg: Path) -> str:
    parts = list(f.relative_to(pkg.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def import_graph(pkg: Path = PKG) -> dict[str, set[str]]:
    """``module -> crewckpt modules it imports`` at run time, read with ast from the source: imports at any
    depth (inside functions too), except under ``if TYPE_CHECKING:`` (never run). ``from a import b`` names
    the submodule ``a.b`` when it exists, else ``a``. A submodule is not counted as importing its own package
    (``crewckpt.testing.scripted`` using names of ``crewckpt.testing``): Python loads a package before any of
    its submodules, so that edge is containment, not a cycle."""
    files = {_module_name(f, pkg): f for f in pkg.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, f in files.items():
        pkg_name = mod if f.name == "__init__.py" else mod.rpartition(".")[0]

        def add(target: str, mod: str = mod) -> None:
            while target not in files and "." in target:
                target = target.rpartition(".")[0]
            if target in files and target != mod and not mod.startswith(target + "."):
                graph[mod].add(target)

        stack: list[ast.AST] = [ast.parse(f.read_text(encoding="utf-8"))]
        while stack:
            node = stack.pop()
            for child in ast.iter_child_nodes(node):
                if _is_type_checking(child):
                    stack.extend(child.orelse)  # type: ignore[attr-defined]
                    continue
                if isinstance(child, ast.Import):
                    for a in child.names:
                        add(a.name)
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        up = pkg_name.split(".")[: len(pkg_name.split(".")) - (child.level - 1)]
                        base = ".".join([*up, base] if base else up)
                    for a in child.names:
                        add(f"{base}.{a.name}" if f"{base}.{a.name}" in files else base)
                stack.append(child)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import loop ``[a, b, ..., a]`` in ``graph``, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in sorted(graph):
        if start in state:
            continue
        path = [start]
        its = [iter(sorted(graph[start]))]
        state[start] = 1
        while its:
            nxt = next(its[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                its.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                its.append(iter(sorted(graph[nxt])))
    return None


def test_find_cycle_finds_a_loop_and_accepts_a_dag() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_import_graph_sees_function_level_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "crewckpt"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from crewckpt.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import crewckpt.sub.a\n")
    (pkg / "sub" / "d.py").write_text("from crewckpt.sub import a\nfrom crewckpt import sub\n")
    graph = import_graph(pkg)
    assert graph["crewckpt.sub.a"] == {"crewckpt.sub.b"} and graph["crewckpt.sub.b"] == {"crewckpt.sub.a"}
    assert graph["crewckpt.sub.c"] == set()
    assert graph["crewckpt.sub.d"] == {"crewckpt.sub.a"}  # its own package is containment, not an import
    assert find_cycle(graph) == ["crewckpt.sub.a", "crewckpt.sub.b", "crewckpt.sub.a"]


def test_no_import_cycle_between_crewckpt_modules() -> None:
    graph = import_graph()
    assert "crewckpt.history.store" in graph and len(graph) > 40
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


def test_lower_layers_import_no_higher_layer() -> None:
    """The folders' order (README, Layout), checked on every import edge (function-level ones included)."""
    order = {"errors": 0, "format": 1, "backends": 2, "history": 3, "views": 4, "crewai": 5, "cli": 6, "tui": 6}
    bad = []
    for mod, targets in import_graph().items():
        layer = order.get(mod.split(".")[1] if "." in mod else "", None)
        for t in targets:
            tl = order.get(t.split(".")[1] if "." in t else "", None)
            if layer is not None and tl is not None and tl > layer:
                bad.append(f"{mod} -> {t}")
    assert bad == []


def test_history_store_loads_no_crewai_layer_module() -> None:
    code = ("import sys, crewckpt.history.store, crewckpt.history.diff, crewckpt.history.gc, "
            "crewckpt.history.fsck\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'crewai' "
            "or m.startswith(('crewckpt.views', 'crewckpt.crewai', 'crewckpt.cli', 'crewckpt.tui'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_errors_are_defined_in_errors_py() -> None:
    """Every exception class of the package lives in crewckpt/errors.py, except private control-flow
    signals (a gc epoch change, a rejected publish, a crew dump to redo without held fields, a branch's start
    commit pruned before its transaction), the CLI's click
    usage error and the test doubles' errors (the scripted LLM's, the contract suite's simulated crash): not
    crewckpt errors."""
    allowed = {"_EpochChanged", "_Rejected", "_HeldMiss", "_Unlisted", "UsageProblem", "ScriptedLLMError", "_Crash"}
    elsewhere = []
    for f in PKG.rglob("*.py"):
        if f == PKG / "errors.py":
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name not in allowed and any(
                    ast.unparse(b).split(".")[-1].endswith(("Error", "Exception", "Busy", "Exists", "Missing"))
                    or ast.unparse(b) in ("CkptError", "LookupError", "ValueError") for b in node.bases):
                elsewhere.append(f"{f.relative_to(PKG)}:{node.name}")
    assert elsewhere == []


def test_moved_errors_keep_their_old_import_paths() -> None:
    from crewckpt import errors
    from crewckpt.backends.base import StoreBusy, StoreWriteError
    from crewckpt.history.gc import GcBusy
    from crewckpt.history.jsonpath import JsonPathError
    from crewckpt.views.jsonb import JsonbError
    from crewckpt.views.reader import DamagedCheckpoint, SourceError
    from crewckpt.views.writer import ViewWriteError
    assert (StoreBusy, StoreWriteError, GcBusy, JsonPathError, JsonbError, DamagedCheckpoint, SourceError,
            ViewWriteError) == (errors.StoreBusy, errors.StoreWriteError, errors.GcBusy, errors.JsonPathError,
                                errors.JsonbError, errors.DamagedCheckpoint, errors.SourceError,
                                errors.ViewWriteError)

"""Screenshots of the checkpoint browser on the demo store: SVG (Textual's own export) and PNG (cairosvg).

    python scripts/screenshots.py                  # builds the demo store in a temp folder
    python scripts/screenshots.py --store .ckpt    # or uses an existing store (e.g. after scripts/demo.py)

Writes docs/screenshots/{tree,overview,tasks,inputs,diff,events,fork}.svg and .png (PNG when resvg-py or
cairosvg is installed from PyPI; resvg draws Textual's SVGs faithfully, with the system's DejaVu Sans Mono). The app runs headless through Textual's
Pilot at 160x44 cells with a fixed 'now' (the store's newest checkpoint + 90 s) so relative times are stable.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crewckpt import Store
from crewckpt.tui.app import CheckpointBrowser

OUT = ROOT / "docs" / "screenshots"
SIZE = (160, 44)


async def settle(pilot) -> None:
    for _ in range(2):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.1)


def pick(store: Store) -> tuple[str, str, str]:
    """(fork tip, main tip, a main checkpoint whose task 2 is done and 3 is not) of the demo store."""
    branches = store.branches()
    main = branches.get("main") or next(iter(branches.values()))
    others = [tip for name, tip in branches.items() if name != "main"]
    fork_tip = others[0] if others else main
    middle = next((c.id for c in store.log(main) if c.trigger == "task_completed" and c.summary["tasks_done"] == 2),
                  main)
    return fork_tip, main, middle


async def shoot(store: Store, names: list[str]) -> None:
    fork_tip, main_tip, middle = pick(store)
    newest = max(store.list(), key=lambda c: c.seq)
    app = CheckpointBrowser(store, now_ns=newest.time_ns + 90 * 10**9)

    def save(name: str) -> None:
        app.save_screenshot(str(OUT / f"{name}.svg"))
        names.append(name)

    async with app.run_test(size=SIZE) as pilot:

        async def show(cid: str | None, key: str | None, name: str | None) -> None:
            """Put the cursor on ``cid``, press ``key`` (a tab or action), wait, save screenshot ``name``."""
            if cid is not None:
                app.reveal(cid)
                await settle(pilot)
            if key is not None:
                await pilot.press(key)
                await settle(pilot)
            if name is not None:
                save(name)

        await settle(pilot)
        app.sub_title = ".ckpt (the demo store of scripts/demo.py)"  # not the temporary folder's name
        await show(middle, None, "tree")  # the fork point: its fork is nested right under it
        await show(main_tip, "m", None)  # diff base: main's tip
        await show(fork_tip, "1", "overview")
        await show(None, "4", "diff")
        await show(None, "5", "events")
        await show(main_tip, "m", None)  # m on the marked checkpoint clears the mark
        await show(middle, "3", "inputs")  # after task 2: edit its output to show what Fork would do
        await show(None, "2", None)
        app.query_one("#out-0-0").focus()
        await pilot.press("f7", *"Otters use rocks as tools and hold hands while they sleep.")
        await show(None, "escape", "tasks")
        import crewckpt.tui.app as app_mod

        app_mod.crewai_available = lambda: True  # the panel is shown either way in the docs
        await pilot.press("f")
        await settle(pilot)
        save("fork")
        await pilot.press("escape")


FONT_DIRS = ["/usr/share/fonts", "/usr/local/share/fonts", str(Path.home() / ".fonts")]


def to_png(names: list[str]) -> str | None:
    """Convert the SVGs offline; returns the converter used, or None. resvg (``pip install resvg-py``) draws
    Textual's SVGs faithfully; cairosvg drops leading spaces and clip paths (text spills out of dialogs)."""
    try:
        import resvg_py

        for name in names:
            png = resvg_py.svg_to_bytes(svg_path=str(OUT / f"{name}.svg"), width=1600, font_dirs=FONT_DIRS,
                                        font_family="DejaVu Sans Mono", monospace_family="DejaVu Sans Mono")
            (OUT / f"{name}.png").write_bytes(bytes(png))
        return "resvg"
    except ImportError:
        pass
    try:
        import cairosvg
    except (ImportError, OSError) as exc:
        print(f"PNG skipped ({exc}); `pip install resvg-py` (or cairosvg) to get them", file=sys.stderr)
        return None
    for name in names:
        cairosvg.svg2png(url=str(OUT / f"{name}.svg"), write_to=str(OUT / f"{name}.png"), output_width=1600)
    return "cairosvg"


def main() -> None:
    ap = argparse.ArgumentParser(description="Screenshots of the crewckpt TUI on the demo store.")
    ap.add_argument("--store", type=Path, help="existing store (default: build the demo store in a temp folder)")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="crewckpt-shots-") as tmp:
        path = args.store
        if path is None:
            path = Path(tmp) / ".ckpt"
            proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py"), "--store", str(path)],
                                  cwd=tmp, capture_output=True, text=True, check=False)
            if not (path / "store.db").exists():
                raise SystemExit(f"scripts/demo.py made no store (exit {proc.returncode}): {proc.stderr[-800:]}")
            if proc.returncode:  # its CrewAI-JsonProvider comparison can fail after the store is complete
                print(f"note: scripts/demo.py exited {proc.returncode}; using the store it wrote", file=sys.stderr)
        names: list[str] = []
        with Store.open(path) as store:
            asyncio.run(shoot(store, names))
    png = to_png(names)
    print(f"wrote {len(names)} screenshots to {OUT.relative_to(ROOT)}: {', '.join(names)} "
          f"(SVG{f' + PNG by {png}' if png else ''})")


if __name__ == "__main__":
    main()

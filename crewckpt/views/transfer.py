"""The views' public entry points for the CLI and scripts: import and export of CrewAI layouts.

    import_checkpoints(store, path, *, branch_prefix=None, branch=None, progress=None) -> ImportReport
    export_checkpoints(store, dest, *, fmt="json"|"sqlite", revs=None, branches=None, strip_prefix=None,
                       progress=None) -> ExportReport
    open_source(path) -> CrewaiSource      # `ckpt list PATH` / `ckpt info PATH` on a CrewAI location

Reports have ``summary()`` (one line) and ``to_json()`` (compact dict); ``progress`` is
``(phase: str, done: int, total: int | None) -> None``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from crewckpt.views.exporter import ExportReport, ProgressFn, export_crewai
from crewckpt.views.importer import ImportReport, import_crewai
from crewckpt.views.reader import open_source
from crewckpt.views.writer import WriteOutcome

if TYPE_CHECKING:
    from crewckpt.history.store import Store

__all__ = ["ExportReport", "ImportReport", "export_checkpoints", "import_checkpoints", "open_source"]


def import_checkpoints(store: Store, path: str | Path, *, branch_prefix: str | None = None,
                       branch: str | None = None, progress: ProgressFn | None = None) -> ImportReport:
    """Import a CrewAI JSON folder / file / SQLite db; see :func:`crewckpt.views.importer.import_crewai`."""
    return import_crewai(store, path, branch_prefix=branch_prefix, branch=branch,
                         progress=progress if progress is not None else False)


def export_checkpoints(store: Store, dest: str | Path, *, fmt: str = "json", revs: Sequence[str] | None = None,
                       branches: Sequence[str] | None = None, strip_prefix: str | None = None,
                       progress: ProgressFn | None = None) -> ExportReport:
    """Export ``revs`` (exactly those commits), else the live commits of ``branches``, else all, to ``dest``
    in CrewAI's ``fmt`` layout; see :func:`crewckpt.views.exporter.export_crewai`."""
    if revs or not branches:
        return export_crewai(store, dest, fmt, revs=revs, strip_prefix=strip_prefix, progress=progress)
    report = ExportReport(str(dest), fmt, WriteOutcome())
    for b in branches:
        part = export_crewai(store, dest, fmt, branch=b, strip_prefix=strip_prefix, progress=progress)
        report.outcome.merge(part.outcome)
        report.problems += part.problems
    return report

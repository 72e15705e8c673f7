"""Import under retention: re-importing CrewAI checkpoints after prune + gc collected their commits.

Reproducer for a bug reported to the lead (docs/TEAM.md, 'Bugs for the lead'): the alias table keeps
pointing at commits gc deleted, so the importer believes they are present and then fails to read them.
"""

from __future__ import annotations

from pathlib import Path

from reliability_harness import copy_fixtures

from crewckpt.history.store import Store
from crewckpt.views.transfer import import_checkpoints


def test_reimport_before_gc_finds_pruned_commits_present(tmp_path: Path) -> None:
    src = copy_fixtures(tmp_path / "fx") / "flow_dict_star"
    with Store.init(tmp_path / "s") as s:
        first = import_checkpoints(s, src)
        s.prune("main", keep=1)
        again = import_checkpoints(s, src)
        assert not again.imported and len(again.present) == len(first.imported)
        assert s.fsck(full=True).ok



def test_reimport_after_prune_and_gc_restores_the_checkpoints(tmp_path: Path) -> None:
    src = copy_fixtures(tmp_path / "fx") / "flow_dict_star"
    with Store.init(tmp_path / "s") as s:
        first = import_checkpoints(s, src)
        pruned = s.prune("main", keep=1)
        assert pruned
        s.gc()
        again = import_checkpoints(s, src)  # raises UnknownRevision today
        assert len(again.imported) == len(pruned)
        for crewai_id, _ in first.imported:
            cid = s.lookup_alias(crewai_id)
            assert cid is not None and s.read(cid) is not None

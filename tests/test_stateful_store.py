"""Stateful property test (issue 8, item 6): the Store against a plain in-memory model.

Random sequences of commit, fork, branch create/delete/rename, switch, prune, gc and reopen on a real SQLite
store. After every step: branches and their tips, the current branch (HEAD) and HEAD's reflog, live commits in write order with their branch, every live
commit's exact document (compared as JSON text, so 1 / 1.0 / true and -0.0 / 0.0 differ), fsck clean, and
commits that prune removed and gc collected are unknown.

Model rules (the Store API in docs/TEAM.md): ``commit`` without parents goes on the branch tip; ``prune``
removes a branch's live commits outside the ``keep`` newest (by write order) unless a branch points at
them; gc keeps live commits and ref targets, and parents are weak references. HEAD (crewckpt.history.head)
starts on main; a commit on HEAD's branch, a switch and a rename of HEAD's branch append to HEAD's reflog;
the current branch cannot be deleted.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule
from reliability_harness import doc_hash

from crewckpt.errors import BranchExists, BranchInUse, UnknownRevision
from crewckpt.history.store import Store

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
                         st.sampled_from(["\ud800", "é", "x" * 3000, "\U0001f9a6"]))
json_docs = st.recursive(json_scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=5), st.dictionaries(st.text(max_size=6), kids, max_size=5)), max_leaves=25)
branch_names = st.sampled_from(["main", "dev", "exp/a", "exp/b", "hot-fix", "ünï"])


class StoreMachine(RuleBasedStateMachine):
    commits = Bundle("commits")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ckpt-state-"))
        self.store = Store.init(self.dir / "s")
        self.docs: dict[str, str] = {}  # commit id -> doc hash
        self.branch_of: dict[str, str] = {}  # live commit id -> branch it was written on
        self.order: list[str] = []  # live commits in write order
        self.tips: dict[str, str] = {}
        self.pruned: set[str] = set()
        self.collected: set[str] = set()
        self.head = "main"
        self.head_log: list[str] = []  # where HEAD moved, oldest first (HEAD's reflog)

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _committed(self, cid: str, doc: Any, branch: str) -> str:
        self.docs[cid] = doc_hash(doc)
        self.branch_of[cid] = branch
        self.order.append(cid)
        self.tips[branch] = cid
        if branch == self.head:
            self.head_log.append(cid)
        return cid

    @rule(target=commits, branch=branch_names, doc=json_docs)
    def commit(self, branch: str, doc: Any) -> str:
        cid = self.store.commit(doc, branch=branch)
        info = self.store.info(cid)
        expected_parents = (self.tips[branch],) if branch in self.tips else ()
        assert info.parents == expected_parents
        return self._committed(cid, doc, branch)

    @precondition(lambda self: bool(self.order))
    @rule(target=commits, branch=branch_names, doc=json_docs, data=st.data())
    def fork(self, branch: str, doc: Any, data: st.DataObject) -> str:
        base = data.draw(st.sampled_from(self.order))
        cid = self.store.commit(doc, branch=branch, parents=[base[:12]])
        assert self.store.info(cid).parents == (base,)
        return self._committed(cid, doc, branch)

    @precondition(lambda self: bool(self.order))
    @rule(name=branch_names, data=st.data())
    def create_branch(self, name: str, data: st.DataObject) -> None:
        rev = data.draw(st.sampled_from(self.order))
        try:
            self.store.create_branch(name, rev)
        except BranchExists:
            assert name in self.tips
            return
        assert name not in self.tips
        self.tips[name] = rev

    @rule(name=branch_names)
    def delete_branch(self, name: str) -> None:
        try:
            self.store.delete_branch(name)
        except UnknownRevision:
            assert name not in self.tips
            return
        except BranchInUse:
            assert name == self.head
            return
        assert name != self.head
        del self.tips[name]

    @rule(name=branch_names)
    def switch(self, name: str) -> None:
        try:
            self.store.switch(name)
        except UnknownRevision:
            assert name not in self.tips and name != self.head
            return
        if name != self.head:
            self.head = name
            self.head_log.append(self.tips[name])

    @rule(old=branch_names, new=branch_names)
    def rename_branch(self, old: str, new: str) -> None:
        try:
            self.store.rename_branch(old, new)
        except UnknownRevision:
            assert old not in self.tips
            return
        except BranchExists:
            assert new in self.tips
            return
        self.tips[new] = self.tips.pop(old)
        if old == self.head:
            self.head = new
            self.head_log.append(self.tips[new])
        for c, b in self.branch_of.items():
            if b == old:
                self.branch_of[c] = new

    @rule(branch=branch_names, keep=st.integers(1, 4))
    def prune(self, branch: str, keep: int) -> None:
        rows = [c for c in self.order if self.branch_of[c] == branch]
        tips = set(self.tips.values())
        expected = [c for c in rows[:-keep] if c not in tips]
        got = self.store.prune(branch, keep=keep)
        assert got == expected
        for c in got:
            self.order.remove(c)
            del self.branch_of[c]
            self.pruned.add(c)

    @rule()
    def gc(self) -> None:
        self.store.gc()
        refs = set(self.tips.values())
        gone = {c for c in self.pruned if c not in refs}
        self.collected |= gone
        self.pruned -= gone

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = Store.open(self.dir / "s")

    @invariant()
    def matches_model(self) -> None:
        assert self.store.branches() == dict(sorted(self.tips.items()))
        assert self.store.current_branch() == self.head
        assert [e.new.hex() for e in self.store.reflog("HEAD") if e.new] == self.head_log
        if self.head in self.tips:
            assert self.store.resolve("HEAD") == self.tips[self.head] == self.store.resolve("@{0}")
        live = self.store.list()
        assert [c.id for c in live] == self.order
        assert all(c.branch == self.branch_of[c.id] for c in live)
        for cid in self.order:
            assert doc_hash(self.store.read(cid)) == self.docs[cid]
        for cid in self.pruned:  # pruned, not yet collected: still readable by id
            assert doc_hash(self.store.read(cid)) == self.docs[cid]
        for cid in self.collected:
            try:
                self.store.resolve(cid)
                raise AssertionError(f"collected commit {cid[:12]} still resolves")
            except UnknownRevision:
                pass

    @invariant()
    def fsck_clean(self) -> None:
        rep = self.store.fsck(full=True)
        assert rep.ok, rep


StoreMachine.TestCase.settings = settings(max_examples=int(os.environ.get("CKPT_STATEFUL_EXAMPLES", "40")),
                                          stateful_step_count=25, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
test_store_matches_model = StoreMachine.TestCase

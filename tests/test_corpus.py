"""The quick part of the checker's corpus (corpus/README.md): real programs written by others, run plainly
and under `torchwise check` in subprocesses. `make corpus` runs all of them and prints the table."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "corpus"))
import run_corpus  # noqa: E402

QUICK = run_corpus.load_programs(quick=True)


def test_the_corpus_has_a_quick_subset_of_both_kinds():
    kinds = {p.kind for p in QUICK}
    assert kinds == {"correct", "buggy"}, f"quick programs: {[(p.name, p.kind) for p in QUICK]}"


def test_every_corpus_program_says_where_it_comes_from():
    for p in run_corpus.load_programs():
        source = (p.folder / "SOURCE.md").read_text(encoding="utf-8")
        assert (p.folder / "LICENSE").is_file(), f"{p.name}: no LICENSE"
        assert (p.folder / "train.py").is_file(), f"{p.name}: no train.py"
        assert "commit" in source.lower(), f"{p.name}: SOURCE.md names no commit"
        if p.kind == "buggy":
            assert p.expect, f"{p.name}: a buggy program must name the mistake ids check has to report"


@pytest.mark.parametrize("program", QUICK, ids=[p.name for p in QUICK])
def test_quick_corpus_program(program):
    out = run_corpus.run_program(program)
    if out.skipped:
        pytest.skip(out.skipped)
    assert out.plain_rc == 0, f"{program.name} fails when run plainly: {out.note}"
    assert not out.broken, f"the checker changed what {program.name} does: {out.note}"
    if program.kind == "buggy":
        assert set(program.expect) <= set(out.warnings), (
            f"{program.name}: expected {program.expect}, check found {out.warnings} (info: {out.infos})")
    else:
        assert not out.warnings, f"{program.name} is correct, but check reported {out.warnings}"
        unexplained = [i for i in out.infos if i not in program.info_ok]
        assert not unexplained, f"{program.name}: info hints not listed as true in corpus.json: {unexplained}"

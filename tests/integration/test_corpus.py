"""The corpus harness (corpus/run_corpus.py) on real programs run plainly and under `torchwise check` in
subprocesses: verdicts (caught, missed, clean, false alarm), and the rule that check may never change
what a program prints. The third-party corpus itself is kept out of git (corpus/README.md); where a
local copy exists, its programs marked "quick" run here too."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT

ROOT = REPO_ROOT
sys.path.insert(0, str(ROOT / "corpus"))
import run_corpus  # noqa: E402


ZOO = ROOT / "tests" / "check_zoo"


def _program(root: Path, name: str, source: Path | str, kind: str, expect: list[str]) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    if isinstance(source, Path):
        shutil.copy(source, folder / "train.py")
    else:
        (folder / "train.py").write_text(source)
    (folder / "SOURCE.md").write_text("torchwise's own test program (commit: this repository)\n")
    (folder / "LICENSE").write_text("the project's own licence\n")
    (folder / "corpus.json").write_text(json.dumps({"kind": kind, "expect": expect, "max_steps": 0,
                                                   "timeout_s": 240}))


def test_the_harness_gives_each_verdict_on_real_runs(tmp_path):
    _program(tmp_path, "clean_mlp", ZOO / "correct" / "mlp_digits.py", "correct", [])
    _program(tmp_path, "no_zero_grad", ZOO / "buggy" / "digits_no_zero_grad.py", "buggy", ["missing-zero-grad"])
    _program(tmp_path, "wrong_expectation", ZOO / "buggy" / "digits_no_zero_grad.py", "buggy", ["no-shuffle"])
    # a program that can see the checker's global hooks: its output changes under check, which the
    # harness must report as the checker changing what a program does
    _program(tmp_path, "sees_hooks", """
import torch
from torch.nn.modules import module
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad(); model(torch.randn(8, 4)).pow(2).mean().backward(); opt.step()
print("global hooks:", "none" if not module._global_forward_pre_hooks else "some")
""", "correct", [])
    outcomes = {p.name: run_corpus.run_program(p) for p in run_corpus.load_programs(root=tmp_path)}
    verdicts = {name: o.verdict for name, o in outcomes.items()}
    assert verdicts == {"clean_mlp": "clean", "no_zero_grad": "caught", "wrong_expectation": "MISSED",
                        "sees_hooks": "BROKEN"}, {n: (o.verdict, o.note) for n, o in outcomes.items()}
    assert "output differs" in outcomes["sees_hooks"].note
    assert outcomes["clean_mlp"].coverage["optimizer_steps"] > 0
    t = run_corpus.totals(list(outcomes.values()), full=True)
    assert (t["correct"], t["correct_with_warning"], t["buggy"], t["buggy_caught"], t["broken"]) == (2, 0, 2, 1, 1)


LOCAL_QUICK = run_corpus.load_programs(quick=True)


@pytest.mark.parametrize("program", LOCAL_QUICK, ids=[p.name for p in LOCAL_QUICK])
def test_local_quick_corpus_program(program):
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


def test_the_halves_are_fixed_by_repository(tmp_path):
    """Every program of one repository is in the same half, decided by the repository's name alone."""
    repos = [f"owner{i}/repo{i}" for i in range(40)]
    halves = {r: run_corpus.split_of(r) for r in repos}
    assert set(halves.values()) == {"tune", "heldout"}  # both halves get repositories
    assert all(run_corpus.split_of(r.upper()) == h for r, h in halves.items())  # the spelling's case does not matter
    assert run_corpus.split_of("") == "-"
    for name, repo in (("a", repos[0]), ("b", repos[0]), ("c", repos[1])):
        _program(tmp_path, name, "print(1)\n", "correct", [])
        cfg = tmp_path / name / "corpus.json"
        cfg.write_text(json.dumps(json.loads(cfg.read_text()) | {"repo": repo}))
    loaded = {p.name: p.split for p in run_corpus.load_programs(root=tmp_path)}
    assert loaded["a"] == loaded["b"] == halves[repos[0]] and loaded["c"] == halves[repos[1]]
    only = run_corpus.load_programs(root=tmp_path, split=halves[repos[0]])
    assert {p.name for p in only} >= {"a", "b"}


def test_progress_bars_printed_as_lines_are_not_compared():
    """fastprogress and tqdm without a terminal print an update as a line when enough time has passed: a slower
    run prints other updates of the same bar. Those lines are left out of the comparison; the rest is kept."""
    fast = ("epoch     train_loss\nEpoch 1/2 : |----------------------------------------| 0.00% [0/250 00:00<?]\n"
            "Epoch 1/2 : |██--------------------------------------| 5.60% [14/250 00:00<00:02... 2.3071]\n"
            "loss: 0.48:  12%|█▎        | 5/40 [00:05<00:38,  1.09s/it]\n1     2.301       2.298\n")
    slow = ("epoch     train_loss\nEpoch 1/2 : |█---------------------------------------| 2.40% [6/250 00:01<00:09]\n"
            "1     2.404       2.398\n")
    assert run_corpus._shape(fast, "/x") == run_corpus._shape(slow, "/x") == ["epochtrain_loss", "###"]
    assert run_corpus._shape("a | b | c 50% done\n", "/x") == ["a|b|c#%done"]  # a table with bars stays
    rich_fast = "Epoch 2/2 ━━━━━━━━━━━━━━━━━━━━━━━━━━ 30/30 0:00:01 • 0:00:00 27.1it/s v_num: 0\ndone\n"
    rich_slow = "Epoch 2/2 ━━━━━━━━━━━━━━━━━━━━━━━━╸━ 30/30 0:00:02 • 0:00:00 14.0it/s v_num: 0\ndone\n"
    assert run_corpus._shape(rich_fast, "/x") == run_corpus._shape(rich_slow, "/x") == ["done"]

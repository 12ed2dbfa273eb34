"""Imbalanced classes in a run's evaluation (issue 28, item 2): a class the model never predicts is a warning
in the console and report.html with its train/val counts and recall; the headline of an imbalanced run has macro
F1 and balanced accuracy beside accuracy; top-5 only with more than 10 classes (item 7).

The run test trains, in this process, through the same train_run the CLI runs, on a real PNG folder written to
disk: six classes, 'five' 12 images of 612 (the newcomer's folder)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from torchwise import config as cfg
from torchwise.run.scores import classification_metrics
from testkit.imbalanced_data import RARE_FOLDER_COUNTS, write_rare_class_folder

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NAMES = ["five", "four", "one", "six", "three", "two"]


def _outputs_predicting(predicted: list[int], classes: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(predicted), classes).float() * 5.0


def test_a_class_never_predicted_is_warned_with_its_counts_and_recall():
    from torchwise.report import imbalance  # (imported here: the run tests below run on any version)

    # 2 'five' among 26 validation examples, both predicted 'six': accuracy 24/26, 'five' recall 0
    targets = torch.tensor([0, 0] + [1, 2, 3, 4, 5] * 4 + [3, 3, 4, 4])
    predicted = [3, 3] + [1, 2, 3, 4, 5] * 4 + [3, 3, 4, 4]
    ev = classification_metrics(_outputs_predicting(predicted, 6), targets, NAMES)
    assert ev["per_class"][0]["predicted"] == 0 and ev["per_class"][3]["predicted"] == 8
    assert ev["balanced_accuracy"] == pytest.approx(5 / 6)
    imbalance.judge(ev, dict(zip(NAMES, [10, 96, 96, 96, 96, 96])))
    assert ev["class_balance"]["imbalanced"] and ev["class_balance"]["smallest"] == {"class": "five", "count": 10}
    assert ev["rarely_predicted"]["total"] == 1
    assert ev["rarely_predicted"]["classes"] == [{"class": "five", "train": 10, "val": 2, "predicted": 0,
                                                  "recall": 0.0}]
    lines = imbalance.warning_lines(ev)
    assert lines[0].startswith("warning: the model never or almost never predicts 1 class")
    assert "'five': predicted 0 times for its 2 validation examples (recall 0.000); 10 training examples" in lines[1]
    assert "train.class_weights=balanced" in lines[-1]
    assert [name for name, _ in imbalance.headline(ev)] == ["accuracy", "macro F1", "balanced accuracy"]
    # already weighted: the fix does not suggest what is on
    assert "already weighted" in imbalance.judge(ev, None, weighted=True)["rarely_predicted"]["fix"]


def test_almost_never_is_under_a_tenth_of_its_examples_and_a_balanced_good_run_says_nothing():
    from torchwise.report import imbalance  # (imported here: the run tests below run on any version)

    # 'four' has 30 validation examples and is predicted twice (both right): almost never
    targets = torch.tensor([1] * 30 + [2] * 30)
    ev = imbalance.judge(classification_metrics(_outputs_predicting([1, 1] + [2] * 58, 6), targets, NAMES))
    assert [c["class"] for c in ev["rarely_predicted"]["classes"]] == ["four"]
    assert ev["rarely_predicted"]["classes"][0]["recall"] == pytest.approx(2 / 30)
    assert ev["class_balance"]["counted_on"] == "validation examples"
    # three predictions of 30 is a tenth: no longer "almost never"; the same counts are balanced: accuracy alone
    ev = imbalance.judge(classification_metrics(_outputs_predicting([1, 1, 1] + [2] * 57, 6), targets, NAMES))
    assert "rarely_predicted" not in ev and imbalance.warning_lines(ev) == []
    assert ev["class_balance"]["imbalanced"] is False
    assert [name for name, _ in imbalance.headline(ev)] == ["accuracy"]


def test_top5_only_with_more_than_10_classes():
    from torchwise.train.evaluate.streaming_metrics import RunningMetrics

    for classes, shown in ((6, False), (10, False), (11, True)):
        outputs, targets = torch.randn(40, classes), torch.randint(0, classes, (40,))
        names = [str(i) for i in range(classes)]
        assert ("top5_accuracy" in classification_metrics(outputs, targets, names)) is shown, classes
        running = RunningMetrics("classification", torch.device("cpu"))
        running.update(outputs, targets)
        from torchwise.train.distributed.process_group import DistEnv

        assert ("val_top5" in running.compute(DistEnv(), "val")) is shown, classes


def test_a_listed_warning_stays_short_with_many_classes():
    from torchwise.report import imbalance  # (imported here: the run tests below run on any version)

    classes = 300
    targets = torch.arange(classes).repeat(2)
    ev = imbalance.judge(classification_metrics(_outputs_predicting([0] * targets.numel(), classes), targets,
                                                [f"c{i}" for i in range(classes)]))
    assert ev["rarely_predicted"]["total"] == classes - 1 and len(ev["rarely_predicted"]["classes"]) == imbalance.LISTED
    lines = imbalance.warning_lines(ev)
    assert len(lines) == imbalance.LISTED + 3 and "... and 289 more" in lines[-2]


@pytest.fixture(scope="module")
def rare_run(tmp_path_factory):
    """The newcomer's folder trained 3 epochs (24 steps), unweighted: 'five' is never predicted."""
    from torchwise.run.train_run import train_run

    root = tmp_path_factory.mktemp("rare")
    data = write_rare_class_folder(root / "digits6")
    assert sum(RARE_FOLDER_COUNTS.values()) == 612 and RARE_FOLDER_COUNTS["five"] == 12
    out = root / "run"
    config = cfg.resolve(flags={"data": str(data), "out": str(out), "epochs": "3"},
                         sets=["data.num_workers=0", "output.progress=false", "train.threads=1"])
    lines: list[str] = []
    summary = train_run(config, log=lambda line="", *_a, **_k: lines.append(str(line)))
    return out, summary, lines


def test_the_run_warns_in_the_console_and_leads_with_macro_f1(rare_run):
    out, summary, lines = rare_run
    ev = json.loads((out / "eval.json").read_text())
    five = next(r for r in ev["per_class"] if r["class"] == "five")
    assert five["predicted"] == 0 and five["recall"] == 0.0 and five["support"] == 2
    assert ev["data"]["train_counts"]["five"] == 10 and ev["data"]["val_counts"]["five"] == 2
    assert ev["class_balance"]["imbalanced"] and ev["class_balance"]["counted_on"] == "training split"
    assert "top5_accuracy" not in ev  # 6 classes
    done = next(line for line in lines if line.startswith("done:"))
    assert re.match(r"done: val accuracy 0\.\d{4}, macro F1 0\.\d{4}, balanced accuracy 0\.\d{4} after 24 steps",
                    done), done
    assert f"macro F1 {ev['macro_f1']:.4f}" in done and f"balanced accuracy {ev['balanced_accuracy']:.4f}" in done
    warning = lines[lines.index(done) + 1:]
    assert warning[0].startswith("warning: the model never or almost never predicts 1 class"), lines
    assert warning[1].strip() == "'five': predicted 0 times for its 2 validation examples (recall 0.000); " \
                                 "10 training examples", warning
    assert summary["evaluation"]["rarely_predicted"]["classes"][0]["class"] == "five"
    # metrics.csv keeps its columns; val_top5 is empty with 6 classes
    header, first = (out / "metrics.csv").read_text().splitlines()[:2]
    columns = header.split(",")
    assert "val_top5" in columns and first.split(",")[columns.index("val_top5")] == ""


def test_the_report_warns_and_its_cards_lead_with_macro_f1(rare_run):
    out, _, _ = rare_run
    page = (out / "report.html").read_text()
    ev = json.loads((out / "eval.json").read_text())
    cards = page[page.index('<div class="cards">'):page.index("<h2>Training curves</h2>")]
    assert f"<b>{ev['macro_f1']:.4g}</b>val macro F1" in cards
    assert f"<b>{ev['balanced_accuracy']:.4g}</b>val balanced accuracy" in cards
    assert '<div class="finding warning"><h3>[warning] the model never or almost never predicts 1 class' in cards
    assert re.search(r'<td class="l">five</td><td class="">10</td><td class="">2</td><td class="">0</td>'
                     r'<td class="">0</td>', cards), cards
    assert "val_top5" not in page  # no top-5 curve (its legend would name it)


def test_the_checker_judges_the_newcomers_split_not_its_sample(rare_run):
    """96 vs 10 training images (9.6x): under label-imbalance's 10x rule once judged on the split; before, the
    2 checked batches (2 'five' of 128 labels, 15x) made a hint the data table contradicted."""
    out, _, _ = rare_run
    checks = json.loads((out / "checks.json").read_text())
    assert "label-imbalance" not in {f["id"] for f in checks.get("findings", [])}, checks


def test_the_checker_hint_quotes_the_data_tables_counts(tmp_path):
    """'five' 10 images (8 training, 12x): the hint names the split's counts, the data table's; the checked
    batches, which hold no 'five' here, are no longer read as labels that start at 1."""
    from torchwise.run.train_run import train_run

    data = write_rare_class_folder(tmp_path / "digits6", {**RARE_FOLDER_COUNTS, "five": 10})
    config = cfg.resolve(flags={"data": str(data), "out": str(tmp_path / "run"), "max_steps": "8"},
                         sets=["data.num_workers=0", "output.progress=false", "train.threads=1"])
    train_run(config, log=lambda *_a, **_k: None)
    checks = json.loads((tmp_path / "run" / "checks.json").read_text())
    found = {f["id"]: f for f in checks["findings"]}
    assert "labels-not-zero-based" not in found, found
    hint = found["label-imbalance"]
    assert hint["message"].startswith("Class 1 ('four') has 96 training examples and class 0 ('five') only 8 (12x) "
                                      "in the training split's 488 examples"), hint["message"]
    train_counts = json.loads((tmp_path / "run" / "eval.json").read_text())["data"]["train_counts"]
    assert hint["evidence"]["counts_by_class"] == train_counts
    assert hint["evidence"]["counted_on"] == "training split"


def test_torchwise_eval_says_the_same(rare_run, capsys):
    import argparse

    from torchwise.cli import eval_command

    out, summary, lines = rare_run
    args = argparse.Namespace(run=str(out), checkpoint=None, data=None, json=str(out.parent / "eval-again.json"),
                              batch_size=256, device="cpu")
    assert eval_command.run(args) == 0
    printed = capsys.readouterr().out.splitlines()
    ev = summary["evaluation"]
    assert printed[1] == (f"accuracy {ev['accuracy']:.4f} on 122 examples   macro F1 {ev['macro_f1']:.4f}   "
                          f"balanced accuracy {ev['balanced_accuracy']:.4f}")  # no top-5 with 6 classes
    warning = [line for line in lines if line.startswith(("warning:", "  "))]
    assert printed[2:2 + len(warning)] == warning  # the train counts from final/meta.json

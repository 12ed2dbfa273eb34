"""Many classes (issue 27, class 9): above 50 classes the scores keep the most-confused classes' block of
the confusion matrix (exact counts) instead of the whole matrix, and the report and `torchwise eval` show
summaries that say what they left out. Real scores of real outputs; the report is read back as a page."""
from __future__ import annotations

import json

import torch

from torchwise.cli.eval_command import format_table
from torchwise.report.html import write_report
from torchwise.run.scores import FULL_CONFUSION_MAX, classification_metrics, worst_examples
from testkit.report_html import decoded_pngs, parse_report


def outputs_for(n_classes: int, n_examples: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, n_classes, (n_examples,), generator=g)
    outputs = torch.randn(n_examples, n_classes, generator=g)
    outputs[torch.arange(n_examples), targets] += 2.5  # mostly right, with mistakes spread about
    return outputs, targets


def test_up_to_the_bound_the_whole_confusion_matrix_is_kept():
    outputs, targets = outputs_for(FULL_CONFUSION_MAX, 400)
    result = classification_metrics(outputs, targets, [f"c{i}" for i in range(FULL_CONFUSION_MAX)])
    assert len(result["confusion"]) == FULL_CONFUSION_MAX and "confusion_top" not in result
    assert sum(map(sum, result["confusion"])) == 400


def test_above_the_bound_the_most_confused_block_is_exact():
    n = 120
    names = [f"c{i}" for i in range(n)]
    outputs, targets = outputs_for(n, 3000)
    result = classification_metrics(outputs, targets, names)
    assert "confusion" not in result
    top = result["confusion_top"]
    full = torch.bincount(targets * n + outputs.argmax(1), minlength=n * n).reshape(n, n)
    index = [names.index(c) for c in top["classes"]]
    block = full[index][:, index]
    other = full[index].sum(1) - block.sum(1)
    assert top["matrix"] == torch.cat([block, other[:, None]], 1).tolist()
    off = full.clone().fill_diagonal_(0)
    involved = off.sum(0) + off.sum(1)
    assert sorted(involved[index].tolist(), reverse=True) == sorted(involved.tolist(), reverse=True)[:len(index)]
    assert top["classes_left_out"] == n - len(index) and top["classes_total"] == n
    assert top["misclassified"] == int(off.sum())
    assert top["pairs"][0]["count"] == int(off.max())
    # the per-class scores are the same as those of the whole matrix
    recall = full.diag().double() / full.sum(1).clamp_min(1)
    assert [round(r["recall"], 9) for r in result["per_class"]] == [round(v, 9) for v in recall.tolist()]


def test_the_scores_of_5000_classes_stay_small():
    n = 5000
    outputs, targets = outputs_for(n, 5000)
    result = classification_metrics(outputs, targets, [f"class-{i:04d}" for i in range(n)])
    size = len(json.dumps(result))
    assert size < 2_000_000, size  # the whole matrix alone would be 25 million numbers
    assert len(result["confusion_top"]["classes"]) == 30
    worst = worst_examples(outputs, targets, [str(i) for i in range(5000)], result["class_names"], 8)
    probs = torch.softmax(outputs[worst[0]["index"]], 0)
    assert abs(worst[0]["confidence"] - float(probs.max())) < 1e-6
    assert abs(worst[0]["p_true"] - float(probs[targets[worst[0]["index"]]])) < 1e-6


def test_the_report_of_5000_classes_shows_summaries_that_say_what_they_left_out(tmp_path):
    n = 5000
    names = [f"class-{i:04d}" for i in range(n)]
    outputs, targets = outputs_for(n, 5000)
    evaluation = classification_metrics(outputs, targets, names)
    summary = {"kind": "CSV table", "train_counts": {c: 2 + i % 7 for i, c in enumerate(names)},
               "val_counts": {c: 1 for c in names}, "skipped": []}
    path = write_report(tmp_path, title="many", summary=summary, evaluation=evaluation, class_names=names)
    page = parse_report(path)
    text = " ".join(page.text)
    assert "Confusion matrix: the 30 most-confused classes of 5,000" in page.headings
    assert "4,970 classes left out" in text and "Most often confused pairs" in page.headings
    assert "Per-class precision and recall: the 20 worst classes of 5,000" in page.headings
    assert "4,980 left out" in text
    assert "the 10 smallest and 10 largest by training examples are shown, 4,980 left out" in text
    assert len(decoded_pngs(page)) == 3  # the block, the spread of the scores, the worst classes' bars
    assert path.stat().st_size < 500_000
    shown_rows = [c for c in names if c in text]
    assert len(shown_rows) < 120  # block, pairs, worst classes and class counts: never a row per class


def test_eval_prints_the_worst_classes_and_the_most_confused_pairs_for_many_classes():
    n = 300
    names = [f"k{i}" for i in range(n)]
    result = classification_metrics(*outputs_for(n, 1500), names)
    table = format_table(result)
    assert "300 classes: the 20 with the lowest F1 are shown, 280 left out" in table
    assert "most often confused" in table and "confusion matrix (rows" not in table
    assert len(table.splitlines()) < 60


def test_eval_still_prints_the_whole_matrix_for_few_classes():
    names = ["a", "b", "c"]
    table = format_table(classification_metrics(*outputs_for(3, 60), names))
    assert "confusion matrix (rows: true, columns: predicted)" in table

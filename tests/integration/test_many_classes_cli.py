"""A real run with 5,000 classes (issue 27, class 9): `torchwise train` on a CSV of small rows ends with a
report and an eval.json of summaries (the most-confused classes' block, the worst classes, the smallest and
largest classes), each saying what it left out; `torchwise eval` prints the same summaries. No timing is
asserted: the summaries are the point (the whole 5,000 x 5,000 matrix took minutes to draw and 226 MB of
JSON)."""
from __future__ import annotations

import csv
import json
import random

from conftest import run_cli
from testkit.report_html import decoded_pngs, parse_report

N_CLASSES = 5000


def test_a_run_with_5000_classes_reports_summaries(tmp_path):
    rng = random.Random(0)
    data = tmp_path / "many.csv"
    with data.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["a", "b", "label"])
        for i in range(N_CLASSES * 3):
            c = i % N_CLASSES
            writer.writerow([round(rng.random() + c * 0.001, 4), round(rng.random(), 4), f"c{c:04d}"])
    run_dir = tmp_path / "run"
    proc = run_cli("train", "--data", data, "--target", "label", "--out", run_dir, "--epochs", "1",
                   "--set", "train.threads=1", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert "confusion" not in evaluation and len(evaluation["per_class"]) == N_CLASSES
    top = evaluation["confusion_top"]
    assert len(top["classes"]) == 30 and top["classes_left_out"] == N_CLASSES - 30
    assert len(top["matrix"]) == 30 and all(len(row) == 31 for row in top["matrix"])
    assert (run_dir / "eval.json").stat().st_size < 5_000_000

    page = parse_report(run_dir / "report.html")
    text = " ".join(page.text)
    assert "Confusion matrix: the 30 most-confused classes of 5,000" in page.headings
    assert "4,970 classes left out" in text
    assert "Per-class precision and recall: the 20 worst classes of 5,000" in page.headings
    assert "Class counts" in page.headings and "4,980 left out" in text
    assert "confusion matrix of the most-confused classes" in page.alts and len(decoded_pngs(page)) >= 5
    assert (run_dir / "report.html").stat().st_size < 1_000_000

    proc = run_cli("eval", "--run", run_dir, "--json", tmp_path / "again.json", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "5,000 classes: the 20 with the lowest F1 are shown, 4,980 left out" in proc.stdout
    assert "most often confused" in proc.stdout and len(proc.stdout.splitlines()) < 80

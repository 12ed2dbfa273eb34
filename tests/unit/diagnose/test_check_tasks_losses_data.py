"""The loss and data detectors judge within the task the script is doing (torchwise/diagnose/checks/losses.py,
data.py): language models, heads far larger than the label range, probabilities in every shape, log_softmax
into cross_entropy, nll_loss on raw scores, index masks over one full-graph forward, and imbalance that may be
by design. Every test runs the real checker on a real script (the zoo's, or a variant written here)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F


from conftest import TESTS_DIR, run_checked_quietly


ZOO = TESTS_DIR / "check_zoo"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run(path: Path):
    result = run_checked_quietly(path)
    assert result.error is None, result.traceback
    return result


def by_id(result) -> dict:
    return {f.id: f for f in result.findings}


def variant(tmp_path: Path, src: Path, *swaps: tuple[str, str]) -> Path:
    text = src.read_text()
    for old, new in swaps:
        assert old in text, old
        text = text.replace(old, new)
    out = tmp_path / src.name
    out.write_text(text)
    return out


# --------------------------------------------------------------------------- 1. language models

@pytest.mark.parametrize("name", ["word_lm_zipf_tokens", "rnn_lm_seq_first_nll"])
def test_language_model_targets_are_a_vocabulary_not_a_label_set(name):
    found = by_id(run(ZOO / "correct" / f"{name}.py"))
    assert not {"label-imbalance", "output-classes-mismatch", "labels-not-zero-based"} & set(found), found


def test_language_model_without_embedding_is_recognised_by_its_sequence_output(tmp_path):
    """One-hot float inputs (no nn.Embedding): the (B, T, V) output flattened to (B*T, V) is the evidence."""
    script = variant(tmp_path, ZOO / "correct" / "word_lm_zipf_tokens.py",
                     ("self.emb = nn.Embedding(V, 32)", "self.emb = nn.Linear(V, 32)"),
                     ("self.rnn(self.emb(idx))", "self.rnn(self.emb(F.one_hot(idx, V).float()))"))
    found = by_id(run(script))
    assert not {"label-imbalance", "output-classes-mismatch"} & set(found), found


# --------------------------------------------------------------------------- 2. heads far larger than the labels

def test_head_of_1000_outputs_on_10_classes_is_caught_from_few_labels():
    f = by_id(run(ZOO / "buggy" / "head_1000_outputs_10_classes.py"))["output-classes-mismatch"]
    assert f.evidence["outputs"] == 1000 and f.evidence["classes_seen"] == 10
    assert f.evidence["labels_seen"] < 10 * 1000  # the old rule needed 10 labels per output


@pytest.mark.parametrize("batches, flagged", [(3, False), (15, True)])
def test_one_extra_output_needs_evidence_in_proportion(tmp_path, batches, flagged):
    """11 outputs for 10 classes: a few hundred labels cannot tell, a couple of thousand can."""
    script = variant(tmp_path, ZOO / "buggy" / "head_1000_outputs_10_classes.py",
                     ("nn.Linear(64, 1000)", "nn.Linear(64, 11)"),
                     ("range(0, 960, 64)", f"range(0, {64 * batches}, 64)"))
    found = by_id(run(script))
    assert ("output-classes-mismatch" in found) == flagged, found


# --------------------------------------------------------------------------- 3. probabilities in every shape

def test_softmax_over_a_size_one_dim_gives_ones_and_is_caught():
    f = by_id(run(ZOO / "buggy" / "softmax_no_dim_on_hidden_state.py"))["softmax-before-loss"]
    assert f.evidence["input_form"] == "ones" and "size 1" in f.message


def test_softmax_over_the_batch_dim_is_caught(tmp_path):
    script = variant(tmp_path, ZOO / "buggy" / "softmax_no_dim_on_hidden_state.py",
                     ("return F.softmax(self.fc(h_n))", "return F.softmax(self.fc(h_n[0]), dim=0)"),
                     ("model(x).squeeze(0)", "model(x)"))
    f = by_id(run(script))["softmax-before-loss"]
    assert f.evidence["input_form"] == "probs-dim0"


def test_softmax_over_classes_of_sequence_logits_is_caught(tmp_path):
    """(B, C, T) probabilities: the class dim is 1 whatever the rank."""
    script = variant(tmp_path, ZOO / "buggy" / "nll_loss_on_raw_sequence_logits.py",
                     ("F.nll_loss(model(x), tag_of[x])", "F.cross_entropy(model(x).softmax(1), tag_of[x])"))
    f = by_id(run(script))["softmax-before-loss"]
    assert f.evidence["input_form"] == "probs" and f.evidence["input_shape"][1] == 6


# --------------------------------------------------------------------------- 4. log_softmax into cross_entropy

def test_cross_entropy_of_log_softmax_is_cross_entropy_of_logits():
    """Why the finding is an info hint: log_softmax is idempotent, so value and gradient are unchanged."""
    torch.manual_seed(0)
    x = torch.randn(16, 7, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 7, (16,))
    a = F.cross_entropy(x, y)
    (ga,) = torch.autograd.grad(a, x)
    b = F.cross_entropy(F.log_softmax(x, dim=1), y)
    (gb,) = torch.autograd.grad(b, x)
    assert torch.allclose(a, b) and torch.allclose(ga, gb)


def test_log_softmax_into_cross_entropy_is_an_info_hint():
    result = run(ZOO / "buggy" / "log_softmax_into_cross_entropy.py")
    f = by_id(result)["log-softmax-into-cross-entropy"]
    assert f.severity == "info" and f.maybe_fine and not f.counts
    assert [g for g in result.findings if g.counts] == []


def test_nll_loss_on_log_softmax_is_fine_and_on_raw_scores_is_caught(tmp_path):
    f = by_id(run(ZOO / "buggy" / "nll_loss_on_raw_sequence_logits.py"))["wrong-loss-for-task"]
    assert f.evidence["reason"] == "nll-raw-logits"
    fixed = variant(tmp_path, ZOO / "buggy" / "nll_loss_on_raw_sequence_logits.py",
                    ("F.nll_loss(model(x), tag_of[x])", "F.nll_loss(model(x).log_softmax(1), tag_of[x])"))
    assert by_id(run(fixed)) == {}


# --------------------------------------------------------------------------- 5. one input shared by masks

def test_masks_over_one_graph_forward_are_not_overlap():
    assert "train-val-overlap" not in by_id(run(ZOO / "correct" / "gcn_transductive_masks.py"))


def test_boolean_masks_over_one_graph_forward_are_not_overlap(tmp_path):
    script = variant(tmp_path, ZOO / "correct" / "gcn_transductive_masks.py",
                     ("idx_train, idx_val, idx_test = perm[:60], perm[60:160], perm[160:]",
                      "masks = torch.zeros(3, N, dtype=torch.bool)\n"
                      "masks[0, perm[:60]], masks[1, perm[60:160]], masks[2, perm[160:]] = True, True, True\n"
                      "idx_train, idx_val, idx_test = masks[0], masks[1], masks[2]"))
    assert "train-val-overlap" not in by_id(run(script))


def test_overlapping_masks_are_caught_on_their_rows():
    f = by_id(run(ZOO / "buggy" / "gcn_val_mask_overlaps_train.py"))["train-val-overlap"]
    assert f.evidence["overlapping"] == 60 and f.evidence["evaluated"] == 120 and "masks" in f.message


def test_evaluating_the_whole_training_input_is_still_overlap(tmp_path):
    """Full-batch training, then 'validation' on a copy of the very same rows, no masks: still caught."""
    script = variant(tmp_path, ZOO / "buggy" / "gcn_val_mask_overlaps_train.py",
                     ("loss = F.cross_entropy(out[idx_train], labels[idx_train])",
                      "loss = F.cross_entropy(out, labels)"),
                     ("        out = model(features, adj)\n        acc", "        out = model(features.clone(), adj)\n        acc"),
                     ("acc = (out[idx_val].argmax(1) == labels[idx_val])", "acc = (out.argmax(1) == labels)"))
    assert "train-val-overlap" in by_id(run(script))


_COPIES = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
cats, nums = torch.randint(0, 2, (1500, 3)), torch.randn(1500, 4)      # first input: only 8 distinct rows
y = ((cats.sum(1) + (nums[:, 0] > 0).long()) >= 2).long()
train = TensorDataset(cats[:1000], nums[:1000], y[:1000])
copies = torch.arange(COPIES)                                            # records that are in both parts
val_idx = torch.cat([torch.arange(1000, 1000 + 500 - COPIES), copies])
val = TensorDataset(cats[val_idx], nums[val_idx], y[val_idx])
net = nn.Sequential(nn.Linear(7, 16), nn.ReLU(), nn.Linear(16, 2))
model = type("Table", (nn.Module,), {"forward": lambda self, c, x: net(torch.cat([c.float(), x], 1))})()
model.net = net
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    for c, x, t in DataLoader(train, batch_size=50, shuffle=True):
        opt.zero_grad()
        nn.functional.cross_entropy(model(c, x), t).backward()
        opt.step()
    with torch.no_grad():
        acc = sum((model(c, x).argmax(1) == t).sum().item() for c, x, t in DataLoader(val, batch_size=100))
"""


@pytest.mark.parametrize("copies, severity", [(0, None), (25, "info"), (150, "error")])
def test_a_sample_is_all_its_inputs_and_a_few_copied_records_are_a_hint(tmp_path, copies, severity):
    """Rows are told apart by every input of the forward (a table's 8 distinct categorical rows alone would match
    every evaluated row); 5% of the evaluated records also in training is what data with duplicate records gives
    after a correct split (a hint), 30% is a split that overlaps (an error)."""
    script = tmp_path / "copies.py"
    script.write_text(_COPIES.replace("COPIES", str(copies)))
    f = by_id(run(script)).get("train-val-overlap")
    assert (f.severity if f else None) == severity, f and f.render()
    if f is not None:
        assert f.evidence["overlapping"] == copies and f.evidence["evaluated"] == 500


# --------------------------------------------------------------------------- 6. imbalance: a hint unless it bites

def test_imbalance_the_model_ignores_is_a_warning():
    f = by_id(run(ZOO / "buggy" / "imbalanced_minority_never_predicted.py"))["label-imbalance"]
    assert f.severity == "warning" and f.evidence["rare_class_predicted_recently"] == 0
    assert "ignore" in f.message


def test_imbalance_the_model_handles_is_an_info_hint(tmp_path):
    script = variant(tmp_path, ZOO / "buggy" / "imbalanced_minority_never_predicted.py",
                     ("y.unsqueeze(1) * 0.3", "y.unsqueeze(1) * 4.0"), ("lr=1e-3", "lr=1e-2"))
    f = by_id(run(script))["label-imbalance"]
    assert f.severity == "info" and not f.counts and f.evidence["rare_class_predicted_recently"] > 0
    assert "valid choice" in f.maybe_fine
    assert re.search(r"In the last 10 batches checked the model predicted class 1 \d+ times \(they held \d+ of its "
                     r"samples\)\.$", f.message), f.message


def test_an_imbalance_hint_says_what_it_counted_and_never_contradicts_itself(tmp_path):
    """Issue 28: the hint said "the model does predict class 0 ('five') (0 times for its 3 samples ...)" and
    quoted the checked batches' labels as if they were the data's. Here the model is made to predict only the
    common class for 20 steps: an info hint (too early to tell), which says so, and what it counted."""
    script = variant(tmp_path, ZOO / "buggy" / "imbalanced_minority_never_predicted.py",
                     ("range(3)", "range(1)"), ("n = 4000", "n = 2000"),
                     ("opt = torch", "model[2].bias.data = torch.tensor([6.0, -6.0])\nopt = torch"))
    f = by_id(run(script))["label-imbalance"]
    assert f.severity == "info" and f.evidence["rare_class_predicted_recently"] == 0
    batches, labels = f.evidence["labels_seen"] // 100, f.evidence["labels_seen"]
    assert f"in the {labels} labels of the {batches} training batches checked (the checker counts the batches it " \
           "checks)" in f.message, f.message
    assert "did not predict class 1" in f.message and "not yet a warning: only 20 optimizer steps" in f.message
    assert "does predict" not in f.message + (f.maybe_fine or ""), f.maybe_fine


def test_the_rare_samples_the_hint_quotes_are_the_checked_batches_own(tmp_path):
    """4 checked batches, all among the last 10: the rare class's samples in them are its count over them (the
    first batch's counts were the running total's tensor, added to in place, and counted twice or more)."""
    script = variant(tmp_path, ZOO / "buggy" / "imbalanced_minority_never_predicted.py",
                     ("range(3)", "range(1)"), ("n = 4000", "n = 400"), ("< 0.02", "< 0.06"))
    f = by_id(run(script))["label-imbalance"]
    assert f.evidence["labels_seen"] == 400 and "of the 4 training batches checked" in f.message, f.message
    assert f.evidence["rare_class_samples_recently"] == f.evidence["counts"][1], f.evidence
    assert f"(they held {f.evidence['counts'][1]} of its samples)" in f.message, f.message

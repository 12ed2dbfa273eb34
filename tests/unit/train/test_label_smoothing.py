"""Label smoothing as the Trainer builds it, nn.CrossEntropyLoss(label_smoothing=eps): its arithmetic
against the formula (1 - eps) * CE + eps * mean over classes of -log_softmax, worked out by hand, with hard
labels and with the soft (mixed) targets of MixUp / CutMix."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from torchwise.train.recipes.mixing import MixedTarget, mixed_loss


def _log_softmax_by_hand(row: list[float]) -> list[float]:
    top = max(row)
    log_sum = top + math.log(sum(math.exp(v - top) for v in row))
    return [v - log_sum for v in row]


def _smoothed_by_hand(logits: list[list[float]], targets: list[list[float]], eps: float) -> float:
    """Mean over the batch of (1 - eps) * sum_c -t_c log p_c + eps * mean_c(-log p_c)."""
    total = 0.0
    for row, target in zip(logits, targets):
        log_p = _log_softmax_by_hand(row)
        ce = -sum(t * lp for t, lp in zip(target, log_p))
        total += (1 - eps) * ce + eps * sum(-lp for lp in log_p) / len(row)
    return total / len(logits)


LOGITS = [[2.0, -1.0, 0.5, 0.0], [0.1, 0.2, 3.0, -2.0], [-0.5, 1.5, 1.5, 0.25]]


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_hard_labels_follow_the_formula(eps):
    labels = [0, 2, 1]
    one_hot = [[1.0 if c == y else 0.0 for c in range(4)] for y in labels]
    got = nn.CrossEntropyLoss(label_smoothing=eps)(torch.tensor(LOGITS, dtype=torch.float64), torch.tensor(labels))
    assert got.item() == pytest.approx(_smoothed_by_hand(LOGITS, one_hot, eps), rel=1e-12)


def test_the_smoothed_loss_is_the_cross_entropy_with_the_smoothed_distribution():
    # the same formula read another way: CE against (1 - eps) * one_hot + eps / C
    eps, labels = 0.1, [3, 0, 2]
    smoothed = [[(1 - eps) * (c == y) + eps / 4 for c in range(4)] for y in labels]
    by_hand = sum(-sum(t * lp for t, lp in zip(ts, _log_softmax_by_hand(row)))
                  for row, ts in zip(LOGITS, smoothed)) / 3
    got = nn.CrossEntropyLoss(label_smoothing=eps)(torch.tensor(LOGITS, dtype=torch.float64), torch.tensor(labels))
    assert got.item() == pytest.approx(by_hand, rel=1e-12)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_soft_mixed_targets_follow_the_formula_both_ways(eps):
    logits = torch.tensor(LOGITS, dtype=torch.float64)
    mixed = MixedTarget(torch.tensor([0, 2, 1]), torch.tensor([1, 0, 1]), 0.7, num_classes=4)
    soft = mixed.soft_labels(dtype=torch.float64)
    loss = nn.CrossEntropyLoss(label_smoothing=eps)
    by_hand = _smoothed_by_hand(LOGITS, soft.tolist(), eps)
    # torch's loss on the (N, C) probabilities, and the MixedTarget's lam-weighted pair of hard-label losses
    assert loss(logits, soft).item() == pytest.approx(by_hand, rel=1e-12)
    assert mixed_loss(loss, logits, mixed).item() == pytest.approx(by_hand, rel=1e-12)


def test_smoothing_keeps_a_confident_right_answer_from_a_zero_loss():
    logits = torch.tensor([[20.0, 0.0, 0.0]], dtype=torch.float64)
    plain = nn.CrossEntropyLoss()(logits, torch.tensor([0])).item()
    smoothed = nn.CrossEntropyLoss(label_smoothing=0.1)(logits, torch.tensor([0])).item()
    assert plain < 1e-8 and smoothed == pytest.approx(0.1 * (2 * 20.0) / 3, rel=1e-6)

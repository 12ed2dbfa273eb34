"""What a detector declares about itself: the catalog text a person reads, the evidence it needs, the kinds of
training objective it can judge, the harm it requires before it warns, and which findings it explains.

Objective kinds (decided per optimizer by diagnose/objective.py from what the run does, never from names):

    supervised      loss functions against targets that come from the data (class ids, values, masks)
    language-model  a supervised loss whose targets are token ids encoded over the output's vocabulary
    reconstruction  loss functions whose target is the model's own input (an autoencoder)
    generative      a reconstruction term plus terms that are no loss function (a VAE's KL term)
    adversarial     loss functions against constant real/fake labels (a GAN's two players)
    contrastive     targets made by the loss itself (class 0 for every row, arange(N)) or a metric loss (triplet)
    bootstrapped    targets computed from a model's output (a DQN's TD target, distillation, pseudo-labels)
    custom          no loss function against targets at all (a policy gradient, a WGAN critic, a hand-written sum)
    unknown         no backward() was looked at closely enough to tell

Only the first three are fixed objectives, whose loss is supposed to go down over the run; a detector that reads
the loss curve declares FIXED_OBJECTIVES and says "not judged" elsewhere.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

OBJECTIVE_KINDS = ("supervised", "language-model", "reconstruction", "generative", "adversarial", "contrastive",
                   "bootstrapped", "custom", "unknown")
FIXED_OBJECTIVES: frozenset[str] = frozenset({"supervised", "language-model", "reconstruction"})
ALL_OBJECTIVES: frozenset[str] = frozenset(OBJECTIVE_KINDS)
# detectors of class-index targets: they judge each loss call whose targets come from the data (a contrastive
# loss's class 0, a GAN's constant labels, a TD target and a reconstruction target are never labels)
LABELLED_TARGETS: frozenset[str] = frozenset({"supervised", "language-model"})
# detectors of a validation set: the objectives whose training data is a data set, so that evaluating on samples of
# it scores the model on what it was fitted to. A return-driven objective (a policy gradient, a TD target: custom,
# bootstrapped) trains on states the policy visits in its environment, and its evaluation plays episodes in that
# environment, whose states recur by design (a seeded reset, a deterministic start); a GAN is scored by its samples
DATA_SET_OBJECTIVES: frozenset[str] = frozenset({"supervised", "language-model", "reconstruction", "generative",
                                                 "contrastive"})
SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Detector:
    id: str
    severity: str        # "error": the result is wrong; "warning": this run is harmed; "info": may be by design
    title: str
    why: str
    fix: str             # code, as the user would write it
    maybe_fine: str      # for an info hint (or a warning shown as info without harm): why it may be by design
    evidence: str        # what the run must show (how it is detected), printed by `torchwise check --list`
    applies_to: frozenset[str]   # the objective kinds it judges
    harm: str            # warning/error: the harm this run must show, or why it is wrong whatever happens
    explains: tuple[str, ...]    # findings this one explains: only the cause is reported
    decided_in: str      # the module (under torchwise/diagnose/) whose code decides it
    # for a pattern that is often harmless: (finding, the ids found in this run, the watcher) -> whether this run
    # shows the harm; without it the finding is shown as an info hint with `maybe_fine`
    harm_seen: Callable[[Any, set, Any], bool] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fix", self.fix.strip("\n"))
        if self.severity not in SEVERITIES:
            raise ValueError(f"{self.id}: severity must be one of {SEVERITIES}, not {self.severity!r}")
        if not self.applies_to or not self.applies_to <= ALL_OBJECTIVES:
            raise ValueError(f"{self.id}: applies_to must be a non-empty set of {OBJECTIVE_KINDS}")
        if self.severity != "info" and not self.harm:
            raise ValueError(f"{self.id}: a {self.severity} detector must state the harm it requires")
        if self.harm_seen is not None and not self.maybe_fine:
            raise ValueError(f"{self.id}: a detector that needs harm to warn says why it may be fine without it")

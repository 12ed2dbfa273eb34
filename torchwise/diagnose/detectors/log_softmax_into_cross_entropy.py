"""log-softmax-into-cross-entropy: cross_entropy is given log-probabilities (a log_softmax output)."""
from __future__ import annotations

from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES, Detector

DETECTOR = Detector(
    id='log-softmax-into-cross-entropy',
    severity='info',
    title='cross_entropy is given log-probabilities (a log_softmax output)',
    why=('cross_entropy (nn.CrossEntropyLoss) applies log_softmax itself. log_softmax is idempotent (the logsumexp '
         'of log-probabilities is 0), so cross_entropy(log_softmax(x)) equals cross_entropy(x) in value and in '
         'gradient: the second log_softmax is redundant, not wrong. It usually means a model written for nll_loss '
         'is trained with cross_entropy, and its outputs are log-probabilities where a reader expects logits.'),
    fix="""
def forward(self, x):
    return self.fc(x)              # raw scores: cross_entropy applies log_softmax itself
loss = F.cross_entropy(model(x), y)
# or keep log_softmax in forward and use the loss written for it:
loss = F.nll_loss(model(x), y)     # nll_loss(log_softmax(x), y) == cross_entropy(x, y)
""",
    maybe_fine=("cross_entropy(log_softmax(x)) == cross_entropy(x) in value and gradient, so training is not "
                "affected; only the model's outputs are log-probabilities where a reader expects logits."),
    evidence=('every value of the cross_entropy input is <= 0 and its logsumexp over the class dim is 0 (a '
              'log_softmax output), in 80% of 2+ checked calls'),
    applies_to=ALL_OBJECTIVES,
    harm=(""),
    explains=(),
    decided_in='checks/losses.py',
)

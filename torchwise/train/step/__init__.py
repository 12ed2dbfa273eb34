"""The training step: how a batch becomes a loss and an optimizer step, its wrappers, precision and the failures it raises."""

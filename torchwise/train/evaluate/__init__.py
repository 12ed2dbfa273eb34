"""Validation and its judgement: the metrics streamed batch by batch, the monitor ("is this better"), early stopping, the metrics log."""

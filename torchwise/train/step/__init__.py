"""The training step: how a batch becomes a loss and an optimizer step (body.py), the wrappers around it,
the precision it runs in and the failures its callers act on. docs/ARCHITECTURE.md maps train/'s rooms."""

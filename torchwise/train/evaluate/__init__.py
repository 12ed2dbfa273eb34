"""Validation and its verdicts: metrics streamed batch by batch, "is this better" (monitor.py), early
stopping, and each evaluation's row sent to the loggers. docs/ARCHITECTURE.md maps train/'s rooms."""

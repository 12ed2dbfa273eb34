"""The speed switches (fast=, fast.py) and what they drive: CUDA graphs, prefetch, activation
checkpointing, profiling, and the process-wide switches put back. docs/ARCHITECTURE.md maps train/'s rooms."""

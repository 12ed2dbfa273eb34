"""The speed switches (fast=) and what they drive: compile, CUDA graphs, prefetch, checkpointed activations, profiling."""

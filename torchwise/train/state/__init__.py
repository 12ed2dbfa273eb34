"""What a run keeps and restores: checkpoints, run files, the loop's state, RNG state, resumable loaders, Ctrl-C."""

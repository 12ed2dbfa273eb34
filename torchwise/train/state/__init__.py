"""What a run keeps and gets back: checkpoints, run files, the loop's state, RNG state, loaders that
resume mid-epoch, and Ctrl-C saved as a resumable stop. docs/ARCHITECTURE.md maps train/'s rooms."""

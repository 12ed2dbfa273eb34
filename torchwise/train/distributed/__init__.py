"""Several processes: DDP under torchrun (process_group.py) and FSDP sharding (sharding.py).
docs/ARCHITECTURE.md maps train/'s rooms."""

"""Several processes: DDP under torchrun (process_group.py) and FSDP sharding (sharding.py)."""

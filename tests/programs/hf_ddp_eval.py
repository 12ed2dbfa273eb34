"""The Hugging Face example's validation metrics, in one process or under torchrun, for the DDP test.

usage: hf_ddp_eval.py OUT_JSON
Trains two steps with a learning rate of 0 (the weights stay the seeded initial ones, the same in every
process), so the final evaluation's val_loss, val_acc and torchmetrics F1 can be compared exactly
between one process and two ranks that each validate half of the data.
"""
import importlib.util
import json
import sys
from pathlib import Path

import torch

from torchwise.train.distributed import process_group as distributed


def main():
    torch.set_num_threads(1)
    example = Path(__file__).resolve().parents[2] / "examples" / "hf_text_classifier.py"
    spec = importlib.util.spec_from_file_location("example", example)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    trainer = module.build_trainer(None, lr=0.0, max_steps=2, progress=False, checks=False, tensorboard=False)
    result = trainer.fit()
    if distributed.env_from_torchrun().rank == 0:
        Path(sys.argv[1]).write_text(json.dumps({"last": result.history[-1], "world": trainer.dist.world_size}))


if __name__ == "__main__":
    main()

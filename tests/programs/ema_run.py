"""A run with a callback that has state (an EMA of the weights), for the stateful kill-and-resume test.

usage: ema_run.py OUT_DIR [--kill-at-step K] [--resume]
At the end the EMA's weights are written to OUT_DIR/ema.safetensors.
"""
import argparse
import os
import signal
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn
from torch.utils.data import TensorDataset

import torchwise


class EMA:
    """An exponential moving average of the model's weights, updated after every optimizer step."""

    def __init__(self, decay=0.9):
        self.decay, self.updates, self.shadow = decay, 0, {}

    def on_step_end(self, trainer, **_):
        with torch.no_grad():
            for name, value in trainer.model.state_dict().items():
                if not value.is_floating_point():
                    continue
                if name not in self.shadow:
                    self.shadow[name] = value.detach().clone()
                else:
                    self.shadow[name].mul_(self.decay).add_(value.detach(), alpha=1 - self.decay)
        self.updates += 1

    def state_dict(self):
        return {"decay": self.decay, "updates": self.updates, "shadow": {k: v.clone() for k, v in self.shadow.items()}}

    def load_state_dict(self, state):
        self.decay, self.updates = float(state["decay"]), int(state["updates"])
        self.shadow = {k: v.clone() for k, v in state["shadow"].items()}


def main():
    torch.set_num_threads(1)  # the runs compared are made at different moments: one thread sums in one order
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--kill-at-step", type=int)
    p.add_argument("--resume", action="store_true")
    args = p.parse_args()

    g = torch.Generator().manual_seed(0)
    x = torch.randn(384, 12, generator=g)
    y = (x[:, :3].sum(dim=1) > 0).long() + (x[:, 3] > 1).long()
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 3))
    ema = EMA()
    trainer = torchwise.Trainer(
        model, lambda params: torch.optim.AdamW(params, lr=3e-3), train_data=TensorDataset(x[:320], y[:320]),
        val_data=TensorDataset(x[320:], y[320:]), callbacks=[ema], epochs=3, batch_size=16, seed=3,
        out_dir=args.out_dir, checkpoint_every=5, resume=args.resume, scheduler="cosine", progress=False,
        checks=False, tensorboard=False)
    if args.kill_at_step is not None:
        def die(step, **_):
            if step == args.kill_at_step:
                os.kill(os.getpid(), signal.SIGKILL)

        trainer.on("step_end", die)
    result = trainer.fit()
    save_file(ema.shadow, str(Path(args.out_dir) / "ema.safetensors"))
    print("steps", result.steps, "ema_updates", ema.updates, "resumed_from", result.resumed_from)


if __name__ == "__main__":
    main()

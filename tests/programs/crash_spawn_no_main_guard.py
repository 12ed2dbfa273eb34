"""A training script that forgot `if __name__ == "__main__":` and starts DataLoader workers with spawn.

Each process (the script itself as __main__, the worker re-importing it as __mp_main__) prints
`[its __name__] ` + torchwise's translation of the real error it gets, then re-raises it.
"""
import torch
from torch.utils.data import DataLoader, TensorDataset

from torchwise.diagnose.error_translation import translate

loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=4, num_workers=1, multiprocessing_context="spawn")
try:
    for (x,) in loader:
        pass
except RuntimeError as exc:
    print(f"[{__name__}] {type(exc).__name__}: {str(exc).strip().splitlines()[0]}\n{translate(exc)}", flush=True)
    raise

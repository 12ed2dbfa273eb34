"""Progress display: a bar with loss and lr on a terminal, one clean line per epoch otherwise."""
from __future__ import annotations

import sys
from typing import Any


class Progress:
    def __init__(self, mode: bool | str, total_steps: int):
        self.is_tty = sys.stderr.isatty()
        self.enabled = bool(mode) if mode != "auto" else True
        self.bar_mode = self.enabled and self.is_tty
        self.total = total_steps
        self._bar = None

    def start(self, initial: int) -> None:
        if self.bar_mode:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, initial=initial, unit="step", dynamic_ncols=True, file=sys.stderr)

    def step(self, loss: float, lr: float) -> None:
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(loss=f"{loss:.4g}", lr=f"{lr:.3g}", refresh=False)

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def epoch_line(self, values: dict[str, Any]) -> None:
        parts = []
        for key, value in values.items():
            if value is None or (isinstance(value, float) and value != value):
                continue
            parts.append(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}")
        self.message("  ".join(parts))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

"""Validation: eval mode, inference_mode, metrics streamed batch by batch, and the model put back as it was.

`evaluate()` keeps running sums (train/evaluate/streaming_metrics.py), not the outputs, unless a plain function metric
needs them all; `outputs()` (Trainer.predict) collects the outputs, and works on batches without labels.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
from torch import nn

from torchwise.errors import OutOfMemory, out_of_memory
from torchwise.train import input_checks as checks
from torchwise.train.step.batches import move_to
from torchwise.train.step.contract import StepContract, WholeBatch
from torchwise.train.distributed.process_group import DistEnv, gather_objects, max_across, sum_across
from torchwise.train.evaluate.streaming_metrics import RunningMetrics, is_streaming, streaming_value
from torchwise.train.step.precision import Precision
from torchwise.train.state.reproducibility import capture_rng_state, restore_rng_state
from torchwise.train.distributed.sharding import is_sharded

MetricFn = Callable[[torch.Tensor, torch.Tensor], float]


class Evaluator:
    def __init__(self, model: nn.Module, loss_fn: Callable[..., torch.Tensor] | StepContract, precision: Precision,
                 device: torch.device, task: str, metrics: dict[str, MetricFn] | None,
                 dist_env: DistEnv = DistEnv()):
        self.watcher: Any = None  # set by the Trainer when checks are on
        # `model` is the plain module, never the DDP wrapper: DDP's forward may broadcast buffers, a
        # collective that would hang when ranks hold different numbers of validation batches.
        self.model, self.precision, self.device = model, precision, device
        self.contract = loss_fn if isinstance(loss_fn, StepContract) else StepContract(loss_fn, loss_given=True)
        self.loss_fn = self.contract.loss_fn
        self.task, self.metrics, self.dist = task, dict(metrics or {}), dist_env
        self.prepare_inputs: Callable[[Any], Any] | None = None  # the Trainer's batch_eval, on the device

    def run(self, batches: Iterable[Any], num_batches: int | None, on_batch: Callable[..., None], *,
            labels_optional: bool = False) -> None:
        """The model over `batches` in eval mode, `on_batch(outputs, targets, n, loss or None)` per batch;
        restores train mode and every RNG afterwards.

        A sharded (FSDP) model gathers its weights inside forward, a collective: every rank must run
        the same number of forwards, so ranks with a shorter shard repeat their last batch (and
        discard the result) until the longest shard is done."""
        lockstep = self.dist.enabled and is_sharded(self.model)
        extra = max_across(num_batches or 0, self.dist, self.device) - (num_batches or 0) if lockstep else 0
        was_training = self.model.training
        rng = capture_rng_state()  # so that validating never changes what training does next
        self.model.eval()
        if self.watcher is not None:
            self.watcher.phase("eval")
        non_blocking = self.device.type == "cuda"
        index = 0
        try:
            with torch.inference_mode(), self.precision.autocast(self.device):
                for index, batch in enumerate(batches):
                    inputs, target = self.contract.parts(move_to(batch, self.device, non_blocking),
                                                         labels_optional=labels_optional)
                    if self.prepare_inputs is not None and isinstance(inputs, tuple) \
                            and not isinstance(inputs, WholeBatch):
                        inputs = (self.prepare_inputs(inputs[0]), *inputs[1:])
                    out = self._forward(inputs, target, first=index == 0)
                    loss = None if labels_optional and target is None and not isinstance(inputs, WholeBatch) \
                        else self._loss(out, target, first=index == 0)
                    outputs, targets = self.contract.for_metrics(out, target)
                    on_batch(outputs, targets, self.contract.size(inputs, target), loss)
                for _ in range(extra):
                    self._forward(inputs, target, first=False)
        except Exception as exc:
            if isinstance(exc, checks.TorchwiseError) or not _is_oom(exc):
                raise
            raise evaluation_oom(exc, index, num_batches, self.device) from exc
        finally:
            self.model.train(was_training)
            if self.watcher is not None:
                self.watcher.phase("train")
            restore_rng_state(rng)

    def outputs(self, batches: Iterable[Any], num_batches: int | None = None, *, labels_optional: bool = False
                ) -> tuple[list[torch.Tensor], list[Any], float, int]:
        """Every batch's outputs and targets (on the CPU), the summed loss and the sample count."""
        outs: list[torch.Tensor] = []
        targets: list[Any] = []
        totals = [0.0, 0]

        def keep(out: Any, target: Any, n: int, loss: Any) -> None:
            if loss is not None:
                totals[0] += float(loss) * n
            totals[1] += n
            if isinstance(out, torch.Tensor):
                outs.append(out.detach().float().cpu())
            if target is not None:
                targets.append(target.detach().cpu() if isinstance(target, torch.Tensor) else target)

        self.run(batches, num_batches, keep, labels_optional=labels_optional)
        return outs, targets, totals[0], totals[1]

    def gathered_outputs(self, batches: Iterable[Any], num_batches: int | None = None
                         ) -> tuple[list[torch.Tensor], list[Any], float, int]:
        """outputs() of every rank's shard put together: metrics count each sample exactly once."""
        outs, targets, loss_sum, count = self.outputs(batches, num_batches)
        if not self.dist.enabled:
            return outs, targets, loss_sum, count
        parts = gather_objects((outs, targets, loss_sum, count), self.dist)
        return ([o for p in parts for o in p[0]], [t for p in parts for t in p[1]],
                sum(p[2] for p in parts), sum(p[3] for p in parts))

    def evaluate(self, batches: Iterable[Any], prefix: str = "val", num_batches: int | None = None) -> dict[str, float]:
        streamed = {name: m for name, m in self.metrics.items() if is_streaming(m)}
        functions = {name: fn for name, fn in self.metrics.items() if name not in streamed}
        for metric in streamed.values():
            metric.reset()
            if isinstance(metric, nn.Module):
                metric.to(self.device)
        running = RunningMetrics(self.task, self.device)
        kept: tuple[list[Any], list[Any]] = ([], [])  # only for function metrics, which need every output
        totals = [0.0, 0.0]

        def accumulate(out: Any, target: Any, n: int, loss: Any) -> None:
            totals[0] += float(loss) * n
            totals[1] += n
            running.update(out, target)
            for name, metric in streamed.items():
                self._update(name, metric, out, target)
            if functions and isinstance(out, torch.Tensor) and isinstance(target, torch.Tensor):
                kept[0].append(out.detach().float().cpu())
                kept[1].append(target.detach().cpu())

        self.run(batches, num_batches, accumulate)
        loss_sum, count = sum_across(totals, self.dist, self.device)
        results = {f"{prefix}_loss": loss_sum / max(count, 1)}
        results.update(running.compute(self.dist, prefix))
        for name, metric in streamed.items():
            results[f"{prefix}_{name}"] = checks.check_number(streaming_value(metric), name)
        if functions:
            results.update(self._function_metrics(functions, kept, prefix))
        return results

    @staticmethod
    def _update(name: str, metric: Any, out: Any, target: Any) -> None:
        try:
            metric.update(out, target)
        except Exception as exc:  # noqa: BLE001 - the metric is named, with its exception
            raise checks.metric_error(exc, name, out, target) from exc

    def _function_metrics(self, functions: dict[str, MetricFn], kept: tuple[list[Any], list[Any]],
                          prefix: str) -> dict[str, float]:
        outs, targets = kept
        if self.dist.enabled:
            parts = gather_objects((outs, targets), self.dist)
            outs, targets = [o for p in parts for o in p[0]], [t for p in parts for t in p[1]]
        if not outs:
            return {}
        output, target = torch.cat(outs), torch.cat(targets)
        results = {}
        for name, fn in functions.items():
            try:
                value = fn(output, target)
            except Exception as exc:  # noqa: BLE001 - the metric is named, with its exception
                raise checks.metric_error(exc, name, output, target) from exc
            results[f"{prefix}_{name}"] = checks.check_number(value, name)
        return results

    def _forward(self, inputs: Any, target: Any, first: bool) -> Any:
        contract = self.contract
        if isinstance(inputs, WholeBatch):
            return contract.loss_and_output(self.model, inputs, target)[1]
        if not first:
            return contract.forward(self.model, inputs)
        try:
            out = contract.forward(self.model, inputs)
        except Exception as exc:  # noqa: BLE001 - told with the batch's shapes
            if isinstance(exc, checks.TorchwiseError) or _is_oom(exc):
                raise
            raise checks.forward_error(exc, inputs, self.model, "first validation batch") from exc
        if contract.checks_targets:
            logits = contract.for_metrics(out, target)[0]
            checks.check_targets(logits, target, self.loss_fn, self.task, "first validation batch",
                                 strict=self.task == "classification" and checks.is_cross_entropy(self.loss_fn))
        return out

    def _loss(self, out: Any, target: Any, first: bool) -> torch.Tensor:
        try:
            return self.contract.loss_of(out, target)
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, checks.TorchwiseError) or _is_oom(exc):
                raise
            logits = self.contract.for_metrics(out, target)[0]
            checks.check_targets(logits, target, self.loss_fn, self.task, "validation data", strict=False)
            if first:
                raise checks.loss_error(exc, logits, target, "first validation batch") from exc
            raise


class EvaluationOutOfMemory(OutOfMemory, torch.OutOfMemoryError):
    """Out of memory in an evaluation or a prediction, with the remedies; also a torch.OutOfMemoryError, so
    the code that backs off on one (the batch-size finder) still sees it by its type."""


def evaluation_oom(exc: BaseException, index: int, num_batches: int | None, device: torch.device) -> OutOfMemory:
    where = f"batch {index + 1}" + (f" of {num_batches}" if num_batches else "")
    return out_of_memory(exc, f"evaluating the model ({where}, no gradients)", cls=EvaluationOutOfMemory,
                         device=str(device), fix=(
                             "evaluate in smaller batches: eval_batch_size=N (the CLI: --set "
                             "train.eval_batch_size=N, `torchwise eval --batch-size N`), half of today's or less; "
                             "precision='bf16' halves the activations on a GPU; on the CPU, close what else uses "
                             "the machine's memory (or raise the process' memory limit, ulimit -v)"))


def _is_oom(exc: BaseException) -> bool:
    from torchwise.train.step.failures import is_oom

    return is_oom(exc)


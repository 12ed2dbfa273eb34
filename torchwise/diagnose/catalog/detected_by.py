"""How each mistake is detected at run time (never from names, comments or file names).

`torchwise check --list` prints it under each entry, and every reported finding carries its line.
"""
from __future__ import annotations

DETECTED_BY: dict[str, str] = {
    "missing-zero-grad": "a tensor hook sees a new gradient arrive while .grad still holds the one step() already used, "
                         "and the next step() of that optimizer uses it, at 80%+ of one optimizer's checked steps",
    "eval-mode-missing": "a forward under no_grad, or over a loader that runs no optimizer step, with model.training "
                         "True in a model that has Dropout/BatchNorm",
    "train-mode-missing": "forward passes with gradients in eval mode, followed by optimizer.step()",
    "softmax-before-loss": "the cross_entropy/nll_loss input is in [0, 1] and sums to 1 over the class dim (or over "
                           "another dim), or is exactly 1 (0) everywhere: a softmax (log_softmax) over a dim of size 1",
    "log-softmax-into-cross-entropy": "every value of the cross_entropy input is <= 0 and its logsumexp over the class "
                                      "dim is 0 (a log_softmax output), in 80% of 2+ checked calls",
    "double-sigmoid": "the autograd node that made the input of binary_cross_entropy_with_logits (seen through "
                      "views, indexing and casts) is a sigmoid; for binary_cross_entropy, a sigmoid of a sigmoid",
    "labels-not-zero-based": "the class-index targets of cross_entropy never contain 0; the others are contiguous; "
                             "not for token targets (sequences of ids encoded over the output's vocabulary, or a "
                             "decoder fed one position at a time)",
    "output-classes-mismatch": "labels 0..k-1 seen with C > k outputs, and the chance that the C-k others are classes "
                               "(each at least a tenth as common as the rarest seen) none of which appeared among the "
                               "labels is below 1e-6; not for next-token (language-model) targets, nor for a target "
                               "that is class 0 in every row (a contrastive loss)",
    "wrong-loss-for-task": "the loss's inputs/targets: MSE/L1 on integer class labels, BCE on class ids, cross_entropy "
                           "on one output or real targets, nll_loss on positive values, MSE shapes that broadcast",
    "params-not-in-optimizer": "parameters of a called model that have .grad at step() but are in no optimizer",
    "unregistered-submodules": "a module with parameters runs inside a model's forward but is not in model.modules()",
    "no-gradient-flow": "optimizer parameters whose .grad is None at every checked step()",
    "loss-retains-graph": "a backward()'ed loss added into a total made at an earlier step; a loss tensor, or its "
                          "graph inside another tensor's, alive 3+ steps after its backward(); or an evaluation "
                          "pass's loss graphs alive at the pass's end",
    "lr-too-high": "weight update / weight norm per step, together with a loss that rises above its first value",
    "lr-too-low": "update / weight norm below 1e-4 per step, healthy (>= 1e-3) at a usual lr for the optimizer's "
                  "kind, and a flat loss",
    "exploding-gradients": "gradient norm / weight norm per tensor, per unit of loss, with a symptom (non-finite "
                           "values, a rising loss, an update larger than the weights)",
    "vanishing-gradients": "first-layer vs last-layer (gradient norm / weight norm), at sampled steps",
    "dead-relu": "share of ReLU units whose output is 0 for every sample of consecutive sampled batches (8+ samples "
                 "pooled)",
    "nonfinite-loss": "isfinite on the loss; then on every module output and operation to name where NaN/inf starts",
    "nonfinite-input": "isfinite on model inputs and loss targets",
    "unnormalized-input": "mean / standard deviation / per-feature scale of model inputs in training",
    "loss-not-decreasing": "last quarter vs first tenth of each optimizer's losses; stopped runs need a clear absence "
                           "of progress at the loss's noise (slope, 2 s.e.)",
    "val-augmentation": "the same validation item read twice (random state restored) differs, in a loader whose "
                        "samples are not trained on (its own dataset, or held-out sampler indices of the training one)",
    "train-val-overlap": "hashes of evaluated samples found among the hashes of trained samples; for one input shared "
                         "by index masks (loss on out[idx_train], evaluation on out[idx_val]), the evaluated output "
                         "rows vs the rows the training loss uses",
    "no-shuffle": "the share of training batches that contain a single class",
    "sampler-epoch-not-set": "DistributedSampler.epoch unchanged between iterations of its loader",
    "dataloader-bottleneck": "time waiting in the loader's __next__ vs the whole step",
    "pin-memory-misuse": "pin_memory=True on a loader while every model parameter is on the CPU",
    "bn-small-batch": "per BatchNorm layer in training: the batch size and the values per channel (batch x "
                      "positions); fewer than 8 samples and fewer than 64 values per channel",
    "label-imbalance": "class counts of the loss targets with no class weights: a warning when the model predicted the "
                       "rare class for none of its samples in the last 10 checked batches, else an info hint; not for "
                       "next-token (language-model) targets",
    "scheduler-stepped-per-batch": "StepLR/MultiStepLR/ExponentialLR/CosineAnnealingLR stepped several times per "
                                   "training pass, with a schedule shorter than one epoch or an LR spent (< 1/100) "
                                   "within the first half of the run",
    "plateau-on-train-loss": "ReduceLROnPlateau.step(metric) with no evaluation pass since its previous call",
    "clip-scaled-gradients": "clip_grad_norm_/clip_grad_value_ on gradients of a GradScaler-scaled backward before "
                             "scaler.unscale_() of their optimizer",
    "clip-has-no-effect": "clip_grad_norm_/clip_grad_value_ after optimizer.step() (before the next backward), or on "
                          "parameters whose .grad is None",
    "ddp-no-distributed-sampler": "a training loader without a DistributedSampler iterated while a process group "
                                  "of 2+ ranks is up",
    "cannot-overfit-batch": "a copy of the model trained on the first batch only (--overfit)",
    "symmetric-init": "a hidden Linear/Conv layer (not the model's last) whose weight rows and biases are all equal "
                      "at the first checked step and still equal 3+ optimizer steps later",
    "compare-values-not-indices": "eq/ne between the values of max/topk over a dim of a model output and an integer "
                                  "tensor",
    "eval-without-no-grad": "a model forward with gradients enabled whose graph no backward() reaches within the "
                            "next 2 optimizer steps",
    "accumulation-unscaled": "k > 1 backward() calls between two steps of one optimizer, each on a new batch (new "
                             "loader batch, or new input values for its models) and on the loss function's output "
                             "itself",
    "backward-in-autocast": "torch.is_autocast_enabled(device type) is True, for the loss's device, when backward() "
                            "starts, or for the parameters' device when optimizer.step() starts",
    "loss-average-wrong-count": "after each training pass over a loader, the numbers the script printed (4+ "
                                "significant digits) against the averages its backward() losses and batch sizes "
                                "give: equal to a wrong count's (len(dataset) vs the sampler's draw, samples vs "
                                "batches), equal to no right one's, 10%+ apart, in 2 epochs (or 1 with 6+ digits)",
    "cudnn-benchmark-varying-shapes": "torch.backends.cudnn.benchmark read at each training forward of a model with "
                                      "convolution layers; more than 8 different per-sample input shapes (the batch "
                                      "dimension left out) while it was True",
}

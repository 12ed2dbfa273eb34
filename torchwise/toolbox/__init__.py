"""The troubleshooting toolbox: model summary, memory accounting, batch-size finder, OOM recovery
and gradient checkpointing. The LR finder lives in torchwise.train.recipes.lr_find.

Nothing heavy is imported here; import the submodule you need.
"""

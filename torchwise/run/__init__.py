"""One training run from a resolved RunConfig: the library behind `torchwise train`, each trial of
`torchwise tune` and `torchwise demo`.

    from torchwise.run.train_run import train_run
    summary = train_run(config)        # config: a torchwise.config.RunConfig

Modules: directory.py (the --out and run-directory checks, publishing the staged run files),
resume.py (which settings a resumed run may change, and the same-data check), trainer_setup.py
(the optimizer, the Trainer settings and the Trainer a run config describes; lr-find builds its
Trainer there too), scores.py (validation metrics and the worst examples, shared with `torchwise
eval`), final_eval.py (the final weights scored into eval.json, and report.html), log_lines.py (what a run
says), train_run.py (train_run: the run's stages in their order). Nothing here imports torch at
import time: the CLI imports these modules to answer --help.
"""

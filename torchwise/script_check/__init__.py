"""`torchwise check -- python train.py`: a user's own script run under the checker.

runner.py runs the script in this process with the Watcher (diagnose/) attached, follow.py follows the
processes it spawns, sanity.py is the overfit-one-batch test (it drives the Trainer's own step body, so
this package sits above train/ while the Watcher and its detectors sit below it).
"""

"""`torchwise demo`: the whole chain on real data, in well under a minute on a laptop CPU.

Writes scikit-learn's bundled 8x8 digits (1,797 images, no download) as PNG files in an image
folder, then runs exactly what `torchwise train --data DIR/digits --out DIR/run` runs, with the
built-in small CNN and settings that suit digits, and prints where the report is and what to try
next.
"""
from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
from pathlib import Path

# Settings for digits, as --set overrides so the user can copy the exact command. The augmentation is
# the default's: data.*=auto already chooses no flips (gray images: a flipped 2 or 7 is not a digit),
# mild crops and no validation crop (8x8 has no margin to lose), and the data line says so, so the
# demo shows the recipe a user's own folder gets.
# - one CPU thread: the model is so small that splitting each op across threads costs more than it
#   saves, and on a shared machine a second busy thread made each step ~10x slower (measured).
DEMO_SETTINGS = [
    "train.scheduler=onecycle",
    "train.threads=1",
]
DEMO_FLAGS = ["--model", "smallcnn", "--epochs", "8", "--batch-size", "64", "--lr", "0.005", "--seed", "0"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="torchwise-demo", metavar="DIR",
                        help="where the digits and the run go (default: ./torchwise-demo)")
    parser.add_argument("--epochs", metavar="N", help="default 8")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from torchwise.cli import train_command as train_cmd
    from torchwise.data.digits import write_digits
    from torchwise.cli.export_command import export_verify_predict
    from torchwise.run.train_run import train_run

    out = Path(args.out)
    started = time.perf_counter()
    digits = write_digits(out / "digits")
    print(f"demo: wrote scikit-learn's 1,797 8x8 digits as PNG files under {digits}/<digit>/")
    run_dir = out / "run"
    # Re-running the demo replaces its own previous run (and only a torchwise run: config.yaml marks it).
    if (run_dir / "config.yaml").is_file():
        shutil.rmtree(run_dir)
    argv = ["--data", str(digits), "--out", str(run_dir), *DEMO_FLAGS]
    if args.epochs:
        argv[argv.index("--epochs") + 1] = str(args.epochs)
    for item in DEMO_SETTINGS:
        argv += ["--set", item]
    if args.quiet:
        argv.append("--quiet")
    print("demo: torchwise train " + " ".join(shlex.quote(a) for a in argv))
    parser = argparse.ArgumentParser(prog="torchwise train")
    train_cmd.add_arguments(parser)
    summary = train_run(train_cmd.resolve_config(parser.parse_args(argv)))
    accuracy = summary["evaluation"]["accuracy"]
    # The chain's last links: export to ONNX, verify it against PyTorch with onnxruntime, and predict
    # one validation image from the .onnx file alone.
    print("\ndemo: export + verification + one prediction")
    exported = export_verify_predict(run_dir)
    elapsed = time.perf_counter() - started
    python = "torchwise" if Path(sys.argv[0]).name == "torchwise" else f"{Path(sys.executable).name} -m torchwise"
    print(f"\ndemo: finished in {elapsed:.1f} s; validation accuracy {accuracy:.2%}")
    if exported["ok"]:
        print(f"demo: ONNX model {exported['onnx']} matches PyTorch (max abs error {exported['max_abs_err']:.1e})")
    print(f"demo: open the report: {summary['report']}")
    print("\nnext, try:")
    print(f"  {python} eval --run {run_dir}")
    print(f"  {python} predict {exported['onnx'] or run_dir} {digits / '7'}   # a folder of images, top-3 each")
    print(f"  {python} check -- python your_train.py     # find the silent mistakes in your own script")
    print(f"  {python} train --out {run_dir} --resume        # after an interruption (Ctrl-C): continue where it stopped")
    print(f"  {python} train --config {run_dir / 'config.yaml'} --model mlp --out {out / 'run-mlp'}"
          "   # same settings, another model")
    print(f"  tensorboard --logdir {run_dir / 'tb'}")
    print("  your own data: torchwise train --data FOLDER_OF_CLASS_FOLDERS --out runs/mine"
          "   (or --data table.csv --target COLUMN)")
    return 0

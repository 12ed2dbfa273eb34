"""DDP with real processes: torchrun, two gloo ranks on the CPU."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import torchwise
from torchwise.train.distributed.process_group import free_port

from conftest import TESTS_DIR

SCRIPT = TESTS_DIR / "programs" / "ddp_run.py"
sys.path.insert(0, str(SCRIPT.parent))
import ddp_run  # noqa: E402  (the same data and model as the runs)


def torchrun(nproc, out_dir, *args, timeout=240):
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           f"--master-port={free_port()}", str(SCRIPT), str(out_dir), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def single(out_dir, *args):
    return subprocess.run([sys.executable, str(SCRIPT), str(out_dir), *args], capture_output=True, text=True,
                          timeout=240)


def result(out_dir):
    return json.loads((Path(out_dir) / "result.json").read_text())


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    proc = torchrun(2, out, "--batch", "16")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, proc


def test_two_ranks_with_batch_b_match_one_process_with_batch_2b(two_rank_run, tmp_path):
    ddp_dir, proc = two_rank_run
    assert "2 processes (DDP)" in proc.stderr
    one = single(tmp_path, "--batch", "32")
    assert one.returncode == 0, one.stderr
    ddp, ref = load_file(str(ddp_dir / "final" / "model.safetensors")), load_file(str(tmp_path / "final" / "model.safetensors"))
    assert set(ddp) == set(ref) == {"0.weight", "0.bias", "2.weight", "2.bias"}  # no 'module.' prefix
    for key in ref:
        torch.testing.assert_close(ddp[key], ref[key], rtol=1e-4, atol=1e-5)
    assert result(ddp_dir)["steps"] == result(tmp_path)["steps"] == 2 * 1536 // 32
    # every rank ends with the same weights
    r0, r1 = load_file(str(ddp_dir / "rank0.safetensors")), load_file(str(ddp_dir / "rank1.safetensors"))
    assert all(torch.equal(r0[k], r1[k]) for k in r0)


def test_validation_over_uneven_shards_counts_every_sample_once(two_rank_run):
    ddp_dir, _ = two_rank_run
    last = result(ddp_dir)["history"][-1]  # 101 validation samples: shards of 51 and 50
    model = ddp_run.model()
    torchwise.load_model(ddp_dir / "final" / "model.safetensors", model)
    _, val = ddp_run.data()
    metrics = torchwise.Trainer(model, train_data=val, val_data=val, device="cpu", progress=False).evaluate()
    assert last["val_acc"] == pytest.approx(metrics["val_acc"], abs=1e-9)
    assert last["val_loss"] == pytest.approx(metrics["val_loss"], rel=1e-6)
    assert (ddp_dir / "metrics.csv").read_text().count("\n") == 3  # header + 2 epochs, written by rank 0 only


def test_nonfinite_loss_on_one_rank_is_skipped_by_all_ranks(tmp_path):
    proc = torchrun(2, tmp_path, "--epochs", "1", "--nan-rank", "1", "--nan-call", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rank 0 done: steps 48 skipped 1" in proc.stdout and "rank 1 done: steps 48 skipped 1" in proc.stdout
    assert "step 3: non-finite loss on another rank" in proc.stderr
    r0, r1 = load_file(str(tmp_path / "rank0.safetensors")), load_file(str(tmp_path / "rank1.safetensors"))
    assert all(torch.equal(r0[k], r1[k]) and torch.isfinite(r0[k]).all() for k in r0)


def test_a_killed_rank_ends_the_run_with_an_error_instead_of_a_hang(tmp_path):
    # A hang is what this guards against: the survivor must end, not wait forever in a collective. The
    # subprocess limit (generous, so a loaded machine passes) is the test, not a measured duration.
    try:
        proc = torchrun(2, tmp_path, "--epochs", "1", "--die-rank", "1", "--die-step", "5", timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("the surviving rank hung after its peer was killed (no exit within 180 s)")
    assert proc.returncode != 0
    assert "Signal 9 (SIGKILL)" in proc.stderr or "exitcode  : -9" in proc.stderr, proc.stderr[-2000:]


def test_a_two_rank_checkpoint_resumes_on_one_rank(tmp_path):
    killed = torchrun(2, tmp_path, "--epochs", "1", "--checkpoint-every", "10", "--die-rank", "0", "--die-step", "25")
    assert killed.returncode != 0
    assert (tmp_path / "checkpoints" / "step-000000020" / "COMPLETE").is_file(), \
        f"no complete step-20 checkpoint; on disk: {sorted(p.name for p in (tmp_path / 'checkpoints').glob('*'))}\n" \
        f"{killed.stdout[-1500:]}\n{killed.stderr[-3000:]}"
    resumed = single(tmp_path, "--epochs", "1", "--checkpoint-every", "10", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming a run of 2 process(es) on 1" in resumed.stderr
    # 20 steps of 2x16 samples = 640 samples = 40 single-process batches of 16; 96 batches per epoch
    assert result(tmp_path)["steps"] == 20 + (96 - 40)
    assert (tmp_path / "final" / "model.safetensors").is_file()


def test_two_nodes_on_loopback_with_static_rendezvous(tmp_path):
    """The README's multi-node recipe, with both 'machines' on this one: one torchrun per node."""
    port = free_port()
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={rank}",
                               "--nproc-per-node=1", "--master-addr=127.0.0.1", f"--master-port={port}",
                               str(SCRIPT), str(tmp_path), "--epochs", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outputs = [node.communicate(timeout=240) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    assert result(tmp_path)["world_size"] == 2 and result(tmp_path)["steps"] == 1536 // 32


def test_fsdp_trains_like_ddp(two_rank_run, tmp_path):
    ddp_dir, _ = two_rank_run
    proc = torchrun(2, tmp_path, "--batch", "16", "--strategy", "fsdp")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fsdp, ddp = load_file(str(tmp_path / "final" / "model.safetensors")), load_file(str(ddp_dir / "final" / "model.safetensors"))
    assert set(fsdp) == set(ddp)
    for key in ddp:
        torch.testing.assert_close(fsdp[key], ddp[key], rtol=1e-4, atol=1e-5)
    assert result(tmp_path)["history"][-1]["val_acc"] == pytest.approx(result(ddp_dir)["history"][-1]["val_acc"], abs=0.02)


def test_fsdp_sharded_checkpoint_resumes_on_two_ranks_and_on_one_process(tmp_path):
    import shutil

    run = tmp_path / "run"
    killed = torchrun(2, run, "--epochs", "1", "--checkpoint-every", "10", "--strategy", "fsdp",
                      "--die-rank", "1", "--die-step", "25")
    assert killed.returncode != 0
    ckpt = run / "checkpoints" / "step-000000020"
    assert (ckpt / "COMPLETE").is_file() and any((ckpt / "sharded").glob("*.distcp"))  # one file per rank
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    again = torchrun(2, run, "--epochs", "1", "--checkpoint-every", "10", "--strategy", "fsdp", "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert result(run)["steps"] == 48
    # one plain process loads the 2-rank shards (resharded by torch.distributed.checkpoint): with nothing
    # left to train, its final weights are exactly the checkpoint's
    single_proc = single(copy, "--epochs", "1", "--max-steps", "20", "--resume")
    assert single_proc.returncode == 0, single_proc.stderr
    saved = load_file(str(copy / "checkpoints" / "step-000000020" / "model.safetensors"))
    loaded = load_file(str(copy / "final" / "model.safetensors"))
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)
    assert result(copy)["history"][-1]["val_acc"] > 0.5


def test_cli_train_on_two_processes(image_folder, tmp_path):
    """`torchwise train --nproc 2` launches itself through torchrun; rank 0 alone writes the run."""
    from conftest import run_cli

    def train(run_dir):
        common = ["--data", image_folder, "--out", run_dir, "--model", "smallcnn", "--batch-size", "8", "--seed", "0"]
        return run_cli("train", *common, "--epochs", "2", "--nproc", "2", "--quiet", timeout=300)

    run_dir = tmp_path / "run"
    proc = train(run_dir)
    if proc.returncode != 0 and "terminate called without an active exception" in proc.stderr:
        # Seen once in CI on a loaded 2-core machine: a rank aborted inside torch's C++ (std::terminate,
        # no Python traceback) 4 s after start, never reproduced since. One retry for that signature
        # only, reported in the output; any other failure, or the same one twice, fails the test.
        print("retrying after a C++ abort of a rank:", proc.stderr[-500:])
        run_dir = tmp_path / "run-retry"
        proc = train(run_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("done: val accuracy") == 1  # reported once, by rank 0
    n_train = len(json.loads((run_dir / "split.json").read_text())["train"])
    last_step = int((run_dir / "metrics.csv").read_text().splitlines()[-1].split(",")[1])
    assert last_step == 2 * -(-(-(-n_train // 2)) // 8)  # each rank ran half the data in batches of 8
    for name in ("config.yaml", "metrics.csv", "eval.json", "report.html", "final/model.safetensors"):
        assert (run_dir / name).is_file(), name
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["examples"] == len(evaluation["worst"]) or evaluation["examples"] > 0
    # the same run evaluated in one process agrees with what the two ranks gathered
    single_eval = run_cli("eval", "--run", run_dir, timeout=120)
    assert single_eval.returncode == 0, single_eval.stderr
    assert f"accuracy {evaluation['accuracy']:.4f}" in single_eval.stdout

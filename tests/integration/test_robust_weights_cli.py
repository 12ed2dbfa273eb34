"""Never lose a run: `torchwise predict` refuses a truncated ONNX file clearly."""
from __future__ import annotations


import pytest

from conftest import assert_clear_cli_error, run_cli
from testkit.weights_run import make_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory)


# ----------------------------------------------------------------------------- bad weights files


# name -> (file name, bytes from a scratch dir, phrases the error must say)


# ----------------------------------------------------------------------------- bad ONNX files


def test_predict_command_refuses_a_truncated_onnx_in_a_subprocess(run, tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(run["onnx"].read_bytes()[:500])
    proc = run_cli("predict", bad, run["images"], timeout=120)
    assert_clear_cli_error(proc, "truncated or damaged", "500 bytes", "torchwise export")

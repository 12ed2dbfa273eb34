"""The W&B logger for real (offline; wandb starts its own service process): the CSV rows and config, and a
resumed run that continues the same W&B run. The other loggers are tests/unit/train/test_loggers.py."""
import glob
import struct

import pytest

from testkit.logger_runs import csv_numbers, csv_rows, trainer


@pytest.fixture
def wandb_env(monkeypatch, tmp_path):
    # nothing may reach the network: offline, silent, and every wandb file under tmp_path
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb_cache"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


def wandb_records(path):
    """The records of a .wandb file: W&B's own protobuf Record, framed in 32 KiB blocks of records that
    each carry a 7-byte header (crc32, length, kind: 1 whole, 2 first, 3 middle, 4 last part)."""
    from wandb.proto import wandb_internal_pb2

    raw = open(path, "rb").read()
    assert raw[:4] == b":W&B", f"{path} is not a W&B transaction log"
    pos, part, records = 7, b"", []
    while pos + 7 <= len(raw):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        if kind == 0:
            break
        part += raw[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(part)
            records.append(record)
            part = b""
    return records


def test_wandb_offline_run_holds_the_csv_rows_and_config_and_resumes_the_same_run(tmp_path, wandb_env):
    import json

    run_dir = tmp_path / "run"
    trainer(run_dir, ["csv", "wandb"], epochs=1).fit()
    run_id = json.loads((run_dir / "wandb_run.json").read_text())["id"]
    trainer(run_dir, ["csv", "wandb"], epochs=2, resume=True).fit()
    assert json.loads((run_dir / "wandb_run.json").read_text())["id"] == run_id
    files = sorted(glob.glob(str(run_dir / "wandb" / "offline-run-*" / f"run-{run_id}.wandb")))
    assert len(files) == 2, f"not two offline parts of W&B run {run_id} under {run_dir / 'wandb'}: {files}"
    history: dict[int, dict[str, float]] = {}
    for path in files:
        records = wandb_records(path)
        for record in records:
            if record.WhichOneof("record_type") == "history":
                items = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item}
                history.setdefault(int(items["_step"]), {}).update(items)
        run_record = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        assert run_record.run_id == run_id
        config = {i.key: json.loads(i.value_json) for i in run_record.config.update}
        assert config["loop"]["batch_size"] == 16
        assert [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"] == [0]
    rows = csv_rows(run_dir)
    assert [int(r["step"]) for r in rows] == [4, 8]
    for row in rows:
        logged = history[int(row["step"])]
        for key, value in csv_numbers(row).items():
            assert logged[key] == pytest.approx(value, rel=1e-5), (key, row["step"])

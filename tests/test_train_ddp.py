"""Two-rank DDP on CPU (gloo): both ranks train on different data; one manifest, one adapter."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import FAST_TRAIN, requires_data, run_entry
from tests.train_probes import read_records


@requires_data
def test_two_rank_ddp_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "run"
    record = tmp_path / "batches.jsonl"
    result = run_entry(
        "train.py",
        [
            *FAST_TRAIN,  # the base config (no GPU recipe): tiny model, fp32
            "strategy=ddp",
            "+strategy.process_group_backend=gloo",
            "trainer.accelerator=cpu",
            "trainer.devices=2",
            "trainer.max_steps=3",
            "+callbacks.record._target_=tests.train_probes.BatchRecorder",
            f"+callbacks.record.path={record}",
            f"hydra.run.dir={out}",
        ],
        timeout=300,
        process=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [read_records(record), read_records(Path(f"{record}.rank1"))]
    for rank, records in enumerate(ranks):
        assert [r["step"] for r in records] == [0, 1, 2] and {r["rank"] for r in records} == {rank}
    rows = [{row for r in records for row in r["rows"]} for records in ranks]
    assert len(rows[0]) == len(rows[1]) == 6 and not rows[0] & rows[1], "the ranks must see different data"

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["global_step"] == 3
    assert manifest["hardware_fallbacks"] == []  # DDP kept: it runs on CPUs
    assert json.loads((out / "adapter_config.json").read_text())["peft_type"] == "LORA"
    assert len(list(tmp_path.rglob("manifest.json"))) == 1
    assert len(list(tmp_path.rglob("adapter_model.safetensors"))) == 1

"""Run a few DeepSpeed ZeRO steps on CPU with the repo's strategy configs (used by test_deepspeed.py).

Lightning's DeepSpeedStrategy refuses CPUs, so this drives `deepspeed.initialize` directly with the
DeepSpeed config that `conf/strategy/<name>.yaml` carries: one process, gloo backend, one engine
per strategy on a fresh model (the process pays DeepSpeed's imports and start once, not per stage).
Usage: python tests/ds_step.py OUT_JSON STRATEGY_NAME [STRATEGY_NAME ...]
OUT_JSON: {strategy: {"stage", "losses", "changed", "trainable"}}
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.update(MASTER_ADDR="127.0.0.1", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
os.environ.setdefault("MASTER_PORT", "29531")


def main(out: str, strategies: list[str]) -> None:
    import deepspeed
    import deepspeed.comm.torch

    from esc.train.extensions import clear_stale_build_locks

    clear_stale_build_locks()  # an interrupted first build would make this wait until the timeout
    # One rank: DeepSpeed's shared-memory all-reduce for CPU ranks has nothing to speed up, and
    # building it JIT-compiles C++ in every new environment (45 s of a fresh clone's suite on 2 cores;
    # a GPU run never builds it: NCCL).
    deepspeed.comm.torch.build_shm_op = lambda: None
    deepspeed.init_distributed(dist_backend="gloo")
    reports = {strategy: steps(strategy) for strategy in strategies}
    with open(out, "w") as fh:
        json.dump(reports, fh)


def steps(strategy: str) -> dict:
    """Four optimizer steps of a fresh LoRA model under `strategy`'s DeepSpeed config."""
    import deepspeed
    import torch
    from peft import LoraConfig, get_peft_model

    from esc.models.loading import ModelSettings, load_causal_lm
    from esc.train.strategies import deepspeed_config
    from tests.helpers import compose

    cfg = compose([f"strategy={strategy}", "model=tiny"])
    ds_config = deepspeed_config(cfg.strategy)
    ds_config.update(train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=1, gradient_clipping=1.0)
    model = get_peft_model(
        load_causal_lm(ModelSettings.of(cfg.model)), LoraConfig(r=4, target_modules=["q_proj", "v_proj"])
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config)
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (2, 32))
    losses = []
    for _ in range(4):
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    stage = engine.zero_optimization_stage()
    if stage == 3:
        params = [p for p in engine.module.parameters() if p.requires_grad]
        with deepspeed.zero.GatheredParameters(params):
            after = {n: p.detach().clone() for n, p in engine.module.named_parameters() if p.requires_grad}
    else:
        after = {n: p.detach().clone() for n, p in engine.module.named_parameters() if p.requires_grad}
    changed = sum(not torch.equal(before[n], after[n]) for n in before if n in after)
    engine.destroy()
    return {"stage": stage, "losses": losses, "changed": changed, "trainable": len(before)}


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

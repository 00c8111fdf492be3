"""Does ESC-Role training help? Held-out role-player loss of SmolLM2 before and after N LoRA steps.

    .venv/bin/python benchmarks/bench_heldout_loss.py                  # 60 steps, ~25 min on 2 CPU cores
    .venv/bin/python benchmarks/bench_heldout_loss.py --steps 20 --eval-dialogues 16
    .venv/bin/python benchmarks/bench_heldout_loss.py --lr 2e-3 model.max_length=512   # + Hydra overrides

The job is `train.py +exp=train/esc_role_smollm2` (the real mixture: ESConv + English RoleBench, the
Figure 11 prompt, role-player-only labels), except that ESConv's `valid` and `test` files are kept
out of training (`data.sources.esconv.splits=[train]`). `train.py +exp=train/esc_role_heldout` measures
the same figure inside a training run (`callbacks.heldout`), and `+exp=train/esc_role_ablation` for a
grid. The held-out set is the first `--eval-dialogues` dialogues of ESConv's `valid` file, encoded
exactly like training samples; the script checks that none of them is among the training samples.
The figure is the mean negative log-likelihood per role-player token (`esc.train.heldout`),
measured on the same model before training (the LoRA update starts at zero, so "before" is the base
model) and after N steps.

Run from the repository root after `make data` (SmolLM2 is fetched on first use, or by `make models`).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # `tests.helpers` when run as `python benchmarks/...`
    sys.path.insert(0, str(REPO_ROOT))

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from hydra.utils import instantiate  # noqa: E402

from benchmarks.common import cpu_trainer  # noqa: E402
from esc.errors import UserError, exit_on_user_error  # noqa: E402
from esc.esc_role_samples.tokenize import encode_chat  # noqa: E402
from esc.models.loading import ModelSettings, load_tokenizer  # noqa: E402
from esc.train.heldout import HeldOutLoss, heldout_loss, heldout_samples  # noqa: E402
from tests.helpers import compose  # noqa: E402


class LossLog(pl.Callback):
    """The training loss of every optimizer step."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, idx) -> None:  # noqa: ANN001
        self.losses.append(float(outputs["loss"]))


def row(name: str, result: HeldOutLoss) -> str:
    return f"{name:<22}{result.loss:>10.4f}{result.perplexity:>12.2f}"


@exit_on_user_error
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps of LoRA training")
    parser.add_argument("--eval-dialogues", type=int, default=32, help="held-out ESConv valid dialogues")
    parser.add_argument("--lr", type=float, default=None, help="LoRA learning rate (default: model.lora_lr)")
    parser.add_argument("--batch-size", type=int, default=None, help="rows per step (default: the exp's)")
    parser.add_argument("--exp", default="esc_role_smollm2", help="the training experiment (conf/exp/)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("override", nargs="*", help="more Hydra overrides, e.g. model.max_length=512")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore")

    overrides = [
        f"+exp={args.exp}",
        "logger=none",
        "data.sources.esconv.splits=[train]",  # valid and test are held out
        f"trainer.max_steps={args.steps}",
        *([f"model.lora_lr={args.lr}"] if args.lr else []),
        *([f"datamodule.batch_size={args.batch_size}"] if args.batch_size else []),
        *args.override,
    ]
    out = Path(tempfile.mkdtemp(prefix="bench-heldout-"))
    cfg = compose(overrides, output_dir=out)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    tokenizer = load_tokenizer(ModelSettings.of(cfg.model))
    datamodule = instantiate(cfg.datamodule, tokenizer=tokenizer, _convert_="all")
    module = instantiate(cfg.module, _convert_="all")
    module.configure_model()

    root = cfg.data.get("root")  # the folder training reads
    heldout = heldout_samples("esconv_valid", args.eval_dialogues, Path(root) if root else None)
    trained_ids = {s.id for s in datamodule.samples()[0]}
    leaked = [s.id for s in heldout if s.id in trained_ids]
    if leaked:
        raise UserError(f"held-out dialogues are in the training data: {leaked[:3]}")
    encoded = [
        e
        for e in (encode_chat(tokenizer, s.messages, cfg.model.max_length, s.hold_out) for s in heldout)
        if e
    ]
    pad = tokenizer.pad_token_id

    t0 = time.perf_counter()
    before = heldout_loss(module.model, encoded, pad)
    eval_s = time.perf_counter() - t0
    losses = LossLog()
    trainer = cpu_trainer(args.steps, [losses], out, cfg.trainer.gradient_clip_val)
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=datamodule)
    train_s = time.perf_counter() - t0
    after = heldout_loss(module.model, encoded, pad)

    first = sum(losses.losses[:5]) / max(len(losses.losses[:5]), 1)
    last = sum(losses.losses[-5:]) / max(len(losses.losses[-5:]), 1)
    print(
        f"{cfg.model.name} + LoRA r={cfg.peft.r}, lr={cfg.model.lora_lr}, {args.steps} steps x "
        f"{cfg.datamodule.batch_size} rows of <= {cfg.model.max_length} tokens "
        f"({len(datamodule.train_set)} training rows: ESConv train + English role play), CPU "
        f"({torch.get_num_threads()} threads), torch {torch.__version__}"
    )
    print(
        f"held out: {before.dialogues} ESConv valid dialogues, {before.tokens:,} role-player tokens "
        f"(never trained on)"
    )
    print(f"{'':<22}{'loss':>10}{'perplexity':>12}")
    print(row("before (base model)", before))
    print(row(f"after {args.steps} steps", after))
    print(
        f"change: {after.loss - before.loss:+.4f} nats/token ({after.loss / before.loss - 1:+.1%});  "
        f"train loss, mean of first/last 5 steps: {first:.3f} -> {last:.3f};  "
        f"training {train_s:.0f} s ({train_s / max(args.steps, 1):.1f} s/step), "
        f"one held-out pass {eval_s:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Training throughput of the ESC-Role LoRA job on the embedded tiny model, with and without packing.

    .venv/bin/python benchmarks/bench_train.py                 # defaults: about 1 min on 2 CPU cores
    .venv/bin/python benchmarks/bench_train.py --steps 40 --max-samples 96 --batch-size 4

Both runs use the real pieces of `train.py`: the composed Hydra config (`model=tiny`), the
`ChatSFTDataModule` (packing=false, then packing=true) and the `LoRACausalLM` module, instantiated
as `esc/train/run.py` does, and a `pytorch_lightning.Trainer` on CPU. Only the optimizer steps after
`--warmup` are timed (model building, tokenization and the first steps are not). Reported per run:

* learned tokens/s: tokens that carry a label (the role-player's turns), i.e. the useful work;
* steps/s: optimizer steps (accumulate_grad_batches=1, so one batch per step);
* padding share: pad tokens / all tokens of the timed batches (right padding to the batch's longest
  row; packing fills rows up to `model.max_length`, so it pads much less).

Run from the repository root after `make data`.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # `tests.helpers` when run as `python benchmarks/bench_train.py`
    sys.path.insert(0, str(REPO_ROOT))

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from hydra.utils import instantiate  # noqa: E402

from benchmarks.common import cpu_trainer  # noqa: E402
from esc.errors import exit_on_user_error  # noqa: E402
from esc.esc_role_samples.tokenize import IGNORE_INDEX  # noqa: E402
from esc.models.loading import ModelSettings, load_tokenizer  # noqa: E402
from tests.helpers import compose  # noqa: E402


class Meter(pl.Callback):
    """Counts tokens and wall time of the timed optimizer steps (those after `warmup`).

    A step's time runs from the end of the previous step to the end of this one, so it includes
    fetching and collating the batch as well as forward, backward, clipping and the optimizer.
    """

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.steps = 0
        self.seconds = 0.0
        self.cpu_seconds = 0.0  # process CPU time (all threads): less sensitive to other jobs' load
        self.learned = 0
        self.pad = 0
        self.total = 0
        self._last = 0.0
        self._last_cpu = 0.0

    def on_train_start(self, trainer: pl.Trainer, module: Any) -> None:
        self._last, self._last_cpu = time.perf_counter(), time.process_time()

    def on_train_batch_end(
        self, trainer: pl.Trainer, module: Any, outputs: Any, batch: Any, idx: int
    ) -> None:
        now, now_cpu = time.perf_counter(), time.process_time()
        elapsed, cpu = now - self._last, now_cpu - self._last_cpu
        self._last, self._last_cpu = now, now_cpu
        if trainer.global_step <= self.warmup:  # global_step counts the step that just ended
            return
        self.steps += 1
        self.seconds += elapsed
        self.cpu_seconds += cpu
        self.learned += int((batch["labels"] != IGNORE_INDEX).sum())
        if "attention_mask" in batch:  # packed batches are flattened: no padding, no mask
            self.pad += int((batch["attention_mask"] == 0).sum())
        self.total += batch["input_ids"].numel()


def overrides(args: argparse.Namespace, packing: bool) -> list[str]:
    """`tests.helpers.FAST_TRAIN`-style overrides: the tiny model and a small, fixed mixture."""
    return [
        "model=tiny",
        "logger=none",
        "trainer.accumulate_grad_batches=1",
        f"datamodule.batch_size={args.batch_size}",
        f"datamodule.packing={str(packing).lower()}",
        f"data.sources.esconv.max_samples={args.max_samples}",
        f"data.sources.smile.max_samples={args.max_samples}",
        f"data.roleplay_ratio={args.roleplay_ratio}",
        *args.override,
    ]


def measure(args: argparse.Namespace, packing: bool, out_dir: Path) -> tuple[Meter, dict[str, Any]]:
    cfg = compose(overrides(args, packing), output_dir=out_dir / f"packing-{packing}")
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    tokenizer = load_tokenizer(ModelSettings.of(cfg.model))
    datamodule = instantiate(cfg.datamodule, tokenizer=tokenizer, _convert_="all")
    module = instantiate(cfg.module, _convert_="all")
    meter = Meter(warmup=args.warmup)
    trainer = cpu_trainer(args.warmup + args.steps, [meter], out_dir, cfg.trainer.gradient_clip_val)
    trainer.fit(module, datamodule=datamodule)
    info = {"rows": len(datamodule.train_set), "max_length": cfg.model.max_length}
    return meter, info


def table(results: dict[str, tuple[Meter, dict[str, Any]]]) -> str:
    un, pk = results["unpacked"][0], results["packed"][0]
    rows = [("", "unpacked", "packed", "packed/unpacked")]

    def add(name: str, a: float, b: float, fmt: str, ratio: bool = True) -> None:
        rows.append((name, format(a, fmt), format(b, fmt), f"{b / a:.2f}x" if ratio and a else ""))

    add("learned tokens/s", un.learned / un.seconds, pk.learned / pk.seconds, ",.0f")
    add("optimizer steps/s", un.steps / un.seconds, pk.steps / pk.seconds, ".2f")
    add("learned tokens/CPU-s", un.learned / un.cpu_seconds, pk.learned / pk.cpu_seconds, ",.0f")
    add("all tokens/s", un.total / un.seconds, pk.total / pk.seconds, ",.0f")
    add("padding share", un.pad / max(un.total, 1), pk.pad / max(pk.total, 1), ".1%", ratio=False)
    add("learned share", un.learned / max(un.total, 1), pk.learned / max(pk.total, 1), ".1%", ratio=False)
    add("tokens/step", un.total / un.steps, pk.total / pk.steps, ",.0f")
    rows.append(("timed steps", str(un.steps), str(pk.steps), ""))
    rows.append(("timed seconds", f"{un.seconds:.1f}", f"{pk.seconds:.1f}", ""))
    rows.append(("timed CPU seconds", f"{un.cpu_seconds:.1f}", f"{pk.cpu_seconds:.1f}", ""))
    rows.append(("train rows", str(results["unpacked"][1]["rows"]), str(results["packed"][1]["rows"]), ""))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


@exit_on_user_error
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="timed optimizer steps per run (default 50)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before timing (default 2)")
    parser.add_argument(
        "--max-samples", type=int, default=64, help="ESConv and Smile samples each (default 64)"
    )
    parser.add_argument("--batch-size", type=int, default=2, help="rows per optimizer step (default 2)")
    parser.add_argument(
        "--roleplay-ratio", type=float, default=0.25, help="role-play samples per ESC sample (default 0.25)"
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of each setting, alternating; the fastest counts"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("override", nargs="*", help="extra Hydra overrides, e.g. model.max_length=512")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.repeats < 1:
        parser.error("--steps and --repeats must be >= 1, --warmup >= 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    for name in ("pytorch_lightning", "lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"(pytorch_)?lightning.*")
    warnings.filterwarnings("ignore", category=FutureWarning)
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()

    runs = [("unpacked", False), ("packed", True)]
    results: dict[str, tuple[Meter, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="esc-bench-train-") as tmp:
        for repeat in range(args.repeats):
            for label, packing in runs if repeat % 2 == 0 else runs[::-1]:  # alternate the order
                start = time.perf_counter()
                meter, info = measure(args, packing, Path(tmp) / str(repeat))
                print(
                    f"{label} (repeat {repeat + 1}): {meter.learned / meter.seconds:,.0f} learned tokens/s, "
                    f"done in {time.perf_counter() - start:.1f} s",
                    file=sys.stderr,
                )
                # keep the fastest repeat: the batches are the same (seeded), background load is not
                if label not in results or meter.seconds < results[label][0].seconds:
                    results[label] = (meter, info)
    info = results["unpacked"][1]
    print(
        f"ESC-Role LoRA training on the tiny model (CPU, {torch.get_num_threads()} threads, torch "
        f"{torch.__version__}): batch_size={args.batch_size}, max_length={info['max_length']}, "
        f"max_samples={args.max_samples}, {args.steps} timed steps after {args.warmup} warm-up, "
        f"fastest of {args.repeats} run(s) each"
    )
    print(table(results))


if __name__ == "__main__":
    main()

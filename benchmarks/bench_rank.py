"""ESC-RANK scoring throughput: our batched one-pass judge vs the official score.py shape, in one run.

    .venv/bin/python benchmarks/bench_rank.py --threads 1                      # tiny, 64 dialogues x 7
    .venv/bin/python benchmarks/bench_rank.py --threads 1 --max-new-tokens 64  # longer official replies
    .venv/bin/python benchmarks/bench_rank.py --threads 1 --model smollm2 --dialogues 8 --lora-scale 0.05

(`--threads 1` on a machine whose cores another job shares: there, torch's default of one thread per
core made each forward pass of the tiny model ~20x slower, threads waiting for each other.)

A judge with 7 random (non-zero) LoRA adapters, one per dimension, saved by peft into a temporary
directory in the `per_dimension` layout (ROOT/<dimension key>/adapter_config.json ...), scores the
first `--dialogues` dialogues of the ESConv annotation set (12 lines each, English) on all 7
dimensions, with the `official` prompt style (score.py's prompts), twice:

- *ours*: `esc.scoring.judges.local` (`build_judge(judge_settings({"kind": "local", "adapters": {"layout":
  "per_dimension", ...}}))`): all items in batches that mix dimensions (PEFT `adapter_names`), one
  forward pass each, the score read off the next-token distribution over "0".."4";
- *official shape*: score.py's loop: a PeftModel with the 7 adapters loaded; for each dialogue, for
  each dimension, `set_adapter`, render the prompt, one greedy `generate` call, and parse the reply
  as score.py does (the lowest of "0".."4" found anywhere, else -1). score.py calls InternLM2's
  `chat()`, which decodes until EOS with max_new_tokens 1024; a random model never emits EOS, so the
  replies here are capped at `--max-new-tokens` (default 8): the cap favours the official shape.

Model and adapter loading are outside the timed part; each method first judges one item untimed.
Prints wall and process-CPU seconds, dialogues/s and the ratio, and how often the two methods give
the same score (on random adapters there is nothing to agree on: just reported).
Per-dialogue rates do not depend on `--dialogues`, so a SmolLM2 run on fewer dialogues compares with
a tiny run on 64. Figures and caveats: docs/benchmarks.md. Run from the repository root after
`make data` (and `make models` for SmolLM2).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # `tests.helpers` when run as `python benchmarks/...`
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from esc.annotate.human_scores import default_esconv_path, read_annotations  # noqa: E402
from esc.errors import UserError, exit_on_user_error  # noqa: E402
from esc.models.loading import ModelSettings, load_causal_lm, load_tokenizer  # noqa: E402
from esc.official_formats.scores import official_parse  # noqa: E402
from esc.scoring.judge import VALID, ScoreItem  # noqa: E402
from esc.scoring.judges import build_judge, judge_settings  # noqa: E402
from esc.scoring.rubrics import DIMENSION_KEYS, dialogue_text, prompt_style  # noqa: E402
from tests.helpers import compose  # noqa: E402

MODELS = {"tiny": "tiny", "smollm2": "smollm2_135m"}  # --model -> conf/model/*.yaml (or any NAME there)


def load_dialogues(n: int) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """The first `n` distinct dialogues of the ESConv annotation set: (id, (role, text) lines)."""
    path = default_esconv_path()
    if not path.is_file():
        raise UserError(f"{path}: missing; run `make data` then `esc annotate build-esconv`")
    seen: dict[str, tuple[tuple[str, str], ...]] = {}
    for ann in read_annotations(path):
        if ann.language == "en" and ann.dialogue_id not in seen:
            seen[ann.dialogue_id] = ann.lines
        if len(seen) == n:
            break
    if len(seen) < n:
        raise UserError(f"{path}: only {len(seen)} English dialogues, {n} asked for")
    return list(seen.items())


def make_adapters(model_cfg: dict[str, Any], root: Path, rank: int, scale: float = 1.0) -> None:
    """Seven random LoRA adapters, ROOT/<dimension key>/ (the local judge's per_dimension layout).

    peft's `init_lora_weights=False` draws both LoRA matrices at random (a trained adapter's B is
    not zero either); `scale` multiplies B, so that a small one keeps the base model's behaviour.
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(model_cfg["lora_target_modules"]),
                        init_lora_weights=False)  # fmt: skip
    model = None
    for i, key in enumerate(DIMENSION_KEYS):
        torch.manual_seed(i)
        if model is None:
            model = get_peft_model(load_causal_lm(ModelSettings.of(model_cfg)), config, adapter_name=key)
        else:
            model.add_adapter(key, config)
    if scale != 1.0:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.mul_(scale)
    model.save_pretrained(root)  # non-default adapters go to ROOT/<adapter name>/


class OfficialShape:
    """score.py's loop: one adapter active at a time, one greedy generate per (dialogue, dimension)."""

    def __init__(
        self, model_cfg: dict[str, Any], root: Path, max_new_tokens: int, device: str = "cpu"
    ) -> None:
        from peft import PeftModel

        base = ModelSettings.of(model_cfg)
        self.tokenizer = load_tokenizer(base)
        self.device = device
        model = PeftModel.from_pretrained(load_causal_lm(base).to(device), root / DIMENSION_KEYS[0],
                                          adapter_name=DIMENSION_KEYS[0])  # fmt: skip
        for key in DIMENSION_KEYS[1:]:
            model.load_adapter(root / key, adapter_name=key)
        self.model = model.eval()
        self.style = prompt_style("official")
        self.max_new_tokens = max_new_tokens
        self.new_tokens = 0

    def judge(self, item: ScoreItem) -> int:
        self.model.set_adapter(item.dimension)
        messages = self.style.messages(item.dimension, dialogue_text(item.lines), item.language)
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        inputs = self.tokenizer(text, return_tensors="pt", add_special_tokens=False).to(self.device)
        with torch.inference_mode():
            out = self.model.generate(
                **inputs,
                max_new_tokens=self.max_new_tokens,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        reply_ids = out[0, inputs["input_ids"].shape[1] :]
        self.new_tokens += len(reply_ids)
        return official_parse(self.tokenizer.decode(reply_ids, skip_special_tokens=True))


def timed(fn: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def table_row(name: str, dialogues: int, items: int, wall: float, cpu: float, ratio: float) -> str:
    return (
        f"{name:<16}{dialogues:>10}{items:>7}{wall:>10.1f}{cpu:>10.1f}{dialogues / wall:>13.3f}{ratio:>8.1f}x"
    )


def agreement(official: Sequence[int], ours: Sequence[Any]) -> tuple[float, float, float]:
    """(official replies parsed, ours valid, same score) as fractions of the items."""
    n = len(official)
    parsed = sum(s >= 0 for s in official) / n
    valid = sum(j.status == VALID for j in ours) / n
    same = sum(j.status == VALID and j.score == s for s, j in zip(official, ours, strict=True)) / n
    return parsed, valid, same


@exit_on_user_error
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="tiny", help=f"judge base model: {', '.join(sorted(MODELS))} or a conf/model NAME"
    )
    parser.add_argument("--dialogues", type=int, default=64, help="dialogues, each scored on 7 dimensions")
    parser.add_argument(
        "--max-new-tokens", type=int, default=8, help="official shape: reply cap (favours it)"
    )
    parser.add_argument("--batch-size", type=int, default=16, help="ours: items per forward pass")
    parser.add_argument("--lora-r", type=int, default=8, help="rank of the random adapters")
    parser.add_argument(
        "--lora-scale",
        type=float,
        default=1.0,
        help="multiplies the random B matrices (small: near the base)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore")
    load_before = os.getloadavg()[0]

    model_cfg = OmegaConf.to_container(
        compose([f"model={MODELS.get(args.model, args.model)}"]).model, resolve=True
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dialogues = load_dialogues(args.dialogues)
    items = [ScoreItem(did, key, "en", lines) for did, lines in dialogues for key in DIMENSION_KEYS]
    with tempfile.TemporaryDirectory(prefix="bench-rank-") as tmp:
        root = Path(tmp)
        make_adapters(model_cfg, root, args.lora_r, args.lora_scale)

        adapters = {"layout": "per_dimension", "root": str(root)}
        node = {"kind": "local", "name": "bench", "model": model_cfg, "prompt": "official", "device": device,
                "batch_size": args.batch_size, "adapters": adapters}  # fmt: skip
        judge = build_judge(judge_settings(node))
        judge.check_ready()  # loads the model and the 7 adapters
        tokens = [len(judge.prompt_ids(item)) for item in items]
        judge.judge(items[:1])  # untimed warm-up
        ours, ours_wall, ours_cpu = timed(lambda: judge.judge(items))
        judge.close()

        official = OfficialShape(model_cfg, root, args.max_new_tokens, device)
        official.judge(items[0])  # untimed warm-up
        official.new_tokens = 0
        scores, off_wall, off_cpu = timed(lambda: [official.judge(item) for item in items])

    n, k = len(dialogues), len(items)
    where = (
        f"GPU {torch.cuda.get_device_name(0)}"
        if device == "cuda"
        else f"CPU ({torch.get_num_threads()} threads)"
    )
    parsed, valid, same = agreement(scores, ours)
    print(
        f"{model_cfg['name']} judge + 7 random LoRA adapters (r={args.lora_r}, B x {args.lora_scale:g}, "
        f"{', '.join(model_cfg['lora_target_modules'])}), prompt style official; {n} ESConv dialogues "
        f"x 7 dimensions = {k} items, prompts {min(tokens)}-{max(tokens)} tokens (mean "
        f"{sum(tokens) / k:.0f}); {where}, torch {torch.__version__}"
    )
    print(
        f"ours: batch {args.batch_size}, one forward pass per item, dimensions mixed per batch;  "
        f"official shape: batch 1, set_adapter + greedy generate, max_new_tokens={args.max_new_tokens} "
        f"({official.new_tokens / k:.1f} new tokens per item; score.py: until EOS, <= 1024: the cap "
        f"favours the official shape)"
    )
    print(
        f"{'method':<16}{'dialogues':>10}{'items':>7}{'seconds':>10}{'CPU-s':>10}{'dialogues/s':>13}{'ratio':>9}"
    )
    print(table_row("official shape", n, k, off_wall, off_cpu, 1.0))
    print(table_row("ours", n, k, ours_wall, ours_cpu, off_wall / ours_wall))
    print(
        f"speed-up: {off_wall / ours_wall:.1f}x wall, {off_cpu / ours_cpu:.1f}x CPU time;  "
        f"official replies parsed: {parsed:.1%}, ours valid: {valid:.1%}, same score: {same:.1%} "
        f"(random adapters: nothing to agree on);  load average {load_before:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

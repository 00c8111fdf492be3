"""Where a dialogue step's time goes: `bench_evaluate.py`'s *ours* sampled by py-spy, by category.

    pip install py-spy        # into .venv: a sampling profiler (no code changes, native frames off)
    .venv/bin/python benchmarks/profile_evaluate.py --model smollm2 --cards 32 --max-new-tokens 128
    .venv/bin/python benchmarks/profile_evaluate.py --raw /tmp/prof.txt     # categorise a saved profile

py-spy samples the Python stack 50 times a second while `bench_evaluate.py --skip-official` plays
the dialogues; every sample is put in one category by the frames it holds (the innermost match
wins, in the order below), and the shares are printed:

- linear layers (attention projections q/k/v/o; MLP gate/up/down), the LM head (the 49,152-entry
  vocabulary projection), attention itself (scaled dot-product), the KV cache's growth (the
  DynamicCache's concatenation each step under `generate`) or its writes into preallocated buffers
  and the copies when ended rows leave the batch (under `greedy_decode`), norms and rotary
  embeddings, logits processors (no_repeat_ngram), generate's or greedy_decode's own Python (the
  decode loop, stopping criteria), the prefill (a
  turn's new prompt tokens, before decoding), tokenising and prompt rendering, the engine and the
  backend's own Python (padding, kept prefixes), loading the models, and the rest.

A sample counts its innermost category, and the prefill is reported apart as a share of all samples
too (it overlaps the layer categories). Figures: docs/benchmarks.md, "Where the time goes".
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: (category, what a frame's text contains), innermost frame first when several match
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("loading the models", ("load_for_inference", "from_pretrained", "_load_unlocked")),
    ("KV cache growth (torch.cat per step)", ("DynamicLayer.update", "Cache.update")),
    ("KV cache writes into preallocated buffers", ("GrowingLayer.update",)),
    ("ended rows leaving the batch (copies)", ("GrowingLayer.keep", "_row_kv")),
    ("attention (scaled dot-product)", ("sdpa_attention_forward", "repeat_kv")),
    (
        "norms and rotary embeddings",
        ("RMSNorm.forward", "rotate_half", "apply_rotary_pos_emb", "RotaryEmbedding"),
    ),
    ("logits processors (no_repeat_ngram)", ("LogitsProcessorList", "NoRepeatNGram")),
    ("tokenising and chat templates", ("apply_chat_template", "render_prompt", "_prompt_ids", "Tokenizer")),
)
LINEAR = "Linear.forward"
PARENTS = (
    ("MLP linear layers (gate, up, down)", "MLP.forward"),
    ("attention projections (q, k, v, o)", "Attention.forward"),
    ("LM head (vocabulary projection)", "ForCausalLM.forward"),
)


def categorise(raw: Path) -> tuple[Counter, int, int]:
    """(samples per category, all samples, samples inside the prefill) of a py-spy raw profile."""
    shares: Counter = Counter()
    total = prefill = 0
    for line in raw.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = stack.split(";")
        total += n
        prefill += n * any("_prefill" in f for f in frames)  # generate's and greedy_decode's
        shares[_category(frames)] += n
    return shares, total, prefill


def _category(frames: list[str]) -> str:
    for depth in range(len(frames) - 1, -1, -1):  # innermost first
        frame = frames[depth]
        if LINEAR in frame:
            for name, parent in PARENTS:
                if any(parent in f for f in frames[max(0, depth - 3) : depth]):
                    return name
            return "other linear layers"
        for name, needles in CATEGORIES:
            if any(k in frame for k in needles):
                return name
    for name, needle in (
        ("generate's own Python (decode loop)", "GenerationMixin"),
        ("greedy_decode's own Python (decode loop)", "greedy_decode"),
        ("the backend's own Python (padding, kept prefixes)", "esc/chat/backends"),
        ("the engine and the job", "esc/"),
    ):
        if any(needle in f for f in frames):
            return name
    return "other (imports, interpreter)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--cards", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--raw", type=Path, default=None, help="categorise this py-spy raw profile; run nothing"
    )
    parser.add_argument("--extra", nargs="*", default=[], help="more arguments for bench_evaluate.py")
    args = parser.parse_args(argv)
    raw = args.raw
    if raw is None:
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(spy).exists():
            sys.exit("error: py-spy is not installed: pip install py-spy")
        raw = Path(tempfile.mkdtemp(prefix="esc-profile-")) / "profile.txt"
        bench = [sys.executable, str(REPO / "benchmarks" / "bench_evaluate.py"), "--model", args.model,
                 "--cards", str(args.cards), "--max-new-tokens", str(args.max_new_tokens), "--skip-official",
                 "--threads", str(args.threads), *args.extra]  # fmt: skip
        done = subprocess.run([spy, "record", "-o", str(raw), "--format", "raw", "-r", "50", "--", *bench],
                              cwd=REPO, capture_output=True, text=True)  # fmt: skip
        for line in done.stdout.splitlines():  # the bench's own timing rows (py-spy's overhead included)
            if line.startswith("ours ("):
                print(line, flush=True)
        if done.returncode != 0:
            sys.exit(f"error: py-spy exited {done.returncode}: {done.stderr[-2000:]}")
    shares, total, prefill = categorise(raw)
    print(f"{total} samples ({total / 50:.0f} s at 50 Hz); profile: {raw}")
    for name, n in shares.most_common():
        print(f"  {n / total:6.1%}  {name}")
    print(f"  prefill (inside the categories above): {prefill / total:.1%} of all samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())

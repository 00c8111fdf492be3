"""One `greedy_decode` call of SmolLM2 over kept context, timed: where a decoding step's time goes.

    .venv/bin/python benchmarks/bench_decode.py              # bfloat16, 64 rows x 1,000 kept columns
    .venv/bin/python benchmarks/bench_decode.py --dtype float32 --rows 32 --new-prompt 150 \
        --attention sdpa,grouped                             # a prefill-heavy call, both attentions
    .venv/bin/python benchmarks/bench_decode.py --compile    # torch.compile(model.forward) too
    .venv/bin/python benchmarks/bench_decode.py --profile    # torch.profiler's table by operator

The shape of a late turn of `evaluate.py`'s waves: `--rows` conversations, each with `--context`
columns of keys and values already kept (random, as the prefix cache would hand them over; rows
left-padded by different amounts), `--new-prompt` new prompt tokens each, then `--new` greedy
tokens (no end-of-sequence token ends a row early). Each setting runs the call twice in one
process and reports the second (the first warms up, and for `--compile` includes compiling), with a
digest of the tokens so that settings that should decode the same can be compared. The model is
loaded once; the settings switch its attention (and wrap its forward for `--compile`) in turn.

- `--attention grouped`: the backend's CPU attention (`esc.models.attention`: grouped-query heads
  left to the SDPA kernel in masked multi-token queries); `sdpa`: transformers' own.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from esc.chat.backends.greedy_decode import greedy_decode, processors_for  # noqa: E402
from esc.models.attention import GROUPED_SDPA, use_grouped_sdpa  # noqa: E402
from esc.models.loading import ModelSettings, load_for_inference  # noqa: E402
from tests.helpers import compose  # noqa: E402


def load(dtype: torch.dtype) -> torch.nn.Module:
    cfg = compose(["roleplayer=smollm2"], config_name="evaluate").roleplayer.backend.model
    model, _, _ = load_for_inference(ModelSettings.of(cfg), "cpu")
    return model.to(dtype)


def set_attention(model: torch.nn.Module, attention: str) -> None:
    """`grouped`: the hf backend's CPU attention; `sdpa`: transformers' own."""
    if attention == "grouped":
        assert use_grouped_sdpa(model) or model.config._attn_implementation == GROUPED_SDPA
    else:
        model.set_attn_implementation("sdpa")


def inputs(model: torch.nn.Module, args: argparse.Namespace, dtype: torch.dtype):
    """Token ids and mask (rows, context + new_prompt), and kept keys/values for the first `context`."""
    text = model.config.get_text_config()
    head = text.hidden_size // text.num_attention_heads
    gen = torch.Generator().manual_seed(0)
    width = args.context + args.new_prompt
    ids = torch.randint(100, 40_000, (args.rows, width), generator=gen)
    mask = torch.ones_like(ids)
    for row in range(args.rows):
        mask[row, : (row * 37) % max(1, args.context // 5)] = 0  # left padding of different lengths
    ids = ids.masked_fill(mask == 0, 0)
    shape = (args.rows, text.num_key_value_heads, args.context, head)
    past = [
        tuple(0.5 * torch.randn(shape, generator=gen).to(dtype) for _ in range(2))
        for _ in range(text.num_hidden_layers)
    ]
    return ids, mask, past


def copy_rate() -> float:
    """GB/s of copying 256 MiB of float32 (bytes read plus written), best of 5."""
    source = torch.randn(64 * 2**20)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - start)
    return 2 * source.numel() * source.element_size() / best / 1e9


def run(model: torch.nn.Module, ids, mask, past, args: argparse.Namespace) -> tuple[float, str]:
    start = time.perf_counter()
    rows = greedy_decode(
        model, ids, mask, [(k.clone(), v.clone()) for k, v in past], args.context, args.new, set(), 0,
        processors_for(model.generation_config),
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    return elapsed, hashlib.sha1(str([r.tokens for r in rows]).encode()).hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--context", type=int, default=1000, help="kept columns per row")
    parser.add_argument("--new-prompt", type=int, default=8, help="new prompt tokens per row (prefilled)")
    parser.add_argument("--new", type=int, default=32, help="greedy tokens per row")
    parser.add_argument("--attention", default="grouped", help="comma-separated: grouped, sdpa")
    parser.add_argument("--compile", action="store_true", help="also torch.compile(forward, dynamic=True)")
    parser.add_argument("--profile", action="store_true", help="torch.profiler's table for each setting")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    print(
        f"SmolLM2 {args.dtype}, {args.rows} rows x {args.context} kept columns, {args.new_prompt} new "
        f"prompt tokens, {args.new} greedy tokens, {args.threads} threads, torch {torch.__version__}"
    )
    print(f"memory copy on this machine: {copy_rate():.1f} GB/s (bytes read + written)")
    print(f"{'setting':<24}{'first s':>9}{'second s':>10}{'tokens/s':>10}  tokens")
    model = load(dtype)
    ids, mask, past = inputs(model, args, dtype)
    for attention in args.attention.split(","):
        set_attention(model, attention)
        for compiled in (False, True) if args.compile else (False,):
            if compiled:  # a fresh compile per setting (dynamo's caches outlive the wrapper)
                torch._dynamo.reset()
                model.forward = torch.compile(model.forward, dynamic=True)
            first, _ = run(model, ids, mask, past, args)
            second, digest = run(model, ids, mask, past, args)
            name = attention + (" + compile" if compiled else "")
            rate = args.rows * args.new / second
            print(f"{name:<24}{first:>9.1f}{second:>10.1f}{rate:>10.1f}  {digest}", flush=True)
            if args.profile:
                from torch.profiler import ProfilerActivity, profile

                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    run(model, ids, mask, past, args)
                by_op = prof.key_averages()
                print(by_op.table(sort_by="self_cpu_time_total", row_limit=8, max_name_column_width=48))
            if compiled:
                del model.forward  # back to the class's eager forward


if __name__ == "__main__":
    main()

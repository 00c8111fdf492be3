"""One decoding call of SmolLM2 on in-process vLLM (its CPU build), timed: where its step's time goes.

    .venv-vllm/bin/python benchmarks/profile_vllm.py                    # bfloat16, 64 rows x 1,000 kept
    .venv-vllm/bin/python benchmarks/profile_vllm.py --lora on,off      # enable_lora's cost, same call
    .venv-vllm/bin/python benchmarks/profile_vllm.py --profile          # torch.profiler's table

The same shape as `bench_decode.py` (the hf engine's call): `--rows` conversations, each with
`--context` tokens already in the engine's prefix cache (a first call prefills them), then
`--new-prompt` new prompt tokens each and `--new` greedy tokens (end-of-sequence ignored, so every
row decodes all of them). The second call is timed (and profiled): that is a late turn of
`evaluate.py`'s dialogues on `backend.kind: vllm`. The engine runs in this process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so torch.profiler sees its operators.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process

import torch  # noqa: E402

from esc.models.loading import ModelSettings, resolve_model_path  # noqa: E402
from tests.helpers import compose  # noqa: E402


def prompts(args: argparse.Namespace, vocab: int, extra: int) -> list[dict[str, list[int]]]:
    """Each row's token ids: `context` shared-by-position random ids (distinct per row), plus `extra`."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(100, vocab - 100, (args.rows, args.context + args.new_prompt), generator=gen)
    return [{"prompt_token_ids": row[: args.context + extra].tolist()} for row in ids]


def run(args: argparse.Namespace, lora: bool) -> None:
    from vllm import LLM, SamplingParams

    cfg = compose(["roleplayer=smollm2"], config_name="evaluate").roleplayer.backend.model
    llm = LLM(
        model=resolve_model_path(ModelSettings.of(cfg)),
        dtype=args.dtype,
        max_model_len=args.context + args.new_prompt + args.new + 16,
        enable_lora=lora,
        seed=0,
    )
    vocab = llm.llm_engine.model_config.get_vocab_size()
    greedy = SamplingParams(temperature=0.0, max_tokens=args.new, ignore_eos=True)
    start = time.perf_counter()
    llm.generate(prompts(args, vocab, 0), SamplingParams(temperature=0.0, max_tokens=1), use_tqdm=False)
    first = time.perf_counter() - start  # prefills the kept context into the prefix cache
    later = prompts(args, vocab, args.new_prompt)
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            outs = llm.generate(later, greedy, use_tqdm=False)
            second = time.perf_counter() - start
    else:
        start = time.perf_counter()
        outs = llm.generate(later, greedy, use_tqdm=False)
        second = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    cached = sum(o.num_cached_tokens or 0 for o in outs)
    print(
        f"enable_lora={str(lora).lower():5}  prefill {first:7.1f} s  call {second:7.1f} s  "
        f"{tokens / second:7.1f} tokens/s  ({tokens:,} tokens; {cached:,} prompt tokens from the prefix "
        "cache)",
        flush=True,
    )
    if args.profile:
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows_shown), flush=True)
    del llm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--context", type=int, default=1000)
    parser.add_argument("--new-prompt", type=int, default=8)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--lora", default="on", help="on, off or on,off: enable_lora for each run")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--rows-shown", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"SmolLM2 on vLLM (CPU build, in process), {args.dtype}, {args.rows} rows x {args.context:,} kept "
        f"tokens, {args.new_prompt} new prompt tokens, {args.new} greedy tokens, {args.threads} threads, "
        f"torch {torch.__version__}",
        flush=True,
    )
    for setting in args.lora.split(","):
        run(args, setting.strip() == "on")
    return 0


if __name__ == "__main__":
    sys.exit(main())

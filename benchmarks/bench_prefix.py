"""Prefix reuse across turns, two ways, in one run: which one the `hf` backend should use.

    .venv/bin/python benchmarks/bench_prefix.py                        # SmolLM2, 16 conversations, 3 turns
    .venv/bin/python benchmarks/bench_prefix.py --model tiny --conversations 32

A workload shaped like ESC-Eval's: N conversations (English role cards, the official role-player
prompt) grow by a reply and a new user message each turn. Every turn, the same prompts go to:

- *plain*: the `hf` backend without its prefix cache (`prefix_cache_gb=0`): left-padded batched
  `generate`, the whole history prefilled every turn;
- *kept KV*: the `hf` backend as shipped: each conversation's keys and values kept from its last
  turn, only the new tokens prefilled (`esc.chat.backends.prefix_cache`);
- *continuous batching*: transformers' `generate_batch` (paged attention, `allow_block_sharing`,
  a persistent manager kept across turns).

Greedy, `max_new_tokens` per reply, the same token ids in. Prints seconds per turn for each, and
whether the generated tokens equal the plain path's.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from esc.cards import load_cards  # noqa: E402
from esc.chat.backends.hf import HFBackend  # noqa: E402
from esc.chat.base import GenerationSettings  # noqa: E402
from esc.prompts import render_roleplayer_prompt  # noqa: E402
from tests.helpers import compose  # noqa: E402

USER_TURNS = [
    "I'm sorry to hear that. Can you tell me more about what happened?",
    "That sounds really hard. How have you been coping with it so far?",
    "What do you think would help you the most right now?",
    "Have you talked to anyone close to you about this?",
]


def conversations(n: int) -> list[list[dict[str, str]]]:
    cards = load_cards(language="en", limit=n)
    out = []
    for card in cards:
        system, opener = render_roleplayer_prompt("esc_role_official", "en", card.to_text())
        out.append([{"role": "system", "content": system}, {"role": "user", "content": opener}])
    return out


def continuous_batching(model, tokenizer, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    gen = GenerationConfig(max_new_tokens=max_new, do_sample=False, eos_token_id=tokenizer.eos_token_id,
                           pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    with torch.no_grad():  # generate_batch fails under inference_mode (an in-place update)
        results = model.generate_batch(
            prompts,
            generation_config=gen,
            continuous_batching_config=ContinuousBatchingConfig(allow_block_sharing=True),
            persistent_manager=True,
            warmup=False,
        )
    return [list(r.generated_tokens) for r in results.values()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2_135m", help="conf/model option")
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    model_cfg = compose([f"model={args.model}"]).model
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens)
    plain = HFBackend.of(model=model_cfg, batch_size=args.conversations, device="cpu", prefix_cache_gb=0)
    kept = HFBackend.of(model=model_cfg, batch_size=args.conversations, device="cpu", prefix_cache_gb=8)
    plain.load()
    kept.load()
    tokenizer = plain._tokenizer
    chats = conversations(args.conversations)
    timings: dict[str, list[float]] = {"plain": [], "kept KV": [], "continuous batching": []}
    same = {"kept KV": 0, "continuous batching": 0}
    total = 0
    for turn in range(args.turns):
        prompts = [plain._prompt_ids(c) for c in chats]
        t0 = time.perf_counter()
        replies = plain.generate(chats, settings)
        timings["plain"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        kept_replies = kept.generate(chats, settings)
        timings["kept KV"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        try:
            cb_tokens = continuous_batching(plain._model, tokenizer, prompts, args.max_new_tokens)
            timings["continuous batching"].append(time.perf_counter() - t0)
            cb_texts = [tokenizer.decode(t, skip_special_tokens=True).strip() for t in cb_tokens]
        except Exception as err:  # noqa: BLE001 - report and go on
            print(f"continuous batching failed: {type(err).__name__}: {err}")
            timings["continuous batching"].append(float("nan"))
            cb_texts = [None] * len(replies)
        total += len(replies)
        same["kept KV"] += sum(a.text == b.text for a, b in zip(replies, kept_replies, strict=True))
        same["continuous batching"] += sum(a.text == b for a, b in zip(replies, cb_texts, strict=True))
        for chat, reply, user in zip(
            chats, replies, [USER_TURNS[turn % len(USER_TURNS)]] * len(chats), strict=True
        ):
            chat += [{"role": "assistant", "content": reply.text}, {"role": "user", "content": user}]
    print(
        f"{model_cfg.name}: {args.conversations} conversations x {args.turns} turns, "
        f"{args.max_new_tokens} new tokens, greedy, CPU ({torch.get_num_threads()} threads), "
        f"torch {torch.__version__}"
    )
    print(
        f"{'':22}"
        + "".join(f"{'turn ' + str(k + 1):>10}" for k in range(args.turns))
        + f"{'total':>10}{'same':>10}"
    )
    for name, values in timings.items():
        shown = "".join(f"{v:>10.1f}" for v in values)
        agree = "" if name == "plain" else f"{same[name]}/{total}"
        print(f"{name:22}{shown}{sum(values):>10.1f}{agree:>10}")
    hits = kept._prefix
    print(f"kept KV: {hits.hits} prompts reused a prefix ({hits.reused_tokens:,} tokens not prefilled again)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

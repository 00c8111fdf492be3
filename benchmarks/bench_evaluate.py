"""Dialogue engine throughput: turn-synchronous batches vs one request at a time, in one run.

    .venv/bin/python benchmarks/bench_evaluate.py            # 64 cards, tiny role-player x tiny target
    .venv/bin/python benchmarks/bench_evaluate.py --cards 16 --max-new-tokens 16

Both runs use the real `evaluate()` job with the embedded tiny model on both sides, greedy decoding
and the request cache off. "batched" advances all dialogues together (wave = all cards, generation
batch = all cards); "batch size 1" plays one dialogue at a time with one `generate` call per
message, the shape of the official evaluate.py loop. Prints dialogues/s for each, the ratio, and the
share of dialogues whose texts are identical between the two runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run from a checkout without installing tests/

from esc.interact.run import evaluate  # noqa: E402
from esc.interact.store import read_dialogues  # noqa: E402
from tests.helpers import evaluate_config  # noqa: E402


def run(out: Path, cards: int, batch: int, max_new_tokens: int) -> tuple[float, list]:
    cfg = evaluate_config(
        out,
        "cards.languages=[en]",
        f"cards.limit={cards}",
        f"engine.wave_size={batch}",
        f"roleplayer.backend.batch_size={batch}",
        f"target.backend.batch_size={batch}",
        f"roleplayer.generation.max_new_tokens={max_new_tokens}",
        f"target.generation.max_new_tokens={max_new_tokens}",
    )
    start = time.perf_counter()
    result = evaluate(cfg)
    elapsed = time.perf_counter() - start
    assert result["counts"]["completed"] == cards, result["counts"]
    dialogues = list(read_dialogues(out / "dialogues" / "tiny__tiny__en.jsonl"))
    return elapsed, [[t.text for t in d.turns] for d in dialogues]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        run(Path(tmp) / "warmup", 2, 2, args.max_new_tokens)  # builds/loads the tiny model once
        batched_s, batched = run(Path(tmp) / "batched", args.cards, args.cards, args.max_new_tokens)
        single_s, single = run(Path(tmp) / "single", args.cards, 1, args.max_new_tokens)
    identical = sum(a == b for a, b in zip(batched, single, strict=True)) / len(batched)
    print(
        f"{args.cards} cards x tiny role-player x tiny target, 5 turns, "
        f"max_new_tokens={args.max_new_tokens}, "
        f"greedy, CPU ({torch.get_num_threads()} threads), torch {torch.__version__}"
    )
    print(f"{'':16}{'seconds':>10}{'dialogues/s':>14}")
    print(f"{'batched':16}{batched_s:>10.1f}{args.cards / batched_s:>14.3f}")
    print(f"{'batch size 1':16}{single_s:>10.1f}{args.cards / single_s:>14.3f}")
    print(f"speed-up: {single_s / batched_s:.1f}x   identical dialogues: {identical:.1%}")


if __name__ == "__main__":
    main()

"""How a CPU job slows down when another CPU-bound process runs beside it, by torch thread setting.

The workload is the demo's training step: SmolLM2-135M with the ESC-Role LoRA adapter shape, one row
of 512 tokens, forward and backward (float32), timed over `--steps` steps after one warm-up. Each
setting runs in its own process (OpenMP reads its environment when torch loads), first on the idle
machine, then with `--busy` neighbours running beside it. It prints seconds per step and the
loaded/idle ratio for each setting, measured in one run. `--workload decode` times greedy decoding
instead (a dialogue turn's shape). A neighbour is a pure-Python busy loop (one core) or, with
`--neighbour torch`, a torch process multiplying matrices with torch's default threads and OpenMP's
default (spinning) wait: another ML job, such as a second `make test`.

- `default`: torch's own thread count (one per core) and OpenMP's default waiting (busy spinning);
- `passive`: the same threads, OMP_WAIT_POLICY=PASSIVE (a waiting thread sleeps instead of spinning);
- `fit`: passive waiting and torch threads for the cores that were free over a 0.3 s sample at
  start (at least one). Issue 37 tried it in the entry points; passive waiting alone
  (`esc.cpu.wait_passively`, what they do now) did as well or better in most cases.

    .venv/bin/python benchmarks/bench_busy_machine.py                 # about 3 min on 2 cores
    .venv/bin/python benchmarks/bench_busy_machine.py --busy 2 --steps 6
    .venv/bin/python benchmarks/bench_busy_machine.py --workload decode --neighbour torch
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {
    "default": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "short-spin": {"GOMP_SPINCOUNT": "10000"},
    "fit": {"OMP_WAIT_POLICY": "PASSIVE", "ESC_FIT_THREADS": "1"},
}


def busy_cores(sample_s: float = 0.3) -> float:
    """Cores busy with other work over `sample_s` seconds, from Linux's /proc/stat."""

    def times() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:8]]
        return sum(fields) - fields[3] - fields[4], sum(fields)  # busy, total (idle + iowait free)

    first = times()
    time.sleep(sample_s)
    second = times()
    return (second[0] - first[0]) / max(1, second[1] - first[1]) * (os.cpu_count() or 1)


NEIGHBOURS = {
    # one core, all the time
    "loop": "while True: pass",
    # torch's default threads (one per core) and OpenMP's default spinning wait
    "torch": "import torch\na = torch.randn(1024, 1024)\nwhile True: a @ a",
}


def start_neighbours(kind: str, n: int) -> list[subprocess.Popen]:
    skip = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "ESC_FIT_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in skip}
    return [subprocess.Popen([sys.executable, "-c", NEIGHBOURS[kind]], env=env) for _ in range(n)]


def worker(steps: int, workload: str) -> None:
    """One setting: time `steps` LoRA training steps (or greedy decoding calls); print JSON."""
    sys.path.insert(0, str(REPO))
    fit = round((os.cpu_count() or 1) - busy_cores()) if os.environ.get("ESC_FIT_THREADS") else None
    import torch

    if fit is not None:
        torch.set_num_threads(max(1, min(os.cpu_count() or 1, fit)))
    from omegaconf import OmegaConf
    from peft import LoraConfig, get_peft_model

    from esc.models.loading import ModelSettings, load_causal_lm

    cfg = OmegaConf.load(REPO / "conf" / "model" / "smollm2_135m.yaml")
    model = load_causal_lm(ModelSettings.of(cfg))
    model = get_peft_model(
        model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    )
    times = []
    if workload == "decode":  # 8 prompts of 256 tokens, exactly 64 new tokens each, greedy
        model.eval()
        ids = torch.randint(0, 1000, (8, 256), generator=torch.Generator().manual_seed(0))
        for step in range(steps + 1):
            t0 = time.perf_counter()
            with torch.inference_mode():
                model.generate(
                    input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                    max_new_tokens=64, min_new_tokens=64, pad_token_id=0,
                )  # fmt: skip
            if step:  # the first call warms up
                times.append(time.perf_counter() - t0)
        print(json.dumps({"threads": torch.get_num_threads(), "times": times}))
        return
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    ids = torch.randint(0, 1000, (1, 512), generator=torch.Generator().manual_seed(0))
    for step in range(steps + 1):
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step:  # the first step warms up
            times.append(time.perf_counter() - t0)
    print(json.dumps({"threads": torch.get_num_threads(), "times": times}))


def run(setting: str, steps: int, workload: str) -> dict:
    skip = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    env = {k: v for k, v in os.environ.items() if k not in skip}
    env.update(SETTINGS[setting])
    out = subprocess.run(
        [sys.executable, __file__, "--worker", "--steps", str(steps), "--workload", workload],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--busy", type=int, default=1, help="neighbours beside the job when loaded")
    parser.add_argument("--neighbour", choices=sorted(NEIGHBOURS), default="loop")
    parser.add_argument("--settings", default="default,passive,short-spin,fit")
    parser.add_argument("--workload", choices=("train", "decode"), default="train")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.workload)
        return
    shape = {
        "train": "SmolLM2-135M + LoRA, 1 x 512 tokens, fwd+bwd, float32: s/step",
        "decode": "SmolLM2-135M greedy, 8 x 256-token prompts, 64 new tokens, float32: s/call",
    }[args.workload]
    print(f"CPU: {os.cpu_count()} cores; workload: {shape}")
    print(f"{args.steps} timed steps each; loaded = {args.busy} x {args.neighbour} beside the job\n")
    print("| setting | threads idle | s/step idle | threads loaded | s/step loaded | loaded / idle |")
    print("|---|---|---|---|---|---|")
    for setting in args.settings.split(","):
        idle = run(setting, args.steps, args.workload)
        loops = start_neighbours(args.neighbour, args.busy)
        time.sleep(4)  # the neighbours are running (and the load the job sees at start is real)
        try:
            loaded = run(setting, args.steps, args.workload)
        finally:
            for p in loops:
                p.terminate()
                p.wait()
        a, b = statistics.median(idle["times"]), statistics.median(loaded["times"])
        print(
            f"| {setting} | {idle['threads']} | {a:.2f} | {loaded['threads']} | {b:.2f} | {b / a:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()

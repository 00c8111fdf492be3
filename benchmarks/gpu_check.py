"""The steps of benchmarks/gpu_check.sh that are not a repo entry point (each prints what it found).

    python benchmarks/gpu_check.py versions
    python benchmarks/gpu_check.py build MODEL          # conf/model/MODEL.yaml, built into .cache/tiny/
    python benchmarks/gpu_check.py trained OUT MODEL [--loss-only]  # a train.py folder: loss finite,
                                                        # step times, the adapter reloads
    python benchmarks/gpu_check.py oom MODEL [--rows 64] [--simulate]

`oom` provokes running out of GPU memory on purpose: it caps this process's CUDA memory
(`torch.cuda.set_per_process_memory_fraction`) at the loaded weights plus `--headroom-gib`, asks
the hf backend for `--rows` long conversations in one call of `batch_size: --rows`, and checks that
every reply comes back after the backend split the call (`HFBackend._fitting`), with the replies of
the same call at 8 rows a call, uncapped, beside them. `--simulate` (a CPU, the rehearsal) raises
torch.OutOfMemoryError from the model's forward pass above `--simulate-rows` rows instead.
Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # `tests.helpers` when run as `python benchmarks/...`
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from tests.helpers import compose  # noqa: E402

PACKAGES = (
    "torch",
    "transformers",
    "peft",
    "pytorch_lightning",
    "bitsandbytes",
    "deepspeed",
    "hydra",
    "datasets",
)


def model_config(name: str) -> dict[str, Any]:
    return OmegaConf.to_container(compose([f"model={name}"]).model, resolve=True)


def versions(_: argparse.Namespace) -> int:
    import importlib

    for name in PACKAGES:
        try:
            print(f"{name} {importlib.import_module(name).__version__}")
        except Exception as err:  # a package that does not import is a finding, not a crash
            print(f"{name}: not importable ({type(err).__name__}: {str(err).splitlines()[0][:160]})")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        print(f"GPU: {props.name}, {props.total_memory / 2**30:.1f} GiB, CUDA {torch.version.cuda}, "
              f"bf16 {torch.cuda.is_bf16_supported()}")  # fmt: skip
    else:
        print("GPU: none (CPU rehearsal)")
    return 0


def build(args: argparse.Namespace) -> int:
    from esc.models.loading import ModelSettings, load_causal_lm

    cfg = model_config(args.model)
    start = time.perf_counter()
    model = load_causal_lm(ModelSettings.of(cfg))  # builds the random checkpoint on first use
    params = sum(p.numel() for p in model.parameters())
    text = model.config.get_text_config()
    print(
        f"{cfg['name']}: {type(model).__name__}, {params / 1e9:.3f}B parameters, hidden {text.hidden_size}, "
        f"MLP {text.intermediate_size}, {text.num_hidden_layers} layers, {text.num_attention_heads} query / "
        f"{text.num_key_value_heads} key-value heads, vocabulary {text.vocab_size}, {model.dtype}; "
        f"built and loaded in {time.perf_counter() - start:.1f} s"
    )
    return 0


def throughput(rows: list[dict[str, str]]) -> str:
    """The median step time and token rate of a metrics.csv (esc.train.throughput.StepThroughput),
    the first timed step (warm-up) left out."""
    import statistics

    def column(name: str) -> list[float]:
        return [float(r[name]) for r in rows if r.get(name) not in ("", None)]

    seconds, rates = column("train/step_seconds")[1:], column("train/tokens_per_s")[1:]
    if not seconds:
        return "no step times logged (StepThroughput not in the run's callbacks, or one step only)"
    step, rate = statistics.median(seconds), statistics.median(rates)
    return (
        f"steps 2-{len(seconds) + 1}: median {step:.3f} s a step, {rate:,.0f} tokens/s (padding not counted)"
    )


def trained(args: argparse.Namespace) -> int:
    """The training folder's loss is finite at every logged step and its adapter reloads with peft
    onto the base, changing the base model's logits."""
    import csv

    from peft import PeftModel

    from esc.models.loading import ModelSettings, load_causal_lm, load_tokenizer

    out = Path(args.out)
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    losses = [float(r[k]) for r in rows for k in r if k.startswith("train/loss") and r[k] not in ("", None)]
    ok = bool(losses) and all(math.isfinite(x) for x in losses)
    print(f"{out.name}: {len(losses)} logged training losses, first {losses[:1]}, last {losses[-1:]}: "
          f"{'all finite' if ok else 'NOT all finite'}")  # fmt: skip
    print(throughput(rows))
    if args.loss_only:
        return 0 if ok else 1
    cfg = model_config(args.model)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = load_tokenizer(ModelSettings.of(cfg))
    ids = tokenizer("I have not slept well since I lost my job.", return_tensors="pt").input_ids.to(device)
    base = load_causal_lm(ModelSettings.of(cfg)).to(device).eval()
    with torch.inference_mode():
        before = base(ids).logits.float()
    tuned = PeftModel.from_pretrained(base, out).eval()
    trained_b = sum(p.abs().sum().item() for n, p in tuned.named_parameters() if "lora_B" in n)
    with torch.inference_mode():
        after = tuned(ids).logits.float()
    change = (after - before).abs().max().item()
    moved = trained_b > 0 and change > 0
    verdict = "the adapter changes the model" if moved else "NO CHANGE (not trained or not applied)"
    print(
        f"adapter reloaded from {out}: sum |lora_B| {trained_b:.4g}, max logit change {change:.4g}: {verdict}"
    )
    return 0 if ok and moved else 1


def oom(args: argparse.Namespace) -> int:
    from esc.cards import load_cards
    from esc.chat.base import GenerationSettings
    from esc.chat.build import backend_settings, build_backend

    cfg = compose([f"model@target.backend.model={args.model}"], config_name="evaluate").target.backend
    backend_cfg = OmegaConf.to_container(cfg, resolve=True)
    backend_cfg.update(batch_size=args.rows, prefix_cache_gb=0, device="auto")
    cards = load_cards(language="en", limit=args.rows)
    # long prompts: each card's text several times over, so a call of --rows rows needs gigabytes
    conversations = [
        [{"role": "user", "content": "\n".join([card.to_text()] * args.repeat)}] for card in cards
    ]
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, temperature=0.0)

    reference = build_backend(
        backend_settings({**backend_cfg, "batch_size": 8}, "target.backend"), "target.backend"
    )
    expected = [r.text for r in reference.generate(conversations, settings)]
    reference.close()

    backend = build_backend(backend_settings(backend_cfg, "target.backend"), "target.backend")
    backend.load()
    model = backend._model
    tok = backend._tokenizer
    tokens = [len(tok(tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False)).input_ids)
              for c in conversations]  # fmt: skip
    if torch.cuda.is_available() and not args.simulate:
        torch.cuda.empty_cache()
        weights = torch.cuda.memory_allocated()
        total = torch.cuda.get_device_properties(0).total_memory
        cap = weights + args.headroom_gib * 2**30
        torch.cuda.set_per_process_memory_fraction(cap / total)
        where = f"CUDA memory capped at {cap / 2**30:.2f} GiB (weights {weights / 2**30:.2f} GiB + headroom)"
    else:
        real_forward = model.forward

        def forward(*a: Any, **kw: Any) -> Any:
            ids = kw.get("input_ids", a[0] if a else None)
            if ids is not None and ids.shape[0] > args.simulate_rows:
                raise torch.OutOfMemoryError(f"simulated: {ids.shape[0]} rows > {args.simulate_rows}")
            return real_forward(*a, **kw)

        model.forward = forward
        where = f"simulated out-of-memory above {args.simulate_rows} rows (no CUDA cap)"
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("esc.chat.backends.hf").addHandler(handler)
    start = time.perf_counter()
    replies = backend.generate(conversations, settings)
    seconds = time.perf_counter() - start
    splits = [r.getMessage() for r in records if "out of GPU memory" in r.getMessage()]
    texts = [r.text for r in replies]
    answered = sum(r.finish_reason != "error" for r in replies)
    same = sum(a == b for a, b in zip(texts, expected, strict=True))
    print(f"{where}; {args.rows} conversations of {min(tokens)}-{max(tokens)} prompt tokens, batch_size "
          f"{args.rows}, {args.max_new_tokens} new tokens: {len(splits)} splits, batch_size now "
          f"{backend.batch_size}, {answered}/{len(texts)} replies in {seconds:.1f} s; identical to the "
          f"uncapped 8-row calls: {same}/{len(texts)}")  # fmt: skip
    for line in splits[:6]:
        print("  log: " + line)
    if torch.cuda.is_available():
        torch.cuda.set_per_process_memory_fraction(1.0)
    survived = bool(splits) and answered == len(texts) and backend.batch_size < args.rows
    print("out-of-memory back-off: " + ("survived" if survived else "FAILED"))
    return 0 if survived else 1


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("versions").set_defaults(run=versions)
    p = sub.add_parser("build")
    p.add_argument("model")
    p.set_defaults(run=build)
    p = sub.add_parser("trained")
    p.add_argument("out")
    p.add_argument("model")
    p.add_argument("--loss-only", action="store_true", help="the losses and step times, no adapter reload")
    p.set_defaults(run=trained)
    p = sub.add_parser("oom")
    p.add_argument("model")
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--repeat", type=int, default=4, help="copies of the card text in each prompt")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--headroom-gib", type=float, default=2.0)
    p.add_argument("--simulate", action="store_true")
    p.add_argument("--simulate-rows", type=int, default=8)
    p.set_defaults(run=oom)
    args = parser.parse_args()
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

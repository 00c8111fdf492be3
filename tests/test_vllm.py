"""The real vLLM engine (CPU build) serving the tiny model behind the `openai` backend.

Slow and opt-in: `make test-vllm` installs vLLM's CPU build into `.venv-vllm` (several GB) and runs
this file with ESC_VLLM_PYTHON pointing at that interpreter. Startup takes 1-2 minutes.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from esc.interact.run import evaluate
from esc.interact.store import read_dialogues
from tests.helpers import compose, evaluate_config, requires_data

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
    from esc.models.loading import resolve_model_path

    model = resolve_model_path(compose(["model=tiny"]).model)
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
        result = evaluate(cfg)
        assert result["counts"]["completed"] == 6
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

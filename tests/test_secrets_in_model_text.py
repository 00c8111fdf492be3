"""A key a model repeats, and a password in a `base_url`, reach no file a run writes (issue 36, 1-4, 10).

A careless OpenAI-compatible server (`tests/fake_openai_server.py`, fault `echo_key`) puts the
request's credentials into every reply: the target's turns, the observer's emotion reasons, a judge's
raw reply and a pairwise judge's raw reply all hold them. After evaluate.py, rank.py (score, W&B
offline; pairwise) and `esc report`, no file under any run folder, the request cache included, holds
the key, the `base_url` password or the HTTP Basic credentials it becomes, and neither does the console.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

from esc.secrets.redaction import MASK
from tests.fake_openai_server import FakeOpenAIServer
from tests.helpers import requires_data, run_entry

ENV_KEY = "sk-SWEEPSECRET-0123456789abcdef"
URL_PASSWORD = "URLSECRET-55555"
BASIC = base64.b64encode(f"esc:{URL_PASSWORD}".encode()).decode()
PLANTED = (ENV_KEY, URL_PASSWORD, BASIC)


def _leaks(root: Path) -> list[str]:
    """`grep -r` for every planted value over `root`: 'file: value' for each hit."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.relative_to(root)}: {key}" for key in PLANTED if key.encode() in data]
    return found


def _second_target(run: Path, dest: Path) -> Path:
    """`run`'s dialogues as another target's (pairwise compares two targets on the same cards)."""
    (dest / "dialogues").mkdir(parents=True)
    for path in (run / "dialogues").glob("*.jsonl"):
        if path.name.endswith(".failed.jsonl"):
            continue
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for record in lines:
            record["target"] = "other"
        name = path.name.replace("gpt4__", "other__", 1)
        (dest / "dialogues" / name).write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines)
        )
    return dest


@requires_data
def test_a_key_a_model_echoes_and_a_url_password_reach_no_file(tmp_path: Path) -> None:
    env = {"OPENAI_API_KEY": ENV_KEY, "WANDB_MODE": "offline", "ESC_CACHE_DIR": str(tmp_path / "cache")}
    with FakeOpenAIServer(fault_every="echo_key") as server:
        plain = [f"base_url={server.url}", "model=tiny", "price=null"]
        with_password = server.url.replace("http://", f"http://esc:{URL_PASSWORD}@")
        evaluate = run_entry(
            "evaluate.py",
            [
                "roleplayer=tiny",
                "target=gpt4",
                *(f"target.backend.{o}" for o in plain),
                "+target@trajectory.observer=gpt4",
                *(f"trajectory.observer.backend.{o}" for o in plain),
                "trajectory.enabled=true",
                "trajectory.rater=observer",
                "trajectory.method=parse",
                "cards.languages=[en]",
                "cards.limit=1",
                "dialogue.turns=2",
                f"hydra.run.dir={tmp_path / 'evaluate'}",
            ],
            env=env,
        )
        assert evaluate.returncode == 0, evaluate.stderr[-3000:]
        [dialogues] = (tmp_path / "evaluate" / "dialogues").glob("gpt4__*.jsonl")
        [dialogue] = [json.loads(line) for line in dialogues.read_text().splitlines()]
        target_turns = [t for t in dialogue["turns"] if t["speaker"] == "target"]
        assert all(f"my key is {MASK}" in t["text"] for t in target_turns)  # the server echoed; masked
        assert all(f"my key is {MASK}" in t["emotion"]["raw"] for t in dialogue["turns"] if t.get("emotion"))

        judge = [
            f"judge.backend.base_url={with_password}",
            "judge.backend.model=tiny",
            "judge.backend.price=null",
        ]
        rank = run_entry(
            "rank.py",
            [
                "judge=gpt4",
                *judge,
                "dimensions=[empathy]",
                f"dialogues={tmp_path / 'evaluate'}",
                "wandb.enabled=true",
                f"hydra.run.dir={tmp_path / 'rank'}",
            ],
            env=env,
        )
        assert rank.returncode in (0, 1, 3), rank.stderr[-3000:]  # 1: no valid judgment (tiny's words)
        [scores] = (tmp_path / "rank" / "scores").glob("*.jsonl")
        assert f"Basic {MASK}" in scores.read_text()  # the raw reply kept, the credentials masked
        other = _second_target(tmp_path / "evaluate", tmp_path / "other")
        pairwise = run_entry(
            "rank.py",
            [
                "mode=pairwise",
                "judge=gpt4",
                *judge,
                "dimensions=[empathy]",
                f"dialogues=[{tmp_path / 'evaluate'},{other}]",
                f"hydra.run.dir={tmp_path / 'pairwise'}",
            ],
            env=env,
        )
        assert pairwise.returncode in (0, 3), pairwise.stderr[-3000:]
        assert MASK in "".join(p.read_text() for p in (tmp_path / "pairwise" / "pairwise").glob("*.jsonl"))
    site = run_entry(
        "-m", ["esc", "report", str(tmp_path / "rank"), "--out", str(tmp_path / "site")], env=env
    )
    assert site.returncode == 0, site.stderr[-3000:]
    assert any(MASK in p.read_text() for p in (tmp_path / "site" / "dialogues").rglob("*.html"))
    assert (tmp_path / "rank" / "wandb").is_dir() and (tmp_path / "cache").is_dir()
    assert URL_PASSWORD not in (tmp_path / "rank" / ".hydra" / "overrides.yaml").read_text()

    leaks = [
        f"{run}/{leak}"
        for run in ("evaluate", "rank", "pairwise", "site", "cache")
        for leak in _leaks(tmp_path / run)
    ]
    assert leaks == []
    for result in (evaluate, rank, pairwise, site):  # and not on the console, where a SLURM log keeps it
        for key in PLANTED:
            assert key not in result.stdout + result.stderr
    shutil.rmtree(tmp_path / "other")

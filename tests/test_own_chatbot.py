"""Issue 54, item 6: "evaluate my chatbot behind an OpenAI-compatible API" runs as the README writes
it, with the fake server standing in for the user's; the template sets no price, so none applies."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

from tests.helpers import REPO_ROOT


def _block() -> str:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- your-own-chatbot -->\n```bash\n(.*?)```\n<!-- /your-own-chatbot -->", text, re.S)
    assert found, "README: the 'Your own chatbot' block is gone"
    return found.group(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_readme_block_runs_as_written(tmp_path: Path) -> None:
    port = str(_free_port())
    # the block as written; only its port (another test may hold 8011) and output folder differ
    script = _block().replace("8011", port).replace("outputs/", f"{tmp_path}/")
    script = script.replace("python ", f"{REPO_ROOT / '.venv' / 'bin' / 'python'} ", 3)
    # wait for the server to listen before the first request (a person starts it, then types on)
    script = script.replace(
        "&      # stands in for your server\n",
        f"&\nfor i in $(seq 100); do (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; "
        "sleep 0.2; done\n",
    )
    done = subprocess.run(
        ["bash", "-e", "-c", "set -m\n" + script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "target my_bot: 4 requests, <=" in done.stdout and "no price" in done.stdout  # as the README says
    dialogues = tmp_path / "my_bot" / "dialogues" / "my_bot__tiny__en.jsonl"
    records = [json.loads(line) for line in dialogues.read_text().splitlines()]
    assert len(records) == 2 and all(r["status"] == "complete" and r["target"] == "my_bot" for r in records)
    manifest = json.loads((tmp_path / "my_bot" / "manifest.json").read_text())
    assert "0.03" not in json.dumps(manifest.get("cost", {}))  # GPT-4's price never applies
    assert (tmp_path / "my_bot_rank" / "leaderboard.md").is_file()


def test_the_template_has_placeholders_and_no_price() -> None:
    from tests.helpers import compose

    cfg = compose(["target=openai_compatible"], config_name="evaluate")
    assert cfg.target.backend.price is None and cfg.target.backend.api_key_env is None
    for key in ("model", "base_url"):
        assert cfg.target.backend._get_node(key)._is_missing(), key  # ???: the user must give it
    assert cfg.target.name == "openai_compatible"  # a placeholder: target.name=my_bot names yours

"""`esc dialogues show`: dialogues as transcripts, wrapped to the terminal's width."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rich.cells import cell_len

from esc.cli import main as esc_main
from esc.dialogues.record import Dialogue, Turn
from esc.dialogues.transcript import render_transcript
from tests.helpers import REPO_ROOT

LONG_EN = (
    "I have been feeling anxious about my exams for weeks now, and every night I lie awake going "
    "over everything I have not studied yet.\nMy parents expect top grades."
)
LONG_ZH = "我最近工作压力很大，每天加班到很晚，回到家也睡不着，总觉得自己做得不够好，领导也不满意。"


def dialogue(card_id: int = 32025, language: str = "en", status: str = "complete") -> Dialogue:
    return Dialogue(
        card_id=card_id,
        language=language,
        roleplayer="esc_role_smollm2",
        target="smollm2",
        system_prompt="Play a person with worries. Card: Age: 20\nProblem: exams",
        opener="Hello, I'm your personal assistant.",
        target_system_prompt="You are a helpful assistant!",
        turns=[
            Turn("roleplayer", LONG_EN if language == "en" else LONG_ZH, "stop"),
            Turn("target", "That sounds hard. " * 12, "length", context_dropped=2),
        ],
        status=status,
        error="ScriptedError: boom" if status == "failed" else None,
        meta={"prompt": {"id": "esc_role_figure11", "version": 1}},
    )


def write(path: Path, *dialogues: Dialogue) -> Path:
    path.write_text("".join(json.dumps(d.to_dict(), ensure_ascii=False) + "\n" for d in dialogues))
    return path


def words(text: str) -> list[str]:
    return text.split()


def test_transcript_names_speakers_and_finish_reasons_and_keeps_every_word() -> None:
    text = render_transcript(dialogue(), width=100)
    assert "[role-player · esc_role_smollm2] (stop)" in text
    assert "[target · smollm2] (length, 2 oldest messages left out of its context)" in text
    assert "1 exchanges, 2 messages" in text and "esc_role_figure11 v1" in text
    assert "status: complete" in text
    body = text.split("[role-player · esc_role_smollm2] (stop)")[1].split("[target")[0]
    assert words(body) == words(LONG_EN)  # wrapped, nothing lost or reordered
    assert "My parents expect top grades." in body.splitlines()[-2]  # its own line, as written


def test_lines_fit_the_width_in_display_cells_including_chinese() -> None:
    for width in (40, 72):
        for language in ("en", "zh"):
            text = render_transcript(dialogue(language=language), width=width)
            assert max(cell_len(line) for line in text.splitlines()) <= width
    zh = render_transcript(dialogue(language="zh"), width=40)
    assert "".join(zh.split("(stop)")[1].split("[target")[0].split()) == LONG_ZH


def test_brief_leaves_the_prompts_out() -> None:
    full, brief = render_transcript(dialogue(), 80), render_transcript(dialogue(), 80, prompts=False)
    assert "Card: Age: 20" in full and "You are a helpful assistant!" in full
    assert "Card: Age: 20" not in brief and "opener" not in brief and LONG_EN.split()[0] in brief


def test_failed_dialogue_shows_its_error() -> None:
    text = render_transcript(dialogue(status="failed"), 100)
    assert "status: failed: ScriptedError: boom" in " ".join(text.split())


def test_show_filters_by_card_and_limit(tmp_path: Path, capsys) -> None:
    path = write(tmp_path / "t__r__en.jsonl", dialogue(1), dialogue(2), dialogue(3))
    assert esc_main(["dialogues", "show", str(path), "--card", "2", "--width", "80"]) == 0
    out = capsys.readouterr().out
    assert "card 2 (en)" in out and "card 1 (en)" not in out and "card 3 (en)" not in out
    assert esc_main(["dialogues", "show", str(path), "--limit", "2", "--brief", "--width", "80"]) == 0
    out = capsys.readouterr().out
    assert out.count("card 1 (en)") == out.count("card 2 (en)") == 1 and "card 3" not in out


def test_show_unknown_card_or_missing_file_is_one_line_error(tmp_path: Path) -> None:
    path = write(tmp_path / "t__r__en.jsonl", dialogue(1))
    for args in (["--card", "99"], []):
        target = str(path) if args else str(tmp_path / "nope.jsonl")
        run = subprocess.run(
            [sys.executable, "-m", "esc", "dialogues", "show", target, *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
        )
        assert run.returncode == 2 and "Traceback" not in run.stderr
        assert run.stderr.count("\n") == 1 and ("card 99" in run.stderr or "nope.jsonl" in run.stderr)

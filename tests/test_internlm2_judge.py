"""ESC-RANK without remote code: the tokenizer's conversion against InternLM2's own tokenizer, and
`judge=esc_rank` on a tiny InternLM2 folder with 14 adapters in the released layout.

The tokenizer reference (tests/fixtures/internlm2_tiny/reference_tokens.json) was recorded once with
InternLM2's `tokenization_internlm2.py` (SOURCES.md). The judge is given an InternLM2 folder with no
modelling code in it at all (so remote code could not run if anything tried) and converts it, its
tokenizer and its adapters once into the cache.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from esc.models.internlm2 import convert_tokenizer
from esc.scoring.judge import DIGITS, VALID, ScoreItem
from esc.scoring.rubrics import DIMENSION_KEYS, dimension
from tests.helpers import requires_data, run_entry

FIXTURE = Path(__file__).parent / "fixtures" / "internlm2_tiny"
TOKENS = json.loads((FIXTURE / "reference_tokens.json").read_text())


@pytest.mark.parametrize("folder", ["tokenizer_dp", "tokenizer_nodp"])
def test_internlm2_convert_tokenizer_gives_internlm2s_ids(folder: str, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(convert_tokenizer(FIXTURE / folder, tmp_path / "tok"))
    reference = TOKENS[folder]
    for key, text in TOKENS["texts"].items():
        assert tok(text).input_ids == reference["texts"][key]["with_special"], key
        assert tok(text, add_special_tokens=False).input_ids == reference["texts"][key]["without_special"], (
            key
        )
    rendered = tok.apply_chat_template(TOKENS["chat"], tokenize=False, add_generation_prompt=True)
    assert rendered == reference["chat_text"]
    assert tok(rendered, add_special_tokens=False).input_ids == reference["chat_ids"]
    assert {t: tok.convert_tokens_to_ids(t) for t in reference["special_ids"]} == reference["special_ids"]


def test_internlm2_convert_tokenizer_without_legacy_prefixes_fails(tmp_path: Path, monkeypatch) -> None:
    """Sentencepiece's dummy prefix after each special token is what InternLM2's tokenizer does; the
    non-legacy scheme (a prefix only at the start) gives other ids, and the test sees it."""
    from transformers.convert_slow_tokenizer import SpmConverter

    real = SpmConverter.build_tokenizer_from_spm_proto
    monkeypatch.setattr(
        SpmConverter, "build_tokenizer_from_spm_proto",
        staticmethod(lambda proto, vocab, merges=None, legacy=True: real(proto, vocab, merges, legacy=False)),
    )  # fmt: skip
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(convert_tokenizer(FIXTURE / "tokenizer_dp", tmp_path / "tok"))
    specials = TOKENS["texts"]["specials"]
    assert tok(specials).input_ids != TOKENS["tokenizer_dp"]["texts"]["specials"]["with_special"]


def fixture_module():
    spec = importlib.util.spec_from_file_location("make_fixture", FIXTURE / "make_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def esc_rank_folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny InternLM2 folder and the released ESC-RANK layout (make_fixture.write_esc_rank)."""
    keys = [dimension(key).official_key for key in DIMENSION_KEYS]
    return fixture_module().write_esc_rank(tmp_path_factory.mktemp("esc-rank"), keys)


def judge_config(base: Path, released: Path) -> dict:
    from omegaconf import OmegaConf

    from tests.helpers import compose

    overrides = ["judge=esc_rank", f"judge.model.name_or_path={base}", "judge.model.dtype=float32",
                 f"judge.adapters.root={released}", "judge.device=cpu", "judge.min_answer_mass=0",
                 "dialogues=x"]  # fmt: skip
    return OmegaConf.to_container(compose(overrides, config_name="rank").judge, resolve=True)


def items() -> list[ScoreItem]:
    lines = (
        ("user", "I failed my exam and I feel useless."),
        ("assistant", "That sounds hard. What happened?"),
        ("user", "我觉得没有人理解我。"),
        ("assistant", "我在这里听你说。"),
    )
    return [
        ScoreItem(f"d{n}", key, language, lines[: 2 + 2 * (n % 2)])
        for n in range(2) for key in DIMENSION_KEYS for language in ("en", "zh")
    ]  # fmt: skip


def test_esc_rank_judge_on_an_internlm2_folder_batches_each_rows_adapter_as_one_at_a_time(
    esc_rank_folders, tmp_path: Path, monkeypatch
) -> None:
    """All 28 items (2 dialogues x 7 dimensions x 2 languages) in one call, each row naming its own
    adapter (read in batches of up to 8 per rubric, its text before the dialogue prefilled once),
    give the expected scores of score.py's shape: one adapter active, one item at a time."""
    from peft import PeftModel
    from transformers import LlamaForCausalLM

    from esc.scoring.judges import build_judge, judge_settings

    monkeypatch.setenv("ESC_CACHE_DIR", str(tmp_path / "cache"))
    base, released = esc_rank_folders
    judge = build_judge(judge_settings(judge_config(base, released)))
    judged = judge.judge(items())
    assert all(j.status == VALID for j in judged)
    assert judge.identity()["loaded_as"].startswith("LlamaForCausalLM converted from InternLM2")
    loaded = judge._loaded_paths
    converted = Path(str(judge.backend.model.name_or_path))
    assert converted.is_relative_to(tmp_path / "cache" / "converted") and len(loaded) == 14
    answer_ids = judge.answers(DIGITS)
    model = LlamaForCausalLM.from_pretrained(converted, dtype=torch.float32).eval()
    one = None
    for item, batched in zip(items(), judged, strict=True):
        adapter = loaded[str(judge.paths[(item.dimension, item.language)])]
        if one is None:
            one = PeftModel.from_pretrained(model, adapter, adapter_name=adapter).eval()
        elif adapter not in one.peft_config:
            one.load_adapter(adapter, adapter_name=adapter)
        one.set_adapter(adapter)
        with torch.no_grad():
            logits = one(torch.tensor([judge.prompt_ids(item)])).logits[0, -1]
        p = torch.softmax(logits.double(), -1)
        probs = torch.stack([p[list(ids)].sum() for ids in answer_ids.ids])  # an answer's spellings summed
        expected = float((probs / probs.sum() * torch.arange(5)).sum())
        assert abs(expected - batched.expected) < 1e-4, (item.item_id, item.dimension, item.language)
    assert len({round(j.expected, 3) for j in judged}) > 10  # the adapters make the scores differ
    judge.close()


@requires_data
def test_rank_py_judge_esc_rank_runs_a_converted_internlm2_without_remote_code(
    esc_rank_folders, tmp_path
) -> None:
    base, released = esc_rank_folders
    dialogues = tmp_path / "eval"
    args = ["roleplayer=tiny", "target=tiny", "cards.limit=1", "engine.progress=false", "cache.enabled=false",
            f"hydra.run.dir={dialogues}"]  # fmt: skip
    assert run_entry("evaluate.py", args).returncode == 0
    out = tmp_path / "rank"
    overrides = ["judge=esc_rank", f"judge.model.name_or_path={base}", "judge.model.dtype=float32",
                 f"judge.adapters.root={released}", "judge.device=cpu", "judge.min_answer_mass=0",
                 f"dialogues={dialogues}", "scoring.progress=false", f"hydra.run.dir={out}"]  # fmt: skip
    result = run_entry("rank.py", overrides, env={"ESC_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr[-3000:]
    assert not list(base.glob("*.py"))  # there was no remote code to run
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["judgments"]["empathy"] == {"valid": 2, "invalid": 0, "failed": 0}  # en + zh
    assert "loaded_as" in json.dumps(manifest["judge"])

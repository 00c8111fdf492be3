"""Seeker profiles (issue 65, docs/seekers.md): the cooperative seeker is today's, byte for byte; every
other profile is one more line of the role card in every kind of role-player prompt, in both
languages; its dialogues name it; a folder of one profile never resumes or merges as another; a
profile text changed without a new version is refused."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

import tests.scripted_backend  # noqa: F401  (registers backend kind "scripted")
from esc.dialogues.store import read_dialogues
from esc.errors import UserError
from esc.prompts import seekers
from esc.prompts.registry import LANGUAGES, prompt_ids, render_roleplayer_prompt, texts_checksum
from esc.prompts.seekers import (
    COOPERATIVE,
    adherence_question,
    instruction,
    profile_names,
    profile_version,
    record_identity,
)
from tests.helpers import (
    CONF_DIR,
    REPO_ROOT,
    compose,
    evaluate_config,
    refused,
    requires_data,
    run_entry,
    run_job,
)

BEFORE = json.loads((Path(__file__).parent / "fixtures" / "seekers_cooperative_before.json").read_text())
HARD = [name for name in profile_names() if name != COOPERATIVE]
VOLATILE = {"latency_s", "cached"}  # what differs between two runs of one dialogue
CARDS = {  # synthetic cards: the prompts render without the released data
    "en": "Age: 30\nGender: Female\nOccupation: Teacher\nProblem: Argues with her husband about money.",
    "zh": "年龄：30\n性别：女\n职业：教师\n问题：和丈夫为钱争吵。",
}


def scripted_run(out: Path, *overrides: str) -> Path:
    """An evaluate.py run on 2 released cards per language, 2 exchanges, the scripted backend on both
    sides: every reply is a digest of what its side was sent, so any change of a prompt shows."""
    cfg = evaluate_config(
        out, "cards.limit=2", "dialogue.turns=2", *overrides,
        roleplayer_backend={"kind": "scripted", "label": "seeker"},
        target_backend={"kind": "scripted", "label": "helper"},
    )  # fmt: skip
    run_job("evaluate", cfg)
    return out


def digests(out: Path) -> dict[str, str]:
    """sha256 of each dialogue file's records (timings and cache hits left out) and of the folder's
    settings (its `evaluate` entry): what `fixtures/seekers_cooperative_before.json` holds."""
    found = {}
    for path in sorted((out / "dialogues").glob("*.jsonl")):
        rows = []
        for dialogue in read_dialogues(path):
            row = dialogue.to_dict()
            row["turns"] = [{k: v for k, v in t.items() if k not in VOLATILE} for t in row["turns"]]
            rows.append(json.dumps(row, ensure_ascii=False))
        found[path.name] = hashlib.sha256("\n".join(rows).encode()).hexdigest()
    settings = json.loads((out / "settings.json").read_text(encoding="utf-8"))["evaluate"]
    found["settings.json"] = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
    return found


def card_text(card_id: int, language: str) -> str:
    """A released card's text as the role-player prompts insert it (stripped where an entry strips)."""
    from esc.cards import load_cards

    return next(c for c in load_cards(language=language) if c.id == card_id).to_text().strip()


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- the profiles -------------------------------------------------------------------------------


def test_the_config_group_is_the_registry_and_evaluate_yaml_names_every_option() -> None:
    """conf/seeker/ holds one file per profile of esc/prompts/seekers.yaml, each naming its own
    profile; the default is cooperative; the defaults list's comment names every option."""
    files = sorted(p.stem for p in (CONF_DIR / "seeker").glob("*.yaml"))
    assert files == sorted(profile_names()) and COOPERATIVE in files and len(HARD) >= 5
    for name in files:
        assert yaml.safe_load((CONF_DIR / "seeker" / f"{name}.yaml").read_text()) == {"name": name}
        assert compose([f"seeker={name}"], config_name="evaluate").run_name == f"tiny__tiny__{name}"
    assert compose([], config_name="evaluate").seeker.name == COOPERATIVE
    comment = (
        (CONF_DIR / "evaluate.yaml").read_text().split("  - seeker: cooperative")[1].split("  - cache")[0]
    )
    assert all(name in comment for name in profile_names()), comment


@pytest.mark.parametrize("name", profile_names())
def test_every_profile_has_its_texts_in_both_languages(name: str) -> None:
    """A hard profile: an instruction and an adherence question in each language; the cooperative
    seeker: no text and no question (the baseline of every profile's question, docs/seekers.md)."""
    for language in LANGUAGES:
        if name == COOPERATIVE:
            assert instruction(name, language) == "" and adherence_question(name, language) is None
            assert record_identity(name, language) is None
            continue
        text, question = instruction(name, language), adherence_question(name, language)
        assert text.strip() and question and question.strip()
        assert question.endswith("?") if language == "en" else question.endswith("？"), question
        assert record_identity(name, language) == {
            "name": name,
            "version": profile_version(name),
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        }
    if name != COOPERATIVE:  # written for each language, not left in English
        assert instruction(name, "en") != instruction(name, "zh")
        assert any("\u4e00" <= ch <= "\u9fff" for ch in instruction(name, "zh"))


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", HARD)
def test_each_profile_is_a_line_of_the_card_in_every_kind_of_prompt(name: str, language: str) -> None:
    """Every role-player prompt (templates, their alias `tiny`, Baichuan-NPC's JSON, the ESC-Role
    training prompt esc_role_local plays with) holds the profile's instruction right after the card,
    and nothing else of it changes: the prompt with the profile is the prompt of the card with the
    instruction as one more line."""
    card, text = CARDS[language], instruction(name, language)
    kinds = set()
    for prompt_id in prompt_ids():
        plain, opener = render_roleplayer_prompt(prompt_id, language, card, "seeker: hi")
        system, opener_too = render_roleplayer_prompt(prompt_id, language, card, "seeker: hi", text)
        assert opener_too == opener, prompt_id
        assert render_roleplayer_prompt(prompt_id, language, card, "seeker: hi", "")[0] == plain
        if prompt_id.startswith("baichuan_npc"):
            kinds.add("baichuan_npc_json")
            profile, before = json.loads(system), json.loads(plain)
            assert profile["basic_info"] == f"{card}\n{text}"
            assert {**profile, "basic_info": card} == before
        else:
            kinds.add("template")
            assert f"{card}\n{text}" in system and system == plain.replace(card, f"{card}\n{text}", 1)
    assert kinds == {"template", "baichuan_npc_json"} and {"tiny", "esc_role_figure11"} <= set(prompt_ids())


def test_a_card_ending_in_a_newline_gets_no_second_one() -> None:
    text = instruction(HARD[0], "en")
    system, _ = render_roleplayer_prompt("esc_role_official", "en", CARDS["en"] + "\n", None, text)
    assert f"{CARDS['en']}\n{text}\n'" in system  # the official script's quote closes after it


# --- playing them -------------------------------------------------------------------------------


@requires_data
@pytest.mark.parametrize("roleplayer", sorted(BEFORE["digests"]))
def test_the_cooperative_seeker_plays_exactly_what_was_played_before_profiles(
    roleplayer: str, tmp_path: Path
) -> None:
    """seeker=cooperative (the default) against the digests written before profiles existed
    (fixtures/seekers_cooperative_before.json): the same dialogue records byte for byte, what each
    side was sent included (the scripted replies are digests of it), and the same fingerprint."""
    out = scripted_run(tmp_path / "coop", f"roleplayer={roleplayer}", "seeker=cooperative")
    assert digests(out) == BEFORE["digests"][roleplayer]
    for path in (out / "dialogues").glob("*.jsonl"):
        assert all("seeker" not in d.meta and d.seeker is None for d in read_dialogues(path))


@requires_data
@pytest.mark.parametrize("roleplayer", ["tiny", "baichuan_npc_icl", "esc_role_local"])
def test_a_profile_is_played_and_every_record_names_it(roleplayer: str, tmp_path: Path) -> None:
    """The role-player is sent the card with the profile's line (what the record keeps as its system
    prompt is what the scripted role-player saw); each record names the profile, its version and the
    sha256 of the line in the card's language; the folder's fingerprint records it too."""
    from tests.scripted_backend import ScriptedBackend

    ScriptedBackend.instances.clear()
    out = scripted_run(tmp_path / "resistant", f"roleplayer={roleplayer}", "seeker=resistant")
    seeker = ScriptedBackend.instances[-2]
    sent = {batch[0]["content"] for call in seeker.calls for batch in call}
    for language in LANGUAGES:
        [path] = (out / "dialogues").glob(f"*__{language}.jsonl")
        for dialogue in read_dialogues(path):
            system = dialogue.system_prompt  # Baichuan-NPC's is a JSON object: the card in basic_info
            card = json.loads(system)["basic_info"] if roleplayer.startswith("baichuan") else system
            assert f"{card_text(dialogue.card_id, language)}\n{instruction('resistant', language)}" in card
            assert dialogue.system_prompt in sent
            assert dialogue.meta["seeker"] == record_identity("resistant", language)
            assert list(dialogue.meta)[:2] == ["prompt", "seeker"]
    settings = json.loads((out / "settings.json").read_text(encoding="utf-8"))["evaluate"]
    assert settings["seeker"] == {"name": "resistant", "version": profile_version("resistant")}


@requires_data
def test_a_sweep_plays_each_profile_in_a_folder_named_after_it(tmp_path: Path) -> None:
    """`evaluate.py -m seeker=resistant,guarded` on the tiny model: the run name (the default folders'
    name) carries the profile, so two profiles never share a folder; each folder's records name its
    own."""
    result = run_entry(
        "evaluate.py",
        [
            "-m", "seeker=resistant,guarded", "roleplayer=tiny", "target=tiny", "cards.limit=1",
            "cards.languages=[en]", "dialogue.turns=1", "cache.enabled=false", "engine.progress=false",
            f"hydra.sweep.dir={tmp_path}/${{run_name}}",
        ],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    for number, name in enumerate(["resistant", "guarded"]):
        [dialogue] = read_dialogues(
            tmp_path / f"tiny__tiny__{name}" / str(number) / "dialogues" / "tiny__tiny__en.jsonl"
        )
        assert dialogue.seeker == record_identity(name, "en") and dialogue.status == "complete"


# --- one profile per folder ----------------------------------------------------------------------


@requires_data
def test_a_folder_of_one_profile_never_resumes_as_another(tmp_path: Path) -> None:
    """A resistant folder rerun as another profile is refused before any work, every file as it was:
    from its settings.json, or from its dialogues when it has none; another version of the same
    profile too. Rerun as resistant, it resumes."""
    out = scripted_run(tmp_path / "run", "seeker=resistant")
    before = files_of(out)
    for other in ("cooperative", "guarded"):  # the fingerprint says resistant
        with pytest.raises(UserError) as err:
            scripted_run(out, f"seeker={other}")
        assert (
            f"played by the resistant (version 1) seeker (settings.json), this run plays the {other}"
            in str(err.value)
        )
        assert "rerun with seeker=resistant to resume it" in str(err.value)
        assert files_of(out) == before  # nothing lost, nothing written
    # a folder without its settings record (copied dialogues): the dialogues say which profile
    (out / "settings.json").unlink()
    with pytest.raises(
        UserError, match=r"\(tiny__tiny__en.jsonl, card \d+\), this run plays the cooperative"
    ):
        scripted_run(out)
    # the same profile at another version (its text changed since): never resumed either
    path = out / "dialogues" / "tiny__tiny__en.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for line in lines:
        line["meta"]["seeker"]["version"] = 0
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    with pytest.raises(
        UserError, match=r"resistant \(version 0\) seeker .* its text has a new version since"
    ):
        scripted_run(out, "seeker=resistant")
    # the folder's own profile resumes it: every dialogue is there already
    shutil.rmtree(out)
    scripted_run(out, "seeker=resistant")
    cfg = evaluate_config(
        out, "cards.limit=2", "dialogue.turns=2", "seeker=resistant",
        roleplayer_backend={"kind": "scripted", "label": "seeker"},
        target_backend={"kind": "scripted", "label": "helper"},
    )  # fmt: skip
    assert run_job("evaluate", cfg).counts["skipped"] == 4


@requires_data
def test_a_merge_of_two_profiles_is_one_error_line_and_one_profile_merges(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    coop = scripted_run(tmp_path / "coop")
    shards = [
        scripted_run(tmp_path / f"shard{i}", "seeker=resistant", f"shard.index={i}", "shard.count=2")
        for i in (0, 1)
    ]
    line = refused(
        capsys, ["dialogues", "merge", str(coop), str(shards[0]), "--out", str(tmp_path / "merged")]
    )
    assert "dialogues of two seeker profiles (cooperative and resistant (version 1)" in line
    assert "merge each profile's folders into one of its own" in line and not (tmp_path / "merged").exists()
    # the shards of one profile merge, and the merged records still name it
    from esc.cli import main

    assert main(["dialogues", "merge", *map(str, shards), "--out", str(tmp_path / "merged")]) == 0
    merged = list(read_dialogues(tmp_path / "merged" / "dialogues" / "tiny__tiny__en.jsonl"))
    assert len(merged) == 2 and all(d.seeker == record_identity("resistant", "en") for d in merged)
    # and a cooperative folder merged into that one is refused too, leaving it as it was
    before = files_of(tmp_path / "merged")
    line = refused(capsys, ["dialogues", "merge", str(coop), "--out", str(tmp_path / "merged")])
    assert "dialogues of two seeker profiles" in line and files_of(tmp_path / "merged") == before


# --- versions ------------------------------------------------------------------------------------


def _edited(tmp_path: Path, change) -> Path:
    data = yaml.safe_load(seekers.SEEKERS_FILE.read_text(encoding="utf-8"))
    change(data["profiles"])
    path = tmp_path / "seekers.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def test_a_profile_text_changed_without_a_new_version_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As every prompt: evaluate.py refuses to start, naming the file and the profile and the line to
    add; with a new version and its checksum recorded it loads."""

    def edit(profiles: dict) -> None:
        profiles["guarded"]["instruction"]["zh"] += "。"

    edited = _edited(tmp_path, edit)
    monkeypatch.setattr(seekers, "SEEKERS_FILE", edited)
    seekers._profiles.cache_clear()
    try:
        result = run_entry("evaluate.py", ["seeker=guarded", f"hydra.run.dir={tmp_path}/out"])
        assert result.returncode == 2
        [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert line == result.stderr.strip().splitlines()[-1] and "Traceback" not in result.stderr
        assert line.startswith(
            f"error: {edited}: seekers.guarded: its texts changed but its version (1) did not"
        )
        assert "under seekers.guarded in checksums.json" in line and not (tmp_path / "out").exists()
    finally:
        monkeypatch.undo()
        seekers._profiles.cache_clear()

    def edit_and_bump(profiles: dict) -> None:
        edit(profiles)
        profiles["guarded"]["version"] = 2

    edited = _edited(tmp_path, edit_and_bump)
    with pytest.raises(
        UserError, match=r'no checksum for seekers.guarded version 2; .* add  "2": "[0-9a-f]{64}"'
    ):
        seekers.load_seekers(edited)
    checksums = json.loads(seekers.CHECKSUMS_FILE.read_text(encoding="utf-8"))
    profile = yaml.safe_load(edited.read_text(encoding="utf-8"))["profiles"]["guarded"]
    checksums["seekers"]["guarded"]["2"] = texts_checksum(profile)
    (tmp_path / "checksums.json").write_text(json.dumps(checksums), encoding="utf-8")
    assert seekers.load_seekers(edited, tmp_path / "checksums.json")["guarded"]["version"] == 2


def test_the_recorded_checksums_are_those_of_the_texts() -> None:
    """Every profile's version has its line in checksums.json, versions 1..n with none skipped."""
    recorded = json.loads((REPO_ROOT / "esc" / "prompts" / "checksums.json").read_text(encoding="utf-8"))
    assert set(recorded["seekers"]) == set(profile_names())
    for name in profile_names():
        assert sorted(map(int, recorded["seekers"][name])) == list(range(1, profile_version(name) + 1))

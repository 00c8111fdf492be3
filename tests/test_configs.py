"""Every experiment and every option of every config group composes and resolves."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from tests.helpers import CONF_DIR, compose, conf_node

EXPERIMENTS = sorted(p.relative_to(CONF_DIR / "exp").with_suffix("").as_posix()
                     for p in (CONF_DIR / "exp").glob("*/*.yaml"))  # fmt: skip
CONFIG_OF = {"train": "train", "evaluate": "evaluate", "rank": "rank", "cards": "cards"}


def entry_point(exp: str) -> str:
    """The primary config an experiment belongs to: its folder (conf/exp/<entry point>/)."""
    return CONFIG_OF[exp.split("/")[0]]


def test_experiments_sit_in_the_folder_of_their_entry_point() -> None:
    """conf/exp/ holds one folder per entry point and nothing else; each file's header comment gives
    the command that runs it, with that entry point."""
    assert {p.name for p in (CONF_DIR / "exp").iterdir()} == set(CONFIG_OF)
    for exp in EXPERIMENTS:
        header = (CONF_DIR / "exp" / f"{exp}.yaml").read_text().split("defaults:")[0]
        script = "build_cards.py" if exp.startswith("cards/") else f"{exp.split('/')[0]}.py"
        assert f"python {script}" in header and f"+exp={exp}" in header, exp


GROUPS = [
    "model",
    "data",
    "peft",
    "quantization",
    "optimizer",
    "scheduler",
    "strategy",
    "trainer",
    "callbacks",
    "logger",
]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_experiment_composes_and_resolves(exp: str) -> None:
    cfg = compose([f"+exp={exp}"], config_name=entry_point(exp))
    OmegaConf.to_container(cfg, resolve=True)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_table2_sweeps_esc_role_over_the_14_targets(language: str) -> None:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        exp = f"+exp=evaluate/table2_{language}"
        cfg = hydra_compose("evaluate", overrides=[exp], return_hydra_config=True)
    targets = cfg.hydra.sweeper.params.target.split(",")
    assert len(targets) == 14 and set(targets) <= set(options("target"))
    assert cfg.roleplayer.name == "esc_role" and list(cfg.cards.languages) == [language]
    assert cfg.dialogue.turns == 5 and cfg.hydra.launcher.gpus_per_node == 1
    # the exp's documented local run: the basic launcher replaces the SLURM one and its sizing (the sizing
    # set in the exp itself made this "Key 'nodes' not in 'BasicLauncherConf'")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        local = hydra_compose("evaluate", overrides=[exp, "hydra/launcher=basic"], return_hydra_config=True)
    assert "nodes" not in local.hydra.launcher and local.hydra.sweeper.params.target.split(",") == targets


@pytest.mark.parametrize(("group", "option"), [(g, o) for g in GROUPS for o in options(g)])
def test_every_group_option_composes(group: str, option: str) -> None:
    cfg = compose([f"{group}={option}"])
    OmegaConf.to_container(cfg, resolve=True)


def test_debug_config_composes() -> None:
    cfg = compose(["+debug=fast"])
    assert cfg.model.name == "tiny" and cfg.trainer.max_steps == 5


def test_esc_role_is_the_papers_recipe() -> None:
    cfg = compose(["+exp=train/esc_role"])
    assert cfg.model.name_or_path == "Qwen/Qwen1.5-14B-Chat"
    assert cfg.strategy._target_.endswith("DeepSpeedStrategy")
    assert cfg.strategy.config.zero_optimization.stage == 2
    assert cfg.trainer.precision == "bf16-mixed"
    assert cfg.peft.r > 0 and cfg.quantization.load_in_4bit is False
    assert cfg.optimizer.lr == cfg.model.lora_lr


def test_command_line_model_overrides_the_experiment() -> None:
    cfg = compose(["+exp=train/esc_role", "model=tiny", "peft.r=4"])
    assert cfg.model.name == "tiny" and cfg.peft.r == 4
    assert cfg.strategy.config.zero_optimization.stage == 2  # the CPU fallback happens at run time


def test_cfg_job_prints_the_recipe() -> None:
    from tests.helpers import run_entry

    result = run_entry("train.py", ["+exp=train/esc_role", "--cfg", "job"], timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Qwen/Qwen1.5-14B-Chat" in result.stdout
    assert "DeepSpeedStrategy" in result.stdout and "lora_alpha" in result.stdout


def test_backend_and_judge_kinds_come_from_their_registries() -> None:
    """The config check names what the registries know when it runs: a plugin's kind passes, and its
    node is its class's own settings model."""
    import tests.scripted_backend  # noqa: F401  (registers backend kind "scripted")
    from esc.chat.build import Backend, backend_kinds
    from esc.errors import ConfigError
    from esc.scoring.judges import JudgeNode
    from esc.scoring.judges.local import LocalJudge
    from esc.settings.plugins import load_plugin
    from tests.scripted_backend import ScriptedBackend

    assert "scripted" in backend_kinds()
    assert isinstance(load_plugin("b", Backend, {"kind": "scripted"}), ScriptedBackend.Settings)
    with pytest.raises(ConfigError) as err:
        load_plugin("b", Backend, {"kind": "gpt5"})
    assert str(err.value) == f'config `b.kind`: must be one of {", ".join(backend_kinds())}, got "gpt5"'
    judge = load_plugin("judge", JudgeNode, {"kind": "local", "name": "j", "model": conf_node("model")})
    assert isinstance(judge, LocalJudge.Settings) and judge.kind == "local"
    with pytest.raises(ConfigError, match="judge.kind"):
        load_plugin("judge", JudgeNode, {"kind": "human", "name": "j"})


@pytest.mark.parametrize("group", ["roleplayer", "target"])
def test_decoding_comes_from_the_generation_group(group: str) -> None:
    """Each role-player and target composes the five decoding keys from conf/generation/greedy.yaml
    and its own file sets only what differs (no copy of the whole block)."""
    import yaml

    greedy = yaml.safe_load((CONF_DIR / "generation" / "greedy.yaml").read_text())
    for option in options(group):
        own = yaml.safe_load((CONF_DIR / group / f"{option}.yaml").read_text()).get("generation") or {}
        assert set(own) < set(greedy), f"conf/{group}/{option}.yaml restates the whole generation block"
        composed = compose([f"{group}={option}"], config_name="evaluate")[group]["generation"]
        assert set(composed) == set(greedy), f"conf/{group}/{option}.yaml: {sorted(composed)}"


#: the entry point whose config composes each group's options
OPTION_JOBS = {
    "roleplayer": "evaluate", "target": "evaluate", "seeker": "evaluate", "judge": "rank", "jury": "rank",
    "extractor": "cards",
    "cache": "rank",
    **{group: "train" for group in GROUPS},
}  # fmt: skip


@pytest.mark.parametrize(
    "job,override",
    [(exp.split("/")[0], f"+exp={exp}") for exp in EXPERIMENTS]
    + [(job, f"{group}={option}") for group, job in OPTION_JOBS.items() for option in options(group)],
)
def test_every_experiment_and_option_passes_the_schemas(job: str, override: str) -> None:
    """The schemas beside the code know every key a shipped config sets: nothing shipped is refused
    as unknown or out of range (mandatory `???` values aside: the command line sets those)."""
    from esc.config_schema import validate
    from esc.errors import ConfigError

    extra = [f"dialogues={CONF_DIR}"] if job == "rank" else []
    cfg = compose([override, *extra], config_name=CONFIG_OF[job])
    try:
        validate(cfg, job)
    except ConfigError as err:
        assert "is mandatory" in str(err), str(err)


#: a value that names code: a dotted path into esc or a library the configs instantiate from
CODE_PATH = r"(esc|torch|pytorch_lightning|lightning|hydra|transformers|peft|deepspeed|bitsandbytes)(\.\w+)+"


def _leaves(node: object, where: str = "") -> list[tuple[str, object]]:
    """Every (key path, value) of a YAML tree."""
    if isinstance(node, dict):
        return [leaf for key, value in node.items() for leaf in _leaves(value, f"{where}.{key}".lstrip("."))]
    if isinstance(node, list):
        return [leaf for i, value in enumerate(node) for leaf in _leaves(value, f"{where}[{i}]")]
    return [(where, node)]


def test_configs_name_code_one_way() -> None:
    """A config names code by `_target_` only (Hydra instantiates it, or calls it with
    `_partial_`); `kind:` is a registry's name for a backend or judge, never a dotted path."""
    import re

    import yaml

    wrong = []
    for file in sorted(CONF_DIR.rglob("*.yaml")):
        if file.parent.name.endswith("_logging"):
            continue  # Python's logging.config schema, which names its factories `()` and `class`
        for where, value in _leaves(yaml.safe_load(file.read_text()) or {}):
            key = where.rsplit(".", 1)[-1]
            if isinstance(value, str) and re.fullmatch(CODE_PATH, value) and key != "_target_":
                wrong.append(f"{file.relative_to(CONF_DIR)}: {where}: {value}")
            if key == "kind" and "." in str(value):
                wrong.append(f"{file.relative_to(CONF_DIR)}: {where}: {value} (a registry name, not a path)")
    assert not wrong, "code named outside _target_:\n" + "\n".join(wrong)


def test_train_job_and_sample_builder_are_targets() -> None:
    """train.py calls `job` (`_partial_`) with the config; ESC-RANK's experiment swaps only its
    `_target_`; the datamodule calls `data.builder` with the rest of `data`."""
    from hydra.utils import instantiate

    from esc.judge_training.run import train_esc_rank
    from esc.train.run import output_settings, train

    role = compose(["+exp=train/esc_role_smollm2"])
    rank = compose(["+exp=train/esc_rank_smollm2"])
    assert instantiate(role.job).func is train and instantiate(rank.job).func is train_esc_rank
    assert rank.data.builder._target_ == "esc.judge_training.data.build_rank_samples"
    # the fingerprint names the functions, not their modules: moving code never stops a resume
    settings = output_settings(rank)
    assert settings["runner"] == "train_esc_rank"
    assert settings["data"]["builder"] == "build_rank_samples"


def test_a_job_target_that_does_not_import_is_one_config_error() -> None:
    from esc.config_schema import validate
    from esc.errors import ConfigError

    cfg = compose(["job._target_=esc.train.run.trian"])
    with pytest.raises(ConfigError, match=r"job\._target_.*esc\.train\.run\.trian: cannot be imported"):
        validate(cfg, "train")

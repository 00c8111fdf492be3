"""Run ESC-Eval dialogues: a role-player × a target model × role cards → dialogue files.

    # the embedded tiny model on both sides, 8 cards per language, on a CPU
    python evaluate.py roleplayer=tiny target=tiny cards.limit=8 hydra.run.dir=outputs/eval-tiny
    # ESC-Role against LLaMA3-8B-Instruct on the English cards (GPU)
    python evaluate.py roleplayer=esc_role target=llama3_8b_instruct cards.languages=[en]
    # the paper's grid: ESC-Role × the 14 targets on the 331 English cards, one SLURM job per target
    python evaluate.py -m +exp=evaluate/table2_en hydra/launcher=slurm
    # one target split over a SLURM array (see slurm/evaluate_array.sbatch), then merged
    esc dialogues merge OUT_0 OUT_1 ... --out OUT

Rerunning with the same `hydra.run.dir` resumes: completed dialogues are skipped, failed ones retried.
"""

from esc.cpu import wait_passively
from esc.quiet import quiet_third_party

wait_passively()  # before torch loads: OpenMP threads sleep while they wait (esc/cpu.py)
quiet_third_party()  # third-party warnings a user cannot act on, by name

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from esc.config_schema import validate  # noqa: E402
from esc.errors import exit_on_user_error  # noqa: E402
from esc.evaluate.run import evaluate  # noqa: E402
from esc.lifecycle import report, run_hydra  # noqa: E402


@hydra.main(config_path="conf", config_name="evaluate", version_base="1.3")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    checked = validate(cfg, "evaluate")  # one line naming the key, before any work
    report(evaluate(cfg, checked))  # the counts; exit code 3 when dialogues failed (a rerun retries them)


if __name__ == "__main__":
    run_hydra(main)  # Hydra's own errors (unknown key, option) as one line too

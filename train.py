"""Train a LoRA adapter with Lightning, configured by Hydra (conf/train.yaml).

    # ESC-Role, the paper's recipe: Qwen1.5-14B-Chat, LoRA, bf16, DeepSpeed ZeRO-2 on one GPU node
    python train.py +exp=train/esc_role
    # the same job on the embedded tiny model, on a CPU, in about a minute
    python train.py +exp=train/esc_role model=tiny cpu_fallback=true trainer.max_steps=30 \
        hydra.run.dir=outputs/demo
    # several nodes under SLURM (Lightning reads SLURM's environment); see docs/cluster.md
    sbatch --nodes=2 slurm/train_multinode.sbatch +exp=train/esc_role
    # a local sweep, one run after the other
    python train.py -m +exp=train/esc_role model=tiny cpu_fallback=true trainer.max_steps=5 peft.r=4,8
    # the ablation grid (held-out loss per variant, one table) and an Optuna search of the LoRA rate
    python train.py -m +exp=train/esc_role_ablation
    python train.py -m +exp=train/esc_role_lr_optuna

    # ESC-RANK: one LoRA judge adapter per dimension from human scores, then agreement on the test split
    python train.py +exp=train/esc_rank model=tiny cpu_fallback=true trainer.max_steps=30

Rerunning a command with the same `hydra.run.dir` resumes from its `last.ckpt`.
"""

from esc.cpu import wait_passively
from esc.quiet import quiet_third_party

wait_passively()  # before torch loads: OpenMP threads sleep while they wait (esc/cpu.py)
quiet_third_party()  # third-party warnings a user cannot act on, by name

import hydra  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from esc.config_schema import validate  # noqa: E402
from esc.errors import exit_on_user_error  # noqa: E402
from esc.lifecycle import report, run_hydra  # noqa: E402


@hydra.main(config_path="conf", config_name="train", version_base="1.3")
@exit_on_user_error
def main(cfg: DictConfig) -> float | None:
    checked = validate(cfg, "train")  # one line naming the key, before any work
    result = instantiate(cfg.job)(cfg, checked)  # esc.train.run.train, or an experiment's own job
    report(result)
    return result.objective()  # a sweeper that optimises (Optuna) minimises this


if __name__ == "__main__":
    run_hydra(main)  # Hydra's own errors (unknown key, option) as one line too

"""Score ESC-Eval dialogues on the paper's 7 dimensions (0-4) with a judge, and report them.

    # the embedded tiny judge on the dialogues of an evaluate.py run (CPU, seconds)
    python rank.py judge=tiny dialogues=outputs/eval-tiny hydra.run.dir=outputs/rank-tiny
    # SmolLM2 zero-shot on CPU (real, if weak, judgments), English dialogues
    python rank.py judge=smollm2 dialogues=OUT_OF_EVALUATE
    # the released ESC-RANK (InternLM2-chat-7B + 14 LoRA adapters), GPU
    python rank.py judge=esc_rank judge.adapters.root=/path/to/ESC-RANK dialogues=OUT_OF_EVALUATE
    # GPT-4 as judge (Figures 12-19 prompts), key from OPENAI_API_KEY
    python rank.py judge=gpt4 dialogues=OUT_OF_EVALUATE
    # only the leaderboard, from existing score files
    python rank.py mode=leaderboard scores=[OUT_A,OUT_B]
    # agreement with people (Table 4 style) on the held-out split of the human annotations
    python rank.py mode=agreement judge=smollm2
    python rank.py mode=agreement scores=[OUT_OF_A_RANK_RUN]   # judgments already made
    # correlation of BLEU, Distinct, ROUGE-L, METEOR and a judge with human scores (Tables 3, 13-15)
    python rank.py mode=correlation correlation.scores=[OUT_OF_A_MODE_AGREEMENT_RUN]
    # role-players judged on the six role-play metrics and against human dialogues (Table 1, Figure 3)
    python rank.py +exp=rank/roleplay_eval dialogues=[ESC_ROLE_OUT,GPT4_OUT] \
        roleplay.cards=[CARDS_OUT/cards.json] roleplay.human=CARDS_OUT/human_dialogues.jsonl
    # (the experiment sets mode=roleplay)
    # the seekers' emotion per target, from evaluate.py's ratings (no judge)
    python rank.py mode=trajectory dialogues=[OUT_A,OUT_B]
    # every reply against the safety checklist
    python rank.py mode=safety judge=tiny dialogues=OUT_OF_EVALUATE
    # two or more targets on the same cards, preferred per dimension in both orders
    python rank.py mode=pairwise judge=tiny dialogues=[OUT_A,OUT_B]
    # the judge under perturbed dialogues: its report card (docs/stress.md)
    python rank.py mode=stress judge=tiny dialogues=OUT_OF_EVALUATE
    # each target with hard seekers against the cooperative seeker, and adherence (docs/seekers.md)
    python rank.py mode=robustness judge=tiny dialogues=[COOPERATIVE_OUT,RESISTANT_OUT]

`mode=score` is the default. Each mode is a registered task (esc/tasks/<kind>/, listed in
esc/rank/run.py; tests/test_lists.py holds both lists to the registry).
Writes OUT/scores/*.jsonl (one judgment per dialogue and dimension, as they are made),
OUT/leaderboard.{md,result.json,csv}, OUT/charts/*.png, OUT/run.json and OUT/manifest.json
(another mode: OUT/<its report>.{md,result.json,csv}, e.g. OUT/agreement.md). Rerunning with the same
`hydra.run.dir` judges only what is missing or failed. Exit codes: 2 bad input (one `error:` line),
3 judgments failed (a rerun retries them), 1 a judge gave no valid judgment (mode=score, leaderboard,
safety: every file written, the report all n/a; the manifest says completed_with_failures).
"""

from esc.cpu import wait_passively
from esc.quiet import quiet_third_party

wait_passively()  # before torch loads: OpenMP threads sleep while they wait (esc/cpu.py)
quiet_third_party()  # third-party warnings a user cannot act on, by name

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from esc.config_schema import validate  # noqa: E402
from esc.errors import exit_on_user_error  # noqa: E402
from esc.lifecycle import report, run_hydra  # noqa: E402
from esc.rank.run import rank  # noqa: E402


@hydra.main(config_path="conf", config_name="rank", version_base="1.3")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    checked = validate(cfg, "rank")  # one line naming the key, before any work
    result = rank(cfg, checked)  # the sections as validated, read once
    report(result)  # the mode's tables and counts; exit code 3 when judgments failed
    refuse = getattr(result, "refuse_if_unusable", None)  # mode=score, leaderboard, safety
    if refuse is not None:
        refuse()  # exit code 1 when a judge gave no valid judgment or answer (files written)


if __name__ == "__main__":
    run_hydra(main)  # Hydra's own errors (unknown key, option) as one line too

"""Build role cards from raw datasets, as paper Appendix A does (conf/cards.yaml):
records -> extract (Figures 6, 7) -> filter (Figure 8) -> classify (Table 9) -> grade (Table 8) ->
near-duplicates out -> OUT/cards.json.

    # the embedded tiny model, 20 records per source, on a CPU (seconds)
    python build_cards.py +exp=cards/en model=tiny cards.limit=20 hydra.run.dir=outputs/cards-tiny
    # real English text on a CPU
    python build_cards.py +exp=cards/en model=smollm2_135m cards.limit=20
    # the paper's extractor (OPENAI_API_KEY)
    python build_cards.py +exp=cards/en extractor=gpt4

Rerunning with the same `hydra.run.dir` continues where the last run stopped.
"""

from esc.cpu import wait_passively
from esc.quiet import quiet_third_party

wait_passively()  # before torch loads: OpenMP threads sleep while they wait (esc/cpu.py)
quiet_third_party()  # third-party warnings a user cannot act on, by name

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from esc.cards.construct.run import build_cards  # noqa: E402
from esc.config_schema import validate  # noqa: E402
from esc.errors import exit_on_user_error  # noqa: E402
from esc.lifecycle import report, run_hydra  # noqa: E402


@hydra.main(config_path="conf", config_name="cards", version_base="1.3")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    checked = validate(cfg, "cards")  # one line naming the key, before any work
    report(build_cards(cfg, checked))  # the construction report; exit code 3 when records got no reply


if __name__ == "__main__":
    run_hydra(main)  # Hydra's own errors (unknown key, option) as one line too

"""The prompt registry: every role-player prompt and every other text of the ESC-Role training data.

`roleplayer.yaml` holds the versioned texts, `checksums.json` the checksum of every released
version, `registry.py` loads, checks and renders them, `examples.py` builds the ICL example
dialogue; `seekers.yaml` + `seekers.py` the seeker profiles (how hard the seeker is to help: one more
line of the role card, versioned like every prompt). The training samples (esc/esc_role_samples) and
the evaluation (esc/evaluate) both render from here:
an adapter trained by ``train.py +exp=train/esc_role`` is evaluated (``roleplayer=esc_role_local``,
prompt ``esc_role_figure11``) with the very text it was trained with.
"""

from esc.prompts.examples import (
    EXAMPLE_ESCONV_TEXT,
    EXAMPLE_LABELS,
    example_dialogue,
    example_dialogue_source,
)
from esc.prompts.registry import (
    CHECKSUMS_FILE,
    KEY,
    LANGUAGES,
    PROMPTS_FILE,
    Language,
    format_card,
    load_registry,
    needs_example,
    prompt_ids,
    prompt_version,
    render_roleplayer_prompt,
    role_player_system_prompt,
    supporter_opener,
    texts_checksum,
    training_prompt_id,
    training_text,
    training_texts_version,
)

__all__ = [
    "CHECKSUMS_FILE",
    "EXAMPLE_ESCONV_TEXT",
    "EXAMPLE_LABELS",
    "KEY",
    "LANGUAGES",
    "PROMPTS_FILE",
    "Language",
    "example_dialogue",
    "example_dialogue_source",
    "format_card",
    "load_registry",
    "needs_example",
    "prompt_ids",
    "prompt_version",
    "render_roleplayer_prompt",
    "role_player_system_prompt",
    "supporter_opener",
    "texts_checksum",
    "training_prompt_id",
    "training_text",
    "training_texts_version",
]

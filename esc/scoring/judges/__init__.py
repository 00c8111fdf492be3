"""The built-in judges. Importing this package registers them with `esc.scoring.judge`.

* ``local`` (:mod:`.local`): a transformers model, optionally with LoRA adapters (ESC-RANK), scored
  from its next-token distribution over the answers 0-4;
* ``api`` (:mod:`.api`): any chat backend of `esc.chat` (an OpenAI-compatible endpoint: GPT-4, a
  vLLM server), scored from returned log-probabilities where there are some, else parsed strictly.
"""

from esc.scoring.judges import api, local

__all__ = ["api", "local"]

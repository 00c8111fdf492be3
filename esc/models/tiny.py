"""The embedded tiny model: a deterministic, randomly initialised Qwen2-architecture chat model.

Nothing can be downloaded from a model hub here, so every model-facing path of the repo runs on
this model. It is built on first use into ``cache_dir()/tiny/<key>/`` and reused afterwards:

* a byte-level BPE tokenizer trained with the ``tokenizers`` library on the dialogue text that
  ``make data`` provides (ESConv, Smile, the role cards), with Qwen1.5's ChatML special tokens and
  chat template (Qwen1.5 is ``Qwen2ForCausalLM`` in transformers);
* ``Qwen2ForCausalLM`` weights drawn from ``torch.manual_seed(seed)``: the same spec gives the
  same weights on every machine with the same torch version.

Head size is 64 (hidden_size / num_attention_heads) so serving engines that reject odd head sizes
(vLLM, SGLang) can load it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from esc.errors import UserError
from esc.models.tiny_corpus import chinese_texts, english_texts
from esc.paths import cache_dir, data_dir

log = logging.getLogger(__name__)

# Qwen1.5-Chat's chat template (ChatML with a default system prompt).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BUILD_FORMAT = 2  # bump when the build procedure changes, so old caches are rebuilt


@dataclasses.dataclass(frozen=True)
class TinySpec:
    """Architecture and build settings of the tiny model (mirrors `conf/model/tiny.yaml`; a config's
    `tiny:` block is checked by `esc.models.loading.TinySettings`, whose `spec()` makes this)."""

    seed: int = 1234
    vocab_size: int = 8192
    hidden_size: int = 128
    intermediate_size: int = 352
    num_hidden_layers: int = 2
    num_attention_heads: int = 2  # head size = 128 / 2 = 64
    num_key_value_heads: int = 1  # grouped-query attention, as in Qwen2
    max_position_embeddings: int = 4096
    corpus_chars: int = 3_000_000  # characters of dialogue text the tokenizer is trained on

    def __post_init__(self) -> None:
        if self.hidden_size // self.num_attention_heads != 64:
            log.warning("tiny model head size is %d, not 64: vLLM may refuse it", self.head_dim)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def key(self) -> str:
        blob = json.dumps({"format": BUILD_FORMAT, **dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _corpus(limit_chars: int) -> Iterator[str]:
    """Dialogue text for the tokenizer: English and Chinese in equal shares, in a fixed order."""

    for texts in (english_texts(), chinese_texts()):
        budget = limit_chars // 2
        for text in texts:
            if budget <= 0:
                break
            budget -= len(text)
            yield text


def _train_tokenizer(spec: TinySpec, out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    texts = list(_corpus(spec.corpus_chars))
    if not texts:
        raise UserError(f"no dialogue text found under {data_dir()}: run `make data` first")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=spec.max_position_embeddings,
        padding_side="right",
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(out)


def _init_model(spec: TinySpec, out: Path) -> None:
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(out)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(spec.seed)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=[tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")],
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(out)


def ensure_tiny_model(spec: TinySpec | None = None, root: Path | None = None) -> Path:
    """Return the directory of the tiny model for ``spec``, building it on first use."""
    spec = spec or TinySpec()
    root = root or cache_dir() / "tiny"
    target = root / f"qwen2-tiny-{spec.key()}"
    if (target / "build.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(root / f".{target.name}.lock")):
        if (target / "build.json").exists():  # built by another process while we waited
            return target
        log.info("Building the embedded tiny model into %s (first use: ~25 s on 2 idle cores)", target)
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=root))
        tmp.chmod(0o755)
        try:
            _train_tokenizer(spec, tmp)
            _init_model(spec, tmp)
            (tmp / "build.json").write_text(
                json.dumps({"format": BUILD_FORMAT, "spec": dataclasses.asdict(spec)}, indent=2) + "\n"
            )
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target

"""Chat tokenization with assistant-only labels, a padding collator and packing that keeps samples apart.

`encode_chat` renders the tokenizer's own chat template, finds each assistant span as the text
difference between the prompt before the turn (`add_generation_prompt=True`) and the prompt with
the turn, and labels exactly the assistant content plus the end-of-turn token that closes it
(ChatML: "content<|im_end|>"; the newline after it is not learned). Assistant turns named in
`hold_out` (message indices; `Sample.hold_out`) stay in the context without labels. Every piece
of text is tokenized with `add_special_tokens=False` and the pieces are concatenated; for ChatML-style
templates (Qwen1.5, InternLM2) piece boundaries sit on special tokens or newlines, so the ids equal
tokenizing the whole rendered string.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from esc.errors import UserError

log = logging.getLogger(__name__)

IGNORE_INDEX = -100
Messages = Sequence[Mapping[str, str]]


def _render(tokenizer: Any, messages: Messages, add_generation_prompt: bool = False) -> str:
    text = tokenizer.apply_chat_template(
        [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt
    )
    if not isinstance(text, str):
        raise UserError(
            f"{type(tokenizer).__name__}.apply_chat_template(tokenize=False) did not return a string"
        )
    return text


def chat_segments(
    tokenizer: Any, messages: Messages, hold_out: Collection[int] = (), learn_end_of_turn: bool = True
) -> list[tuple[str, bool]]:
    """Split the rendered chat into (text, is_learned) pieces whose concatenation is the full render.

    Learned pieces are each assistant message's content through its end-of-turn token, without
    trailing whitespace (`learn_end_of_turn=False`: the content alone, as ESC-RANK learns only the
    answer); assistant messages whose index is in `hold_out` are not learned. Raises UserError if
    the template is not prefix-stable (a later render does not extend an earlier one), because then
    assistant spans cannot be located by text difference.
    """
    if getattr(tokenizer, "chat_template", None) is None:
        raise UserError(f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template")
    full = _render(tokenizer, messages)
    pieces: list[tuple[str, bool]] = []
    cursor = 0
    for i, message in enumerate(messages):
        if message["role"] != "assistant" or i in hold_out:
            continue
        before = _render(tokenizer, messages[:i], add_generation_prompt=True)
        through = _render(tokenizer, messages[: i + 1])
        if not through.startswith(before) or not full.startswith(through) or len(before) < cursor:
            raise UserError(
                "chat template is not prefix-stable: rendering the conversation up to assistant turn "
                f"{i} does not extend the rendering before it, so assistant spans cannot be found "
                "(use a ChatML-style template such as Qwen1.5's or InternLM2's)"
            )
        span = through[len(before) :]
        learned = span.rstrip()
        closing = ""  # the end-of-turn text when it is not learned
        if not learn_end_of_turn:
            content = str(message["content"])
            if not content or not learned.startswith(content):
                raise UserError(
                    "chat template does not write assistant turn "
                    f"{i} verbatim, so its content cannot be learned without its end-of-turn text"
                )
            learned, closing = content, learned[len(content) :]
        if cursor < len(before):
            pieces.append((full[cursor : len(before)], False))
        if learned:
            pieces.append((learned, True))
        if closing:
            pieces.append((closing, False))
        if len(learned) + len(closing) < len(span):  # whitespace closing the turn: a cut point
            pieces.append((span[len(learned) + len(closing) :], False))
        cursor = len(through)
    if cursor < len(full):
        pieces.append((full[cursor:], False))
    return pieces


def encode_chat(
    tokenizer: Any,
    messages: Messages,
    max_length: int,
    hold_out: Collection[int] = (),
    learn_end_of_turn: bool = True,
) -> dict[str, list[int]] | None:
    """Tokenize a chat; labels are -100 except on assistant content and its end-of-turn token
    (assistant messages whose index is in `hold_out` excepted; `learn_end_of_turn=False`: the
    content only).

    Longer chats are truncated by dropping whole trailing turns: the result ends right after the
    last learned assistant turn (and the whitespace that follows it) that fits in `max_length`.
    Returns None when not even the first learned turn fits, or when there is none.
    """
    pieces = chat_segments(tokenizer, messages, hold_out, learn_end_of_turn)
    if not any(learned for _, learned in pieces):
        return None
    ids_per_piece = tokenizer([text for text, _ in pieces], add_special_tokens=False)["input_ids"]
    input_ids: list[int] = []
    labels: list[int] = []
    cut_points: list[int] = []  # token count at the end of each assistant turn (+ trailing whitespace)
    for k, ((_text, learned), ids) in enumerate(zip(pieces, ids_per_piece, strict=True)):
        input_ids.extend(ids)
        labels.extend(ids if learned else [IGNORE_INDEX] * len(ids))
        if learned:
            end = len(input_ids)
            nxt = k + 1
            # include an unlearned end-of-turn and the whitespace that closes the turn (ChatML's
            # "<|im_end|>" when not learned, the "\n" after it)
            while (
                nxt < len(pieces) and not pieces[nxt][1] and _closes_turn(pieces, nxt, k, learn_end_of_turn)
            ):
                end += len(ids_per_piece[nxt])
                nxt += 1
            cut_points.append(end)
    if len(input_ids) > max_length:
        fitting = [c for c in cut_points if c <= max_length]
        if not fitting:
            return None
        keep = fitting[-1]
        input_ids, labels = input_ids[:keep], labels[:keep]
    return {"input_ids": input_ids, "attention_mask": [1] * len(input_ids), "labels": labels}


def _closes_turn(
    pieces: Sequence[tuple[str, bool]], index: int, learned: int, learn_end_of_turn: bool
) -> bool:
    """Whether unlearned piece `index` still belongs to the turn of learned piece `learned`: the
    whitespace after it, or (content-only learning) its end-of-turn text right after it."""
    text = pieces[index][0]
    if not text.strip():
        return True
    return not learn_end_of_turn and index == learned + 1 and "\n" not in text.rstrip()


def encode_dataset(
    samples: Sequence[Any], tokenizer: Any, max_length: int, num_proc: int | None = None
) -> Any:
    """Tokenize `Sample`s (or their dicts) into a `datasets.Dataset`.

    Columns: id, source, language, input_ids, attention_mask, labels. Samples that do not fit
    `max_length` (see `encode_chat`) are dropped and counted in the log.
    """
    import sys

    import datasets

    if not sys.stderr.isatty():  # progress bars in a log file are one line per update
        datasets.disable_progress_bars()
    rows = [s.to_dict() if hasattr(s, "to_dict") else dict(s) for s in samples]
    for row in rows:
        row.pop("split_hint", None)
        row.pop("group", None)
        row["hold_out"] = list(row.get("hold_out") or [])
    ds = datasets.Dataset.from_list(rows)

    def encode(example: dict[str, Any]) -> dict[str, list[int]]:
        out = encode_chat(
            tokenizer,
            example["messages"],
            max_length,
            example.get("hold_out") or (),
            bool(example.get("learn_end_of_turn", True)),
        )
        return out or {"input_ids": [], "attention_mask": [], "labels": []}

    ds = ds.map(encode, remove_columns=["messages", "hold_out"], num_proc=num_proc, desc="tokenize")
    n_before = len(ds)
    ds = ds.filter(lambda ex: len(ex["input_ids"]) > 0, num_proc=num_proc, desc="drop too long")
    if len(ds) < n_before:
        log.info(
            "encode_dataset: dropped %d of %d samples (no learned turn, or the first > %d tokens)",
            n_before - len(ds),
            n_before,
            max_length,
        )
    return ds


def collate(batch: Sequence[Mapping[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """Right-pad input_ids (pad_token_id), attention_mask (0) and labels (-100) into tensors; the
    samples' `weight`, when they have one."""
    import torch

    width = max(len(ex["input_ids"]) for ex in batch)
    pads = {"input_ids": pad_token_id, "attention_mask": 0, "labels": IGNORE_INDEX}
    out: dict[str, Any] = {}
    for key, pad in pads.items():
        if key not in batch[0]:
            continue
        rows = [list(ex[key]) + [pad] * (width - len(ex[key])) for ex in batch]
        out[key] = torch.tensor(rows, dtype=torch.long)
    if "weight" in batch[0]:  # Sample.weight, for a weighted loss
        out["weight"] = torch.tensor([float(ex["weight"]) for ex in batch], dtype=torch.float)
    return out


def pack(dataset: Any, max_length: int) -> Any:
    """Greedily concatenate consecutive examples into rows of at most `max_length` tokens.

    Each row keeps its samples apart through `position_ids`, which restart at 0 at every sample:
    `collate_packed` turns a batch of rows into one flattened sequence that transformers' attention
    reads as separate sequences (no token attends to another sample, RoPE positions start over).
    The first label of every sample is -100, so no sample's first token is predicted from the
    sample before it. Examples longer than `max_length` are kept as their own row. Returns a
    Dataset with input_ids, labels and position_ids.
    """
    import datasets

    rows: list[dict[str, list[int]]] = []
    cur: dict[str, list[int]] = {"input_ids": [], "labels": [], "position_ids": []}
    for ex in dataset:
        n = len(ex["input_ids"])
        if cur["input_ids"] and len(cur["input_ids"]) + n > max_length:
            rows.append(cur)
            cur = {"input_ids": [], "labels": [], "position_ids": []}
        cur["input_ids"].extend(ex["input_ids"])
        cur["labels"].extend([IGNORE_INDEX, *ex["labels"][1:]])
        cur["position_ids"].extend(range(n))
    if cur["input_ids"]:
        rows.append(cur)
    return datasets.Dataset.from_list(rows)


def packed_samples(row: Mapping[str, Any]) -> list[dict[str, list[int]]]:
    """Split a packed row back into its samples (input_ids, labels), at each `position_ids` reset."""
    positions = list(row["position_ids"])
    starts = [i for i, p in enumerate(positions) if p == 0] or [0]
    ends = [*starts[1:], len(positions)]
    ids, labels = list(row["input_ids"]), list(row["labels"])
    return [{"input_ids": ids[a:b], "labels": labels[a:b]} for a, b in zip(starts, ends, strict=True)]


def collate_packed(batch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Flatten a batch of packed rows into one sequence of shape [1, total tokens], no padding.

    This is transformers' `DataCollatorWithFlattening` over the rows' samples: `position_ids`
    restart at every sample and there is no attention_mask, which is how transformers' eager, sdpa,
    flex and flash attention implementations recognise packed sequences and keep them apart
    (`masking_utils.find_packed_sequence_indices`; flash-attention's varlen path). The model must
    be called with these `position_ids`, without an attention mask and with `use_cache=False`
    (transformers 5 ignores the restarts when it has a cache, and then samples attend to each other).
    """
    from transformers import DataCollatorWithFlattening

    samples = [sample for row in batch for sample in packed_samples(row)]
    flat = DataCollatorWithFlattening(return_position_ids=True, separator_id=IGNORE_INDEX)(
        samples, return_tensors="pt"
    )
    return {key: flat[key] for key in ("input_ids", "labels", "position_ids")}

"""A closed question put to any chat backend: which of a few single-token answers it gives.

Three ways to read the answer, picked by `method` (`auto`: the best the backend has):

- ``distribution``: a local model (`HFBackend`, or `VLLMBackend` in this process) is not asked to
  write anything: one forward pass gives the next-token probabilities at the answer position,
  reduced to the answers (each summed over the ids that spell it there, `esc.chat.answer_tokens`).
  The answer is the likeliest, and the probabilities give an expected value. Nothing is parsed, so
  nothing is misread.
- ``constrained``: a backend with constrained decoding (vLLM) must reply with one of the answers
  (its probabilities are renormalised over what the grammar allows: `auto` reads the distribution).
- ``parse``: any other backend (an API) writes a short reply whose first line must state one answer
  (`parse`, strict by default: `esc.chat.answers.parse_choice`); where the backend returns
  log-probabilities, the answers' probabilities at the token that states it are kept too. What
  follows the answer on its line (or the next line) is kept as the reason.

An answer is `valid`, `invalid` (a reply that states no single answer, or a distribution with too
little mass on the answers: the reply or the mass is kept) or `failed` (no answer came: a failed
request). Invalid and failed answers are counted by the caller and never enter a mean.

The request cache is bypassed by `distribution` (no text is generated; it is cheap to read again).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

from esc.chat.answer_tokens import AnswerTokens, answer_tokens
from esc.chat.answers import parse_choice, stated_answer_probabilities
from esc.chat.backends._common import one_line
from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply
from esc.chat.usage import Usage
from esc.errors import ConfigError

VALID, INVALID, FAILED = "valid", "invalid", "failed"
METHODS = ("auto", "distribution", "constrained", "parse")

#: reads a reply: (answer index, reason or None), or None when it states no single answer
Parser = Callable[[str, tuple[str, ...]], "tuple[int, str | None] | None"]


@dataclasses.dataclass
class ClosedAnswer:
    """One answer to a closed question (see the module docstring)."""

    status: str  # valid | invalid | failed
    index: int | None = None  # the answer given: an index into the choices
    expected: float | None = None  # sum of index x probability, where probabilities are known
    probs: list[float] | None = None  # each answer's probability, renormalised over the answers
    mass: float | None = None  # the probability on the answers at all (distribution)
    reason: str | None = None  # what the reply says after the answer (parse)
    raw: str | None = None  # the reply, when one was written
    error: str | None = None  # why it is invalid or failed

    @classmethod
    def from_probabilities(cls, answer_probs: Sequence[float], min_mass: float = 0.0) -> ClosedAnswer:
        """From unnormalised answer probabilities: the likeliest answer, the expected index."""
        mass = float(sum(answer_probs))
        if mass <= 0.0 or mass < min_mass:
            return cls(
                INVALID,
                mass=mass,
                error=f"only {mass:.2e} of the probability is on the {len(answer_probs)} answers "
                f"(< {min_mass})",
            )
        probs = [float(p) / mass for p in answer_probs]
        index = max(range(len(probs)), key=lambda i: probs[i])
        expected = sum(i * p for i, p in enumerate(probs))
        return cls(VALID, index, round(expected, 6), [round(p, 6) for p in probs], round(mass, 6))

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def read_reply(
    reply: Reply, choices: tuple[str, ...], parse: Parser, wanted: str | None = None
) -> ClosedAnswer:
    """The answer a written reply states (`parse`), with the answers' probabilities at the token that
    states it where the reply carries log-probabilities; `failed` when no reply came, `invalid` (the
    reply kept) when it states no single answer (`wanted` names what was expected)."""
    if not reply.ok:
        return ClosedAnswer(FAILED, raw=reply.text or None, error=reply.error)
    parsed = parse(reply.text, choices)
    if parsed is None:
        wanted = wanted or f"single answer of {'/'.join(choices)}"
        return ClosedAnswer(INVALID, raw=reply.text, error=f"the reply states no {wanted}")
    index, reason = parsed
    probs = stated_answer_probabilities(reply.logprobs, index, choices)
    if probs is None:
        return ClosedAnswer(VALID, index, reason=reason, raw=reply.text)
    read = ClosedAnswer.from_probabilities(probs)
    return dataclasses.replace(read, index=index, reason=reason, raw=reply.text)  # the stated answer


def read_distributions(
    backend: Any,
    prompts: Sequence[Sequence[int] | BaseException],
    answers: AnswerTokens,
    limit: int | None,
    min_mass: float,
    adapters: Sequence[str | None] | None = None,
) -> list[ClosedAnswer]:
    """The answers' next-token distribution of each prompt, in one `backend.answer_distribution`
    call (prompts that start alike share one prefill). A prompt is its token ids, or the error that
    kept it from rendering (invalid); one longer than `limit` tokens is invalid, never cut; one the
    backend failed on is failed. The local judge and `ClosedQuestion` both read through here."""
    results: list[ClosedAnswer | None] = [None] * len(prompts)
    asked = []
    for index, ids in enumerate(prompts):
        if isinstance(ids, BaseException):
            results[index] = ClosedAnswer(INVALID, error=one_line(ids))
        elif limit and len(ids) > limit:
            results[index] = ClosedAnswer(
                INVALID, error=f"prompt too long ({len(ids)} tokens > {limit}); not cut"
            )
        else:
            asked.append(index)
    if asked:
        rows = [adapters[i] for i in asked] if adapters is not None else None
        dists = backend.answer_distribution([prompts[i] for i in asked], answers, rows)
        for index, dist in zip(asked, dists, strict=True):
            results[index] = (
                ClosedAnswer(FAILED, error=one_line(dist))
                if isinstance(dist, Exception)
                else ClosedAnswer.from_probabilities(dist, min_mass)
            )
    return [r for r in results if r is not None]


def strict_choice(text: str, choices: tuple[str, ...]) -> tuple[int, str | None] | None:
    """The default parser: the reply's first line is exactly one answer (no reason)."""
    index = parse_choice(text, choices)
    return None if index is None else (index, None)


def unwrapped(backend: ChatBackend) -> ChatBackend:
    """The backend behind a request cache (`esc.chat.cache.CachedBackend`), or `backend` itself."""
    return getattr(backend, "inner", backend)


def resolve_method(backend: ChatBackend, method: str, key: str) -> str:
    """The method `auto` stands for with this backend; a ConfigError naming `key` when the backend
    cannot do the method asked for (`method`: one of `METHODS`, as the settings hold it)."""
    inner = unwrapped(backend)
    can = {  # what each method needs of the backend, and whether it has it
        "distribution": ("a local model (kind: hf, or vllm >= 0.32)", hasattr(inner, "answer_distribution")
                         and getattr(inner, "reads_distributions", True)),
        "constrained": ("a backend with constrained decoding (kind: vllm)", "choices" in backend.features),
        "parse": ("any backend", True),
    }  # fmt: skip
    if method == "auto":  # the first the backend can do
        return next(name for name, (_, has) in can.items() if has)
    needs, has = can[method]
    if not has:
        raise ConfigError(key, f"{method} needs {needs}, not {inner!r}")
    return method


class ClosedQuestion:
    """Asks `backend` closed questions with the answers `choices`, read by `method` (resolved).

    `max_new_tokens` bounds a written reply (parse; a distribution or a constrained answer is one
    token); `top_logprobs` asks for log-probabilities there; `min_mass` makes a distribution with
    less probability on the answers invalid; `key` is the config key a ConfigError names.
    """

    def __init__(
        self,
        backend: ChatBackend,
        choices: tuple[str, ...],
        method: str,
        parse: Parser = strict_choice,
        *,
        max_new_tokens: int,
        top_logprobs: int,
        min_mass: float,
        key: str = "method",
    ) -> None:
        self.backend, self.choices, self.method, self.parse = backend, tuple(choices), method, parse
        self.min_mass, self.key = float(min_mass), key
        self.settings = GenerationSettings(
            max_new_tokens=1 if method in ("constrained", "distribution") else int(max_new_tokens),
            temperature=0.0,
            top_logprobs=int(top_logprobs),
            choices=self.choices if method == "constrained" else (),
        )
        self._answers: AnswerTokens | None = None
        self.usage = Usage()  # the written replies' requests and tokens (not the distributions read)
        self._lock = threading.RLock()  # dialogues that stream ask from several threads

    def identity(self) -> dict[str, Any]:
        """What an answer depends on besides the prompt: the method and its settings."""
        identity: dict[str, Any] = {"method": self.method, "choices": list(self.choices)}
        if self.method == "distribution":
            identity["min_mass"] = self.min_mass  # nothing is generated: no decoding settings
        else:
            identity["settings"] = self.settings.to_dict()
        return identity

    def answers(self, system: str | None = None) -> AnswerTokens:
        """The ids that spell each answer for the backend's tokenizer (distribution only); a
        ConfigError naming `key` when an answer is not one token (checked before play)."""
        with self._lock:
            if self._answers is None:
                inner = unwrapped(self.backend)
                self._answers = answer_tokens(
                    inner.tokenizer, self.choices, system, where=self.key, name=repr(inner)
                )
            return self._answers

    def ask(self, prompts: Sequence[Sequence[Message]]) -> list[ClosedAnswer]:
        """One answer per prompt, in order; never raises for one bad prompt."""
        if not prompts:
            return []
        if self.method == "distribution":
            return self._read(prompts)
        replies = self.backend.generate(prompts, self.settings)
        with self._lock:
            for reply in replies:
                self.usage.add(reply)
        return [read_reply(reply, self.choices, self.parse) for reply in replies]

    def _read(self, prompts: Sequence[Sequence[Message]]) -> list[ClosedAnswer]:
        """The answers' distribution of each prompt (`read_distributions`, the window the limit)."""
        inner: Any = unwrapped(self.backend)
        answers = self.answers()
        window = inner.context_window
        with self._lock:  # one reader at a time: a fast tokenizer is not safe across threads
            encoded: list[Sequence[int] | BaseException] = []
            for prompt in prompts:
                try:
                    encoded.append(inner.prompt_ids(list(prompt)))
                except Exception as err:  # a template that cannot render this conversation
                    encoded.append(err)
            return read_distributions(inner, encoded, answers, window - 1 if window else None, self.min_mass)

"""Reference-based and reference-free text metrics of a dialogue's supporter turns (paper Table 3 rows).

Every metric takes the assistant's turns of one dialogue (the hypothesis), zero or more reference texts
for the whole dialogue, and the language, and returns a float in [0, 1] (NaN when there is nothing to
score). One tokenisation serves all of them: lower-cased; English split by nltk's `wordpunct_tokenize`
(runs of word characters, runs of punctuation; no model download), Chinese segmented by jieba.
Tokens never run across turns for Distinct-n; the other metrics see the turns' tokens in order.

- BLEU-1/2/4: nltk `sentence_bleu`, cumulative uniform weights over 1..n-grams, all references at
  once, smoothing method 1 (Chen & Cherry 2014: a zero n-gram count becomes 0.1) so that a short
  hypothesis without a 4-gram match gets a small score rather than 0.
- Distinct-1/2 (Li et al. 2016): distinct n-grams / all n-grams over the turns; needs no reference.
- ROUGE-L: the rouge-score package's `RougeScorer(["rougeL"])` F-measure, best over the references,
  with *our* tokenizer: rouge-score's default one keeps only `[a-z0-9]`, so every Chinese text would
  become empty and score 0.
- METEOR: nltk `meteor_score` (Banerjee & Lavie 2005; alpha 0.9, beta 3, gamma 0.5), best over the
  references, with exact and Porter-stem matching only. Its third stage, WordNet synonyms, needs the
  WordNet corpus, which nltk downloads from outside PyPI; a stand-in with no synsets is passed
  instead, so this is METEOR *without synonym matching* (as a rule lower than the full metric).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

LANGUAGES = ("en", "zh")


# --- tokenisation ---------------------------------------------------------------------------------


@functools.cache
def _jieba() -> Any:
    """The jieba module, imported once (its dictionary loads in about a second)."""
    import jieba

    jieba.setLogLevel(logging.WARNING)  # it prints "Building prefix dict..." at INFO
    return jieba


def tokenize(text: str, language: str) -> list[str]:
    """Lower-cased tokens: jieba for Chinese, word/punctuation runs for English."""
    if language == "zh":
        return [t for t in (w.strip().lower() for w in _jieba().lcut(text)) if t]
    if language == "en":
        from nltk.tokenize import wordpunct_tokenize

        return wordpunct_tokenize(text.lower())
    raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")


def _tokens(turns: Sequence[str], language: str) -> list[str]:
    return [t for turn in turns for t in tokenize(turn, language)]


# --- metrics --------------------------------------------------------------------------------------


def bleu(turns: Sequence[str], references: Sequence[str], language: str, n: int) -> float:
    """Cumulative BLEU-n (nltk, smoothing method 1) of the turns against all references."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    hyp = _tokens(turns, language)
    refs = [tokenize(r, language) for r in references]
    if not hyp or not any(refs):
        return math.nan
    weights = tuple([1.0 / n] * n)
    return float(sentence_bleu(refs, hyp, weights=weights, smoothing_function=SmoothingFunction().method1))


def distinct(turns: Sequence[str], language: str, n: int) -> float:
    """Distinct-n: distinct n-grams / all n-grams, n-grams taken within each turn."""
    grams = []
    for turn in turns:
        tokens = tokenize(turn, language)
        grams += [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams) if grams else math.nan


class _Tokenizer:
    """rouge-score's tokenizer interface (an object with `tokenize(text)`) over `tokenize`."""

    def __init__(self, language: str) -> None:
        self.language = language

    def tokenize(self, text: str) -> list[str]:
        return tokenize(text, self.language)


@functools.cache
def _rouge_scorer(language: str) -> Any:
    from rouge_score.rouge_scorer import RougeScorer

    return RougeScorer(["rougeL"], tokenizer=_Tokenizer(language))


def rouge_l(turns: Sequence[str], references: Sequence[str], language: str) -> float:
    """ROUGE-L F-measure (rouge-score, LCS over tokens), best over the references."""
    hyp = "\n".join(turns)
    refs = [r for r in references if tokenize(r, language)]
    if not tokenize(hyp, language) or not refs:
        return math.nan
    return float(_rouge_scorer(language).score_multi(refs, hyp)["rougeL"].fmeasure)


class NoSynonyms:
    """A WordNet stand-in without synsets: METEOR's synonym stage then matches nothing."""

    def synsets(self, *args: object, **kwargs: object) -> list:
        return []


def meteor(turns: Sequence[str], references: Sequence[str], language: str) -> float:
    """METEOR (nltk) with exact and stem matching, no synonyms; best over the references."""
    from nltk.translate.meteor_score import meteor_score

    hyp = _tokens(turns, language)
    refs = [tokens for tokens in (tokenize(r, language) for r in references) if tokens]
    if not hyp or not refs:
        return math.nan
    return float(meteor_score(refs, hyp, wordnet=NoSynonyms()))


# --- registry -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TextMetric:
    name: str
    label: str  # the paper's row label
    needs_reference: bool
    fn: Callable[[Sequence[str], Sequence[str], str], float]  # (turns, references, language)


METRICS: dict[str, TextMetric] = {
    m.name: m
    for m in (
        TextMetric("bleu1", "BLEU-1", True, lambda t, r, lang: bleu(t, r, lang, 1)),
        TextMetric("bleu2", "BLEU-2", True, lambda t, r, lang: bleu(t, r, lang, 2)),
        TextMetric("bleu4", "BLEU-4", True, lambda t, r, lang: bleu(t, r, lang, 4)),
        TextMetric("distinct1", "Distinct-1", False, lambda t, r, lang: distinct(t, lang, 1)),
        TextMetric("distinct2", "Distinct-2", False, lambda t, r, lang: distinct(t, lang, 2)),
        TextMetric("rouge_l", "ROUGE-L", True, rouge_l),
        TextMetric("meteor", "METEOR", True, meteor),
    )
}

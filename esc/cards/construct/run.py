"""`python build_cards.py`: role cards from raw datasets, as paper Appendix A builds them.

records (`sources.py`) -> extract (Figures 6, 7) -> filter (Figure 8) -> classify (Table 9) ->
grade (Table 8) -> near-duplicate removal -> `OUT/cards.json`

Any chat backend does the LLM steps (`extractor`: the tiny model for tests, SmolLM2 for English text
on a CPU, GPT-4 or a served model for real runs). Each step's answers are appended to
`OUT/steps/<step>.jsonl` as each batch is done, one line per record: `ok` with the value, or
`unparseable` (the reply and why, never guessed at) or `failed` (no reply came; a rerun retries it).
A rerun with the same `hydra.run.dir` continues where the last one stopped; the request cache
replays identical requests. Outputs:

- `cards.json`: the kept cards (grade high or middle) in the released format ({base, res, source,
  base_biaozhu, language, id}) plus `category`, `quality` and `source_record` (`load_cards` reads it);
- `human_dialogues.jsonl`: the source dialogue of every kept card made from a multi-turn dialogue
  (the pairwise test of `rank.py +exp=rank/roleplay_eval`);
- `unparseable.jsonl`: every reply a step could not read, with the step and the reason;
- `report.md` / `report.json`: per source, how many records went in and how many were kept,
  dropped (and why) or unparseable at each step, tokens and cost per step; `manifest.json`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf
from pydantic import Field
from tqdm import tqdm

from esc.cards.construct import steps
from esc.cards.construct.sources import SEEKER, RawRecord, Sources, read_source
from esc.cards.crisis import is_crisis
from esc.cards.schema import LANGUAGES, card_text
from esc.cards.taxonomy import load_taxonomy
from esc.chat.base import ChatBackend, GenerationSettings, Reply, generation_config
from esc.chat.build import backend_config, build_backend
from esc.chat.cache import CACHE_CONFIG, with_cache
from esc.chat.usage import Usage
from esc.config_rules import OpenSettings, Section, Settings
from esc.errors import ConfigError
from esc.jsonl import append_jsonl, atomic_write_text, drop_partial_last_line, get_field, read_jsonl
from esc.lifecycle import Job, JobResult, job_run
from esc.models.loading import MODEL_CONFIG
from esc.paths import data_dir
from esc.rundir import model_settings, refuse_unswept_sweep
from esc.settings.types import FileName, NonEmpty

log = logging.getLogger(__name__)

STEPS = ("extract", "filter", "classify", "grade")


class CardsRun(OpenSettings):
    """build_cards.py's top-level keys (conf/cards.yaml); the rest of the top level is the other
    sections', Hydra's and the paths'."""

    seed: int
    chunk: int = Field(ge=1)  # records asked at a time, then appended
    progress: bool


class CardSources(Settings):
    """`cards` (conf/cards.yaml): which records of which datasets become role cards."""

    root: str | None  # the data directory; null: ESC_DATA_DIR or <repo>/data
    languages: NonEmpty[Literal[LANGUAGES]]  # type: ignore[valid-type]
    limit: int | None = Field(ge=1, description="the first N records of each source; null: all")
    subset: Literal["crisis"] | None = Field(description="crisis: records that mention suicide or self-harm")
    dedup_threshold: float = Field(gt=0, le=1)
    sources: Sources  # per source: enabled and its reader's options (sources.py)


class LLMSteps(Settings):
    """`steps`: the LLM steps after extraction; false skips one."""

    filter: bool
    classify: bool
    grade: bool


OK, UNPARSEABLE, FAILED = "ok", "unparseable", "failed"
ID_PREFIX = {
    "PsyQA": 1,
    "Smile": 2,
    "ESConv": 3,
    "EPITOME": 4,
    "ExTES": 5,
    "MHP": 6,
    "Psych8K": 7,
    "ChatCounselor": 8,
}
LANGUAGE_NAMES = {"en": "english", "zh": "chinese"}


@dataclasses.dataclass
class CardsResult(JobResult):
    """The kept cards and the construction report (per source: records in, kept, dropped and why)."""

    cards: int = 0
    report: dict[str, Any] = dataclasses.field(default_factory=dict)
    markdown: str = ""

    def summary(self) -> str:
        return (
            f"{self.markdown}{self.cards} cards: {self.output_dir}/cards.json (report.md, unparseable.jsonl)"
        )

    def incomplete(self) -> str | None:
        failed = self.report.get("total", {}).get("failed", 0)
        if not failed:
            return None
        return f"{failed} records got no reply from the extractor; rerun the same command to retry them"


@dataclasses.dataclass
class StepStore:
    """The answers of one step, by record id (the last line of a record wins)."""

    path: Path
    rows: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        drop_partial_last_line(self.path)
        if self.path.exists():
            for lineno, row in read_jsonl(self.path):  # a damaged line: DataError naming file and line
                record_id = get_field(row, "record_id", str, self.path, f"line {lineno}")
                self.rows[record_id] = row

    def done(self, record_id: str) -> bool:
        return record_id in self.rows and self.rows[record_id]["status"] != FAILED

    def add(self, rows: Sequence[dict[str, Any]]) -> None:
        append_jsonl(self.path, rows)
        for row in rows:
            self.rows[row["record_id"]] = row

    def value(self, record_id: str) -> Any:
        row = self.rows.get(record_id)
        return row["value"] if row and row["status"] == OK else None


def gather_records(section: CardSources) -> list[RawRecord]:
    """The records of every enabled source whose language is wanted, the first `limit` of each
    (with `subset: crisis`, the first `limit` whose seeker text passes the crisis rule)."""
    root = Path(section.root or data_dir())
    languages, limit, crisis = section.languages, section.limit, section.subset == "crisis"
    records: list[RawRecord] = []
    for name, options in section.sources:  # a model iterates as (field, value)
        if not options.enabled:
            continue
        found = read_source(name, root, options, None if crisis else limit)
        if crisis:
            found = [r for r in found if is_crisis(r.seeker_text(), r.language)][:limit]
        records += [r for r in found if r.language in languages]
    if not records:
        raise ConfigError(
            "cards.sources", f"no records: enable a source whose language is in {list(languages)}"
        )
    return records


def run_step(
    name: str,
    backend: ChatBackend,
    settings: GenerationSettings,
    store: StepStore,
    work: Sequence[tuple[str, list[dict[str, str]], Callable[[str], Any]]],
    chunk: int,
    usage: Usage,
    progress: bool,
) -> None:
    """Ask the backend every (record id, prompt, parse) not answered yet, `chunk` at a time."""
    pending = [w for w in work if not store.done(w[0])]
    with tqdm(total=len(pending), unit="card", desc=name, disable=not progress) as bar:
        for start in range(0, len(pending), chunk):
            part = pending[start : start + chunk]
            replies = backend.generate([prompt for _, prompt, _ in part], settings)
            rows = []
            for (record_id, _, parse), reply in zip(part, replies, strict=True):
                usage.add(reply)
                row: dict[str, Any] = {"record_id": record_id, "raw": reply.text}
                if not reply.ok:
                    row |= {"status": FAILED, "reason": reply.error}
                else:
                    try:
                        row |= {"status": OK, "value": parse(reply.text)}
                    except steps.Unparseable as err:
                        row |= {"status": UNPARSEABLE, "reason": str(err)}
                # token counts travel with the row so report.json's usage covers resumed runs too
                row |= {
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                    "cached": reply.cached,
                }
                rows.append(row)
            store.add(rows)
            bar.update(len(part))


def near_duplicates(texts: Sequence[str], threshold: float) -> set[int]:
    """Indices of texts too close to an earlier one (cosine similarity of character 2-4-gram TF-IDF
    vectors at least `threshold`); the first of a group is kept."""
    if len(texts) < 2:
        return set()
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectors = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4)).fit_transform(texts)
    similar = (vectors @ vectors.T).tocoo()
    close = (similar.row < similar.col) & (similar.data >= threshold)  # the few pairs that matter
    dropped: set[int] = set()
    for i, j in sorted(zip(similar.row[close].tolist(), similar.col[close].tolist(), strict=True)):
        if i not in dropped:
            dropped.add(j)
    return dropped


def build_cards(cfg: DictConfig, checked: Mapping[Any, Any]) -> CardsResult:
    """The job (see the module docstring); returns the counts and where the outputs are. `checked`:
    what `esc.config_schema.validate` returned (the settings read here and below)."""
    refuse_unswept_sweep()  # before the records are read
    out = Path(cfg.output_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    run: CardsRun = checked[CardsRun]
    section: CardSources = checked["cards"]
    switches: LLMSteps = checked["steps"]
    records = gather_records(section)
    backend = with_cache(build_backend(checked["extractor"], key="extractor"), checked.get("cache"))
    settings = checked["generation"].settings()
    backend.check_ready()
    shaping = {
        "extractor": model_settings(backend.identity()),
        "generation": settings.to_dict(),
        "prompts_version": steps.prompts()["version"],
    }
    try:
        with job_run(out, "cards.build", shaping, resolved, seed=run.seed) as job:
            backend.load()
            return _build(job, run, section, switches, out, records, backend, settings)
    finally:
        backend.close()


def _build(
    job: Job,
    run: CardsRun,
    section: CardSources,
    switches: LLMSteps,
    out: Path,
    records: list[RawRecord],
    backend: ChatBackend,
    settings: GenerationSettings,
) -> CardsResult:
    manifest = job.manifest
    manifest.update(extractor=backend.identity(), records=len(records))
    stores = {name: StepStore(out / "steps" / f"{name}.jsonl") for name in STEPS}
    usage = {name: Usage() for name in STEPS}
    job.on_stop(lambda: {"usage": {k: u.report(backend.price) for k, u in usage.items()}})
    chunk, progress = run.chunk, run.progress
    enabled = {"extract": True, **switches.model_dump()}  # every step of STEPS
    by_id = {r.record_id: r for r in records}

    def step(name: str, work: list) -> None:
        run_step(name, backend, settings, stores[name], work, chunk, usage[name], progress)

    def lang(rid: str) -> str:
        return by_id[rid].language

    step("extract", [(r.record_id, steps.extract_prompt(r), _card_parser(r.language)) for r in records])
    cards = {rid: card_text(v, lang(rid)) for rid in by_id if (v := stores["extract"].value(rid))}
    if enabled["filter"]:
        step(
            "filter",
            [(rid, steps.filter_prompt(text, lang(rid)), steps.parse_filter) for rid, text in cards.items()],
        )
    topics = {rid: stores["filter"].value(rid) if enabled["filter"] else None for rid in cards}
    useful = [
        rid for rid, topic in topics.items() if topic != steps.DISCARD and (topic or not enabled["filter"])
    ]
    if enabled["classify"]:
        classify = [
            (rid, steps.classify_prompt(cards[rid], lang(rid), t), _category_parser(t))
            for rid in useful
            if (t := topics[rid])
        ]
        step("classify", classify)
    if enabled["grade"]:
        step(
            "grade",
            [(rid, steps.grade_prompt(cards[rid], lang(rid)), steps.parse_grade) for rid in useful],
        )
    return _write_outputs(job, section, out, records, cards, topics, stores, usage, backend, enabled)


def _card_parser(language: str) -> Callable[[str], dict[str, str]]:
    return lambda text: steps.parse_card(text, language)


def _category_parser(topic: str) -> Callable[[str], str]:
    return lambda text: steps.parse_category(text, topic)


def _write_outputs(
    job: Job,
    section: CardSources,
    out: Path,
    records: list[RawRecord],
    cards: dict[str, str],
    topics: dict[str, Any],
    stores: dict[str, StepStore],
    usage: dict[str, Usage],
    backend: ChatBackend,
    enabled: Mapping[str, bool],
) -> CardsResult:
    taxonomy = load_taxonomy()
    counts: dict[str, Counter] = defaultdict(Counter)
    kept: list[tuple[RawRecord, dict[str, Any]]] = []
    position: dict[str, int] = defaultdict(int)
    for record in records:
        c = counts[record.source]
        c["records"] += 1
        index = position[record.source]
        position[record.source] += 1
        outcome = _outcome(record.record_id, stores, topics, enabled)
        c[outcome] += 1
        if outcome != "kept":
            continue
        rid = record.record_id
        topic = topics.get(rid) or "social_other"
        category = stores["classify"].value(rid)
        if category is not None:
            topic = taxonomy.tier1_of(category)
        quality = stores["grade"].value(rid) if enabled["grade"] else None
        entry = {
            "base": cards[rid],
            "res": taxonomy.node(topic).zh,
            "source": record.source,
            "base_biaozhu": cards[rid],
            "language": LANGUAGE_NAMES[record.language],
            "id": ID_PREFIX.get(record.source, 9) * 10**7 + index,
            "category": category,
            "quality": quality,
            "source_record": rid,
        }
        kept.append((record, entry))
    threshold = section.dedup_threshold
    duplicates: set[int] = set()
    for language in ("en", "zh"):
        members = [k for k, (r, _) in enumerate(kept) if r.language == language]
        dropped = near_duplicates([kept[k][1]["base"].rsplit("\n", 1)[-1] for k in members], threshold)
        duplicates |= {members[k] for k in dropped}
    for k in sorted(duplicates):
        counts[kept[k][0].source]["kept"] -= 1
        counts[kept[k][0].source]["dropped: near-duplicate"] += 1
    final = [entry for k, (_, entry) in enumerate(kept) if k not in duplicates]
    atomic_write_text(out / "cards.json", json.dumps(final, ensure_ascii=False, indent=1) + "\n")
    human = [
        {
            "card_id": entry["id"],
            "language": record.language,
            "source_record": record.record_id,
            "dialogue": [
                {"role": "user" if who == SEEKER else "assistant", "content": t} for who, t in record.dialogue
            ],
        }
        for k, (record, entry) in enumerate(kept)
        if k not in duplicates and record.kind == "md"
    ]
    atomic_write_text(
        out / "human_dialogues.jsonl", "".join(json.dumps(h, ensure_ascii=False) + "\n" for h in human)
    )
    unreadable = [
        {"step": name, **row}
        for name, store in stores.items()
        for row in store.rows.values()
        if row["status"] != OK
    ]
    atomic_write_text(
        out / "unparseable.jsonl", "".join(json.dumps(u, ensure_ascii=False) + "\n" for u in unreadable)
    )
    report = {
        "by_source": {source: dict(c) for source, c in counts.items()},
        "total": dict(sum(counts.values(), Counter())),
        "by_quality": dict(Counter(e["quality"] for e in final)),
        "usage": {name: _usage(store, backend.price) for name, store in stores.items()},
    }
    atomic_write_text(out / "report.json", json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    markdown = report_markdown(report)
    atomic_write_text(out / "report.md", markdown)
    this_run = {k: u.report(backend.price) for k, u in usage.items()}
    return job.complete(
        CardsResult(str(out), len(final), report, markdown),
        counts=report["total"],
        usage=report["usage"],
        usage_this_run=this_run,
        cards=str(out / "cards.json"),
    )


def _usage(store: StepStore, price: Mapping[str, float] | None) -> dict[str, Any]:
    """A step's requests and tokens over every run of this folder (its answers' lines; replies the
    request cache replayed count apart, at no cost)."""

    usage = Usage()
    for row in store.rows.values():
        status = "error" if row["status"] == FAILED else "stop"
        tokens = (row.get("prompt_tokens"), row.get("completion_tokens"))
        usage.add(Reply(row.get("raw") or "", status, *tokens, cached=bool(row.get("cached"))))
    return usage.report(dict(price) if price else None)


def _outcome(
    rid: str, stores: dict[str, StepStore], topics: Mapping[str, Any], enabled: Mapping[str, Any]
) -> str:
    """What became of a record: kept, or the first step that dropped it and why."""
    for name in STEPS:
        if name != "extract" and not enabled.get(name, True):
            continue
        row = stores[name].rows.get(rid)
        if row is None:
            if name == "classify" and not topics.get(rid):  # no topic to classify under (filter off)
                continue
            return "failed" if name == "extract" else f"dropped: {name} not reached"
        if row["status"] != OK:
            return "failed" if row["status"] == FAILED else f"unparseable: {name}"
        if name == "filter" and topics.get(rid) == steps.DISCARD:
            return "dropped: filter (only emotions)"
        if name == "grade" and row["value"] == "invalid":
            return "dropped: grade invalid"
    return "kept"


def report_markdown(report: Mapping[str, Any]) -> str:
    columns = sorted({k for c in report["by_source"].values() for k in c} - {"records", "kept"})
    head = ["source", "records", "kept", *columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for source, c in [*report["by_source"].items(), ("total", report["total"])]:
        lines.append("| " + " | ".join([source, *[str(c.get(k, 0)) for k in head[1:]]]) + " |")
    quality = ", ".join(f"{k}: {v}" for k, v in sorted(report["by_quality"].items(), key=str)) or "none"
    tokens = ", ".join(
        f"{step} {u['prompt_tokens'] + u['completion_tokens']:,} tokens"
        + (f" (${u['cost_usd']:.2f})" if u.get("cost_usd") else "")
        + (f" + {u['cached_prompt_tokens'] + u['cached_completion_tokens']:,} replayed" * bool(u["cached"]))
        for step, u in report["usage"].items()
        if u["requests"]
    )
    return "\n".join(lines) + f"\n\nkept cards by grade: {quality}\nusage: {tokens or 'none'}\n"


class ExtractorName(Settings):
    """The key an `extractor:` node holds beside its backend's: the name of its outputs."""

    name: FileName = Field(description="it names the extractor in the outputs")


#: what `python build_cards.py` reads of its config (conf/cards.yaml; `esc.config_schema.validate`)
CONFIG: tuple[Section, ...] = (
    Section("", CardsRun),  # the top level is open (paths, hydra...)
    Section("cards", CardSources),
    MODEL_CONFIG,  # before the extractor, whose `model: ${model}` it is: its errors name `model.*`
    backend_config("extractor", beside=ExtractorName),
    generation_config("generation"),
    CACHE_CONFIG,
    Section("steps", LLMSteps),
)

"""Figures a paper would print, recomputed on planted inputs by an independent route (numpy, scipy):
issue 35's audit, one test per defect it found."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from esc.reports.estimate import EXACT, SAME, Estimate
from esc.reports.result import Report
from esc.scoring.judge import VALID
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord
from esc.tasks.score import leaderboard as board


def markdown(blocks: list) -> str:
    """A report's blocks as the markdown leaderboard.md holds."""
    return Report("leaderboard", tuple(blocks)).to_markdown()


def scored(dialogue: str, card: int, dim: str, score: int, target: str = "bot") -> ScoreRecord:
    return ScoreRecord(dialogue, dim, "en", "judge", {"style": "official", "version": 2}, VALID, score,
                       target=target, roleplayer="rp", card_id=card)  # fmt: skip


def by_card_percentile_interval(per_card: list[np.ndarray], draws: int = 20000, seed: int = 7) -> tuple:
    """An independent by-card bootstrap: draw cards with replacement, pool all their dialogues' values."""
    rng = np.random.default_rng(seed)
    sums = np.asarray([v.sum() for v in per_card])
    counts = np.asarray([len(v) for v in per_card])
    drawn = rng.integers(0, len(per_card), size=(draws, len(per_card)))
    means = sums[drawn].sum(axis=1) / counts[drawn].sum(axis=1)
    return tuple(np.percentile(means, [2.5, 97.5]))


def test_table_2_resamples_cards_when_a_row_pools_several_dialogues_per_card() -> None:
    """Defect 1: two runs of the same 12 cards in one row (24 dialogues, the runs nearly equal per
    card). Table 2's interval is the by-card one, not ~30% narrower as a by-dialogue bootstrap is."""
    rng = np.random.default_rng(3)
    card_level = rng.integers(0, 5, size=12)
    records, values = [], []
    for card, level in enumerate(card_level):
        runs = [int(level), int(np.clip(level + (card % 5 == 0), 0, 4))]  # two runs, almost the same
        values.append(np.asarray(runs, dtype=float) / 4 * 100)
        for run, score in enumerate(runs):
            records += [scored(f"c{card}-r{run}", card, dim, score) for dim in DIMENSION_KEYS]
    [row] = board.leaderboard(records, n_resamples=4000, seed=0)
    cell, average = row.cells["empathy"].estimate, row.average.estimate
    low, high = by_card_percentile_interval(values)
    assert cell.n == 24 and cell.value == pytest.approx(np.concatenate(values).mean())
    assert cell.unit == average.unit == "role card"  # what the interval resampled, with the figure
    width = high - low
    for got in (cell, average):  # every dimension scores the same here: the average equals a cell
        assert got.low == pytest.approx(low, abs=0.06 * width)
        assert got.high == pytest.approx(high, abs=0.06 * width)


# --- Bradley-Terry ----------------------------------------------------------------------------------


def judged_pairs(results: list) -> list:
    """Judged verdicts from (x, y, result, card): result x, y, "tie" or None (unread)."""
    from esc.tasks.pairwise.questions import Pair, Verdict
    from esc.tasks.pairwise.report import Judged

    out = []
    for x, y, result, card in results:
        pair = Pair("rp", "en", card, x, y, None, None)
        out.append(Judged(pair, "empathy", Verdict(result, result is not None, 1, 2)))
    return out


Plan = list[tuple[str, str, str | None, int]]


def independent_fit(targets: list[str], results: Plan, prior: float) -> dict:
    """Maximum likelihood by scipy: wins (a tie half each way) plus `prior` pseudo-wins each way."""
    from scipy.optimize import minimize

    index = {t: i for i, t in enumerate(targets)}
    wins = np.full((len(targets), len(targets)), prior)
    np.fill_diagonal(wins, 0.0)
    for x, y, result, _ in results:
        if result is None:
            continue
        share = 0.5 if result == "tie" else float(result == x)
        wins[index[x], index[y]] += share
        wins[index[y], index[x]] += 1 - share

    def negative_log_likelihood(free: np.ndarray) -> float:
        theta = np.concatenate([[0.0], free])
        diff = theta[:, None] - theta[None, :]
        return float(np.sum(wins * np.logaddexp(0.0, -diff)))

    start = np.zeros(len(targets) - 1)
    fit = minimize(negative_log_likelihood, start, method="BFGS", options={"gtol": 1e-10})
    theta = np.concatenate([[0.0], fit.x])
    return dict(zip(targets, theta - theta.mean(), strict=True))


def test_bradley_terry_leaves_out_a_target_without_a_valid_verdict() -> None:
    """Defect 2: a beats b on all 10 cards, d is never validly judged. With the stated prior (1
    pseudo-win each way) a's strength is log(11)/2 = 1.199, as a fit of a and b alone gives; d is n/a."""
    from esc.tasks.pairwise.report import strengths

    results = [("a", "b", "a", c) for c in range(10)] + [("a", "d", None, c) for c in range(10)]
    got = {s.target: s for s in strengths(judged_pairs(results), n_resamples=0)}
    assert got["a"].theta == pytest.approx(np.log(11) / 2, abs=1e-6)
    assert got["a"].theta == pytest.approx(independent_fit(["a", "b"], results, 1.0)["a"], abs=1e-6)
    assert got["b"].theta == pytest.approx(-np.log(11) / 2, abs=1e-6)
    assert np.isnan(got["d"].theta) and got["d"].undefined == "no verdict"


def test_bradley_terry_prior_is_the_stated_pseudo_wins_with_three_targets() -> None:
    """Defect 3: with three targets, choix's `alpha` is not "1 pseudo-win each way"; the strengths are
    now the exact fit of the data plus those pseudo-wins (scipy, independently)."""
    from esc.tasks.pairwise.report import strengths

    plan = [("a", "b", "a")] * 6 + [("a", "b", "b")] * 2 + [("a", "c", "a")] * 7 + [("a", "c", "tie")]
    plan += [("b", "c", "b")] * 4 + [("b", "c", "c")] * 3 + [("b", "c", "tie")] * 2
    results = [(x, y, r, card) for card, (x, y, r) in enumerate(plan)]
    expected = independent_fit(["a", "b", "c"], results, 1.0)
    got = {s.target: s.theta for s in strengths(judged_pairs(results), n_resamples=0)}
    for target in "abc":
        assert got[target] == pytest.approx(expected[target], abs=1e-6), target


# --- intervals at the boundary --------------------------------------------------------------------


def test_a_share_at_zero_gives_its_exact_interval_not_a_zero_width_one() -> None:
    """Defect 5: 0 flags in 24 replies on 8 cards was printed "0.0 [0.0, 0.0]%". The exact 95%
    upper bounds are 1 - 0.025^(1/8) = 36.9% by card and 1 - 0.025^(1/24) = 14.2% by reply: the cell
    shows the one by card, marked, and its figure holds it (the CSV's and the chart's interval); the
    one by reply is in the figure's note (the cell's tooltip)."""
    from esc.tasks.safety.report import _rate

    units = [("card", "en", c) for c in range(8) for _ in range(3)]
    rate = _rate([False] * 24, units, ["valid"] * 24, 1000, 0)
    by_card, by_reply = 100 * (1 - 0.025 ** (1 / 8)), 100 * (1 - 0.025 ** (1 / 24))
    cell, figure = rate.cell(), rate.estimate
    assert cell == f"0.0% [0.0, {by_card:.1f}]{EXACT} (0/24)"
    assert (figure.low, figure.interval, figure.mark()) == (0.0, "exact", EXACT)
    assert figure.high == pytest.approx(by_card / 100)
    assert f"0.0-{by_reply:.1f}% by reply (24)" in (figure.note or "")
    assert Estimate.from_json(figure.to_json()) == dataclasses.replace(figure, table="", keys=())


def test_a_constant_judge_says_every_resample_agrees_instead_of_a_bare_interval() -> None:
    """Defect 5: a judge that always says 3 printed "75.00 [75.0, 75.0]" as if it were certain."""
    records = [scored(f"d{c}", c, dim, 3) for c in range(6) for dim in DIMENSION_KEYS]
    text = markdown(board.leaderboard_blocks(board.leaderboard(records, n_resamples=500)))
    assert f"75.00 [75.0, 75.0]{SAME} " in text and "[75.0, 75.0] " not in text
    assert text.count(f"\\{SAME} every resample (where the figure is defined) gave") == 1  # under the table


# --- rankings with ties ---------------------------------------------------------------------------


def hand_tau_b(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b by its definition: (concordant - discordant) / sqrt((n0 - tx)(n0 - ty))."""
    concordant = discordant = tied_x = tied_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            tied_x += dx == 0
            tied_y += dy == 0
            concordant += dx * dy > 0
            discordant += dx * dy < 0
    n0 = len(x) * (len(x) - 1) / 2
    return (concordant - discordant) / np.sqrt((n0 - tied_x) * (n0 - tied_y))


def test_jury_rankings_keep_exact_ties_and_a_tie_is_no_dispute() -> None:
    """Defect 4: judge a scores twin1 and twin2 the same; they were ordered by name, which made a
    dispute with b (twin2 > twin1) and a tau of a plain order. Now a's order keeps the tie, tau is
    tau-b with the tie, and nobody disputes twin1 vs twin2."""
    from esc.scoring.jury import JURY
    from esc.tasks.score.jury import jury_blocks, rankings
    from esc.tasks.score.leaderboard import Cell, Row

    means = {"a": {"twin1": 75.0, "twin2": 75.0, "mid": 50.0, "low": 25.0},
             "b": {"twin1": 70.0, "twin2": 80.0, "mid": 45.0, "low": 20.0}}  # fmt: skip
    means[JURY] = {t: (means["a"][t] + means["b"][t]) / 2 for t in means["a"]}
    rows = [Row(t, "rp", "en", judge, 6, {}, Cell(Estimate(mean, n=42)))
            for judge, by_target in means.items() for t, mean in by_target.items()]  # fmt: skip
    [(_, r)] = rankings(rows, ["a", "b"]).items()
    targets = sorted(means["a"])
    expected = hand_tau_b([means["a"][t] for t in targets], [means[JURY][t] for t in targets])
    assert r["tau"]["a"] == pytest.approx(expected) and expected < 1
    assert r["tau"]["b"] == pytest.approx(1.0)
    assert r["disputed"] == [] and r["tiers"]["a"] == [["twin1", "twin2"], ["mid"], ["low"]]
    text = markdown(jury_blocks([], {}, {("rp", "en"): r}, "mean", ["a", "b"]))
    assert (
        "- a: twin1 = twin2 > mid > low" in text
        and "no two judges order a pair of targets oppositely" in text
    )


# --- Kendall's W ----------------------------------------------------------------------------------


def plain_w(table: np.ndarray) -> float:
    """Kendall's W without ties, by its definition: 12 S / (m^2 (n^3 - n))."""
    n, m = table.shape
    ranks = np.argsort(np.argsort(-table, axis=0), axis=0) + 1.0
    totals = ranks.sum(axis=1)
    return 12 * ((totals - totals.mean()) ** 2).sum() / (m**2 * (n**3 - n))


def test_kendalls_w_is_printed_with_its_chance_level_and_a_permutation_p() -> None:
    """Defect 6: W was read as "0: none". Two simulators that rank 4 targets in opposite orders give
    W = (1 + rho) / 2 = 0, below the chance level 0.50 (the mean W of random rankings, simulated here
    by plain numpy); the report says so, with a permutation p of 1."""
    from scipy.stats import spearmanr

    from esc.tasks.score.simulators import simulator_blocks, simulator_tables

    rng = np.random.default_rng(11)
    for m in (2, 3):
        simulated = np.mean(
            [plain_w(rng.permuted(np.tile(np.arange(5.0), (m, 1)).T, axis=0)) for _ in range(4000)]
        )
        assert simulated == pytest.approx(1 / m, abs=0.02)
    records = []
    for card in range(6):
        for rank, target in enumerate(["t1", "t2", "t3", "t4"]):
            for sim, score in (("s1", 4 - rank), ("s2", 1 + rank)):
                for d in DIMENSION_KEYS:
                    record = scored(f"{sim}/{target}/{card}", card, d, min(score, 4), target)
                    records.append(dataclasses.replace(record, roleplayer=sim))
    [table] = simulator_tables(records, n_resamples=200)
    rho = spearmanr(table.means[:, 0], table.means[:, 1]).statistic
    assert table.w == pytest.approx((1 + rho) / 2) and table.w == pytest.approx(0.0)
    assert table.w_chance == pytest.approx(0.5) and table.w_p == pytest.approx(1.0)
    text = markdown(simulator_blocks([table]))
    assert (
        "| 0.50 | 1.000 | 2 | 4 | 6 |" in text  # W, then its chance level and p; simulators, targets, cards
        and "chance level" in text
        and "(1 + Spearman's rho) / 2" in text
    )


# --- counts and one-card cells ----------------------------------------------------------------------


def test_the_breakdowns_unknown_note_counts_each_dialogue_once_whatever_the_judges() -> None:
    """Defect 8: 4 dialogues whose cards are unknown, each scored by 3 judges, were "12 dialogue(s)"."""
    from esc.reports.breakdown import breakdown_blocks, leaderboard_breakdowns

    records = [
        dataclasses.replace(scored(f"d{c}", c, dim, 2), judge=judge)
        for c in range(4) for judge in ("j1", "j2", "j3") for dim in DIMENSION_KEYS
    ]  # fmt: skip
    tables = leaderboard_breakdowns(records, {}, min_n=1, n_resamples=100, only=("tier1",))
    text = markdown(breakdown_blocks(tables, {"en": {"no_card": 4}}))
    assert "unknown (4 dialogue(s))" in text and "unknown (12" not in text


def test_a_one_card_cell_says_why_it_has_no_interval() -> None:
    """Defect 9: a breakdown cell resting on one card printed a mean with no interval and no reason."""
    from esc.reports.breakdown import Facets, breakdown_blocks, leaderboard_breakdowns

    records = [scored(f"run{k}", 7, dim, 3) for k in range(2) for dim in DIMENSION_KEYS]
    facets = {f"run{k}": Facets("en", tier1="work") for k in range(2)}
    text = markdown(
        breakdown_blocks(leaderboard_breakdowns(records, facets, min_n=1, n_resamples=100, only=("tier1",)))
    )
    assert "75.0 [no interval: one card], n=2" in text
    rows = board.leaderboard(records, n_resamples=100)
    assert "75.00 [no interval: one card]" in markdown(board.leaderboard_blocks(rows))  # Table 2 says it too
    assert rows[0].average.estimate.note == "one card: nothing to resample"


def hand_ordinal_alpha(table: np.ndarray) -> float:
    """Krippendorff's ordinal alpha by its definition (coincidences, ordinal distances), judges x items."""
    values = sorted({v for v in table.ravel() if not np.isnan(v)})
    index = {v: i for i, v in enumerate(values)}
    coincidences = np.zeros((len(values), len(values)))
    for column in table.T:
        present = [index[v] for v in column if not np.isnan(v)]
        if len(present) < 2:
            continue
        for i, a in enumerate(present):
            for j, b in enumerate(present):
                if i != j:
                    coincidences[a, b] += 1 / (len(present) - 1)
    totals = coincidences.sum(axis=1)
    n = totals.sum()
    delta = np.zeros_like(coincidences)
    for c in range(len(values)):
        for k in range(len(values)):
            low, high = min(c, k), max(c, k)
            delta[c, k] = (totals[low : high + 1].sum() - (totals[c] + totals[k]) / 2) ** 2
    return 1 - (n - 1) * (coincidences * delta).sum() / (np.outer(totals, totals) * delta).sum()


def test_the_jurys_alpha_is_ordinal_on_stated_scores() -> None:
    """Defect 9: with `jury.reading=stated` the scores are ordinal categories 0-4, but alpha was
    interval-level; it is now the ordinal alpha (checked against the definition)."""
    from esc.tasks.score.jury import agreement_between_judges as agreement

    a = [0, 1, 1, 2, 3, 4, 4, 2, 0, 3, 1, 4]
    b = [0, 1, 2, 2, 4, 4, 3, 1, 0, 3, 2, 4]
    records = [
        dataclasses.replace(scored(f"d{i}", i, "empathy", score), judge=judge)
        for judge, scores in (("a", a), ("b", b)) for i, score in enumerate(scores)
    ]  # fmt: skip
    alphas = agreement(records, ["a", "b"], reading="stated", n=0)
    expected = hand_ordinal_alpha(np.asarray([a, b], dtype=float))
    assert alphas["empathy"][0] == pytest.approx(expected)
    interval_alpha = agreement(records, ["a", "b"], reading="expected", n=0)["empathy"][0]
    assert abs(interval_alpha - expected) > 1e-3  # the two levels differ on these scores


# --- the rubric text is part of a judgment's identity -------------------------------------------------


def test_a_changed_rubric_text_needs_a_new_version_and_re_judges(tmp_path, monkeypatch) -> None:
    """Defect 10: editing rubrics.yaml without bumping the version mixed old and new scores. Now the
    file does not load; and a judgment asked with another text of the rubric is judged again."""
    import yaml

    from esc.errors import UserError
    from esc.scoring import rubrics
    from esc.scoring.judge import ScoreItem
    from esc.scoring.judging import check_one_prompt_per_judge, pending_items
    from esc.scoring.store import ScoreStore

    edited = tmp_path / "rubrics.yaml"
    data = yaml.safe_load(rubrics.RUBRICS_FILE.read_text(encoding="utf-8"))
    data["styles"]["official"]["rubrics"]["en"]["empathy"] += " Be strict."  # the version stays 2
    edited.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    monkeypatch.setattr(rubrics, "RUBRICS_FILE", edited)
    rubrics._data.cache_clear()
    rubrics.prompt_style.cache_clear()
    with pytest.raises(UserError, match=r"texts changed but its version \(2\) did not; bump `version`"):
        rubrics.prompt_style("official")
    monkeypatch.undo()
    rubrics._data.cache_clear()
    rubrics.prompt_style.cache_clear()
    current = rubrics.prompt_style("official").identity
    assert len(current["sha256"]) == 64

    item = ScoreItem("d0", "empathy", "en", (("user", "I feel low."), ("assistant", "I hear you.")))
    store = ScoreStore(tmp_path / "scores.jsonl")
    before = dataclasses.replace(scored("d0", 0, "empathy", 3), content_sha=item.content_sha)
    store.add([dataclasses.replace(before, prompt={**current, "sha256": "0" * 64})])  # another text
    assert pending_items([item], store, current) == [item]
    store.add([dataclasses.replace(before, prompt={"style": "official", "version": 2})])  # made before hashes
    assert pending_items([item], store, current) == []
    store.add([dataclasses.replace(before, prompt=current)])
    assert pending_items([item], store, current) == []
    mixed = [
        dataclasses.replace(before, prompt=current),
        dataclasses.replace(before, prompt={**current, "sha256": "1" * 64}),
    ]
    with pytest.raises(UserError, match="different prompts"):
        check_one_prompt_per_judge(mixed, [tmp_path])
    check_one_prompt_per_judge(
        [mixed[0], dataclasses.replace(before, prompt={"style": "official", "version": 2})], []
    )


@pytest.mark.parametrize(
    ("module", "attribute", "loader", "name"),
    [
        ("esc.scoring.safety_checklist", "CHECKLIST_FILE", "checklist", "safety"),
        ("esc.tasks.pairwise.questions", "PAIRWISE_FILE", "pairwise_prompts", "pairwise"),
        ("esc.scoring.roleplay_metrics", "ROLEPLAY_METRICS_FILE", "roleplay_metrics", "roleplay_metrics"),
    ],
)
def test_every_question_file_refuses_a_text_changed_without_a_new_version(
    module: str, attribute: str, loader: str, name: str, tmp_path, monkeypatch
) -> None:
    """Defect 10, the same scheme for the safety, pairwise and role-play questions: version plus the
    checksum recorded in esc/prompts/checksums.json, checked at load."""
    import importlib

    import yaml

    from esc.errors import UserError

    mod = importlib.import_module(module)
    original = getattr(mod, attribute)
    load = getattr(mod, loader)
    assert len(load()["sha256"]) == 64 and isinstance(load()["version"], int)
    data = yaml.safe_load(original.read_text(encoding="utf-8"))
    data["note"] = "an edit"  # any change of the texts, the version kept
    edited = tmp_path / original.name
    edited.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    monkeypatch.setattr(mod, attribute, edited)
    load.cache_clear()
    try:
        with pytest.raises(UserError, match=rf"{name}: its texts changed but its version \(1\) did not"):
            load()
    finally:
        monkeypatch.undo()
        load.cache_clear()


def test_pairwise_resamples_as_many_times_as_the_other_reports() -> None:
    """Defect 9: pairwise defaulted to 200 resamples (thin for 2.5% tails); now 1,000 as Table 2,
    the breakdowns, safety and trajectory."""
    from tests.helpers import compose

    cfg = compose(["mode=pairwise", "dialogues=[a,b]"], config_name="rank")
    assert cfg.pairwise.bootstrap == cfg.leaderboard.bootstrap == cfg.safety.bootstrap == 1000


# --- found by the review of the fixes above -----------------------------------------------------------


def test_a_bradley_terry_resample_without_a_target_is_undefined_for_every_target() -> None:
    """A resample where C (which lost all its verdicts) is absent would centre A and B on another
    scale (A 0.17 instead of 0.61): it counts as undefined for all, never mixed into A's interval."""
    from esc.tasks.pairwise.report import strengths

    results = [("a", "b", "a" if c < 6 else "b", c) for c in range(10)]
    results += [("a", "c", "a", 10 + c) for c in range(3)] + [("b", "c", "b", 13 + c) for c in range(3)]
    got = {s.target: s for s in strengths(judged_pairs(results), n_resamples=300, seed=1)}
    undefined = {t: s.interval.undefined for t, s in got.items()}
    assert undefined["a"] == undefined["b"] == undefined["c"] > 0


def test_intervals_equal_up_to_floating_point_and_undefined_shares_print_honestly() -> None:
    from esc.reports.bootstrap import interval_text, share_figure
    from esc.reports.estimate import format_estimate

    assert interval_text(71.42857142857142, 71.42857142857143, 1) == f" [71.4, 71.4]{SAME}"
    assert interval_text(0.0, 0.369, 1, 100, exact=True) == f" [0.0, 36.9]{EXACT}"
    assert format_estimate(Estimate(0.12, 0.03, 0.3), 0, 100, suffix="%") == "12% [3, 30]"  # the unit first
    assert format_estimate(Estimate(None), 0, 100, suffix="%") == "n/a"  # never "n/a%"
    unstable = Estimate(0.0, 0.0, 0.0, undefined=0.5)
    assert share_figure(unstable, 24, 8, "reply") == ("n/a (undefined in 50.0% of resamples)", unstable)
    defined = Estimate(0.5, 0.5, 0.5, undefined=0.02)
    assert share_figure(defined, 8, 4, "pair") == (f"50.0% [50.0, 50.0]{SAME}", defined)
    assert defined.why_not() == "undefined in 2% of resamples"  # the share the mark's note points to


def test_a_tables_marks_are_explained_once_under_it_in_markdown_json_and_the_site(tmp_path) -> None:
    """Issue 64, item 4: a cell holds its figure and its interval, marked where every resample gave
    the same value or where a share's interval is the exact one by card; the table says once what
    each mark it uses means (markdown, the site), and a table without marks says nothing."""
    from esc.reports.bootstrap import share_figure
    from esc.reports.estimate import format_estimate
    from esc.reports.result import Cell, Table, footnotes, read_result, result_path, write_result
    from esc.site.result_html import table_html

    same = [Estimate(v, v, v, 6, "role card") for v in (0.75, 0.5)]
    text, share = share_figure(Estimate(1.0, 1.0, 1.0, 12, "role card"), 12, 6, "pair")
    spread = Estimate(0.6, 0.4, 0.8, 6, "role card")
    table = Table.of(
        ["target", "score", "moved"],
        [["a", Cell(format_estimate(same[0], 2), same[0]), Cell(text, share)],
         ["b", Cell(format_estimate(same[1], 2), same[1]), Cell(format_estimate(spread, 2), spread)]],
    )  # fmt: skip
    assert [c.text for c in table.rows[0][1:]] == [f"0.75 [0.75, 0.75]{SAME}", f"100.0% [54.1, 100.0]{EXACT}"]
    notes = footnotes(table)
    assert [n[0] for n in notes] == [SAME, EXACT] and "by role card" in notes[1]
    write_result(tmp_path, Report("toy", (table,)))
    md = (tmp_path / "toy.md").read_text(encoding="utf-8")
    assert md.count("gave the same value: the resamples agree") == 1 and md.count("Clopper-Pearson") == 1
    assert f"\n\n\\{SAME} every resample" in md  # after the table, escaped: not a list item
    [back] = read_result(result_path(tmp_path, "toy")).tables()
    assert footnotes(back) == notes and back.rows[0][2].estimate.interval == "exact"
    html = str(table_html(back))
    assert html.count('<p class="footnote">') == 2 and html.index("</table>") < html.index("footnote")
    plain = Table.of(["target", "score"], [["b", Cell(format_estimate(spread, 2), spread)]])
    assert footnotes(plain) == [] and 'class="footnote"' not in str(table_html(plain))
    assert Report("toy", (plain,)).to_markdown().rstrip().endswith("|")


def test_the_unscored_note_counts_each_dialogue_once_whatever_the_judges() -> None:
    from esc.reports.breakdown import Facets, breakdown_blocks, leaderboard_breakdowns
    from esc.scoring.judge import FAILED

    failed = {"status": FAILED, "score": None}
    records = [
        dataclasses.replace(scored(f"d{c}", c, dim, 2), judge=judge, **(failed if c == 0 else {}))
        for c in range(3) for judge in ("j1", "j2") for dim in DIMENSION_KEYS
    ]  # fmt: skip
    facets = {f"d{c}": Facets("en", tier1="work") for c in range(3)}
    text = markdown(
        breakdown_blocks(leaderboard_breakdowns(records, facets, min_n=1, n_resamples=50, only=("tier1",)))
    )
    assert "1 dialogue(s) without any valid judgment of some judge" in text


def test_a_folder_judged_before_rubric_hashes_still_resumes() -> None:
    """The folder's fingerprint names the rubric by style and version (each judgment keeps the sha256)."""
    from esc.rank.run import output_settings
    from esc.scoring.judges import build_judge, judge_settings
    from esc.tasks.task import get_mode
    from tests.helpers import compose

    judge = build_judge(judge_settings(compose(["judge=tiny", "dialogues=x"], config_name="rank").judge))
    settings = output_settings(get_mode("score"), {}, [judge])
    assert settings["judge"]["prompt"] == {"style": "official", "version": 2}
    assert len(judge.identity()["prompt"]["sha256"]) == 64


def test_a_judge_that_gives_one_answer_is_named_beside_its_numbers() -> None:
    """Issue 37: the demo's leaderboard read "0.00 [0.0, 0.0]" in 5 of 7 dimensions (SmolLM2 as judge),
    which a newcomer reads as a broken tool. The table now says the judge gave one answer there."""
    from esc.scoring.rubrics import TABLE_2_ORDER
    from esc.tasks.score.leaderboard import Cell, Row, leaderboard_blocks, one_answer_dimensions

    def score(mean: float, low: float, high: float, n: int = 4) -> Cell:
        return Cell(Estimate(mean, low, high, n, "role card"), cards=4)

    def row(target: str, empathy: float) -> Row:
        cells = {k: score(0.0, 0.0, 0.0) for k in TABLE_2_ORDER}
        cells["empathy"] = score(empathy, empathy - 10, empathy + 10)
        cells["overall"] = score(50.0, 50.0, 50.0)  # one answer (2), in both rows
        return Row(target, "rp", "en", "smollm2", 4, cells, score(10.0, 5.0, 15.0, 28))

    rows = [row("a", 25.0), row("b", 50.0)]
    found = one_answer_dimensions(rows)
    assert found == {
        "smollm2": [(k, 0.0) for k in TABLE_2_ORDER if k not in ("empathy", "overall")] + [("overall", 2.0)]
    }
    text = markdown(leaderboard_blocks(rows))
    assert "Note: smollm2 gave every valid judgment the same score in 6 of 7 dimensions: Fluency (0)" in text
    assert "Overall (2)" in text and "Empathy" not in text.split("Note:")[1].split("\n\n")[0]
    rows[1].cells["overall"] = score(75.0, 75.0, 75.0)  # another answer for b: not one
    assert ("overall", 2.0) not in one_answer_dimensions(rows)["smollm2"]

"""A page of the report site is one registered builder (`esc.site.pages`): a toy page kind
registered here, with its template in its own folder, is built, counted and masked like the built-in
ones, with no edit to the site's code."""

from __future__ import annotations

from pathlib import Path

import pytest

from esc.site import build_site
from esc.site.pages import page, page_kinds, unregister
from esc.site.site import Site, slugify
from tests.synthetic_run import synthetic_run

SECRET = "sk-toy-page-0123456789abcdef"

TOY_TEMPLATE = """{% extends "base.jinja" %}
{% block content %}
<h2>Card {{ language }}-{{ card_id }}</h2>
<ul>{% for target, average in averages %}
<li data-target="{{ target }}">{{ average|num }}</li>{% endfor %}</ul>
<p>{{ echoed }}</p>
{% endblock %}
"""


@pytest.fixture
def toy_kind(tmp_path: Path):
    """A page per role card: each target's mean score of each task on it, and a model's echo of a
    secret."""
    templates = tmp_path / "toy_templates"
    templates.mkdir()
    (templates / "toy_card.jinja").write_text(TOY_TEMPLATE)

    @page("toy_cards", order=60, templates=templates)
    def toy_cards(site: Site) -> None:
        for (language, card_id), entries in sorted(site.by_card.items()):
            averages = sorted(
                (e.target, e.mean(t, j)) for e in entries for t in e.judgments for j in site.judges_of(e)
            )
            site.write(
                f"toy/{slugify(language)}-{card_id}.html", "toy_card", "toy_cards",
                page_title=f"card {card_id}", language=language, card_id=card_id, averages=averages,
                echoed=f"the model said {SECRET}",
            )  # fmt: skip

    yield "toy_cards"
    unregister("toy_cards")


def test_a_registered_page_kind_is_built_counted_and_masked(
    toy_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    rank = synthetic_run(tmp_path / "run", cards=3, targets=["alpha", "beta"], dims=7, seed=1, bootstrap=20)
    result = build_site([rank], tmp_path / "site")
    assert list(result.pages) == ["overview", "targets", "dialogues", "compare", "reports", "toy_cards"]
    assert result.pages["toy_cards"] == 3  # one per card
    pages = sorted((tmp_path / "site" / "toy").glob("*.html"))
    assert len(pages) == 3
    text = pages[0].read_text(encoding="utf-8")
    assert 'href="../static/site.css"' in text  # extends the site's base.jinja, links relative
    assert 'data-target="alpha"' in text and 'data-target="beta"' in text
    assert SECRET not in text and "the model said ***" in text  # Site.write masks every page


def test_the_built_in_page_kinds_are_registered_in_summary_order() -> None:
    assert [kind.name for kind in page_kinds()] == ["overview", "targets", "dialogues", "compare", "reports"]


def test_a_second_builder_under_a_taken_name_is_refused() -> None:
    page_kinds()  # the built-in kinds registered (their modules imported), whatever ran before
    with pytest.raises(ValueError, match="'targets' is registered twice"):
        page("targets")(lambda site: None)

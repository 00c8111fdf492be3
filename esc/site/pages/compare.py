"""`compare/<lang>-<card id>.html`: every target's dialogue of one card, side by side."""

from __future__ import annotations

from esc.site.pages import page
from esc.site.site import Site
from esc.site.transcript import bubbles


@page("compare", order=40)
def compare_pages(site: Site) -> None:
    for key, href in site.compare.items():
        compare_page(site, key, href)


def compare_page(site: Site, key: tuple[str, int], href: str) -> None:
    # each target's dialogue as played first, then its stress-test variants (mode=stress)
    entries = sorted(
        site.by_card[key], key=lambda e: (e.target, e.roleplayer, e.variant is not None, e.dialogue_id)
    )
    columns = []
    for entry in entries:
        columns.append(
            {
                "target": entry.target,
                "variant": entry.variant,
                "roleplayer": entry.roleplayer,
                "href": "../" + site.page[entry.dialogue_id],
                "means": [
                    (task, judge, entry.mean(task, judge))
                    for task in entry.judgments
                    for judge in sorted({j.judge for j in entry.whole(task)})
                ],
                "bubbles": bubbles(entry),
                "missing": entry.missing,
            }
        )
    card = next((e.card for e in entries if e.card is not None), None)
    several_rp = len({e.roleplayer for e in entries}) > 1
    site.write(
        href,
        "compare",
        "compare",
        page_title=f"Card {key[0]}-{key[1]}",
        language=key[0],
        card_id=key[1],
        card_text=card.to_text() if card else None,
        columns=columns,
        several_rp=several_rp,
    )

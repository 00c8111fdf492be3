"""A judge against people: agreement tables on a split of the annotated dialogues, by facet, and the
raters' own agreement beside it."""

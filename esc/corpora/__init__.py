"""Readers of third-party corpora, for everyone who needs them: ESC-Role training samples
(`esc.esc_role_samples`), card construction (`esc.cards.construct.sources`), human scores
(`esc.annotate.human_scores`) and the ICL example dialogue (`esc.prompts.examples`).

A reader turns a dataset's own file layout into plain records (who said what, the metadata the
dataset has) and checks it, naming file and record when a record is malformed; it knows nothing
of role cards, prompts or samples. `make data` puts the files where `esc.paths.data_dir()` says.
"""

#: the two parties of every dialogue a reader returns, whatever the dataset calls them
SEEKER, SUPPORTER = "seeker", "supporter"

"""Text metrics (BLEU, Distinct, ROUGE-L, METEOR) and a judge's scores against people's."""

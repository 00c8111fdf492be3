"""`make data`: the pinned manifest of third-party data (data/sources.yaml) and the fetcher."""

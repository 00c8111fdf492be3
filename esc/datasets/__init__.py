"""Third-party datasets: the pinned manifest (data/sources.yaml) and the fetcher behind `make data`."""

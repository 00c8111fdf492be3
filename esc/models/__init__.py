"""Model loading: the embedded tiny model, packaged models (SmolLM2 from PyPI) and hub models."""

"""Model loading: the embedded tiny model and hub models named in `conf/model/`."""

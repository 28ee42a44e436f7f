"""rackscale as a service: the live cluster, its store, the runner that drives it on the wall clock, and
the REST API, metrics and web page on top. Needs the ``service`` extra (FastAPI, SQLAlchemy, ...)."""

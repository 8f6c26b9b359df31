"""Every generated table, one module per page of the results book (importing them registers them)."""
from . import defaults, quality, service, speed, studies, training  # noqa: F401

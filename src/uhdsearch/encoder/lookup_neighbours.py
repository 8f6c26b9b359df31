"""Deprecated: moved to uhdsearch.encoder.query.neighbours (issue 34); this alias goes in the next release."""
import sys
import warnings

from uhdsearch.encoder.query import neighbours as _moved

warnings.warn("uhdsearch.encoder.lookup_neighbours is deprecated; import uhdsearch.encoder.query.neighbours", DeprecationWarning,
              stacklevel=2)
sys.modules[__name__] = _moved

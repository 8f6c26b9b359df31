"""Deprecated: moved to uhdsearch.encoder.query.vote (issue 34); this alias goes in the next release."""
import sys
import warnings

from uhdsearch.encoder.query import vote as _moved

warnings.warn("uhdsearch.encoder.lookup_vote is deprecated; import uhdsearch.encoder.query.vote", DeprecationWarning,
              stacklevel=2)
sys.modules[__name__] = _moved

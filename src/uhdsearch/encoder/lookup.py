"""Deprecated: moved to uhdsearch.encoder.query.table (issue 34); this alias goes in the next release."""
import sys
import warnings

from uhdsearch.encoder.query import table as _moved

warnings.warn("uhdsearch.encoder.lookup is deprecated; import uhdsearch.encoder.query.table", DeprecationWarning,
              stacklevel=2)
sys.modules[__name__] = _moved

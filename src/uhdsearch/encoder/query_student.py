"""Deprecated: moved to uhdsearch.encoder.query.student (issue 34); this alias goes in the next release."""
import sys
import warnings

from uhdsearch.encoder.query import student as _moved

warnings.warn("uhdsearch.encoder.query_student is deprecated; import uhdsearch.encoder.query.student", DeprecationWarning,
              stacklevel=2)
sys.modules[__name__] = _moved

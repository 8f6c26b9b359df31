"""Deprecated: moved to uhdsearch.studies.isotropy (issue 34); this alias goes in the next release."""
import sys
import warnings

from uhdsearch.studies import isotropy as _moved

warnings.warn("uhdsearch.baselines.isotropy is deprecated; import uhdsearch.studies.isotropy", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved

"""Deprecated: moved to uhdsearch.experiments.builders (issue 34); this alias goes in the next release."""
import sys
import warnings

from uhdsearch.experiments import builders as _moved

warnings.warn("uhdsearch.baselines.dense_systems is deprecated; import uhdsearch.experiments.builders", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved

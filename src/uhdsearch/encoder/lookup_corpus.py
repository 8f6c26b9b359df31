"""Deprecated: moved to uhdsearch.encoder.query.corpus_table (issue 34); this alias goes in the next release."""
import sys
import warnings

from uhdsearch.encoder.query import corpus_table as _moved

warnings.warn("uhdsearch.encoder.lookup_corpus is deprecated; import uhdsearch.encoder.query.corpus_table", DeprecationWarning,
              stacklevel=2)
sys.modules[__name__] = _moved

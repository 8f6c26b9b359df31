"""SearchOptions: every search setting, its default and its valid values in one frozen object.

One `parse` reads them from strings (the CLI's flags, the HTTP app's parameters, `compare --search`), and one
`resolve(index)` turns the "auto" values into what a search over that index uses: every "auto" rule is here.
Two presets name the two settings the project reports: `paper()` (plain counts, every dimension, exact: the
paper's score) and `default()` (what `uhdsearch search` and `serve` do). Their run names are the system names
in every table and result file: "uhd-binary" is the paper's score, "uhd-binary-norm" the defaults.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from uhdsearch.errors import UsageError
from uhdsearch.index.base import check_length_norm
from uhdsearch.search import cascade as cascades
from uhdsearch.search.cascade import Cascade
from uhdsearch.search.lengthnorm import LENGTH_NORM
from uhdsearch.search.option_values import CHECKS, PARSERS, RANGES, SCORINGS, api_spelling, cli_spelling, reason
from uhdsearch.search.stopdims import AUTO, DEFAULT_MAX_DF, MIN_DOCUMENTS

__all__ = ["SearchOptions", "ResolvedOptions", "api_spelling", "cli_spelling", "auto_max_df", "auto_length_norm",
           "auto_cascade", "RANGES"]
DEFAULT_SUFFIX = "-norm"  # the run name of default(): stop dimensions, length norm and cascade left "auto"


@dataclass(frozen=True)
class SearchOptions:
    """Every search setting; "auto" values are resolved per index by `resolve`.

    Attributes:
        scoring: "binary" or "weighted"; None: the index's variant.
        query_k: top dimensions kept per query bucket (Table 4); None: the encoder config's; 0: every one.
        query_selection: "value", or "value-idf" to rank query dims by value x idf before query_k.
        bucket_weights: one weight per bucket; None: the encoder config's.
        max_df: drop query dims active in more than this fraction of the documents (stop dimensions); None keeps
            them; "auto": 0.3 on indexes of 1,000 documents or more, none below, none with a bucket predictor or
            on indexes that say stop dimensions do not pay on them (impact planes).
        idf: weight the query dims by IDF (binary: 4-bit levels, exact; weighted: scaled query values).
        cascade: a `Cascade` (two passes, not exact); None: exact; "auto": on binary scoring over indexes of
            100,000 documents or more that can take it, 0.1:100 for plain counts and 0.1:300 length-normalized.
        length_norm: divide binary counts by the document's active dims ** alpha; None or 0: plain counts;
            "auto": 0.3 with plain binary scoring (not idf, not a bucket predictor) where the index supports it.
        bucket_predictor: a BucketWeightPredictor choosing each query's bucket weights; None: fixed weights.
        name: the run name; None: made from the options (`run_name`).

    Examples:
        >>> SearchOptions.parse({"max_df": "0.2", "cascade": "none"}) == SearchOptions(max_df=0.2, cascade=None)
        True
        >>> SearchOptions.paper().run_name("binary"), SearchOptions.default().run_name("binary")
        ('uhd-binary', 'uhd-binary-norm')
        >>> SearchOptions(max_df=2.0)
        Traceback (most recent call last):
        uhdsearch.errors.UsageError: max_df=2.0: give auto, none, or a fraction of the documents in (0, 1]
    """

    scoring: str | None = None
    query_k: int | None = None
    query_selection: str = "value"
    bucket_weights: tuple[float, ...] | None = None
    max_df: float | str | None = AUTO
    idf: bool = False
    cascade: Cascade | str | None = AUTO
    length_norm: float | str | None = AUTO
    bucket_predictor: Any = None
    name: str | None = None

    def __post_init__(self) -> None:
        for option in fields(self):
            value = getattr(self, option.name)
            checked = CHECKS[option.name](value)
            if checked is not value:
                object.__setattr__(self, option.name, checked)

    # ------------------------------------------------------------------ presets
    @classmethod
    def default(cls) -> SearchOptions:
        """What `uhdsearch search` and `serve` do: stop dimensions, length norm and cascade left "auto"."""
        return cls()

    @classmethod
    def paper(cls) -> SearchOptions:
        """The paper's score: plain counts (or weighted dot products), every query dimension, exact search."""
        return cls(max_df=None, cascade=None, length_norm=None)

    def replace(self, **changes: Any) -> SearchOptions:
        return replace(self, **changes)

    # ------------------------------------------------------------------ parsing
    @classmethod
    def parse(cls, values: Mapping[str, Any], base: SearchOptions | None = None,
              spell: Callable[[str, Any], str] = api_spelling) -> SearchOptions:
        """`base` (default: `default()`) with the options in `values` (strings as the CLI and HTTP give them, or
        already typed values) changed; a value of None leaves the option as it is in `base`.

        Raises:
            UsageError: an unknown option, or a value out of range; the message names the option as `spell` does.

        Examples:
            >>> SearchOptions.parse({"length_norm": "none", "query_k": "0"}).length_norm is None
            True
            >>> SearchOptions.parse({"max_df": "often"}, spell=cli_spelling)
            Traceback (most recent call last):
            uhdsearch.errors.UsageError: --max-df 'often': give auto, none, or a fraction of the documents in (0, 1]
        """
        changes = {}
        for option, value in values.items():
            if option not in PARSERS or option == "name":
                raise UsageError(f"unknown search option {option!r}; known: {', '.join(RANGES)}")
            if value is None:
                continue
            try:
                changes[option] = PARSERS[option](value)
            except UsageError as exc:
                raise UsageError(f"{spell(option, value)}: {reason(exc)}") from None
        return (base or cls()).replace(**changes)

    def to_json(self) -> dict:
        """The options as JSON values (a result file's record of how its runs were searched)."""
        out = {}
        for option in fields(self):
            value = getattr(self, option.name)
            if isinstance(value, Cascade):
                value = f"{value.first_max_df:g}:{value.depth}" + ("" if value.forward else ":probe")
            elif isinstance(value, tuple):
                value = list(value)
            elif option.name == "bucket_predictor" and value is not None:
                value = "given"
            out[option.name] = value
        return out

    # ------------------------------------------------------------------ naming
    def run_name(self, scoring: str) -> str:
        """The run's name: "uhd-<scoring>", "-idf", then each option given explicitly (-df, -ln, -cascade), and
        "-norm" when stop dimensions, length norm and cascade are all left "auto" (the defaults)."""
        if self.name:
            return self.name
        name = f"uhd-{scoring}" + ("-idf" if self.idf else "")
        if isinstance(self.max_df, float):
            name += f"-df{self.max_df:g}"
        if isinstance(self.length_norm, float) and self.length_norm:
            name += f"-ln{self.length_norm:g}"
        if isinstance(self.cascade, Cascade):
            name += f"-cascade{self.cascade.first_max_df:g}x{self.cascade.depth}"
        if (self.max_df, self.length_norm, self.cascade) == (AUTO, AUTO, AUTO) and self.bucket_predictor is None:
            name += DEFAULT_SUFFIX
        return name

    # ------------------------------------------------------------------ resolving
    def resolve(self, index, config=None) -> ResolvedOptions:
        """What a search over `index` uses: every "auto" decided, every combination checked against the index.

        `config` (an EncoderConfig) gives query_k and bucket_weights when these options leave them None.

        Raises:
            UsageError: a combination the index or the options cannot take (weighted scoring on a binary index, a
                cascade with weighted scoring, a bucket predictor with stop dimensions, ...).
        """
        scoring = self.scoring or index.variant
        if scoring not in SCORINGS:
            raise UsageError(f"scoring={scoring!r}; choose 'binary' or 'weighted'")
        if scoring == "weighted" and index.variant != "weighted":
            raise UsageError("weighted scoring needs a weighted index; build one with WeightedIndex")
        kernel_scoring = "quantized" if (self.idf and scoring == "binary") else scoring
        predictor = self.bucket_predictor
        max_df = self.max_df
        if max_df == AUTO:  # a bucket predictor's features saw every dim
            max_df = None if predictor is not None else auto_max_df(index.n_documents,
                                                                    index.stop_dimensions_by_default)
        length_norm = self.resolved_length_norm(index, kernel_scoring)
        cascade = self._cascade(index, kernel_scoring, length_norm)
        query_k = self.query_k if self.query_k is not None else (config.query_k if config is not None else None)
        if query_k is not None and query_k > index.dim:
            raise UsageError(f"query_k={query_k} must be at most the index's dim ({index.dim}), or 0 for all")
        weights = self.bucket_weights
        if weights is None:
            weights = tuple(config.weights) if config is not None else (1.0,) * index.n_buckets
        if len(weights) != index.n_buckets:
            raise UsageError(f"{len(weights)} bucket weights for {index.n_buckets} buckets")
        if predictor is not None:
            if predictor.n_buckets != index.n_buckets:
                raise UsageError(f"the bucket predictor weighs {predictor.n_buckets} buckets; the index has "
                                 f"{index.n_buckets}")
            if max_df is not None or self.idf:  # its features were computed on unweighted queries
                raise UsageError("a bucket predictor cannot be combined with max_df or idf query weighting")
            if predictor.scoring != scoring or kernel_scoring != scoring:
                raise UsageError(f"the bucket predictor was fitted for {predictor.scoring} scoring; this search "
                                 f"scores {kernel_scoring}")
        return ResolvedOptions(self, scoring, kernel_scoring, query_k or None, max_df, cascade, length_norm,
                               tuple(float(w) for w in weights), self.run_name(scoring))

    def resolved_length_norm(self, index, kernel_scoring: str) -> float:
        """The alpha this search passes to search_encoded over `index`."""
        supported = index.length_norm_supported
        if self.length_norm == AUTO:
            return auto_length_norm(kernel_scoring, supported, self.bucket_predictor is not None)
        if not self.length_norm:
            return 0.0
        if not supported:
            raise UsageError(f"{type(index).__name__} does not support length_norm (its dims are not the documents' "
                             "active dims); pass length_norm=None")
        check_length_norm(self.length_norm, kernel_scoring)
        if self.bucket_predictor is not None:
            raise UsageError("a bucket predictor was fitted on plain counts; it cannot be combined with length_norm")
        return float(self.length_norm)

    def _cascade(self, index, kernel_scoring: str, length_norm: float) -> Cascade | None:
        can = kernel_scoring != "weighted" and index.answers_overlap_counts and self.bucket_predictor is None
        if self.cascade == AUTO:
            return auto_cascade(index.n_documents, can, length_norm)
        if self.cascade is not None and self.bucket_predictor is not None:
            raise UsageError("a bucket predictor cannot be combined with the cascade (its weights differ per query)")
        if self.cascade is not None and not can:
            raise UsageError("the cascade needs binary scoring over a binary, weighted or segmented index (not "
                             "weighted scoring, impact planes or a bucket predictor); search exactly with cascade "
                             "none")
        return self.cascade


@dataclass(frozen=True)
class ResolvedOptions:
    """SearchOptions with every "auto" decided for one index; what the Searcher applies."""

    options: SearchOptions
    scoring: str  # binary or weighted
    kernel_scoring: str  # binary, weighted or quantized (binary with idf)
    query_k: int | None  # None: every active dim
    max_df: float | None
    cascade: Cascade | None
    length_norm: float
    bucket_weights: tuple[float, ...]
    name: str

    @property
    def idf(self) -> bool:
        return self.options.idf

    @property
    def bucket_predictor(self):
        return self.options.bucket_predictor

    @property
    def weighs_queries(self) -> bool:
        """Whether query dims are dropped or weighted by their document frequencies."""
        return self.max_df is not None or self.idf

    @property
    def needs_document_frequencies(self) -> bool:
        return self.weighs_queries or self.cascade is not None or self.options.query_selection == "value-idf"


# ---------------------------------------------------------------------- the "auto" rules
def auto_max_df(n_documents: int, stop_dimensions: bool = True) -> float | None:
    """max_df="auto": DEFAULT_MAX_DF on indexes of MIN_DOCUMENTS or more (search/stopdims.py says why), none on
    indexes that say stop dimensions do not pay on them (impact planes: SciFact train 0.8021 with every dim,
    0.7939 at 0.3)."""
    return DEFAULT_MAX_DF if stop_dimensions and n_documents >= MIN_DOCUMENTS else None


def auto_length_norm(kernel_scoring: str, supported: bool = True, bucket_predictor: bool = False) -> float:
    """length_norm="auto": LENGTH_NORM for plain binary counts where the index supports it, else 0."""
    return LENGTH_NORM if kernel_scoring == "binary" and supported and not bucket_predictor else 0.0


def auto_cascade(n_documents: int, can_cascade: bool, length_norm: float = 0.0) -> Cascade | None:
    """cascade="auto": on indexes of cascade.MIN_DOCUMENTS or more that can take it, Cascade() for plain counts
    and Cascade(*NORMALIZED) for length-normalized ones (benchmarks/experiments/cascade.py); else None (exact)."""
    if not can_cascade or n_documents < cascades.MIN_DOCUMENTS:
        return None
    return Cascade(*cascades.NORMALIZED) if length_norm else Cascade()



"""The values each search option takes: its range in words (RANGES), a check of typed values and a parser of
text (the CLI's flags, HTTP parameters), each raising a UsageError that says what to give."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from uhdsearch.errors import UsageError
from uhdsearch.index.base import MAX_LENGTH_NORM
from uhdsearch.search.cascade import Cascade
from uhdsearch.search.stopdims import AUTO

SCORINGS = ("binary", "weighted")
QUERY_SELECTIONS = ("value", "value-idf")  # value-idf: rank query dims by value x idf before query_k

# What each option takes, for error messages and `--help` texts: the one place its range is written down.
RANGES = {
    "scoring": "binary or weighted (default: the index's variant)",
    "query_k": "a whole number >= 0: top dimensions kept per query bucket; 0 keeps all (default: the model's)",
    "query_selection": "value or value-idf (rank the query's dims by value x idf before query_k)",
    "bucket_weights": "one finite number per bucket, comma-separated, e.g. 1,0.5 (default: the model's)",
    "max_df": "auto, none, or a fraction of the documents in (0, 1]",
    "idf": "true or false",
    "cascade": "auto, none (exact), or FIRST_MAX_DF:DEPTH[:probe], e.g. 0.1:100",
    "length_norm": f"auto, none, or a number in [0, {MAX_LENGTH_NORM:g}]",
    "bucket_predictor": "none, or a model directory holding bucket_predictor.json",
}


def api_spelling(option: str, value: Any) -> str:
    """How the HTTP app (and Python) names an option in an error: max_df='often'."""
    return f"{option}={value!r}"


def cli_spelling(option: str, value: Any) -> str:
    """How the CLI names an option in an error: --max-df 'often'."""
    return f"--{option.replace('_', '-')} {value!r}"


def reason(exc: UsageError) -> str:
    """The message without its "option=value: " prefix (the caller names the option as its front end spells it)."""
    text = str(exc)
    return text.split(": ", 1)[1] if text.startswith(("max_df=", "length_norm=", "query_k=")) and ": " in text \
        else text


def _choice(name: str, choices: Sequence[str], allow_none: bool = False):
    def check(value):
        if value is None and allow_none:
            return None
        if value not in choices:
            raise UsageError(f"{name}={value!r}: give {RANGES[name]}")
        return value
    return check


def _check_query_k(value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"query_k={value!r}: give {RANGES['query_k']}")
    return value


def _check_weights(value):
    if value is None:
        return None
    try:
        weights = tuple(float(w) for w in value)
    except (TypeError, ValueError):
        raise UsageError(f"bucket_weights={value!r}: give {RANGES['bucket_weights']}") from None
    if not weights or not all(math.isfinite(w) for w in weights):
        raise UsageError(f"bucket_weights={list(weights)} must be finite numbers, one per bucket")
    return weights if weights != value else value


def _check_max_df(value):
    if value is None or value == AUTO:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise UsageError(f"max_df={value!r}: give {RANGES['max_df']}")
    return float(value) if not isinstance(value, float) else value


def _check_idf(value):
    if not isinstance(value, bool):
        raise UsageError(f"idf={value!r}: give {RANGES['idf']}")
    return value


def _check_cascade(value):
    if value is None or value == AUTO or isinstance(value, Cascade):
        return value
    raise UsageError(f"cascade={value!r}; give a Cascade, None, or 'auto'")


def _check_length_norm(value):
    if value is None or value == AUTO:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_LENGTH_NORM:
        raise UsageError(f"length_norm={value!r}: give {RANGES['length_norm']}")
    return float(value) if not isinstance(value, float) else value


def _check_name(value):
    if value is not None and not isinstance(value, str):
        raise UsageError(f"name={value!r} must be a string")
    return value


CHECKS = {
    "scoring": _choice("scoring", SCORINGS, allow_none=True),
    "query_k": _check_query_k,
    "query_selection": _choice("query_selection", QUERY_SELECTIONS),
    "bucket_weights": _check_weights,
    "max_df": _check_max_df,
    "idf": _check_idf,
    "cascade": _check_cascade,
    "length_norm": _check_length_norm,
    "bucket_predictor": lambda value: value,
    "name": _check_name,
}


def _word(value) -> str | None:
    return value.strip().lower() if isinstance(value, str) else None


def _number(value, kind=float):
    if isinstance(value, str):
        try:
            return kind(value.strip())
        except ValueError:
            raise UsageError("not a number") from None
    return value


def _parse_auto_none(name: str, kind=float):
    def parse(value):
        word = _word(value)
        if word in (AUTO, "none"):
            return None if word == "none" else AUTO
        try:
            return CHECKS[name](_number(value, kind))
        except UsageError:
            raise UsageError(f"give {RANGES[name]}") from None
    return parse


def _parse_query_k(value):
    try:
        return _check_query_k(_number(value, int))
    except UsageError:
        raise UsageError(f"give {RANGES['query_k']}") from None


def _parse_weights(value):
    if isinstance(value, str):
        if not value.strip():
            return None
        value = value.split(",")
    try:
        return _check_weights(value)
    except UsageError:
        raise UsageError(f"give {RANGES['bucket_weights']}") from None


def _parse_idf(value):
    word = _word(value)
    if word is not None:
        if word not in ("true", "false", "yes", "no", "1", "0"):
            raise UsageError(f"give {RANGES['idf']}")
        return word in ("true", "yes", "1")
    return _check_idf(value)


def _parse_cascade(value):
    if isinstance(value, Cascade):
        return value
    text = str(value)
    word = text.strip().lower()
    if word in (AUTO, "none"):
        return None if word == "none" else AUTO
    parts = text.strip().split(":")
    probe = len(parts) == 3 and parts[2].strip().lower() == "probe"
    try:
        if len(parts) != 2 + probe:
            raise ValueError
        numbers = float(parts[0]), int(parts[1])
    except ValueError:
        raise UsageError(f"give {RANGES['cascade']}") from None
    return Cascade(*numbers, forward=not probe)


def _parse_predictor(value):
    if _word(value) == "none":
        return None
    if isinstance(value, str):
        from uhdsearch.search.bucket_predictor import BucketWeightPredictor

        return BucketWeightPredictor.load(value)
    return value


def _parse_choice(name: str, choices: Sequence[str]):
    def parse(value):
        word = _word(value)
        if word not in choices:
            raise UsageError(f"give {RANGES[name]}")
        return word
    return parse


PARSERS = {
    "scoring": _parse_choice("scoring", SCORINGS),
    "query_k": _parse_query_k,
    "query_selection": _parse_choice("query_selection", QUERY_SELECTIONS),
    "bucket_weights": _parse_weights,
    "max_df": _parse_auto_none("max_df"),
    "idf": _parse_idf,
    "cascade": _parse_cascade,
    "length_norm": _parse_auto_none("length_norm"),
    "bucket_predictor": _parse_predictor,
}

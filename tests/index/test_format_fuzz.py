"""A seeded slice of tests/hardening/fuzz_formats.py: damaged artifacts of every on-disk format, checksums re-computed,
end in a uhdsearch error or in results naming real documents; never a signal. The long run is the benchmark."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.hardening import fuzz_formats


CASES_PER_FORMAT = 45


@pytest.fixture(scope="module")
def formats(tmp_path_factory) -> tuple[dict[str, Path], Path]:
    work = tmp_path_factory.mktemp("fuzz")
    return fuzz_formats.write_formats(work / "bases"), work


def test_every_format_survives_a_seeded_slice_of_mutations(formats):
    bases, work = formats
    cases = fuzz_formats.make_cases(CASES_PER_FORMAT * len(fuzz_formats.FORMATS), fuzz_formats.FORMATS, seed=37)
    results = fuzz_formats.run_cases(cases, bases, work, batch=len(cases))
    assert len(results) == len(cases)
    findings = [r for r in results if r["outcome"] not in ("ok", "error")]
    assert findings == [], findings[:5]
    per_format = Counter((r["format"], r["outcome"]) for r in results)
    for name in fuzz_formats.FORMATS:  # the damage reached the loaders, and some cases still search
        assert per_format[name, "error"] > 0 and per_format[name, "ok"] > 0, per_format
    assert {r["detail"].split()[0] for r in results} == set(fuzz_formats.MUTATIONS)  # every kind of damage ran


def test_a_case_that_dies_by_a_signal_is_caught_and_named(formats):
    bases, work = formats
    cases = [(0, "binary", 1), (1, "_signal", 2), (2, "binary", 3)]
    results = fuzz_formats.run_cases(cases, bases, work)
    assert [(r["id"], r["outcome"]) for r in results][1] == (1, "crash")
    assert "exit -6" in results[1]["detail"]
    assert {r["id"] for r in results} == {0, 1, 2}  # the case after the crash ran in a new worker
    assert fuzz_formats.summary(results)["n_crashes"] == 1

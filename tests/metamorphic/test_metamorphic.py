"""The metamorphic sample in CI (issue 39 item 8): a fixed, seeded sample of the grid (grid.SAMPLE), each
variant replayed through the road ``stepwatch replay`` takes and held to its base's verdict (invariants.py).

A pair stepwatch gets wrong today is in grid.KNOWN with the issue item that will fix it, marked
``xfail(strict=True)``: when the fix lands it passes, the strict mark fails the run, and whoever merges
removes the entry. The whole grid: bench/metamorphic.py (BENCHMARKS.md, "Metamorphic grid").
"""

from __future__ import annotations

import pytest

from .grid import KNOWN, KNOWN_BASES, SAMPLE, VARIANTS, base, run


def _params():
    out = []
    for source, variant in SAMPLE:
        reason = KNOWN.get((source, variant))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(source, variant, id=f"{source}|{variant}", marks=marks))
    return out


@pytest.mark.parametrize("source,variant", _params())
def test_the_variant_keeps_the_verdict(source: str, variant: str):
    b = base(source)
    assert VARIANTS[variant].applies(b), f"{variant} does not apply to {source}: redraw the sample"
    outcome = run(source, variant)
    assert not outcome.broken, (f"{source} under {variant}: " + "; ".join(f"{k}: {v}" for k, v in outcome.broken.items())
                                + f"\n  base:    {outcome.base.describe()}\n  variant: {outcome.got.describe()}")


@pytest.mark.parametrize("source", [pytest.param(s, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_BASES[s])]
                                                 if s in KNOWN_BASES else []) for s in dict.fromkeys(s for s, _ in SAMPLE)])
def test_the_base_warns_before_every_critical_hang(source: str):
    assert not base(source).verdict.critical_first, f"{source}: a hang critical before any warning"


def test_the_sample_is_fixed_and_covers_every_family():
    families = {VARIANTS[v].family for _, v in SAMPLE}
    assert families == {v.family for v in VARIANTS.values()}
    generators = {s.split(":")[0] for s, _ in SAMPLE}
    assert generators >= {"library", "gen2", "gen3", "hand"}
    assert len(SAMPLE) == len(set(SAMPLE)) and all(pair in SAMPLE for pair in KNOWN)
    assert all(source in {s for s, _ in SAMPLE} for source in KNOWN_BASES)

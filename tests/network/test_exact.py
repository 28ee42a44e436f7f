"""Exact float sums as integers (network/exact.py) give what the Fractions they replaced gave, bit for bit."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from rackscale.network.exact import ONE, exact, to_float

EDGES = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.0, 0.1, 1e-300, 1.7976931348623157e308, -3.5]


def _random(rng: random.Random) -> float:
    if rng.random() < 0.2:
        return rng.choice(EDGES)
    return rng.uniform(-1.0, 1.0) * 10.0 ** rng.randint(-320, 300)


@pytest.mark.parametrize("x", EDGES)
def test_exact_is_the_float_times_two_to_the_1074(x: float) -> None:
    assert Fraction(exact(x), ONE) == Fraction(x)
    assert to_float(exact(x)) == x


@pytest.mark.parametrize("seed", range(5))
def test_sums_round_as_the_fractions_did(seed: int) -> None:
    """Running sums (adds and removes) convert to the very float the Fraction sum converts to."""
    rng = random.Random(seed)
    for _ in range(300):
        frac, whole = Fraction(0), 0
        for _ in range(rng.randint(1, 20)):
            x = _random(rng)
            sign = rng.choice((1, -1))
            frac += sign * Fraction(x)
            whole += sign * exact(x)
            assert Fraction(whole, ONE) == frac
            try:
                want = float(frac)
            except OverflowError:
                with pytest.raises(OverflowError):
                    to_float(whole)
                continue
            assert to_float(whole).hex() == want.hex()


@pytest.mark.parametrize("x", [math.inf, -math.inf, math.nan])
def test_a_non_finite_float_is_refused_as_fraction_refused_it(x: float) -> None:
    with pytest.raises((OverflowError, ValueError)):
        Fraction(x)
    with pytest.raises((OverflowError, ValueError)):
        exact(x)

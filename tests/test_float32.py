"""Exact binary32 constants, held to the seed's assertions and checked
against exact arithmetic independent of the algorithms."""

from __future__ import annotations

import struct
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from planner.model import float32 as f32


def is_nearest(word: int, square_of: Fraction) -> bool:
    """word is the binary32 nearest sqrt(square_of), decided by squaring the
    midpoints to its neighbours (positive finite words)."""
    v = f32.value(word)
    below = (f32.value(word - 1) + v) / 2 if word & 0x7FFFFF or word >> 23 else Fraction(0)
    above = (f32.value(word + 1) + v) / 2
    return below * below <= square_of <= above * above


def test_seed_assertions():
    assert f32.inverse_root(64) == 1040187392            # cgScoreScaleIsAPowerOfTwo
    words = f32.rotary_words(10000, 32)
    assert f32.NOT_ROUNDED not in words                  # cgRotaryThetasRounded
    assert words[0] + words[1] == f32.rational(1, 1)     # cgRotaryThetaColumnZero
    assert words[32] == f32.rational(1, 100)             # cgRotaryThetaHalfColumns


def test_nearest_agrees_with_hardware_conversion_of_exact_doubles():
    # a double with at most 24 significant bits converts exactly; one with
    # more is rounded once by numpy, correctly (round to nearest even)
    rng = np.random.default_rng(7)
    doubles = np.concatenate([rng.standard_normal(20000) * 10.0 ** rng.integers(-44, 38, 20000),
                              [1e-45, 2e-45, 1.5e-45, 3.4028235e38, 3.5e38, 1 / 3]])
    for d in doubles:
        with np.errstate(over="ignore"):
            expected = struct.unpack("<I", struct.pack("<f", np.float32(d)))[0]
        assert f32.nearest(Fraction(float(d))) == expected, d


@given(st.integers(0, 0x7F7FFFFE))
@settings(max_examples=3000, deadline=None)
def test_ties_go_to_even_and_words_are_fixed_points(word):
    assert f32.nearest(f32.value(word)) == word
    mid = (f32.value(word) + f32.value(word + 1)) / 2
    assert f32.nearest(mid) == (word if word % 2 == 0 else word + 1)
    tiny = Fraction(1, 2 ** 200)
    assert f32.nearest(mid - tiny) == word and f32.nearest(mid + tiny) == word + 1


def test_inverse_roots_exhaustively_up_to_4096():
    for n in range(1, 4097):
        assert is_nearest(f32.inverse_root(n), Fraction(1, n)), n


def test_rational_square_roots_round_exactly():
    # sqrt of a rational that lands exactly on a midpoint or a word
    for word in (0x3F800000, 0x3FC00000, 0x40490FDB):
        v = f32.value(word)
        assert f32.root(v * v) == word
    assert f32.root(Fraction(9, 4)) == f32.rational(3, 2)


@given(st.integers(0x00800000, 0x7F7FFFFE))
@settings(max_examples=300, deadline=None)
def test_square_roots_on_and_beside_a_midpoint(word):
    """sqrt(x) exactly between two words goes to the even one; a hair
    either side goes to that side: the brackets straddle the boundary until
    squaring decides, or they narrow past it."""
    mid = (f32.value(word) + f32.value(word + 1)) / 2
    even = word if word % 2 == 0 else word + 1
    assert f32.root(mid * mid) == even
    hair = mid * mid / 2 ** 120
    assert f32.root(mid * mid - hair) == word and f32.root(mid * mid + hair) == word + 1


def test_irrational_constants():
    import math
    for word, x in ((f32.sqrt_two_over_pi(), math.sqrt(2 / math.pi)), (f32.log2_e(), 1 / math.log(2)),
                    (f32.ln_2(), math.log(2)), (f32.inverse_two_pi(), 1 / (2 * math.pi))):
        assert word == struct.unpack("<I", struct.pack("<f", np.float32(x)))[0]
    high, low = f32.two_pi()
    assert f32.value(high) + f32.value(low) == pytest.approx(2 * math.pi, rel=1e-15)
    assert f32.ROUNDING_MAGIC == 0x4B400000


def test_rotary_words_are_nearest_exactly():
    base, columns = 10000, 32
    words = f32.rotary_words(base, columns)
    for i in range(columns):
        high, low = words[2 * i], words[2 * i + 1]
        # theta = base^(-i/columns) lies between the midpoints around high:
        # compare their columns-th powers with base^-i exactly
        v = f32.value(high)
        lo_mid = (f32.value(high - 1) + v) / 2
        hi_mid = (f32.value(high + 1) + v) / 2
        target = Fraction(1, base ** i)
        assert lo_mid ** columns <= target <= hi_mid ** columns, i
        assert abs(f32.value(low)) <= (hi_mid - v)


@pytest.mark.parametrize("step", [1, 2, 3, 10, 50])
def test_adam_constants_are_nearest_the_exact_values(step):
    lr, b1, b2, eps = Fraction(3, 10000), Fraction(9, 10), Fraction(95, 100), Fraction(1024, 10 ** 8)
    exact_step = lr * lr * (1 - b2 ** step) / (1 - b1 ** step) ** 2
    assert is_nearest(f32.adam_step_size(step, lr, b1, b2), exact_step)
    assert is_nearest(f32.adam_epsilon(step, eps, b2), eps * eps * (1 - b2 ** step))


def test_adam_constants_at_late_steps_are_computed_by_brackets():
    lr, b1, b2 = Fraction(3, 10000), Fraction(9, 10), Fraction(95, 100)
    assert f32.adam_step_size(10 ** 6, lr, b1, b2) == f32.nearest(lr)

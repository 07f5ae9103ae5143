"""Exact binary32 constants: the word nearest a real number, computed exactly.

Every constant the plan bakes into a launch is the binary32 nearest its exact
value (round to nearest, ties to even), computed with integers and
`Fraction`s, never with host floating point. Irrational values (sqrt(2/pi),
log2(e), ...) are bracketed by rationals; a constant is given only when both
ends of its bracket round to the same word, and the bracket is tightened
until they do.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from math import isqrt

MANTISSA = 23
BIAS = 127
# A word no rounding produces: a quiet NaN, the seed's float32NotRounded.
NOT_ROUNDED = 0x7FC00000


def _exponent(x: Fraction) -> int:
    """e with 2^e <= x < 2^(e+1), for x > 0."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    elif Fraction(2) ** (e + 1) <= x:
        e += 1
    return e


def nearest(x: Fraction) -> int:
    """The binary32 word nearest the rational x (ties to even; subnormals and
    overflow to infinity as IEEE 754 rounds them)."""
    x = Fraction(x)
    sign = 0x80000000 if x < 0 else 0
    x = abs(x)
    if x == 0:
        return sign
    e = max(_exponent(x), 1 - BIAS)          # subnormals share the least exponent
    scaled = x / Fraction(2) ** (e - MANTISSA)  # significand with 23 fraction bits
    m = scaled.numerator // scaled.denominator
    rest = scaled - m
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and m & 1):
        m += 1
    if m == 1 << (MANTISSA + 1):            # rounding carried into the next binade
        m >>= 1
        e += 1
    if e + BIAS >= 0xFF:
        return sign | 0x7F800000
    if m < 1 << MANTISSA:                   # subnormal
        return sign | m
    return sign | ((e + BIAS) << MANTISSA) | (m - (1 << MANTISSA))


def value(word: int) -> Fraction:
    """The exact value of a finite binary32 word."""
    sign = -1 if word & 0x80000000 else 1
    exponent = (word >> MANTISSA) & 0xFF
    fraction = word & ((1 << MANTISSA) - 1)
    if exponent == 0xFF:
        raise ValueError(f"word {word:#010x} is not finite")
    if exponent == 0:
        return sign * Fraction(fraction, 1 << (MANTISSA + BIAS - 1))
    return sign * Fraction((1 << MANTISSA) | fraction) * Fraction(2) ** (exponent - BIAS - MANTISSA)


def between(low: Fraction, high: Fraction) -> int:
    """The word every real in [low, high] rounds to, or NOT_ROUNDED."""
    a, b = nearest(low), nearest(high)
    return a if a == b else NOT_ROUNDED


def rational(numerator: int, denominator: int) -> int:
    """The seed's float32ExactRational."""
    return nearest(Fraction(numerator, denominator))


def _root_bracket(x: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """[lo, hi] of width 2^-bits relative scale around sqrt(x), x >= 0."""
    scale = 1 << bits
    n = x.numerator * scale * scale // x.denominator
    r = isqrt(n)
    return Fraction(r, scale), Fraction(r + 1, scale)


def root(x: Fraction) -> int:
    """The word nearest sqrt(x) for a rational x >= 0 (exact: ties are
    decided by squaring, so a rational square root rounds correctly too)."""
    x = Fraction(x)
    if x < 0:
        raise ValueError("square root of a negative number")
    if x == 0:
        return 0
    bits = 64 - min(0, _exponent(x) // 2)
    while True:
        lo, hi = _root_bracket(x, bits)
        word = between(lo, hi)
        if word != NOT_ROUNDED:
            return word
        # the bracket straddles a rounding boundary: is sqrt(x) exactly on it?
        candidate = nearest(lo)
        boundary = (value(candidate) + value(nearest(hi))) / 2
        if boundary * boundary == x:
            return nearest(boundary)
        bits *= 2


def inverse_root(n: Fraction | int) -> int:
    """The seed's float32ExactInverseRoot: the word nearest 1/sqrt(n)."""
    return root(1 / Fraction(n))


# ---- irrational constants, bracketed by rationals ----

@lru_cache(maxsize=None)
def _pi_bracket(digits: int) -> tuple[Fraction, Fraction]:
    """pi within 10^-digits by Machin's formula, 16*atan(1/5) - 4*atan(1/239),
    with the truncation error of each series bounded."""
    scale = 10 ** (digits + 10)

    def atan_inverse(x: int) -> int:   # atan(1/x) * scale, rounded down termwise
        total, power, n, sign = 0, scale // x, 1, 1
        while power:
            total += sign * (power // n)
            power //= x * x
            n += 2
            sign = -sign
        return total

    estimate = 16 * atan_inverse(5) - 4 * atan_inverse(239)
    slack = 1000  # termwise truncations, far fewer than 1000 terms, each < 1 unit
    return Fraction(estimate - slack, scale), Fraction(estimate + slack, scale)


@lru_cache(maxsize=None)
def _ln2_bracket(digits: int) -> tuple[Fraction, Fraction]:
    """ln 2 = sum 1/(k 2^k) within 10^-digits: the tail after n terms is below
    1/2^n."""
    n = int(digits * 3.33) + 8
    total = sum(Fraction(1, k * 2 ** k) for k in range(1, n + 1))
    return total, total + Fraction(1, 2 ** n)


def _bracketed(f) -> int:
    """Tighten the brackets until both ends round to one word."""
    digits = 30
    while True:
        word = between(*f(digits))
        if word != NOT_ROUNDED:
            return word
        digits *= 2


def _sqrt_bracket(lo: Fraction, hi: Fraction, bits: int = 96) -> tuple[Fraction, Fraction]:
    return _root_bracket(lo, bits)[0], _root_bracket(hi, bits)[1]


def sqrt_two_over_pi() -> int:
    return _bracketed(lambda d: _sqrt_bracket(2 / _pi_bracket(d)[1], 2 / _pi_bracket(d)[0], 4 * d))


def log2_e() -> int:
    return _bracketed(lambda d: (1 / _ln2_bracket(d)[1], 1 / _ln2_bracket(d)[0]))


def ln_2() -> int:
    return _bracketed(_ln2_bracket)


def inverse_two_pi() -> int:
    return _bracketed(lambda d: (1 / (2 * _pi_bracket(d)[1]), 1 / (2 * _pi_bracket(d)[0])))


def two_words(bracket) -> tuple[int, int]:
    """A real known by brackets as the word nearest it and the word nearest
    what that misses (the seed's high + low pairs)."""
    high = _bracketed(bracket)
    low = _bracketed(lambda d: tuple(b - value(high) for b in bracket(d)))
    return high, low


def two_pi() -> tuple[int, int]:
    return two_words(lambda d: (2 * _pi_bracket(d)[0], 2 * _pi_bracket(d)[1]))


# 1.5 x 2^23: added to a binary32 below 2^22, it leaves the nearest integer.
ROUNDING_MAGIC = rational(3 << 22, 1)


# ---- the rotary frequencies ----

def _integer_root(n: int, k: int) -> int:
    """floor(n^(1/k)) for integers n >= 0, k >= 1."""
    if n < 2:
        return n
    x = 1 << -(-n.bit_length() // k)          # an upper bound
    while True:
        y = ((k - 1) * x + n // x ** (k - 1)) // k
        if y >= x:
            break
        x = y
    while x ** k > n:
        x -= 1
    while (x + 1) ** k <= n:
        x += 1
    return x


def rotary_theta(base: int, columns: int, i: int, bits: int = 96) -> tuple[Fraction, Fraction]:
    """theta_i = base^(-i/columns) to `bits` bits: the largest r with
    r^columns base^i <= 2^(bits columns), so theta in [r, r+1] / 2^bits
    (exactly r / 2^bits when the power is exact, as column 0's is)."""
    whole = 1 << (bits * columns)
    r = _integer_root(whole // base ** i, columns)
    # floor division above can only lower r; step it up while it still fits
    while (r + 1) ** columns * base ** i <= whole:
        r += 1
    exact = r ** columns * base ** i == whole
    return Fraction(r, 1 << bits), Fraction(r + (0 if exact else 1), 1 << bits)


def rotary_words(base: int, columns: int) -> list[int]:
    """Every column's two words (high, low), in column order; an interval
    that does not round to one word leaves NOT_ROUNDED in the table."""
    words = []
    for i in range(columns):
        lo, hi = rotary_theta(base, columns, i)
        high = between(lo, hi)
        low = between(lo - value(high), hi - value(high)) if high != NOT_ROUNDED else NOT_ROUNDED
        words += [high, low]
    return words


# ---- AdamW's moment correction ----

def _power_bracket(base: Fraction, exponent: int, bits: int) -> tuple[Fraction, Fraction]:
    """[lo, hi] around base^exponent (0 <= base < 1) with dyadic ends of
    `bits` bits, by square-and-multiply with outward rounding."""
    scale = 1 << bits
    down = lambda f: Fraction(f.numerator * scale // f.denominator, scale)
    up = lambda f: Fraction(-(-f.numerator * scale // f.denominator), scale)
    lo = hi = Fraction(1)
    b_lo, b_hi = down(base), up(base)
    e = exponent
    while e:
        if e & 1:
            lo, hi = down(lo * b_lo), up(hi * b_hi)
        e >>= 1
        if e:
            b_lo, b_hi = down(b_lo * b_lo), up(b_hi * b_hi)
    return lo, min(hi, Fraction(1))


def _corrected(step: int, beta1: Fraction, beta2: Fraction, value_of) -> int:
    if step < 1:
        raise ValueError("the moment correction starts at step 1")
    bits = 128
    while True:
        p1, p2 = _power_bracket(beta1, step, bits), _power_bracket(beta2, step, bits)
        # the quantity is increasing in 1 - beta2^t and decreasing in 1 - beta1^t
        lo = value_of(1 - p1[0], 1 - p2[1])
        hi = value_of(1 - p1[1], 1 - p2[0])
        word = between(*_sqrt_bracket(lo, hi, bits))
        if word != NOT_ROUNDED:
            return word
        bits *= 2


def adam_step_size(step: int, learning_rate: Fraction, beta1: Fraction, beta2: Fraction) -> int:
    """lr sqrt(1 - beta2^t) / (1 - beta1^t), the moment-corrected step size."""
    return _corrected(step, beta1, beta2,
                      lambda c1, c2: learning_rate ** 2 * c2 / (c1 * c1) if c1 else Fraction(0))


def adam_epsilon(step: int, epsilon: Fraction, beta2: Fraction) -> int:
    """epsilon sqrt(1 - beta2^t): AdamW's epsilon moved inside the corrected
    update, so m / (sqrt(v) + this) needs no second correction."""
    return _corrected(step, Fraction(0), beta2, lambda c1, c2: epsilon ** 2 * c2)


def adam_words(learner, step: int) -> dict[str, int]:
    """The AdamW launch's per-step words for update `step` (counted from 1)
    under a learner configuration: the corrected step size, and epsilon in
    the loss-scaled gradients' units, corrected."""
    return {"step_size": adam_step_size(step, learner.learning_rate, learner.beta1, learner.beta2),
            "epsilon": adam_epsilon(step, learner.epsilon * learner.loss_scale, learner.beta2)}

"""Every kernel on the GPU against its CPU reference, at the default and the
small shape and for the bfloat16 cases.

Each case draws fresh random inputs (never zeros), poisons what the kernel
writes (all-ones bytes: NaN in binary32 and both half formats) and fences
every argument's extent with guard bytes, launches through the driver with
the parameter block as raw bytes, and checks: the relative error
||out - ref|| / ||ref|| within the precision's bound (or the exact bits, where
the kernel must reproduce them), no poisoned element left, the guards and
the read-only arguments untouched, and a second launch on the same inputs
giving the same bits. A table of the errors closes the module.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.kernels.manifest import POINTER, PRODUCT_FAMILIES, READ, Image
from planner.model.config import Shape
from planner.runtime.reference import (DTYPES, HALF, REFERENCES, by_head, float_to_half, half_to_float, reference,
                                       row_terms)
from planner.runtime.tensor_maps import launch_parameters
from tests.kernel_images import CASES

pytestmark = pytest.mark.gpu

GUARD = 256        # bytes fenced before and after every argument's extent
GUARD_BYTE = 0xA5
POISON_BYTE = 0xFF
PRODUCTS = PRODUCT_FAMILIES
TIMED_LAUNCHES = 20   # after the checked ones: the table's time (in-place kernels keep updating)
# the launches' scalars, as the plan derives them for the default learner
ATTENTION_SCALARS = {"stream_scale": math.log2(math.e) / 8, "score_scale": 1 / 8}
GELU_SCALARS = {"sqrt_two_over_pi": math.sqrt(2 / math.pi), "cubic": 0.044715, "half": 0.5, "one": 1.0,
                "cubic_slope": 3 * 0.044715}
ADAMW_SCALARS = {"beta1": 0.9, "one_minus_beta1": 0.1, "beta2": 0.95, "one_minus_beta2": 0.05,
                 "decay": 1 - 3e-4 * 0.1, "step_size": 3e-4, "epsilon": 1e-8}


# ---- inputs ----

def _normal(rng, n: int, scale: float = 1.0, mean: float = 0.0) -> np.ndarray:
    return (mean + scale * rng.standard_normal(n)).astype(np.float32)


def _halves(rng, n: int, half: str, scale: float = 1.0) -> np.ndarray:
    return float_to_half(_normal(rng, n, scale), half)


def _f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def _elements(shape: Shape, columns: int) -> int:
    """An elementwise launch's count: odd, and not a whole number of blocks."""
    return shape.tokens * columns + 37


def _tables(rng, seq: int) -> dict[str, np.ndarray]:
    angle = rng.uniform(-math.pi, math.pi, 32 * seq)
    return {"cosine": _f32(np.cos(angle)), "sine": _f32(np.sin(angle))}


def _attention_inputs(c, rng) -> dict[str, np.ndarray]:
    """Q, K, V and dO of the heads' layouts, with the forward's output and
    log-sum-exp, the row terms and the rotary tables, as the backward
    launches read them."""
    b, s, h, kv, half = c["batch"], c["seq"], c["heads"], c["kv_heads"], c["half"]
    x = {"q": _halves(rng, b * h * s * 64, half), "k": _halves(rng, b * kv * s * 64, half),
         "v": _halves(rng, b * kv * s * 64, half), "d_out": _halves(rng, b * h * s * 64, half)}
    forward = reference("attention-forward", c, x, ATTENTION_SCALARS)
    x["out"], x["log_sum_exp"] = float_to_half(_f32(forward["out"]), half), _f32(forward["log_sum_exp"])
    # the row terms as the context gradient's product forms them, from
    # d_out's halves and the output's
    out = by_head(c, half_to_float(x["out"], half))
    x["row_terms"] = _f32(row_terms(half_to_float(x["d_out"], half).reshape(b, h, s, 64), out).reshape(-1))
    return x | _tables(rng, s)


def inputs(img: Image, shape: Shape, rng) -> tuple[dict[str, np.ndarray], dict[str, float | int]]:
    """The arrays the kernel reads (in their device representation) and the
    launch's scalars."""
    c, f = img.constant_map, img.family
    half = c.get("half", "binary16")
    if f == "random-normal":
        return {}, {"seed": int(rng.integers(2**32)), "counter": 2**32 - 1000, "scale": 0.02 / 256,
                    "elements": _elements(shape, shape.width)}
    if f == "rotary-table":  # column 0: theta 1, the largest angles
        two_pi = np.float32(2 * math.pi)
        return {}, {"theta_high": 1.0, "theta_low": 0.0, "inverse_two_pi": 1 / (2 * math.pi),
                    "two_pi_high": float(two_pi), "two_pi_low": 2 * math.pi - float(two_pi),
                    "rounding_magic": 1.5 * 2**23}
    if f in ("fill", "copy", "cast-down", "add"):
        n = _elements(shape, shape.width)
        arrays = {"copy": {"in": _normal(rng, n)}, "cast-down": {"in": _normal(rng, n, 4.0)},
                  "add": {"left": _normal(rng, n), "right": _normal(rng, n)}}.get(f, {})
        return arrays, {"elements": n} | ({"value": float(rng.standard_normal())} if f == "fill" else {})
    if f == "argmax":  # the maximum twice: the first wins
        x = _normal(rng, c["vocab"])
        first, second = sorted(rng.choice(c["vocab"], 2, replace=False))
        x[first] = x[second] = x.max() + 1
        return {"in": x}, {}
    if f == "gather":
        return {"ids": rng.integers(0, c["vocab"], c["rows"], dtype=np.int32),
                "table": _normal(rng, c["vocab"] * c["width"])}, {}
    if f == "layernorm-parameters":
        return {"partials": _normal(rng, c["parts"] * 2 * c["width"], 8.0)}, {}
    if f.startswith("layernorm-"):
        n, w = c["rows"] * c["width"], c["width"]
        scalars = {"inverse_width": 1 / w, "epsilon": 1e-5}
        x = {"in": _normal(rng, n, 2.0, 0.5), "gamma": _normal(rng, w, 0.1, 1.0), "beta": _normal(rng, w, 0.1)}
        if f == "layernorm-forward":
            return x, scalars
        stats = _f32(reference("layernorm-forward", c, x, scalars)["statistics"])
        residual = {"residual": _normal(rng, n)} if f == "layernorm-backward-add" else {}
        return {"x": x["in"], "dy": _halves(rng, n, half), "gamma": x["gamma"], "statistics": stats} | residual, scalars
    if f.startswith("attention-"):
        return _attention_inputs(c, rng), ATTENTION_SCALARS
    if f in ("loss-target-gather", "cross-entropy", "cross-entropy-backward"):
        x = {"logits": _halves(rng, c["rows"] * c["vocab"], half, 2.0),
             "targets": rng.integers(0, c["vocab"], c["rows"], dtype=np.int32)}
        x["correct"] = _f32(reference("loss-target-gather", c, x, {})["correct"])
        return x, {"log2e": math.log2(math.e), "ln2": math.log(2), "gradient_scale": 1024 / c["rows"]}
    if f == "embedding-scatter":  # a few tokens, spread over the vocabulary, each at many positions
        tokens = rng.choice(c["vocab"], max(2, min(c["vocab"], c["rows"] // 8)), replace=False)
        return {"gradient": _normal(rng, c["vocab"] * c["width"], 0.1), "dy": _normal(rng, c["rows"] * c["width"]),
                "ids": tokens[rng.integers(0, len(tokens), c["rows"])].astype(np.int32)}, {}
    if f == "adamw":
        n = c["elements"]
        return {"parameters": _normal(rng, n, 0.02), "gradients": _normal(rng, n, 1e-3),
                "first_moments": _normal(rng, n, 1e-3), "second_moments": _f32(_normal(rng, n, 1e-3) ** 2)}, \
            ADAMW_SCALARS
    if f.startswith("gated-gelu-"):
        # both read (and the backward writes) whole rows side by side: an odd
        # number of them (at the default shape, not a whole number of blocks
        # either)
        n = (shape.tokens - 1) * c["ffn"]
        x = {"pair": _halves(rng, 2 * n, half, 2.0)}
        scalars = GELU_SCALARS | {"elements": n}
        if f == "gated-gelu-backward":
            x |= {"gated_gradient": _halves(rng, n, half)}
        return x, scalars
    if f in PRODUCTS:
        m, n, k = c["m"], c["n"], c["k"]
        x = {"a": _halves(rng, m * k, half), "b": _halves(rng, n * k, half)}
        if f == "tiled-rope":
            return x | _tables(rng, c["seq"]), {}
        if f == "tiled-heads":  # the forward's output, token-major, as C is
            return x | {"out": _halves(rng, m * n, half)}, {}
        return x | ({"r": _normal(rng, m * n)} if c["residual"] else {}), GELU_SCALARS if f == "tiled-gated" else {}
    raise AssertionError(f"no inputs for family {f}")


# ---- the launch ----

def run_once(driver, kernel, img: Image, bases: dict[str, int], bodies: dict[str, bytes],
             parameters: bytes, scalar_words: dict[str, int]) -> dict[str, bytes]:
    """Write every argument's fenced region, launch, and read them all back."""
    fence = bytes([GUARD_BYTE]) * GUARD
    for name, body in bodies.items():
        driver.copy_to_device(bases[name], fence + body + fence)
    driver.launch(kernel, img.grid(scalar_words), img.block, img.shared_bytes, parameters)
    driver.synchronize()
    return {name: bytes(driver.copy_to_host(bases[name], len(body) + 2 * GUARD)) for name, body in bodies.items()}


# ---- the comparison ----

def bound(img: Image, name: str, kind: str) -> float:
    """The relative error a precision allows."""
    bfloat16 = img.constant_map.get("half") == "bfloat16"
    if img.family.startswith("attention-"):   # P and dS rounded to the half format for the tensor cores
        return 4e-2 if bfloat16 else 1e-2
    if kind == HALF:                          # one rounding to the half format
        return 8e-3 if bfloat16 else 1e-3
    if img.family == "tiled-heads" and name == "row_terms":
        # sums of C's halves, each rounded from the kernel's binary32 sum
        # where the reference rounds a float64 one: now and then a half
        # lands on the other side of a rounding (in numpy, binary32 sums of
        # random operands against float64: 4e-5 of the terms' norm in
        # bfloat16 at the grouped shape, 1.3e-5 in binary16 at the default)
        return 1e-3 if bfloat16 else 1e-4
    if img.family in PRODUCTS:                # binary32 sums of exact products
        return 1e-4
    return 1e-5


def compare(img: Image, name: str, kind: str, got: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """(relative error, its bound); bit-exact outputs have bound 0."""
    if expected.dtype != np.float64:
        assert got.dtype == expected.dtype and got.shape == expected.shape
        mismatched = int(np.count_nonzero(got.view(np.uint8).reshape(got.size, -1)
                                          != expected.view(np.uint8).reshape(expected.size, -1)))
        return (0.0 if mismatched == 0 else float("inf")), 0.0
    values = half_to_float(got, img.constant_map["half"]) if kind == HALF else got.astype(np.float64)
    assert values.shape == expected.shape, f"{name}: {values.shape} against {expected.shape}"
    error = float(np.linalg.norm(values - expected) / np.linalg.norm(expected))
    return (error if math.isfinite(error) else float("inf")), bound(img, name, kind)


@pytest.fixture(scope="module")
def device():
    try:
        from planner.runtime import driver

        handle = driver.open_device()
    except Exception as error:  # no driver library, no device, no context
        pytest.skip(f"no CUDA device: {error}")
    yield driver, handle
    driver.close_device(handle)


@pytest.fixture(scope="module")
def table(request):
    rows: list[str] = []
    yield rows
    if rows:  # past the output capture, so that it shows in any run
        with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
            print(f"\n{'kernel case':48s} {'output':15s} {'rel. error':>10s} {'bound':>7s} {'same bits':>9s} "
                  f"{'us':>8s}")
            print("\n".join(rows))


@pytest.mark.parametrize("shape, img", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kernel_matches_its_reference(device, table, shape, img, request):
    from planner.runtime.nvrtc import compile_image

    driver, handle = device
    case = request.node.callspec.id
    seed = np.random.SeedSequence().entropy  # fresh inputs every run; named if the case fails
    rng = np.random.default_rng(seed)
    arrays, scalars = inputs(img, shape, rng)
    scalar_words = img.words(scalars)
    extents = img.extents(scalar_words)
    types = REFERENCES[img.family].types
    pointers = [a for a in img.arguments if a.kind == POINTER]
    bodies = {}
    for a in pointers:
        if a.access == "write":
            bodies[a.name] = bytes([POISON_BYTE]) * extents[a.name]
        else:
            data = np.ascontiguousarray(arrays[a.name], dtype=DTYPES[types[a.name]]).tobytes()
            assert len(data) == extents[a.name], f"{a.name}: {len(data)} bytes against the extent {extents[a.name]}"
            bodies[a.name] = data

    cubin = compile_image(img, handle.arch)
    kernel = driver.load_kernel(cubin, img.shared_bytes)
    bases = {name: driver.allocate(len(body) + 2 * GUARD) for name, body in bodies.items()}
    try:
        parameters = launch_parameters(img, img.parameter_block({name: base + GUARD for name, base in bases.items()},
                                                                scalar_words), cubin)
        first = run_once(driver, kernel, img, bases, bodies, parameters, scalar_words)
        second = run_once(driver, kernel, img, bases, bodies, parameters, scalar_words)
        seconds = driver.seconds_per_launch(kernel, img.grid(scalar_words), img.block, img.shared_bytes,
                                            parameters, TIMED_LAUNCHES)
    finally:
        for base in bases.values():
            driver.release(base)
        driver.unload_kernel(kernel)

    expected = reference(img.family, img.constant_map, arrays, scalars)
    failures = []
    written = [a for a in pointers if a.access != READ]
    for a in pointers:
        region = first[a.name]
        if region[:GUARD] != bytes([GUARD_BYTE]) * GUARD or region[-GUARD:] != bytes([GUARD_BYTE]) * GUARD:
            failures.append(f"{a.name}: a byte outside the extent changed")
        if a.access == READ and region[GUARD:-GUARD] != bodies[a.name]:
            failures.append(f"{a.name}: a read-only argument changed")
    deterministic = all(first[a.name] == second[a.name] for a in written)
    if not deterministic:
        failures.append("a second launch gave other bits")
    for a in written:
        kind = types[a.name]
        got = np.frombuffer(first[a.name][GUARD:-GUARD], dtype=DTYPES[kind])
        if a.access == "write":
            poisoned = int(np.count_nonzero(got.view(f"u{got.itemsize}") == np.iinfo(f"u{got.itemsize}").max))
            if poisoned:
                failures.append(f"{a.name}: {poisoned} elements never written")
        error, limit = compare(img, a.name, kind, got, expected[a.name])
        table.append(f"{case:48s} {a.name:15s} {error:10.2e} {limit:7.0e} {'yes' if deterministic else 'NO':>9s} "
                     f"{seconds * 1e6:8.1f}")
        if error > limit:
            failures.append(f"{a.name}: relative error {error:.3e} over {limit:.0e}")
    assert not failures, f"inputs seed {seed}: " + "; ".join(failures)


# static shared memory beside 48 KB of dynamic: together past what a block
# may take without asking (each thread sums its words of both)
SHARED_SUM = """
extern "C" __global__ void image(unsigned* out) {
  __shared__ unsigned fixed[64];
  extern __shared__ unsigned dynamic[];
  constexpr int WORDS = 48 * 1024 / 4;
  for (int i = threadIdx.x; i < WORDS; i += blockDim.x) dynamic[i] = 3u * i + 1u;
  if (threadIdx.x < 64) fixed[threadIdx.x] = 7u * threadIdx.x + 5u;
  __syncthreads();
  unsigned sum = fixed[threadIdx.x % 64];
  for (int i = threadIdx.x; i < WORDS; i += blockDim.x) sum += dynamic[i];
  out[threadIdx.x] = sum;
}
"""


def test_a_kernel_with_static_shared_memory_takes_48_kb_of_dynamic_beside_it(device):
    from planner.runtime.nvrtc import compile_source

    driver, handle = device
    threads, words = 256, 48 * 1024 // 4
    kernel = driver.load_kernel(compile_source(SHARED_SUM, "shared_sum.cu", [f"-arch={handle.arch}"]), 48 * 1024)
    out = driver.allocate(4 * threads)
    try:
        driver.copy_to_device(out, bytes([POISON_BYTE]) * 4 * threads)
        driver.launch(kernel, (1, 1, 1), threads, 48 * 1024, np.uint64(out).tobytes())
        driver.synchronize()
        got = np.frombuffer(driver.copy_to_host(out, 4 * threads), np.uint32)
    finally:
        driver.release(out)
        driver.unload_kernel(kernel)
    t = np.arange(threads, dtype=np.uint64)
    want = (7 * (t % 64) + 5 + sum(3 * (t + k) + 1 for k in range(0, words, threads))) % 2**32
    assert np.array_equal(got, want.astype(np.uint32))

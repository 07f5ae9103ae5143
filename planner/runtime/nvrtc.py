"""Device images compiled to cubins through NVRTC, with a cache on disk.

An image's CUDA source is a generated prelude (its constants) followed by its
family's `kernels/<source>.cu`, which includes the `kernels/*.cuh` headers
(NVRTC is handed all of them; it has no search path). The cubin is cached
under the SHA-256 of everything that decides it: the source, the headers, the
options, the architecture and the NVRTC version.

`cuda.bindings` is imported inside the functions that need it, so importing
planner never needs CUDA.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import cache
from importlib import resources
from pathlib import Path

from planner.files import written_whole
from planner.kernels.manifest import FAMILIES, STREAMING_ATTENTION, Image

# The streaming attention rounds its probabilities to the half format for the
# tensor cores, so approximate exponentials, logarithms and reciprocals cost it
# nothing; every other family keeps IEEE division, square root and the
# accurate transcendental functions (the references hold them to ~1e-6).
FAST_MATH = frozenset({"attention-forward", "attention-query", "attention-key", "attention-backward"})
CACHE_VARIABLE = "PLANNER_CACHE"


class CompileError(RuntimeError):
    """NVRTC refused an image; the message carries its log."""

    def reason(self) -> str:
        """The log's first error (what a person mends first), else the message's first line."""
        lines = str(self).splitlines()
        return next((line.strip() for line in lines[1:] if ": error" in line), lines[0])


def _macro(word: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", word).upper()


def prelude(img: Image) -> str:
    """The image's constants as C++: integers as `constexpr int` (and as the
    macro IMAGE_<NAME>, for what only the preprocessor can choose, such as
    whether a kernel carries an attribute), the half format as the macro
    HALF_BFLOAT16, the operand layouts as `constexpr bool` A_COLUMNS /
    B_COLUMNS; BLOCK, the manifest's block; the macro IMAGE_SHARED_BYTES,
    the dynamic shared memory the manifest gives a launch (a source that
    lays out its own there asserts that it fits, so that a manifest giving
    less is a compile error, not a launch writing past it; a macro, as a
    constant of its own put four bytes of data into every cubin); and
    IMAGE_FAMILY_<FAMILY> (a source several families share picks its
    parameter list by it)."""
    lines = [f"// image {img.name} of family {img.family}", f"#define IMAGE_FAMILY_{_macro(img.family)} 1",
             f"constexpr int BLOCK = {img.block};", f"#define IMAGE_SHARED_BYTES {img.shared_bytes}"]
    for name, value in img.constants:  # manifest.image took only words and ints the source knows
        if name == "half":
            lines.append(f"#define HALF_BFLOAT16 {int(value == 'bfloat16')}")
        elif name in ("a_layout", "b_layout"):
            lines.append(f"constexpr bool {name[0].upper()}_COLUMNS = {str(value == 'c').lower()};")
        else:
            lines += [f"constexpr int {_macro(name)} = {value};", f"#define IMAGE_{_macro(name)} {value}"]
    return "\n".join(lines) + "\n"


def _kernel_text(file: str) -> str:
    return resources.files("planner.kernels").joinpath(file).read_text(encoding="utf-8")


@cache
def headers() -> tuple[tuple[str, str], ...]:
    """(name, text) of every header the kernels may include."""
    names = sorted(f.name for f in resources.files("planner.kernels").iterdir() if f.name.endswith(".cuh"))
    return tuple((name, _kernel_text(name)) for name in names)


def source(img: Image) -> str:
    """The complete translation unit of an image (the header aside)."""
    file = FAMILIES[img.family].source_file
    return prelude(img) + f'#line 1 "{file}"\n' + _kernel_text(file)


def options(img: Image, arch: str) -> list[str]:
    """NVRTC's options: the architecture, C++17, device code by default, the
    manifest's register bound, and fast math where FAST_MATH allows it. An
    image with warpgroup products (a product's with WGMMA, the streaming
    attention's) is built for sm_90a on sm_90 (the Hopper instructions that
    are not carried forward)."""
    if not re.fullmatch(r"sm_\d{2,3}", arch):
        raise ValueError(f"architecture {arch!r} is not of the form sm_XX")
    warpgroups = img.constant_map.get("wgmma") or img.family in STREAMING_ATTENTION
    target = "sm_90a" if arch == "sm_90" and warpgroups else arch
    out = [f"-arch={target}", "-std=c++17", "-default-device", f"--maxrregcount={img.registers}"]
    if img.family in FAST_MATH:
        out.append("--use_fast_math")
    return out


PIN_VARIABLE = "PLANNER_NVRTC"


@cache
def _pin() -> None:
    """Load the NVRTC library $PLANNER_NVRTC names before cuda.bindings looks
    for one, so the cubins (and the certificate over them) come from a pinned
    compiler wherever planner runs."""
    path = os.environ.get(PIN_VARIABLE)
    if path:
        import ctypes
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as error:
            raise CompileError(f"${PIN_VARIABLE} = {path}: cannot be loaded ({error})") from None


@cache
def nvrtc_version() -> tuple[int, int]:
    _pin()
    from cuda.bindings import nvrtc

    return tuple(_checked("nvrtcVersion", *nvrtc.nvrtcVersion()))


def cache_directory() -> Path:
    """$PLANNER_CACHE, else planner/ under $XDG_CACHE_HOME or ~/.cache."""
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "planner"


def cache_key(img: Image, arch: str) -> str:
    digest = hashlib.sha256()
    parts = [source(img), *(name + "\0" + text for name, text in headers())]
    for part in (*parts, "\0".join(options(img, arch)), arch, repr(nvrtc_version())):
        digest.update(part.encode())
        digest.update(b"\0\1")
    return digest.hexdigest()


def compile_image(img: Image, arch: str) -> bytes:
    """The image's cubin for `arch` (e.g. "sm_90"), from the cache when present."""
    path = cache_directory() / "cubin" / f"{cache_key(img, arch)}.cubin"
    if path.is_file():
        return path.read_bytes()
    cubin = _compile(img, arch)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a concurrent reader sees the whole cubin or none
    with written_whole(path) as f:
        f.write(cubin)
    return cubin


def _checked(call: str, result, *values):
    """What an NVRTC call returned after its status (none, one value or a
    tuple), once the status says success."""
    from cuda.bindings import nvrtc

    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"{call} failed: {nvrtc.nvrtcGetErrorString(result)[1].decode()}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def compile_source(text: str, filename: str, flags: list[str], headers: tuple[tuple[str, str], ...] = (),
                   what: str = "") -> bytes:
    """A cubin from CUDA source through the pinned NVRTC; headers are (name,
    text) pairs (NVRTC has no search path). CompileError names `what` (the
    file by default) and carries the log."""
    _pin()
    from cuda.bindings import nvrtc

    program = _checked("nvrtcCreateProgram", *nvrtc.nvrtcCreateProgram(
        text.encode(), filename.encode(), len(headers),
        [body.encode() for _, body in headers], [name.encode() for name, _ in headers]))
    try:
        encoded = [f.encode() for f in flags]
        (result,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = _checked("nvrtcGetProgramLogSize", *nvrtc.nvrtcGetProgramLogSize(program))
            log = b" " * size
            _checked("nvrtcGetProgramLog", *nvrtc.nvrtcGetProgramLog(program, log))
            text = log.rstrip(b" \0").decode(errors="replace")
            raise CompileError(f"{what or filename} does not compile:\n{text}")
        size = _checked("nvrtcGetCUBINSize", *nvrtc.nvrtcGetCUBINSize(program))
        cubin = b" " * size
        _checked("nvrtcGetCUBIN", *nvrtc.nvrtcGetCUBIN(program, cubin))
        return cubin
    finally:
        _checked("nvrtcDestroyProgram", *nvrtc.nvrtcDestroyProgram(program))


def _compile(img: Image, arch: str) -> bytes:
    return compile_source(source(img), f"{img.name}.cu", options(img, arch), headers(), f"image {img.name} ({arch})")

"""The tensor maps a product fed by tensor copies takes on sm_90, encoded
from its relocated parameter block.

The certified parameter block holds the operands' pointers; a tensor map is
a second description of the same bytes (base, element counts, row stride)
that the tensor memory accelerator reads (or, for a C it stores, writes)
through, never past its bounds. The runtime encodes each map from the
pointer in the block and the manifest's `TensorMapSpec`, refusing one whose
bounds are not exactly the argument's extent, and places it where the cubin
declares the parameter: the launch then touches only what the certificate
covers.
"""

from __future__ import annotations

import struct

from planner.kernels.manifest import HALF_BYTES, POINTER, Image, TensorMapSpec, tensor_maps
from planner.runtime.cubin_info import kernel_info

MAP_BYTES = 128


def encode(spec: TensorMapSpec, address: int) -> bytes:
    """A CUtensorMap over the spec's elements (halves, whose two formats the
    copies move alike, or binary32) at `address`, 128-byte swizzled."""
    from cuda.bindings import driver as cu
    from planner.runtime.driver import call

    kind = {HALF_BYTES: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            4: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32}[spec.element]
    tensor_map = call("cuTensorMapEncodeTiled", kind, 2, address,
                      [cu.cuuint64_t(spec.inner), cu.cuuint64_t(spec.outer)],
                      [cu.cuuint64_t(spec.inner * spec.element)],
                      [cu.cuuint32_t(spec.box_inner), cu.cuuint32_t(spec.box_outer)],
                      [cu.cuuint32_t(1), cu.cuuint32_t(1)],
                      cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                      cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
                      cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    return b"".join(struct.pack("<Q", int(word)) for word in tensor_map.opaque)


def launch_parameters(img: Image, block: bytes, cubin: bytes, encoder=encode) -> bytes:
    """The bytes a launch of `img` passes: its parameter block, followed
    (where the cubin takes them) by the tensor maps of its operands (and of
    C, where tensor copies store it)."""
    specs = tensor_maps(img)
    taken = kernel_info(cubin).parameters[len(img.arguments):]
    if not taken:
        return bytes(block)
    if len(taken) != len(specs) or any(p.size != MAP_BYTES for p in taken):
        raise ValueError(f"image {img.name}: its cubin takes {len(taken)} parameters past the manifest's "
                         f"arguments, not its {len(specs)} tensor maps")
    extents = img.extents({})
    out = bytearray(taken[-1].offset + MAP_BYTES)
    out[:len(block)] = block
    for spec, parameter in zip(specs, taken):
        covered = spec.inner * spec.outer * spec.element
        if img.argument(spec.argument).kind != POINTER or covered != extents[spec.argument]:
            raise ValueError(f"image {img.name}: the tensor map over {spec.argument} is not its extent")
        (address,) = struct.unpack_from("<Q", block, img.offset(spec.argument))
        out[parameter.offset:parameter.offset + MAP_BYTES] = encoder(spec, address)
    return bytes(out)

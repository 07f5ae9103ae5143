"""Machine-code schedule certification: every register read in a cubin's SASS
waits for its producer (variable-latency results on their write barrier,
fixed-latency results for their latency) and no register a pending operation
still reads is overwritten before its read barrier clears.

``check_cubins(images, arch, cache_dir)`` checks each image's cubin and
answers a Report per image: "pass", "fail" (with findings naming the
instruction pair, register, path and cycles) or "unknown" (never a pass).
"""

from .check import Finding, KernelVerdict, Report, Unknown, check_cubin, check_cubins, fingerprint
from .latency import LatencyModel, default_model
from .mutate import Mutation, mutations

__all__ = [
    "Finding",
    "KernelVerdict",
    "LatencyModel",
    "Mutation",
    "Report",
    "Unknown",
    "check_cubin",
    "check_cubins",
    "default_model",
    "fingerprint",
    "mutations",
]

"""The CUDA driver API, the few calls planner needs, every status checked.

A failed call raises `DriverError` naming the call and the driver's error
name. Launches take the parameter block as the raw bytes the manifest lays
out (`cuLaunchKernel`'s `extra`: CU_LAUNCH_PARAM_BUFFER_POINTER, the buffer,
CU_LAUNCH_PARAM_BUFFER_SIZE, a pointer to its size, CU_LAUNCH_PARAM_END).

`cuda.bindings` is imported on first use, so importing planner never needs
CUDA.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

_BUFFER_POINTER, _BUFFER_SIZE, _END = 1, 2, 0


class DriverError(RuntimeError):
    """A driver call failed."""


def _driver():
    from cuda.bindings import driver

    return driver


def call(name: str, *args: Any) -> Any:
    """driver.<name>(*args), its status checked; its value(s), if any."""
    driver = _driver()
    result, *values = getattr(driver, name)(*args)
    if result != driver.CUresult.CUDA_SUCCESS:
        status, text = driver.cuGetErrorName(result)
        raise DriverError(f"{name} failed: {text.decode() if status == driver.CUresult.CUDA_SUCCESS else result}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@dataclass(frozen=True)
class Device:
    ordinal: int
    handle: Any
    context: Any
    arch: str  # e.g. "sm_90"
    name: str
    shared_limit: int  # the dynamic shared memory a block may opt in to


def open_device(ordinal: int = 0) -> Device:
    """Initialise the driver and make the device's primary context current."""
    driver = _driver()
    call("cuInit", 0)
    handle = call("cuDeviceGet", ordinal)
    attribute = driver.CUdevice_attribute
    major = call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle)
    minor = call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle)
    name = call("cuDeviceGetName", 256, handle).split(b"\0")[0].decode()
    shared = call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, handle)
    context = call("cuDevicePrimaryCtxRetain", handle)
    call("cuCtxSetCurrent", context)
    return Device(ordinal, handle, context, f"sm_{major}{minor}", name, shared)


def close_device(device: Device) -> None:
    call("cuCtxSynchronize")
    call("cuDevicePrimaryCtxRelease", device.handle)


@dataclass(frozen=True)
class Kernel:
    module: Any
    function: Any


def load_kernel(cubin: bytes, shared_bytes: int = 0, name: str = "image") -> Kernel:
    """Load a cubin and find its kernel; allow it `shared_bytes` of dynamic
    shared memory. Asked whenever it takes any: a block may take 48 KB of
    shared memory without asking, its static and dynamic bytes together, so
    a kernel with static shared memory is refused dynamic bytes under 48 KB
    that bring the sum past it (CUDA_ERROR_INVALID_VALUE at launch)."""
    module = call("cuModuleLoadData", cubin)
    function = call("cuModuleGetFunction", module, name.encode())
    if shared_bytes:
        attribute = _driver().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        call("cuFuncSetAttribute", function, attribute, shared_bytes)
    return Kernel(module, function)


def unload_kernel(kernel: Kernel) -> None:
    call("cuModuleUnload", kernel.module)


def allocate(size: int) -> int:
    """A device allocation of `size` bytes; its address."""
    return int(call("cuMemAlloc", size))


def release(address: int) -> None:
    call("cuMemFree", address)


def copy_to_device(address: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data).cast("B")
    call("cuMemcpyHtoD", address, view, view.nbytes)


def copy_to_host(address: int, size: int) -> bytearray:
    out = bytearray(size)
    call("cuMemcpyDtoH", out, address, size)
    return out


def launch(kernel: Kernel, grid: tuple[int, int, int], block: int, shared_bytes: int, parameters: bytes,
           stream: Any = 0) -> None:
    """Launch with the parameter block as raw bytes. The driver takes exactly
    the kernel's parameter bytes (to the end of its last parameter): a longer
    buffer is refused with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES."""
    buffer = ctypes.create_string_buffer(bytes(parameters), len(parameters))
    size = ctypes.c_size_t(len(parameters))
    extra = (ctypes.c_void_p * 5)(_BUFFER_POINTER, ctypes.addressof(buffer), _BUFFER_SIZE,
                                  ctypes.addressof(size), _END)
    call("cuLaunchKernel", kernel.function, *grid, block, 1, 1, shared_bytes, stream, None,
         ctypes.addressof(extra))


def synchronize() -> None:
    call("cuCtxSynchronize")


def seconds_per_launch(kernel: Kernel, grid: tuple[int, int, int], block: int, shared_bytes: int,
                       parameters: bytes, repeats: int) -> float:
    """The device time of one launch (see seconds_per_round)."""
    return seconds_per_round([(kernel, grid, block, shared_bytes, parameters)], repeats)


def seconds_per_round(launches: list[tuple[Kernel, tuple[int, int, int], int, int, bytes]], repeats: int) -> float:
    """The device time of one round of `launches` (kernel, grid, block, shared
    bytes, parameters): `repeats` rounds captured back to back as one graph
    (the gaps the plan's graphs have, not a Python loop's), replayed once to
    warm up and once between events."""
    flags = _driver().CUevent_flags.CU_EVENT_DEFAULT
    stream = call("cuStreamCreate", 0)
    start, stop = call("cuEventCreate", flags), call("cuEventCreate", flags)
    graph = executable = None
    try:
        call("cuStreamBeginCapture", stream, _driver().CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        for _ in range(repeats):
            for kernel, grid, block, shared_bytes, parameters in launches:
                launch(kernel, grid, block, shared_bytes, parameters, stream)
        graph = call("cuStreamEndCapture", stream)
        executable = call("cuGraphInstantiate", graph, 0)
        call("cuGraphLaunch", executable, stream)
        call("cuEventRecord", start, stream)
        call("cuGraphLaunch", executable, stream)
        call("cuEventRecord", stop, stream)
        call("cuEventSynchronize", stop)
        return call("cuEventElapsedTime", start, stop) / 1000 / repeats
    finally:
        if executable is not None:
            call("cuGraphExecDestroy", executable)
        if graph is not None:
            call("cuGraphDestroy", graph)
        call("cuEventDestroy", start)
        call("cuEventDestroy", stop)
        call("cuStreamDestroy", stream)

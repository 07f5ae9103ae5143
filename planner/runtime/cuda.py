"""The plan on an NVIDIA GPU: one device allocation for the arena, the
staging window in mapped pinned host memory, every image compiled and loaded
once, every pointer slot relocated to the real allocations (and the tensor
maps of the products fed by tensor copies encoded from them), submissions
issued on one stream (each as launches one after another, or replayed as a
CUDA graph built once from its launches and what each waits for).

Given a certificate, the device demands it before anything is allocated: a
plan whose digest it does not hold is refused, and so is a cubin whose
SHA-256 it does not list for this card. (The tests build devices without one
to check kernels and plans that are not the shipped ones.)
"""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass, field
from typing import Any

from planner.certify.proofs import Certificate, Uncertified
from planner.kernels.manifest import dependent_launch
from planner.runtime import driver
from planner.runtime.driver import call
from planner.runtime.nvrtc import compile_image
from planner.runtime.tensor_maps import launch_parameters
from planner.schedule.plan import Plan
from planner.schedule.urgency import ranks


class NoDevice(RuntimeError):
    """No CUDA driver or GPU to run on."""


def open_gpu(ordinal: int = 0) -> driver.Device:
    try:
        return driver.open_device(ordinal)
    except (driver.DriverError, RuntimeError, ImportError, OSError) as error:
        raise NoDevice(f"no NVIDIA GPU to run on ({error})") from None


@dataclass
class _Graph:
    graph: Any                            # kept: node handles belong to it
    exec: Any
    nodes: dict[int, Any]                 # launch index -> kernel node
    params: dict[int, Any] = field(default_factory=dict)


class CudaDevice:
    """A `Device` for the executor on the GPU."""

    def __init__(self, plan: Plan, gpu: driver.Device, graphs: bool = True,
                 certificate: Certificate | None = None):
        if certificate is not None:
            certificate.require(plan)
        self.plan, self.gpu, self.use_graphs = plan, gpu, graphs
        greedy = [img for img in plan.images if img.shared_bytes > gpu.shared_limit]
        if greedy:
            raise NoDevice(f"image {greedy[0].name} takes {greedy[0].shared_bytes:,} bytes of shared memory a block; "
                           f"the {gpu.name} offers {gpu.shared_limit:,} (the products' tiles were measured on "
                           f"another card: kernels/tiles.json, scripts/tile_sweep.py)")
        free, total = call("cuMemGetInfo")
        if plan.window["arena"].bytes > free:
            raise NoDevice(f"the plan's arena needs {plan.window['arena'].bytes:,} bytes; the {gpu.name} has "
                           f"{free:,} free of {total:,}")
        self.kernels, cubins = {}, {}
        for img in plan.images:
            cubin = compile_image(img, gpu.arch)
            digest = hashlib.sha256(cubin).hexdigest()
            if certificate is not None and certificate.cubins.get(f"{img.name}@{gpu.arch}") != digest:
                raise Uncertified(f"image {img.name}: its {gpu.arch} cubin {digest[:16]} is not one the certificate "
                                  f"attests")
            self.kernels[img.name] = driver.load_kernel(cubin, img.shared_bytes)
            cubins[img.name] = cubin
        arena, staging = plan.window["arena"], plan.window["staging"]
        self.arena = driver.allocate(arena.bytes)
        flags = 0x02 | 0x01   # CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE
        self.host = int(call("cuMemHostAlloc", staging.bytes, flags))
        self.staging = int(call("cuMemHostGetDevicePointer", self.host, 0))
        self.staging_bytes = staging.bytes
        self.bases = {"arena": self.arena, "staging": self.staging}
        self.stream = call("cuStreamCreate", 1)   # CU_STREAM_NON_BLOCKING
        self.dependent_launch = dependent_launch(gpu.arch)
        # the parameter blocks, relocated once (with the tensor maps encoded
        # from them where an image takes any); kept alive for the graphs
        self.blocks = [bytearray(launch_parameters(plan.image[l.image], l.parameter_block(plan.image[l.image],
                                                                                         self.bases),
                                                   cubins[l.image]))
                       for l in plan.launches]
        self.graphs: dict[int, _Graph] = {}

    # ---- the executor's Device ----

    def patch(self, launch: int, scalars: dict[str, int]) -> None:
        l = self.plan.launches[launch]
        img = self.plan.image[l.image]
        allowed = set(img.per_step)
        for name, word in scalars.items():
            if name not in allowed:
                raise RuntimeError(f"launch {launch} ({img.name}): scalar {name} is not one the host may change")
            offset = img.offset(name)
            self.blocks[launch][offset:offset + 4] = word.to_bytes(4, "little")
        for g in self.graphs.values():
            if launch in g.nodes:
                self._set_node(g, launch)

    def submit(self, submission: int) -> None:
        if not self.use_graphs:
            for index in self.plan.submissions[submission].launches():
                self._launch(index)
            return
        g = self.graphs.get(submission) or self._build_graph(submission)
        call("cuGraphLaunch", g.exec, self.stream)

    def wait(self) -> None:
        call("cuStreamSynchronize", self.stream)

    def write(self, window: str, start: int, data: bytes) -> None:
        self._check_staging(window, start, len(data))
        ctypes.memmove(self.host + start, data, len(data))

    def read(self, window: str, start: int, stop: int) -> bytes:
        self._check_staging(window, start, stop - start)
        return ctypes.string_at(self.host + start, stop - start)

    # ---- for tests and tools: the arena's bytes ----

    def read_arena(self, start: int, size: int) -> bytes:
        self.wait()
        return bytes(driver.copy_to_host(self.arena + start, size))

    def run_launches(self, indices) -> None:
        """Launches outside any submission (tests reading intermediate state)."""
        for index in indices:
            self._launch(index)

    def close(self) -> None:
        self.wait()
        for g in self.graphs.values():
            call("cuGraphExecDestroy", g.exec)
            call("cuGraphDestroy", g.graph)
        call("cuStreamDestroy", self.stream)
        driver.release(self.arena)
        call("cuMemFreeHost", self.host)
        for k in self.kernels.values():
            driver.unload_kernel(k)

    # ---- launching ----

    def _check_staging(self, window: str, start: int, size: int) -> None:
        if window != "staging" or start < 0 or start + size > self.staging_bytes:
            raise RuntimeError(f"host access [{start}, {start + size}) of {window} is outside the staging window")

    def _launch(self, index: int) -> None:
        l = self.plan.launches[index]
        img = self.plan.image[l.image]
        driver.launch(self.kernels[img.name], l.grid, l.block, img.shared_bytes, bytes(self.blocks[index]),
                      self.stream)

    def _node_params(self, g: _Graph, index: int):
        from cuda.bindings import driver as cu
        l = self.plan.launches[index]
        img = self.plan.image[l.image]
        block = self.blocks[index]
        buffer = ctypes.create_string_buffer(bytes(block), len(block))
        size = ctypes.c_size_t(len(block))
        extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), 0)
        g.params[index] = (buffer, size, extra)        # kept alive as long as the graph
        p = cu.CUDA_KERNEL_NODE_PARAMS()
        p.func = self.kernels[img.name].function
        p.gridDimX, p.gridDimY, p.gridDimZ = l.grid
        p.blockDimX, p.blockDimY, p.blockDimZ = l.block, 1, 1
        p.sharedMemBytes = img.shared_bytes
        p.kernelParams = 0
        p.extra = ctypes.addressof(extra)
        return p

    def _build_graph(self, submission: int) -> _Graph:
        """The submission's launches as one graph, instantiated once: each
        node after the launches its submission says it waits for, so the
        launches nothing orders run side by side. From sm_90 on the edges
        are programmatic: a launch may start while those before it drain,
        and its image waits for them before touching memory (the
        certificate holds every sm_90 image to that). Each node carries its
        launch's rank (urgency.ranks) as its priority, so launches on the
        longest path get the multiprocessors before those with slack."""
        from cuda.bindings import driver as cu
        graph = call("cuGraphCreate", 0)
        g = _Graph(graph, None, {})
        least, greatest = call("cuCtxGetStreamPriorityRange")
        rank = ranks(self.plan, submission, least - greatest + 1)
        for index, after in self.plan.submissions[submission].waits():
            node = call("cuGraphAddKernelNode", graph, [], 0, self._node_params(g, index))
            priority = cu.CUkernelNodeAttrValue()
            priority.priority = greatest + rank[index]
            call("cuGraphKernelNodeSetAttribute", node, cu.CUkernelNodeAttrID.CU_LAUNCH_ATTRIBUTE_PRIORITY,
                 priority)
            for a in after:
                self._link(graph, g.nodes[a], node)
            g.nodes[index] = node
        # without this flag a graph runs every node at its stream's priority
        g.exec = call("cuGraphInstantiate", graph,
                      int(cu.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY))
        self.graphs[submission] = g
        return g

    def _link(self, graph: Any, before: Any, after: Any) -> None:
        from cuda.bindings import driver as cu
        edge = cu.CUgraphEdgeData()
        if self.dependent_launch:
            edge.type = cu.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
            edge.from_port = cu.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
        # the edge-data form is cuGraphAddDependencies_v2 before CUDA 13
        add = "cuGraphAddDependencies_v2" if hasattr(cu, "cuGraphAddDependencies_v2") else "cuGraphAddDependencies"
        call(add, graph, [before], [after], [edge], 1)

    def _set_node(self, g: _Graph, index: int) -> None:
        call("cuGraphExecKernelNodeSetParams", g.exec, g.nodes[index], self._node_params(g, index))

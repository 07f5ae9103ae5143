"""Regenerate planner/certify/sass/latencies.json from ptxas's own schedules.

For each architecture, NVRTC compiles chains of dependent operations: every
ordered pair of a set of operation templates appears once (a de Bruijn
sequence), each step consuming the previous step's result, so the stalls
ptxas puts between a producer and its reader are what it requires.  Chains
start from a per-thread value (the vector datapath) and from a kernel
parameter (the uniform datapath), once overwriting each step's input and once
keeping it live.  Pattern kernels add what chains cannot provoke: unrolled
shared-memory loads, slow paths of division and square root, 64-bit row
offsets, tensor-core chains, cp.async pipelines, local arrays, a lane's
election, a warp's shared loads read behind its shuffles, a half C's
stores between the shuffles that pair its words, tensor-core sums spilled
as they are made.

Following one path from every producer to its first reader, this script
reads, per architecture:
  variable       opcodes whose result ptxas waits for on a write barrier
  fixed          W, the least stall cycles ptxas leaves before a reader of
                 the producer's result ("*"), and before a reader using it as
                 its guard predicate ("guard")
  readers        R, the cycles a reader takes a data operand late: a fixed
                 latency is W(producer) - R(reader)
  barrier_setup  least cycles between setting a barrier and a wait-mask wait
  depbar_setup   the same for DEPBAR
  in_order       opcodes whose unbarriered results ptxas lets a later
                 barriered operation of the class cover
  operand_order  opcodes that read their operands in issue order: ptxas lets
                 a later variable-latency operation of the class overwrite a
                 register an earlier one's read barrier protects, unwaited
                 (the later one writes it only after reading its own
                 operands, so after the earlier one has read its)

Every number is a least distance ptxas left, so the model never asks more
than ptxas does on this corpus.  W rests on adjacent readings (nothing but
filler between producer and reader, where the stalls are ptxas's
requirement); a producer with fewer is given the least W of any producer.

Usage (from the repository root): PYTHONPATH=. python scripts/sass_latencies.py [--out PATH] [--arch sm_86 ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from planner.certify.sass.disasm import Function, control_flow, disassemble, nvdisasm_version
from planner.certify.sass.latency import ANY, GUARD, consumer_key
from planner.kernels.manifest import ARCHS
from planner.runtime.nvrtc import compile_source, nvrtc_version

OUT = Path(__file__).resolve().parents[1] / "planner" / "certify" / "sass" / "latencies.json"
STEPS_PER_KERNEL = 240
SIGNATURE = 'extern "C" __global__ void {}(const unsigned* tab, unsigned* gtab, unsigned u, unsigned* out)'
PATH_LIMIT = 400  # instructions followed from a producer to its first reader
MIN_ADJACENT = 3  # adjacent readings a producer's latency rests on

# -- the operations ------------------------------------------------------------
# Each template turns the 32-bit value x into a new x.  F(...) wraps PTX that
# reads %1 (x) and writes %0; the others are plain CUDA.
PRELUDE = r"""
#define F(body) { unsigned y_; asm volatile("{\n" body "\n}" : "=r"(y_) : "r"(x)); x = y_; }
#define F32(body) F(".reg .f32 a, b; mov.b32 a, %1;\n" body "\nmov.b32 %0, b;")
__constant__ unsigned ctab[256];
"""

SCALAR = {
    "fadd": 'F32("add.f32 b, a, 0f3F800000;")',
    "fadd_self": 'F32("add.f32 b, a, a;")',
    "fmul": 'F32("mul.f32 b, a, 0f3F000001;")',
    "ffma": 'F32("fma.rn.f32 b, a, a, 0f3F800000;")',
    "fmax": 'F32("max.f32 b, a, 0f3F800000;")',
    "fsetp_sel": 'F(".reg .f32 a; .reg .pred p; mov.b32 a, %1; setp.lt.f32 p, a, 0f42C80000; selp.b32 %0, %1, 3, p;")',
    "fsetp_fsel": 'F32(".reg .pred p; setp.gt.f32 p, a, 0f3F800000; selp.f32 b, a, 0f40000000, p;")',
    "fsetp_guard": 'F32(".reg .pred p; setp.lt.f32 p, a, 0f42C80000; mov.f32 b, a; @p add.f32 b, a, 0f3F800000;")',
    "i2f": 'F32("cvt.rn.f32.s32 b, %1;")',
    "u2f": 'F32("cvt.rn.f32.u32 b, %1;")',
    "f2i": 'F(".reg .f32 a; mov.b32 a, %1; cvt.rzi.s32.f32 %0, a;")',
    "f2h_pack": 'F(".reg .f32 a; mov.b32 a, %1; cvt.rn.f16x2.f32 %0, a, a;")',
    "f2bf_pack": 'F(".reg .f32 a; mov.b32 a, %1; cvt.rn.bf16x2.f32 %0, a, a;")',
    "h2f": 'F(".reg .b16 h, l; .reg .f32 a; mov.b32 {h, l}, %1; cvt.f32.f16 a, h; mov.b32 %0, a;")',
    "f2h": 'F(".reg .b16 h; .reg .f32 a; mov.b32 a, %1; cvt.rn.f16.f32 h, a; cvt.u32.u16 %0, h;")',
    "hfma2": 'F("fma.rn.f16x2 %0, %1, %1, %1;")',
    "hmul2": 'F(".reg .b32 c; mov.b32 c, 0x3c003c01; mul.rn.f16x2 %0, %1, c;")',
    "hadd2": 'F("add.rn.f16x2 %0, %1, %1;")',
    "hmax2": 'F(".reg .b32 c; mov.b32 c, 0x3c003c00; max.f16x2 %0, %1, c;")',
    "bf16fma2": 'F("fma.rn.bf16x2 %0, %1, %1, %1;")',
    "hsetp2": 'F(".reg .pred p, q; .reg .b32 c; mov.b32 c, 0x3c003c00; setp.lt.f16x2 p|q, %1, c; '
              'selp.b32 %0, %1, 7, p;")',
    "ex2": 'F32("ex2.approx.ftz.f32 b, a;")',
    "rsqrt": 'F32("rsqrt.approx.ftz.f32 b, a;")',
    "rcp": 'F32("rcp.approx.ftz.f32 b, a;")',
    "sin": 'F32("sin.approx.ftz.f32 b, a;")',
    "lg2": 'F32("lg2.approx.ftz.f32 b, a;")',
    "tanh": 'F32("tanh.approx.f32 b, a;")',
    "sqrt": 'F32("sqrt.approx.ftz.f32 b, a;")',
    "iadd": 'F("add.u32 %0, %1, 7;")',
    "iadd_self": 'F("add.u32 %0, %1, %1;")',
    "isub": 'F("sub.u32 %0, 100, %1;")',
    "imad": 'F("mad.lo.u32 %0, %1, %1, 5;")',
    "imul": 'F("mul.lo.u32 %0, %1, 0x9e3779b9;")',
    "imad_hi": 'F("mul.hi.u32 %0, %1, 0x9e3779b9;")',
    "imad_wide_lo": 'F(".reg .b64 d; .reg .b32 l, h; mul.wide.u32 d, %1, 0x9e3779b9; mov.b64 {l, h}, d; '
                    'mov.b32 %0, l;")',
    "imad_wide_hi": 'F(".reg .b64 d; .reg .b32 l, h; mul.wide.u32 d, %1, 0x9e3779b9; mov.b64 {l, h}, d; '
                    'mov.b32 %0, h;")',
    "add64": 'F(".reg .b64 d; .reg .b32 l, h; cvt.u64.u32 d, %1; add.u64 d, d, 0x1fffffffff; mov.b64 {l, h}, d; '
             'xor.b32 %0, l, h;")',
    "lea": 'F(".reg .b32 t; shl.b32 t, %1, 2; add.u32 %0, t, %1;")',
    "lea_u": "x = (x << 2) + u;",
    "wide_hi": "{ unsigned long long c_ = ((unsigned long long)x << 32) | 0x1234u, "
               "d_ = c_ + (unsigned long long)u * 3u; x = (unsigned)(d_ >> 32) ^ (unsigned)d_; }",
    "mad_wide_sext": 'F(".reg .b64 c, d; .reg .b32 l, h; cvt.s64.s32 c, %1; mad.wide.u32 d, %1, 0x9e3779b9, c; '
                     'mov.b64 {l, h}, d; xor.b32 %0, l, h;")',
    "shl": 'F("shl.b32 %0, %1, 3;")',
    "shr": 'F("shr.u32 %0, %1, 5;")',
    "sar": 'F("shr.s32 %0, %1, 3;")',
    "shf": 'F("shf.l.wrap.b32 %0, %1, %1, 7;")',
    "lop3": 'F("lop3.b32 %0, %1, 0xff00ff, 0x12345, 0x96;")',
    "and": 'F("and.b32 %0, %1, 0x7ffffff;")',
    "xor_self": 'F(".reg .b32 t; shr.u32 t, %1, 1; xor.b32 %0, %1, t;")',
    "prmt": 'F("prmt.b32 %0, %1, 0x1234, 0x3210 + 0x0102;")',
    "bfe": 'F("bfe.u32 %0, %1, 3, 9;")',
    "bfi": 'F("bfi.b32 %0, %1, %1, 4, 7;")',
    "sext8": 'F("cvt.s32.s8 %0, %1;")',
    "imin": 'F("min.s32 %0, %1, 1000;")',
    "imax_u": 'F("max.u32 %0, %1, 77;")',
    "iabs": 'F("abs.s32 %0, %1;")',
    "isetp_sel": 'F(".reg .pred p; setp.lt.u32 p, %1, 100; selp.b32 %0, %1, 5, p;")',
    "isetp_guard": 'F(".reg .pred p; setp.ne.u32 p, %1, 100; mov.b32 %0, %1; @p add.u32 %0, %1, 3;")',
    "isetp_guard_mul": 'F(".reg .pred p; setp.gt.s32 p, %1, 9; mov.b32 %0, %1; @p mul.lo.u32 %0, %1, %1;")',
    "psetp_and": 'F(".reg .pred p, q, r; setp.lt.u32 p, %1, 100; setp.gt.u32 q, %1, 7; and.pred r, p, q; '
                 'selp.b32 %0, %1, 9, r;")',
    "carry": 'F(".reg .b32 t; add.cc.u32 t, %1, 0x80000001; addc.u32 %0, t, 0;")',
    "popc": 'F("popc.b32 %0, %1;")',
    "clz": 'F("clz.b32 %0, %1;")',
    "brev": 'F("brev.b32 %0, %1;")',
    "bfind": 'F("bfind.u32 %0, %1;")',
    "shfl": 'F("shfl.sync.bfly.b32 %0, %1, 1, 0x1f, 0xffffffff;")',
    "shfl_idx": 'F("shfl.sync.idx.b32 %0, %1, 0, 0x1f, 0xffffffff;")',
    "vote": 'F(".reg .pred p; setp.lt.u32 p, %1, 100; vote.sync.ballot.b32 %0, p, 0xffffffff;")',
    "match": 'F("match.any.sync.b32 %0, %1, 0xffffffff;")',
    "lds": "x = sm[x & 255];",
    "lds_imm": "x = sm[(x & 63) + 17] + 1;",
    "ldg": "x = tab[x & 1023];",
    "ldg_nc": "x = __ldg(&tab[(x & 255) + 64]);",
    "ldc": "x = ctab[x & 255];",
    "atom": "x = atomicAdd(&gtab[x & 255], x);",
    "atoms": "x = atomicAdd(&sm[x & 127], x);",
    "sts_lds": "sm[x & 127] = x; x = sm[(x + 1) & 127];",
    "stg_ldg": "gtab[x & 1023] = x; x = tab[(x + 3) & 1023];",
    "d_add": 'F(".reg .f64 d; .reg .b32 l, h; cvt.rn.f64.u32 d, %1; add.f64 d, d, d; mov.b64 {l, h}, d; '
             'xor.b32 %0, l, h;")',
    "d_chain": 'F(".reg .f64 d, e; .reg .b32 l, h; .reg .pred q; mov.b64 d, {%1, %1}; fma.rn.f64 e, d, d, d; '
               'mul.f64 e, e, d; add.f64 e, e, d; setp.lt.f64 q, e, d; selp.f64 e, e, d, q; mov.b64 {l, h}, e; '
               'xor.b32 %0, l, h;")',
    "f2d2f": 'F(".reg .f64 d; .reg .f32 a; mov.b32 a, %1; cvt.f64.f32 d, a; cvt.rn.f32.f64 a, d; mov.b32 %0, a;")',
    "d2i": 'F(".reg .f64 d; mov.b64 d, {%1, %1}; cvt.rzi.s32.f64 %0, d;")',
}

# Templates a uniform value (a kernel parameter) can run through.
UNIFORM = [
    "iadd", "iadd_self", "isub", "imad", "imul", "imad_hi", "imad_wide_lo", "imad_wide_hi", "add64", "lea", "lea_u",
    "mad_wide_sext", "shl",
    "shr", "sar", "shf", "lop3", "and", "xor_self", "prmt", "bfe", "sext8", "imin", "imax_u", "iabs", "isetp_sel",
    "isetp_guard", "psetp_and", "carry", "popc", "clz", "brev", "bfind", "fadd", "fmul", "ffma", "fsetp_sel", "i2f",
]
# Vector operations reading the uniform value x: v = op(v, x).
MIXERS = (
    "v = v + x;",
    "v = v * x + 3u;",
    "v = v ^ x;",
    "v = v << (x & 7);",
    "v = __float_as_uint(__uint_as_float(v) + __uint_as_float(x));",
    "v = __float_as_uint(fmaf(__uint_as_float(v), __uint_as_float(x), 1.0f));",
    "v = v < x ? v + 1u : v;",
    "v = tab[(v + x) & 1023];",
    "sm[(v + x) & 127] = x; v += sm[v & 127];",
    "v += sm[x & 127];",
)

# Code that chains cannot provoke.
PATTERNS = r"""
extern "C" __global__ void p_softmax(const float* x, float* y, int cols) {
  const float* row = x + (size_t)blockIdx.x * cols;
  float m = __int_as_float(0xff800000);
  for (int c = threadIdx.x; c < cols; c += 32) m = fmaxf(m, row[c]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += 32) s += __expf(row[c] - m);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  float inv = __frcp_rn(s), q = 1.f / (s + 1.f);
  for (int c = threadIdx.x; c < cols; c += 32) y[(size_t)blockIdx.x * cols + c] = __expf(row[c] - m) * inv + q;
}
extern "C" __global__ void p_shfl_exchange(const float* x, unsigned* y) {
  // more shuffles in flight than there are barriers (a product's epilogue
  // trading words between lanes)
  const unsigned lane = threadIdx.x & 31;
  unsigned a[16], r[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) a[i] = __float_as_uint(x[i * 32 + threadIdx.x]) ^ lane;
#pragma unroll
  for (int i = 0; i < 16; ++i) r[i] = __shfl_xor_sync(0xffffffffu, (lane & 1) ? a[i] : a[(i + 1) % 16], 1);
#pragma unroll
  for (int i = 0; i < 16; ++i) y[i * 32 + threadIdx.x] = (lane & 1) ? r[i] : a[i] + r[i];
}
extern "C" __global__ void p_norm(const float* x, const float* g, float* y, int cols, float eps) {
  __shared__ float red[32];
  const float* row = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c] * row[c];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  s = 0.f;
  for (int w = 0; w < (int)(blockDim.x >> 5); ++w) s += red[w];
  float r = rsqrtf(s / cols + eps), q = sqrtf(s) / (float)cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) y[(size_t)blockIdx.x * cols + c] = row[c] * r * g[c] + q;
}
extern "C" __global__ void p_elementwise(const float* x, const float* v, float* y, unsigned short* h, int n, float lr) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = v[i];
  float t = tanhf(0.79788456f * (a + 0.044715f * a * a * a));
  float s, c;
  sincosf(a * 0.01f + (float)i, &s, &c);
  float p = a - lr * (b / (sqrtf(b * b) + 1e-8f)) + 0.5f * a * (1.f + t) + s * c + logf(fabsf(b) + 1.f);
  y[i] = p;
  unsigned short hv;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(hv) : "f"(p));
  h[i] = hv;
}
extern "C" __global__ void p_integer(const int* a, const int* b, long long* q, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { int d = b[i] | 1; q[i] = (long long)(a[i] / d) * (a[i] % d) + (long long)a[i] * 3000000000ll / (d + 7); }
}
extern "C" __global__ void p_pairs(const float2* x, float2* y, int n) {
  float2 acc = make_float2(0.f, 0.f);
  double dacc = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float2 v = x[i];
    acc.x += v.x * v.y; acc.y += v.x; dacc += (double)v.x * 0.5;
  }
  y[blockIdx.x * blockDim.x + threadIdx.x] = make_float2(acc.x, acc.y + (float)dacc);
}
extern "C" __global__ void p_local(const int* idx, const float* x, float* y, int n) {
  float a[48];
#pragma unroll 1
  for (int k = 0; k < 48; ++k) a[k] = x[(blockIdx.x * 48 + k) % n];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { a[idx[i] % 48] += 1.f; y[i] = a[idx[i] % 48] + a[(idx[i] + 5) % 48]; }
}
extern "C" __global__ void p_pairs_rows(const float* x, float* y, int pos0, int dim) {
  // pairs of a row addressed with 64-bit offsets from a signed column
  int p = blockIdx.x + pos0, j = threadIdx.x;
  if (2 * j + 1 >= dim) return;
  float f = exp2f(-13.3f * (2.f * j) / dim) * p, s, c;
  __sincosf(f, &s, &c);
  float a = x[(size_t)blockIdx.x * dim + 2 * j], b = x[(size_t)blockIdx.x * dim + 2 * j + 1];
  y[(size_t)blockIdx.x * dim + 2 * j] = a * c - b * s;
  y[(size_t)blockIdx.x * dim + 2 * j + 1] = a * s + b * c;
}
extern "C" __global__ void p_select_pointer(unsigned short* __restrict__ a, unsigned short* __restrict__ b,
                                            const float* __restrict__ x, int split, int rows) {
  // one of two outputs chosen per element, then indexed by a signed column
  const int t = blockIdx.x, s = t % rows;
  for (int k = threadIdx.x; k < 16 * 32; k += blockDim.x) {
    const int head = k / 32, i = k % 32;
    float v = x[(size_t)t * 512 + head * 32 + i] * 0.5f;
    unsigned short* to = head < split ? a + ((size_t)(t / rows) * split + head) * rows * 64 + s * 64
                                      : b + ((size_t)(t / rows) * 8 + head - split) * rows * 64 + s * 64;
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    to[i] = h;
    to[i + 32] = h ^ 0x8000;
  }
}
extern "C" __global__ void p_modulo(const int* idx, const float* x, float* y, int n) {
  float a[24];
  for (int k = 0; k < 24; ++k) a[k] = x[(blockIdx.x * 24 + k) % n];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[idx[i] % 24] * a[(idx[i] + 7) % 24];
}
extern "C" __global__ void p_argmax(const float* x, int* out, int cols) {
  const float* row = x + (size_t)blockIdx.x * cols;
  float best = __int_as_float(0xff800000); int where = 0;
  for (int c = threadIdx.x; c < cols; c += 32) { float v = row[c]; if (v > best) { best = v; where = c; } }
  for (int o = 16; o > 0; o >>= 1) {
    float b = __shfl_xor_sync(0xffffffffu, best, o);
    int w = __shfl_xor_sync(0xffffffffu, where, o);
    if (b > best || (b == best && w < where)) { best = b; where = w; }
  }
  if (threadIdx.x == 0) out[blockIdx.x] = where + __popc(__ballot_sync(0xffffffffu, best > 0.f));
}
extern "C" __global__ void p_lds_burst(const float* x, float* y) {
  __shared__ float s[1024];
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) s[i] = x[blockIdx.x * 1024 + i];
  __syncthreads();
  float acc = 0.f;
#pragma unroll
  for (int k = 0; k < 32; ++k) acc = acc * 0.5f + s[(threadIdx.x + 33 * k) & 1023];
  y[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
extern "C" __global__ void p_lds_tile(const float* A, float* C, int K) {
  __shared__ float As[16][17];
  float acc = 0.f;
  for (int t = 0; t < K; t += 16) {
    As[threadIdx.y][threadIdx.x] = A[threadIdx.y * K + t + threadIdx.x];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 16; ++k) acc += As[threadIdx.y][k] * As[k][threadIdx.x];
    __syncthreads();
  }
  C[threadIdx.y * 16 + threadIdx.x] = acc;
}
extern "C" __global__ void p_bits(const unsigned* x, int* y, float* f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned v = x[i];
    y[i] = __popc(v) + __clz(v) + __ffs(v) + (int)__brev(v);
    f[i] = (float)(int)(v >> 5) * (float)__float2int_rz(__int_as_float(v & 0x3effffff));
  }
}
extern "C" __global__ void p_rows(const float* x, const unsigned* h, float* y, unsigned* z, int cols, int n) {
  // 64-bit row offsets, half pairs
  const float* row = x + (size_t)blockIdx.x * cols;
  float acc = 0.f;
  for (int c = threadIdx.x; c < cols; c += 32) acc += row[c] * row[(c + 7) % cols];
  y[(size_t)blockIdx.x * cols + threadIdx.x] = acc;
  for (int j = threadIdx.x; 2 * j < cols; j += 32) y[(size_t)blockIdx.y * cols + 2 * j] += row[2 * j + 1];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned v = h[i], w, p;
    asm("prmt.b32 %0, %1, %1, 0x5410;" : "=r"(p) : "r"(v));
    asm("fma.rn.f16x2 %0, %1, %2, %2;" : "=r"(w) : "r"(v), "r"(p));
    z[i] = w;
  }
}
extern "C" __global__ void p_uniform_loop(const float* x, float* y, int n, int reps, int d) {
  float acc = 0.f;
  for (int r = 0; r < reps; ++r)
    for (int k = 0; k < n; k += 4) acc += x[(k / d + (threadIdx.x & 3)) % n] * (float)(r + 1);
  y[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
extern "C" __global__ void p_guarded(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  if (v > 1.f) v = __expf(v) * 2.f; else if (v < -1.f) v = __logf(-v) + v; else v = v * v;
  y[i] = v;
}
#define MMA(type, d, a0, a1, a2, a3, b0, b1)                                                        \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." type "." type ".f32 "                         \
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                 \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                        \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
#define MMA_F16(g, a0, a1, b0)                                                                          \
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3}, {%4}, {%0,%1};"   \
               : "+r"(g[0]), "+r"(g[1]) : "r"(a0), "r"(a1), "r"(b0))
extern "C" __global__ void p_mma(const unsigned* A, float* C, int steps) {
  float d[4] = {}, e[4] = {};
  int lane = threadIdx.x & 31;
  unsigned a[4], b[2], h[2] = {};
  for (int i = 0; i < 4; ++i) a[i] = A[i * 32 + lane];
  for (int i = 0; i < 2; ++i) b[i] = A[(4 + i) * 32 + lane];
  for (int s = 0; s < steps; ++s) {
    MMA("f16", d, a[0], a[1], a[2], a[3], b[0], b[1]);
    MMA("bf16", e, a[0], a[1], a[2], a[3], b[0], b[1]);
    a[0] = __float_as_uint(d[0]); b[1] = __float_as_uint(e[3]);
  }
  for (int i = 0; i < 4; ++i) C[i * 32 + lane] = d[i] + e[i];
  MMA_F16(h, a[0], a[1], b[0]);
  C[128 + lane] = __uint_as_float(h[0] ^ h[1]);
}
extern "C" __global__ void p_mma_chain(const unsigned* A, float* C) {
  // each chain depends on the one before, so ptxas cannot interleave them
  float d[4] = {};
  int lane = threadIdx.x & 31;
  unsigned a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = A[i * 32 + lane];
  for (int i = 0; i < 2; ++i) b[i] = A[(4 + i) * 32 + lane];
#pragma unroll
  for (int s = 0; s < 4; ++s) MMA("f16", d, a[0], a[1], a[2], a[3], b[0], b[1]);
  unsigned h = __float_as_uint(d[0] * d[1]);
#pragma unroll
  for (int s = 0; s < 4; ++s) MMA("bf16", d, h, a[1], a[2], a[3], b[0], b[1]);
  unsigned g[2] = {__float_as_uint(d[2]), a[1]};
#pragma unroll
  for (int s = 0; s < 4; ++s) MMA_F16(g, g[0], a[1], b[0]);
  C[lane] = d[0] + d[3] + __uint_as_float(g[0] ^ g[1]);
}
extern "C" __global__ void p_ldsm(const unsigned* A, float* C) {
  __shared__ __align__(16) unsigned s[512];
  int lane = threadIdx.x & 31;
  for (int i = lane; i < 512; i += 32) s[i] = A[i];
  __syncwarp();
  unsigned a[4], b[2];
  unsigned p = (unsigned)__cvta_generic_to_shared(&s[lane * 4]);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(b[0]), "=r"(b[1]) : "r"(p + 256));
  float d[4] = {};
  MMA("f16", d, a[0], a[1], a[2], a[3], b[0], b[1]);
  for (int i = 0; i < 4; ++i) C[i * 32 + lane] = d[i];
}
extern "C" __global__ void p_cp_async(const float4* src, float4* dst, int tiles) {
  __shared__ __align__(16) float4 buf[2][128];
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int t = 0; t < tiles; ++t) {
    unsigned a = (unsigned)__cvta_generic_to_shared(&buf[t & 1][threadIdx.x]);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(a), "l"(src + t * 128 + threadIdx.x));
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group 1;");
    __syncthreads();
    float4 v = buf[(t + 1) & 1][(threadIdx.x + 1) & 127];
    acc.x += v.x; acc.w += v.w;
    __syncthreads();
  }
  dst[blockIdx.x * 128 + threadIdx.x] = acc;
}
extern "C" __global__ void p_uniform_ids(const float* x, float* y, int n) {
  // the block's indices as uniform values (S2UR), read after one another
  float v = 0.f;
  for (int k = 0; k < n; ++k) v += x[((blockIdx.z * 64 + blockIdx.y) * n + k) * 256 + threadIdx.x];
  y[blockIdx.x * 256 + threadIdx.x] = v;
}
#if __CUDA_ARCH__ >= 900
extern "C" __global__ void __cluster_dims__(1, 1, 2) p_cluster(const float* x, float* y) {
  // a cluster's second block's sums read by the first across the cluster;
  // the block's rank and its shared window are uniform values (S2UR)
  __shared__ float s[256];
  float v = x[blockIdx.z * 1024u + threadIdx.x];
  s[threadIdx.x] = v * 2.f;
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (blockIdx.z == 0) {
    unsigned remote;
    float w;
    asm volatile("mapa.shared::cluster.u32 %0, %1, 1;" : "=r"(remote) : "r"((unsigned)__cvta_generic_to_shared(s)));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(w) : "r"(remote + 4u * threadIdx.x));
    v += w;
  }
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (blockIdx.z == 0) y[threadIdx.x] = v;
}
extern "C" __global__ void p_elect(const float* x, float* y, unsigned m) {
  // a lane of the warp elected (ELECT, as ptxas picks the lane that issues a
  // bulk tensor copy), its predicate read at once, each election's mask
  // depending on the one before (the corpus is compiled, never run)
  unsigned mask = m;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    unsigned elected;
    asm volatile("{ .reg .pred p; elect.sync _|p, %1; selp.u32 %0, 1, 0, p; }" : "=r"(elected) : "r"(mask));
    mask = elected | m;
  }
  float v = x[threadIdx.x];
  unsigned elected;
  asm volatile("{ .reg .pred p; elect.sync _|p, %1; selp.u32 %0, 1, 0, p; }" : "=r"(elected) : "r"(mask));
  if (elected) v += x[32];
  y[threadIdx.x] = v + static_cast<float>(mask);
}
#endif
"""


def de_bruijn_pairs(count: int) -> list[int]:
    """A sequence over range(count) in which every ordered pair occurs once."""
    # Hierholzer on the complete digraph with loops: each node's out-edges
    # are taken in turn, and the circuit is read off in reverse.
    next_edge = [0] * count
    stack, circuit = [0], []
    while stack:
        node = stack[-1]
        if next_edge[node] < count:
            next_edge[node] += 1
            stack.append(next_edge[node] - 1)
        else:
            circuit.append(stack.pop())
    return circuit[::-1]


def chain_kernels(prefix: str, names: list[str], steps: dict[str, str], seed: str, keep: bool) -> list[str]:
    """Chains over every ordered pair of ``names``.  With ``keep`` each step's
    input stays live past it, so the result lands in another register (ptxas
    needs more cycles for some operations that overwrite their own source)."""
    order = de_bruijn_pairs(len(names))
    kernels = []
    for number, start in enumerate(range(0, len(order) - 1, STEPS_PER_KERNEL)):
        window = order[start : start + STEPS_PER_KERNEL + 1]  # overlap keeps boundary pairs
        wrap = "{{ unsigned k_ = x; {} acc ^= k_; }}" if keep else "{}"
        body = "\n    ".join(wrap.format(steps[names[i]]) for i in window)
        kernels.append(
            f"{SIGNATURE.format(f'{prefix}{number}')} {{\n"
            f"  __shared__ unsigned sm[256];\n  sm[threadIdx.x & 255] = threadIdx.x;\n  __syncthreads();\n"
            f"  unsigned x = {seed}, acc = 0;\n    {body}\n"
            f"  out[blockIdx.x * blockDim.x + threadIdx.x] = x ^ acc;\n}}\n"
        )
    return kernels


def mixer_kernels() -> list[str]:
    """Each uniform operation's result read by vector operations."""
    kernels = []
    for number, name in enumerate(UNIFORM):
        mixes = "\n  ".join(f"{SCALAR[name]}\n  {mix}" for mix in MIXERS)
        kernels.append(
            f"{SIGNATURE.format(f'm{number}')} {{\n"
            f"  __shared__ unsigned sm[256];\n  sm[threadIdx.x & 255] = u;\n  __syncthreads();\n"
            f"  unsigned x = u, v = tab[threadIdx.x];\n  {mixes}\n  out[threadIdx.x] = v;\n}}\n"
        )
    return kernels


def source() -> str:
    names = sorted(SCALAR)
    uniform = [name for name in names if name in UNIFORM]
    parts = [PRELUDE, PATTERNS]
    per_thread = "tab[blockIdx.x * blockDim.x + threadIdx.x]"
    parts += chain_kernels("c", names, SCALAR, per_thread, keep=False)
    parts += chain_kernels("k", names, SCALAR, per_thread, keep=True)
    parts += chain_kernels("u", uniform, SCALAR, "u", keep=False)
    parts += mixer_kernels()
    return "\n".join(parts)


# -- compiling -------------------------------------------------------------------


# Larger patterns kept in their own files, compiled as the images they stand
# for are (the attention with fast math, the rotary embedding with its
# register bound)
ATTENTION_PATTERN = Path(__file__).resolve().parent / "sass_pattern_attention.cu"
ROPE_PATTERN = Path(__file__).resolve().parent / "sass_pattern_rope.cu"
ROPE_OPTIONS = ["-std=c++17", "--maxrregcount=64"]
LAYERNORM_PATTERN = Path(__file__).resolve().parent / "sass_pattern_layernorm.cu"
LAYERNORM_OPTIONS = ["-std=c++17", "-default-device", "--maxrregcount=128"]
STORE_PATTERN = Path(__file__).resolve().parent / "sass_pattern_store.cu"
STORE_OPTIONS = ["-std=c++17"]
SPILL_PATTERN = Path(__file__).resolve().parent / "sass_pattern_spill.cu"


def compile_cubin(text: str, arch: str) -> bytes:
    return compile_source(text, "chains.cu", [f"-arch={arch}", "-diag-suppress=550"])


def corpus_functions(arch: str) -> dict[str, Function]:
    """Every chain and pattern kernel's code for `arch`."""
    attention = compile_source(ATTENTION_PATTERN.read_text(), ATTENTION_PATTERN.name,
                               [f"-arch={arch}", "-use_fast_math"])
    rope = compile_source(ROPE_PATTERN.read_text(), ROPE_PATTERN.name, [f"-arch={arch}", *ROPE_OPTIONS])
    norms = [compile_source(LAYERNORM_PATTERN.read_text(), LAYERNORM_PATTERN.name,
                            [f"-arch={arch}", f"-DLAYERNORM_ADD={add}", *LAYERNORM_OPTIONS]) for add in (0, 1)]
    store = compile_source(STORE_PATTERN.read_text(), STORE_PATTERN.name, [f"-arch={arch}", *STORE_OPTIONS])
    spill = compile_source(SPILL_PATTERN.read_text(), SPILL_PATTERN.name, [f"-arch={arch}", *STORE_OPTIONS])
    out = (disassemble(compile_cubin(source(), arch)) | disassemble(attention) | disassemble(rope)
           | disassemble(store) | disassemble(spill))
    for cubin in norms:
        out |= disassemble(cubin)
    return out


# -- reading the schedules ---------------------------------------------------------


@dataclass(frozen=True)
class Read:
    """The first read of a producer's result along one path."""

    producer: str  # opcode
    barrier: bool  # the producer set a write barrier
    consumer: str  # consumer key: the reader's base opcode, or GUARD
    distance: int  # stall cycles from the producer to the reader
    adjacent: bool  # nothing but filler in between: the stalls are ptxas's requirement
    predicate: bool  # the register read is a predicate
    waited: bool  # some instruction in between (or the reader) waits on a barrier
    covering: tuple[str, ...]  # later barriered producers whose barrier was waited on


@dataclass
class Observations:
    reads: list[Read]
    setup: int  # least cycles from setting a barrier to a wait-mask wait on it
    depbar_setup: int  # the same for DEPBAR.LE
    # (reader, overwriter): a register the reader's read barrier protects
    # written by the overwriter before any wait on that barrier
    overwrites: list[tuple[str, str]]


def observe(functions: dict[str, Function]) -> Observations:
    reads: list[Read] = []
    overwrites: list[tuple[str, str]] = []
    setup = {"mask": 99, "depbar": 99}
    for function in functions.values():
        flow = control_flow(function)
        code = function.instructions
        for index, producer in enumerate(code):
            if producer.never_executes or producer.base in ("CALL", "RET"):
                continue
            control = producer.control
            if control.write_barrier is not None or control.read_barrier is not None:
                distance, kind = _distance_to_wait(code, flow.leaders, index)
                setup[kind] = min(setup[kind], distance)
            if producer.writes:
                reads.extend(_reads_of(code, flow, index))
            if control.read_barrier is not None:
                overwrites.extend(_overwrites_of(code, flow, index))
    return Observations(reads, setup["mask"], setup["depbar"], overwrites)


def _path(code, flow, index: int):
    """The instructions after ``index`` along one path (fallthrough first),
    to a dead end, a loop back or PATH_LIMIT instructions."""
    at, seen = index, {index}
    while len(seen) < PATH_LIMIT:
        successors = flow.successors[at]
        if not successors:
            return
        at = at + 1 if at + 1 in successors else successors[0]
        if at in seen:
            return
        seen.add(at)
        yield at


def _overwrites_of(code, flow, index: int) -> list[tuple[str, str]]:
    """(reader, overwriter) opcodes along one path (fallthrough first): a
    later instruction writing a register the reader's read barrier protects,
    before any wait on that barrier (or on its write barrier: its result
    arriving means it has read its operands)."""
    reader = code[index]
    barriers = {b for b in (reader.control.read_barrier, reader.control.write_barrier) if b is not None}
    protected = {r for r in reader.reads if r.startswith("R") and r != reader.guard_register}
    found = []
    for at in _path(code, flow, index):
        later = code[at]
        if not protected or any(later.control.wait_mask >> b & 1 for b in barriers):
            break
        if later.never_executes or later.base == "CALL":
            continue
        written = protected & set(later.writes)
        if written:
            found.append((reader.opcode, later.opcode))
            protected -= written
    return found


def _reads_of(code, flow, index: int) -> list[Read]:
    """The first read of the producer's result along one path (fallthrough first)."""
    producer = code[index]
    live = set(producer.writes)
    distance, waited = 0, False
    issued, completed = [], []  # later barriered producers; those whose barrier was waited on
    adjacent = True  # nothing but filler passed so far
    before = index
    for at in _path(code, flow, index):
        if not live:
            break
        distance += code[before].control.stall
        before, consumer = at, code[at]
        mask = consumer.control.wait_mask
        waited = waited or bool(mask)
        completed += [op.opcode for op in issued if mask >> op.control.write_barrier & 1]
        executes = not consumer.never_executes and consumer.base != "CALL"
        read = live & consumer.reads if executes else set()
        if read:
            guard = consumer.guard_register
            keys = {(GUARD if r == guard else consumer_key(consumer.opcode), "P" in r) for r in read}
            barrier = producer.control.write_barrier is not None
            covering = tuple(completed)
            return [
                Read(producer.opcode, barrier, key, distance, adjacent, predicate, waited, covering)
                for key, predicate in keys
            ]
        adjacent = adjacent and _filler(consumer)
        if consumer.control.write_barrier is not None and consumer.writes:
            issued.append(consumer)
        if consumer.guard is None and executes:
            live -= consumer.writes
    return []


def _filler(instruction) -> bool:
    """An instruction ptxas adds only to spend cycles."""
    return instruction.never_executes or instruction.base == "NOP"


def _distance_to_wait(code, leaders, index: int) -> tuple[int, str]:
    """Stall cycles to the first wait on the instruction's barriers, and its kind."""
    control = code[index].control
    barriers = {b for b in (control.write_barrier, control.read_barrier) if b is not None}
    distance = 0
    for later in range(index + 1, len(code)):
        distance += code[later - 1].control.stall
        if later in leaders:
            break
        waiter = code[later]
        if any(waiter.control.wait_mask >> b & 1 for b in barriers):
            return distance, "mask"
        if waiter.base == "DEPBAR" and any(f"SB{b}" in waiter.operands for b in barriers):
            return distance, "depbar"
    return 99, "mask"


# -- the table ---------------------------------------------------------------------


def _base(opcode: str) -> str:
    return opcode.split(".", 1)[0]


def _row_key(opcode: str) -> str:
    """The producer key a reading counts for: the base opcode, except where a
    modifier selects another datapath (tensor-core shapes and types, the
    tensor-pipe HFMA2, the two-pass 64-bit IMAD)."""
    base = _base(opcode)
    if base in ("HMMA", "IMMA", "DMMA", "HGMMA"):
        return opcode
    for key in ("HFMA2.MMA", "IMAD.WIDE"):
        if opcode == key or opcode.startswith(key + "."):
            return key
    return base


def table(observations: Observations) -> dict:
    reads = observations.reads
    # A base opcode is variable when ptxas ever waits on a write barrier for
    # its result.  One of its variants is nonetheless fixed when a reader
    # took it with no wait at all (F2F.F16.F32 beside F2F.F64.F32).
    variable_bases = {_base(r.producer) for r in reads if r.barrier}
    fixed_variants = {r.producer for r in reads if not r.barrier and not r.waited}
    variable = {r.producer for r in reads if _base(r.producer) in variable_bases} - fixed_variants
    # Readings per row: the base opcode's, and each variant _row_key
    # distinguishes.  A base measured only through such variants (HMMA) also
    # gets a row from all of them: the fallback for variants never measured.
    readings = [r for r in reads if r.producer not in variable and not r.barrier]
    samples: dict[str, dict[str, list[Read]]] = defaultdict(lambda: defaultdict(list))
    for read in readings:
        samples[_row_key(read.producer)][read.consumer].append(read)
    late = _late_readers(samples)
    plain = {_base(r.producer) for r in readings if _row_key(r.producer) == _base(r.producer)}
    for read in readings:
        if _base(read.producer) not in plain:
            samples[_base(read.producer)][read.consumer].append(read)
    rows = {key: _row(row, late) for key, row in samples.items()}
    # A producer with too few adjacent readings has no distance known to be
    # ptxas's requirement: its readers may be as quick as any reader at all.
    floor = min(row[ANY] for row in rows.values() if row is not None)
    fixed = {key: row or {ANY: floor} for key, row in sorted(rows.items(), key=lambda kv: (kv[0].count("."), kv[0]))}
    has_fixed_variant = {_base(v) for v in fixed_variants}
    keys = {v if _base(v) in has_fixed_variant else _base(v) for v in variable}
    return {
        "barrier_setup": observations.setup,
        "depbar_setup": observations.depbar_setup,
        "variable": sorted(keys),
        "in_order": _in_order(reads, variable),
        "operand_order": _operand_order(observations.overwrites, variable),
        "fixed": fixed,
        "readers": late,
    }


# A fixed latency is modelled as W(producer) - R(reader): the cycles until the
# producer's result may be read, less the cycles a reader takes that operand
# late (zero but for a few readers).  No distance ptxas left in the corpus is
# below the model's.


def _row(row: dict[str, list[Read]], late: dict[str, int]) -> dict[str, int] | None:
    """A producer's W ("*"): the least distance of any operand reading plus
    the reader's R; and the least distance of any reading as a guard
    predicate ("guard").  None with fewer than MIN_ADJACENT adjacent readings."""
    if sum(r.adjacent for rs in row.values() for r in rs) < MIN_ADJACENT:
        return None
    operands = [r.distance + late.get(c, 0) for c, rs in row.items() if c != GUARD for r in rs]
    guards = [r.distance for r in row.get(GUARD, [])]
    entry = {ANY: min(operands or guards)}
    if guards and min(guards) != entry[ANY]:
        entry[GUARD] = min(guards)
    return entry


# Stores take the data they store late, all alike: a store is measured
# against the readers that are not stores, so that another store read as
# late (a spill beside a store to global memory, both 23 cycles after an
# HMMA that every other reader waits 24 for) does not hide it.
STORES = frozenset({"ST", "STG", "STL", "STS"})


def _store(reader: str) -> bool:
    return _base(reader) in STORES


def _late_readers(samples: dict[str, dict[str, list[Read]]]) -> dict[str, int]:
    """R: how much sooner than a producer's other readers ptxas has let a reader
    take a data register (not a predicate: some readers take predicates as
    early as a guard).  Only adjacent readings by other readers (distances
    known to be ptxas's requirement) count, so a loosely measured producer
    never makes a reader late; a store counts only readers that are not
    stores (STORES)."""
    late: dict[str, int] = {}
    for row in samples.values():
        for reader, readings in row.items():
            data = [r.distance for r in readings if not r.predicate]
            tight = [
                r.distance for c, rs in row.items()
                if c not in (reader, GUARD) and not (_store(reader) and _store(c)) for r in rs
                if r.adjacent and not r.predicate
            ]
            if reader == GUARD or not tight or not data:
                continue
            early = min(tight) - min(data)
            if early > late.get(reader, 0):
                late[reader] = early
    return dict(sorted(late.items()))


def _in_order(reads: list[Read], variable: set[str]) -> list[list[str]]:
    """Classes of opcodes whose results retire in issue order.

    An unbarriered variable result read once a later barriered operation's
    barrier was waited on relies on the two retiring in order.  When several
    later operations were waited on, one of the producer's own opcode
    explains it; otherwise only a single candidate opcode counts.
    """
    classes: list[set[str]] = []
    for read in reads:
        if read.producer not in variable or read.barrier or not read.covering:
            continue
        producer = _base(read.producer)
        candidates = {_base(c) for c in read.covering}
        if producer in candidates:
            pair = {producer}
        elif len(candidates) == 1:
            pair = {producer} | candidates
        else:
            continue
        joined = [c for c in classes if c & pair]
        classes = [c for c in classes if not c & pair] + [set().union(pair, *joined)]
    return sorted(sorted(c) for c in classes)


def _operand_order(overwrites: list[tuple[str, str]], variable: set[str]) -> list[list[str]]:
    """Classes of opcodes that read their operands in issue order: a
    variable-latency overwriter of a register an earlier operation's read
    barrier still protects joins the reader's class (an overwriter of fixed
    latency is no evidence: the model holds it to the barrier)."""
    classes: list[set[str]] = []
    for reader, overwriter in overwrites:
        if overwriter not in variable:
            continue
        pair = {_base(reader), _base(overwriter)}
        joined = [c for c in classes if c & pair]
        classes = [c for c in classes if not c & pair] + [set().union(pair, *joined)]
    return sorted(sorted(c) for c in classes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--arch", action="append", choices=ARCHS)
    args = parser.parse_args(argv)
    archs = {}
    for arch in args.arch or ARCHS:
        functions = corpus_functions(arch)
        entry = table(observe(functions))
        entry = {
            "provenance": {
                "compiler": f"NVRTC {'.'.join(map(str, nvrtc_version()))} (its built-in ptxas), -arch={arch}",
                "disassembler": nvdisasm_version(),
                "date": datetime.date.today().isoformat(),
                "method": f"least stall cycles ptxas leaves between producer and first reader, over the "
                f"{len(functions)} chain and pattern kernels of scripts/sass_latencies.py; latency = W - R",
            },
            **entry,
        }
        archs[arch] = entry
        print(f"{arch}: {len(entry['variable'])} variable, {len(entry['fixed'])} fixed producers", file=sys.stderr)
    args.out.write_text(_json({"format": 1, "archs": archs}) + "\n")
    return 0


def _json(value, depth: int = 0) -> str:
    """JSON with one line per producer row, list or provenance entry."""
    if isinstance(value, dict) and any(isinstance(v, dict) for v in value.values()):
        pad = " " * (depth + 1)
        items = ",\n".join(f"{pad}{json.dumps(k)}: {_json(v, depth + 1)}" for k, v in value.items())
        return "{\n" + items + "\n" + " " * depth + "}"
    return json.dumps(value)


if __name__ == "__main__":
    sys.exit(main())

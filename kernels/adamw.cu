// AdamW over the whole flat bank, four elements (a quad) a thread and a grid stride:
//   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2,
//   p = p decay - step_size m / (sqrt(v) + epsilon),
// then the half copy of p is written. The gradient is left as it is (the
// seed clears it): every update's backward writes each gradient before
// anything reads it. Every pointer is 16-byte aligned (halves 8-byte),
// ELEMENTS a multiple of 4.
#include "common.cuh"

static_assert(ELEMENTS % 4 == 0, "the bank is whole quads");

__device__ __forceinline__ float update(float& p, float g, float& m, float& v, float beta1, float one_minus_beta1,
                                        float beta2, float one_minus_beta2, float decay, float step_size,
                                        float epsilon) {
  m = beta1 * m + one_minus_beta1 * g;
  v = beta2 * v + one_minus_beta2 * g * g;
  p = p * decay - step_size * m / (sqrtf(v) + epsilon);
  return p;
}

// one quad of every array, read
struct Quad {
  float4 p, g, m, v;
};

__device__ __forceinline__ Quad load(const float* parameters, const float* gradients, const float* first_moments,
                                     const float* second_moments, int q) {
  return {reinterpret_cast<const float4*>(parameters)[q], reinterpret_cast<const float4*>(gradients)[q],
          reinterpret_cast<const float4*>(first_moments)[q], reinterpret_cast<const float4*>(second_moments)[q]};
}

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* __restrict__ parameters, const float* __restrict__ gradients, float* __restrict__ first_moments,
      float* __restrict__ second_moments, HALF* __restrict__ halves, float beta1, float one_minus_beta1, float beta2,
      float one_minus_beta2, float decay, float step_size, float epsilon) {
  await_previous_launch();
  // two quads a thread at a time, both read before either is written: twice
  // the bytes in flight a thread (the grid is a block a multiprocessor)
  const int stride = gridDim.x * BLOCK;
  for (int first = blockIdx.x * BLOCK + threadIdx.x; first < ELEMENTS / 4; first += 2 * stride) {
    Quad quads[2];
    const int count = first + stride < ELEMENTS / 4 ? 2 : 1;
#pragma unroll
    for (int k = 0; k < 2; ++k)
      if (k < count) quads[k] = load(parameters, gradients, first_moments, second_moments, first + k * stride);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (k == count) break;
      Quad& x = quads[k];
      const int q = first + k * stride;
      update(x.p.x, x.g.x, x.m.x, x.v.x, beta1, one_minus_beta1, beta2, one_minus_beta2, decay, step_size, epsilon);
      update(x.p.y, x.g.y, x.m.y, x.v.y, beta1, one_minus_beta1, beta2, one_minus_beta2, decay, step_size, epsilon);
      update(x.p.z, x.g.z, x.m.z, x.v.z, beta1, one_minus_beta1, beta2, one_minus_beta2, decay, step_size, epsilon);
      update(x.p.w, x.g.w, x.m.w, x.v.w, beta1, one_minus_beta1, beta2, one_minus_beta2, decay, step_size, epsilon);
      reinterpret_cast<float4*>(parameters)[q] = x.p;
      reinterpret_cast<float4*>(first_moments)[q] = x.m;
      reinterpret_cast<float4*>(second_moments)[q] = x.v;
      reinterpret_cast<uint2*>(halves)[q] = make_uint2(pack_halves(x.p.x, x.p.y), pack_halves(x.p.z, x.p.w));
    }
  }
}

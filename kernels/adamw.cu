// AdamW over the whole flat bank, four elements a thread and a grid stride:
//   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2,
//   p = p decay - step_size m / (sqrt(v) + epsilon),
// then the half copy of p is written and the gradient cleared. Every pointer
// is 16-byte aligned (halves 8-byte), ELEMENTS a multiple of 4.
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

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* __restrict__ parameters, float* __restrict__ gradients, float* __restrict__ first_moments,
      float* __restrict__ second_moments, HALF* __restrict__ halves, float beta1, float one_minus_beta1, float beta2,
      float one_minus_beta2, float decay, float step_size, float epsilon) {
  await_previous_launch();
  for (int q = blockIdx.x * BLOCK + threadIdx.x; q < ELEMENTS / 4; q += gridDim.x * BLOCK) {
    float4 p = reinterpret_cast<float4*>(parameters)[q];
    const float4 g = reinterpret_cast<const float4*>(gradients)[q];
    float4 m = reinterpret_cast<float4*>(first_moments)[q];
    float4 v = reinterpret_cast<float4*>(second_moments)[q];
    update(p.x, g.x, m.x, v.x, beta1, one_minus_beta1, beta2, one_minus_beta2, decay, step_size, epsilon);
    update(p.y, g.y, m.y, v.y, beta1, one_minus_beta1, beta2, one_minus_beta2, decay, step_size, epsilon);
    update(p.z, g.z, m.z, v.z, beta1, one_minus_beta1, beta2, one_minus_beta2, decay, step_size, epsilon);
    update(p.w, g.w, m.w, v.w, beta1, one_minus_beta1, beta2, one_minus_beta2, decay, step_size, epsilon);
    reinterpret_cast<float4*>(parameters)[q] = p;
    reinterpret_cast<float4*>(first_moments)[q] = m;
    reinterpret_cast<float4*>(second_moments)[q] = v;
    reinterpret_cast<float4*>(gradients)[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    reinterpret_cast<uint2*>(halves)[q] = make_uint2(pack_halves(p.x, p.y), pack_halves(p.z, p.w));
  }
}

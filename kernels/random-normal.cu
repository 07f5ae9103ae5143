// out[i] = scale x (the sum of 12 random bytes - 12 x 127.5): an Irwin-Hall
// approximation of a normal deviate (deviation sqrt(12 x (256^2 - 1) / 12),
// about 256, times scale). The 12 bytes are the 4 bytes of each of the hashes
// h(seed, counter + 3 i + j), j = 0, 1, 2, with 32-bit wrapping counters.
//
// h(seed, c) is the high word of SplitMix64's output for the 64-bit state
// (seed << 32 | c): z = state + 0x9e3779b97f4a7c15, then the finaliser
// z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9, z = (z ^ z >> 27) * 0x94d049bb133111eb,
// z ^ z >> 31. The finaliser is a bijection of the state, so distinct
// (seed, counter) pairs never share an input. The sum is an exact integer and
// its product with scale one rounding, so the result is bit-exact.
#include "common.cuh"

__device__ __forceinline__ unsigned random_word(unsigned seed, unsigned counter) {
  unsigned long long z = (static_cast<unsigned long long>(seed) << 32 | counter) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<unsigned>(z >> 32);
}

__device__ __forceinline__ int byte_sum(unsigned w) {
  return static_cast<int>((w & 0xffu) + (w >> 8 & 0xffu) + (w >> 16 & 0xffu) + (w >> 24));
}

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* __restrict__ out, unsigned seed, unsigned counter, float scale, unsigned elements) {
  await_previous_launch();
  const unsigned i = blockIdx.x * BLOCK + threadIdx.x;
  if (i >= elements) return;
  const unsigned c = counter + 3u * i;
  const int sum = byte_sum(random_word(seed, c)) + byte_sum(random_word(seed, c + 1u)) +
                  byte_sum(random_word(seed, c + 2u));
  out[i] = scale * static_cast<float>(sum - 1530);  // 1530 = 12 x 127.5
}

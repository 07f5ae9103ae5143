// correct[t] = logits[t][targets[t]] (the logits in the half format), a
// thread per row. A target outside the vocabulary is clamped to it, so no
// read leaves the row.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* __restrict__ correct, const HALF* __restrict__ logits, const int* __restrict__ targets) {
  await_previous_launch();
  const int t = blockIdx.x * BLOCK + threadIdx.x;
  if (t >= ROWS) return;
  const unsigned target = min(static_cast<unsigned>(targets[t]), static_cast<unsigned>(VOCAB - 1));
  correct[t] = to_float(logits[static_cast<size_t>(t) * VOCAB + target]);
}

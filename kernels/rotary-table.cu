// One column of the rotary tables: for each position s < SEQ, the angle
// s x theta (theta given in two words, high + low) reduced modulo 2 pi, and its
// cosine and sine. The product is kept in two words (its rounding error
// recovered with an fma), the reduction is Cody-Waite's with 2 pi in two
// words and the quotient rounded to an integer by adding and removing
// rounding_magic (1.5 x 2^23), so the reduced angle is accurate to about an
// ulp of pi and cos, sin (IEEE-accurate library calls) to a few ulp.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
image(float* __restrict__ cosine, float* __restrict__ sine, float theta_high, float theta_low,
      float inverse_two_pi, float two_pi_high, float two_pi_low, float rounding_magic) {
  await_previous_launch();
  const int s = blockIdx.x * BLOCK + threadIdx.x;
  if (s >= SEQ) return;
  const float position = static_cast<float>(s);  // exact: SEQ < 2^24
  const float high = __fmul_rn(position, theta_high);  // never contracted: its error is recovered below
  const float low = fmaf(position, theta_low, fmaf(position, theta_high, -high));
  const float turns = __fadd_rn(__fmaf_rn(high, inverse_two_pi, rounding_magic), -rounding_magic);
  const float reduced = fmaf(-turns, two_pi_low, fmaf(-turns, two_pi_high, high)) + low;
  float c, v;
  sincosf(reduced, &v, &c);
  cosine[s] = c;
  sine[s] = v;
}

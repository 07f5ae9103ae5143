// Does compute-sanitizer's initcheck count a store by the tensor memory
// accelerator as a write? A buffer fresh from cudaMalloc is written whole by
// one kind of store, then read by ordinary loads; run under
//   compute-sanitizer --tool initcheck ./initcheck_stores KIND
// (KIND: plain, bulk, tensor) a report of an uninitialized read can only mean
// that initcheck did not see that kind of store. The logits product stores
// its rows by tensor copies (cp.async.bulk.tensor), and the certificate's
// `defined` property proves them written before anything reads them.
// Build: nvcc -arch=sm_90a -o initcheck_stores initcheck_stores.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

constexpr int ROWS = 64, COLUMNS = 64, BLOCKS = 4, THREADS = 256;  // a block's box of 64 x 64 words
constexpr int WORDS = BLOCKS * ROWS * COLUMNS;

#define CHECK(call)                                                                \
  do {                                                                             \
    const int status = static_cast<int>(call);                                     \
    if (status != 0) {                                                             \
      std::fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #call, status); \
      return 2;                                                                    \
    }                                                                              \
  } while (0)

// the block's box, value = its index in the buffer, in shared memory
__device__ float* fill_box() {
  __shared__ alignas(128) float box[ROWS * COLUMNS];
  for (int i = threadIdx.x; i < ROWS * COLUMNS; i += blockDim.x) box[i] = blockIdx.x * ROWS * COLUMNS + i;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the box visible to the copy engine
  __syncthreads();
  return box;
}

__global__ void plain_store(float* out) {
  const float* box = fill_box();
  for (int i = threadIdx.x; i < ROWS * COLUMNS; i += blockDim.x) out[blockIdx.x * ROWS * COLUMNS + i] = box[i];
}

__global__ void bulk_store(float* out) {
  float* box = fill_box();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(out + blockIdx.x * ROWS * COLUMNS),
                 "r"(static_cast<unsigned>(__cvta_generic_to_shared(box))), "n"(ROWS * COLUMNS * 4)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

__global__ void tensor_store(const __grid_constant__ CUtensorMap map) {
  float* box = fill_box();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(&map), "r"(0),
                 "r"(blockIdx.x * ROWS), "r"(static_cast<unsigned>(__cvta_generic_to_shared(box)))
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

// every word read by an ordinary load; wrong[0] counts those not as written
__global__ void check(const float* in, int* wrong) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < WORDS; i += gridDim.x * blockDim.x)
    if (in[i] != static_cast<float>(i)) atomicAdd(wrong, 1);
}

int main(int argc, char** argv) {
  const char* kind = argc == 2 ? argv[1] : "";
  if (std::strcmp(kind, "plain") && std::strcmp(kind, "bulk") && std::strcmp(kind, "tensor")) {
    std::fprintf(stderr, "usage: %s plain|bulk|tensor\n", argv[0]);
    return 2;
  }
  float* buffer;
  int* wrong;
  CHECK(cudaMalloc(&buffer, WORDS * sizeof(float)));  // left uninitialized: only the store writes it
  CHECK(cudaMalloc(&wrong, sizeof(int)));
  CHECK(cudaMemset(wrong, 0, sizeof(int)));
  if (!std::strcmp(kind, "plain")) {
    plain_store<<<BLOCKS, THREADS>>>(buffer);
  } else if (!std::strcmp(kind, "bulk")) {
    bulk_store<<<BLOCKS, THREADS>>>(buffer);
  } else {
    CUtensorMap map;
    const cuuint64_t extent[2] = {COLUMNS, BLOCKS * ROWS}, stride[1] = {COLUMNS * sizeof(float)};
    const cuuint32_t box[2] = {COLUMNS, ROWS}, element_stride[2] = {1, 1};
    CHECK(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, buffer, extent, stride, box, element_stride,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                 CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    tensor_store<<<BLOCKS, THREADS>>>(map);
  }
  CHECK(cudaGetLastError());
  check<<<BLOCKS, THREADS>>>(buffer, wrong);
  CHECK(cudaGetLastError());
  int host_wrong = -1;
  CHECK(cudaMemcpy(&host_wrong, wrong, sizeof(int), cudaMemcpyDeviceToHost));
  std::printf("%s store: %d of %d words not as written\n", kind, host_wrong, WORDS);
  return host_wrong == 0 ? 0 : 1;
}

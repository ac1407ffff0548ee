/* kernel_util.h: small helpers shared by the kernel tests (test_kernels_*.c): a strided
 * tpu_buf_t view, a splitmix64 step for each test's own random stream, and FOR_EACH_ISA,
 * which runs a body once per vec.h table. */
#ifndef TPU_TESTS_KERNEL_UTIL_H
#define TPU_TESTS_KERNEL_UTIL_H

#include <stdint.h>
#include <string.h>

#include "tpu/kernels.h"
#include "vtpu/kernels/vec.h"

/* A view of |data|: |rank| dims with |strides| (elements). */
static inline tpu_buf_t kernel_view(void *data, tpu_dtype_t dt, int rank, const int64_t *dims,
                                    const int64_t *strides) {
  tpu_buf_t b = {.data = data, .dtype = dt, .rank = rank};
  memcpy(b.dims, dims, sizeof(int64_t) * (size_t)rank);
  memcpy(b.strides, strides, sizeof(int64_t) * (size_t)rank);
  return b;
}

/* The next value of the splitmix64 stream whose state is *|state|. */
static inline uint64_t kernel_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Runs the body (the arguments after |v|) once per vec.h table the CPU has, with that table
 * forced and bound to |v|; then lets the CPU choose again. */
#define FOR_EACH_ISA(v, ...)                                   \
  for (int isa_ = 0; isa_ < TPU_ISA_COUNT; isa_++) {           \
    const tpu_vec_ops_t *v = tpu_vec_ops_for((tpu_isa_t)isa_); \
    if (!v) continue;                                          \
    tpu_vec_ops_force(v);                                      \
    __VA_ARGS__;                                               \
  }                                                            \
  tpu_vec_ops_force(NULL)

#endif /* TPU_TESTS_KERNEL_UTIL_H */

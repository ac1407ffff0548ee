/* collective.h: reduction kernels of the collectives, and collectives across the chips of
 * one process (TORCHTPU_CHIPS=N), whose memory is all in this address space.
 *
 * The reductions combine whole buffers elementwise, dst = dst (op) src, for every dtype of
 * dtype.h. bf16/f16 are combined in f32 and rounded to nearest even once per step, as
 * PyTorch's CPU kernels do. AVG is SUM followed by tpu_coll_scale (integers: truncating
 * division, as NCCL); bitwise ops are for integers and bool only.
 */
#ifndef TPU_COLLECTIVE_H
#define TPU_COLLECTIVE_H

#include <stddef.h>

#include "tpu/dtype.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_coll_op {
  TPU_RED_SUM = 0,
  TPU_RED_AVG,
  TPU_RED_PRODUCT,
  TPU_RED_MIN,
  TPU_RED_MAX,
  TPU_RED_BAND,
  TPU_RED_BOR,
  TPU_RED_BXOR,
  TPU_RED_OP_COUNT
} tpu_coll_op_t;

/* "sum", "avg", ... ("?" when out of range). */
const char *tpu_coll_op_name(tpu_coll_op_t op);

/* Checks that |op| applies to |dtype| (bitwise ops need integers or bool); the message
 * names both. */
tpu_status_t tpu_coll_check(tpu_dtype_t dtype, tpu_coll_op_t op);

/* dst[i] = dst[i] (op) src[i] for i < n elements. AVG combines like SUM. The buffers may
 * not overlap. No-op on an invalid (dtype, op): call tpu_coll_check first. */
void tpu_coll_reduce(tpu_dtype_t dtype, tpu_coll_op_t op, void *dst, const void *src,
                     size_t n);

/* dst[i] /= divisor (the second half of AVG). */
void tpu_coll_scale(tpu_dtype_t dtype, void *dst, size_t n, int divisor);

/* Collectives over the chips of this process. bufs[c] is chip c's buffer (host memory of its
 * HBM arena); nchips >= 1; the caller has synchronized the chips' streams.
 *  all_reduce:      every bufs[c] (count elements) becomes the reduction over chips.
 *  broadcast:       every bufs[c] becomes a copy of bufs[root].
 *  all_gather:      outs[c] (nchips*count elements) = concat over chips k of ins[k].
 *  reduce_scatter:  outs[c] (count elements) = reduction over k of ins[k][c*count...]. */
tpu_status_t tpu_local_all_reduce(void *const bufs[], int nchips, size_t count,
                                  tpu_dtype_t dtype, tpu_coll_op_t op);
tpu_status_t tpu_local_broadcast(void *const bufs[], int nchips, size_t bytes, int root);
tpu_status_t tpu_local_all_gather(const void *const ins[], void *const outs[], int nchips,
                                  size_t bytes_per_chip);
tpu_status_t tpu_local_reduce_scatter(const void *const ins[], void *const outs[], int nchips,
                                      size_t count, tpu_dtype_t dtype, tpu_coll_op_t op);

#ifdef __cplusplus
}
#endif
#endif /* TPU_COLLECTIVE_H */

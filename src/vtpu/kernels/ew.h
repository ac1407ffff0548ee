/* ew.h: the machinery the fast elementwise kernels share (internal).
 *
 * - tpu_ew_iter_t: the iteration space of one output and up to eight inputs over the
 *   output's shape (inputs broadcast: a dim of size 1 or a rank-0 input gets stride 0).
 *   Init drops size-1 dims, then (unless the kernel needs row-major order, as iota and
 *   rng do) turns negative output strides positive and orders dims by output stride, and
 *   merges dims that are contiguous in every operand. Run splits the element range over
 *   the pool (grain TPU_EW_GRAIN elements; below that, TPU_EW_HELPER_GRAIN over helpers
 *   already spinning in it) and calls a loop function on 1-d segments:
 *   pointers and byte strides per operand, a length, and the segment's position in the
 *   iteration order (the row-major index when the order is kept). Run2 hands out 2-d
 *   segments instead (rows of the innermost dim, stepping the next one), so kernels whose
 *   innermost run is short (16 or 32 elements after a transpose or a broadcast) pay their
 *   dispatch once per tile rather than once per row.
 * - blocks: loops convert up to TPU_EW_BLOCK elements at a time into a compute type
 *   (ew_scalar.h), compute, and convert back; f32 data in place is used without a copy,
 *   bf16 goes through the SIMD converters.
 */
#ifndef TPU_VTPU_KERNELS_EW_H
#define TPU_VTPU_KERNELS_EW_H

#include "tpu/kernels.h"
#include "vtpu/kernels/ew_scalar.h"
#include "vtpu/kernels/vec.h"

#define TPU_EW_MAX_OPERANDS 9 /* an output and up to 8 inputs (fused programs) */
#define TPU_EW_GRAIN 131072
#define TPU_EW_HELPER_GRAIN 32768 /* below TPU_EW_GRAIN: chunks for spinning helpers only */
#define TPU_EW_BLOCK 512
/* Outputs of at least this many bytes are written with non-temporal stores where the
 * SIMD loops write them (they would not stay in cache anyway: about an L3). */
#define TPU_EW_STREAM_BYTES ((int64_t)32 << 20)

typedef struct tpu_ew_iter {
  int nops;                                            /* operand 0 is the output */
  int ndim;                                            /* >= 1 unless numel == 0 */
  int64_t numel;
  int64_t dims[TPU_MAX_RANK];                          /* outermost first */
  char *base[TPU_EW_MAX_OPERANDS];
  int64_t strides[TPU_EW_MAX_OPERANDS][TPU_MAX_RANK];  /* bytes */
} tpu_ew_iter_t;

/* Loop over one segment: ptrs/strides (bytes) per operand, n elements, first index pos. */
typedef void (*tpu_ew_loop_fn)(void *ctx, char *const *ptrs, const int64_t *strides,
                               int64_t n, int64_t pos);

/* A 2-d segment: |rows| rows of |n| elements; element i of row r of operand k is at
 * ptrs[k] + r * outer[k] + i * strides[k] (bytes). pos is the first element's position in
 * the iteration order; rows after the first follow at pos + r * n (rows > 1 only for
 * whole rows). */
typedef struct tpu_ew_seg {
  char *ptrs[TPU_EW_MAX_OPERANDS];
  int64_t strides[TPU_EW_MAX_OPERANDS];
  int64_t outer[TPU_EW_MAX_OPERANDS];
  int64_t n, rows, pos;
} tpu_ew_seg_t;

typedef void (*tpu_ew_seg_fn)(void *ctx, const tpu_ew_seg_t *seg);

/* Checks the buffers (|names| label them in errors: "out", "x", ...) and builds the
 * iteration. Inputs must have the output's rank with each dim equal or 1, or rank 0. */
tpu_status_t tpu_ew_iter_init(tpu_ew_iter_t *it, const char *kernel, const tpu_buf_t *out,
                              const tpu_buf_t *const *ins, const char *const *names,
                              int nin, bool keep_order);
void tpu_ew_iter_run(const tpu_ew_iter_t *it, tpu_pool_t *pool, tpu_ew_loop_fn fn, void *ctx);
void tpu_ew_iter_run2(const tpu_ew_iter_t *it, tpu_pool_t *pool, tpu_ew_seg_fn fn, void *ctx);

/* Whether |out| (numel elements) is large enough for streaming stores. */
static inline bool tpu_ew_stream_out(int64_t numel, tpu_dtype_t dt) {
  return numel >= TPU_EW_STREAM_BYTES / (int64_t)tpu_dtype_size(dt);
}

typedef union tpu_ew_block {
  float f[TPU_EW_BLOCK];
  double d[TPU_EW_BLOCK];
  int64_t i[TPU_EW_BLOCK];
} tpu_ew_block_t;

/* n (<= TPU_EW_BLOCK) elements of |dt| at |p| (byte stride |s|) as compute type |ct|:
 * returns |p| itself when it already is contiguous |ct| data, else fills |blk|. *step is
 * 0 when s == 0 (one value stands for all n), else 1. */
const void *tpu_ew_load(const tpu_vec_ops_t *v, tpu_ct_t ct, const char *p, int64_t s,
                        tpu_dtype_t dt, int64_t n, tpu_ew_block_t *blk, int64_t *step);

/* Stores n values of compute type |ct| (|step| 0: one value for all) to |p| (byte stride
 * |s|) as |dt|, with the CONVERT semantics. Nothing to do if vals == p. */
void tpu_ew_store(const tpu_vec_ops_t *v, tpu_ct_t ct, const void *vals, int64_t step,
                  char *p, int64_t s, tpu_dtype_t dt, int64_t n);

/* Where results of |ct| for |dt| at |p| (byte stride |s|) can be computed: |p| when the
 * output is contiguous data of that compute type, else |blk|. */
void *tpu_ew_out_dst(tpu_ct_t ct, char *p, int64_t s, tpu_dtype_t dt, tpu_ew_block_t *blk);

/* out[i] = op(x[i]) (n values of ct; x and out may be the same array). */
void tpu_ew_unary_compute(const tpu_vec_ops_t *v, tpu_op_t op, tpu_ct_t ct, tpu_dtype_t dt,
                          const void *x, void *out, int64_t n);
/* out[i] = op(a[i * sa], b[i * sb]), sa and sb in {0, 1}. */
void tpu_ew_binary_compute(const tpu_vec_ops_t *v, tpu_op_t op, tpu_ct_t ct, tpu_dtype_t dt,
                           const void *a, int64_t sa, const void *b, int64_t sb, void *out,
                           int64_t n);

/* Copies a contiguous run of |bytes| (copy_fill.c): short non-overlapping runs inline,
 * long or overlapping ones with memmove. */
void tpu_ew_copy_run(char *dst, const char *src, size_t bytes);
/* Copies n elements of |size| bytes from |in| (byte stride si, 0 repeats one) to |out|
 * (byte stride so): tpu_ew_copy_run when both are dense, else typed element loops. */
void tpu_ew_copy_row(size_t size, char *out, int64_t so, const char *in, int64_t si,
                     int64_t n);

/* The error for an op the dtype does not define: "<kernel>: EXP is not defined for dtype i32". */
tpu_status_t tpu_ew_unsupported(const char *kernel, tpu_op_t op, tpu_dtype_t dt);

/* One Philox4x32-10 block, the scalar reference for the vec.h generators (rng.c). */
void tpu_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

#endif /* TPU_VTPU_KERNELS_EW_H */

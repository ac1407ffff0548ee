/* ref_elementwise.c: tpu_ref_unary and tpu_ref_binary, the naive elementwise kernels.
 *
 * One element at a time in row-major order, offsets recomputed from the index, values
 * through the scalar definitions of ew_scalar.h with libm for the transcendental ops.
 * Single-threaded and SIMD-free: the yardstick the fast kernels are tested against.
 */
#include "vtpu/kernels/ew_scalar.h"
#include "vtpu/kernels/strided.h"

/* Checks |in| broadcasts to |out| (same rank with equal or size-1 dims, or rank 0). */
static tpu_status_t check_broadcast(const char *kernel, const tpu_buf_t *in, const char *name,
                                    const tpu_buf_t *out) {
  int64_t n;
  TPU_RETURN_IF_ERROR(tpu_buf_check(in, kernel, name, &n));
  if (in->rank == 0) return TPU_OK;
  bool ok = in->rank == out->rank;
  for (int d = 0; ok && d < out->rank; d++) ok = in->dims[d] == out->dims[d] || in->dims[d] == 1;
  if (!ok) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s does not broadcast to out", kernel,
                          name);
  }
  return TPU_OK;
}

/* Address of the element of |b| at output index |idx| (broadcast dims stay at 0). */
static char *elem(const tpu_buf_t *b, const int64_t *idx) {
  int64_t off = 0;
  for (int d = 0; d < b->rank; d++) off += (b->dims[d] == 1 ? 0 : idx[d]) * b->strides[d];
  return (char *)b->data + off * (int64_t)tpu_dtype_size(b->dtype);
}

static bool next_index(const tpu_buf_t *out, int64_t *idx) {
  for (int d = out->rank - 1; d >= 0; d--) {
    if (++idx[d] < out->dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

tpu_status_t tpu_ref_unary(tpu_op_t op, const tpu_buf_t *x, const tpu_buf_t *out) {
  const char *k = "ref_unary";
  int64_t numel;
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, k, "out", &numel));
  TPU_RETURN_IF_ERROR(check_broadcast(k, x, "x", out));
  if ((unsigned)op >= TPU_OP_COUNT || tpu_op_family(op) != TPU_FAMILY_UNARY) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: not a unary op", k);
  }
  if (op == TPU_OP_BITCAST_CONVERT) {
    if (tpu_dtype_size(x->dtype) != tpu_dtype_size(out->dtype) ||
        (x->dtype == TPU_BOOL) != (out->dtype == TPU_BOOL)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: BITCAST_CONVERT from %s to %s", k,
                            tpu_dtype_name(x->dtype), tpu_dtype_name(out->dtype));
    }
  } else if (op != TPU_OP_CONVERT) {
    if (!tpu_ew_unary_supported(op, x->dtype)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s is not defined for dtype %s", k,
                            tpu_op_name(op), tpu_dtype_name(x->dtype));
    }
    tpu_dtype_t want = op == TPU_OP_IS_FINITE ? TPU_BOOL : x->dtype;
    if (out->dtype != want) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s writes %s, not %s", k,
                            tpu_op_name(op), tpu_dtype_name(want), tpu_dtype_name(out->dtype));
    }
  }
  if (numel == 0) return TPU_OK;
  int64_t idx[TPU_MAX_RANK] = {0};
  do {
    const char *src = elem(x, idx);
    char *dst = elem(out, idx);
    tpu_dtype_t dt = x->dtype;
    if (op == TPU_OP_BITCAST_CONVERT) {
      memcpy(dst, src, tpu_dtype_size(dt));
      continue;
    }
    switch (tpu_ct_of(dt)) {
      case TPU_CT_F32: {
        float v = tpu_ew_load_f32(src, dt);
        if (op == TPU_OP_IS_FINITE) *dst = (char)isfinite(v);
        else tpu_ew_store_f64(dst, out->dtype, op == TPU_OP_CONVERT ? v : tpu_ew_unary_float(op, v));
        break;
      }
      case TPU_CT_F64: {
        double v;
        memcpy(&v, src, 8);
        if (op == TPU_OP_IS_FINITE) *dst = (char)isfinite(v);
        else tpu_ew_store_f64(dst, out->dtype, op == TPU_OP_CONVERT ? v : tpu_ew_unary_double(op, v));
        break;
      }
      default: {
        int64_t v = tpu_ew_load_i64(src, dt);
        if (op == TPU_OP_IS_FINITE) *dst = 1;
        else tpu_ew_store_i64(dst, out->dtype, op == TPU_OP_CONVERT ? v : tpu_ew_unary_i64(op, dt, v));
        break;
      }
    }
  } while (next_index(out, idx));
  return TPU_OK;
}

tpu_status_t tpu_ref_binary(tpu_op_t op, const tpu_buf_t *a, const tpu_buf_t *b,
                            const tpu_buf_t *out) {
  const char *k = "ref_binary";
  int64_t numel;
  TPU_RETURN_IF_ERROR(tpu_buf_check(out, k, "out", &numel));
  TPU_RETURN_IF_ERROR(check_broadcast(k, a, "a", out));
  TPU_RETURN_IF_ERROR(check_broadcast(k, b, "b", out));
  if ((unsigned)op >= TPU_OP_COUNT || tpu_op_family(op) != TPU_FAMILY_BINARY ||
      tpu_op_arity(op) != 2) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: not a binary op", k);
  }
  tpu_dtype_t dt = out->dtype;
  if (a->dtype != dt || b->dtype != dt || !tpu_ew_binary_supported(op, dt)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s is not defined for %s, %s -> %s",
                          k, tpu_op_name(op), tpu_dtype_name(a->dtype),
                          tpu_dtype_name(b->dtype), tpu_dtype_name(dt));
  }
  if (numel == 0) return TPU_OK;
  int64_t idx[TPU_MAX_RANK] = {0};
  do {
    const char *pa = elem(a, idx), *pb = elem(b, idx);
    char *po = elem(out, idx);
    switch (tpu_ct_of(dt)) {
      case TPU_CT_F32:
        tpu_ew_store_f64(po, dt, tpu_ew_binary_float(op, tpu_ew_load_f32(pa, dt),
                                                     tpu_ew_load_f32(pb, dt)));
        break;
      case TPU_CT_F64: {
        double x, y;
        memcpy(&x, pa, 8);
        memcpy(&y, pb, 8);
        tpu_ew_store_f64(po, dt, tpu_ew_binary_double(op, x, y));
        break;
      }
      default:
        tpu_ew_store_i64(po, dt, tpu_ew_binary_i64(op, dt, tpu_ew_load_i64(pa, dt),
                                                   tpu_ew_load_i64(pb, dt)));
        break;
    }
  } while (next_index(out, idx));
  return TPU_OK;
}

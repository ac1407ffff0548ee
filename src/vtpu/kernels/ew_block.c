/* ew_block.c: block loads, stores and computes of the fast elementwise kernels (ew.h).
 *
 * A block is up to TPU_EW_BLOCK values of one compute type. Loads and stores convert
 * between a strided operand of any dtype and a block (f32 and bf16 contiguous data take
 * the SIMD paths); computes run an op over blocks, through the vec.h table where it has
 * the op and ew_scalar.h otherwise.
 */
#include "tpu/status.h"
#include "vtpu/kernels/ew.h"

tpu_status_t tpu_ew_unsupported(const char *kernel, tpu_op_t op, tpu_dtype_t dt) {
  return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s is not defined for dtype %s", kernel,
                        tpu_op_name(op), tpu_dtype_name(dt));
}

static bool is_native(tpu_ct_t ct, tpu_dtype_t dt) {
  return (ct == TPU_CT_F32 && dt == TPU_F32) || (ct == TPU_CT_F64 && dt == TPU_F64) ||
         (ct == TPU_CT_I64 && dt == TPU_I64);
}

const void *tpu_ew_load(const tpu_vec_ops_t *v, tpu_ct_t ct, const char *p, int64_t s,
                        tpu_dtype_t dt, int64_t n, tpu_ew_block_t *blk, int64_t *step) {
  *step = s == 0 ? 0 : 1;
  if (s == 0) n = 1;
  if (is_native(ct, dt) && (s == 0 || s == (int64_t)tpu_ct_size(ct))) return p;
  if (ct == TPU_CT_F32) {
    if (dt == TPU_BF16 && s == 2) {
      v->bf16_to_f32((const uint16_t *)p, blk->f, n);
    } else if (dt == TPU_F32) {
      for (int64_t i = 0; i < n; i++) memcpy(&blk->f[i], p + i * s, 4);
    } else {
      for (int64_t i = 0; i < n; i++) blk->f[i] = tpu_ew_load_f32(p + i * s, dt);
    }
  } else if (ct == TPU_CT_F64) {
    for (int64_t i = 0; i < n; i++) memcpy(&blk->d[i], p + i * s, 8);
  } else {
    switch (dt) {
      case TPU_I32:
        for (int64_t i = 0; i < n; i++) {
          int32_t x;
          memcpy(&x, p + i * s, 4);
          blk->i[i] = x;
        }
        break;
      case TPU_U8:
        for (int64_t i = 0; i < n; i++) blk->i[i] = (uint8_t)p[i * s];
        break;
      default:
        for (int64_t i = 0; i < n; i++) blk->i[i] = tpu_ew_load_i64(p + i * s, dt);
        break;
    }
  }
  return blk;
}

void *tpu_ew_out_dst(tpu_ct_t ct, char *p, int64_t s, tpu_dtype_t dt, tpu_ew_block_t *blk) {
  return is_native(ct, dt) && s == (int64_t)tpu_ct_size(ct) ? (void *)p : (void *)blk;
}

/* Typed store loops for the common targets; the rest goes element by element. */
void tpu_ew_store(const tpu_vec_ops_t *v, tpu_ct_t ct, const void *vals, int64_t step,
                  char *p, int64_t s, tpu_dtype_t dt, int64_t n) {
  if (vals == p) return;
  if (ct == TPU_CT_F32) {
    const float *f = vals;
    if (step && dt == TPU_BF16 && s == 2) {
      v->f32_to_bf16(f, (uint16_t *)p, n);
    } else if (step && dt == TPU_F32 && s == 4) {
      memcpy(p, f, (size_t)n * 4);
    } else if (dt == TPU_F32) {
      for (int64_t i = 0; i < n; i++) memcpy(p + i * s, &f[i * step], 4);
    } else if (dt == TPU_BF16) {
      for (int64_t i = 0; i < n; i++) {
        uint16_t h = tpu_f32_to_bf16(f[i * step]);
        memcpy(p + i * s, &h, 2);
      }
    } else {
      for (int64_t i = 0; i < n; i++) tpu_ew_store_f64(p + i * s, dt, f[i * step]);
    }
  } else if (ct == TPU_CT_F64) {
    const double *d = vals;
    for (int64_t i = 0; i < n; i++) tpu_ew_store_f64(p + i * s, dt, d[i * step]);
  } else {
    const int64_t *x = vals;
    switch (dt) {
      case TPU_I64:
        for (int64_t i = 0; i < n; i++) memcpy(p + i * s, &x[i * step], 8);
        break;
      case TPU_I32:
        for (int64_t i = 0; i < n; i++) {
          int32_t y = (int32_t)(uint32_t)(uint64_t)x[i * step];
          memcpy(p + i * s, &y, 4);
        }
        break;
      case TPU_BOOL:
        for (int64_t i = 0; i < n; i++) p[i * s] = (char)(x[i * step] != 0);
        break;
      default:
        for (int64_t i = 0; i < n; i++) tpu_ew_store_i64(p + i * s, dt, x[i * step]);
        break;
    }
  }
}

void tpu_ew_unary_compute(const tpu_vec_ops_t *v, tpu_op_t op, tpu_ct_t ct, tpu_dtype_t dt,
                          const void *x, void *out, int64_t n) {
  if (op == TPU_OP_IS_FINITE) { /* bool results, as i64 0/1 */
    int64_t *o = out;
    if (ct == TPU_CT_F32) {
      const float *f = x;
      for (int64_t i = 0; i < n; i++) o[i] = isfinite(f[i]);
    } else if (ct == TPU_CT_F64) {
      const double *d = x;
      for (int64_t i = 0; i < n; i++) o[i] = isfinite(d[i]);
    } else {
      for (int64_t i = 0; i < n; i++) o[i] = 1;
    }
    return;
  }
  switch (ct) {
    case TPU_CT_F32: {
      if (tpu_vec_unary_has(op)) {
        v->unary_f32(op, x, out, n);
        return;
      }
      const float *f = x;
      float *o = out;
      for (int64_t i = 0; i < n; i++) o[i] = tpu_ew_unary_float(op, f[i]);
      return;
    }
    case TPU_CT_F64: {
      const double *d = x;
      double *o = out;
      for (int64_t i = 0; i < n; i++) o[i] = tpu_ew_unary_double(op, d[i]);
      return;
    }
    default: {
      const int64_t *a = x;
      int64_t *o = out;
      for (int64_t i = 0; i < n; i++) o[i] = tpu_ew_unary_i64(op, dt, a[i]);
      return;
    }
  }
}

void tpu_ew_binary_compute(const tpu_vec_ops_t *v, tpu_op_t op, tpu_ct_t ct, tpu_dtype_t dt,
                           const void *a, int64_t sa, const void *b, int64_t sb, void *out,
                           int64_t n) {
  switch (ct) {
    case TPU_CT_F32: {
      if (tpu_vec_binary_has(op)) {
        v->binary_f32(op, a, sa, b, sb, out, n);
        return;
      }
      const float *x = a, *y = b;
      float *o = out;
      for (int64_t i = 0; i < n; i++) o[i] = tpu_ew_binary_float(op, x[i * sa], y[i * sb]);
      return;
    }
    case TPU_CT_F64: {
      const double *x = a, *y = b;
      double *o = out;
      for (int64_t i = 0; i < n; i++) o[i] = tpu_ew_binary_double(op, x[i * sa], y[i * sb]);
      return;
    }
    default: {
      const int64_t *x = a, *y = b;
      int64_t *o = out;
      switch (op) { /* the common integer ops get loops the compiler can vectorize */
        case TPU_OP_ADD:
          if (dt != TPU_BOOL) {
            for (int64_t i = 0; i < n; i++) {
              o[i] = (int64_t)((uint64_t)x[i * sa] + (uint64_t)y[i * sb]);
            }
            return;
          }
          break;
        case TPU_OP_SUB:
          for (int64_t i = 0; i < n; i++) {
            o[i] = (int64_t)((uint64_t)x[i * sa] - (uint64_t)y[i * sb]);
          }
          return;
        default:
          break;
      }
      for (int64_t i = 0; i < n; i++) o[i] = tpu_ew_binary_i64(op, dt, x[i * sa], y[i * sb]);
      return;
    }
  }
}

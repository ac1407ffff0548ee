/* reduce_ref.c: tpu_ref_reduce, the naive reference reduction the tests compare against.
 *
 * One output at a time, the reduced elements visited in row-major order of x's reduced
 * dims. Floats accumulate in f64 (more precise than the fast kernel's f32 pairwise sums;
 * tests use tolerances), integers in i64 with wrapping; AND/OR are bitwise on integers and
 * logical on bool and floats (NaN is true). MAX/MIN
 * propagate NaN; ARGMAX/ARGMIN give the first index of the extreme, NaN counting as it.
 */
#include "vtpu/kernels/reduce_internal.h"

tpu_status_t tpu_ref_reduce(tpu_reduce_kind_t kind, const tpu_buf_t *x, const bool *dims,
                            const tpu_buf_t *out) {
  int64_t m, n;
  TPU_RETURN_IF_ERROR(tpu_reduce_check("reduce", kind, x, dims, out, &m, &n));
  if (m == 0) return TPU_OK;
  if (n == 0) return tpu_reduce_fill_identity("reduce", kind, out);

  int nk = 0, nr = 0;
  int kept[TPU_MAX_RANK], red[TPU_MAX_RANK];
  for (int d = 0; d < x->rank; d++) {
    if (dims[d]) {
      red[nr++] = d;
    } else {
      kept[nk++] = d;
    }
  }
  bool is_float = tpu_dtype_is_float(x->dtype);
  bool logical = (kind == TPU_REDUCE_AND || kind == TPU_REDUCE_OR) && is_float;
  bool arg = kind == TPU_REDUCE_ARGMAX || kind == TPU_REDUCE_ARGMIN;
  int64_t idx[TPU_MAX_RANK] = {0};
  int64_t oidx[TPU_MAX_RANK] = {0};

  for (int64_t o = 0; o < m; o++) {
    /* unravel o over the kept dims (= out's dims) */
    int64_t t = o;
    for (int k = nk - 1; k >= 0; k--) {
      oidx[k] = t % x->dims[kept[k]];
      t /= x->dims[kept[k]];
      idx[kept[k]] = oidx[k];
    }
    double facc = kind == TPU_REDUCE_PROD ? 1.0 : 0.0;
    uint64_t iacc = kind == TPU_REDUCE_PROD ? 1 : kind == TPU_REDUCE_AND ? UINT64_MAX : 0;
    int64_t best_i = -1;
    for (int64_t r = 0; r < n; r++) {
      int64_t u = r;
      for (int k = nr - 1; k >= 0; k--) {
        idx[red[k]] = u % x->dims[red[k]];
        u /= x->dims[red[k]];
      }
      int64_t off = tpu_offset_of(x->rank, idx, x->strides);
      if (logical) {
        bool v = tpu_load_truth(x->data, x->dtype, off);
        iacc = kind == TPU_REDUCE_AND ? (iacc && v) : (iacc || v);
      } else if (is_float) {
        double v = tpu_load_f64(x->data, x->dtype, off);
        switch (kind) {
          case TPU_REDUCE_SUM: facc += v; break;
          case TPU_REDUCE_PROD: facc *= v; break;
          case TPU_REDUCE_MAX:
            if (r == 0 || v != v || (facc == facc && v > facc)) facc = v;
            break;
          case TPU_REDUCE_MIN:
            if (r == 0 || v != v || (facc == facc && v < facc)) facc = v;
            break;
          default: /* ARGMAX, ARGMIN: first NaN wins, else first strict extreme */
            if (best_i >= 0 && facc != facc) break;
            if (best_i < 0 || v != v || (kind == TPU_REDUCE_ARGMAX ? v > facc : v < facc)) {
              facc = v;
              best_i = r;
            }
            break;
        }
      } else {
        int64_t v = tpu_load_i64(x->data, x->dtype, off);
        switch (kind) {
          case TPU_REDUCE_SUM: iacc += (uint64_t)v; break;
          case TPU_REDUCE_PROD: iacc *= (uint64_t)v; break;
          case TPU_REDUCE_MAX:
            if (r == 0 || v > (int64_t)iacc) iacc = (uint64_t)v;
            break;
          case TPU_REDUCE_MIN:
            if (r == 0 || v < (int64_t)iacc) iacc = (uint64_t)v;
            break;
          case TPU_REDUCE_AND: iacc &= (uint64_t)v; break;
          case TPU_REDUCE_OR: iacc |= (uint64_t)v; break;
          default:
            if (best_i < 0 || (kind == TPU_REDUCE_ARGMAX ? v > (int64_t)iacc : v < (int64_t)iacc)) {
              iacc = (uint64_t)v;
              best_i = r;
            }
            break;
        }
      }
    }
    int64_t ooff = tpu_offset_of(out->rank, oidx, out->strides);
    if (arg) {
      tpu_store_i64(out->data, out->dtype, ooff, best_i);
    } else if (logical) {
      tpu_store_i64(out->data, out->dtype, ooff, iacc != 0);
    } else if (is_float) {
      tpu_store_f64(out->data, out->dtype, ooff, facc);
    } else {
      tpu_store_i64(out->data, out->dtype, ooff, (int64_t)iacc);
    }
  }
  return TPU_OK;
}

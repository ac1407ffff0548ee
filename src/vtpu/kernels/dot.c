/* dot.c: StableHLO dot_general on the vTPU's MXU (tpu_kernel_dot_general) and its naive
 * reference (tpu_ref_dot_general).
 *
 * The result is (batch dims..., lhs free dims..., rhs free dims...). The fast kernel
 * views it as a batched GEMM: batch = the batch dims, M = the lhs free dims, N = the rhs
 * free dims, K = the contracting dims, each a strided axis (gemm.h) built straight from
 * the operands' strides, so [B..., M, K] x [B..., K, N], the transposed variants and any
 * other layout reach the GEMM without an intermediate copy (the GEMM packs its panels
 * from the strided operands directly). Numerics are gemm.h's MXU rules.
 */
#include <stdlib.h>

#include "gemm.h"

typedef struct dot_dims {
  int nb, nc;                  /* batch and contracting dims */
  int nfl, nfr;                /* lhs and rhs free dims */
  int64_t lfree[TPU_MAX_RANK]; /* lhs free dims, ascending */
  int64_t rfree[TPU_MAX_RANK]; /* rhs free dims, ascending */
} dot_dims;

static tpu_status_t check_buf(const char *what, const char *name, const tpu_buf_t *b) {
  if (!b) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s is NULL", what, name);
  if (b->rank < 0 || b->rank > TPU_MAX_RANK) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s has rank %d", what, name, b->rank);
  }
  int64_t n = 1;
  for (int i = 0; i < b->rank; i++) {
    if (b->dims[i] < 0 || __builtin_mul_overflow(n, b->dims[i], &n)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s has a bad shape", what, name);
    }
  }
  if (n > 0 && !b->data) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s has no data", what, name);
  }
  return TPU_OK;
}

/* Marks the |n| dims |list| of an operand of rank |rank| in |used|; false if one is out
 * of range or repeated. */
static bool mark_dims(int n, const int64_t *list, int rank, bool *used) {
  for (int i = 0; i < n; i++) {
    if (list[i] < 0 || list[i] >= rank || used[list[i]]) return false;
    used[list[i]] = true;
  }
  return true;
}

static tpu_status_t dot_check(const char *what, const tpu_dot_attrs_t *a, const tpu_buf_t *lhs,
                              const tpu_buf_t *rhs, const tpu_buf_t *out, dot_dims *d,
                              tpu_mxu_plan_t *plan) {
  if (!a) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: attrs is NULL", what);
  TPU_RETURN_IF_ERROR(check_buf(what, "lhs", lhs));
  TPU_RETURN_IF_ERROR(check_buf(what, "rhs", rhs));
  TPU_RETURN_IF_ERROR(check_buf(what, "out", out));
  int nb = a->num_batch, nc = a->num_contract;
  if (nb < 0 || nc < 0 || nb + nc > lhs->rank || nb + nc > rhs->rank) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "%s: %d batch + %d contracting dims for ranks %d and %d", what, nb, nc,
                          lhs->rank, rhs->rank);
  }
  bool lused[TPU_MAX_RANK] = {false}, rused[TPU_MAX_RANK] = {false};
  if (!mark_dims(nb, a->lhs_batch, lhs->rank, lused) ||
      !mark_dims(nc, a->lhs_contract, lhs->rank, lused) ||
      !mark_dims(nb, a->rhs_batch, rhs->rank, rused) ||
      !mark_dims(nc, a->rhs_contract, rhs->rank, rused)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "%s: batch/contracting dims out of range or repeated", what);
  }
  for (int i = 0; i < nb; i++) {
    if (lhs->dims[a->lhs_batch[i]] != rhs->dims[a->rhs_batch[i]]) {
      return tpu_status_set(
          TPU_ERR_INVALID_ARGUMENT, "%s: batch dim %d has size %lld in lhs and %lld in rhs", what,
          i, (long long)lhs->dims[a->lhs_batch[i]], (long long)rhs->dims[a->rhs_batch[i]]);
    }
  }
  for (int i = 0; i < nc; i++) {
    if (lhs->dims[a->lhs_contract[i]] != rhs->dims[a->rhs_contract[i]]) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "%s: contracting dim %d has size %lld in lhs and %lld in rhs", what, i,
                            (long long)lhs->dims[a->lhs_contract[i]],
                            (long long)rhs->dims[a->rhs_contract[i]]);
    }
  }
  d->nb = nb;
  d->nc = nc;
  d->nfl = d->nfr = 0;
  for (int i = 0; i < lhs->rank; i++) {
    if (!lused[i]) d->lfree[d->nfl++] = i;
  }
  for (int i = 0; i < rhs->rank; i++) {
    if (!rused[i]) d->rfree[d->nfr++] = i;
  }
  int orank = nb + d->nfl + d->nfr;
  bool shape_ok = out->rank == orank;
  for (int i = 0; shape_ok && i < orank; i++) {
    int64_t want = i < nb            ? lhs->dims[a->lhs_batch[i]]
                   : i < nb + d->nfl ? lhs->dims[d->lfree[i - nb]]
                                     : rhs->dims[d->rfree[i - nb - d->nfl]];
    shape_ok = out->dims[i] == want;
  }
  if (!shape_ok) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "%s: result has rank %d or a dim that does not match the operands "
                          "(expected rank %d)",
                          what, out->rank, orank);
  }
  return tpu_mxu_plan_make(what, lhs->dtype, rhs->dtype, out->dtype, a->precision, plan);
}

/* ---- fast: one batched strided GEMM ---------------------------------------------------- */

/* Gathers sizes and strides of the dims |list| (of buffer |b|) for an axis. */
static void gather(int n, const int64_t *list, const tpu_buf_t *b, int64_t *dims,
                   int64_t *strides) {
  for (int i = 0; i < n; i++) {
    dims[i] = b->dims[list[i]];
    strides[i] = b->strides[list[i]];
  }
}

/* Whether |bias| (out's dims) is one value per column of the GEMM (the rhs free dims, the
 * last of out), the same for every batch and row: broadcast (stride 0) over the dims
 * before them and dense row-major over them. */
static bool bias_per_column(const dot_dims *d, const tpu_buf_t *bias, const tpu_buf_t *out) {
  if (bias->rank != out->rank) return false;
  int first = d->nb + d->nfl;
  int64_t dense = 1;
  for (int i = out->rank - 1; i >= 0; i--) {
    if (bias->dims[i] != out->dims[i]) return false;
    if (out->dims[i] == 1) continue; /* any stride */
    if (bias->strides[i] != (i >= first ? dense : 0)) return false;
    if (i >= first) dense *= out->dims[i];
  }
  return true;
}

/* dot_general, then + |bias| (NULL: none) in the GEMM when it is one value per column. */
static tpu_status_t dot_run(const tpu_dot_attrs_t *attrs, const tpu_buf_t *lhs,
                            const tpu_buf_t *rhs, const tpu_buf_t *bias, const tpu_buf_t *out,
                            tpu_pool_t *pool) {
  static const char *what = "dot_general";
  dot_dims d;
  tpu_gemm_t g;
  memset(&g, 0, sizeof g);
  TPU_RETURN_IF_ERROR(dot_check(what, attrs, lhs, rhs, out, &d, &g.plan));
  if (bias && (bias->dtype != TPU_F32 || out->dtype != TPU_F32)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: a bias is f32 and so is the result, "
                          "got bias %s and result %s", what, tpu_dtype_name(bias->dtype),
                          tpu_dtype_name(out->dtype));
  }
  bool in_gemm = bias && bias_per_column(&d, bias, out);
  if (in_gemm) g.bias = bias->data;
  g.what = what;
  g.a.data = lhs->data;
  g.a.dtype = lhs->dtype;
  g.b.data = rhs->data;
  g.b.dtype = rhs->dtype;
  g.c.data = out->data;
  g.c.dtype = out->dtype;

  int64_t out_list[TPU_MAX_RANK];
  for (int i = 0; i < out->rank; i++) out_list[i] = i;
  struct {
    int n;
    const int64_t *list;
    const tpu_buf_t *buf;
    tpu_gemm_axis_t *axis;
  } axes[9] = {
      {d.nb, attrs->lhs_batch, lhs, &g.a.batch},
      {d.nfl, d.lfree, lhs, &g.a.rows},
      {d.nc, attrs->lhs_contract, lhs, &g.a.cols},
      {d.nb, attrs->rhs_batch, rhs, &g.b.batch},
      {d.nc, attrs->rhs_contract, rhs, &g.b.rows},
      {d.nfr, d.rfree, rhs, &g.b.cols},
      {d.nb, out_list, out, &g.c.batch},
      {d.nfl, out_list + d.nb, out, &g.c.rows},
      {d.nfr, out_list + d.nb + d.nfl, out, &g.c.cols},
  };
  int64_t *owned[9] = {NULL};
  tpu_status_t st = TPU_OK;
  for (int i = 0; i < 9 && st == TPU_OK; i++) {
    int64_t dims[TPU_MAX_RANK], strides[TPU_MAX_RANK];
    gather(axes[i].n, axes[i].list, axes[i].buf, dims, strides);
    st = tpu_gemm_axis_make(what, axes[i].n, dims, strides, axes[i].axis, &owned[i]);
  }
  if (st == TPU_OK) st = tpu_gemm_run(&g, pool);
  for (int i = 0; i < 9; i++) free(owned[i]);
  if (st == TPU_OK && bias && !in_gemm) st = tpu_kernel_binary(TPU_OP_ADD, out, bias, out, pool);
  return st;
}

tpu_status_t tpu_kernel_dot_general(const tpu_dot_attrs_t *attrs, const tpu_buf_t *lhs,
                                    const tpu_buf_t *rhs, const tpu_buf_t *out, tpu_pool_t *pool) {
  return dot_run(attrs, lhs, rhs, NULL, out, pool);
}

tpu_status_t tpu_kernel_dot_general_bias(const tpu_dot_attrs_t *attrs, const tpu_buf_t *lhs,
                                         const tpu_buf_t *rhs, const tpu_buf_t *bias,
                                         const tpu_buf_t *out, tpu_pool_t *pool) {
  return dot_run(attrs, lhs, rhs, bias, out, pool);
}

/* ---- reference: one output element at a time, obvious loops ------------------------------ */

tpu_status_t tpu_ref_dot_general(const tpu_dot_attrs_t *attrs, const tpu_buf_t *lhs,
                                 const tpu_buf_t *rhs, const tpu_buf_t *out) {
  static const char *what = "dot_general";
  dot_dims d;
  tpu_mxu_plan_t plan;
  TPU_RETURN_IF_ERROR(dot_check(what, attrs, lhs, rhs, out, &d, &plan));
  int64_t numel = 1, K = 1;
  for (int i = 0; i < out->rank; i++) numel *= out->dims[i];
  for (int i = 0; i < d.nc; i++) K *= lhs->dims[attrs->lhs_contract[i]];
  int passes = plan.mode == TPU_MXU_BF16 ? plan.num_passes : 1;
  int64_t idx[TPU_MAX_RANK] = {0}; /* output multi-index, row-major */
  for (int64_t e = 0; e < numel; e++) {
    int64_t li[TPU_MAX_RANK] = {0}, ri[TPU_MAX_RANK] = {0};
    for (int i = 0; i < d.nb; i++) {
      li[attrs->lhs_batch[i]] = idx[i];
      ri[attrs->rhs_batch[i]] = idx[i];
    }
    for (int i = 0; i < d.nfl; i++) li[d.lfree[i]] = idx[d.nb + i];
    for (int i = 0; i < d.nfr; i++) ri[d.rfree[i]] = idx[d.nb + d.nfl + i];
    float acc = 0.0f;
    double acc64 = 0.0;
    for (int t = 0; t < passes; t++) {
      for (int64_t k = 0; k < K; k++) {
        int64_t rest = k; /* contracting multi-index, row-major in attrs order */
        for (int i = d.nc - 1; i >= 0; i--) {
          int64_t size = lhs->dims[attrs->lhs_contract[i]];
          li[attrs->lhs_contract[i]] = rest % size;
          ri[attrs->rhs_contract[i]] = rest % size;
          rest /= size;
        }
        int64_t lo = 0, ro = 0;
        for (int i = 0; i < lhs->rank; i++) lo += li[i] * lhs->strides[i];
        for (int i = 0; i < rhs->rank; i++) ro += ri[i] * rhs->strides[i];
        if (plan.mode == TPU_MXU_F64) {
          acc64 += tpu_mxu_load_f64(lhs->data, lhs->dtype, lo) *
                   tpu_mxu_load_f64(rhs->data, rhs->dtype, ro);
          continue;
        }
        float av = tpu_mxu_load_f32(lhs->data, lhs->dtype, lo);
        float bv = tpu_mxu_load_f32(rhs->data, rhs->dtype, ro);
        if (plan.mode == TPU_MXU_BF16) {
          av = tpu_mxu_component(av, plan.a_comp[t]);
          bv = tpu_mxu_component(bv, plan.b_comp[t]);
        }
        acc += av * bv;
      }
    }
    int64_t oo = 0;
    for (int i = 0; i < out->rank; i++) oo += idx[i] * out->strides[i];
    if (plan.mode == TPU_MXU_F64) {
      tpu_mxu_store_f64(out->data, out->dtype, oo, acc64);
    } else {
      tpu_mxu_store_f32(out->data, out->dtype, oo, acc);
    }
    for (int i = out->rank - 1; i >= 0; i--) { /* next output index */
      if (++idx[i] < out->dims[i]) break;
      idx[i] = 0;
    }
  }
  return TPU_OK;
}

/* conv.c: StableHLO convolution on the vTPU's MXU (tpu_kernel_convolution) and its naive
 * reference (tpu_ref_convolution).
 *
 * Semantics (StableHLO): the input is dilated by lhs_dilation (zeros between elements),
 * padded by pad_lo/pad_hi (negative crops), and every output position x reads the window
 * x*stride + w*rhs_dilation. feature_group_count G splits the input features and the
 * kernel's output features into G groups; batch_group_count BG splits the input batch and
 * the kernel's output features into BG groups (at most one of them exceeds 1). Any
 * dimension numbers (NCHW/OIHW, NHWC/HWIO, the swapped ones of weight gradients, ...).
 *
 * Fast path: one batched GEMM, batch = the groups (and the images, when they are big
 * enough to make a GEMM each), for each group g
 *
 *   out[o, (b, x)] = sum over k = (f, w) of kernel[o, f, w] * in'[b, f, x*stride + w*rdil]
 *        (M = O/groups, N = out batch * out spatial, K = in features per group * window)
 *
 * where in' is the input itself when no padding or lhs dilation applies (negative padding
 * only moves the origin), else a zero-padded, dilated copy of the input. The (f, w) and
 * (b, x) axes are strided views of in' (offset tables), so the im2col matrix is never
 * materialized: the GEMM's panel packer gathers it straight from in'. The reference walks
 * the same (pass, f, w) order, so the two differ only in f32 accumulation order.
 */
#include <stdlib.h>

#include "gemm.h"

typedef struct conv_shape {
  int ns;                       /* spatial dims */
  int64_t n, c, o;              /* input batch, input features, kernel output features */
  int64_t groups, og, cg, nout; /* G*BG, output features and input features per group,
                                   output batch */
  int64_t in_sp[3], win[3], out_sp[3];
} conv_shape;

static tpu_status_t check_buf(const char *what, const char *name, const tpu_buf_t *b, int rank) {
  if (!b) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s is NULL", what, name);
  if (b->rank != rank) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s has rank %d, expected %d", what, name,
                          b->rank, rank);
  }
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (b->dims[i] < 0 || __builtin_mul_overflow(n, b->dims[i], &n)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s has a bad shape", what, name);
    }
  }
  if (n > 0 && !b->data) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %s has no data", what, name);
  }
  return TPU_OK;
}

/* True if {a, b, sp[0..ns)} is a permutation of 0..ns+1. */
static bool is_perm(int64_t a, int64_t b, const int64_t *sp, int ns) {
  bool seen[5] = {false};
  int64_t all[5] = {a, b, sp[0], sp[1], sp[2]};
  for (int i = 0; i < ns + 2; i++) {
    if (all[i] < 0 || all[i] >= ns + 2 || seen[all[i]]) return false;
    seen[all[i]] = true;
  }
  return true;
}

static tpu_status_t conv_check(const char *what, const tpu_conv_attrs_t *a, const tpu_buf_t *in,
                               const tpu_buf_t *k, const tpu_buf_t *out, conv_shape *s,
                               tpu_mxu_plan_t *plan) {
  if (!a) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: attrs is NULL", what);
  int ns = a->num_spatial;
  if (ns < 1 || ns > 3) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: %d spatial dims (1..3)", what, ns);
  }
  TPU_RETURN_IF_ERROR(check_buf(what, "input", in, ns + 2));
  TPU_RETURN_IF_ERROR(check_buf(what, "kernel", k, ns + 2));
  TPU_RETURN_IF_ERROR(check_buf(what, "out", out, ns + 2));
  if (!is_perm(a->in_batch, a->in_feature, a->in_spatial, ns) ||
      !is_perm(a->k_out_feature, a->k_in_feature, a->k_spatial, ns) ||
      !is_perm(a->out_batch, a->out_feature, a->out_spatial, ns)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: bad dimension numbers", what);
  }
  int64_t G = a->feature_group_count, BG = a->batch_group_count;
  if (G < 1 || BG < 1 || (G > 1 && BG > 1)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "%s: feature_group_count %lld, batch_group_count %lld", what,
                          (long long)G, (long long)BG);
  }
  s->ns = ns;
  s->n = in->dims[a->in_batch];
  s->c = in->dims[a->in_feature];
  s->o = k->dims[a->k_out_feature];
  s->groups = G * BG;
  if (s->c % G != 0 || k->dims[a->k_in_feature] * G != s->c || s->o % s->groups != 0 ||
      s->n % BG != 0) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "%s: %lld input features, %lld batch, kernel %lld in x %lld out "
                          "features do not split into %lld feature / %lld batch groups",
                          what, (long long)s->c, (long long)s->n,
                          (long long)k->dims[a->k_in_feature], (long long)s->o, (long long)G,
                          (long long)BG);
  }
  s->og = s->o / s->groups;
  s->cg = s->c / G;
  s->nout = s->n / BG;
  bool ok = out->dims[a->out_batch] == s->nout && out->dims[a->out_feature] == s->o;
  for (int i = 0; i < ns; i++) {
    int64_t st = a->stride[i], ld = a->lhs_dilation[i], rd = a->rhs_dilation[i];
    if (st < 1 || ld < 1 || rd < 1) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "%s: stride and dilations must be >= 1 (spatial dim %d)", what, i);
    }
    int64_t isz = in->dims[a->in_spatial[i]], wsz = k->dims[a->k_spatial[i]];
    /* the spec's shape rule, with empty input and window dims counted as size 0 */
    int64_t dil_in = 0, dil_win = 0, padded;
    if ((isz > 0 && (__builtin_mul_overflow(isz - 1, ld, &dil_in) || ++dil_in <= 0)) ||
        (wsz > 0 && (__builtin_mul_overflow(wsz - 1, rd, &dil_win) || ++dil_win <= 0)) ||
        __builtin_add_overflow(dil_in, a->pad_lo[i], &padded) ||
        __builtin_add_overflow(padded, a->pad_hi[i], &padded)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: spatial sizes overflow", what);
    }
    int64_t osz = padded <= 0 || dil_win > padded ? 0 : (padded - dil_win) / st + 1;
    s->in_sp[i] = isz;
    s->win[i] = wsz;
    s->out_sp[i] = osz;
    ok = ok && out->dims[a->out_spatial[i]] == osz;
  }
  if (!ok) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "%s: result shape does not match the input, kernel and window", what);
  }
  return tpu_mxu_plan_make(what, in->dtype, k->dtype, out->dtype, a->precision, plan);
}

/* ---- reference: one output element at a time ------------------------------------------- */

tpu_status_t tpu_ref_convolution(const tpu_conv_attrs_t *attrs, const tpu_buf_t *input,
                                 const tpu_buf_t *kernel, const tpu_buf_t *out) {
  static const char *what = "convolution";
  conv_shape s;
  tpu_mxu_plan_t plan;
  TPU_RETURN_IF_ERROR(conv_check(what, attrs, input, kernel, out, &s, &plan));
  const tpu_conv_attrs_t *a = attrs;
  int ns = s.ns;
  int64_t wn = 1, xn = 1;
  for (int i = 0; i < ns; i++) {
    wn *= s.win[i];
    xn *= s.out_sp[i];
  }
  int passes = plan.mode == TPU_MXU_BF16 ? plan.num_passes : 1;
  for (int64_t b = 0; b < s.nout; b++) {
    for (int64_t o = 0; o < s.o; o++) {
      int64_t g = o / s.og;
      int64_t in_b = a->batch_group_count > 1 ? g * s.nout + b : b;
      int64_t f0 = a->feature_group_count > 1 ? g * s.cg : 0;
      for (int64_t x = 0; x < xn; x++) {
        int64_t xi[3] = {0}, rest = x;
        for (int i = ns - 1; i >= 0; i--) {
          xi[i] = rest % s.out_sp[i];
          rest /= s.out_sp[i];
        }
        float acc = 0.0f;
        double acc64 = 0.0;
        for (int t = 0; t < passes; t++) {
          for (int64_t f = 0; f < s.cg; f++) {
            for (int64_t w = 0; w < wn; w++) {
              int64_t wi[3] = {0}, r = w;
              for (int i = ns - 1; i >= 0; i--) {
                wi[i] = r % s.win[i];
                r /= s.win[i];
              }
              /* input offset, or skip when the tap lands in padding or a dilation hole */
              int64_t ioff =
                  in_b * input->strides[a->in_batch] + (f0 + f) * input->strides[a->in_feature];
              bool inside = true;
              for (int i = 0; i < ns && inside; i++) {
                int64_t pos = xi[i] * a->stride[i] + wi[i] * a->rhs_dilation[i] - a->pad_lo[i];
                int64_t q = pos / a->lhs_dilation[i];
                inside = pos >= 0 && pos % a->lhs_dilation[i] == 0 && q < s.in_sp[i];
                ioff += q * input->strides[a->in_spatial[i]];
              }
              if (!inside) continue;
              int64_t koff =
                  o * kernel->strides[a->k_out_feature] + f * kernel->strides[a->k_in_feature];
              for (int i = 0; i < ns; i++) koff += wi[i] * kernel->strides[a->k_spatial[i]];
              if (plan.mode == TPU_MXU_F64) {
                acc64 += tpu_mxu_load_f64(input->data, input->dtype, ioff) *
                         tpu_mxu_load_f64(kernel->data, kernel->dtype, koff);
                continue;
              }
              float iv = tpu_mxu_load_f32(input->data, input->dtype, ioff);
              float kv = tpu_mxu_load_f32(kernel->data, kernel->dtype, koff);
              if (plan.mode == TPU_MXU_BF16) { /* the plan is for (input, kernel) */
                iv = tpu_mxu_component(iv, plan.a_comp[t]);
                kv = tpu_mxu_component(kv, plan.b_comp[t]);
              }
              acc += iv * kv;
            }
          }
        }
        int64_t ooff = b * out->strides[a->out_batch] + o * out->strides[a->out_feature];
        for (int i = 0; i < ns; i++) ooff += xi[i] * out->strides[a->out_spatial[i]];
        if (plan.mode == TPU_MXU_F64) {
          tpu_mxu_store_f64(out->data, out->dtype, ooff, acc64);
        } else {
          tpu_mxu_store_f32(out->data, out->dtype, ooff, acc);
        }
      }
    }
  }
  return TPU_OK;
}

/* ---- fast: padded copy if needed, then one batched GEMM ------------------------------------ */

/* Copies |in| into the dense (batch, feature, padded spatial...) buffer |dst| of dims
 * |pdims| (already zeroed): input element i lands at pad_lo + i * lhs_dilation. Walks the
 * input one innermost row at a time. */
static void pad_copy(const tpu_conv_attrs_t *a, const conv_shape *s, const tpu_buf_t *in,
                     const int64_t *pdims, char *dst) {
  int ns = s->ns, last = ns - 1;
  int64_t es = (int64_t)tpu_dtype_size(in->dtype);
  int64_t pstr[5]; /* strides of dst: batch, feature, spatial... */
  pstr[ns + 1] = 1;
  for (int i = ns; i >= 0; i--) pstr[i] = pstr[i + 1] * pdims[i + 1];
  /* the innermost spatial dim: input elements [i_lo, i_hi) land inside the padded row */
  int64_t len = s->in_sp[last], ld = a->lhs_dilation[last], lo = a->pad_lo[last];
  int64_t i_lo = lo >= 0 ? 0 : (-lo + ld - 1) / ld;
  int64_t i_hi = len;
  while (i_hi > i_lo && lo + (i_hi - 1) * ld >= pdims[2 + last]) i_hi--;
  if (i_hi <= i_lo) return;
  int64_t sstep = in->strides[a->in_spatial[last]], dstep = ld;
  int64_t dims[4] = {s->n, s->c, s->in_sp[0], s->in_sp[1]}; /* all but the innermost */
  int nouter = ns + 1;
  int64_t rows = 1;
  for (int i = 0; i < nouter; i++) rows *= dims[i];
  int64_t idx[4] = {0};
  for (int64_t r = 0; r < rows; r++) {
    int64_t soff = idx[0] * in->strides[a->in_batch] + idx[1] * in->strides[a->in_feature];
    int64_t doff = idx[0] * pstr[0] + idx[1] * pstr[1];
    bool inside = true;
    for (int i = 0; i < last; i++) {
      int64_t pos = a->pad_lo[i] + idx[2 + i] * a->lhs_dilation[i];
      inside = inside && pos >= 0 && pos < pdims[2 + i];
      soff += idx[2 + i] * in->strides[a->in_spatial[i]];
      doff += pos * pstr[2 + i];
    }
    if (inside) {
      const char *sp = (const char *)in->data + (soff + i_lo * sstep) * es;
      char *dp = dst + (doff + lo + i_lo * ld) * es;
      int64_t n = i_hi - i_lo;
      if (sstep == 1 && dstep == 1) {
        memcpy(dp, sp, (size_t)(n * es));
      } else {
        for (int64_t i = 0; i < n; i++)
          memcpy(dp + i * dstep * es, sp + i * sstep * es, (size_t)es);
      }
    }
    for (int i = nouter - 1; i >= 0; i--) {
      if (++idx[i] < dims[i]) break;
      idx[i] = 0;
    }
  }
}

tpu_status_t tpu_kernel_convolution(const tpu_conv_attrs_t *attrs, const tpu_buf_t *input,
                                    const tpu_buf_t *kernel, const tpu_buf_t *out,
                                    tpu_pool_t *pool) {
  static const char *what = "convolution";
  conv_shape s;
  tpu_gemm_t g;
  memset(&g, 0, sizeof g);
  TPU_RETURN_IF_ERROR(conv_check(what, attrs, input, kernel, out, &s, &g.plan));
  const tpu_conv_attrs_t *a = attrs;
  int ns = s.ns;
  int64_t onumel = 1;
  for (int i = 0; i < out->rank; i++) onumel *= out->dims[i];
  if (onumel == 0) return TPU_OK;

  /* in': the input itself (origin moved by negative padding) or a padded, dilated copy */
  bool direct = true;
  for (int i = 0; i < ns; i++) {
    direct = direct && a->lhs_dilation[i] == 1 && a->pad_lo[i] <= 0 && a->pad_hi[i] <= 0;
  }
  const char *src = input->data;
  char *padded = NULL;
  int64_t sb, sf, ssp[3], origin = 0;
  if (direct) {
    sb = input->strides[a->in_batch];
    sf = input->strides[a->in_feature];
    for (int i = 0; i < ns; i++) {
      ssp[i] = input->strides[a->in_spatial[i]];
      origin -= a->pad_lo[i] * ssp[i];
    }
  } else {
    int64_t pdims[5] = {s.n, s.c, 1, 1, 1};
    size_t bytes = tpu_dtype_size(input->dtype);
    bool ok = true;
    for (int i = 0; i < ns; i++) {
      int64_t isz = s.in_sp[i];
      int64_t p = isz > 0 ? (isz - 1) * a->lhs_dilation[i] + 1 : 0;
      p += a->pad_lo[i] + a->pad_hi[i]; /* conv_check bounded these */
      pdims[2 + i] = p < 0 ? 0 : p;
    }
    for (int i = 0; i < ns + 2; i++) ok = ok && tpu_size_mul(bytes, (size_t)pdims[i], &bytes);
    if (!ok) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: padded input overflows", what);
    padded = calloc(1, bytes ? bytes : 1);
    if (!padded) {
      return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "%s: no host memory for %zu bytes", what, bytes);
    }
    pad_copy(a, &s, input, pdims, padded);
    src = padded;
    ssp[ns - 1] = 1;
    for (int i = ns - 2; i >= 0; i--) ssp[i] = ssp[i + 1] * pdims[3 + i];
    sf = ssp[0] * pdims[2];
    sb = sf * s.c;
  }

  /* groups: input batch (batch groups) or input features (feature groups) per group */
  int64_t in_gstride = a->batch_group_count > 1 ? s.nout * sb : s.cg * sf;
  int64_t kd[4], ks[4], id[4], is[4], nd[4], nst[4], od[4], os[4];
  kd[0] = id[0] = s.cg;
  ks[0] = kernel->strides[a->k_in_feature];
  is[0] = sf;
  nd[0] = od[0] = s.nout;
  nst[0] = sb;
  os[0] = out->strides[a->out_batch];
  for (int i = 0; i < ns; i++) {
    kd[1 + i] = id[1 + i] = s.win[i];
    ks[1 + i] = kernel->strides[a->k_spatial[i]];
    is[1 + i] = a->rhs_dilation[i] * ssp[i];
    nd[1 + i] = od[1 + i] = s.out_sp[i];
    nst[1 + i] = a->stride[i] * ssp[i];
    os[1 + i] = out->strides[a->out_spatial[i]];
  }
  /* N = (out batch, out spatial) as one GEMM axis when the images are small; else one
   * GEMM per (image, group), so that output rows stay contiguous and the GEMM writes
   * them directly (with one group the kernel has batch stride 0 and is packed once). */
  int64_t xn = 1;
  for (int i = 0; i < ns; i++) xn *= s.out_sp[i];
  int fold = xn < 256 ? 1 : 0;
  int64_t bdims[2] = {s.nout, s.groups}, ab[2] = {0, s.og * kernel->strides[a->k_out_feature]};
  int64_t bb[2] = {sb, in_gstride},
          cb[2] = {out->strides[a->out_batch], s.og * out->strides[a->out_feature]};
  int nbd = 2 - fold;
  const int64_t *bdp = bdims + fold, *abp = ab + fold, *bbp = bb + fold, *cbp = cb + fold;
  g.what = what;
  g.a.data = kernel->data;
  g.a.dtype = kernel->dtype;
  g.b.data = (char *)src + origin * (int64_t)tpu_dtype_size(input->dtype);
  g.b.dtype = input->dtype;
  g.c.data = out->data;
  g.c.dtype = out->dtype;
  /* the GEMM is kernel (M = og, K) x in' (K, N): swap the plan's operand roles, since
   * the plan was made for (input, kernel) */
  tpu_mxu_plan_t p = g.plan;
  for (int t = 0; t < p.num_passes; t++) {
    g.plan.a_comp[t] = p.b_comp[t];
    g.plan.b_comp[t] = p.a_comp[t];
  }
  int64_t *owned[9] = {NULL};
  struct {
    int n;
    const int64_t *dims, *strides;
    tpu_gemm_axis_t *axis;
  } axes[9] = {
      {nbd, bdp, abp, &g.a.batch},
      {1, &s.og, &kernel->strides[a->k_out_feature], &g.a.rows},
      {1 + ns, kd, ks, &g.a.cols},
      {nbd, bdp, bbp, &g.b.batch},
      {1 + ns, id, is, &g.b.rows},
      {ns + fold, nd + 1 - fold, nst + 1 - fold, &g.b.cols},
      {nbd, bdp, cbp, &g.c.batch},
      {1, &s.og, &out->strides[a->out_feature], &g.c.rows},
      {ns + fold, od + 1 - fold, os + 1 - fold, &g.c.cols},
  };
  tpu_status_t st = TPU_OK;
  for (int i = 0; i < 9 && st == TPU_OK; i++) {
    st =
        tpu_gemm_axis_make(what, axes[i].n, axes[i].dims, axes[i].strides, axes[i].axis, &owned[i]);
  }
  if (st == TPU_OK) st = tpu_gemm_run(&g, pool);
  for (int i = 0; i < 9; i++) free(owned[i]);
  free(padded);
  return st;
}

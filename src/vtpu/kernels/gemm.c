/* gemm.c: the MXU engine's driver (see gemm.h): numerics plans, strided axes, the
 * portable panel packer and micro-kernel, the blocked multi-threaded GEMM loop, the f64
 * path and the naive reference GEMM.
 *
 * Loop structure of tpu_gemm_run (BLIS-style, with the packing hoisted out):
 *
 *   for each group of batches (packed bytes bounded by kGroupBytes):
 *     pack every A panel (mr rows x all of K') and B panel (nr cols x all of K')  [parallel]
 *       (panel by panel, or k chunk by k chunk along whole source rows when the
 *        source is contiguous along M / N: reads then stream through memory)
 *     for each task (batch, nc-block of N, mc-block of M)                          [parallel]
 *       for pc over K' in kc steps          (B micro-panel kc x nr stays in L1)
 *         for jr over the nc block by nr    (A block mc x kc stays in L2)
 *           for ir over the mc block by mr: micro-kernel on an (mr, nr) tile of C
 *
 * With one helper (a thread waiting in synchronize) and one batch, the two threads instead
 * claim parts of C and pack privately what each part reads (see "private packing").
 * An operand whose batch stride is 0 (the same matrix in every batch, e.g. a conv kernel
 * over images) is packed once. C tiles go straight to the output when it is f32 with unit
 * column stride; otherwise a task accumulates into an f32 scratch tile and rounds it once
 * into C at the end. Packed panels and scratch tiles live in a per-thread workspace.
 * Batches of small matrices on AVX512-BF16 skip all this for gemm_small_avx512.c, and small
 * and mid-size products on the AVX2 kernel for gemm_direct_avx2.c.
 */
#include "gemm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "gemm_kernels.h"

/* ---- numerics plan ----------------------------------------------------------------- */

static bool mxu_dtype_ok(tpu_dtype_t dt) {
  return dt == TPU_F32 || dt == TPU_BF16 || dt == TPU_F16 || dt == TPU_F64;
}

tpu_status_t tpu_mxu_plan_make(const char *what, tpu_dtype_t a, tpu_dtype_t b, tpu_dtype_t out,
                               tpu_precision_t precision, tpu_mxu_plan_t *out_plan) {
  if (!mxu_dtype_ok(a) || !mxu_dtype_ok(b) || !mxu_dtype_ok(out)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "%s: unsupported dtypes %s x %s -> %s (f32, bf16, f16, f64 only)", what,
                          tpu_dtype_name(a), tpu_dtype_name(b), tpu_dtype_name(out));
  }
  if (precision != TPU_PRECISION_DEFAULT && precision != TPU_PRECISION_HIGH &&
      precision != TPU_PRECISION_HIGHEST) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: bad precision %d", what, (int)precision);
  }
  tpu_mxu_plan_t p;
  memset(&p, 0, sizeof p);
  p.num_passes = 1;
  if (a == TPU_F64 || b == TPU_F64) {
    p.mode = TPU_MXU_F64;
  } else if (a == TPU_F16 || b == TPU_F16 ||
             (precision == TPU_PRECISION_HIGHEST && (a == TPU_F32 || b == TPU_F32))) {
    p.mode = TPU_MXU_F32;
  } else {
    /* bf16 passes: hi*hi [, hi*lo, lo*hi] (components 0, 1 lo, 2 cross-pass hi; gemm.h),
     * keeping those whose components can be nonzero (a bf16 operand has no low part). */
    static const int8_t kA[3] = {0, 2, 1}, kB[3] = {0, 1, 2};
    int terms = precision == TPU_PRECISION_HIGH ? 3 : 1;
    p.mode = TPU_MXU_BF16;
    p.num_passes = 0;
    for (int t = 0; t < terms; t++) {
      if ((kA[t] != 1 || a == TPU_F32) && (kB[t] != 1 || b == TPU_F32)) {
        p.a_comp[p.num_passes] = kA[t];
        p.b_comp[p.num_passes] = kB[t];
        p.num_passes++;
      }
    }
  }
  *out_plan = p;
  return TPU_OK;
}

/* ---- axes ----------------------------------------------------------------------------- */

tpu_status_t tpu_gemm_axis_make(const char *what, int n, const int64_t *dims,
                                const int64_t *strides, tpu_gemm_axis_t *out_axis,
                                int64_t **owned) {
  *owned = NULL;
  int64_t size = 1;
  for (int i = 0; i < n; i++) {
    if (dims[i] < 0 || __builtin_mul_overflow(size, dims[i], &size)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: dimension sizes overflow", what);
    }
  }
  /* Merge dims from the innermost out: dim i folds into the running stride when
   * stride[i] == stride[i+1] * dims[i+1]; size-1 dims never matter. */
  int64_t stride = 0, span = 1, merged; /* span: elements covered by the merged inner dims */
  bool affine = true, have = false;
  for (int i = n - 1; i >= 0; i--) {
    if (dims[i] == 1) continue;
    if (!have) {
      stride = strides[i];
      span = dims[i];
      have = true;
    } else if (!__builtin_mul_overflow(stride, span, &merged) && strides[i] == merged) {
      span *= dims[i];
    } else {
      affine = false;
      break;
    }
  }
  out_axis->size = size;
  if (affine || size == 0) {
    out_axis->stride = have ? stride : 0;
    out_axis->offsets = NULL;
    return TPU_OK;
  }
  size_t bytes;
  if (!tpu_size_mul((size_t)size, sizeof(int64_t), &bytes)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: index table overflows", what);
  }
  int64_t *off = malloc(bytes);
  if (!off) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "%s: no host memory for %zu bytes", what, bytes);
  }
  /* row-major walk of the multi-index, offset updated incrementally */
  int64_t idx[TPU_MAX_RANK] = {0}, cur = 0;
  for (int64_t j = 0; j < size; j++) {
    off[j] = cur;
    for (int d = n - 1; d >= 0; d--) {
      if (++idx[d] < dims[d]) {
        cur += strides[d];
        break;
      }
      cur -= strides[d] * (dims[d] - 1);
      idx[d] = 0;
    }
  }
  out_axis->stride = 0;
  out_axis->offsets = off;
  *owned = off;
  return TPU_OK;
}

/* ---- portable packer ------------------------------------------------------------------- */

#define GEMM_MAX_WIDTH 64

void tpu_gemm_pack_panel(tpu_gemm_format_t format, const tpu_gemm_panel_src_t *src, int64_t w0,
                         int width, int64_t kpass, int64_t kb, int64_t ke, void *dst) {
  const tpu_gemm_axis_t *wax = src->w, *kax = src->k;
  int64_t K = kax->size;
  int wn = (int)(wax->size - w0 < width ? wax->size - w0 : width); /* valid rows */
  int64_t woff[GEMM_MAX_WIDTH];
  for (int i = 0; i < wn; i++) woff[i] = tpu_gemm_axis_offset(wax, w0 + i);
  int64_t kv = ke < K ? ke : K; /* source rows end here; zeros after */

  if (format == TPU_GEMM_FORMAT_F32) {
    float *d = dst; /* (passes * kpass, width) */
    for (int p = 0; p < src->num_passes; p++) {
      int c = src->comp ? src->comp[p] : -1;
      float *dp = d + (int64_t)p * kpass * width;
      bool raw_f32 = src->dtype == TPU_F32 && c < 0;
      if (raw_f32 && !wax->offsets && wax->stride == 1) {
        for (int64_t k = kb; k < kv; k++) { /* rows of the source are contiguous */
          const float *s = (const float *)src->data + w0 + tpu_gemm_axis_offset(kax, k);
          float *row = dp + k * width;
          for (int i = 0; i < wn; i++) row[i] = s[i];
          for (int i = wn; i < width; i++) row[i] = 0.0f;
        }
      } else if (raw_f32 && !tpu_gemm_panel_reads_rows(src)) {
        for (int i = 0; i < width; i++) { /* columns of the source are contiguous */
          const float *s = (const float *)src->data + (i < wn ? woff[i] : 0);
          for (int64_t k = kb; k < kv; k++) dp[k * width + i] = i < wn ? s[k] : 0.0f;
        }
      } else {
        for (int64_t k = kb; k < kv; k++) {
          int64_t koff = tpu_gemm_axis_offset(kax, k);
          float *row = dp + k * width;
          for (int i = 0; i < wn; i++) {
            float x = tpu_mxu_load_f32(src->data, src->dtype, woff[i] + koff);
            row[i] = c < 0 ? x : tpu_mxu_component(x, c);
          }
          for (int i = wn; i < width; i++) row[i] = 0.0f;
        }
      }
      for (int64_t k = kv > kb ? kv : kb; k < ke; k++) {
        for (int i = 0; i < width; i++) dp[k * width + i] = 0.0f;
      }
    }
    return;
  }

  uint16_t *d = dst; /* (passes * kpass / 2, width, 2) */
  for (int p = 0; p < src->num_passes; p++) {
    int c = src->comp[p];
    for (int64_t k = kb; k < ke; k++) {
      int64_t kk = (int64_t)p * kpass + k;
      uint16_t *slot = d + (kk >> 1) * width * 2 + (kk & 1);
      if (k >= K) {
        for (int i = 0; i < width; i++) slot[2 * i] = 0;
        continue;
      }
      int64_t koff = tpu_gemm_axis_offset(kax, k);
      for (int i = 0; i < wn; i++) {
        float x = tpu_mxu_load_f32(src->data, src->dtype, woff[i] + koff);
        slot[2 * i] = tpu_f32_to_bf16(tpu_mxu_component(x, c));
      }
      for (int i = wn; i < width; i++) slot[2 * i] = 0;
    }
  }
}

/* ---- portable micro-kernel: (4, 16) f32, mul then add ----------------------------------- */

static void ukernel_portable(int64_t ksteps, const void *a_, const void *b_, float *c, int64_t ldc,
                             bool accumulate) {
  const float *a = a_; /* (ksteps, 4) */
  const float *b = b_; /* (ksteps, 16) */
  float t[4][16];
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 16; j++) t[i][j] = accumulate ? c[i * ldc + j] : 0.0f;
  }
  for (int64_t p = 0; p < ksteps; p++) {
    for (int i = 0; i < 4; i++) {
      float ai = a[p * 4 + i];
      for (int j = 0; j < 16; j++) t[i][j] += ai * b[p * 16 + j];
    }
  }
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 16; j++) c[i * ldc + j] = t[i][j];
  }
}

const tpu_gemm_kernel_t tpu_gemm_kernel_portable = {
    "portable", TPU_GEMM_FORMAT_F32, 4, 16, 256, 64, 256, ukernel_portable, NULL, NULL, NULL,
    NULL, NULL,
};

static const tpu_gemm_kernel_t *pick_kernel(tpu_mxu_mode_t mode) {
  const tpu_cpu_features_t *f = tpu_cpu_features();
  if (tpu_gemm_have_x86_kernels()) {
    if (mode == TPU_MXU_BF16 && f->avx512_bf16 && f->avx512f) return &tpu_gemm_kernel_avx512_bf16;
    if (f->avx512f) return &tpu_gemm_kernel_avx512;
    if (f->avx2_fma) return &tpu_gemm_kernel_avx2;
  }
  return &tpu_gemm_kernel_portable;
}

/* ---- the blocked driver ------------------------------------------------------------------- */

static const size_t kGroupBytes = (size_t)16 << 20;  /* packed A + B per batch group */
/* Multiply-adds below which no worker is woken (a wake-up costs more than it saves); from
 * kHelperSmall (the small-matrix path: batches of tiny products) or kHelperWork (the
 * blocked driver: two joins per group) helpers already spinning in the pool still share
 * the work. */
static const int64_t kSerialWork = (int64_t)1 << 24;
static const int64_t kHelperWork = (int64_t)1 << 20;
static const int64_t kHelperSmall = (int64_t)1 << 18;
static const int64_t kPackChunk = 64;                /* k per packing item (even) */

typedef struct gemm_ctx {
  const tpu_gemm_t *g;
  const tpu_gemm_kernel_t *kern;
  int64_t M, N, K;
  int passes;
  int64_t kpass, ksteps; /* K per pass as packed; packed k steps in all */
  int64_t mpanels, npanels;
  size_t a_bytes, b_bytes;  /* packed bytes per batch */
  bool a_shared, b_shared;  /* same matrix in every batch (batch stride 0): packed once */
  int64_t pack_na, pack_nb; /* batches of A and B that the current group packs */
  bool a_by_k, b_by_k;      /* packed k chunk by k chunk (else panel by panel) */
  int64_t a_items, b_items; /* packing items per batch */
  char *apk, *bpk;          /* (group, mpanels, ksteps, mr) / (group, npanels, ksteps, nr) */
  int64_t b0, nb;           /* the current batch group */
  int64_t mc, nc;                /* rows and columns of C per task: kern->mc and kern->nc,
                                    or fewer to split the work (task_grid) */
  int64_t nic, njc, ntasks;
  bool direct;                   /* C tiles written straight into the output */
  float *scratch;                /* (slots, mc, nc) C tiles when not direct */
  int64_t nitems;                /* packing items in the current group */
  atomic_int_fast64_t next_item; /* the next packing item to claim */
  atomic_int_fast64_t next_task;
} gemm_ctx;

static int64_t boff(const tpu_gemm_matrix_t *m, int64_t b) {
  return tpu_gemm_axis_offset(&m->batch, b);
}

static const void *elem_ptr(const tpu_gemm_matrix_t *m, int64_t off) {
  return (const char *)m->data + off * (int64_t)tpu_dtype_size(m->dtype);
}

/* Packs the k range [kb, ke) of panel |panel| of A (is_a) or B for local batch |bl| into
 * the operand's packed panels at |base| (the batch's). */
static void pack_one(const gemm_ctx *x, char *base, bool is_a, int64_t bl, int64_t panel,
                     int64_t kb, int64_t ke) {
  const tpu_gemm_t *g = x->g;
  const tpu_gemm_kernel_t *kern = x->kern;
  const tpu_gemm_matrix_t *m = is_a ? &g->a : &g->b;
  int width = is_a ? kern->mr : kern->nr;
  tpu_gemm_panel_src_t src;
  src.data = elem_ptr(m, boff(m, x->b0 + bl));
  src.dtype = m->dtype;
  src.w = is_a ? &g->a.rows : &g->b.cols;
  src.k = is_a ? &g->a.cols : &g->b.rows;
  src.num_passes = x->passes;
  src.comp = g->plan.mode == TPU_MXU_BF16 ? (is_a ? g->plan.a_comp : g->plan.b_comp) : NULL;
  char *dst = base + (size_t)panel * (size_t)x->ksteps * (size_t)width * 4;
  int64_t w0 = panel * width;
  if (kern->pack_panel && kern->pack_panel(&src, w0, width, x->kpass, kb, ke, dst)) return;
  tpu_gemm_pack_panel(kern->format, &src, w0, width, x->kpass, kb, ke, dst);
}

/* The k range [kb, ke) of panels [p0, p1) of A or B at once, along whole source rows, into
 * the operand's packed panels at |base| (the batch's); false when the packer does not apply
 * (nothing written). */
static bool pack_rows(const gemm_ctx *x, char *base, bool is_a, int64_t bl, int64_t p0,
                      int64_t p1, int64_t kb, int64_t ke) {
  const tpu_gemm_t *g = x->g;
  const tpu_gemm_matrix_t *m = is_a ? &g->a : &g->b;
  int width = is_a ? x->kern->mr : x->kern->nr;
  const tpu_gemm_axis_t *w = is_a ? &g->a.rows : &g->b.cols;
  tpu_gemm_axis_t part = {w->size - p0 * width, w->stride, NULL}; /* from panel p0 on */
  if (p0 > 0 && w->offsets) return false;
  tpu_gemm_panel_src_t src;
  src.data = elem_ptr(m, boff(m, x->b0 + bl) + p0 * width * w->stride);
  src.dtype = m->dtype;
  src.w = p0 > 0 ? &part : w;
  src.k = is_a ? &g->a.cols : &g->b.rows;
  src.num_passes = x->passes;
  src.comp = g->plan.mode == TPU_MXU_BF16 ? (is_a ? g->plan.a_comp : g->plan.b_comp) : NULL;
  char *dst = base + (size_t)p0 * (size_t)x->ksteps * (size_t)width * 4;
  return x->kern->pack_rows(&src, width, p1 - p0, x->kpass, kb, ke, dst, x->ksteps * width);
}

static bool w_unit(const tpu_gemm_axis_t *ax) { return !ax->offsets && ax->stride == 1; }

/* Packs the k range [kb, ke) of panels [p0, p1) of A (is_a) or B for local batch |bl|
 * into |base| (the batch's packed panels): along whole source rows when the operand is
 * packed k chunk by k chunk and the packer applies, else panel by panel. */
static void pack_panels(const gemm_ctx *x, char *base, bool is_a, int64_t bl, int64_t p0,
                        int64_t p1, int64_t kb, int64_t ke) {
  if (p0 >= p1) return;
  if ((is_a ? x->a_by_k : x->b_by_k) && x->kern->pack_rows &&
      pack_rows(x, base, is_a, bl, p0, p1, kb, ke)) {
    return;
  }
  for (int64_t p = p0; p < p1; p++) pack_one(x, base, is_a, bl, p, kb, ke);
}

/* Packing items: per batch, either one per panel (all of K) or, for an operand read along
 * its rows (tpu_gemm_panel_reads_rows), one per k chunk across all its panels. */
static void pack_slot(void *arg, int64_t begin, int64_t end) {
  gemm_ctx *x = arg;
  (void)begin, (void)end;
  for (;;) { /* items differ in cost: claim them one at a time */
    int64_t it = atomic_fetch_add(&x->next_item, 1);
    if (it >= x->nitems) break;
    bool is_a = it < x->pack_na * x->a_items;
    int64_t j = is_a ? it : it - x->pack_na * x->a_items;
    int64_t per = is_a ? x->a_items : x->b_items;
    int64_t bl = j / per, r = j % per;
    char *base = is_a ? x->apk + (size_t)bl * x->a_bytes : x->bpk + (size_t)bl * x->b_bytes;
    if (!(is_a ? x->a_by_k : x->b_by_k)) {
      pack_one(x, base, is_a, bl, r, 0, x->kpass);
      continue;
    }
    int64_t kb = r * kPackChunk, ke = kb + kPackChunk < x->kpass ? kb + kPackChunk : x->kpass;
    pack_panels(x, base, is_a, bl, 0, is_a ? x->mpanels : x->npanels, kb, ke);
  }
}

/* Rounds an (mn, nn) f32 tile (row stride ld) into C at rows i0.., cols j0.. of batch b. */
static void store_tile(const tpu_gemm_t *g, int64_t b, int64_t i0, int64_t j0, int64_t mn,
                       int64_t nn, const float *t, int64_t ld) {
  const tpu_gemm_matrix_t *c = &g->c;
  int64_t base = boff(c, b);
  for (int64_t i = 0; i < mn; i++) {
    int64_t ro = base + tpu_gemm_axis_offset(&c->rows, i0 + i);
    if (c->dtype == TPU_F32) { /* the common case: f32 through strides or a table */
      float *cf = (float *)c->data + ro;
      const float *ti = t + i * ld;
      if (c->cols.offsets) {
        const int64_t *off = c->cols.offsets + j0;
        for (int64_t j = 0; j < nn; j++) cf[off[j]] = ti[j];
      } else {
        int64_t s = c->cols.stride;
        cf += j0 * s;
        for (int64_t j = 0; j < nn; j++) cf[j * s] = ti[j];
      }
      continue;
    }
    for (int64_t j = 0; j < nn; j++) {
      tpu_mxu_store_f32(c->data, c->dtype, ro + tpu_gemm_axis_offset(&c->cols, j0 + j),
                        t[i * ld + j]);
    }
  }
}

/* c[i][j] += bias[j] on a finished tile of f32 C (the kernel's vector loop, else this). */
static void add_bias(const tpu_gemm_kernel_t *kern, float *c, int64_t ldc, int rows, int cols,
                     const float *bias) {
  if (kern->add_bias) {
    kern->add_bias(c, ldc, rows, cols, bias);
    return;
  }
  for (int i = 0; i < rows; i++) {
    for (int j = 0; j < cols; j++) c[i * ldc + j] += bias[j];
  }
}

/* C block rows [i0, i0 + mcur) x cols [j0, j0 + ncur) (multiples of mr and nr from 0) of
 * local batch |bl|, from the batch's packed panels at |ab| and |bb|; |scratch|: an (mc, nc)
 * f32 tile when C is not written directly. With g->bias, each tile gets it after its last
 * k block. */
static void run_block(const gemm_ctx *x, const char *ab, const char *bb, int64_t bl, int64_t i0,
                      int64_t j0, int64_t mcur, int64_t ncur, float *scratch) {
  const tpu_gemm_t *g = x->g;
  const tpu_gemm_kernel_t *kern = x->kern;
  const int mr = kern->mr, nr = kern->nr;
  int64_t b = x->b0 + bl;
  float *cbase;
  int64_t ldc;
  if (x->direct) {
    ldc = g->c.rows.stride;
    cbase = (float *)g->c.data + boff(&g->c, b) + i0 * ldc + j0;
  } else {
    ldc = ncur;
    cbase = scratch;
  }
  float edge[GEMM_MAX_WIDTH * GEMM_MAX_WIDTH]; /* (mr, nr), row stride nr */
  memset(edge, 0, (size_t)mr * (size_t)nr * sizeof(float));
  for (int64_t pc = 0; pc < x->ksteps; pc += kern->kc) {
    int64_t kcur = x->ksteps - pc < kern->kc ? x->ksteps - pc : kern->kc;
    bool acc = pc > 0;
    /* the bias goes onto each tile after its last k block, while the tile is in L1 */
    const float *bias = g->bias && pc + kcur == x->ksteps ? g->bias + j0 : NULL;
    for (int64_t jr = 0; jr < ncur; jr += nr) {
      const char *bp = bb + ((size_t)((j0 + jr) / nr) * (size_t)x->ksteps + (size_t)pc) * nr * 4;
      int nn = (int)(ncur - jr < nr ? ncur - jr : nr);
      for (int64_t ir = 0; ir < mcur; ir += mr) {
        const char *ap = ab + ((size_t)((i0 + ir) / mr) * (size_t)x->ksteps + (size_t)pc) * mr * 4;
        int mn = (int)(mcur - ir < mr ? mcur - ir : mr);
        float *ct = cbase + ir * ldc + jr;
        if (mn == mr && nn == nr && bias && kern->ukernel_bias) {
          kern->ukernel_bias(kcur, ap, bp, ct, ldc, acc, bias + jr);
          continue; /* the bias is on */
        }
        if (mn == mr && nn == nr) {
          kern->ukernel(kcur, ap, bp, ct, ldc, acc);
        } else if (nn == nr && kern->ukernel_rows) { /* the panel's last rows, in place */
          kern->ukernel_rows(mn, kcur, ap, bp, ct, ldc, acc);
        } else {
          /* edge tile through a local (mr, nr) tile; its rows and columns past the edge
           * hold whatever the zero-padded panels produce and are never copied back */
          if (acc) {
            for (int i = 0; i < mn; i++) memcpy(edge + i * nr, ct + i * ldc, (size_t)nn * 4);
          }
          kern->ukernel(kcur, ap, bp, edge, nr, acc);
          for (int i = 0; i < mn; i++) memcpy(ct + i * ldc, edge + i * nr, (size_t)nn * 4);
        }
        if (bias) add_bias(kern, ct, ldc, mn, nn, bias + jr);
      }
    }
  }
  if (!x->direct) store_tile(g, b, i0, j0, mcur, ncur, scratch, ldc);
}

static void run_task(gemm_ctx *x, int64_t task, float *scratch) {
  int64_t ic = task % x->nic, rest = task / x->nic;
  int64_t jc = rest % x->njc, bl = rest / x->njc;
  int64_t i0 = ic * x->mc, j0 = jc * x->nc;
  int64_t mcur = x->M - i0 < x->mc ? x->M - i0 : x->mc;
  int64_t ncur = x->N - j0 < x->nc ? x->N - j0 : x->nc;
  const char *ab = x->apk + (x->a_shared ? 0 : (size_t)bl * x->a_bytes);
  const char *bb = x->bpk + (x->b_shared ? 0 : (size_t)bl * x->b_bytes);
  run_block(x, ab, bb, bl, i0, j0, mcur, ncur, scratch);
}

/* One worker slot (begin = slot index): claims tasks until none are left. */
static void compute_slot(void *arg, int64_t begin, int64_t end) {
  gemm_ctx *x = arg;
  (void)end;
  float *scratch = x->scratch ? x->scratch + begin * x->mc * x->nc : NULL;
  for (;;) {
    int64_t t = atomic_fetch_add(&x->next_task, 1);
    if (t >= x->ntasks) break;
    run_task(x, t, scratch);
  }
}

/* ---- private packing: a thread and one helper --------------------------------------------- */

/* With one helper and one batch, C is cut into parts along N (the columns of B; A is
 * packed whole by each thread) or along M when B is the cheaper operand to pack twice. The
 * two threads claim parts one at a time; each packs what a part reads into its own
 * thread's workspace (the whole other operand once, on its first part) and computes the
 * part's blocks. Nothing packed is shared: sharing packed panels made each split GEMM move
 * them between the cores' caches every call (a panel one core packed the other read, and
 * rewrote on the next call), which cost packing 3-4x its one-thread time. Claimed parts,
 * not halves, so that a helper that joins late still takes some. Same blocks, same bits. */
typedef struct private_parts {
  const gemm_ctx *x;
  bool along_n;      /* parts of B's panels (else of A's) */
  int64_t parts;
  size_t a_bytes, b_bytes, bytes; /* aligned packed A and B, and the whole workspace */
  atomic_int_fast64_t next_part;
  atomic_bool failed;
} private_parts_t;

/* Packs and computes part |part| with the thread's packed panels at |apk| and |bpk|. */
static void run_part(const private_parts_t *h, int64_t part, char *apk, char *bpk,
                     float *scratch) {
  const gemm_ctx *x = h->x;
  const tpu_gemm_kernel_t *kern = x->kern;
  int64_t panels = h->along_n ? x->npanels : x->mpanels;
  int64_t q0 = part * panels / h->parts, q1 = (part + 1) * panels / h->parts;
  pack_panels(x, h->along_n ? bpk : apk, !h->along_n, 0, q0, q1, 0, x->kpass);
  int64_t i_lo = 0, i_hi = x->M, j_lo = 0, j_hi = x->N;
  if (h->along_n) {
    j_lo = q0 * kern->nr;
    j_hi = q1 * kern->nr < x->N ? q1 * kern->nr : x->N;
  } else {
    i_lo = q0 * kern->mr;
    i_hi = q1 * kern->mr < x->M ? q1 * kern->mr : x->M;
  }
  for (int64_t i0 = i_lo; i0 < i_hi; i0 += kern->mc) {
    for (int64_t j0 = j_lo; j0 < j_hi; j0 += kern->nc) {
      int64_t mcur = i_hi - i0 < kern->mc ? i_hi - i0 : kern->mc;
      int64_t ncur = j_hi - j0 < kern->nc ? j_hi - j0 : kern->nc;
      run_block(x, apk, bpk, 0, i0, j0, mcur, ncur, scratch);
    }
  }
}

/* One thread's share: parts claimed until none are left. */
static void private_slot(void *arg, int64_t begin, int64_t end) {
  (void)begin, (void)end;
  private_parts_t *h = arg;
  const gemm_ctx *x = h->x;
  tpu_gemm_ws_t *cache = NULL;
  char *ws = NULL;
  for (;;) {
    int64_t part = atomic_fetch_add(&h->next_part, 1);
    if (part >= h->parts) break;
    if (!ws) { /* the first part: the workspace, and the operand every part reads */
      ws = tpu_gemm_workspace_get(h->bytes, &cache);
      if (!ws) {
        atomic_store(&h->failed, true);
        return;
      }
      if (h->along_n) pack_panels(x, ws, true, 0, 0, x->mpanels, 0, x->kpass);
      else pack_panels(x, ws + h->a_bytes, false, 0, 0, x->npanels, 0, x->kpass);
    }
    run_part(h, part, ws, ws + h->a_bytes,
             x->direct ? NULL : (float *)(ws + h->a_bytes + h->b_bytes));
  }
  if (ws) tpu_gemm_workspace_put(ws, cache);
}

static tpu_status_t run_private(const gemm_ctx *x, const tpu_gemm_team_t *team, size_t a_bytes,
                                size_t b_bytes) {
  private_parts_t h = {.x = x};
  /* pack the cheaper operand twice; parts need panels to cut */
  h.along_n = x->npanels >= 2 && (x->M <= x->N || x->mpanels < 2);
  int64_t panels = h.along_n ? x->npanels : x->mpanels;
  h.parts = panels < 8 ? panels : 8;
  size_t sbytes = x->direct ? 0 : (size_t)x->kern->mc * (size_t)x->kern->nc * 4;
  if (!tpu_size_align_up(a_bytes, 64, &h.a_bytes) || !tpu_size_align_up(b_bytes, 64, &h.b_bytes) ||
      !tpu_size_add(h.a_bytes, h.b_bytes, &h.bytes) || !tpu_size_add(h.bytes, sbytes, &h.bytes)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: workspace overflows", x->g->what);
  }
  atomic_init(&h.next_part, 0);
  atomic_init(&h.failed, false);
  tpu_gemm_team_for(team, 2, 1, private_slot, &h);
  if (atomic_load(&h.failed)) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "%s: no host memory for %zu bytes of packed "
                          "operands", x->g->what, h.bytes);
  }
  return TPU_OK;
}

/* ---- workspace: packed panels and C tiles, kept per calling thread ------------------------ */

/* Fresh multi-megabyte allocations cost a page fault per 4 KiB on every call (about 5% of
 * a 1024^3 matmul), so each thread that runs GEMMs keeps its last workspace up to
 * kCacheBytes; it is freed when the thread exits. */
static const size_t kCacheBytes = (size_t)32 << 20;

struct tpu_gemm_ws {
  void *ptr;
  size_t size;
  bool busy;
};

static pthread_key_t g_ws_key;
static pthread_once_t g_ws_once = PTHREAD_ONCE_INIT;
static bool g_ws_ok;

static void ws_destroy(void *arg) {
  tpu_gemm_ws_t *w = arg;
  free(w->ptr);
  free(w);
}

static void ws_init(void) { g_ws_ok = pthread_key_create(&g_ws_key, ws_destroy) == 0; }

void *tpu_gemm_workspace_get(size_t size, tpu_gemm_ws_t **out_cache) {
  *out_cache = NULL;
  pthread_once(&g_ws_once, ws_init);
  if (g_ws_ok && size <= kCacheBytes) {
    tpu_gemm_ws_t *w = pthread_getspecific(g_ws_key);
    if (!w && (w = calloc(1, sizeof *w)) != NULL && pthread_setspecific(g_ws_key, w) != 0) {
      free(w);
      w = NULL;
    }
    if (w && !w->busy) {
      if (w->size < size) {
        free(w->ptr);
        w->ptr = aligned_alloc(64, size);
        w->size = w->ptr ? size : 0;
      }
      if (w->ptr) {
        w->busy = true;
        *out_cache = w;
        return w->ptr;
      }
    }
  }
  return aligned_alloc(64, size);
}

void tpu_gemm_workspace_put(void *p, tpu_gemm_ws_t *w) {
  if (w) {
    w->busy = false;
  } else {
    free(p);
  }
}

/* C += bias on every row, for the paths that do not add it per tile (f64, K = 0, the
 * small-matrix path). */
static void add_bias_rows(const tpu_gemm_t *g) {
  float *c = g->c.data;
  const bool unit = !g->c.cols.offsets && g->c.cols.stride == 1; /* rows contiguous */
  for (int64_t b = 0; b < g->c.batch.size; b++) {
    for (int64_t i = 0; i < g->c.rows.size; i++) {
      int64_t ro = boff(&g->c, b) + tpu_gemm_axis_offset(&g->c.rows, i);
      if (unit) {
        float *row = c + ro;
        for (int64_t j = 0; j < g->c.cols.size; j++) row[j] += g->bias[j];
        continue;
      }
      for (int64_t j = 0; j < g->c.cols.size; j++) {
        c[ro + tpu_gemm_axis_offset(&g->c.cols, j)] += g->bias[j];
      }
    }
  }
}

static tpu_status_t gemm_zero(const tpu_gemm_t *g) {
  for (int64_t b = 0; b < g->c.batch.size; b++) {
    for (int64_t i = 0; i < g->c.rows.size; i++) {
      int64_t ro = boff(&g->c, b) + tpu_gemm_axis_offset(&g->c.rows, i);
      for (int64_t j = 0; j < g->c.cols.size; j++) {
        tpu_mxu_store_f64(g->c.data, g->c.dtype, ro + tpu_gemm_axis_offset(&g->c.cols, j), 0.0);
      }
    }
  }
  return TPU_OK;
}

/* f64: one output row per item, accumulated in f64 in k order. */
typedef struct f64_ctx {
  const tpu_gemm_t *g;
  atomic_int failed;
} f64_ctx;

static void f64_rows(void *arg, int64_t begin, int64_t end) {
  f64_ctx *x = arg;
  const tpu_gemm_t *g = x->g;
  int64_t M = g->a.rows.size, N = g->b.cols.size, K = g->a.cols.size;
  double *acc = malloc((size_t)N * sizeof(double));
  if (!acc) {
    atomic_store(&x->failed, 1);
    return;
  }
  bool fast_b = g->b.dtype == TPU_F64 && !g->b.cols.offsets;
  for (int64_t r = begin; r < end; r++) {
    int64_t b = r / M, m = r % M;
    int64_t arow = boff(&g->a, b) + tpu_gemm_axis_offset(&g->a.rows, m);
    int64_t bbase = boff(&g->b, b);
    for (int64_t n = 0; n < N; n++) acc[n] = 0.0;
    for (int64_t k = 0; k < K; k++) {
      double av =
          tpu_mxu_load_f64(g->a.data, g->a.dtype, arow + tpu_gemm_axis_offset(&g->a.cols, k));
      int64_t brow = bbase + tpu_gemm_axis_offset(&g->b.rows, k);
      if (fast_b) {
        const double *bp = (const double *)g->b.data + brow;
        int64_t s = g->b.cols.stride;
        for (int64_t n = 0; n < N; n++) acc[n] += av * bp[n * s];
      } else {
        for (int64_t n = 0; n < N; n++) {
          acc[n] += av * tpu_mxu_load_f64(g->b.data, g->b.dtype,
                                          brow + tpu_gemm_axis_offset(&g->b.cols, n));
        }
      }
    }
    int64_t crow = boff(&g->c, b) + tpu_gemm_axis_offset(&g->c.rows, m);
    for (int64_t n = 0; n < N; n++) {
      tpu_mxu_store_f64(g->c.data, g->c.dtype, crow + tpu_gemm_axis_offset(&g->c.cols, n), acc[n]);
    }
  }
  free(acc);
}

static tpu_status_t gemm_check(const tpu_gemm_t *g) {
  if (g->a.rows.size != g->c.rows.size || g->b.cols.size != g->c.cols.size ||
      g->a.cols.size != g->b.rows.size || g->a.batch.size != g->c.batch.size ||
      g->b.batch.size != g->c.batch.size || g->c.batch.size < 0) {
    return tpu_status_set(TPU_ERR_INTERNAL, "%s: inconsistent GEMM sizes", g->what);
  }
  return TPU_OK;
}

tpu_status_t tpu_gemm_run(const tpu_gemm_t *g, tpu_pool_t *pool) {
  return tpu_gemm_run_kernel(g, pick_kernel(g->plan.mode), pool);
}

static tpu_status_t run_kernel(const tpu_gemm_t *g, const tpu_gemm_kernel_t *kern,
                               tpu_pool_t *pool, bool allow_small);

tpu_status_t tpu_gemm_run_kernel(const tpu_gemm_t *g, const tpu_gemm_kernel_t *kern,
                                 tpu_pool_t *pool) {
  return run_kernel(g, kern, pool, true);
}

tpu_status_t tpu_gemm_run_blocked(const tpu_gemm_t *g, const tpu_gemm_kernel_t *kern,
                                  tpu_pool_t *pool) {
  return run_kernel(g, kern, pool, false);
}

/* Rows and columns of C per task: the kernel's mc x nc block, or smaller (multiples of mr
 * and nr) when |slots| threads would otherwise get fewer than four tasks each (256 x 256 is
 * one block): rows are split first, then columns (a 64-row dW). Tasks split C only by rows
 * and columns, never along K, so every split gives the same bits. |batches|: batches per
 * group, each its own tasks. */
static void task_grid(gemm_ctx *x, int64_t batches, int slots) {
  const tpu_gemm_kernel_t *kern = x->kern;
  x->mc = kern->mc;
  x->nc = kern->nc;
  int64_t want = 4 * (int64_t)slots;
  int64_t col_tasks = (x->N + x->nc - 1) / x->nc * batches;
  if (slots >= 2 && col_tasks < want) {
    int64_t blocks = (want + col_tasks - 1) / col_tasks;
    int64_t rows = ((x->M + blocks - 1) / blocks + kern->mr - 1) / kern->mr * kern->mr;
    if (rows < x->mc) x->mc = rows;
    int64_t row_tasks = (x->M + x->mc - 1) / x->mc * batches;
    if (row_tasks < want) {
      blocks = (want + row_tasks - 1) / row_tasks;
      int64_t cols = ((x->N + blocks - 1) / blocks + kern->nr - 1) / kern->nr * kern->nr;
      if (cols < x->nc) x->nc = cols;
    }
  }
  x->nic = (x->M + x->mc - 1) / x->mc;
  x->njc = (x->N + x->nc - 1) / x->nc;
}

void tpu_gemm_team_for(const tpu_gemm_team_t *team, int64_t n, int64_t grain, tpu_range_fn fn,
                       void *ctx) {
  if (!team) fn(ctx, 0, n);
  else if (team->helpers_only) tpu_pool_parallel_for_helpers(team->pool, n, grain, fn, ctx);
  else tpu_pool_parallel_for(team->pool, n, grain, fn, ctx);
}

static tpu_status_t run_kernel(const tpu_gemm_t *g, const tpu_gemm_kernel_t *kern,
                               tpu_pool_t *pool, bool allow_small) {
  TPU_RETURN_IF_ERROR(gemm_check(g));
  if (g->bias && g->c.dtype != TPU_F32) {
    return tpu_status_set(TPU_ERR_INTERNAL, "%s: a bias needs an f32 result", g->what);
  }
  if (!kern->ukernel || kern->mr > GEMM_MAX_WIDTH || kern->nr > GEMM_MAX_WIDTH ||
      kern->mc % kern->mr != 0 || kern->nc % kern->nr != 0 || kern->kc < 1) {
    return tpu_status_set(TPU_ERR_INTERNAL, "%s: bad GEMM kernel %s", g->what, kern->name);
  }
  int64_t M = g->a.rows.size, N = g->b.cols.size, K = g->a.cols.size;
  if (g->c.batch.size == 0 || M == 0 || N == 0) return TPU_OK;
  if (K == 0) {
    gemm_zero(g);
    if (g->bias) add_bias_rows(g);
    return TPU_OK;
  }
  int64_t work; /* multiply-adds, saturating */
  if (__builtin_mul_overflow(g->c.batch.size, M, &work) || __builtin_mul_overflow(work, N, &work) ||
      __builtin_mul_overflow(work, K, &work)) {
    work = INT64_MAX;
  }
  /* the team: the whole pool from kSerialWork, else the helpers spinning now (from
   * kHelperSmall; the blocked driver from kHelperWork), else this thread alone */
  tpu_gemm_team_t team = {pool, false, tpu_pool_num_threads(pool)};
  if (work < kSerialWork) {
    int helpers = work >= kHelperSmall ? tpu_pool_helpers(pool) : 0;
    team = (tpu_gemm_team_t){helpers ? pool : NULL, true, 1 + helpers};
  }

  if (g->plan.mode == TPU_MXU_F64) {
    f64_ctx fx = {g, 0};
    int64_t rows;
    if (__builtin_mul_overflow(g->c.batch.size, M, &rows)) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: too many rows", g->what);
    }
    int64_t grain = N * K > 0 ? 1 + (team.helpers_only ? kHelperWork : kSerialWork) / (N * K) : 1;
    tpu_gemm_team_for(&team, rows, grain, f64_rows, &fx);
    if (atomic_load(&fx.failed)) {
      return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "%s: no host memory for a row", g->what);
    }
    if (g->bias) add_bias_rows(g);
    return TPU_OK;
  }

  if (allow_small && tpu_gemm_small_run(g, kern, &team)) {
    if (g->bias) add_bias_rows(g);
    return TPU_OK;
  }
  if (allow_small && tpu_gemm_direct_run(g, kern, &team)) return TPU_OK; /* bias added */
  if (team.helpers_only && work < kHelperWork) team = (tpu_gemm_team_t){NULL, true, 1};
  const int slots = team.threads;

  gemm_ctx x;
  memset(&x, 0, sizeof x);
  x.g = g;
  x.kern = kern;
  x.M = M;
  x.N = N;
  x.K = K;
  x.passes = g->plan.mode == TPU_MXU_BF16 ? g->plan.num_passes : 1;
  bool bf16 = kern->format == TPU_GEMM_FORMAT_BF16;
  x.kpass = bf16 ? K + (K & 1) : K;
  if (__builtin_mul_overflow(x.kpass, (int64_t)x.passes, &x.ksteps)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: K too large", g->what);
  }
  if (bf16) x.ksteps /= 2;
  x.mpanels = (M + kern->mr - 1) / kern->mr;
  x.npanels = (N + kern->nr - 1) / kern->nr;
  if (!tpu_size_mul((size_t)x.mpanels * (size_t)kern->mr * 4, (size_t)x.ksteps, &x.a_bytes) ||
      !tpu_size_mul((size_t)x.npanels * (size_t)kern->nr * 4, (size_t)x.ksteps, &x.b_bytes)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: packed operands overflow", g->what);
  }
  x.a_shared = !g->a.batch.offsets && g->a.batch.stride == 0;
  x.b_shared = !g->b.batch.offsets && g->b.batch.stride == 0;
  size_t per_batch = (x.a_shared ? 0 : x.a_bytes) + (x.b_shared ? 0 : x.b_bytes);
  int64_t group = per_batch ? (int64_t)(kGroupBytes / per_batch) : g->c.batch.size;
  if (group < 1) group = 1;
  if (group > g->c.batch.size) group = g->c.batch.size;
  size_t abytes, bbytes;
  if (!tpu_size_mul(x.a_bytes, x.a_shared ? 1 : (size_t)group, &abytes) ||
      !tpu_size_mul(x.b_bytes, x.b_shared ? 1 : (size_t)group, &bbytes)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: packed operands overflow", g->what);
  }
  x.direct =
      g->c.dtype == TPU_F32 && !g->c.cols.offsets && g->c.cols.stride == 1 && !g->c.rows.offsets;
  tpu_gemm_panel_src_t asrc = {NULL, g->a.dtype, &g->a.rows, &g->a.cols, 1, NULL};
  tpu_gemm_panel_src_t bsrc = {NULL, g->b.dtype, &g->b.cols, &g->b.rows, 1, NULL};
  /* an operand read along its rows goes k chunk by k chunk when there are several chunks
   * to share, or when it is contiguous along w (the whole-row packer then sweeps each
   * source row once, instead of a short strided read per panel) */
  int64_t kchunks = (x.kpass + kPackChunk - 1) / kPackChunk;
  x.a_by_k = tpu_gemm_panel_reads_rows(&asrc) && (kchunks > 1 || w_unit(&g->a.rows));
  x.b_by_k = tpu_gemm_panel_reads_rows(&bsrc) && (kchunks > 1 || w_unit(&g->b.cols));
  x.a_items = x.a_by_k ? kchunks : x.mpanels;
  x.b_items = x.b_by_k ? kchunks : x.npanels;
  if (team.helpers_only && slots == 2 && g->c.batch.size == 1 &&
      (x.mpanels >= 2 || x.npanels >= 2)) {
    return run_private(&x, &team, abytes, bbytes);
  }
  size_t sbytes = x.direct ? 0 : (size_t)slots * (size_t)kern->mc * (size_t)kern->nc * 4;
  size_t total;
  if (!tpu_size_align_up(abytes, 64, &abytes) || !tpu_size_align_up(bbytes, 64, &bbytes) ||
      !tpu_size_add(abytes, bbytes, &total) || !tpu_size_add(total, sbytes, &total)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "%s: workspace overflows", g->what);
  }
  tpu_gemm_ws_t *cache;
  char *ws = tpu_gemm_workspace_get(total, &cache);
  if (!ws) {
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY,
                          "%s: no host memory for %zu bytes of packed "
                          "operands",
                          g->what, total);
  }
  x.apk = ws;
  x.bpk = ws + abytes;
  x.scratch = sbytes ? (float *)(ws + abytes + bbytes) : NULL;
  task_grid(&x, group, slots);
  for (int64_t b0 = 0; b0 < g->c.batch.size; b0 += group) {
    x.b0 = b0;
    x.nb = g->c.batch.size - b0 < group ? g->c.batch.size - b0 : group;
    x.pack_na = x.a_shared ? (b0 == 0) : x.nb; /* shared operands: with the first group */
    x.pack_nb = x.b_shared ? (b0 == 0) : x.nb;
    x.nitems = x.pack_na * x.a_items + x.pack_nb * x.b_items;
    atomic_store(&x.next_item, 0);
    tpu_gemm_team_for(&team, slots, 1, pack_slot, &x);
    x.ntasks = x.nb * x.nic * x.njc;
    atomic_store(&x.next_task, 0);
    tpu_gemm_team_for(&team, slots, 1, compute_slot, &x);
  }
  tpu_gemm_workspace_put(ws, cache);
  return TPU_OK;
}

/* ---- naive reference ------------------------------------------------------------------------ */

tpu_status_t tpu_gemm_ref(const tpu_gemm_t *g) {
  TPU_RETURN_IF_ERROR(gemm_check(g));
  int64_t M = g->a.rows.size, N = g->b.cols.size, K = g->a.cols.size;
  const tpu_mxu_plan_t *p = &g->plan;
  for (int64_t b = 0; b < g->c.batch.size; b++) {
    for (int64_t m = 0; m < M; m++) {
      for (int64_t n = 0; n < N; n++) {
        int64_t coff = boff(&g->c, b) + tpu_gemm_axis_offset(&g->c.rows, m) +
                       tpu_gemm_axis_offset(&g->c.cols, n);
        int64_t ar = boff(&g->a, b) + tpu_gemm_axis_offset(&g->a.rows, m);
        int64_t bc = boff(&g->b, b) + tpu_gemm_axis_offset(&g->b.cols, n);
        if (p->mode == TPU_MXU_F64) {
          double acc = 0.0;
          for (int64_t k = 0; k < K; k++) {
            acc +=
                tpu_mxu_load_f64(g->a.data, g->a.dtype, ar + tpu_gemm_axis_offset(&g->a.cols, k)) *
                tpu_mxu_load_f64(g->b.data, g->b.dtype, bc + tpu_gemm_axis_offset(&g->b.rows, k));
          }
          tpu_mxu_store_f64(g->c.data, g->c.dtype, coff, acc);
          continue;
        }
        float acc = 0.0f;
        int passes = p->mode == TPU_MXU_BF16 ? p->num_passes : 1;
        for (int t = 0; t < passes; t++) {
          for (int64_t k = 0; k < K; k++) {
            float av =
                tpu_mxu_load_f32(g->a.data, g->a.dtype, ar + tpu_gemm_axis_offset(&g->a.cols, k));
            float bv =
                tpu_mxu_load_f32(g->b.data, g->b.dtype, bc + tpu_gemm_axis_offset(&g->b.rows, k));
            if (p->mode == TPU_MXU_BF16) {
              av = tpu_mxu_component(av, p->a_comp[t]);
              bv = tpu_mxu_component(bv, p->b_comp[t]);
            }
            acc += av * bv;
          }
        }
        tpu_mxu_store_f32(g->c.data, g->c.dtype, coff, acc);
      }
    }
  }
  return TPU_OK;
}

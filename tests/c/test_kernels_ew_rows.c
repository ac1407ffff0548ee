/* test_kernels_ew_rows.c: the row-wise fast paths of the elementwise kernels against plain
 * scalar loops that walk every element by its index.
 *
 * - the iterator's 2-d segments: short inner runs (1 .. 37 elements, tails that are not a
 *   multiple of any vector width) under transposed, strided, reversed (negative stride)
 *   and broadcast (zero stride, rank 0, rank-4 all-zero) operands, split over a pool;
 * - compare (vec.h compare loops, every direction, f32 and bf16; the typed loops for bool
 *   (true bytes other than 1 included), i8, u8, i32, i64; the block path for f64) with NaN,
 *   +-inf, -0.0 and equal values;
 * - select (vec.h 32-bit select, rows whose pred is broadcast along them, other sizes);
 * - transposed operands (strided along the output's rows, contiguous across them: the tile
 *   gathers of ew_tile.h) in binary and copy, with tiles split over rows and columns;
 * - binary rows with a per-row broadcast value, copy of short rows and of contiguous runs
 *   across permuted outer dims, fill (memset and
 *   pattern values, strided), and AND/OR reductions over contiguous byte rows vs tpu_ref_reduce;
 * each vec.h table (portable, AVX2, AVX-512 when the CPU has them) forced in turn.
 */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "kernel_util.h"
#include "tpu/kernels.h"
#include "vtpu/kernels/vec.h"

static tpu_pool_t *g_pool;

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static uint64_t rnd(void) { return kernel_splitmix64(&g_rng); }

/* A float drawn mostly from a few values so that compares see equal operands, plus the
 * IEEE specials. */
static float rnd_special(void) {
  static const float vals[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, INFINITY, -INFINITY, NAN, 1e-40f};
  uint64_t r = rnd();
  if (r % 3 == 0) return (float)((int64_t)(r >> 8) % 2001 - 1000) / 256.0f;
  return vals[(r >> 8) % (sizeof vals / sizeof vals[0])];
}

static void fill_elems(void *mem, tpu_dtype_t dt, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float f = rnd_special();
    switch (dt) {
      case TPU_F32: ((float *)mem)[i] = f; break;
      case TPU_BF16: ((uint16_t *)mem)[i] = tpu_f32_to_bf16(f); break;
      case TPU_F64: ((double *)mem)[i] = f; break;
      case TPU_I32: ((int32_t *)mem)[i] = (int32_t)(rnd() % 7) - 3; break;
      case TPU_I64: ((int64_t *)mem)[i] = (int64_t)(rnd() % 7) - 3; break;
      case TPU_BOOL: ((uint8_t *)mem)[i] = (uint8_t)(rnd() % 2); break;
      default: ((uint8_t *)mem)[i] = (uint8_t)rnd(); break; /* u8, i8: any byte */
    }
  }
}

/* Element |linear| (row-major over |shape|) of |b| broadcast to shape: its byte offset. */
static int64_t elem_off(const tpu_buf_t *b, const tpu_buf_t *shape, int64_t linear) {
  int64_t off = 0;
  for (int d = shape->rank - 1; d >= 0; d--) {
    int64_t i = linear % shape->dims[d];
    linear /= shape->dims[d];
    if (b->rank && b->dims[d] != 1) off += i * b->strides[d];
  }
  return off * (int64_t)tpu_dtype_size(b->dtype);
}

static double elem_f64(const tpu_buf_t *b, int64_t off) {
  const char *p = (const char *)b->data + off;
  switch (b->dtype) {
    case TPU_F32: { float f; memcpy(&f, p, 4); return f; }
    case TPU_BF16: { uint16_t h; memcpy(&h, p, 2); return tpu_bf16_to_f32(h); }
    case TPU_F64: { double d; memcpy(&d, p, 8); return d; }
    case TPU_I32: { int32_t i; memcpy(&i, p, 4); return i; }
    case TPU_I64: { int64_t i; memcpy(&i, p, 8); return (double)i; }
    case TPU_I8: return (int8_t)*p;
    case TPU_BOOL: return *p != 0; /* any non-zero byte is true */
    default: return (uint8_t)*p;
  }
}

/* A view over |mem| of logical dims |dims| (rank 4): dims laid out in the order |perm|
 * (outermost first), the innermost with stride |gap| elements, dims with bit d of |flip|
 * reversed, dims with bit d of |bcast| stride 0. The memory must hold the extent. */
static tpu_buf_t view(void *mem, tpu_dtype_t dt, const int64_t *dims, const int *perm,
                      unsigned flip, unsigned bcast, int64_t gap) {
  tpu_buf_t b;
  memset(&b, 0, sizeof b);
  b.dtype = dt;
  b.rank = 4;
  int64_t stride = gap, off = 0;
  for (int j = 3; j >= 0; j--) {
    int d = perm[j];
    b.dims[d] = dims[d];
    if (bcast >> d & 1) continue;
    b.strides[d] = (flip >> d & 1) ? -stride : stride;
    if (flip >> d & 1) off += stride * (dims[d] - 1);
    stride *= dims[d];
  }
  b.data = (char *)mem + off * (int64_t)tpu_dtype_size(dt);
  return b;
}

static const int kPerms[3][4] = {{0, 1, 2, 3}, {0, 2, 1, 3}, {3, 1, 0, 2}};
static const int64_t kInner[] = {1, 3, 7, 8, 15, 16, 17, 31, 32, 37};
#define NINNER ((int)(sizeof kInner / sizeof kInner[0]))
#define CAP (4 * 3 * 5 * 37 * 2 * 8) /* bytes: the largest view with gap 2, 8-byte elements */

static bool cmp_ref(tpu_compare_dir_t dir, double a, double b) {
  switch (dir) {
    case TPU_CMP_EQ: return a == b;
    case TPU_CMP_NE: return a != b;
    case TPU_CMP_LT: return a < b;
    case TPU_CMP_LE: return a <= b;
    case TPU_CMP_GT: return a > b;
    default: return a >= b;
  }
}

/* Operand layouts by case number: 0 dense, 1 transposed with gap 2, 2 reversed dims 1 and
 * 3, 3 rank-4 all-zero strides, 4 broadcast along the last dim, 5 rank 0, 6 last two dims
 * transposed (k^T: dim 2 contiguous), 7 dim 2 contiguous and dim 3 outermost but one, 8
 * as 6 with dim 3 reversed, 9 dims 1 and 2 swapped (dense rows, strided across them). 6-8
 * are the tile-gather cases (ew_tile.h). */
static const int kPermKT[4] = {0, 1, 3, 2}, kPermMid[4] = {0, 3, 1, 2};
static tpu_buf_t layout(int which, void *mem, tpu_dtype_t dt, const int64_t *dims) {
  switch (which) {
    case 9: return view(mem, dt, dims, kPerms[1], 0, 0, 1);
    case 6: return view(mem, dt, dims, kPermKT, 0, 0, 1);
    case 7: return view(mem, dt, dims, kPermMid, 0, 0, 1);
    case 8: return view(mem, dt, dims, kPermKT, 0x8, 0, 1);
    case 1: return view(mem, dt, dims, kPerms[2], 0, 0, 2);
    case 2: return view(mem, dt, dims, kPerms[0], 0xA, 0, 1);
    case 3: return view(mem, dt, dims, kPerms[0], 0, 0xF, 1);
    case 4: return view(mem, dt, dims, kPerms[0], 0, 0x8, 1);
    case 5: {
      tpu_buf_t b = view(mem, dt, dims, kPerms[0], 0, 0, 1);
      b.rank = 0;
      return b;
    }
    default: return view(mem, dt, dims, kPerms[0], 0, 0, 1);
  }
}

TEST(compare_rows_every_dir_layout_and_isa) {
  /* f32/bf16: vec.h loops; bool, i8, u8, i32, i64: the typed integer loops; f64: blocks */
  static const tpu_dtype_t dts[] = {TPU_F32, TPU_BF16, TPU_F64, TPU_I32, TPU_BOOL, TPU_I64,
                                    TPU_I8, TPU_U8};
  enum { ND = sizeof dts / sizeof dts[0] };
  char *ma = malloc(CAP), *mb = malloc(CAP), *mo = malloc(CAP);
  int bad = 0;
  FOR_EACH_ISA(v, {
    for (int c = 0; c < ND * NINNER * 6; c++) {
      tpu_dtype_t dt = dts[c % ND];
      int64_t dims[4] = {2, 3, 5, kInner[(c / ND) % NINNER]};
      int la = (c / 3) % 3, lb = (c / ND / NINNER) % 6, lo = c % 7 == 0 ? 1 : 0;
      fill_elems(ma, dt, CAP / 8);
      fill_elems(mb, dt, CAP / 8);
      if (dt == TPU_BOOL) { /* true bytes other than 1 compare equal to 1 */
        for (int i = 0; i < CAP / 8; i += 5) ma[i] = (char)(ma[i] ? 0x80 : 0);
        for (int i = 0; i < CAP / 8; i += 3) mb[i] = (char)(mb[i] ? 2 : 0);
      }
      tpu_buf_t a = layout(la, ma, dt, dims), b = layout(lb, mb, dt, dims);
      tpu_buf_t o = layout(lo, mo, TPU_BOOL, dims);
      tpu_buf_t x = c % 5 == 0 ? b : a, y = c % 5 == 0 ? a : b; /* broadcast on either side */
      int64_t n = dims[0] * dims[1] * dims[2] * dims[3];
      for (int dir = TPU_CMP_EQ; dir <= TPU_CMP_GE; dir++) {
        memset(mo, 0x55, CAP);
        CHECK_OK(tpu_kernel_compare((tpu_compare_dir_t)dir, &x, &y, &o, g_pool));
        for (int64_t i = 0; i < n; i++) {
          bool want = cmp_ref((tpu_compare_dir_t)dir, elem_f64(&x, elem_off(&x, &o, i)),
                              elem_f64(&y, elem_off(&y, &o, i)));
          uint8_t got = ((uint8_t *)o.data)[elem_off(&o, &o, i)];
          if (got != (uint8_t)want && bad++ < 5) {
            fprintf(stderr, "  %s compare dir %d %s case %d elem %lld: got %d want %d\n",
                    v->name, dir, tpu_dtype_name(dt), c, (long long)i, got, want);
          }
        }
      }
    }
  });
  CHECK(bad == 0);
  free(ma);
  free(mb);
  free(mo);
}

TEST(select_rows_every_size_layout_and_isa) {
  static const tpu_dtype_t dts[] = {TPU_F32, TPU_I32, TPU_BF16, TPU_F64, TPU_BOOL};
  char *mp = malloc(CAP), *mt = malloc(CAP), *mf = malloc(CAP), *mo = malloc(CAP);
  int bad = 0;
  FOR_EACH_ISA(v, {
    for (int c = 0; c < 5 * NINNER * 4; c++) {
      tpu_dtype_t dt = dts[c % 5];
      size_t es = tpu_dtype_size(dt);
      int64_t dims[4] = {2, 3, 5, kInner[(c / 5) % NINNER]};
      static const int pl[4] = {0, 4, 5, 2}; /* pred: dense, along-row broadcast, rank 0, reversed */
      int lp = pl[(c / 5 / NINNER) % 4], lt = (c / 2) % 6, lf = (c / 3) % 4, lo = c % 6 == 0 ? 1 : 0;
      fill_elems(mp, TPU_U8, CAP); /* any non-zero byte is true */
      fill_elems(mt, dt, CAP / 8);
      fill_elems(mf, dt, CAP / 8);
      tpu_buf_t p = layout(lp, mp, TPU_BOOL, dims), t = layout(lt, mt, dt, dims);
      tpu_buf_t f = layout(lf, mf, dt, dims), o = layout(lo, mo, dt, dims);
      memset(mo, 0x55, CAP);
      CHECK_OK(tpu_kernel_select(&p, &t, &f, &o, g_pool));
      int64_t n = dims[0] * dims[1] * dims[2] * dims[3];
      for (int64_t i = 0; i < n; i++) {
        bool pick = ((uint8_t *)p.data)[elem_off(&p, &o, i)] != 0;
        const char *src = pick ? (const char *)t.data + elem_off(&t, &o, i)
                               : (const char *)f.data + elem_off(&f, &o, i);
        if (memcmp((char *)o.data + elem_off(&o, &o, i), src, es) != 0 && bad++ < 5) {
          fprintf(stderr, "  %s select %s case %d elem %lld differs\n", v->name,
                  tpu_dtype_name(dt), c, (long long)i);
        }
      }
    }
  });
  CHECK(bad == 0);
  free(mp);
  free(mt);
  free(mf);
  free(mo);
}

/* Binary rows: a strided (q of a qkv split) or transposed view times a scalar, and an
 * operand broadcast along the row only (a different value per row), vs tpu_ref_binary. */
TEST(binary_rows_vs_ref_every_isa) {
  static const tpu_op_t ops[] = {TPU_OP_MUL, TPU_OP_ADD, TPU_OP_MAX, TPU_OP_DIV};
  static const tpu_dtype_t dts[] = {TPU_F32, TPU_BF16};
  char *ma = malloc(CAP), *mb = malloc(CAP), *mo = malloc(CAP), *mr = malloc(CAP);
  int bad = 0;
  FOR_EACH_ISA(v, {
    for (int c = 0; c < 2 * NINNER * 9; c++) {
      tpu_dtype_t dt = dts[c % 2];
      int64_t dims[4] = {2, 3, 5, kInner[(c / 2) % NINNER]};
      fill_elems(ma, dt, CAP / 8);
      fill_elems(mb, dt, CAP / 8);
      tpu_buf_t a = layout((c / 3) % 3, ma, dt, dims), b = layout((c / 2 / NINNER) % 9, mb, dt, dims);
      tpu_buf_t o = layout(0, mo, dt, dims), r = layout(0, mr, dt, dims);
      tpu_op_t op = ops[c % 4];
      memset(mo, 0, CAP);
      memset(mr, 0, CAP);
      CHECK_OK(tpu_kernel_binary(op, &a, &b, &o, g_pool));
      CHECK_OK(tpu_ref_binary(op, &a, &b, &r));
      size_t bytes = (size_t)(dims[0] * dims[1] * dims[2] * dims[3]) * tpu_dtype_size(dt);
      if (memcmp(mo, mr, bytes) != 0 && bad++ < 5) {
        fprintf(stderr, "  %s binary %s %s case %d differs from ref\n", v->name,
                tpu_op_name(op), tpu_dtype_name(dt), c);
      }
    }
  });
  CHECK(bad == 0);
  free(ma);
  free(mb);
  free(mo);
  free(mr);
}

/* Transposed operands in tiles of more than one block: rows x cols past TPU_EW_BLOCK (512)
 * both ways (many rows of a short row; rows longer than a block), both inputs transposed
 * or one with a dense, per-row broadcast or scalar partner; binary vs tpu_ref_binary and
 * copy vs the element walk (also from dense rows strided across them: the short-rows
 * loop), each ISA, f32 and bf16 (copy also f64 and bool). */
TEST(transposed_tiles_vs_ref_every_isa) {
  static const int64_t shapes[][4] = {{2, 3, 40, 37}, {1, 2, 3, 600}, {1, 1, 33, 16}, {2, 1, 17, 513}};
  static const int partners[] = {6, 0, 4, 5, 3, 7};
  static const tpu_dtype_t dts[] = {TPU_F32, TPU_BF16, TPU_F64, TPU_BOOL};
  const size_t cap = 2 * 17 * 513 * 8; /* the largest shape, 8-byte elements */
  char *ma = malloc(cap), *mb = malloc(cap), *mo = malloc(cap), *mr = malloc(cap);
  int bad = 0;
  FOR_EACH_ISA(v, {
    for (int c = 0; c < 4 * 6 * 3; c++) {
      const int64_t *dims = shapes[c % 4];
      tpu_dtype_t dt = dts[(c / 4) % 2];
      int lb = partners[(c / 8) % 6], la = 6 + c % 3;
      int64_t n = dims[0] * dims[1] * dims[2] * dims[3];
      fill_elems(ma, dt, n);
      fill_elems(mb, dt, n);
      tpu_buf_t a = layout(la, ma, dt, dims), b = layout(lb, mb, dt, dims);
      tpu_buf_t o = layout(0, mo, dt, dims), r = layout(0, mr, dt, dims);
      tpu_op_t op = c % 2 ? TPU_OP_MUL : TPU_OP_SUB;
      memset(mo, 0, cap);
      memset(mr, 0, cap);
      CHECK_OK(tpu_kernel_binary(op, (c / 4) % 3 ? &a : &b, (c / 4) % 3 ? &b : &a, &o, g_pool));
      CHECK_OK(tpu_ref_binary(op, (c / 4) % 3 ? &a : &b, (c / 4) % 3 ? &b : &a, &r));
      if (memcmp(mo, mr, (size_t)n * tpu_dtype_size(dt)) != 0 && bad++ < 5) {
        fprintf(stderr, "  %s binary %s %s tile case %d differs from ref\n", v->name,
                tpu_op_name(op), tpu_dtype_name(dt), c);
      }
      tpu_dtype_t cdt = dts[(c / 4) % 4];
      size_t es = tpu_dtype_size(cdt);
      fill_elems(ma, cdt, n);
      tpu_buf_t x = layout(c % 4 == 3 ? 9 : la, ma, cdt, dims);
      tpu_buf_t y = layout(c % 5 == 0 ? 6 : 0, mo, cdt, dims);
      memset(mo, 0x55, cap);
      CHECK_OK(tpu_kernel_copy(&x, &y, g_pool));
      for (int64_t i = 0; i < n; i++) {
        if (memcmp((char *)y.data + elem_off(&y, &y, i), (char *)x.data + elem_off(&x, &y, i), es) &&
            bad++ < 5) {
          fprintf(stderr, "  copy %s tile case %d elem %lld differs\n", tpu_dtype_name(cdt), c,
                  (long long)i);
        }
      }
    }
  });
  CHECK(bad == 0);
  free(ma);
  free(mb);
  free(mo);
  free(mr);
}

/* Elements of the copy |o| (rank 4) that differ from |x|, the first few printed (|shown|
 * mismatches of earlier cases are already out). */
static int copy_mismatches(const tpu_buf_t *x, const tpu_buf_t *o, int c, int shown) {
  const size_t es = tpu_dtype_size(o->dtype);
  const int64_t n = o->dims[0] * o->dims[1] * o->dims[2] * o->dims[3];
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    if (memcmp((char *)o->data + elem_off(o, o, i), (char *)x->data + elem_off(x, o, i), es) &&
        shown + bad++ < 5) {
      fprintf(stderr, "  copy %s case %d elem %lld differs\n", tpu_dtype_name(o->dtype), c,
              (long long)i);
    }
  }
  return bad;
}

TEST(copy_short_rows_and_overlap) {
  static const tpu_dtype_t dts[] = {TPU_F32, TPU_BF16, TPU_F64, TPU_BOOL};
  char *mx = malloc(CAP), *mo = malloc(CAP);
  int bad = 0;
  for (int c = 0; c < 4 * NINNER * 9; c++) {
    tpu_dtype_t dt = dts[c % 4];
    int64_t dims[4] = {2, 3, 5, kInner[(c / 4) % NINNER]};
    fill_elems(mx, dt, CAP / 8);
    memset(mo, 0x55, CAP);
    tpu_buf_t x = layout((c / 4 / NINNER) % 9, mx, dt, dims), o = layout(c % 3 == 0 ? 1 : 0, mo, dt, dims);
    CHECK_OK(tpu_kernel_copy(&x, &o, g_pool));
    bad += copy_mismatches(&x, &o, c, bad);
  }
  /* overlapping dense runs (a shift by one element within one array) move like memmove */
  float *f = (float *)(void *)mx;
  for (int i = 0; i < 40; i++) f[i] = (float)i;
  int64_t n = 37;
  tpu_buf_t src = {0}, dst = {0};
  src.dtype = dst.dtype = TPU_F32;
  src.rank = dst.rank = 1;
  src.dims[0] = dst.dims[0] = n;
  src.strides[0] = dst.strides[0] = 1;
  src.data = f;
  dst.data = f + 1;
  CHECK_OK(tpu_kernel_copy(&src, &dst, NULL));
  for (int i = 0; i < n; i++) CHECK(f[i + 1] == (float)i);
  CHECK(bad == 0);
  free(mx);
  free(mo);
}

/* Copies whose innermost dim is contiguous on both sides and whose outer dims are permuted
 * (attention heads to (batch, time, features) and back), reversed or broadcast: the
 * one-loop run copy of copy_fill.c; and runs interleaved in one array (spans that overlap,
 * elements that do not), which take the general path. */
TEST(copy_runs_across_permuted_dims) {
  static const tpu_dtype_t dts[] = {TPU_F32, TPU_BF16, TPU_F64, TPU_BOOL};
  char *mx = malloc(CAP), *mo = malloc(CAP);
  int bad = 0;
  for (int c = 0; c < 4 * NINNER * 8; c++) {
    tpu_dtype_t dt = dts[c % 4];
    int64_t dims[4] = {2, 3, 5, kInner[(c / 4) % NINNER]};
    int lx = (c / 4 / NINNER) % 4, lo = (c / 4 / NINNER) / 4;
    fill_elems(mx, dt, CAP / 8);
    memset(mo, 0x55, CAP);
    tpu_buf_t x = lx == 0   ? view(mx, dt, dims, kPerms[1], 0, 0, 1)    /* dims 1, 2 swapped */
                  : lx == 1 ? view(mx, dt, dims, kPerms[1], 0x2, 0, 1)  /* and dim 1 reversed */
                  : lx == 2 ? view(mx, dt, dims, kPerms[1], 0, 0x2, 1)  /* dim 1 broadcast */
                            : view(mx, dt, dims, kPermMid, 0, 0, 1);    /* dim 3 strided */
    tpu_buf_t o = lo ? view(mo, dt, dims, kPerms[1], 0x4, 0, 1) : view(mo, dt, dims, kPerms[0], 0, 0, 1);
    CHECK_OK(tpu_kernel_copy(&x, &o, c % 2 ? g_pool : NULL));
    bad += copy_mismatches(&x, &o, c, bad);
  }
  /* runs of 16 floats interleaved in one array: x the even runs, out the odd ones */
  float *f = (float *)(void *)mx;
  for (int i = 0; i < 2 * 6 * 16; i++) f[i] = (float)i;
  tpu_buf_t src = {0}, dst;
  src.dtype = TPU_F32;
  src.rank = 3;
  src.dims[0] = 2, src.dims[1] = 3, src.dims[2] = 16;
  src.strides[0] = 32, src.strides[1] = 64, src.strides[2] = 1; /* dims 0, 1 permuted */
  src.data = f;
  dst = src;
  dst.strides[0] = 96, dst.strides[1] = 32;
  dst.data = f + 16;
  CHECK_OK(tpu_kernel_copy(&src, &dst, NULL));
  for (int i = 0; i < 2; i++) {
    for (int j = 0; j < 3; j++) {
      for (int k = 0; k < 16; k++) CHECK(f[16 + i * 96 + j * 32 + k] == (float)(i * 32 + j * 64 + k));
    }
  }
  CHECK(bad == 0);
  free(mx);
  free(mo);
}

TEST(fill_values_dtypes_and_strides) {
  static const tpu_dtype_t dts[] = {TPU_F32, TPU_BF16, TPU_F64, TPU_I64, TPU_I32, TPU_BOOL, TPU_U8};
  static const double vals[] = {0.0, -0.0, 1.5, -1.0, NAN, INFINITY};
  char *mo = malloc(CAP), *want = malloc(8);
  int bad = 0;
  for (int c = 0; c < 7 * 6 * 4; c++) {
    tpu_dtype_t dt = dts[c % 7];
    size_t es = tpu_dtype_size(dt);
    double val = vals[(c / 7) % 6];
    int64_t ival = (int64_t)((c / 7) % 6) - 2;
    int64_t dims[4] = {2, 3, 5, kInner[(c * 7) % NINNER]};
    tpu_buf_t o = layout(((c / 42) % 3), mo, dt, dims); /* dense, transposed, reversed */
    memset(mo, 0x55, CAP);
    CHECK_OK(tpu_kernel_fill(&o, val, ival, g_pool));
    /* the value as the kernel defines it: one element written by a 1-element fill */
    tpu_buf_t one = {0};
    one.dtype = dt;
    one.data = want;
    CHECK_OK(tpu_kernel_fill(&one, val, ival, NULL));
    int64_t n = dims[0] * dims[1] * dims[2] * dims[3];
    for (int64_t i = 0; i < n; i++) {
      if (memcmp((char *)o.data + elem_off(&o, &o, i), want, es) && bad++ < 5) {
        fprintf(stderr, "  fill %s case %d elem %lld differs\n", tpu_dtype_name(dt), c, (long long)i);
      }
    }
  }
  /* a few values by hand: -0.0 keeps its sign, 1.5 as f32 bits */
  float f[19];
  int64_t n19 = 19;
  tpu_buf_t b = {0};
  b.dtype = TPU_F32;
  b.rank = 1;
  b.dims[0] = n19;
  b.strides[0] = 1;
  b.data = f;
  CHECK_OK(tpu_kernel_fill(&b, -0.0, 0, NULL));
  for (int i = 0; i < 19; i++) CHECK(f[i] == 0.0f && signbit(f[i]));
  CHECK_OK(tpu_kernel_fill(&b, 1.5, 0, NULL));
  for (int i = 0; i < 19; i++) CHECK(f[i] == 1.5f);
  CHECK(bad == 0);
  free(mo);
  free(want);
}

/* AND/OR over the last dim of bool / u8 / i8 (any byte values: bitwise) and over other dims,
 * vs tpu_ref_reduce, into bool and wider outputs. */
TEST(reduce_and_or_byte_rows_vs_ref) {
  static const tpu_dtype_t xs[] = {TPU_BOOL, TPU_U8, TPU_I8};
  static const tpu_dtype_t outs[] = {TPU_BOOL, TPU_I64};
  uint8_t *mx = malloc(CAP);
  int64_t *mf = malloc(CAP), *mr = malloc(CAP);
  for (int c = 0; c < 3 * 2 * NINNER * 2; c++) {
    tpu_dtype_t dx = xs[c % 3], dout = outs[(c / 3) % 2];
    tpu_reduce_kind_t kind = (c / 6) % 2 ? TPU_REDUCE_OR : TPU_REDUCE_AND;
    int64_t dims[4] = {2, 3, 5, kInner[(c / 12) % NINNER]};
    for (int i = 0; i < CAP; i++) { /* mostly all-true rows so AND is not always 0 */
      uint64_t r = rnd();
      mx[i] = dx == TPU_BOOL ? (uint8_t)(r % 16 != 0) : (uint8_t)(r % 4 ? 0xff : r >> 8);
    }
    tpu_buf_t x = layout(c % 5 == 0 ? 2 : 0, mx, dx, dims);
    int64_t od[3] = {2, 3, 5};
    for (int last = 0; last < 2; last++) {
      bool rd[4] = {false, false, !last, last};
      tpu_buf_t of = {0}, orf = {0};
      of.dtype = orf.dtype = dout;
      of.rank = orf.rank = 3;
      of.data = mf;
      orf.data = mr;
      int64_t keep[3] = {od[0], od[1], last ? od[2] : dims[3]};
      for (int d = 2, s = 1; d >= 0; d--) {
        of.dims[d] = orf.dims[d] = keep[d];
        of.strides[d] = orf.strides[d] = s;
        s *= (int)keep[d];
      }
      memset(mf, 0x55, CAP);
      memset(mr, 0x55, CAP);
      CHECK_OK(tpu_kernel_reduce(kind, &x, rd, &of, g_pool));
      CHECK_OK(tpu_ref_reduce(kind, &x, rd, &orf));
      size_t bytes = (size_t)(keep[0] * keep[1] * keep[2]) * tpu_dtype_size(dout);
      if (memcmp(mf, mr, bytes) != 0) {
        fprintf(stderr, "  reduce %s %s -> %s case %d last %d differs from ref\n",
                kind == TPU_REDUCE_AND ? "AND" : "OR", tpu_dtype_name(dx), tpu_dtype_name(dout),
                c, last);
        CHECK(false);
      }
    }
  }
  free(mx);
  free(mf);
  free(mr);
}

int main(void) {
  if (tpu_pool_create(3, tpu_allocator_system(), &g_pool) != TPU_OK) return 1;
  RUN(compare_rows_every_dir_layout_and_isa);
  RUN(select_rows_every_size_layout_and_isa);
  RUN(binary_rows_vs_ref_every_isa);
  RUN(transposed_tiles_vs_ref_every_isa);
  RUN(copy_short_rows_and_overlap);
  RUN(copy_runs_across_permuted_dims);
  RUN(fill_values_dtypes_and_strides);
  RUN(reduce_and_or_byte_rows_vs_ref);
  tpu_pool_destroy(g_pool);
  return check_report();
}

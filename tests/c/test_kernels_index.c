/* test_kernels_index.c: gather, scatter and sort on the vTPU kernels.
 *
 * The StableHLO dimension numbers are exercised through the patterns PyTorch lowers to:
 * embedding / index_select (rows of a table), torch.gather along dim 0 and 1 (index
 * vectors with an iota), multi-index x[i0, i1], slices wider than one element, scatter-add
 * of rows with duplicate indices (index_add, embedding backward), torch.scatter, index_put;
 * each checked against loops written out here. Out-of-range indices (negative and too
 * large) give TPU_ERR_OUT_OF_RANGE with a message naming the kernel, index, dimension and
 * size with check_bounds, and clamp (gather) or skip (scatter) without. Sort: stability,
 * NaN order, -0.0, every dtype against a naive stable sort, strided and in-place use.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tpu/kernels.h"
#include "tpu/threadpool.h"
#include "vtpu/kernels/strided.h"

static tpu_pool_t *g_pool2;

static tpu_buf_t mkbuf(void *data, tpu_dtype_t dt, int rank, const int64_t *dims) {
  tpu_buf_t b = {.data = data, .dtype = dt, .rank = rank};
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    b.dims[d] = dims[d];
    b.strides[d] = s;
    s *= dims[d];
  }
  return b;
}

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}
static float frand(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0) * 2 - 1; }

/* ---- gather ------------------------------------------------------------------------------- */

/* embedding / index_select on rows: table (V, D), idx (N,) -> (N, D) */
static tpu_gather_attrs_t rows_gather(int64_t d, bool check) {
  tpu_gather_attrs_t a = {.num_offset_dims = 1, .num_collapsed = 1, .num_start_index_map = 1,
                          .offset_dims = {1}, .collapsed_slice_dims = {0},
                          .start_index_map = {0}, .index_vector_dim = 1,
                          .slice_sizes = {1, d}, .check_bounds = check};
  return a;
}

TEST(gather_embedding_rows) {
  enum { V = 10, D = 7, N = 6 };
  float table[V * D], out[N * D];
  for (int i = 0; i < V * D; i++) table[i] = (float)i;
  int64_t idx[N] = {3, 0, 9, 3, 3, 5};
  int64_t tv[2] = {V, D}, n = N, od[2] = {N, D};
  tpu_buf_t t = mkbuf(table, TPU_F32, 2, tv), ib = mkbuf(idx, TPU_I64, 1, &n),
            ob = mkbuf(out, TPU_F32, 2, od);
  tpu_gather_attrs_t a = rows_gather(D, true);
  CHECK_OK(tpu_kernel_gather(&a, &t, &ib, &ob, NULL));
  bool ok = true;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < D; j++) ok &= out[i * D + j] == table[idx[i] * D + j];
  CHECK(ok);

  /* i32 indices shaped (B, T) = (2, 3) into (2, 3, D), bf16 table */
  uint16_t tb[V * D], ob16[N * D];
  for (int i = 0; i < V * D; i++) tb[i] = tpu_f32_to_bf16((float)i * 0.5f);
  int32_t idx32[N] = {1, 2, 3, 9, 8, 7};
  int64_t bt[2] = {2, 3}, obt[3] = {2, 3, D};
  tpu_buf_t t16 = mkbuf(tb, TPU_BF16, 2, tv), i32 = mkbuf(idx32, TPU_I32, 2, bt),
            o16 = mkbuf(ob16, TPU_BF16, 3, obt);
  tpu_gather_attrs_t a2 = rows_gather(D, true);
  a2.offset_dims[0] = 2;
  a2.index_vector_dim = 2;
  CHECK_OK(tpu_kernel_gather(&a2, &t16, &i32, &o16, g_pool2));
  ok = true;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < D; j++) ok &= ob16[i * D + j] == tb[idx32[i] * D + j];
  CHECK(ok);

  /* a large embedding on two threads */
  enum { BV = 1000, BD = 64, BN = 5000 };
  float *big = malloc(sizeof(float) * BV * BD), *bo = malloc(sizeof(float) * BN * BD);
  int64_t *bi = malloc(sizeof(int64_t) * BN);
  for (int i = 0; i < BV * BD; i++) big[i] = frand();
  for (int i = 0; i < BN; i++) bi[i] = (int64_t)(rnd() % BV);
  int64_t bvd[2] = {BV, BD}, bn = BN, bod[2] = {BN, BD};
  tpu_buf_t bt2 = mkbuf(big, TPU_F32, 2, bvd), bib = mkbuf(bi, TPU_I64, 1, &bn),
            bob = mkbuf(bo, TPU_F32, 2, bod);
  tpu_gather_attrs_t a3 = rows_gather(BD, true);
  CHECK_OK(tpu_kernel_gather(&a3, &bt2, &bib, &bob, g_pool2));
  ok = true;
  for (int i = 0; i < BN; i++) ok &= memcmp(bo + i * BD, big + bi[i] * BD, BD * sizeof(float)) == 0;
  CHECK(ok);
  free(big);
  free(bo);
  free(bi);
}

TEST(gather_index_select_dim1_and_strided) {
  /* x (4, 9), idx (5,): out (4, 5) = x[:, idx] */
  float x[36], out[20];
  for (int i = 0; i < 36; i++) x[i] = (float)i;
  int64_t idx[5] = {8, 0, 4, 4, 1};
  int64_t xd[2] = {4, 9}, n = 5, od[2] = {4, 5};
  tpu_buf_t xb = mkbuf(x, TPU_F32, 2, xd), ib = mkbuf(idx, TPU_I64, 1, &n),
            ob = mkbuf(out, TPU_F32, 2, od);
  tpu_gather_attrs_t a = {.num_offset_dims = 1, .num_collapsed = 1, .num_start_index_map = 1,
                          .offset_dims = {0}, .collapsed_slice_dims = {1},
                          .start_index_map = {1}, .index_vector_dim = 1,
                          .slice_sizes = {4, 1}, .check_bounds = true};
  CHECK_OK(tpu_kernel_gather(&a, &xb, &ib, &ob, NULL));
  bool ok = true;
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 5; c++) ok &= out[r * 5 + c] == x[r * 9 + idx[c]];
  CHECK(ok);
  /* the same through a transposed x (9, 4) viewed as (4, 9), and a reversed index view */
  float xt[36];
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 9; c++) xt[c * 4 + r] = x[r * 9 + c];
  tpu_buf_t xtb = xb;
  xtb.data = xt;
  xtb.strides[0] = 1;
  xtb.strides[1] = 4;
  int64_t rev[5] = {1, 4, 4, 0, 8};
  tpu_buf_t rb = ib;
  rb.data = rev + 4;
  rb.strides[0] = -1;
  float out2[20];
  tpu_buf_t ob2 = mkbuf(out2, TPU_F32, 2, od);
  CHECK_OK(tpu_kernel_gather(&a, &xtb, &rb, &ob2, g_pool2));
  CHECK(memcmp(out, out2, sizeof out) == 0);
}

/* torch.gather(x, dim, index) as a gather with index vectors (index, iota) */
static void torch_gather(int dim, const float *x, int64_t r, int64_t c, const int64_t *index,
                         int64_t ir, int64_t ic, float *out, tpu_pool_t *pool) {
  int64_t *iv = malloc(sizeof(int64_t) * ir * ic * 2);
  for (int64_t i = 0; i < ir; i++)
    for (int64_t j = 0; j < ic; j++) {
      iv[(i * ic + j) * 2 + 0] = dim == 0 ? index[i * ic + j] : i;
      iv[(i * ic + j) * 2 + 1] = dim == 0 ? j : index[i * ic + j];
    }
  int64_t xd[2] = {r, c}, id[3] = {ir, ic, 2}, od[2] = {ir, ic};
  tpu_buf_t xb = mkbuf((void *)x, TPU_F32, 2, xd), ib = mkbuf(iv, TPU_I64, 3, id),
            ob = mkbuf(out, TPU_F32, 2, od);
  tpu_gather_attrs_t a = {.num_offset_dims = 0, .num_collapsed = 2, .num_start_index_map = 2,
                          .collapsed_slice_dims = {0, 1}, .start_index_map = {0, 1},
                          .index_vector_dim = 2, .slice_sizes = {1, 1}, .check_bounds = true};
  CHECK_OK(tpu_kernel_gather(&a, &xb, &ib, &ob, pool));
  free(iv);
}

TEST(gather_torch_gather_dims_0_and_1) {
  enum { R = 5, C = 6, IR = 4, IC = 6 };
  float x[R * C], out[IR * IC];
  for (int i = 0; i < R * C; i++) x[i] = frand();
  int64_t idx0[IR * IC], idx1[IR * IC];
  for (int i = 0; i < IR * IC; i++) {
    idx0[i] = (int64_t)(rnd() % R);
    idx1[i] = (int64_t)(rnd() % C);
  }
  torch_gather(0, x, R, C, idx0, IR, IC, out, g_pool2);
  bool ok = true;
  for (int i = 0; i < IR; i++)
    for (int j = 0; j < IC; j++) ok &= out[i * IC + j] == x[idx0[i * IC + j] * C + j];
  CHECK(ok);
  torch_gather(1, x, R, C, idx1, IR, IC, out, NULL);
  ok = true;
  for (int i = 0; i < IR; i++)
    for (int j = 0; j < IC; j++) ok &= out[i * IC + j] == x[i * C + idx1[i * IC + j]];
  CHECK(ok);
}

TEST(gather_multi_index_and_wide_slices) {
  /* x[i0, i1] for x (5, 6, 3): indices (N, 2) -> out (N, 3) */
  enum { N = 7 };
  float x[90], out[N * 3];
  for (int i = 0; i < 90; i++) x[i] = (float)i;
  int64_t iv[N * 2] = {0, 0, 4, 5, 2, 3, 2, 3, 1, 5, 4, 0, 3, 2};
  int64_t xd[3] = {5, 6, 3}, id[2] = {N, 2}, od[2] = {N, 3};
  tpu_buf_t xb = mkbuf(x, TPU_F32, 3, xd), ib = mkbuf(iv, TPU_I64, 2, id),
            ob = mkbuf(out, TPU_F32, 2, od);
  tpu_gather_attrs_t a = {.num_offset_dims = 1, .num_collapsed = 2, .num_start_index_map = 2,
                          .offset_dims = {1}, .collapsed_slice_dims = {0, 1},
                          .start_index_map = {0, 1}, .index_vector_dim = 1,
                          .slice_sizes = {1, 1, 3}, .check_bounds = true};
  CHECK_OK(tpu_kernel_gather(&a, &xb, &ib, &ob, NULL));
  bool ok = true;
  for (int i = 0; i < N; i++)
    for (int k = 0; k < 3; k++) ok &= out[i * 3 + k] == x[(iv[2 * i] * 6 + iv[2 * i + 1]) * 3 + k];
  CHECK(ok);

  /* slices of 3 from x (8,): starts (3, 1); start 6 does not fit */
  float v[8] = {0, 1, 2, 3, 4, 5, 6, 7}, s[9];
  int64_t starts[3] = {0, 2, 6};
  int64_t eight = 8, sd[2] = {3, 1}, sod[2] = {3, 3};
  tpu_buf_t vb = mkbuf(v, TPU_F32, 1, &eight), stb = mkbuf(starts, TPU_I64, 2, sd),
            sob = mkbuf(s, TPU_F32, 2, sod);
  tpu_gather_attrs_t w = {.num_offset_dims = 1, .num_collapsed = 0, .num_start_index_map = 1,
                          .offset_dims = {1}, .start_index_map = {0}, .index_vector_dim = 1,
                          .slice_sizes = {3}, .check_bounds = true};
  CHECK(tpu_kernel_gather(&w, &vb, &stb, &sob, NULL) == TPU_ERR_OUT_OF_RANGE);
  CHECK_CONTAINS(tpu_status_message(), "gather: index 6 out of range for dimension 0 of size 8");
  CHECK_CONTAINS(tpu_status_message(), "slice of 3");
  w.check_bounds = false; /* StableHLO clamps the start to 5 */
  CHECK_OK(tpu_kernel_gather(&w, &vb, &stb, &sob, NULL));
  CHECK(s[0] == 0 && s[2] == 2 && s[3] == 2 && s[5] == 4 && s[6] == 5 && s[8] == 7);
}

TEST(gather_out_of_range) {
  float table[15], out[6];
  for (int i = 0; i < 15; i++) table[i] = (float)i;
  int64_t tv[2] = {5, 3}, n = 2, od[2] = {2, 3};
  int64_t idx[2] = {1, 7};
  tpu_buf_t t = mkbuf(table, TPU_F32, 2, tv), ib = mkbuf(idx, TPU_I64, 1, &n),
            ob = mkbuf(out, TPU_F32, 2, od);
  tpu_gather_attrs_t a = rows_gather(3, true);
  CHECK(tpu_kernel_gather(&a, &t, &ib, &ob, NULL) == TPU_ERR_OUT_OF_RANGE);
  CHECK_CONTAINS(tpu_status_message(), "gather: index 7 out of range for dimension 0 of size 5");
  idx[1] = -1;
  CHECK(tpu_kernel_gather(&a, &t, &ib, &ob, g_pool2) == TPU_ERR_OUT_OF_RANGE);
  CHECK_CONTAINS(tpu_status_message(), "gather: index -1 out of range for dimension 0 of size 5");
  int32_t i32[2] = {5, 0};
  tpu_buf_t ib32 = mkbuf(i32, TPU_I32, 1, &n);
  CHECK(tpu_kernel_gather(&a, &t, &ib32, &ob, NULL) == TPU_ERR_OUT_OF_RANGE);
  CHECK_CONTAINS(tpu_status_message(), "index 5 out of range");
  /* without check_bounds StableHLO clamps: -1 -> row 0, 7 -> row 4 */
  a.check_bounds = false;
  idx[0] = -1;
  idx[1] = 7;
  CHECK_OK(tpu_kernel_gather(&a, &t, &ib, &ob, NULL));
  CHECK(out[0] == 0 && out[2] == 2 && out[3] == 12 && out[5] == 14);
  /* the first bad index in batch order is reported, also on two threads */
  enum { M = 20000 };
  int64_t *many = calloc(M, sizeof(int64_t));
  float *mo = malloc(sizeof(float) * M * 3);
  many[M / 2] = 9;
  many[M - 1] = 8;
  many[M / 4 + 1] = -3;
  int64_t m = M, mod[2] = {M, 3};
  tpu_buf_t mb = mkbuf(many, TPU_I64, 1, &m), mob = mkbuf(mo, TPU_F32, 2, mod);
  a.check_bounds = true;
  CHECK(tpu_kernel_gather(&a, &t, &mb, &mob, g_pool2) == TPU_ERR_OUT_OF_RANGE);
  CHECK_CONTAINS(tpu_status_message(), "index -3 out of range");
  free(many);
  free(mo);
  /* malformed dimension numbers */
  a.start_index_map[0] = 2;
  CHECK(tpu_kernel_gather(&a, &t, &ib, &ob, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "gather");
  a = rows_gather(3, true);
  a.slice_sizes[1] = 2; /* out dims no longer match */
  CHECK(tpu_kernel_gather(&a, &t, &ib, &ob, NULL) == TPU_ERR_INVALID_ARGUMENT);
  float fi[2] = {0, 1};
  tpu_buf_t fb = mkbuf(fi, TPU_F32, 1, &n);
  a = rows_gather(3, true);
  CHECK(tpu_kernel_gather(&a, &t, &fb, &ob, NULL) == TPU_ERR_INVALID_ARGUMENT);
}

/* ---- scatter ------------------------------------------------------------------------------ */

static tpu_scatter_attrs_t rows_scatter(tpu_scatter_kind_t kind, bool check) {
  tpu_scatter_attrs_t a = {.num_update_window_dims = 1, .num_inserted_window_dims = 1,
                           .num_scatter_dims = 1, .update_window_dims = {1},
                           .inserted_window_dims = {0}, .scatter_dims_to_operand_dims = {0},
                           .index_vector_dim = 1, .kind = kind, .check_bounds = check};
  return a;
}

/* index_add / embedding backward: out = x; out[idx[i], :] += upd[i, :] in order */
static int64_t scatter_rows_case(int64_t V, int64_t D, int64_t N, tpu_scatter_kind_t kind,
                                 tpu_pool_t *pool) {
  float *x = malloc(sizeof(float) * V * D), *out = malloc(sizeof(float) * V * D),
        *want = malloc(sizeof(float) * V * D), *upd = malloc(sizeof(float) * N * D);
  int64_t *idx = malloc(sizeof(int64_t) * N);
  for (int64_t i = 0; i < V * D; i++) x[i] = want[i] = frand();
  for (int64_t i = 0; i < N * D; i++) upd[i] = frand();
  for (int64_t i = 0; i < N; i++) idx[i] = (int64_t)(rnd() % (uint64_t)V);
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < D; j++) {
      float *w = &want[idx[i] * D + j];
      *w = kind == TPU_SCATTER_ADD ? *w + upd[i * D + j] : upd[i * D + j];
    }
  int64_t xd[2] = {V, D}, ud[2] = {N, D};
  tpu_buf_t xb = mkbuf(x, TPU_F32, 2, xd), ob = mkbuf(out, TPU_F32, 2, xd),
            ub = mkbuf(upd, TPU_F32, 2, ud), ib = mkbuf(idx, TPU_I64, 1, &N);
  tpu_scatter_attrs_t a = rows_scatter(kind, true);
  int64_t bad = tpu_kernel_scatter(&a, &xb, &ib, &ub, &ob, pool) != TPU_OK;
  if (!bad) bad = memcmp(out, want, sizeof(float) * V * D) != 0; /* same order, same bits */
  /* in place: x is out */
  if (!bad && tpu_kernel_scatter(&a, &xb, &ib, &ub, &xb, pool) != TPU_OK) bad = 1;
  if (!bad) bad = memcmp(x, want, sizeof(float) * V * D) != 0;
  free(x);
  free(out);
  free(want);
  free(upd);
  free(idx);
  return bad;
}

TEST(scatter_add_rows_with_duplicates) {
  CHECK(scatter_rows_case(6, 5, 8, TPU_SCATTER_ADD, NULL) == 0);
  CHECK(scatter_rows_case(6, 5, 8, TPU_SCATTER_REPLACE, NULL) == 0);
  CHECK(scatter_rows_case(100, 256, 2000, TPU_SCATTER_ADD, g_pool2) == 0); /* split over D */
  CHECK(scatter_rows_case(50, 300, 400, TPU_SCATTER_REPLACE, g_pool2) == 0);
  CHECK(scatter_rows_case(3, 1, 50000, TPU_SCATTER_ADD, g_pool2) == 0);

  /* hand values: duplicates accumulate, last write wins */
  float x[6] = {0}, out[6];
  float upd[8] = {1, 10, 2, 20, 3, 30, 4, 40};
  int64_t idx[4] = {2, 0, 2, 2};
  int64_t xd[2] = {3, 2}, ud[2] = {4, 2}, n = 4;
  tpu_buf_t xb = mkbuf(x, TPU_F32, 2, xd), ob = mkbuf(out, TPU_F32, 2, xd),
            ub = mkbuf(upd, TPU_F32, 2, ud), ib = mkbuf(idx, TPU_I64, 1, &n);
  tpu_scatter_attrs_t a = rows_scatter(TPU_SCATTER_ADD, true);
  CHECK_OK(tpu_kernel_scatter(&a, &xb, &ib, &ub, &ob, NULL));
  CHECK(out[0] == 2 && out[1] == 20 && out[2] == 0 && out[4] == 8 && out[5] == 80);
  a.kind = TPU_SCATTER_REPLACE;
  CHECK_OK(tpu_kernel_scatter(&a, &xb, &ib, &ub, &ob, NULL));
  CHECK(out[0] == 2 && out[1] == 20 && out[4] == 4 && out[5] == 40);

  /* bf16 adds in f32 and rounds each time; i32 adds; bool ADD is OR */
  uint16_t xb16[2] = {tpu_f32_to_bf16(256), 0}, ub16[3] = {tpu_f32_to_bf16(1),
                      tpu_f32_to_bf16(1), tpu_f32_to_bf16(0.5f)}, ob16[2];
  int64_t two = 2, three = 3, i3[3] = {0, 0, 1};
  tpu_scatter_attrs_t e = {.num_update_window_dims = 0, .num_inserted_window_dims = 1,
                           .num_scatter_dims = 1, .inserted_window_dims = {0},
                           .scatter_dims_to_operand_dims = {0}, .index_vector_dim = 1,
                           .kind = TPU_SCATTER_ADD, .check_bounds = true};
  tpu_buf_t x16 = mkbuf(xb16, TPU_BF16, 1, &two), u16 = mkbuf(ub16, TPU_BF16, 1, &three),
            o16 = mkbuf(ob16, TPU_BF16, 1, &two), i3b = mkbuf(i3, TPU_I64, 1, &three);
  CHECK_OK(tpu_kernel_scatter(&e, &x16, &i3b, &u16, &o16, NULL));
  CHECK(tpu_bf16_to_f32(ob16[0]) == 256 && tpu_bf16_to_f32(ob16[1]) == 0.5f); /* 256+1 rounds to 256 */
  int32_t xi[2] = {5, 2}, ui[3] = {1, 2, 2147483647}, oi[2];
  tpu_buf_t xib = mkbuf(xi, TPU_I32, 1, &two), uib = mkbuf(ui, TPU_I32, 1, &three),
            oib = mkbuf(oi, TPU_I32, 1, &two);
  CHECK_OK(tpu_kernel_scatter(&e, &xib, &i3b, &uib, &oib, NULL));
  CHECK(oi[0] == 8 && oi[1] == -2147483647); /* wraps */
  uint8_t xbo[2] = {0, 1}, ubo[3] = {0, 1, 0}, obo[2];
  tpu_buf_t xbb = mkbuf(xbo, TPU_BOOL, 1, &two), ubb = mkbuf(ubo, TPU_BOOL, 1, &three),
            obb = mkbuf(obo, TPU_BOOL, 1, &two);
  CHECK_OK(tpu_kernel_scatter(&e, &xbb, &i3b, &ubb, &obb, NULL));
  CHECK(obo[0] == 1 && obo[1] == 1);
}

/* scatter_reduce prod/amax/amin: MUL, MAX, MIN in scatter order, on rows and elements */
TEST(scatter_mul_max_min) {
  float x[4] = {1, 2, 3, 4}, out[4];
  float upd[5] = {2, NAN, -1, 5, 0.5f};
  int64_t idx[5] = {0, 1, 2, 0, 2}, four = 4, five = 5;
  tpu_buf_t xb = mkbuf(x, TPU_F32, 1, &four), ob = mkbuf(out, TPU_F32, 1, &four),
            ub = mkbuf(upd, TPU_F32, 1, &five), ib = mkbuf(idx, TPU_I64, 1, &five);
  tpu_scatter_attrs_t e = {.num_update_window_dims = 0, .num_inserted_window_dims = 1,
                           .num_scatter_dims = 1, .inserted_window_dims = {0},
                           .scatter_dims_to_operand_dims = {0}, .index_vector_dim = 1,
                           .kind = TPU_SCATTER_MUL, .check_bounds = true};
  CHECK_OK(tpu_kernel_scatter(&e, &xb, &ib, &ub, &ob, NULL));
  CHECK(out[0] == 10 && isnan(out[1]) && out[2] == -1.5f && out[3] == 4);
  e.kind = TPU_SCATTER_MAX;
  CHECK_OK(tpu_kernel_scatter(&e, &xb, &ib, &ub, &ob, NULL));
  CHECK(out[0] == 5 && isnan(out[1]) && out[2] == 3 && out[3] == 4);
  e.kind = TPU_SCATTER_MIN;
  CHECK_OK(tpu_kernel_scatter(&e, &xb, &ib, &ub, &ob, NULL));
  CHECK(out[0] == 1 && isnan(out[1]) && out[2] == -1 && out[3] == 4);
  x[1] = NAN; /* a NaN already in x stays for MAX and MIN */
  upd[1] = 7;
  CHECK_OK(tpu_kernel_scatter(&e, &xb, &ib, &ub, &ob, NULL));
  CHECK(isnan(out[1]));
  e.kind = TPU_SCATTER_MAX;
  CHECK_OK(tpu_kernel_scatter(&e, &xb, &ib, &ub, &ob, NULL));
  CHECK(isnan(out[1]));

  /* bf16 multiplies and rounds each time; i32 MUL wraps, MAX/MIN exact; bool MAX is OR */
  int64_t two = 2, three = 3, i3[3] = {0, 0, 1};
  tpu_buf_t i3b = mkbuf(i3, TPU_I64, 1, &three);
  uint16_t xb16[2] = {tpu_f32_to_bf16(3), tpu_f32_to_bf16(-2)},
           ub16[3] = {tpu_f32_to_bf16(3), tpu_f32_to_bf16(3), tpu_f32_to_bf16(0.25f)}, ob16[2];
  tpu_buf_t x16 = mkbuf(xb16, TPU_BF16, 1, &two), u16 = mkbuf(ub16, TPU_BF16, 1, &three),
            o16 = mkbuf(ob16, TPU_BF16, 1, &two);
  e.kind = TPU_SCATTER_MUL;
  CHECK_OK(tpu_kernel_scatter(&e, &x16, &i3b, &u16, &o16, NULL));
  CHECK(tpu_bf16_to_f32(ob16[0]) == 27 && tpu_bf16_to_f32(ob16[1]) == -0.5f);
  int32_t xi[2] = {65536, -3}, ui[3] = {65536, 2, 9}, oi[2];
  tpu_buf_t xib = mkbuf(xi, TPU_I32, 1, &two), uib = mkbuf(ui, TPU_I32, 1, &three),
            oib = mkbuf(oi, TPU_I32, 1, &two);
  CHECK_OK(tpu_kernel_scatter(&e, &xib, &i3b, &uib, &oib, NULL));
  CHECK(oi[0] == 0 && oi[1] == -27); /* 2^16 * 2^16 * 2 wraps to 0 */
  e.kind = TPU_SCATTER_MIN;
  CHECK_OK(tpu_kernel_scatter(&e, &xib, &i3b, &uib, &oib, NULL));
  CHECK(oi[0] == 2 && oi[1] == -3);
  uint8_t xbo[2] = {0, 1}, ubo[3] = {0, 1, 0}, obo[2];
  tpu_buf_t xbb = mkbuf(xbo, TPU_BOOL, 1, &two), ubb = mkbuf(ubo, TPU_BOOL, 1, &three),
            obb = mkbuf(obo, TPU_BOOL, 1, &two);
  e.kind = TPU_SCATTER_MAX;
  CHECK_OK(tpu_kernel_scatter(&e, &xbb, &i3b, &ubb, &obb, NULL));
  CHECK(obo[0] == 1 && obo[1] == 1);
  e.kind = TPU_SCATTER_MIN;
  CHECK_OK(tpu_kernel_scatter(&e, &xbb, &i3b, &ubb, &obb, NULL));
  CHECK(obo[0] == 0 && obo[1] == 0);

  /* rows, split over threads: the same as one thread */
  int64_t V = 7, D = 300, N = 400, xd[2] = {V, D}, ud[2] = {N, D};
  float *rx = malloc(sizeof(float) * V * D), *r1 = malloc(sizeof(float) * V * D),
        *r2 = malloc(sizeof(float) * V * D), *ru = malloc(sizeof(float) * N * D);
  int64_t *ri = malloc(sizeof(int64_t) * N);
  for (int64_t i = 0; i < V * D; i++) rx[i] = frand();
  for (int64_t i = 0; i < N * D; i++) ru[i] = frand();
  for (int64_t i = 0; i < N; i++) ri[i] = (int64_t)(rnd() % (uint64_t)V);
  tpu_buf_t rxb = mkbuf(rx, TPU_F32, 2, xd), r1b = mkbuf(r1, TPU_F32, 2, xd),
            r2b = mkbuf(r2, TPU_F32, 2, xd), rub = mkbuf(ru, TPU_F32, 2, ud),
            rib = mkbuf(ri, TPU_I64, 1, &N);
  tpu_scatter_attrs_t a = rows_scatter(TPU_SCATTER_MAX, true);
  CHECK_OK(tpu_kernel_scatter(&a, &rxb, &rib, &rub, &r1b, NULL));
  CHECK_OK(tpu_kernel_scatter(&a, &rxb, &rib, &rub, &r2b, g_pool2));
  CHECK(memcmp(r1, r2, sizeof(float) * V * D) == 0);
  float want = rx[ri[0] * D];
  for (int64_t i = 0; i < N; i++) {
    if (ri[i] == ri[0] && ru[i * D] > want) want = ru[i * D];
  }
  CHECK(r1[ri[0] * D] == want);
  free(rx);
  free(r1);
  free(r2);
  free(ru);
  free(ri);
}

TEST(scatter_torch_scatter_and_index_put) {
  /* torch.scatter(x, 1, index, src): out[i][index[i][j]] = src[i][j] */
  enum { R = 3, C = 5, J = 2 };
  float x[R * C], src[R * J], out[R * C], want[R * C];
  int64_t index[R * J] = {4, 0, 1, 1, 3, 2};
  int64_t iv[R * J * 2];
  for (int i = 0; i < R * C; i++) x[i] = want[i] = (float)i;
  for (int i = 0; i < R * J; i++) src[i] = 100.0f + (float)i;
  for (int i = 0; i < R; i++)
    for (int j = 0; j < J; j++) {
      iv[(i * J + j) * 2] = i;
      iv[(i * J + j) * 2 + 1] = index[i * J + j];
      want[i * C + index[i * J + j]] += src[i * J + j]; /* scatter_add */
    }
  int64_t xd[2] = {R, C}, id[3] = {R, J, 2}, ud[2] = {R, J};
  tpu_buf_t xb = mkbuf(x, TPU_F32, 2, xd), ob = mkbuf(out, TPU_F32, 2, xd),
            ib = mkbuf(iv, TPU_I64, 3, id), ub = mkbuf(src, TPU_F32, 2, ud);
  tpu_scatter_attrs_t a = {.num_update_window_dims = 0, .num_inserted_window_dims = 2,
                           .num_scatter_dims = 2, .inserted_window_dims = {0, 1},
                           .scatter_dims_to_operand_dims = {0, 1}, .index_vector_dim = 2,
                           .kind = TPU_SCATTER_ADD, .check_bounds = true};
  CHECK_OK(tpu_kernel_scatter(&a, &xb, &ib, &ub, &ob, g_pool2));
  CHECK(memcmp(out, want, sizeof out) == 0);
  a.kind = TPU_SCATTER_REPLACE;
  CHECK_OK(tpu_kernel_scatter(&a, &xb, &ib, &ub, &ob, NULL));
  bool ok = true;
  for (int i = 0; i < R; i++) /* row 1 has index 1 twice: the later src (103) wins */
    for (int j = 0; j < J; j++) ok &= out[i * C + index[i * J + j]] == (i == 1 ? 103.0f : src[i * J + j]);
  CHECK(ok && out[1 * C + 0] == 5.0f);

  /* index_put: x (4, 5, 3)[i0, i1] = v (N, 3) */
  float y[60], yo[60], v[9];
  for (int i = 0; i < 60; i++) y[i] = (float)i;
  for (int i = 0; i < 9; i++) v[i] = -1.0f - (float)i;
  int64_t pv[6] = {3, 4, 0, 0, 2, 1};
  int64_t yd[3] = {4, 5, 3}, pd[2] = {3, 2}, vd[2] = {3, 3};
  tpu_buf_t yb = mkbuf(y, TPU_F32, 3, yd), yob = mkbuf(yo, TPU_F32, 3, yd),
            pb = mkbuf(pv, TPU_I64, 2, pd), vb = mkbuf(v, TPU_F32, 2, vd);
  tpu_scatter_attrs_t p = {.num_update_window_dims = 1, .num_inserted_window_dims = 2,
                           .num_scatter_dims = 2, .update_window_dims = {1},
                           .inserted_window_dims = {0, 1}, .scatter_dims_to_operand_dims = {0, 1},
                           .index_vector_dim = 1, .kind = TPU_SCATTER_REPLACE,
                           .check_bounds = true};
  CHECK_OK(tpu_kernel_scatter(&p, &yb, &pb, &vb, &yob, NULL));
  CHECK(yo[(3 * 5 + 4) * 3 + 2] == -3 && yo[0] == -4 && yo[(2 * 5 + 1) * 3 + 1] == -8);
  CHECK(yo[1 * 3] == 3 && yo[56] == 56 && yo[58] == -2);
}

TEST(scatter_out_of_range) {
  float x[6] = {1, 2, 3, 4, 5, 6}, out[6], upd[4] = {10, 20, 30, 40};
  int64_t idx[2] = {1, 3};
  int64_t xd[2] = {3, 2}, ud[2] = {2, 2}, n = 2;
  tpu_buf_t xb = mkbuf(x, TPU_F32, 2, xd), ob = mkbuf(out, TPU_F32, 2, xd),
            ub = mkbuf(upd, TPU_F32, 2, ud), ib = mkbuf(idx, TPU_I64, 1, &n);
  tpu_scatter_attrs_t a = rows_scatter(TPU_SCATTER_ADD, true);
  for (int i = 0; i < 6; i++) out[i] = -7;
  CHECK(tpu_kernel_scatter(&a, &xb, &ib, &ub, &ob, NULL) == TPU_ERR_OUT_OF_RANGE);
  CHECK_CONTAINS(tpu_status_message(), "scatter: index 3 out of range for dimension 0 of size 3");
  CHECK(out[0] == -7 && out[5] == -7); /* nothing written */
  idx[0] = -2;
  CHECK(tpu_kernel_scatter(&a, &xb, &ib, &ub, &ob, g_pool2) == TPU_ERR_OUT_OF_RANGE);
  CHECK_CONTAINS(tpu_status_message(), "scatter: index -2 out of range for dimension 0 of size 3");
  /* without check_bounds the windows that do not fit are skipped */
  a.check_bounds = false;
  idx[0] = 1;
  CHECK_OK(tpu_kernel_scatter(&a, &xb, &ib, &ub, &ob, NULL));
  CHECK(out[0] == 1 && out[2] == 13 && out[3] == 24 && out[4] == 5);
  /* wide windows: x (8,), windows of 3 at 1 and 6 (6 + 3 > 8) */
  float v[8] = {0}, vo[8], w[6] = {1, 2, 3, 4, 5, 6};
  int64_t st[2] = {1, 6}, eight = 8, sd[2] = {2, 1}, wd[2] = {2, 3};
  tpu_buf_t vb = mkbuf(v, TPU_F32, 1, &eight), vob = mkbuf(vo, TPU_F32, 1, &eight),
            sb = mkbuf(st, TPU_I64, 2, sd), wb = mkbuf(w, TPU_F32, 2, wd);
  tpu_scatter_attrs_t ws = {.num_update_window_dims = 1, .num_inserted_window_dims = 0,
                            .num_scatter_dims = 1, .update_window_dims = {1},
                            .scatter_dims_to_operand_dims = {0}, .index_vector_dim = 1,
                            .kind = TPU_SCATTER_REPLACE, .check_bounds = true};
  CHECK(tpu_kernel_scatter(&ws, &vb, &sb, &wb, &vob, NULL) == TPU_ERR_OUT_OF_RANGE);
  CHECK_CONTAINS(tpu_status_message(), "window of 3");
  ws.check_bounds = false;
  CHECK_OK(tpu_kernel_scatter(&ws, &vb, &sb, &wb, &vob, NULL));
  CHECK(vo[0] == 0 && vo[1] == 1 && vo[3] == 3 && vo[4] == 0 && vo[7] == 0);
  /* malformed */
  ws.num_scatter_dims = 2;
  CHECK(tpu_kernel_scatter(&ws, &vb, &sb, &wb, &vob, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "scatter");
}

/* ---- sort ------------------------------------------------------------------------------------ */

static int64_t sort1(const float *x, int64_t n, bool desc, float *vals, int64_t *idx) {
  tpu_buf_t xb = mkbuf((void *)x, TPU_F32, 1, &n), vb = mkbuf(vals, TPU_F32, 1, &n),
            ib = mkbuf(idx, TPU_I64, 1, &n);
  tpu_sort_attrs_t a = {.dim = 0, .descending = desc, .stable = true};
  return tpu_kernel_sort(&a, &xb, &vb, &ib, NULL) == TPU_OK;
}

TEST(sort_stability_nan_and_zero) {
  float x[8] = {2, 1, 2, 0, 1, 2, 0, 1}, v[8];
  int64_t i[8];
  CHECK(sort1(x, 8, false, v, i));
  int64_t asc[8] = {3, 6, 1, 4, 7, 0, 2, 5}, desc[8] = {0, 2, 5, 1, 4, 7, 3, 6};
  CHECK(memcmp(i, asc, sizeof asc) == 0);
  CHECK(v[0] == 0 && v[2] == 1 && v[7] == 2);
  CHECK(sort1(x, 8, true, v, i));
  CHECK(memcmp(i, desc, sizeof desc) == 0);

  float y[6] = {3, NAN, 1, NAN, -INFINITY, 2};
  int64_t ya[6] = {4, 2, 5, 0, 1, 3}, yd[6] = {1, 3, 0, 5, 2, 4};
  CHECK(sort1(y, 6, false, v, i));
  CHECK(memcmp(i, ya, sizeof ya) == 0 && isnan(v[4]) && isnan(v[5]) && isinf(v[0]));
  CHECK(sort1(y, 6, true, v, i));
  CHECK(memcmp(i, yd, sizeof yd) == 0 && isnan(v[0]) && v[2] == 3);

  float z[4] = {0.0f, -0.0f, 0.0f, -1.0f};
  int64_t za[4] = {3, 0, 1, 2};
  CHECK(sort1(z, 4, false, v, i));
  CHECK(memcmp(i, za, sizeof za) == 0 && signbit(v[2])); /* -0.0 keeps its bits and place */
}

/* The order sort promises, written as a comparison of element positions a < b. */
static int cmp_elems(const tpu_buf_t *x, int64_t oa, int64_t ob, bool desc) {
  if (tpu_dtype_is_float(x->dtype)) {
    double a = tpu_load_f64(x->data, x->dtype, oa), b = tpu_load_f64(x->data, x->dtype, ob);
    int na = a != a, nb = b != b;
    int c = na || nb ? na - nb : (a < b ? -1 : a > b ? 1 : 0);
    return desc ? -c : c;
  }
  int64_t a = tpu_load_i64(x->data, x->dtype, oa), b = tpu_load_i64(x->data, x->dtype, ob);
  int c = a < b ? -1 : a > b ? 1 : 0;
  return desc ? -c : c;
}

TEST(sort_all_dtypes_vs_naive) {
  tpu_dtype_t dts[] = {TPU_F32, TPU_F64, TPU_F16, TPU_BF16, TPU_I64,
                       TPU_I32, TPU_I16, TPU_I8, TPU_U8, TPU_BOOL};
  enum { R = 6, C = 70 };
  int64_t bad = 0;
  for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
    tpu_dtype_t dt = dts[t];
    size_t es = tpu_dtype_size(dt);
    void *x = malloc(es * R * C), *v = malloc(es * R * C);
    int64_t *ix = malloc(sizeof(int64_t) * R * C);
    int64_t xd[2] = {R, C};
    tpu_buf_t xb = mkbuf(x, dt, 2, xd), vb = mkbuf(v, dt, 2, xd), ib = mkbuf(ix, TPU_I64, 2, xd);
    for (int64_t i = 0; i < R * C; i++) {
      if (tpu_dtype_is_float(dt)) {
        double r = (double)(rnd() % 40) / 4 - 5;
        tpu_store_f64(x, dt, i, rnd() % 17 == 0 ? NAN : r);
      } else {
        tpu_store_i64(x, dt, i, (int64_t)(rnd() % 9) - (dt == TPU_U8 || dt == TPU_BOOL ? 0 : 4));
      }
    }
    for (int dim = 0; dim < 2; dim++) {
      for (int desc = 0; desc < 2; desc++) {
        tpu_sort_attrs_t a = {.dim = dim, .descending = desc, .stable = true};
        if (tpu_kernel_sort(&a, &xb, &vb, &ib, g_pool2) != TPU_OK) {
          bad++;
          continue;
        }
        /* every line: a permutation, in order, ties by position, values = x[indices] */
        int64_t lines = dim == 0 ? C : R, len = dim == 0 ? R : C;
        for (int64_t l = 0; l < lines; l++) {
          for (int64_t k = 0; k < len; k++) {
            int64_t off = dim == 0 ? k * C + l : l * C + k;
            int64_t src = ix[off];
            int64_t soff = dim == 0 ? src * C + l : l * C + src;
            if (src < 0 || src >= len || memcmp((char *)v + off * es, (char *)x + soff * es, es)) {
              bad++;
              continue;
            }
            if (k > 0) {
              int64_t prev = ix[dim == 0 ? (k - 1) * C + l : l * C + k - 1];
              int64_t poff = dim == 0 ? prev * C + l : l * C + prev;
              int c = cmp_elems(&xb, poff, soff, desc);
              if (c > 0 || (c == 0 && prev >= src)) bad++;
            }
          }
        }
      }
    }
    if (bad) fprintf(stderr, "    sort %s: %lld bad\n", tpu_dtype_name(dt), (long long)bad);
    free(x);
    free(v);
    free(ix);
  }
  CHECK(bad == 0);
}

static int cmp_pair(const void *pa, const void *pb) {
  const float *a = pa, *b = pb; /* (value, position) */
  if (a[0] != b[0]) return a[0] < b[0] ? -1 : 1;
  return a[1] < b[1] ? -1 : a[1] > b[1];
}

TEST(sort_long_line_strided_inplace_and_errors) {
  enum { N = 100000 };
  float *x = malloc(sizeof(float) * N), *v = malloc(sizeof(float) * N);
  float *pairs = malloc(sizeof(float) * 2 * N);
  int64_t *ix = malloc(sizeof(int64_t) * N);
  for (int i = 0; i < N; i++) {
    x[i] = (float)(rnd() % 1000);
    pairs[2 * i] = x[i];
    pairs[2 * i + 1] = (float)i;
  }
  qsort(pairs, N, 2 * sizeof(float), cmp_pair);
  CHECK(sort1(x, N, false, v, ix));
  bool ok = true;
  for (int i = 0; i < N; i++) ok &= v[i] == pairs[2 * i] && ix[i] == (int64_t)pairs[2 * i + 1];
  CHECK(ok);
  /* in place (values into x itself), indices NULL */
  int64_t n = N;
  tpu_buf_t xb = mkbuf(x, TPU_F32, 1, &n);
  tpu_sort_attrs_t a = {.dim = 0};
  CHECK_OK(tpu_kernel_sort(&a, &xb, &xb, NULL, NULL));
  CHECK(memcmp(x, v, sizeof(float) * N) == 0);
  free(x);
  free(v);
  free(pairs);
  free(ix);

  /* a transposed input: sort the columns of a (3, 4) matrix as rows of its transpose */
  float m[12] = {5, 1, 4, 0, 2, 8, 3, 9, 7, 6, 1, 3}, mv[12];
  int64_t mi[12];
  int64_t td[2] = {4, 3};
  tpu_buf_t mt = mkbuf(m, TPU_F32, 2, td);
  mt.strides[0] = 1;
  mt.strides[1] = 4;
  tpu_buf_t mvb = mkbuf(mv, TPU_F32, 2, td), mib = mkbuf(mi, TPU_I64, 2, td);
  tpu_sort_attrs_t b = {.dim = 1, .descending = true};
  CHECK_OK(tpu_kernel_sort(&b, &mt, &mvb, &mib, g_pool2));
  CHECK(mv[0] == 7 && mv[1] == 5 && mv[2] == 2 && mi[0] == 2 && mi[2] == 1);
  CHECK(mv[9] == 9 && mv[10] == 3 && mv[11] == 0);
  /* only indices, as i32 */
  int32_t mi32[12];
  tpu_buf_t mi32b = mkbuf(mi32, TPU_I32, 2, td);
  CHECK_OK(tpu_kernel_sort(&b, &mt, NULL, &mi32b, NULL));
  CHECK(mi32[0] == 2 && mi32[11] == 0);
  /* errors */
  b.dim = 2;
  CHECK(tpu_kernel_sort(&b, &mt, &mvb, &mib, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "sort");
  b.dim = 0;
  tpu_buf_t wrong = mkbuf(mi, TPU_I64, 2, td);
  CHECK(tpu_kernel_sort(&b, &mt, &wrong, &mib, NULL) == TPU_ERR_INVALID_ARGUMENT);
  tpu_buf_t fidx = mkbuf(mv, TPU_F32, 2, td);
  CHECK(tpu_kernel_sort(&b, &mt, NULL, &fidx, NULL) == TPU_ERR_INVALID_ARGUMENT);
}

int main(void) {
  if (tpu_pool_create(2, tpu_allocator_system(), &g_pool2) != TPU_OK) {
    fprintf(stderr, "cannot create a pool: %s\n", tpu_status_message());
    return 1;
  }
  RUN(gather_embedding_rows);
  RUN(gather_index_select_dim1_and_strided);
  RUN(gather_torch_gather_dims_0_and_1);
  RUN(gather_multi_index_and_wide_slices);
  RUN(gather_out_of_range);
  RUN(scatter_add_rows_with_duplicates);
  RUN(scatter_mul_max_min);
  RUN(scatter_torch_scatter_and_index_put);
  RUN(scatter_out_of_range);
  RUN(sort_stability_nan_and_zero);
  RUN(sort_all_dtypes_vs_naive);
  RUN(sort_long_line_strided_inplace_and_errors);
  tpu_pool_destroy(g_pool2);
  return check_report();
}

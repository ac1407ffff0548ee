/* test_ir_hash.c: tpu_graph_hash is equal for equal graphs and changes when any op, dtype,
 * shape, attribute, operand, parameter or output layout changes; unused attribute entries
 * (past a count or a rank) do not leak into it. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "ir_util.h"
#include "tpu/ir.h"

/* The knobs a variant graph may turn; all zero is the base graph. */
typedef struct variant {
  int x_dim;             /* x is f32[4, 3 + x_dim] */
  tpu_dtype_t dtype;     /* of x and w (F32 by default) */
  bool x_strided;        /* x's strides (x_stride0 or row length, 1) vs dense */
  int64_t x_stride0;
  int perm_swap;         /* transpose perm of the 3-D broadcast */
  int64_t slice_stride;
  tpu_precision_t precision;
  int reduce_kind;       /* SUM (0) or MAX (1) */
  double constant;
  bool out_strided;
  int cmp_dir;
  bool swap_sub;         /* x - c vs c - x */
  bool sort_desc;
  int64_t gather_size;   /* slice size of the gather's offset dim */
  int64_t conv_stride;
  int64_t window;
  int iota_dim;
  bool extra_output;
} variant_t;

static variant_t base(void) {
  variant_t v;
  memset(&v, 0, sizeof(v));
  v.dtype = TPU_F32;
  v.slice_stride = 1;
  v.constant = 1.0;
  v.gather_size = 3;
  v.conv_stride = 1;
  v.window = 2;
  return v;
}

static tpu_graph_t *build(const variant_t *v) {
  tpu_graph_t *g = ir_graph();
  int64_t n = 3 + v->x_dim;
  tpu_shape_t xs = SHAPE(4, n);
  int64_t strides[2] = {v->x_stride0 ? v->x_stride0 : n, 1};
  tpu_value_t x = tpu_graph_parameter(g, v->dtype, &xs, v->x_strided ? strides : NULL);
  tpu_value_t w = ir_param(g, v->dtype, SHAPE(n, 5));
  tpu_dot_attrs_t d = {.num_contract = 1, .lhs_contract = {1}, .rhs_contract = {0},
                       .precision = v->precision};
  tpu_value_t h = tpu_graph_dot_general(g, x, w, &d, TPU_F32);
  tpu_shape_t cs = SHAPE(4, 5);
  tpu_value_t c = tpu_graph_constant(g, TPU_F32, &cs, v->constant);
  tpu_value_t s = v->swap_sub ? tpu_graph_binary(g, TPU_OP_SUB, c, h)
                              : tpu_graph_binary(g, TPU_OP_SUB, h, c);
  tpu_value_t m = tpu_graph_compare(g, (tpu_compare_dir_t)v->cmp_dir, s, c);
  tpu_value_t sel = tpu_graph_select(g, m, s, c);
  tpu_shape_t b3 = SHAPE(2, 4, 5);
  tpu_value_t b = tpu_graph_broadcast_in_dim(g, sel, &b3, (int64_t[]){1, 2});
  tpu_value_t t = tpu_graph_transpose(g, b, v->perm_swap ? (int64_t[]){0, 2, 1}
                                                          : (int64_t[]){1, 0, 2});
  tpu_value_t sl = tpu_graph_slice(g, t, (int64_t[]){0, 0, 0}, (int64_t[]){1, 1, 1},
                                   (int64_t[]){1, 1, v->slice_stride});
  tpu_value_t r = tpu_graph_reduce(g, v->reduce_kind ? TPU_REDUCE_MAX : TPU_REDUCE_SUM, sel,
                                   (bool[]){false, true});
  tpu_sort_attrs_t so = {.dim = 0, .descending = v->sort_desc, .stable = true};
  tpu_value_t sorted = tpu_graph_sort(g, r, &so);
  tpu_value_t ix = ir_param(g, TPU_I32, SHAPE(2, 1));
  tpu_gather_attrs_t ga = {.num_offset_dims = 1, .offset_dims = {1}, .num_collapsed = 1,
                           .collapsed_slice_dims = {0}, .num_start_index_map = 1,
                           .start_index_map = {0}, .index_vector_dim = 1,
                           .slice_sizes = {1, v->gather_size}};
  tpu_value_t gt = tpu_graph_gather(g, sel, ix, &ga);
  tpu_value_t img = ir_param(g, TPU_F32, SHAPE(1, 4, 4, 1));
  tpu_value_t k = ir_param(g, TPU_F32, SHAPE(2, 2, 1, 1));
  tpu_conv_attrs_t cv = {.num_spatial = 2, .stride = {v->conv_stride, 1},
                         .lhs_dilation = {1, 1}, .rhs_dilation = {1, 1},
                         .feature_group_count = 1, .batch_group_count = 1, .in_feature = 3,
                         .in_spatial = {1, 2}, .k_out_feature = 3, .k_in_feature = 2,
                         .k_spatial = {0, 1}, .out_feature = 3, .out_spatial = {1, 2}};
  tpu_value_t conv = tpu_graph_convolution(g, img, k, &cv, TPU_F32);
  tpu_reduce_window_attrs_t rw = {.kind = TPU_REDUCE_MAX, .window = {1, v->window, 2, 1},
                                  .stride = {1, 1, 1, 1}, .dilation = {1, 1, 1, 1}};
  tpu_value_t pool = tpu_graph_reduce_window(g, img, &rw);
  tpu_shape_t is = SHAPE(3, 3);
  tpu_value_t io = tpu_graph_iota(g, TPU_I32, &is, v->iota_dim);
  int64_t ost[2] = {1, 2}; /* column-major f32[2,3] */
  tpu_graph_output(g, sl, NULL);
  tpu_graph_output(g, sorted, NULL);
  tpu_graph_output(g, gt, v->out_strided ? ost : NULL);
  tpu_graph_output(g, conv, NULL);
  tpu_graph_output(g, pool, NULL);
  tpu_graph_output(g, io, NULL);
  if (v->extra_output) tpu_graph_output(g, io, NULL);
  return g;
}

static uint64_t hash_of(const variant_t *v) {
  tpu_graph_t *g = build(v);
  if (tpu_graph_status(g) != TPU_OK) {
    fprintf(stderr, "  build error: %s\n", tpu_graph_error_message(g));
    check_current_failed = 1;
  }
  uint64_t h = tpu_graph_hash(g);
  tpu_graph_destroy(g);
  return h;
}

TEST(equal_graphs_hash_equal) {
  variant_t v = base();
  uint64_t a = hash_of(&v), b = hash_of(&v);
  CHECK(a == b);
  CHECK(a != 0);
}

TEST(any_change_changes_the_hash) {
  uint64_t h0;
  {
    variant_t v = base();
    h0 = hash_of(&v);
  }
  uint64_t seen[32];
  int n = 0;
  seen[n++] = h0;
#define VARY(field, value)                                                     \
  do {                                                                         \
    variant_t v = base();                                                      \
    v.field = value;                                                           \
    uint64_t h = hash_of(&v);                                                  \
    for (int i = 0; i < n; i++) {                                              \
      if (seen[i] == h) fprintf(stderr, "  %s collides with variant %d\n", #field, i); \
      CHECK(seen[i] != h);                                                     \
    }                                                                          \
    seen[n++] = h;                                                             \
  } while (0)
  VARY(x_dim, 1);                   /* shape */
  VARY(dtype, TPU_BF16);            /* dtype */
  VARY(precision, TPU_PRECISION_HIGHEST);
  VARY(perm_swap, 1);
  VARY(slice_stride, 2);
  VARY(reduce_kind, 1);
  VARY(constant, 2.0);
  VARY(out_strided, true);          /* output layout */
  VARY(cmp_dir, TPU_CMP_GT);
  VARY(swap_sub, true);             /* operand order */
  VARY(sort_desc, true);
  VARY(gather_size, 2);
  VARY(conv_stride, 2);
  VARY(window, 3);
  VARY(iota_dim, 1);
  VARY(extra_output, true);
  {
    variant_t v = base();  /* a stride for a dense parameter is not used */
    v.x_stride0 = 16;
    CHECK(hash_of(&v) == h0);
  }
  {
    variant_t v = base();  /* parameter layout: padded rows */
    v.x_strided = true;
    v.x_stride0 = 16;
    uint64_t h = hash_of(&v);
    for (int i = 0; i < n; i++) CHECK(seen[i] != h);
    v.x_stride0 = 17;
    CHECK(hash_of(&v) != h);
  }
#undef VARY
}

TEST(dense_strides_are_stored_as_dense) {
  /* Row-major strides (any stride on a size-1 dim) describe the dense layout: the graph
   * records "dense", so it hashes like the graph built without strides. */
  variant_t dense = base(), same = base();
  same.x_strided = true;  /* strides (3, 1) for f32[4,3] */
  CHECK(hash_of(&dense) == hash_of(&same));
  tpu_graph_t *g = ir_graph();
  tpu_shape_t s = SHAPE(2, 1, 3);
  tpu_value_t x = tpu_graph_parameter(g, TPU_F32, &s, (int64_t[]){3, 99, 1});
  CHECK(!tpu_graph_node(g, x)->attrs.param.strided);
  tpu_value_t y = tpu_graph_parameter(g, TPU_F32, &s, (int64_t[]){1, 1, 2});
  CHECK(tpu_graph_node(g, y)->attrs.param.strided);
  CHECK_OK(tpu_graph_output(g, x, (int64_t[]){3, 3, 1}));
  CHECK_OK(tpu_graph_output(g, x, (int64_t[]){1, 3, 2}));
  int64_t st[TPU_MAX_RANK];
  CHECK(!tpu_graph_output_strides(g, 0, st));
  CHECK(tpu_graph_output_strides(g, 1, st) && st[2] == 2);
  tpu_shape_t e = SHAPE(0, 4);
  tpu_value_t z = tpu_graph_parameter(g, TPU_F32, &e, (int64_t[]){7, 7});
  CHECK(!tpu_graph_node(g, z)->attrs.param.strided); /* empty: any layout is dense */
  tpu_graph_destroy(g);
}

TEST(unused_attribute_entries_do_not_matter) {
  /* Callers may leave garbage past the counts and ranks; builders store attributes
   * canonically, so the hash only sees what the op uses. */
  tpu_dot_attrs_t clean = {.num_contract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
  tpu_dot_attrs_t dirty = clean;
  dirty.lhs_contract[5] = 77;
  dirty.rhs_batch[2] = -4;
  tpu_reduce_window_attrs_t rw = {.kind = TPU_REDUCE_SUM, .window = {2, 2}, .stride = {1, 1},
                                  .dilation = {1, 1}};
  tpu_reduce_window_attrs_t rw_dirty = rw;
  rw_dirty.window[6] = 9;
  rw_dirty.pad_hi[3] = 1;
  uint64_t h[2];
  for (int k = 0; k < 2; k++) {
    tpu_graph_t *g = ir_graph();
    tpu_value_t a = ir_param(g, TPU_F32, SHAPE(2, 3)), b = ir_param(g, TPU_F32, SHAPE(3, 2));
    tpu_graph_output(g, tpu_graph_dot_general(g, a, b, k ? &dirty : &clean, TPU_F32), NULL);
    tpu_graph_output(g, tpu_graph_reduce_window(g, a, k ? &rw_dirty : &rw), NULL);
    int64_t perm[TPU_MAX_RANK] = {1, 0, 5, 5, 5, 5, 5, 5};
    if (k) perm[7] = 3;
    tpu_graph_output(g, tpu_graph_transpose(g, a, perm), NULL);
    CHECK(tpu_graph_status(g) == TPU_OK);
    h[k] = tpu_graph_hash(g);
    tpu_graph_destroy(g);
  }
  CHECK(h[0] == h[1]);
}

TEST(hash_is_cheap) {
  /* The eager hot path hashes a one-op graph per call: keep it far below a microsecond. */
  tpu_graph_t *g = ir_graph();
  tpu_value_t a = ir_param(g, TPU_F32, SHAPE(128, 256)), b = ir_param(g, TPU_F32, SHAPE(128, 256));
  tpu_graph_output(g, tpu_graph_binary(g, TPU_OP_ADD, a, b), NULL);
  struct timespec t0, t1;
  uint64_t acc = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < 100000; i++) acc += tpu_graph_hash(g);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e5;
  printf("  tpu_graph_hash of a 3-node graph: %.0f ns (checksum %llx)\n", ns,
         (unsigned long long)(acc & 0xff));
  CHECK(ns < 5000.0); /* generous: sanitizer builds are slow */
  tpu_graph_destroy(g);
}

int main(void) {
  RUN(equal_graphs_hash_equal);
  RUN(any_change_changes_the_hash);
  RUN(dense_strides_are_stored_as_dense);
  RUN(unused_attribute_entries_do_not_matter);
  RUN(hash_is_cheap);
  return check_report();
}

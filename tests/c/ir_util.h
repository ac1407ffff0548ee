/* ir_util.h: small helpers shared by the IR tests (test_ir_*.c): shape literals, graph and
 * parameter one-liners, and (after check.h) EXPECT_TYPE / EXPECT_ERROR / CASE checks. */
#ifndef TPU_TESTS_IR_UTIL_H
#define TPU_TESTS_IR_UTIL_H

#include <stdarg.h>
#include <string.h>

#include "tpu/ir.h"

static inline tpu_shape_t ir_shape(int rank, const int64_t *dims) {
  tpu_shape_t s;
  memset(&s, 0, sizeof(s));
  s.rank = rank;
  for (int i = 0; i < rank && i < TPU_MAX_RANK; i++) s.dims[i] = dims[i];
  return s;
}

/* SHAPE(2, 3) is f32[2,3]'s shape; SCALAR is rank 0. */
#define SHAPE(...)                                                              \
  ir_shape((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),           \
           (int64_t[]){__VA_ARGS__})
#define SCALAR ir_shape(0, NULL)

static inline tpu_graph_t *ir_graph(void) {
  tpu_graph_t *g = NULL;
  if (tpu_graph_create(tpu_allocator_system(), &g) != TPU_OK) return NULL;
  return g;
}

/* A parameter of |dtype| and |shape| (dense). */
static inline tpu_value_t ir_param(tpu_graph_t *g, tpu_dtype_t dtype, tpu_shape_t shape) {
  return tpu_graph_parameter(g, dtype, &shape, NULL);
}

/* ---- checks (include check.h and ir/graph_internal.h first) ------------------------ */

#if defined(TPU_TESTS_CHECK_H) && defined(TPU_IR_GRAPH_INTERNAL_H)
/* Checks that |v| is a node of type |want| ("f32[2,3]"). */
static inline void expect_type_at(tpu_graph_t *g, tpu_value_t v, const char *want, int line) {
  const tpu_node_t *n = tpu_graph_node(g, v);
  if (!n) {
    fprintf(stderr, "  line %d: no node (value %d), graph error: %s\n", line, (int)v,
            tpu_graph_error_message(g));
    check_current_failed = 1;
    return;
  }
  char have[TPU_IR_TYPE_CAP];
  tpu_ir_format_type(n->dtype, &n->shape, have, sizeof(have));
  if (strcmp(have, want) != 0) {
    fprintf(stderr, "  line %d: type %s, want %s\n", line, have, want);
    check_current_failed = 1;
  }
}
#define EXPECT_TYPE(g, v, want) expect_type_at(g, v, want, __LINE__)

/* Checks that building |v| failed with a message containing |needle|. */
#define EXPECT_ERROR(g, v, needle)                                             \
  do {                                                                         \
    CHECK((v) == TPU_NO_VALUE);                                                \
    CHECK(tpu_graph_status(g) != TPU_OK);                                      \
    CHECK_CONTAINS(tpu_graph_error_message(g), needle);                        \
  } while (0)

/* A fresh graph for one bad case; |g| is destroyed by END_CASE. */
#define CASE tpu_graph_t *g = ir_graph()
#define END_CASE tpu_graph_destroy(g)
#endif /* check.h and graph_internal.h */

#ifdef TPU_TESTS_CHECK_H
/* Serializes |g|, reads it back and checks that the copy is the same graph (same hash). */
static inline void expect_serialize_round_trip(tpu_graph_t *g) {
  unsigned char *bytes = NULL;
  size_t len = 0;
  CHECK_OK(tpu_graph_serialize(g, tpu_allocator_system(), &bytes, &len));
  tpu_graph_t *back = NULL;
  CHECK_OK(tpu_graph_deserialize(bytes, len, tpu_allocator_system(), &back));
  CHECK(back && tpu_graph_hash(back) == tpu_graph_hash(g));
  tpu_graph_destroy(back);
  tpu_allocator_free(tpu_allocator_system(), bytes);
}
#endif /* check.h */

#endif /* TPU_TESTS_IR_UTIL_H */

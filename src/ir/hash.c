/* hash.c: tpu_graph_hash, the 64-bit structural hash the executable cache keys on.
 *
 * FNV-1a style, one 64-bit word at a time (xor, multiply by an odd constant, fold the high
 * half down; a splitmix64 finalizer at the end) over every field that changes the program:
 * per node its op, dtype, shape, operands and the attributes of its op (field by field,
 * never raw struct bytes, so padding never leaks in); per parameter its index and strides;
 * per output its value and strides. Builders store attributes canonically (unused entries
 * zero, row-major strides as dense), so equal requests give equal hashes.
 */
#include <string.h>

#include "ir/graph_internal.h"

#define FNV_OFFSET 0xcbf29ce484222325ull
#define WORD_PRIME 0x9e3779b97f4a7c15ull /* odd: the multiply is a bijection */

/* Word-wise FNV-1a step; the shift folds high bits down, since a multiply only carries
 * differences upward. Fast enough for the eager hot path (a few ns per node). */
static uint64_t h_u64(uint64_t h, uint64_t v) {
  h ^= v;
  h *= WORD_PRIME;
  return h ^ (h >> 31);
}

static uint64_t h_final(uint64_t h) {
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

static uint64_t h_i64(uint64_t h, int64_t v) { return h_u64(h, (uint64_t)v); }

static uint64_t h_arr(uint64_t h, const int64_t *v, int n) {
  for (int i = 0; i < n; i++) h = h_i64(h, v[i]);
  return h;
}

static uint64_t h_bools(uint64_t h, const bool *v, int n) {
  for (int i = 0; i < n; i++) h = h_u64(h, v[i] ? 1u : 0u);
  return h;
}

static uint64_t h_double(uint64_t h, double d) {
  uint64_t bits;
  memcpy(&bits, &d, sizeof(bits));
  return h_u64(h, bits);
}

static uint64_t hash_attrs(uint64_t h, const tpu_node_t *n, int rank) {
  const tpu_attrs_t *a = &n->attrs;
  const int R = TPU_MAX_RANK;
  switch (n->op) {
    case TPU_OP_PARAMETER:
      h = h_i64(h, a->param.index);
      h = h_u64(h, a->param.strided);
      if (a->param.strided) h = h_arr(h, a->param.strides, rank);
      return h;
    case TPU_OP_CONSTANT:
      return tpu_dtype_is_float(n->dtype) ? h_double(h, a->constant.value)
                                          : h_i64(h, a->constant.ivalue);
    case TPU_OP_IOTA: return h_i64(h, a->iota.dim);
    case TPU_OP_RNG: return h_i64(h, a->rng.dist);
    case TPU_OP_COMPARE: return h_i64(h, a->compare.direction);
    case TPU_OP_BROADCAST_IN_DIM: return h_arr(h, a->broadcast.dims, R);
    case TPU_OP_TRANSPOSE: return h_arr(h, a->transpose.perm, R);
    case TPU_OP_SLICE:
      h = h_arr(h, a->slice.start, R);
      h = h_arr(h, a->slice.limit, R);
      return h_arr(h, a->slice.stride, R);
    case TPU_OP_DYNAMIC_SLICE: return h_arr(h, a->dynamic_slice.sizes, R);
    case TPU_OP_CONCATENATE: return h_i64(h, a->concat.dim);
    case TPU_OP_PAD:
      h = h_arr(h, a->pad.lo, R);
      h = h_arr(h, a->pad.hi, R);
      return h_arr(h, a->pad.interior, R);
    case TPU_OP_REVERSE: return h_bools(h, a->reverse.dims, R);
    case TPU_OP_REDUCE:
      h = h_i64(h, a->reduce.kind);
      return h_bools(h, a->reduce.dims, R);
    case TPU_OP_REDUCE_WINDOW:
      h = h_i64(h, a->reduce_window.kind);
      h = h_arr(h, a->reduce_window.window, R);
      h = h_arr(h, a->reduce_window.stride, R);
      h = h_arr(h, a->reduce_window.dilation, R);
      h = h_arr(h, a->reduce_window.pad_lo, R);
      return h_arr(h, a->reduce_window.pad_hi, R);
    case TPU_OP_SCAN:
      h = h_i64(h, a->scan.kind);
      return h_i64(h, a->scan.dim);
    case TPU_OP_DOT_GENERAL:
      h = h_i64(h, a->dot.num_batch);
      h = h_i64(h, a->dot.num_contract);
      h = h_arr(h, a->dot.lhs_batch, R);
      h = h_arr(h, a->dot.rhs_batch, R);
      h = h_arr(h, a->dot.lhs_contract, R);
      h = h_arr(h, a->dot.rhs_contract, R);
      return h_i64(h, a->dot.precision);
    case TPU_OP_CONVOLUTION:
      h = h_i64(h, a->conv.num_spatial);
      h = h_arr(h, a->conv.stride, 3);
      h = h_arr(h, a->conv.pad_lo, 3);
      h = h_arr(h, a->conv.pad_hi, 3);
      h = h_arr(h, a->conv.lhs_dilation, 3);
      h = h_arr(h, a->conv.rhs_dilation, 3);
      h = h_i64(h, a->conv.feature_group_count);
      h = h_i64(h, a->conv.batch_group_count);
      h = h_i64(h, a->conv.in_batch);
      h = h_i64(h, a->conv.in_feature);
      h = h_arr(h, a->conv.in_spatial, 3);
      h = h_i64(h, a->conv.k_out_feature);
      h = h_i64(h, a->conv.k_in_feature);
      h = h_arr(h, a->conv.k_spatial, 3);
      h = h_i64(h, a->conv.out_batch);
      h = h_i64(h, a->conv.out_feature);
      h = h_arr(h, a->conv.out_spatial, 3);
      return h_i64(h, a->conv.precision);
    case TPU_OP_GATHER:
      h = h_i64(h, a->gather.num_offset_dims);
      h = h_i64(h, a->gather.num_collapsed);
      h = h_i64(h, a->gather.num_start_index_map);
      h = h_arr(h, a->gather.offset_dims, R);
      h = h_arr(h, a->gather.collapsed_slice_dims, R);
      h = h_arr(h, a->gather.start_index_map, R);
      h = h_i64(h, a->gather.index_vector_dim);
      h = h_arr(h, a->gather.slice_sizes, R);
      return h_u64(h, a->gather.check_bounds);
    case TPU_OP_SCATTER:
      h = h_i64(h, a->scatter.num_update_window_dims);
      h = h_i64(h, a->scatter.num_inserted_window_dims);
      h = h_i64(h, a->scatter.num_scatter_dims);
      h = h_arr(h, a->scatter.update_window_dims, R);
      h = h_arr(h, a->scatter.inserted_window_dims, R);
      h = h_arr(h, a->scatter.scatter_dims_to_operand_dims, R);
      h = h_i64(h, a->scatter.index_vector_dim);
      h = h_i64(h, a->scatter.kind);
      return h_u64(h, a->scatter.check_bounds);
    case TPU_OP_SORT:
    case TPU_OP_ARGSORT:
      h = h_i64(h, a->sort.dim);
      h = h_u64(h, a->sort.descending);
      return h_u64(h, a->sort.stable);
    case TPU_OP_CHOLESKY:
      return h_u64(h, a->cholesky.lower);
    case TPU_OP_TRIANGULAR_SOLVE:
      h = h_u64(h, a->triangular_solve.left_side);
      h = h_u64(h, a->triangular_solve.lower);
      h = h_u64(h, a->triangular_solve.unit_diagonal);
      return h_u64(h, a->triangular_solve.transpose_a);
    case TPU_OP_LU_PIVOTS_TO_PERMUTATION:
      return h_i64(h, a->lu_permutation.size);
    default: return h; /* elementwise ops have no attributes */
  }
}

uint64_t tpu_graph_hash(const tpu_graph_t *g) {
  if (!g) return 0;
  uint64_t h = FNV_OFFSET;
  h = h_i64(h, g->num_nodes);
  h = h_i64(h, g->num_params);
  for (int i = 0; i < g->num_nodes; i++) {
    const tpu_node_t *n = &g->nodes[i];
    h = h_i64(h, n->op);
    h = h_i64(h, n->dtype);
    int rank = n->shape.rank < 0 ? 0 : n->shape.rank;
    if (rank > TPU_MAX_RANK) rank = TPU_MAX_RANK;
    h = h_i64(h, n->shape.rank);
    h = h_arr(h, n->shape.dims, rank);
    h = h_i64(h, n->num_operands);
    for (int k = 0; k < n->num_operands && n->operands; k++) h = h_i64(h, n->operands[k]);
    h = hash_attrs(h, n, rank);
  }
  h = h_i64(h, g->num_outputs);
  for (int i = 0; i < g->num_outputs; i++) {
    const tpu_ir_output_t *o = &g->outputs[i];
    h = h_i64(h, o->value);
    h = h_u64(h, o->strided);
    if (o->strided) h = h_arr(h, o->strides, TPU_MAX_RANK);
  }
  return h_final(h);
}

/* serialize.c: a graph as bytes and back (tpu_graph_serialize / tpu_graph_deserialize), for
 * the on-disk executable cache.
 *
 * Layout (native byte order; the tag records it):
 *   header  "TPUGRAPH" | u32 format version | u64 ABI tag | u64 body bytes | u64 body checksum
 *   body    u32 nodes | u32 outputs | per node: u16 op, u8 dtype, u8 rank, i64 dims[rank],
 *           u32 operands, i32 operand values, then the attributes of its op field by field
 *           (every array entry; bools as u8 0/1; enums as i32) | per output: i32 value,
 *           u8 strided, i64 strides[TPU_MAX_RANK] if strided.
 * The ABI tag hashes what the bytes depend on (op table, dtype count, max rank, byte
 * order): bytes from an incompatible build are refused, not decoded. Decoding checks
 * every count and length against the buffer before it reads or allocates, and the result
 * is re-verified (tpu_graph_verify), so truncated or corrupted bytes give an error status,
 * never an overread. One function (io_node) describes a node for both directions.
 */
#include <string.h>

#include "ir/graph_internal.h"

#define MAGIC "TPUGRAPH"
#define FORMAT_VERSION 1u
#define HEADER_BYTES TPU_IR_SERIAL_HEADER_BYTES  /* magic, version, tag, body bytes, checksum */

typedef struct io {
  bool writing;
  tpu_allocator_t host;
  unsigned char *out;        /* writing: growable buffer */
  size_t len, cap;
  const unsigned char *in;   /* reading: the body */
  size_t pos, end;
  tpu_status_t st;           /* first error; later calls do nothing */
} io_t;

static void io_fail(io_t *io, tpu_status_t st, const char *what) {
  if (io->st != TPU_OK) return;
  io->st = tpu_status_set(st, "graph deserialize: %s", what);
}

static void io_bytes(io_t *io, void *p, size_t n) {
  if (io->st != TPU_OK) return;
  if (!io->writing) {
    if (io->end - io->pos < n) return io_fail(io, TPU_ERR_INVALID_ARGUMENT, "truncated body");
    memcpy(p, io->in + io->pos, n);
    io->pos += n;
    return;
  }
  size_t need;
  if (!tpu_size_add(io->len, n, &need)) {
    io->st = tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "graph serialize: too large");
    return;
  }
  if (need > io->cap) {
    size_t cap = io->cap ? io->cap : 1024;
    while (cap < need) {
      if (!tpu_size_mul(cap, 2, &cap)) {
        io->st = tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "graph serialize: too large");
        return;
      }
    }
    unsigned char *grown;
    tpu_status_t st = tpu_allocator_calloc(io->host, cap, 1, "graph_serialize", (void **)&grown);
    if (st != TPU_OK) {
      io->st = st;
      return;
    }
    if (io->len) memcpy(grown, io->out, io->len);
    tpu_allocator_free(io->host, io->out);
    io->out = grown;
    io->cap = cap;
  }
  memcpy(io->out + io->len, p, n);
  io->len = need;
}

static void io_i64(io_t *io, int64_t *v) { io_bytes(io, v, sizeof *v); }

static void io_arr(io_t *io, int64_t *v, int n) {
  for (int i = 0; i < n; i++) io_i64(io, &v[i]);
}

static void io_int(io_t *io, int *v) {
  int32_t x = (int32_t)*v;
  io_bytes(io, &x, sizeof x);
  if (!io->writing) *v = x;
}

static void io_bool(io_t *io, bool *v) {
  uint8_t x = *v ? 1 : 0;
  io_bytes(io, &x, 1);
  if (io->writing || io->st != TPU_OK) return;
  if (x > 1) return io_fail(io, TPU_ERR_INVALID_ARGUMENT, "bad bool");
  *v = x;
}

static void io_bools(io_t *io, bool *v, int n) {
  for (int i = 0; i < n; i++) io_bool(io, &v[i]);
}

static void io_double(io_t *io, double *v) { io_bytes(io, v, sizeof *v); }

/* An enum field as i32, checked to lie in 0..count-1 when read. */
#define IO_ENUM(io, field, count)                                               \
  do {                                                                          \
    int e_ = (int)(field);                                                      \
    io_int(io, &e_);                                                            \
    if (!(io)->writing && (io)->st == TPU_OK) {                                 \
      if (e_ < 0 || e_ >= (count)) io_fail(io, TPU_ERR_INVALID_ARGUMENT, "bad enum"); \
      else (field) = e_;                                                        \
    }                                                                           \
  } while (0)

static void io_attrs(io_t *io, tpu_op_t op, tpu_attrs_t *a) {
  const int R = TPU_MAX_RANK;
  switch (op) {
    case TPU_OP_PARAMETER:
      io_int(io, &a->param.index);
      io_bool(io, &a->param.strided);
      return io_arr(io, a->param.strides, R);
    case TPU_OP_CONSTANT:
      io_double(io, &a->constant.value);
      return io_i64(io, &a->constant.ivalue);
    case TPU_OP_IOTA: return io_int(io, &a->iota.dim);
    case TPU_OP_RNG: IO_ENUM(io, a->rng.dist, TPU_RNG_BITS + 1); return;
    case TPU_OP_COMPARE: IO_ENUM(io, a->compare.direction, TPU_CMP_GE + 1); return;
    case TPU_OP_BROADCAST_IN_DIM: return io_arr(io, a->broadcast.dims, R);
    case TPU_OP_TRANSPOSE: return io_arr(io, a->transpose.perm, R);
    case TPU_OP_SLICE:
      io_arr(io, a->slice.start, R);
      io_arr(io, a->slice.limit, R);
      return io_arr(io, a->slice.stride, R);
    case TPU_OP_DYNAMIC_SLICE: return io_arr(io, a->dynamic_slice.sizes, R);
    case TPU_OP_CONCATENATE: return io_int(io, &a->concat.dim);
    case TPU_OP_PAD:
      io_arr(io, a->pad.lo, R);
      io_arr(io, a->pad.hi, R);
      return io_arr(io, a->pad.interior, R);
    case TPU_OP_REVERSE: return io_bools(io, a->reverse.dims, R);
    case TPU_OP_REDUCE:
      IO_ENUM(io, a->reduce.kind, TPU_REDUCE_ARGMIN + 1);
      return io_bools(io, a->reduce.dims, R);
    case TPU_OP_REDUCE_WINDOW:
      IO_ENUM(io, a->reduce_window.kind, TPU_REDUCE_ARGMIN + 1);
      io_arr(io, a->reduce_window.window, R);
      io_arr(io, a->reduce_window.stride, R);
      io_arr(io, a->reduce_window.dilation, R);
      io_arr(io, a->reduce_window.pad_lo, R);
      return io_arr(io, a->reduce_window.pad_hi, R);
    case TPU_OP_SCAN:
      IO_ENUM(io, a->scan.kind, TPU_REDUCE_ARGMIN + 1);
      return io_int(io, &a->scan.dim);
    case TPU_OP_DOT_GENERAL:
      io_int(io, &a->dot.num_batch);
      io_int(io, &a->dot.num_contract);
      io_arr(io, a->dot.lhs_batch, R);
      io_arr(io, a->dot.rhs_batch, R);
      io_arr(io, a->dot.lhs_contract, R);
      io_arr(io, a->dot.rhs_contract, R);
      IO_ENUM(io, a->dot.precision, TPU_PRECISION_HIGHEST + 1);
      return;
    case TPU_OP_CONVOLUTION:
      io_int(io, &a->conv.num_spatial);
      io_arr(io, a->conv.stride, 3);
      io_arr(io, a->conv.pad_lo, 3);
      io_arr(io, a->conv.pad_hi, 3);
      io_arr(io, a->conv.lhs_dilation, 3);
      io_arr(io, a->conv.rhs_dilation, 3);
      io_i64(io, &a->conv.feature_group_count);
      io_i64(io, &a->conv.batch_group_count);
      io_i64(io, &a->conv.in_batch);
      io_i64(io, &a->conv.in_feature);
      io_arr(io, a->conv.in_spatial, 3);
      io_i64(io, &a->conv.k_out_feature);
      io_i64(io, &a->conv.k_in_feature);
      io_arr(io, a->conv.k_spatial, 3);
      io_i64(io, &a->conv.out_batch);
      io_i64(io, &a->conv.out_feature);
      io_arr(io, a->conv.out_spatial, 3);
      IO_ENUM(io, a->conv.precision, TPU_PRECISION_HIGHEST + 1);
      return;
    case TPU_OP_GATHER:
      io_int(io, &a->gather.num_offset_dims);
      io_int(io, &a->gather.num_collapsed);
      io_int(io, &a->gather.num_start_index_map);
      io_arr(io, a->gather.offset_dims, R);
      io_arr(io, a->gather.collapsed_slice_dims, R);
      io_arr(io, a->gather.start_index_map, R);
      io_i64(io, &a->gather.index_vector_dim);
      io_arr(io, a->gather.slice_sizes, R);
      return io_bool(io, &a->gather.check_bounds);
    case TPU_OP_SCATTER:
      io_int(io, &a->scatter.num_update_window_dims);
      io_int(io, &a->scatter.num_inserted_window_dims);
      io_int(io, &a->scatter.num_scatter_dims);
      io_arr(io, a->scatter.update_window_dims, R);
      io_arr(io, a->scatter.inserted_window_dims, R);
      io_arr(io, a->scatter.scatter_dims_to_operand_dims, R);
      io_i64(io, &a->scatter.index_vector_dim);
      IO_ENUM(io, a->scatter.kind, TPU_SCATTER_MIN + 1);
      return io_bool(io, &a->scatter.check_bounds);
    case TPU_OP_SORT:
    case TPU_OP_ARGSORT:
      io_int(io, &a->sort.dim);
      io_bool(io, &a->sort.descending);
      return io_bool(io, &a->sort.stable);
    case TPU_OP_CHOLESKY:
      return io_bool(io, &a->cholesky.lower);
    case TPU_OP_TRIANGULAR_SOLVE:
      io_bool(io, &a->triangular_solve.left_side);
      io_bool(io, &a->triangular_solve.lower);
      io_bool(io, &a->triangular_solve.unit_diagonal);
      return io_bool(io, &a->triangular_solve.transpose_a);
    case TPU_OP_LU_PIVOTS_TO_PERMUTATION:
      return io_i64(io, &a->lu_permutation.size);
    default: return; /* elementwise ops have no attributes */
  }
}

/* Op, dtype and shape of |n| (operands are handled by the callers). */
static void io_node_head(io_t *io, tpu_node_t *n) {
  uint16_t op = (uint16_t)n->op;
  uint8_t dtype = (uint8_t)n->dtype, rank = (uint8_t)n->shape.rank;
  io_bytes(io, &op, sizeof op);
  io_bytes(io, &dtype, 1);
  io_bytes(io, &rank, 1);
  if (io->st != TPU_OK) return;
  if (!io->writing) {
    if (op >= TPU_OP_COUNT) return io_fail(io, TPU_ERR_INVALID_ARGUMENT, "bad op");
    if (dtype >= TPU_DTYPE_COUNT) return io_fail(io, TPU_ERR_INVALID_ARGUMENT, "bad dtype");
    if (rank > TPU_MAX_RANK) return io_fail(io, TPU_ERR_INVALID_ARGUMENT, "bad rank");
    n->op = (tpu_op_t)op;
    n->dtype = (tpu_dtype_t)dtype;
    n->shape.rank = rank;
  }
  io_arr(io, n->shape.dims, n->shape.rank);
}

uint64_t tpu_ir_serial_checksum(const void *bytes, size_t len) {
  const unsigned char *p = bytes;
  uint64_t h = 0xcbf29ce484222325ull ^ len;
  for (size_t i = 0; i < len; i++) {
    h = (h ^ p[i]) * 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

uint64_t tpu_graph_serial_tag(void) {
  static const uint32_t one = 1;
  unsigned char little;
  memcpy(&little, &one, 1);
  uint64_t h = 0x9e3779b97f4a7c15ull;
  uint64_t facts[] = {FORMAT_VERSION, TPU_OP_COUNT, TPU_DTYPE_COUNT, TPU_MAX_RANK, little,
                      sizeof(double)};
  for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++) {
    h = (h ^ facts[i]) * 0x100000001b3ull;
  }
  for (int op = 0; op < TPU_OP_COUNT; op++) {
    const char *name = tpu_op_name((tpu_op_t)op);
    h = (h ^ tpu_ir_serial_checksum(name, strlen(name))) * 0x100000001b3ull;
    h = (h ^ (uint64_t)(tpu_op_arity((tpu_op_t)op) + 2)) * 0x100000001b3ull;
  }
  return h ^ (h >> 29);
}

tpu_status_t tpu_graph_serialize(const tpu_graph_t *g, tpu_allocator_t host,
                                 unsigned char **out_bytes, size_t *out_len) {
  if (!g || !out_bytes || !out_len) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "graph serialize: NULL argument");
  }
  if (g->status != TPU_OK) {
    return tpu_status_set(g->status, "graph serialize: the graph has a build error: %s",
                          g->message);
  }
  io_t io = {.writing = true, .host = host, .st = TPU_OK};
  unsigned char header[HEADER_BYTES] = {0};
  io_bytes(&io, header, sizeof header);  /* filled in at the end */
  uint32_t counts[2] = {(uint32_t)g->num_nodes, (uint32_t)g->num_outputs};
  io_bytes(&io, counts, sizeof counts);
  for (int i = 0; i < g->num_nodes && io.st == TPU_OK; i++) {
    tpu_node_t n = g->nodes[i];
    io_node_head(&io, &n);
    uint32_t k = (uint32_t)n.num_operands;
    io_bytes(&io, &k, sizeof k);
    for (int j = 0; j < n.num_operands; j++) {
      int32_t v = n.operands[j];
      io_bytes(&io, &v, sizeof v);
    }
    io_attrs(&io, n.op, &n.attrs);
  }
  for (int i = 0; i < g->num_outputs && io.st == TPU_OK; i++) {
    tpu_ir_output_t o = g->outputs[i];
    int32_t v = o.value;
    uint8_t strided = o.strided;
    io_bytes(&io, &v, sizeof v);
    io_bytes(&io, &strided, 1);
    if (strided) io_arr(&io, o.strides, TPU_MAX_RANK);
  }
  if (io.st != TPU_OK) {
    tpu_allocator_free(host, io.out);
    return io.st;
  }
  uint32_t version = FORMAT_VERSION;
  uint64_t tag = tpu_graph_serial_tag(), body = io.len - HEADER_BYTES;
  uint64_t sum = tpu_ir_serial_checksum(io.out + HEADER_BYTES, body);
  unsigned char *h = io.out;
  memcpy(h, MAGIC, 8);
  memcpy(h + 8, &version, 4);
  memcpy(h + 12, &tag, 8);
  memcpy(h + 20, &body, 8);
  memcpy(h + 28, &sum, 8);
  *out_bytes = io.out;
  *out_len = io.len;
  return TPU_OK;
}

static tpu_status_t read_header(const unsigned char *b, size_t len) {
  if (len < HEADER_BYTES || memcmp(b, MAGIC, 8) != 0) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "graph deserialize: not a serialized graph");
  }
  uint32_t version;
  uint64_t tag, body, sum;
  memcpy(&version, b + 8, 4);
  memcpy(&tag, b + 12, 8);
  memcpy(&body, b + 20, 8);
  memcpy(&sum, b + 28, 8);
  if (version != FORMAT_VERSION || tag != tpu_graph_serial_tag()) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "graph deserialize: format %u from an incompatible build", version);
  }
  if (body != len - HEADER_BYTES) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "graph deserialize: %zu body bytes, "
                          "header says %llu", len - HEADER_BYTES, (unsigned long long)body);
  }
  if (sum != tpu_ir_serial_checksum(b + HEADER_BYTES, len - HEADER_BYTES)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "graph deserialize: checksum mismatch");
  }
  return TPU_OK;
}

/* Decodes the body into |g| (empty); the caller verifies. */
static tpu_status_t read_body(io_t *io, tpu_graph_t *g) {
  uint32_t counts[2];
  io_bytes(io, counts, sizeof counts);
  if (io->st != TPU_OK) return io->st;
  /* a node takes at least 8 bytes, an output 5: a count the body cannot hold is corrupt */
  size_t left = io->end - io->pos;
  if (counts[0] > left / 8 || counts[1] > left / 5 || counts[0] > INT32_MAX) {
    io_fail(io, TPU_ERR_INVALID_ARGUMENT, "counts exceed the body");
    return io->st;
  }
  tpu_value_t *ops = NULL;
  uint32_t ops_cap = 0;
  for (uint32_t i = 0; i < counts[0] && io->st == TPU_OK; i++) {
    tpu_node_t n;
    memset(&n, 0, sizeof n);
    io_node_head(io, &n);
    uint32_t k = 0;
    io_bytes(io, &k, sizeof k);
    if (io->st != TPU_OK) break;
    if (k > (io->end - io->pos) / sizeof(int32_t)) {
      io_fail(io, TPU_ERR_INVALID_ARGUMENT, "operand count exceeds the body");
      break;
    }
    if (k > ops_cap) {
      tpu_allocator_free(io->host, ops);
      ops = NULL;
      ops_cap = 0;
      io->st = tpu_allocator_calloc(io->host, k, sizeof *ops, "graph_deserialize",
                                    (void **)&ops);
      if (io->st != TPU_OK) break;
      ops_cap = k;
    }
    for (uint32_t j = 0; j < k; j++) {
      int32_t v = 0;
      io_bytes(io, &v, sizeof v);
      if (ops) ops[j] = v;
    }
    io_attrs(io, n.op, &n.attrs);
    if (io->st == TPU_OK && tpu_ir_append_raw(g, &n, ops, (int)k) == TPU_NO_VALUE) {
      io->st = tpu_status_set(g->status, "%s", g->message);
    }
  }
  tpu_allocator_free(io->host, ops);
  for (uint32_t i = 0; i < counts[1] && io->st == TPU_OK; i++) {
    int32_t v = 0;
    uint8_t strided = 0;
    int64_t strides[TPU_MAX_RANK] = {0};
    io_bytes(io, &v, sizeof v);
    io_bytes(io, &strided, 1);
    if (strided > 1) io_fail(io, TPU_ERR_INVALID_ARGUMENT, "bad output layout");
    if (strided) io_arr(io, strides, TPU_MAX_RANK);
    if (io->st != TPU_OK) break;
    io->st = tpu_graph_output(g, v, strided ? strides : NULL);
  }
  if (io->st == TPU_OK && io->pos != io->end) {
    io_fail(io, TPU_ERR_INVALID_ARGUMENT, "trailing bytes after the graph");
  }
  return io->st;
}

tpu_status_t tpu_graph_deserialize(const void *bytes, size_t len, tpu_allocator_t host,
                                   tpu_graph_t **out_graph) {
  if (!out_graph || (!bytes && len)) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "graph deserialize: NULL argument");
  }
  *out_graph = NULL;
  TPU_RETURN_IF_ERROR(read_header(bytes, len));
  tpu_graph_t *g;
  TPU_RETURN_IF_ERROR(tpu_graph_create(host, &g));
  io_t io = {.writing = false, .host = host, .in = bytes, .pos = HEADER_BYTES, .end = len,
             .st = TPU_OK};
  tpu_status_t st = read_body(&io, g);
  if (st == TPU_OK) st = tpu_graph_verify(g);
  if (st != TPU_OK) {
    tpu_graph_destroy(g);
    return st;
  }
  *out_graph = g;
  return TPU_OK;
}

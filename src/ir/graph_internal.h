/* graph_internal.h: the inside of tpu_graph_t, shared by the files of src/ir/ (graph,
 * builder, shape rules, verifier, printer, hash) and by the IR tests.
 *
 * Nothing here is public API. Tests include it to corrupt a graph on purpose
 * (tpu_ir_append_raw, tpu_ir_node_mut) and prove that tpu_graph_verify rejects it.
 */
#ifndef TPU_IR_GRAPH_INTERNAL_H
#define TPU_IR_GRAPH_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>

#include "tpu/ir.h"

#define TPU_IR_MESSAGE_CAP 512  /* bytes of a graph's first-error message */
#define TPU_IR_TYPE_CAP 200     /* bytes of "bf16[...8 dims...]" with room to spare */

/* One chunk of the graph's bump arena; data follows the header, max-aligned. */
typedef struct tpu_ir_chunk {
  struct tpu_ir_chunk *next;
  size_t size;  /* usable bytes in data */
  size_t used;
  max_align_t data[];
} tpu_ir_chunk_t;

typedef struct tpu_ir_output {
  tpu_value_t value;
  bool strided;
  int64_t strides[TPU_MAX_RANK];  /* elements; entries past the value's rank are 0 */
} tpu_ir_output_t;

struct tpu_graph {
  tpu_allocator_t host;
  tpu_ir_chunk_t *chunks;        /* arena: operand arrays; freed in one call */
  size_t next_chunk_size;

  tpu_node_t *nodes;             /* (num_nodes) growable, nodes referenced by index */
  int num_nodes, cap_nodes;
  int num_params;

  tpu_ir_output_t *outputs;      /* (num_outputs) growable */
  int num_outputs, cap_outputs;

  tpu_status_t status;           /* first error recorded by a builder call */
  char message[TPU_IR_MESSAGE_CAP];
};

/* ---- graph.c ------------------------------------------------------------------------ */

/* |size| bytes from the graph's arena, aligned to |align| (<= alignof(max_align_t)). */
void *tpu_ir_arena_alloc(tpu_graph_t *g, size_t size, size_t align);

/* Records |code| and the formatted message as the graph's error if it has none yet, sets
 * the calling thread's status message, and returns |code|. */
tpu_status_t tpu_ir_fail(tpu_graph_t *g, tpu_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Appends a copy of |node| whose operand list is |operands| (copied into the arena) with
 * NO checks at all: the builder calls it after the rules passed, tests call it to build
 * malformed graphs. Returns the new value, or TPU_NO_VALUE (error recorded) when out of
 * memory. */
tpu_value_t tpu_ir_append_raw(tpu_graph_t *g, const tpu_node_t *node,
                              const tpu_value_t *operands, int num_operands);

/* Mutable access for tests that corrupt a graph; NULL if |v| is not a node. */
tpu_node_t *tpu_ir_node_mut(tpu_graph_t *g, tpu_value_t v);

/* True if |strides| (elements) address |shape| densely in row-major order; strides of
 * dims of size 1 do not matter, nor any stride of an empty shape. */
bool tpu_ir_strides_are_dense(const tpu_shape_t *shape, const int64_t *strides);

/* "f32[2,3]" (scalars: "f32[]") into |buf|; returns buf. */
const char *tpu_ir_format_type(tpu_dtype_t dtype, const tpu_shape_t *shape, char *buf,
                               size_t cap);

const char *tpu_ir_reduce_kind_name(tpu_reduce_kind_t kind);   /* "SUM", ... */
const char *tpu_ir_compare_dir_name(tpu_compare_dir_t dir);    /* "EQ", ... */
const char *tpu_ir_precision_name(tpu_precision_t precision);  /* "DEFAULT", ... */

/* ---- shape_rules.c ------------------------------------------------------------------ */

/* The name a node's builder uses in messages: "binary ADD", "unary EXP", "reduce SUM",
 * "dot_general", ... */
const char *tpu_ir_builder_name(tpu_op_t op, const tpu_attrs_t *attrs, char *buf, size_t cap);

/* Checks |node| (op, operands, attributes) against the op's rule and computes the result
 * dtype and shape. Where the builder is told the result rather than deriving it, the node's
 * own fields are the request and are checked: dtype and shape of parameter, constant, iota
 * and rng; shape of broadcast_in_dim and reshape; dtype of convert, bitcast_convert,
 * dot_general and convolution. Operands are checked to be nodes of |g|. On error writes
 * "<builder name>: <problem>" to |msg| and returns the status. */
tpu_status_t tpu_ir_infer(const tpu_graph_t *g, const tpu_node_t *node, tpu_dtype_t *out_dtype,
                          tpu_shape_t *out_shape, char *msg, size_t cap);

/* ---- serialize.c -------------------------------------------------------------------- */

/* The checksum a serialized graph's header holds for its body (bytes after the 36-byte
 * header); tests corrupt a body and re-seal it to reach the decoder's own checks. */
#define TPU_IR_SERIAL_HEADER_BYTES 36
uint64_t tpu_ir_serial_checksum(const void *bytes, size_t len);

#endif /* TPU_IR_GRAPH_INTERNAL_H */

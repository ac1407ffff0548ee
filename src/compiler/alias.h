/* alias.h: exact output/parameter aliases (internal to src/compiler; alias.c).
 *
 * tpu_compile_options_t.output_alias_param says which outputs exactly overlay a parameter
 * (an in-place update). tpu_alias_analyze checks each claim against the graph (the
 * parameter's and the output's dtype, dims and strides agree; no two outputs claim one
 * parameter) and finds, per value, the parameter whose memory it reads without a step of
 * its own (the parameter itself and layout views of it: transpose, broadcast, slice,
 * reverse, reshape). compile.c records the last step reading each parameter's memory
 * (tpu_alias_note_read) and writes an output in place only after that step, or at it when
 * the step is elementwise and reads the parameter where it writes.
 */
#ifndef TPU_COMPILER_ALIAS_H
#define TPU_COMPILER_ALIAS_H

#include "compiler/executable.h"

/* How an output without an accepted exact alias is written. */
enum alias_mode {
  ALIAS_BY_BIT,   /* as tpu_compile_options_t.output_may_alias_input says */
  ALIAS_COPY,     /* may overlap an input (or a refused exact claim): scratch + copy */
  ALIAS_DIRECT,   /* overlaps no input */
};

typedef struct alias_info {
  int num_params;
  int *param_of;    /* (num nodes) the parameter whose memory the value is a view of, or -1 */
  int *out_param;   /* (num outputs) the accepted exact alias of each output, or -1 */
  signed char *out_mode; /* (num outputs) without an exact alias: an alias_mode */
  int *last_read;   /* (num_params) position of the last step reading the memory, or -1 */
} alias_info_t;

/* Validates |opt|'s exact aliases against |g| and fills *out (free with tpu_alias_free). */
tpu_status_t tpu_alias_analyze(const tpu_graph_t *g, const tpu_compile_options_t *opt,
                               tpu_allocator_t host, alias_info_t *out);
void tpu_alias_free(alias_info_t *a, tpu_allocator_t host);

/* Value |v| is read by the step at position |pos|. */
static inline void tpu_alias_note_read(alias_info_t *a, tpu_value_t v, int pos) {
  int p = a->param_of[v];
  if (p >= 0 && pos > a->last_read[p]) a->last_read[p] = pos;
}

/* Whether two views address the same elements in the same order: element offset, dtype,
 * dims and strides equal (the bases are compared by the caller). */
bool tpu_alias_same_place(const view_t *a, const view_t *b);

#endif /* TPU_COMPILER_ALIAS_H */

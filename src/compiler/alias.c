/* alias.c: exact output/parameter aliases (see alias.h). */
#include <string.h>

#include "compiler/alias.h"

static void dense_strides_of(const tpu_shape_t *s, int64_t *strides) {
  int64_t st = 1;
  for (int d = s->rank - 1; d >= 0; d--) {
    strides[d] = st;
    st *= s->dims[d] > 0 ? s->dims[d] : 1;
  }
}

/* Whether output |o| and parameter node |param| have one dtype, dims and strides. */
static bool same_geometry(const tpu_graph_t *g, int o, const tpu_node_t *param) {
  const tpu_node_t *out = tpu_graph_node(g, tpu_graph_output_value(g, o));
  if (out->dtype != param->dtype || !tpu_shape_equal(&out->shape, &param->shape)) return false;
  int64_t os[TPU_MAX_RANK], ps[TPU_MAX_RANK];
  if (!tpu_graph_output_strides(g, o, os)) dense_strides_of(&out->shape, os);
  if (param->attrs.param.strided) {
    memcpy(ps, param->attrs.param.strides, sizeof ps);
  } else {
    dense_strides_of(&param->shape, ps);
  }
  return memcmp(os, ps, sizeof(int64_t) * (size_t)out->shape.rank) == 0;
}

tpu_status_t tpu_alias_analyze(const tpu_graph_t *g, const tpu_compile_options_t *opt,
                               tpu_allocator_t host, alias_info_t *out) {
  memset(out, 0, sizeof *out);
  int n = tpu_graph_num_nodes(g), num_outputs = tpu_graph_num_outputs(g);
  int np = out->num_params = tpu_graph_num_params(g);
  const tpu_node_t **param_node = NULL;
  tpu_status_t st = tpu_allocator_calloc(host, (size_t)n + 1, sizeof(int), "alias",
                                         (void **)&out->param_of);
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(host, (size_t)num_outputs + 1, sizeof(int), "alias",
                              (void **)&out->out_param);
  }
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(host, (size_t)num_outputs + 1, sizeof(signed char), "alias",
                              (void **)&out->out_mode);
  }
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(host, (size_t)np + 1, sizeof(int), "alias",
                              (void **)&out->last_read);
  }
  if (st == TPU_OK) {
    st = tpu_allocator_calloc(host, (size_t)np + 1, sizeof *param_node, "alias",
                              (void **)&param_node);
  }
  if (st != TPU_OK) {
    tpu_alias_free(out, host);
    return st;
  }
  for (int p = 0; p < np; p++) out->last_read[p] = -1;
  /* the memory each value reads without a step: parameters, then layout chains over them
   * (a layout node that turns out to need a copy only adds a reader: conservative) */
  for (int v = 0; v < n; v++) {
    const tpu_node_t *node = tpu_graph_node(g, v);
    out->param_of[v] = -1;
    if (node->op == TPU_OP_PARAMETER) {
      int p = node->attrs.param.index;
      if (p >= 0 && p < np) {
        out->param_of[v] = p;
        param_node[p] = node;
      }
    } else if (tpu_op_family(node->op) == TPU_FAMILY_SHAPE && node->num_operands == 1) {
      out->param_of[v] = out->param_of[node->operands[0]];
    }
  }
  /* the claimed aliases: in range, same geometry, one output per parameter */
  for (int o = 0; o < num_outputs; o++) {
    out->out_param[o] = -1;
    int p = opt && opt->output_alias_param && o < opt->num_output_alias
                ? opt->output_alias_param[o]
                : TPU_OUTPUT_ALIAS_NONE;
    out->out_mode[o] = p == TPU_OUTPUT_ALIAS_DISJOINT  ? ALIAS_DIRECT
                       : p == TPU_OUTPUT_ALIAS_OVERLAP ? ALIAS_COPY
                                                       : ALIAS_BY_BIT;
    if (p < 0) continue;
    out->out_mode[o] = ALIAS_COPY;
    if (p >= np) continue;
    /* a parameter the graph no longer reads has no geometry to check, and no reader */
    if (param_node[p] && !same_geometry(g, o, param_node[p])) continue;
    out->out_param[o] = p;
    out->out_mode[o] = ALIAS_BY_BIT; /* unused while out_param[o] >= 0 */
  }
  /* claims per parameter, counted in last_read (reset to "never read" after) */
  for (int o = 0; o < num_outputs; o++) {
    if (out->out_param[o] >= 0) out->last_read[out->out_param[o]]++;
  }
  for (int o = 0; o < num_outputs; o++) {
    int p = out->out_param[o];
    if (p >= 0 && out->last_read[p] > 0) {
      out->out_param[o] = -1;
      out->out_mode[o] = ALIAS_COPY;
    }
  }
  for (int p = 0; p < np; p++) out->last_read[p] = -1;
  tpu_allocator_free(host, param_node);
  return TPU_OK;
}

void tpu_alias_free(alias_info_t *a, tpu_allocator_t host) {
  tpu_allocator_free(host, a->param_of);
  tpu_allocator_free(host, a->out_param);
  tpu_allocator_free(host, a->out_mode);
  tpu_allocator_free(host, a->last_read);
  memset(a, 0, sizeof *a);
}

bool tpu_alias_same_place(const view_t *a, const view_t *b) {
  return a->elem_offset == b->elem_offset && a->dtype == b->dtype && a->rank == b->rank &&
         memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) == 0 &&
         memcmp(a->strides, b->strides, sizeof(int64_t) * (size_t)a->rank) == 0;
}

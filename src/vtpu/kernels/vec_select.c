/* vec_select.c: picks the vec.h table for this CPU (and lets tests force one). */
#include <stdatomic.h>

#include "vtpu/kernels/vec.h"

bool tpu_vec_unary_has(tpu_op_t op) {
  switch (op) {
    case TPU_OP_EXP: case TPU_OP_LOG: case TPU_OP_TANH: case TPU_OP_LOGISTIC:
    case TPU_OP_ERF: case TPU_OP_SQRT: case TPU_OP_RSQRT: case TPU_OP_NEG: case TPU_OP_ABS:
      return true;
    default:
      return false;
  }
}

bool tpu_vec_binary_has(tpu_op_t op) {
  switch (op) {
    case TPU_OP_ADD: case TPU_OP_SUB: case TPU_OP_MUL: case TPU_OP_DIV: case TPU_OP_MAX:
    case TPU_OP_MIN:
      return true;
    default:
      return false;
  }
}

const tpu_vec_ops_t *tpu_vec_ops_for(tpu_isa_t isa) {
  const tpu_cpu_features_t *f = tpu_cpu_features_detected();
  switch (isa) {
    case TPU_ISA_PORTABLE: return tpu_vec_ops_portable();
    case TPU_ISA_AVX2: return f->avx2_fma ? tpu_vec_ops_avx2() : NULL;
    case TPU_ISA_AVX512: return f->avx512f ? tpu_vec_ops_avx512() : NULL;
    default: return NULL;
  }
}

static _Atomic(const tpu_vec_ops_t *) g_forced;
static _Atomic(const tpu_vec_ops_t *) g_auto;

const tpu_vec_ops_t *tpu_vec_ops(void) {
  const tpu_vec_ops_t *ops = atomic_load_explicit(&g_forced, memory_order_acquire);
  if (ops) return ops;
  ops = atomic_load_explicit(&g_auto, memory_order_acquire);
  if (ops) return ops;
  const tpu_cpu_features_t *f = tpu_cpu_features();
  ops = f->avx512f ? tpu_vec_ops_avx512() : NULL;
  if (!ops && f->avx2_fma) ops = tpu_vec_ops_avx2();
  if (!ops) ops = tpu_vec_ops_portable();
  atomic_store_explicit(&g_auto, ops, memory_order_release);
  return ops;
}

void tpu_vec_ops_force(const tpu_vec_ops_t *ops) {
  atomic_store_explicit(&g_forced, ops, memory_order_release);
}

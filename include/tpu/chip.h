/* chip.h: the table of TPU generations the virtual TPU models (v4, v5e, v5p, v6e, v7).
 *
 * Every number comes from shared/reference/tpu-hardware.md; each spec carries the
 * source key of each value (e.g. "[GC-v5e]") so the cost model and the docs can cite
 * it. Values are per chip unless the field name says otherwise.
 */
#ifndef TPU_CHIP_H
#define TPU_CHIP_H

#include <stdint.h>

#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_chip_gen {
  TPU_CHIP_V4 = 0,
  TPU_CHIP_V5E,
  TPU_CHIP_V5P,
  TPU_CHIP_V6E,
  TPU_CHIP_V7,
  TPU_CHIP_GEN_COUNT
} tpu_chip_gen_t;

/* Where each value of a spec comes from: source keys of tpu-hardware.md. */
typedef struct tpu_chip_sources {
  const char *hbm;        /* hbm_bytes and hbm_bytes_per_s */
  const char *peak;       /* peak_bf16_flops */
  const char *mxu;        /* tensorcores, mxu_count, mxu_dim */
  const char *vmem;       /* vmem_bytes */
  const char *ici;        /* ici_links, ici_link_bytes_per_s */
  const char *topology;   /* topology */
} tpu_chip_sources_t;

typedef struct tpu_chip_spec {
  tpu_chip_gen_t gen;
  const char *name;              /* "v5e": the TORCHTPU_CHIP value */
  const char *marketing_name;    /* "TPU v5e" */
  uint64_t hbm_bytes;            /* HBM capacity, bytes (user-allocatable) */
  double hbm_bytes_per_s;        /* HBM bandwidth, B/s */
  double peak_bf16_flops;        /* peak dense bf16 FLOP/s per chip */
  int tensorcores;               /* TensorCores per chip */
  int mxu_count;                 /* MXUs per chip (all TensorCores) */
  int mxu_dim;                   /* MXU is mxu_dim x mxu_dim (128 or 256) */
  uint64_t vmem_bytes;           /* VMEM per chip, bytes (sum over TensorCores) */
  int ici_links;                 /* ICI ports per chip */
  double ici_link_bytes_per_s;   /* one-way bandwidth of one ICI link, B/s */
  int torus_dims;                /* 2 (2D torus) or 3 (3D torus) */
  tpu_chip_sources_t src;
} tpu_chip_spec_t;

/* The spec of |gen|, or NULL if |gen| is out of range. Borrowed, static. */
const tpu_chip_spec_t *tpu_chip_spec(tpu_chip_gen_t gen);

/* Looks up a spec by name ("v4", "v5e", "v5p", "v6e", "v7"; case-insensitive,
 * a leading "tpu" and "v5litepod"/"tpu7x" aliases accepted). Unknown names fail with
 * TPU_ERR_INVALID_ARGUMENT and a message listing the valid names. */
tpu_status_t tpu_chip_spec_find(const char *name, const tpu_chip_spec_t **out_spec);

#ifdef __cplusplus
}
#endif
#endif /* TPU_CHIP_H */

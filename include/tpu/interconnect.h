/* interconnect.h: the ICI (inter-chip interconnect) time model for collectives.
 *
 * A pure function of (collective kind, bytes, chip spec, topology) -> seconds, built on the
 * ring/torus formulas of shared/reference/tpu-hardware.md section 4 ("Cost-model formulas",
 * scaling-book notation [SB-shard][SB-tpu]). The distributed backend adds the modelled time of
 * every collective to its statistics; the cost model reads the same function for compiled
 * programs with collectives.
 *
 * Conventions (as in the reference): V = bytes of the *full* array the collective produces or
 * consumes (all_reduce: the tensor; all_gather: the gathered output; reduce_scatter: the
 * unscattered input; all_to_all: the sum of every chip's buffer; broadcast: the tensor;
 * send/recv: the message). T_hop = 1 us per ICI hop. W_uni = one-way bandwidth of one link
 * (tpu_chip_spec_t.ici_link_bytes_per_s), W_bi = 2 W_uni.
 */
#ifndef TPU_INTERCONNECT_H
#define TPU_INTERCONNECT_H

#include <stdbool.h>
#include <stdint.h>

#include "tpu/chip.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_collective_kind {
  TPU_COLL_ALL_REDUCE = 0,
  TPU_COLL_ALL_GATHER,
  TPU_COLL_REDUCE_SCATTER,
  TPU_COLL_ALL_TO_ALL,
  TPU_COLL_BROADCAST,
  TPU_COLL_SEND_RECV,
  TPU_COLL_BARRIER,
  TPU_COLL_KIND_COUNT
} tpu_collective_kind_t;

#define TPU_ICI_MAX_DIMS 3
#define TPU_ICI_HOP_SECONDS 1e-6 /* T_hop ~ 1 us per ICI hop [SB-shard] */

/* The chips taking part, as a slice of a torus: dims[i] chips along axis i (1..3 axes). */
typedef struct tpu_ici_topology {
  int ndim;
  int dims[TPU_ICI_MAX_DIMS];
} tpu_ici_topology_t;

/* "all_reduce", "all_gather", ...; "?" when out of range. */
const char *tpu_collective_kind_name(tpu_collective_kind_t kind);

/* A 1-D topology of n chips. */
tpu_ici_topology_t tpu_ici_topology_ring(int n);

/* Number of chips (product of dims); 0 for an invalid topology. */
int tpu_ici_topology_chips(const tpu_ici_topology_t *topo);

/* Whether axis |axis| of |topo| has wraparound links on |chip|: 2-D torus generations
 * (v5e, v6e) wrap only axes of size 16; 3-D generations (v4, v5p, v7) only slices made of
 * full 4x4x4 cubes (every one of 3 dims a multiple of 4). */
bool tpu_ici_axis_wraps(const tpu_chip_spec_t *chip, const tpu_ici_topology_t *topo, int axis);

/* Modelled seconds of one collective of |kind| over every chip of |topo|, moving V = |bytes|
 * (see the conventions above). send/recv is modelled between neighbours (one hop); use
 * tpu_ici_p2p_seconds for other pairs. Fails with TPU_ERR_INVALID_ARGUMENT on a NULL chip, an
 * invalid kind or topology. */
tpu_status_t tpu_ici_collective_seconds(tpu_collective_kind_t kind, uint64_t bytes,
                                        const tpu_chip_spec_t *chip,
                                        const tpu_ici_topology_t *topo, double *out_seconds);

/* Point-to-point between chips |src| and |dst| (row-major indices into |topo|):
 * hops * T_hop + bytes / W_uni, hops = torus (or mesh) distance [SB-tpu]. */
tpu_status_t tpu_ici_p2p_seconds(uint64_t bytes, const tpu_chip_spec_t *chip,
                                 const tpu_ici_topology_t *topo, int src, int dst,
                                 double *out_seconds);

#ifdef __cplusplus
}
#endif
#endif /* TPU_INTERCONNECT_H */

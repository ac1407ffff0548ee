/* interconnect.c: modelled ICI time of collectives (see include/tpu/interconnect.h).
 *
 * Formulas from shared/reference/tpu-hardware.md section 4, "Cost-model formulas":
 *  - "AllGather / ReduceScatter over one axis with wraparound (bidirectional ring):
 *     T = max(T_hop*N/2, V/W_bi)"                                        [SB-shard]
 *  - "Multi-axis AllGather over axes {X_i}: T = max(T_hop*sum N_i/2, V/(W_bi*n_axes))"
 *                                                                        [SB-shard]
 *  - "AllReduce = ReduceScatter + AllGather => T ~ 2*V/W_bi"              [SB-shard]
 *  - "AllToAll on a bidirectional ring ~ AllGather/4 => T ~ V/(4*W_bi)"   [SB-shard]
 *  - "No wraparound (v5e/v6e axis < 16; v4/v5p below a full 4x4x4 cube): only W_uni
 *     usable => ~2x time"                                                 [SB-tpu][SB-shard]
 *  - "Point-to-point over a mesh: T = hops*T_hop + bytes/(ports_used*W_uni)" [SB-tpu]
 *
 * Generalised over axes: latency L = T_hop * sum_i (wrap_i ? N_i/2 : N_i - 1) (the ring
 * diameter of each axis), bandwidth B = sum_i (wrap_i ? W_bi : W_uni) over axes with N_i > 1.
 * With every axis wrapped this is exactly the multi-axis formula above; an unwrapped axis
 * gives half the bandwidth (the "~2x" of the no-wraparound note).
 *   all_gather, reduce_scatter:  max(L, V/B)
 *   all_reduce:                  2 * max(L, V/B)
 *   all_to_all:                  max(L, V/(4B))       (the /4 applies to the bandwidth term)
 *   broadcast (derived):         max(L, V/B)          (pipelined from the root along B)
 *   barrier (derived):           2 * L                (an all_reduce of nothing)
 *   send/recv:                   1 hop, V/W_uni
 */
#include "tpu/interconnect.h"

#include <stddef.h>

static const char *const kKindNames[TPU_COLL_KIND_COUNT] = {
    [TPU_COLL_ALL_REDUCE] = "all_reduce",       [TPU_COLL_ALL_GATHER] = "all_gather",
    [TPU_COLL_REDUCE_SCATTER] = "reduce_scatter", [TPU_COLL_ALL_TO_ALL] = "all_to_all",
    [TPU_COLL_BROADCAST] = "broadcast",         [TPU_COLL_SEND_RECV] = "send_recv",
    [TPU_COLL_BARRIER] = "barrier",
};

const char *tpu_collective_kind_name(tpu_collective_kind_t kind) {
  if ((int)kind < 0 || kind >= TPU_COLL_KIND_COUNT) return "?";
  return kKindNames[kind];
}

tpu_ici_topology_t tpu_ici_topology_ring(int n) {
  tpu_ici_topology_t t = {.ndim = 1, .dims = {n, 1, 1}};
  return t;
}

int tpu_ici_topology_chips(const tpu_ici_topology_t *topo) {
  if (!topo || topo->ndim < 1 || topo->ndim > TPU_ICI_MAX_DIMS) return 0;
  int n = 1;
  for (int i = 0; i < topo->ndim; i++) {
    if (topo->dims[i] < 1 || topo->dims[i] > 1 << 16) return 0;
    n *= topo->dims[i];
    if (n > 1 << 20) return 0;
  }
  return n;
}

bool tpu_ici_axis_wraps(const tpu_chip_spec_t *chip, const tpu_ici_topology_t *topo, int axis) {
  if (!chip || tpu_ici_topology_chips(topo) == 0 || axis < 0 || axis >= topo->ndim) return false;
  if (chip->torus_dims == 2) {
    /* "2D torus; pod 256 chips (16x16); wraparound only on axes of size 16" [GC-v5e][SB-tpu] */
    return topo->dims[axis] == 16;
  }
  /* "3D torus on slices that are multiples of 4 (4x4x4 cubes)" [GC-v4]; below a full cube
   * (e.g. 2x2x4) there is no wraparound [SB-shard]. */
  if (topo->ndim != 3) return false;
  for (int i = 0; i < 3; i++)
    if (topo->dims[i] % 4 != 0) return false;
  return true;
}

/* L and B of the generalised formula (see the file comment). */
static void latency_and_bandwidth(const tpu_chip_spec_t *chip, const tpu_ici_topology_t *topo,
                                  double *out_latency, double *out_bw) {
  double hops = 0, bw = 0, w_uni = chip->ici_link_bytes_per_s;
  for (int i = 0; i < topo->ndim; i++) {
    int n = topo->dims[i];
    if (n <= 1) continue;
    if (tpu_ici_axis_wraps(chip, topo, i)) {
      hops += n / 2.0;
      bw += 2.0 * w_uni; /* W_bi */
    } else {
      hops += n - 1;
      bw += w_uni;
    }
  }
  *out_latency = hops * TPU_ICI_HOP_SECONDS;
  *out_bw = bw;
}

static double max2(double a, double b) { return a > b ? a : b; }

tpu_status_t tpu_ici_collective_seconds(tpu_collective_kind_t kind, uint64_t bytes,
                                        const tpu_chip_spec_t *chip,
                                        const tpu_ici_topology_t *topo, double *out_seconds) {
  *out_seconds = 0;
  if (!chip || chip->ici_link_bytes_per_s <= 0)
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "ici model: no chip spec");
  if ((int)kind < 0 || kind >= TPU_COLL_KIND_COUNT)
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "ici model: invalid collective kind %d",
                          (int)kind);
  int chips = tpu_ici_topology_chips(topo);
  if (chips == 0) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "ici model: invalid topology");
  if (chips == 1) return TPU_OK; /* nothing crosses a link */
  double lat, bw;
  latency_and_bandwidth(chip, topo, &lat, &bw);
  double v = (double)bytes;
  switch (kind) {
    case TPU_COLL_ALL_GATHER:
    case TPU_COLL_REDUCE_SCATTER:
    case TPU_COLL_BROADCAST:
      *out_seconds = max2(lat, v / bw);
      break;
    case TPU_COLL_ALL_REDUCE:
      *out_seconds = 2.0 * max2(lat, v / bw);
      break;
    case TPU_COLL_ALL_TO_ALL:
      *out_seconds = max2(lat, v / (4.0 * bw));
      break;
    case TPU_COLL_BARRIER:
      *out_seconds = 2.0 * lat;
      break;
    case TPU_COLL_SEND_RECV:
      *out_seconds = TPU_ICI_HOP_SECONDS + v / chip->ici_link_bytes_per_s;
      break;
    default:
      break;
  }
  return TPU_OK;
}

tpu_status_t tpu_ici_p2p_seconds(uint64_t bytes, const tpu_chip_spec_t *chip,
                                 const tpu_ici_topology_t *topo, int src, int dst,
                                 double *out_seconds) {
  *out_seconds = 0;
  if (!chip || chip->ici_link_bytes_per_s <= 0)
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "ici model: no chip spec");
  int chips = tpu_ici_topology_chips(topo);
  if (chips == 0) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "ici model: invalid topology");
  if (src < 0 || dst < 0 || src >= chips || dst >= chips)
    return tpu_status_set(TPU_ERR_OUT_OF_RANGE, "ici model: chip %d or %d not in %d chips", src,
                          dst, chips);
  if (src == dst) return TPU_OK;
  /* Row-major coordinates; per axis distance min(d, N-d) with wraparound, else d. */
  int hops = 0;
  for (int i = topo->ndim - 1; i >= 0; i--) {
    int n = topo->dims[i];
    int a = src % n, b = dst % n;
    src /= n;
    dst /= n;
    int d = a > b ? a - b : b - a;
    if (tpu_ici_axis_wraps(chip, topo, i) && n - d < d) d = n - d;
    hops += d;
  }
  *out_seconds = hops * TPU_ICI_HOP_SECONDS + (double)bytes / chip->ici_link_bytes_per_s;
  return TPU_OK;
}

/* cost.h: what a program would cost on a real TPU: the cost model and per-chip accounting.
 *
 * Cost model (src/vtpu/cost_model.c), a pure function of a graph and a chip spec:
 * the graph is split into kernels as XLA would fuse it (elementwise and layout ops fuse
 * into their consumers; MXU ops, reductions, indexing ops and graph outputs are kernel
 * roots; a matmul or reduction whose only user is elementwise fuses into that user).
 * Per kernel:
 *   T_mxu = MXU FLOPs padded to the MXU tile x precision passes / peak
 *   T_hbm = bytes read and written, each array padded to its (8,128) tile / HBM bandwidth
 *   T     = max(T_mxu, T_hbm) + per-kernel overhead
 * and the graph costs the sum over its kernels. Formulas and constants come from
 * shared/reference/tpu-hardware.md (cited where used). Vector-unit compute is counted
 * (vpu_flops) but not timed: elementwise work is assumed memory-bound (the reference
 * gives a VPU throughput for v5p only).
 *
 * Accounting (src/runtime/cost_account.c): each launch of an executable adds its cost
 * to a per-chip modelled clock; totals per chip and per generation, an optional
 * timeline (start and end of each op on the chip's modelled clock, plus the host time
 * of the launch), and step markers. Collectives and other work modelled elsewhere
 * (include/tpu/interconnect.h) enter the same timeline through tpu_cost_record.
 */
#ifndef TPU_COST_H
#define TPU_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/chip.h"
#include "tpu/ir.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-kernel fixed cost, seconds: ~1.5 us floor per kernel (derived from Ironwood
 * profiler GEMMs, tpu-hardware.md section 4 [AMB]). */
#define TPU_COST_KERNEL_OVERHEAD_S 1.5e-6

typedef struct tpu_cost {
  double seconds;          /* modelled time: sum over kernels of max(mxu, hbm) + overhead */
  double mxu_seconds;      /* sum over kernels of the MXU time */
  double hbm_seconds;      /* sum over kernels of the HBM time */
  double overhead_seconds; /* kernels x TPU_COST_KERNEL_OVERHEAD_S */
  double flops;            /* model FLOPs of MXU ops: 2*M*N*K (no padding, no passes) */
  double mxu_flops;        /* FLOPs the MXU executes: padded to its tiles, x passes */
  double vpu_flops;        /* elementwise and reduction operations (1 per element per op) */
  double bytes;            /* HBM bytes moved, arrays padded to their tiles */
  double bytes_unpadded;   /* the same without tile padding */
  int kernels;             /* fused kernels the graph runs as */
  int mxu_kernels;         /* kernels with MXU work */
  int compute_bound_kernels; /* kernels whose MXU time exceeds their HBM time */
  int passes;              /* largest precision pass count of an MXU op (1, 3 or 6; 0: none) */
  /* The MXU op losing the most work to padding (0 if none): its (batch, M, K, N) and
   * the FLOPs the padding adds (x passes). */
  int64_t pad_batch, pad_m, pad_k, pad_n;
  double pad_waste_flops;
} tpu_cost_t;

/* Costs |g| (which must verify) on |spec|. Fails on a malformed graph or allocation
 * failure; *out is zeroed first. */
tpu_status_t tpu_cost_graph(const tpu_graph_t *g, const tpu_chip_spec_t *spec, tpu_cost_t *out);

/* Bytes an array of |dtype| and |shape| occupies in HBM with TPU tiling of its two minor
 * dims: last dim to a multiple of 128 lanes, second-minor to 8 rows of 32-bit words
 * (16 for 16-bit types, 32 for 8-bit types: packed), 2 or 4 rows when it is that small;
 * a rank-1 array pads to 128. Booleans take 4 bytes. 0 on overflow. */
double tpu_cost_padded_bytes(tpu_dtype_t dtype, const tpu_shape_t *shape);

/* Precision passes of an MXU op whose operands have dtypes |a| and |b|: 1 unless an
 * operand is f32 (or f64), then 1 / 3 / 6 for DEFAULT / HIGH / HIGHEST. */
int tpu_cost_precision_passes(tpu_dtype_t a, tpu_dtype_t b, tpu_precision_t precision);

/* ---- per-chip accounting ------------------------------------------------------------- */

#define TPU_COST_MAX_CHIPS 64

/* An executable's cost on every generation, interned for the life of the process (the
 * launch path keeps a pointer). |name| is copied. */
typedef struct tpu_cost_entry {
  char name[96];
  tpu_cost_t cost[TPU_CHIP_GEN_COUNT];   /* indexed by tpu_chip_gen_t */
  uint64_t launches;                     /* while detail is on (atomic increments) */
  uint64_t id;                           /* 1, 2, ... in creation order */
  struct tpu_cost_entry *next;           /* the interned list */
} tpu_cost_entry_t;

/* Costs |g| on every generation and interns the result under |name|. */
tpu_status_t tpu_cost_entry_create(const tpu_graph_t *g, const char *name,
                                   tpu_cost_entry_t **out_entry);
/* The first interned entry (newest first; follow ->next). Entries are never freed. */
tpu_cost_entry_t *tpu_cost_entries(void);

/* Sets the generation whose times the timeline uses (the process's chips). */
void tpu_cost_set_active_gen(tpu_chip_gen_t gen);
tpu_chip_gen_t tpu_cost_active_gen(void);

/* One launch of |e| on chip |device|: advances the chip's modelled clocks. Cheap. */
void tpu_cost_launch(int device, tpu_cost_entry_t *e);

/* Work modelled outside this file (a collective's ICI time, a host transfer): an event
 * of |seconds| on chip |device| named |name| (copied), on every generation's clock
 * (|seconds_per_gen| NULL) or per generation (indexed by tpu_chip_gen_t). */
tpu_status_t tpu_cost_record(int device, const char *name, double seconds, double flops,
                             double bytes, const double *seconds_per_gen);

/* Detail: per-entry launch counts and the timeline. Off by default. */
void tpu_cost_set_detail(bool on);
bool tpu_cost_detail(void);

typedef struct tpu_cost_chip_totals {
  double clock[TPU_CHIP_GEN_COUNT];      /* modelled seconds since start (or reset) */
  double flops;                          /* model FLOPs launched */
  double bytes;                          /* HBM bytes (active generation) */
  uint64_t launches;                     /* launches and records */
} tpu_cost_chip_totals_t;

/* Totals of chip |device| (zeros if out of range). */
void tpu_cost_chip_totals(int device, tpu_cost_chip_totals_t *out);
/* Zeroes every chip's totals and the timeline (entries and their counts stay). */
void tpu_cost_reset(void);

/* A timeline event: an op on a chip's modelled clock (active generation). */
typedef struct tpu_cost_event {
  int device;
  const tpu_cost_entry_t *entry;  /* NULL for tpu_cost_record events */
  char name[64];                  /* record events: the name given */
  double start, end;              /* modelled seconds on the chip clock */
  double flops, bytes;
  uint64_t host_ns;               /* CLOCK_MONOTONIC at launch */
} tpu_cost_event_t;

/* Copies up to |cap| events from index |first| into |out| (in launch order); returns the
 * number of events available from |first| (may exceed |cap|). */
size_t tpu_cost_timeline(size_t first, tpu_cost_event_t *out, size_t cap);
/* Host CLOCK_MONOTONIC in ns (the clock of host_ns). */
uint64_t tpu_cost_host_ns(void);

#ifdef __cplusplus
}
#endif
#endif /* TPU_COST_H */

/* deps.h: which steps of an executable must wait for which (internal to src/compiler;
 * deps.c), so that independent steps can run at the same time (run_parallel.c).
 *
 * Step j depends on an earlier step i when they touch overlapping bytes of the same
 * memory and at least one of them writes them (read-after-write, write-after-read,
 * write-after-write). Memory is a set of regions: each input, each output (an output that
 * exactly overlays a parameter is that parameter's region), and the scratch block, with
 * byte ranges inside each; an output that may share memory with inputs conflicts with
 * every input. So any order that respects the dependencies computes what the steps'
 * order computes, given what the sequential run already assumes (a directly written
 * output shares no memory with the inputs) and one more thing checked at run time:
 * distinct outputs do not overlap (tpu_deps_outputs_disjoint).
 */
#ifndef TPU_COMPILER_DEPS_H
#define TPU_COMPILER_DEPS_H

#include "compiler/executable.h"

/* How each output relates to the inputs (num_outputs entries each). */
typedef struct deps_outputs {
  const int *exact_param;  /* the parameter the output exactly overlays, or -1 */
  const bool *may_alias;   /* the output may share memory with any input */
} deps_outputs_t;

/* Fills exe->deps from exe->steps (scratch offsets planned) and decides exe->parallel. */
tpu_status_t tpu_deps_build(tpu_executable_t *exe, const deps_outputs_t *outs);
void tpu_deps_free(tpu_executable_t *exe);

/* Fills exe->deps' two-thread schedule (order, wait, len0) from its dependencies and the
 * steps' estimated costs |cost| (ns); *out_span_ns: the schedule's estimated time, waits
 * between the threads included (schedule.c). */
tpu_status_t tpu_schedule_build(tpu_executable_t *exe, const int64_t *cost, int64_t *out_span_ns);

/* Byte range [*lo, *hi) that |v| touches, from its base pointer (or the scratch block);
 * *lo == *hi for an empty view. */
void tpu_view_byte_range(const view_t *v, int64_t *lo, int64_t *hi);

/* Whether no two outputs of one run share a byte (the parallel run's one assumption
 * beyond the sequential run's). */
bool tpu_deps_outputs_disjoint(const tpu_executable_t *exe, void *const *outputs);

#endif /* TPU_COMPILER_DEPS_H */

/* compiler.h: graph -> vTPU executable, and the executable cache.
 *
 * tpu_compile first optimizes the graph (include/tpu/passes.h: simplify, fold, cse, dce),
 * then fuses elementwise chains, reductions with the chain computing their operand, and
 * matmuls / convolutions / reductions with their elementwise epilogue into single kernel
 * steps that keep intermediates in registers and cache (src/compiler/fuse.h), then turns
 * the result into a list of kernel steps over planned buffers:
 * parameters and outputs are bound at run time to caller pointers (with the strides the
 * graph recorded), layout ops (reshape of a dense value, transpose, broadcast_in_dim,
 * slice, reverse) become strided views instead of copies where their consumers read
 * strided input, and the other intermediates live in one scratch block whose offsets are
 * planned by liveness (buffers whose lifetimes do not overlap share bytes).
 *
 * An executable is immutable and reference-counted; the cache holds one reference and
 * every queued run holds another. Running is thread-compatible: concurrent runs of one
 * executable need distinct scratch blocks.
 */
#ifndef TPU_COMPILER_H
#define TPU_COMPILER_H

#include <stddef.h>
#include <stdint.h>

#include "tpu/allocator.h"
#include "tpu/ir.h"
#include "tpu/passes.h"
#include "tpu/status.h"
#include "tpu/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_executable tpu_executable_t;

/* output_alias_param[o] for an output that overlays no parameter exactly: */
#define TPU_OUTPUT_ALIAS_NONE (-1)     /* not known: the may-alias bit decides */
#define TPU_OUTPUT_ALIAS_DISJOINT (-2) /* shares no memory with any input: written directly */
#define TPU_OUTPUT_ALIAS_OVERLAP (-3)  /* may share memory with inputs: scratch + copy */

typedef struct tpu_compile_options {
  /* Output |i| may share memory with an input: its producer writes into scratch and a
   * final copy writes the output (bit i of the mask; outputs >= 64 always copy unless
   * output_alias_param says otherwise). */
  uint64_t output_may_alias_input;
  /* Exact aliases (NULL: none, the may-alias bits alone decide). For output o <
   * num_output_alias, output_alias_param[o] = p >= 0 says output o exactly overlays
   * parameter p: the same first element, dtype, dims and strides, and it shares no memory
   * with any other parameter or output (an in-place update, p = f(p, ...)). The compiler
   * then writes the output directly when that is safe: every read of p (directly or
   * through views: transpose, broadcast, slice, reverse, reshape) happens at or before
   * the step producing the output, and that step, if it reads p, is elementwise and reads
   * p exactly where it writes (each element read before it is written). Otherwise, or if
   * the graph's parameter p and output o differ in dtype, dims or strides, or two outputs
   * name the same p, the output is written through scratch and a final copy, as a set
   * may-alias bit does; the bit is ignored for outputs with p >= 0. An output whose value
   * is parameter p itself (unchanged) needs no step at all.
   * TPU_OUTPUT_ALIAS_DISJOINT and _OVERLAP say the same as a clear or set may-alias bit,
   * for any output index (the mask covers only the first 64); TPU_OUTPUT_ALIAS_NONE (or
   * another negative value, or an output past num_output_alias) leaves it to the bit. */
  const int32_t *output_alias_param;
  int32_t num_output_alias;
  /* TPU_PASS_* bits (include/tpu/passes.h) of passes NOT to run; 0 (the default of a
   * zeroed struct) runs them all, TPU_PASS_ALL none (the graph compiled as built). */
  uint32_t disable_passes;
} tpu_compile_options_t;

/* Compiles |g| (verified first: a malformed graph fails with its verifier message). */
tpu_status_t tpu_compile(const tpu_graph_t *g, const tpu_compile_options_t *options,
                         tpu_allocator_t host, tpu_executable_t **out_exe);

void tpu_executable_retain(tpu_executable_t *exe);
void tpu_executable_release(tpu_executable_t *exe); /* frees at zero; NULL ignored */

int tpu_executable_num_inputs(const tpu_executable_t *exe);
int tpu_executable_num_outputs(const tpu_executable_t *exe);
/* Bytes of scratch one run needs (the planned peak of intermediates). Intermediates that
 * die before an output overlapping no input is first written may live in that output
 * instead (its may-alias bit clear, or TPU_OUTPUT_ALIAS_DISJOINT), when that lowers the
 * peak: a forward's outputs written late hold its early intermediates. */
size_t tpu_executable_scratch_bytes(const tpu_executable_t *exe);
/* Sum of the sizes of all intermediates, i.e. the scratch a plan without reuse needs. */
size_t tpu_executable_unplanned_bytes(const tpu_executable_t *exe);
int tpu_executable_num_steps(const tpu_executable_t *exe);
/* Kernel launches per run: one per step (a fused step is one kernel however many ops it
 * computes; copies into outputs count). */
int tpu_executable_num_kernels(const tpu_executable_t *exe);
/* Steps that are fused kernels (each computes two or more graph nodes). */
int tpu_executable_num_fused(const tpu_executable_t *exe);
/* Whether runs take a second thread, by a schedule of the steps on two threads made at
 * compile time, while a helper spins in the run's pool (a thread waiting in
 * tpu_stream_synchronize); false: the steps run in order, each kernel splitting its own work
 * when large. */
bool tpu_executable_two_threads(const tpu_executable_t *exe);
/* What the graph passes did (nodes before and after, rewrites per pass). */
void tpu_executable_pass_stats(const tpu_executable_t *exe, tpu_pass_stats_t *out_stats);
/* The compiled steps as text, one line per step, e.g. for a layer norm:
 *   "0: FUSED(REDUCE,MUL) f32[8] -> output 1"
 *   "1: FUSED(SUB,MUL,REDUCE,MUL,ADD,RSQRT,MUL,MUL,ADD) f32[8] -> output 2,
 *       side f32[8,64] -> scratch, tail f32[8,64] -> output 0"   (one line)
 * and "DOT_GENERAL f32[8,16] -> output 1", "COPY f32[8] -> output 2" for unfused steps. A
 * fused step lists the ops of its nodes (its side group's, its own, its tail group's) and
 * every tensor it writes. NUL-terminated, allocated with |host| (free with host.free);
 * *out_len (may be NULL) is its length. */
tpu_status_t tpu_executable_describe(const tpu_executable_t *exe, tpu_allocator_t host,
                                     char **out_text, size_t *out_len);
/* Output |i|'s dtype, shape and layout (false: dense; else strides copied out). */
tpu_dtype_t tpu_executable_output_dtype(const tpu_executable_t *exe, int i);
const tpu_shape_t *tpu_executable_output_shape(const tpu_executable_t *exe, int i);
bool tpu_executable_output_strides(const tpu_executable_t *exe, int i,
                                   int64_t out_strides[TPU_MAX_RANK]);

/* Runs once. inputs[i] / outputs[i] point at element [0, ..., 0] of the buffers, laid out
 * with the strides the graph gave parameter i / output i. |scratch| holds at least
 * tpu_executable_scratch_bytes (64-byte aligned). Errors name the failing op. Outputs
 * that overlap each other are refused (TPU_ERR_INVALID_ARGUMENT) when the executable keeps
 * intermediates in its outputs. */
tpu_status_t tpu_executable_run(const tpu_executable_t *exe, void *const *inputs,
                                void *const *outputs, void *scratch, tpu_pool_t *pool);

/* Host time of an executable's successful runs since it was compiled, split by whether a
 * helper was spinning in the run's pool when it began (a thread waiting in
 * tpu_stream_synchronize: the run then takes two threads, by the two-thread schedule or by
 * kernels splitting their work) or not (one thread). Reading races with running: each
 * count is exact, a pair may be one run apart. */
typedef struct tpu_executable_run_stats {
  uint64_t alone_runs, alone_ns;
  uint64_t helped_runs, helped_ns;
  uint64_t shared_kernels; /* two-thread runs: kernels one thread split with the other
                              while that one waited for it */
  uint64_t joined_runs;    /* runs begun alone (counted there) in which a thread that
                              started waiting during the run took over steps */
} tpu_executable_run_stats_t;
void tpu_executable_run_stats(const tpu_executable_t *exe, tpu_executable_run_stats_t *out);

/* ---- cache --------------------------------------------------------------------------- */

typedef struct tpu_cache tpu_cache_t;

typedef struct tpu_cache_stats {
  uint64_t hits, misses, entries;
  uint64_t compile_ns;  /* total time spent in compiles that were inserted */
} tpu_cache_stats_t;

tpu_status_t tpu_cache_create(tpu_allocator_t host, tpu_cache_t **out_cache);
void tpu_cache_destroy(tpu_cache_t *cache); /* releases every executable; NULL ignored */

/* 64-bit hash of a key (the same function the cache uses). */
uint64_t tpu_cache_hash(const void *key, size_t len);

/* The executable stored under |key| (bytes compared in full), retained for the caller,
 * or NULL (a miss). Counts a hit or a miss. Thread-safe. */
tpu_executable_t *tpu_cache_lookup(tpu_cache_t *cache, const void *key, size_t len,
                                   uint64_t hash);
/* Stores |exe| under |key| (the cache takes its own reference). If another thread
 * inserted the same key first, keeps that one. |compile_ns| feeds the statistics. */
tpu_status_t tpu_cache_insert(tpu_cache_t *cache, const void *key, size_t len, uint64_t hash,
                              tpu_executable_t *exe, uint64_t compile_ns);
void tpu_cache_get_stats(tpu_cache_t *cache, tpu_cache_stats_t *out_stats);
/* Drops every entry (in-flight runs keep their executables alive). */
void tpu_cache_clear(tpu_cache_t *cache);

#ifdef __cplusplus
}
#endif
#endif /* TPU_COMPILER_H */

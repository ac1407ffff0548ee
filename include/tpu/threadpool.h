/* threadpool.h: a fixed pool of worker threads for kernels to split work over.
 *
 * One pool per process, sized to the cores (TORCHTPU_NUM_THREADS overrides). The calling
 * thread takes part in the work, so a pool of 1 thread runs everything inline.
 * parallel_for splits [0, n) into contiguous chunks of at least |grain| items and calls
 * |fn| on each chunk, returning when all chunks are done. Calls from inside a running
 * chunk run inline (no nested parallelism). Thread-safe: concurrent callers take turns.
 *
 * Helpers: a thread about to block (a synchronize waiting for a stream) can lend itself
 * with tpu_pool_help; it spins and joins jobs until it is done waiting. Work too short to
 * pay for waking a sleeping worker can still be shared with spinning helpers through
 * parallel_for_helpers, so both cores run a graph's matmuls while Python waits.
 */
#ifndef TPU_THREADPOOL_H
#define TPU_THREADPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "tpu/allocator.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_pool tpu_pool_t;

/* |num_threads| >= 1 counts the caller. */
tpu_status_t tpu_pool_create(int num_threads, tpu_allocator_t host, tpu_pool_t **out_pool);
void tpu_pool_destroy(tpu_pool_t *pool); /* NULL is ignored */
int tpu_pool_num_threads(const tpu_pool_t *pool); /* 1 for NULL */

/* The process-wide pool (created on first use; never NULL after a successful call). */
tpu_status_t tpu_pool_default(tpu_pool_t **out_pool);

typedef void (*tpu_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Runs fn over [0, n) in chunks; pool NULL runs inline. */
void tpu_pool_parallel_for(tpu_pool_t *pool, int64_t n, int64_t grain, tpu_range_fn fn,
                           void *ctx);

/* Threads inside tpu_pool_help now (0 for NULL). */
int tpu_pool_helpers(tpu_pool_t *pool);

/* Like parallel_for, but shared only with the helpers spinning now (no sleeping worker is
 * woken), and inline when there are none or another job is running. */
void tpu_pool_parallel_for_helpers(tpu_pool_t *pool, int64_t n, int64_t grain, tpu_range_fn fn,
                                   void *ctx);

/* Like parallel_for_helpers, but posted even when no helper spins yet: a thread that starts
 * helping (tpu_pool_help) while the caller runs the chunks joins and takes the chunks not
 * yet claimed. Inline only for a NULL pool, from inside a chunk, or while another job runs. */
void tpu_pool_parallel_for_joinable(tpu_pool_t *pool, int64_t n, int64_t grain, tpu_range_fn fn,
                                    void *ctx);

/* Spins, running chunks of the pool's jobs, until done(arg) holds (returns true) or no job
 * has come for |idle_ns| nanoseconds (returns false: the caller should sleep a while
 * instead). |jobs_joined| (optional): how many jobs it took part in. Inline (one check of
 * done) for a NULL pool or from inside a chunk. */
bool tpu_pool_help(tpu_pool_t *pool, bool (*done)(void *arg), void *arg, uint64_t idle_ns,
                   int64_t *jobs_joined);
/* Helpers of |pool| stay on their CPU: they do not move off the CPU its last job was
 * published from (by default a helper there could only steal the poster's time). For a
 * pool whose posters and helpers are the same threads taking turns, each on a core of its
 * own (run_parallel.c), where that CPU goes stale as soon as the other thread posts. */
void tpu_pool_keep_helpers_in_place(tpu_pool_t *pool);
/* Marks the calling thread as inside a pool job (in_job) or not, and returns the mark it
 * had. Inside a job, parallel_for and tpu_pool_help run inline (no nested parallelism in
 * one pool). For a job's chunk that runs work on a second pool (run_parallel.c: the two
 * threads of a graph split their kernels over a pool of their own): it clears the mark
 * for that work and restores it after. */
bool tpu_pool_swap_in_job(bool in_job);

#ifdef __cplusplus
}
#endif
#endif /* TPU_THREADPOOL_H */

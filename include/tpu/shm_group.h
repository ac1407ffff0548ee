/* shm_group.h: collectives between the processes of one host through shared memory.
 *
 * One group = one memfd segment mapped by every rank (no name in /dev/shm, so nothing can be
 * left behind by any exit, clean or not). Rank 0 creates it and publishes (pid, fd) through
 * the caller's rendezvous (the c10d store); the other ranks map it through /proc/<pid>/fd/<fd>.
 *
 * Protocol (all collectives are called by every rank in the same order, SPMD):
 *  - Each collective publishes a descriptor (kind, sequence number, dtype, op, root, bytes);
 *    at its first barrier every rank compares all descriptors, so a mismatch (shape, dtype,
 *    op or collective) fails on every rank with a message naming the ranks and values.
 *  - Data moves in rounds through per-rank slots of slot_bytes, double-buffered, so a round
 *    costs one barrier (two for all_reduce: copy in, reduce own segment, copy out).
 *  - send/recv use a one-slot channel per ordered pair of ranks with sent/acked counters.
 *  - Waiting spins briefly, then sleeps on a futex in the segment. While waiting, a rank
 *    checks that the ranks it waits for are alive (their pids): a dead rank fails the wait at
 *    once, naming it; a stalled one after timeout_s. The first rank that fails marks the
 *    group aborted with its message, so its peers fail too instead of waiting.
 * After an error the group is unusable: every later call fails with the first message.
 * A group is used by one thread at a time for collectives; send and recv may each run on
 * their own thread concurrently with collectives.
 */
#ifndef TPU_SHM_GROUP_H
#define TPU_SHM_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "tpu/collective.h"
#include "tpu/dtype.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_SHM_MAX_RANKS 64

typedef struct tpu_shm_group tpu_shm_group_t;

typedef struct tpu_shm_group_options {
  size_t slot_bytes;  /* per rank and buffer; 0 = 4 MiB */
  size_t p2p_bytes;   /* per ordered pair channel; 0 = 1 MiB (256 KiB above 16 ranks) */
  double timeout_s;   /* how long a wait may last; <= 0 = 60 s */
} tpu_shm_group_options_t;

/* Rank 0: creates the segment for |world| ranks. *out_fd is the memfd to publish together
 * with getpid(); it stays open until tpu_shm_group_close (or tpu_shm_group_seal). */
tpu_status_t tpu_shm_group_create(int world, const tpu_shm_group_options_t *options,
                                  tpu_shm_group_t **out_group, int *out_fd);

/* Ranks 1..world-1: maps the segment rank 0 published as (owner_pid, owner_fd). */
tpu_status_t tpu_shm_group_attach(int owner_pid, int owner_fd, int rank, int world,
                                  const tpu_shm_group_options_t *options,
                                  tpu_shm_group_t **out_group);

/* Waits until every rank has attached (naming the ones missing after the timeout), then
 * closes rank 0's memfd: from then on the segment lives only in the mappings. */
tpu_status_t tpu_shm_group_seal(tpu_shm_group_t *group);

/* Unmaps; safe on NULL. */
void tpu_shm_group_close(tpu_shm_group_t *group);

int tpu_shm_group_rank(const tpu_shm_group_t *group);
int tpu_shm_group_world(const tpu_shm_group_t *group);
void tpu_shm_group_set_timeout(tpu_shm_group_t *group, double timeout_s);
/* Marks the group aborted for every rank (the message is shown by their failing calls). */
void tpu_shm_group_abort(tpu_shm_group_t *group, const char *reason);
/* A label for the next collective's descriptor (e.g. "float32[4, 8]"), shown in mismatch
 * messages; truncated to 63 characters. */
void tpu_shm_group_set_next_label(tpu_shm_group_t *group, const char *label);

/* Collectives. Buffers are host memory of |bytes| / |count| elements; |in| may equal |out|
 * (in place) where both exist. */
tpu_status_t tpu_shm_barrier(tpu_shm_group_t *g);
tpu_status_t tpu_shm_all_reduce(tpu_shm_group_t *g, const void *in, void *out, size_t count,
                                tpu_dtype_t dtype, tpu_coll_op_t op);
tpu_status_t tpu_shm_broadcast(tpu_shm_group_t *g, void *buf, size_t bytes, int root);
/* out (world * bytes) = concat over ranks of in (bytes). */
tpu_status_t tpu_shm_all_gather(tpu_shm_group_t *g, const void *in, void *out, size_t bytes);
/* out (count) = reduction over ranks of in[rank * count ...] (in: world * count). */
tpu_status_t tpu_shm_reduce_scatter(tpu_shm_group_t *g, const void *in, void *out,
                                    size_t count, tpu_dtype_t dtype, tpu_coll_op_t op);
/* All-to-all with per-peer sizes: this rank sends send_bytes[p] bytes from
 * in + send_offsets[p] to rank p, and receives recv_bytes[p] bytes from rank p into
 * out + recv_offsets[p]. Every rank's send_bytes[p] must equal rank p's recv_bytes[rank]. */
tpu_status_t tpu_shm_all_to_all(tpu_shm_group_t *g, const void *in, const size_t *send_bytes,
                                const size_t *send_offsets, void *out,
                                const size_t *recv_bytes, const size_t *recv_offsets);
/* Point to point: blocks until the message is in the channel (send) or received (recv).
 * Both sides give the same size and tag, or the receiver fails naming both. */
tpu_status_t tpu_shm_send(tpu_shm_group_t *g, const void *buf, size_t bytes, int dst, int tag);
tpu_status_t tpu_shm_recv(tpu_shm_group_t *g, void *buf, size_t bytes, int src, int tag);

#ifdef __cplusplus
}
#endif
#endif /* TPU_SHM_GROUP_H */

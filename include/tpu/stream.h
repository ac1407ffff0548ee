/* stream.h: a chip's in-order asynchronous stream (one worker thread) and events.
 *
 * The host enqueues tasks and returns at once; the worker runs them in FIFO order.
 * A task that fails does not stop the stream: its error (status, the task's op name
 * and message) is kept, the later tasks still run, and the first kept error is
 * returned, then cleared, by the next tpu_stream_synchronize, so an error raised on
 * the device surfaces at the next sync point naming the op and the device stays
 * usable. Events mark a point in a stream: recorded by enqueueing a marker, complete
 * when the worker reaches it, with a host timestamp for elapsed-time queries.
 * All calls are thread-safe.
 */
#ifndef TPU_STREAM_H
#define TPU_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "tpu/allocator.h"
#include "tpu/status.h"
#include "tpu/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_stream tpu_stream_t;
typedef struct tpu_event tpu_event_t;

/* A unit of work. |run| executes on the worker thread and returns TPU_OK or an
 * error set with tpu_status_set (the message is captured on the worker). |release|
 * (optional, may be NULL) runs after |run| (or instead of it when the stream is
 * destroyed with the task still queued) to free |arg|. */
typedef struct tpu_task {
  tpu_status_t (*run)(void *arg);
  void (*release)(void *arg);
  void *arg;
  const char *op_name;  /* copied (truncated to 63 chars); used in error messages */
} tpu_task_t;

/* Starts a worker thread. |name| labels errors ("tpu:0"). */
tpu_status_t tpu_stream_create(const char *name, tpu_allocator_t host,
                               tpu_stream_t **out_stream);
/* Runs the queued tasks to completion, stops and joins the worker. NULL is ignored. */
void tpu_stream_destroy(tpu_stream_t *stream);

/* Queues |task|. Fails only if the task record cannot be allocated (then |release|
 * is NOT called: the caller still owns |arg|). */
tpu_status_t tpu_stream_enqueue(tpu_stream_t *stream, const tpu_task_t *task);

/* Blocks until every task queued before the call has run. Returns the first error
 * a task reported since the previous synchronize (status and message
 * "<op_name> failed on <stream name>: <task message>"), clearing it; TPU_OK otherwise. */
tpu_status_t tpu_stream_synchronize(tpu_stream_t *stream);
/* Lends threads that synchronize to |pool| while they wait (tpu_pool_help), so they run
 * chunks of the worker's kernels; NULL (the default) makes them just sleep. */
void tpu_stream_set_helper_pool(tpu_stream_t *stream, tpu_pool_t *pool);
tpu_pool_t *tpu_stream_helper_pool(tpu_stream_t *stream);
/* True if every queued task has run (no blocking). */
bool tpu_stream_query(tpu_stream_t *stream);
/* Tasks run since creation (for tests and statistics). */
uint64_t tpu_stream_tasks_completed(tpu_stream_t *stream);
/* Whether the worker, out of work, may spin a while (1 ms) before it sleeps, so that a
 * node pushed meanwhile starts without a wake-up; off by default (the runtime turns it on
 * where it turns helping on: the spinner needs a core of its own). It stops spinning after
 * idle spells too long to catch, until a short one. */
void tpu_stream_set_idle_spin(tpu_stream_t *stream, bool allowed);
bool tpu_stream_idle_spin(tpu_stream_t *stream);
/* How long (ns) a worker allowed to spin does so before it sleeps. */
uint64_t tpu_stream_idle_spin_ns(void);
/* Workers of all streams spinning for work right now (for tests). */
int tpu_stream_spinning_workers(void);

/* Events. A new event counts as complete (never recorded). */
tpu_status_t tpu_event_create(tpu_allocator_t host, tpu_event_t **out_event);
/* Waits for a pending record to complete, then frees. NULL is ignored. */
void tpu_event_destroy(tpu_event_t *event);
/* Marks the current end of |stream|: the event becomes incomplete until the worker
 * reaches this point. Re-recording replaces the previous mark. */
tpu_status_t tpu_event_record(tpu_event_t *event, tpu_stream_t *stream);
/* True if the last record has been reached (or the event was never recorded). */
bool tpu_event_query(tpu_event_t *event);
/* Blocks the host until the last record has been reached. */
void tpu_event_synchronize(tpu_event_t *event);
/* Makes |stream| wait, before running tasks queued after this call, until the
 * event's current record completes. A never-recorded event adds no wait. */
tpu_status_t tpu_stream_wait_event(tpu_stream_t *stream, tpu_event_t *event);
/* Host time (ns, CLOCK_MONOTONIC) when the last record completed, or
 * TPU_ERR_INVALID_ARGUMENT if never recorded or not yet complete. */
tpu_status_t tpu_event_timestamp_ns(tpu_event_t *event, uint64_t *out_ns);
/* Milliseconds from |start| to |end| (both recorded and complete). */
tpu_status_t tpu_event_elapsed_ms(tpu_event_t *start, tpu_event_t *end, double *out_ms);

#ifdef __cplusplus
}
#endif
#endif /* TPU_STREAM_H */

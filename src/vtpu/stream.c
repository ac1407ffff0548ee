/* stream.c: a chip's in-order asynchronous stream and events (see stream.h).
 *
 * Each stream owns one worker thread that pops nodes off a FIFO queue. A node is a
 * user task, an event record (marks the event's generation complete) or an event
 * wait (blocks the worker until the event reaches a generation). Progress is
 * counted with tickets: the n-th node enqueued has ticket n, and the worker sets
 * |completed| to the ticket of each node it finishes, so synchronize waits for the
 * ticket current at the time of the call.
 *
 * Events count records with generations: record assigns the next generation and
 * enqueues a marker; the event is complete when completed_gen >= recorded_gen.
 * Events are reference-counted (the user plus each queued node that names them),
 * so destroying an event while another stream still waits on it is safe.
 *
 * A stream given a helper pool lends a synchronizing thread to that pool: instead of
 * sleeping, the waiter spins in tpu_pool_help and runs chunks of the worker's kernels. After
 * kHelpIdleNs without work (the worker waiting on a collective, say) it naps, then spins
 * again. So the core Python leaves idle while it waits runs matmuls.
 *
 * A worker that runs out of work can spin for kIdleSpinNs before it sleeps
 * (tpu_stream_set_idle_spin; the runtime allows it where it allows helping: every chip's
 * worker and the waiter have a core, no process group shares the host), so the next node
 * (the next eager op) starts without a wake-up, which costs tens of microseconds on a busy
 * machine, and its push skips the signal. The spin covers the gap between two compiled
 * steps too (the worker idles from the step's last graph to the next forward, while
 * Python returns from synchronize and starts that forward: a few hundred microseconds).
 * Only while spinning pays: after two idle spells in a row longer than a spin (a loop
 * that does other work between steps) it sleeps at once, until a short spell again.
 */
#include "tpu/stream.h"

#include "base/spin.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef enum node_kind { NODE_TASK, NODE_RECORD, NODE_WAIT } node_kind_t;

typedef struct stream_node {
  struct stream_node *next;
  node_kind_t kind;
  tpu_task_t task;      /* NODE_TASK; task.op_name points at op_name */
  char op_name[64];
  tpu_event_t *event;   /* NODE_RECORD, NODE_WAIT (holds a reference) */
  uint64_t generation;  /* the event generation recorded or waited for */
} stream_node_t;

struct tpu_stream {
  tpu_allocator_t host;
  char name[64];
  pthread_mutex_t mu;
  pthread_cond_t work_cv;   /* worker: queue non-empty or stopping */
  pthread_cond_t done_cv;   /* waiters: completed moved */
  stream_node_t *head, *tail;
  _Atomic uint64_t enqueued; /* tickets handed out; written under mu, read by a spinning
                                worker without it */
  _Atomic uint64_t completed; /* ticket of the last finished node; written under mu */
  uint64_t tasks_completed; /* user tasks run */
  bool worker_sleeping;     /* the worker waits on work_cv: only then pushes signal */
  bool idle_spin;           /* the worker may spin before it sleeps */
  int long_idles;           /* the worker's idle spells in a row longer than a spin */
  _Atomic bool stopping;
  tpu_pool_t *helper_pool;  /* synchronize helps it while waiting; NULL: just sleep */
  tpu_status_t error;       /* first error since the last synchronize */
  char error_message[TPU_STATUS_MESSAGE_CAP];
  pthread_t thread;
};

struct tpu_event {
  tpu_allocator_t host;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;                 /* user + queued nodes */
  uint64_t recorded_gen;    /* 0 = never recorded */
  uint64_t completed_gen;
  uint64_t timestamp_ns;    /* when completed_gen completed */
};

/* ---- events: reference counting ------------------------------------------ */

static void event_ref(tpu_event_t *e) {
  pthread_mutex_lock(&e->mu);
  e->refs++;
  pthread_mutex_unlock(&e->mu);
}

static void event_unref(tpu_event_t *e) {
  pthread_mutex_lock(&e->mu);
  bool last = --e->refs == 0;
  pthread_mutex_unlock(&e->mu);
  if (!last) return;
  pthread_cond_destroy(&e->cv);
  pthread_mutex_destroy(&e->mu);
  tpu_allocator_t host = e->host;
  tpu_allocator_free(host, e);
}

/* ---- worker --------------------------------------------------------------- */

static void run_task(tpu_stream_t *s, stream_node_t *n) {
  tpu_status_clear();
  tpu_status_t st = n->task.run(n->task.arg);
  if (st != TPU_OK) {
    /* Capture the message on this thread before anything else can overwrite it. */
    char msg[TPU_STATUS_MESSAGE_CAP];
    const char *m = tpu_status_message();
    snprintf(msg, sizeof(msg), "%s", m[0] ? m : tpu_status_name(st));
    pthread_mutex_lock(&s->mu);
    if (s->error == TPU_OK) {
      s->error = st;
      /* Truncation is fine: the status message buffer has the same size. */
      if (snprintf(s->error_message, sizeof(s->error_message), "%s failed on %s: %s",
                   n->op_name, s->name, msg) < 0) {
        s->error_message[0] = '\0';
      }
    }
    pthread_mutex_unlock(&s->mu);
  }
  if (n->task.release) n->task.release(n->task.arg);
}

static void run_node(tpu_stream_t *s, stream_node_t *n) {
  tpu_event_t *e = n->event;
  switch (n->kind) {
    case NODE_TASK:
      run_task(s, n);
      break;
    case NODE_RECORD:
      pthread_mutex_lock(&e->mu);
      if (n->generation > e->completed_gen) {
        e->completed_gen = n->generation;
        e->timestamp_ns = tpu_now_ns();
      }
      pthread_cond_broadcast(&e->cv);
      pthread_mutex_unlock(&e->mu);
      break;
    case NODE_WAIT:
      pthread_mutex_lock(&e->mu);
      while (e->completed_gen < n->generation) pthread_cond_wait(&e->cv, &e->mu);
      pthread_mutex_unlock(&e->mu);
      break;
  }
  if (e) event_unref(e);
}

/* How long an idle worker spins before it sleeps: eager ops come closer together than
 * this, and so do a synchronized loop's compiled steps (GPT step: 250-500 us from its last
 * graph to the next forward; a 200 us spin made every step wait for a wake-up: the
 * synchronized step took 0-3% longer than with this spin, up to 8% against a 600 us one).
 * g_spinning counts the workers spinning now. */
static const uint64_t kIdleSpinNs = 1000 * 1000;
static _Atomic int g_spinning;

int tpu_stream_spinning_workers(void) { return atomic_load(&g_spinning); }

uint64_t tpu_stream_idle_spin_ns(void) { return kIdleSpinNs; }

/* Called with s->mu held and the queue empty: spins (mu released) until a node is pushed,
 * the stream stops or kIdleSpinNs pass. */
static void spin_for_work(tpu_stream_t *s) {
  atomic_fetch_add(&g_spinning, 1);
  const uint64_t seen = atomic_load(&s->enqueued);
  pthread_mutex_unlock(&s->mu);
  const uint64_t since = tpu_now_ns();
  for (unsigned spin = 1; atomic_load(&s->enqueued) == seen && !atomic_load(&s->stopping);
       spin++) {
    if (spin % 64 == 0 && tpu_now_ns() - since > kIdleSpinNs) break;
    tpu_cpu_relax();
  }
  atomic_fetch_sub(&g_spinning, 1);
  pthread_mutex_lock(&s->mu);
}

/* Called with s->mu held and the queue empty: returns with a node queued or the stream
 * stopping, after a spin (while spells are short) and then sleep. */
static void wait_for_work(tpu_stream_t *s) {
  const uint64_t idle_since = tpu_now_ns();
  if (s->idle_spin && s->long_idles < 2) spin_for_work(s);
  while (!s->head && !s->stopping) {
    s->worker_sleeping = true;
    pthread_cond_wait(&s->work_cv, &s->mu);
    s->worker_sleeping = false;
  }
  s->long_idles = tpu_now_ns() - idle_since > kIdleSpinNs ? s->long_idles + 1 : 0;
}

static void *worker_main(void *arg) {
  tpu_stream_t *s = arg;
  pthread_setname_np(pthread_self(), "tpu_stream"); /* top -H, perf, /proc/<pid>/task/<tid>/comm */
  pthread_mutex_lock(&s->mu);
  for (;;) {
    if (!s->head && !s->stopping) wait_for_work(s);
    stream_node_t *n = s->head;
    if (!n) break; /* stopping and drained */
    s->head = n->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->mu);

    run_node(s, n);
    bool is_task = n->kind == NODE_TASK;
    s->host.free(s->host.self, n);

    pthread_mutex_lock(&s->mu);
    s->completed++;
    if (is_task) s->tasks_completed++;
    pthread_cond_broadcast(&s->done_cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---- streams -------------------------------------------------------------- */

tpu_status_t tpu_stream_create(const char *name, tpu_allocator_t host,
                               tpu_stream_t **out_stream) {
  *out_stream = NULL;
  void *mem;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(host, 1, sizeof(tpu_stream_t), "stream_create", &mem));
  tpu_stream_t *s = mem;
  s->host = host;
  snprintf(s->name, sizeof(s->name), "%s", name ? name : "stream");
  int rc = pthread_mutex_init(&s->mu, NULL);
  if (rc == 0) {
    rc = pthread_cond_init(&s->work_cv, NULL);
    if (rc == 0) {
      pthread_condattr_t attr; /* synchronize naps with timed waits on the monotonic clock */
      rc = pthread_condattr_init(&attr);
      if (rc == 0) {
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        rc = pthread_cond_init(&s->done_cv, &attr);
        pthread_condattr_destroy(&attr);
      }
      if (rc == 0) {
        rc = pthread_create(&s->thread, NULL, worker_main, s);
        if (rc == 0) {
          *out_stream = s;
          return TPU_OK;
        }
        pthread_cond_destroy(&s->done_cv);
      }
      pthread_cond_destroy(&s->work_cv);
    }
    pthread_mutex_destroy(&s->mu);
  }
  tpu_allocator_free(host, s);
  return tpu_status_set(TPU_ERR_UNAVAILABLE, "stream_create: cannot start the worker of %s: %s",
                        name ? name : "stream", strerror(rc));
}

void tpu_stream_destroy(tpu_stream_t *stream) {
  if (!stream) return;
  pthread_mutex_lock(&stream->mu);
  stream->stopping = true;
  pthread_cond_signal(&stream->work_cv);
  pthread_mutex_unlock(&stream->mu);
  pthread_join(stream->thread, NULL); /* the worker drains the queue first */
  pthread_cond_destroy(&stream->done_cv);
  pthread_cond_destroy(&stream->work_cv);
  pthread_mutex_destroy(&stream->mu);
  tpu_allocator_t host = stream->host;
  tpu_allocator_free(host, stream);
}

static tpu_status_t node_new(tpu_stream_t *s, node_kind_t kind, stream_node_t **out) {
  stream_node_t *n = s->host.alloc(s->host.self, sizeof(*n), alignof(stream_node_t));
  if (!n) {
    *out = NULL;
    return tpu_status_set(TPU_ERR_OUT_OF_MEMORY, "stream_enqueue: out of host memory on %s",
                          s->name);
  }
  memset(n, 0, sizeof(*n));
  n->kind = kind;
  *out = n;
  return TPU_OK;
}

static void node_push(tpu_stream_t *s, stream_node_t *n) {
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = n;
  else s->head = n;
  s->tail = n;
  s->enqueued++;
  if (s->worker_sleeping) pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
}

tpu_status_t tpu_stream_enqueue(tpu_stream_t *stream, const tpu_task_t *task) {
  if (!task || !task->run) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "stream_enqueue: task has no run function");
  }
  stream_node_t *n;
  TPU_RETURN_IF_ERROR(node_new(stream, NODE_TASK, &n));
  n->task = *task;
  /* a bounded copy (not snprintf: this is on every op's hot path) */
  const char *name = task->op_name ? task->op_name : "task";
  size_t len = strnlen(name, sizeof(n->op_name) - 1);
  memcpy(n->op_name, name, len);
  n->op_name[len] = '\0';
  n->task.op_name = n->op_name;
  node_push(stream, n);
  return TPU_OK;
}

void tpu_stream_set_helper_pool(tpu_stream_t *stream, tpu_pool_t *pool) {
  pthread_mutex_lock(&stream->mu);
  stream->helper_pool = pool;
  pthread_mutex_unlock(&stream->mu);
}

void tpu_stream_set_idle_spin(tpu_stream_t *stream, bool allowed) {
  pthread_mutex_lock(&stream->mu);
  stream->idle_spin = allowed;
  pthread_mutex_unlock(&stream->mu);
}

bool tpu_stream_idle_spin(tpu_stream_t *stream) {
  pthread_mutex_lock(&stream->mu);
  bool allowed = stream->idle_spin;
  pthread_mutex_unlock(&stream->mu);
  return allowed;
}

/* How long a synchronizing thread spins without work before it naps (longer than the
 * gaps between a graph's matmuls), and its naps: from 1 ms, doubling while it finds no
 * work (the worker waiting on a collective), up to 16 ms. A nap ends early when a node
 * finishes. */
static const uint64_t kHelpIdleNs = 500 * 1000;
static const uint64_t kNapMinNs = 1000 * 1000, kNapMaxNs = 16 * 1000 * 1000;

/* Waits on the stream's done_cv (mu held) for at most |ns| nanoseconds. */
static void nap(tpu_stream_t *s, uint64_t ns) {
  uint64_t until = tpu_now_ns() + ns;
  struct timespec ts = {(time_t)(until / 1000000000ull), (long)(until % 1000000000ull)};
  pthread_cond_timedwait(&s->done_cv, &s->mu, &ts);
}

tpu_pool_t *tpu_stream_helper_pool(tpu_stream_t *stream) {
  pthread_mutex_lock(&stream->mu);
  tpu_pool_t *pool = stream->helper_pool;
  pthread_mutex_unlock(&stream->mu);
  return pool;
}

typedef struct ticket_wait {
  tpu_stream_t *stream;
  uint64_t target;
} ticket_wait;

static bool ticket_reached(void *arg) {
  const ticket_wait *w = arg;
  return atomic_load(&w->stream->completed) >= w->target;
}

tpu_status_t tpu_stream_synchronize(tpu_stream_t *stream) {
  char msg[TPU_STATUS_MESSAGE_CAP];
  pthread_mutex_lock(&stream->mu);
  uint64_t target = stream->enqueued;
  tpu_pool_t *pool = stream->helper_pool;
  uint64_t nap_ns = kNapMinNs;
  while (stream->completed < target) {
    if (!pool) {
      pthread_cond_wait(&stream->done_cv, &stream->mu);
      continue;
    }
    pthread_mutex_unlock(&stream->mu);
    ticket_wait w = {stream, target};
    int64_t jobs = 0;
    bool reached = tpu_pool_help(pool, ticket_reached, &w, kHelpIdleNs, &jobs);
    pthread_mutex_lock(&stream->mu);
    if (reached) break;
    nap_ns = jobs ? kNapMinNs : (2 * nap_ns < kNapMaxNs ? 2 * nap_ns : kNapMaxNs);
    if (stream->completed < target) nap(stream, nap_ns);
  }
  tpu_status_t st = stream->error;
  if (st != TPU_OK) {
    memcpy(msg, stream->error_message, sizeof(msg));
    stream->error = TPU_OK;
    stream->error_message[0] = '\0';
  }
  pthread_mutex_unlock(&stream->mu);
  return st == TPU_OK ? TPU_OK : tpu_status_set(st, "%s", msg);
}

bool tpu_stream_query(tpu_stream_t *stream) {
  pthread_mutex_lock(&stream->mu);
  bool idle = stream->completed == stream->enqueued;
  pthread_mutex_unlock(&stream->mu);
  return idle;
}

uint64_t tpu_stream_tasks_completed(tpu_stream_t *stream) {
  pthread_mutex_lock(&stream->mu);
  uint64_t n = stream->tasks_completed;
  pthread_mutex_unlock(&stream->mu);
  return n;
}

/* ---- events --------------------------------------------------------------- */

tpu_status_t tpu_event_create(tpu_allocator_t host, tpu_event_t **out_event) {
  *out_event = NULL;
  void *mem;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(host, 1, sizeof(tpu_event_t), "event_create", &mem));
  tpu_event_t *e = mem;
  e->host = host;
  e->refs = 1;
  if (pthread_mutex_init(&e->mu, NULL) != 0) {
    tpu_allocator_free(host, e);
    return tpu_status_set(TPU_ERR_UNAVAILABLE, "event_create: pthread_mutex_init failed");
  }
  if (pthread_cond_init(&e->cv, NULL) != 0) {
    pthread_mutex_destroy(&e->mu);
    tpu_allocator_free(host, e);
    return tpu_status_set(TPU_ERR_UNAVAILABLE, "event_create: pthread_cond_init failed");
  }
  *out_event = e;
  return TPU_OK;
}

void tpu_event_destroy(tpu_event_t *event) {
  if (!event) return;
  tpu_event_synchronize(event);
  event_unref(event);
}

tpu_status_t tpu_event_record(tpu_event_t *event, tpu_stream_t *stream) {
  stream_node_t *n;
  TPU_RETURN_IF_ERROR(node_new(stream, NODE_RECORD, &n));
  event_ref(event);
  pthread_mutex_lock(&event->mu);
  n->event = event;
  n->generation = ++event->recorded_gen;
  pthread_mutex_unlock(&event->mu);
  node_push(stream, n);
  return TPU_OK;
}

bool tpu_event_query(tpu_event_t *event) {
  pthread_mutex_lock(&event->mu);
  bool done = event->completed_gen >= event->recorded_gen;
  pthread_mutex_unlock(&event->mu);
  return done;
}

void tpu_event_synchronize(tpu_event_t *event) {
  pthread_mutex_lock(&event->mu);
  uint64_t target = event->recorded_gen;
  while (event->completed_gen < target) pthread_cond_wait(&event->cv, &event->mu);
  pthread_mutex_unlock(&event->mu);
}

tpu_status_t tpu_stream_wait_event(tpu_stream_t *stream, tpu_event_t *event) {
  pthread_mutex_lock(&event->mu);
  uint64_t gen = event->recorded_gen;
  bool done = event->completed_gen >= gen;
  pthread_mutex_unlock(&event->mu);
  if (done) return TPU_OK; /* never recorded, or already reached: nothing to wait for */
  stream_node_t *n;
  TPU_RETURN_IF_ERROR(node_new(stream, NODE_WAIT, &n));
  event_ref(event);
  n->event = event;
  n->generation = gen;
  node_push(stream, n);
  return TPU_OK;
}

tpu_status_t tpu_event_timestamp_ns(tpu_event_t *event, uint64_t *out_ns) {
  pthread_mutex_lock(&event->mu);
  bool recorded = event->recorded_gen > 0;
  bool done = event->completed_gen >= event->recorded_gen;
  uint64_t ts = event->timestamp_ns;
  pthread_mutex_unlock(&event->mu);
  if (!recorded) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "event_timestamp: the event was never recorded");
  }
  if (!done) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "event_timestamp: the event's last record has not completed yet");
  }
  *out_ns = ts;
  return TPU_OK;
}

tpu_status_t tpu_event_elapsed_ms(tpu_event_t *start, tpu_event_t *end, double *out_ms) {
  uint64_t t0, t1;
  TPU_RETURN_IF_ERROR(tpu_event_timestamp_ns(start, &t0));
  TPU_RETURN_IF_ERROR(tpu_event_timestamp_ns(end, &t1));
  *out_ms = ((double)t1 - (double)t0) / 1e6;
  return TPU_OK;
}

/* test_stream.c: streams (FIFO order, asynchrony, sticky errors, draining, threads, the
 * synchronizing thread helping the pool, idle workers spinning only where allowed and while
 * it pays) and events (query, synchronize, timestamps, cross-stream waits, re-recording);
 * the worker thread is named tpu_stream. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "thread_names.h"
#include "tpu/stream.h"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static tpu_stream_t *make_stream(const char *name) {
  tpu_stream_t *s = NULL;
  CHECK_OK(tpu_stream_create(name, tpu_allocator_system(), &s));
  return s;
}

static tpu_event_t *make_event(void) {
  tpu_event_t *e = NULL;
  CHECK_OK(tpu_event_create(tpu_allocator_system(), &e));
  return e;
}

/* ---- task helpers --------------------------------------------------------- */

typedef struct log {
  int values[20000];
  int count; /* written by the worker only */
} log_t;

typedef struct append_arg {
  log_t *log;
  int value;
} append_arg_t;

static tpu_status_t append_run(void *arg) {
  append_arg_t *a = arg;
  a->log->values[a->log->count++] = a->value;
  return TPU_OK;
}

static void free_release(void *arg) { tpu_allocator_free(tpu_allocator_system(), arg); }

static tpu_status_t enqueue_append(tpu_stream_t *s, log_t *log, int value) {
  void *mem;
  TPU_RETURN_IF_ERROR(
      tpu_allocator_calloc(tpu_allocator_system(), 1, sizeof(append_arg_t), "test", &mem));
  append_arg_t *a = mem;
  a->log = log;
  a->value = value;
  tpu_task_t t = {append_run, free_release, a, "append"};
  tpu_status_t st = tpu_stream_enqueue(s, &t);
  if (st != TPU_OK) free_release(a);
  return st;
}

static tpu_status_t sleep_run(void *arg) {
  sleep_ms(*(int *)arg);
  return TPU_OK;
}

static tpu_status_t set_flag_run(void *arg) {
  atomic_store((atomic_int *)arg, 1);
  return TPU_OK;
}

static tpu_status_t slow_set_flag_run(void *arg) {
  sleep_ms(100);
  atomic_store((atomic_int *)arg, 1);
  return TPU_OK;
}

/* ---- streams -------------------------------------------------------------- */

TEST(tasks_run_in_fifo_order) {
  tpu_stream_t *s = make_stream("tpu:0");
  if (!s) return;
  static log_t log;
  log.count = 0;
  for (int i = 0; i < 10000; i++) CHECK_OK(enqueue_append(s, &log, i));
  CHECK_OK(tpu_stream_synchronize(s));
  CHECK(log.count == 10000);
  int out_of_order = 0;
  for (int i = 0; i < log.count; i++) out_of_order += log.values[i] != i;
  CHECK(out_of_order == 0);
  CHECK(tpu_stream_tasks_completed(s) == 10000);
  CHECK(tpu_stream_query(s));
  tpu_stream_destroy(s);
  tpu_stream_destroy(NULL);
}

TEST(enqueue_returns_before_the_task_runs) {
  tpu_stream_t *s = make_stream("tpu:0");
  if (!s) return;
  atomic_int done = 0;
  tpu_task_t t = {slow_set_flag_run, NULL, &done, "slow"};
  CHECK_OK(tpu_stream_enqueue(s, &t));
  CHECK(atomic_load(&done) == 0);
  CHECK(!tpu_stream_query(s));
  CHECK_OK(tpu_stream_synchronize(s));
  CHECK(atomic_load(&done) == 1);
  CHECK(tpu_stream_query(s));
  tpu_stream_destroy(s);
}

static atomic_int g_releases;
static void count_release(void *arg) {
  (void)arg;
  atomic_fetch_add(&g_releases, 1);
}
static tpu_status_t fail_bad_shape(void *arg) {
  (void)arg;
  return tpu_status_set(TPU_ERR_DEVICE, "bad shape (3, 4) x (5, 6)");
}
static tpu_status_t fail_second(void *arg) {
  (void)arg;
  return tpu_status_set(TPU_ERR_INTERNAL, "second failure");
}
static tpu_status_t fail_silently(void *arg) {
  (void)arg;
  return TPU_ERR_UNIMPLEMENTED;
}
static tpu_status_t count_run(void *arg) {
  atomic_fetch_add((atomic_int *)arg, 1);
  return TPU_OK;
}

TEST(errors_surface_at_synchronize_and_are_cleared) {
  tpu_stream_t *s = make_stream("tpu:2");
  if (!s) return;
  atomic_int ran = 0;
  atomic_store(&g_releases, 0);
  tpu_task_t ok = {count_run, count_release, &ran, "add"};
  tpu_task_t bad = {fail_bad_shape, count_release, NULL, "matmul"};
  tpu_task_t bad2 = {fail_second, count_release, NULL, "conv"};
  CHECK_OK(tpu_stream_enqueue(s, &ok));
  CHECK_OK(tpu_stream_enqueue(s, &bad));
  CHECK_OK(tpu_stream_enqueue(s, &bad2));
  CHECK_OK(tpu_stream_enqueue(s, &ok)); /* later tasks still run */
  tpu_status_set(TPU_ERR_INTERNAL, "host message");
  CHECK(tpu_stream_synchronize(s) == TPU_ERR_DEVICE);
  CHECK(strcmp(tpu_status_message(), "matmul failed on tpu:2: bad shape (3, 4) x (5, 6)") == 0);
  CHECK(atomic_load(&ran) == 2);
  CHECK(atomic_load(&g_releases) == 4);
  CHECK_OK(tpu_stream_synchronize(s)); /* cleared */
  CHECK_OK(tpu_stream_enqueue(s, &ok)); /* the stream stays usable */
  CHECK_OK(tpu_stream_synchronize(s));
  CHECK(atomic_load(&ran) == 3);
  /* A task that fails without a message is reported by its status name. */
  tpu_task_t silent = {fail_silently, NULL, NULL, "an_op_name_longer_than_sixty_three_characters_"
                                                  "is_truncated_when_copied_xxxxxxxxxxxxxxxxx"};
  CHECK_OK(tpu_stream_enqueue(s, &silent));
  CHECK(tpu_stream_synchronize(s) == TPU_ERR_UNIMPLEMENTED);
  CHECK_CONTAINS(tpu_status_message(), "failed on tpu:2: UNIMPLEMENTED");
  CHECK_CONTAINS(tpu_status_message(), "an_op_name_longer");
  CHECK(strstr(tpu_status_message(), "xxxxxxxxxxxxxxxxx failed") == NULL);
  tpu_stream_destroy(s);
}

TEST(invalid_task_is_rejected) {
  tpu_stream_t *s = make_stream("tpu:0");
  if (!s) return;
  tpu_task_t t = {NULL, NULL, NULL, "nothing"};
  CHECK(tpu_stream_enqueue(s, &t) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_stream_enqueue(s, NULL) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_OK(tpu_stream_synchronize(s));
  tpu_stream_destroy(s);
}

TEST(destroy_drains_the_queue) {
  tpu_stream_t *s = make_stream("tpu:0");
  if (!s) return;
  atomic_int ran = 0;
  atomic_store(&g_releases, 0);
  int ms = 20;
  tpu_task_t slow = {sleep_run, NULL, &ms, "sleep"};
  CHECK_OK(tpu_stream_enqueue(s, &slow));
  tpu_task_t t = {count_run, count_release, &ran, "count"};
  for (int i = 0; i < 100; i++) CHECK_OK(tpu_stream_enqueue(s, &t));
  tpu_stream_destroy(s);
  CHECK(atomic_load(&ran) == 100);
  CHECK(atomic_load(&g_releases) == 100);
}

typedef struct producer {
  tpu_stream_t *stream;
  log_t *log;
  int id;
} producer_t;

static void *produce(void *arg) {
  producer_t *p = arg;
  for (int i = 0; i < 5000; i++) {
    if (enqueue_append(p->stream, p->log, p->id * 100000 + i) != TPU_OK) break;
  }
  return NULL;
}

TEST(enqueue_from_two_threads) {
  tpu_stream_t *s = make_stream("tpu:0");
  if (!s) return;
  static log_t log;
  log.count = 0;
  producer_t p[2] = {{s, &log, 1}, {s, &log, 2}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, produce, &p[i]) == 0);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  CHECK_OK(tpu_stream_synchronize(s));
  CHECK(log.count == 10000);
  int next[3] = {0, 0, 0}, bad = 0;
  for (int i = 0; i < log.count; i++) {
    int id = log.values[i] / 100000, seq = log.values[i] % 100000;
    if (id < 1 || id > 2 || seq != next[id]) bad++;
    else next[id]++;
  }
  CHECK(bad == 0 && next[1] == 5000 && next[2] == 5000);
  tpu_stream_destroy(s);
}

/* ---- events --------------------------------------------------------------- */

TEST(event_query_synchronize_and_rerecord) {
  tpu_stream_t *s = make_stream("tpu:0");
  tpu_event_t *e = make_event();
  if (!s || !e) return;
  CHECK(tpu_event_query(e)); /* never recorded counts as complete */
  tpu_event_synchronize(e);
  uint64_t ts;
  CHECK(tpu_event_timestamp_ns(e, &ts) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "never recorded");
  atomic_int done = 0;
  tpu_task_t slow = {slow_set_flag_run, NULL, &done, "slow"};
  CHECK_OK(tpu_stream_enqueue(s, &slow));
  CHECK_OK(tpu_event_record(e, s));
  CHECK(!tpu_event_query(e));
  CHECK(tpu_event_timestamp_ns(e, &ts) == TPU_ERR_INVALID_ARGUMENT);
  tpu_event_synchronize(e);
  CHECK(atomic_load(&done) == 1);
  CHECK(tpu_event_query(e));
  uint64_t first = 0;
  CHECK_OK(tpu_event_timestamp_ns(e, &first));
  CHECK(first > 0);
  /* Re-recording makes it incomplete again until the new mark is reached. */
  atomic_store(&done, 0);
  CHECK_OK(tpu_stream_enqueue(s, &slow));
  CHECK_OK(tpu_event_record(e, s));
  CHECK(!tpu_event_query(e));
  CHECK_OK(tpu_stream_synchronize(s));
  CHECK(tpu_event_query(e) && atomic_load(&done) == 1);
  uint64_t second = 0;
  CHECK_OK(tpu_event_timestamp_ns(e, &second));
  CHECK(second >= first + 100000000ull);
  tpu_event_destroy(e);
  tpu_event_destroy(NULL);
  tpu_stream_destroy(s);
}

TEST(event_elapsed_time) {
  tpu_stream_t *s = make_stream("tpu:0");
  tpu_event_t *start = make_event(), *end = make_event(), *never = make_event();
  if (!s || !start || !end || !never) return;
  int ms = 50;
  tpu_task_t t = {sleep_run, NULL, &ms, "sleep"};
  CHECK_OK(tpu_event_record(start, s));
  CHECK_OK(tpu_stream_enqueue(s, &t));
  CHECK_OK(tpu_event_record(end, s));
  tpu_event_synchronize(end);
  double elapsed = 0;
  CHECK_OK(tpu_event_elapsed_ms(start, end, &elapsed));
  CHECK(elapsed >= 50.0 && elapsed < 5000.0);
  CHECK(tpu_event_elapsed_ms(start, never, &elapsed) == TPU_ERR_INVALID_ARGUMENT);
  tpu_event_destroy(start);
  tpu_event_destroy(end);
  tpu_event_destroy(never);
  tpu_stream_destroy(s);
}

typedef struct observe {
  atomic_int *flag;
  int seen;
} observe_t;

static tpu_status_t observe_run(void *arg) {
  observe_t *o = arg;
  o->seen = atomic_load(o->flag);
  return TPU_OK;
}

TEST(wait_event_orders_two_streams) {
  tpu_stream_t *a = make_stream("tpu:0"), *b = make_stream("tpu:1");
  tpu_event_t *e = make_event(), *never = make_event();
  if (!a || !b || !e || !never) return;
  atomic_int flag = 0;
  /* A never-recorded event adds no wait. */
  CHECK_OK(tpu_stream_wait_event(b, never));
  observe_t early = {&flag, -1};
  tpu_task_t look_early = {observe_run, NULL, &early, "observe"};
  CHECK_OK(tpu_stream_enqueue(b, &look_early));
  CHECK_OK(tpu_stream_synchronize(b));
  CHECK(early.seen == 0);
  /* b waits for a's slow task before reading the flag. */
  tpu_task_t slow = {slow_set_flag_run, NULL, &flag, "producer"};
  CHECK_OK(tpu_stream_enqueue(a, &slow));
  CHECK_OK(tpu_event_record(e, a));
  CHECK_OK(tpu_stream_wait_event(b, e));
  observe_t late = {&flag, -1};
  tpu_task_t look = {observe_run, NULL, &late, "consumer"};
  CHECK_OK(tpu_stream_enqueue(b, &look));
  CHECK_OK(tpu_stream_synchronize(b));
  CHECK(late.seen == 1);
  CHECK(tpu_event_query(e));
  tpu_event_destroy(e);
  tpu_event_destroy(never);
  tpu_stream_destroy(a);
  tpu_stream_destroy(b);
}

TEST(event_destroy_waits_and_waiters_survive_it) {
  tpu_stream_t *a = make_stream("tpu:0"), *b = make_stream("tpu:1");
  tpu_event_t *e = make_event();
  if (!a || !b || !e) return;
  atomic_int flag = 0, after = 0;
  tpu_task_t slow = {slow_set_flag_run, NULL, &flag, "producer"};
  CHECK_OK(tpu_stream_enqueue(a, &slow));
  CHECK_OK(tpu_event_record(e, a));
  CHECK_OK(tpu_stream_wait_event(b, e));
  tpu_task_t mark = {set_flag_run, NULL, &after, "consumer"};
  CHECK_OK(tpu_stream_enqueue(b, &mark));
  tpu_event_destroy(e); /* waits for the record, so the producer has run */
  CHECK(atomic_load(&flag) == 1);
  CHECK_OK(tpu_stream_synchronize(b));
  CHECK(atomic_load(&after) == 1);
  tpu_stream_destroy(a);
  tpu_stream_destroy(b);
}

/* A task whose kernel shares two chunks with the pool's helpers; each chunk notes its
 * thread and waits (bounded) for the other, so both run at once only if a helper came. */
typedef struct {
  tpu_pool_t *pool;
  pthread_t waiter;
  atomic_int entered, by_waiter;
} shared_job;

static void shared_chunk(void *arg, int64_t begin, int64_t end) {
  shared_job *j = arg;
  (void)begin, (void)end;
  if (pthread_equal(pthread_self(), j->waiter)) atomic_fetch_add(&j->by_waiter, 1);
  atomic_fetch_add(&j->entered, 1);
  for (long spin = 0; spin < 100 * 1000 * 1000L && atomic_load(&j->entered) < 2; spin++) {
  }
}

static tpu_status_t shared_task(void *arg) {
  shared_job *j = arg;
  /* wait (up to 2 s) for the synchronizing thread; sleeping, so that it gets a core */
  for (int i = 0; i < 100000 && tpu_pool_helpers(j->pool) == 0; i++) {
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
  tpu_pool_parallel_for_helpers(j->pool, 2, 1, shared_chunk, j);
  return TPU_OK;
}

TEST(synchronize_helps_the_pool) {
  tpu_pool_t *pool;
  CHECK_OK(tpu_pool_create(1, tpu_allocator_system(), &pool)); /* no workers of its own */
  tpu_stream_t *s = make_stream("helped");
  tpu_stream_set_helper_pool(s, pool);
  /* A waiter that spins longer than the helper's idle time without work sleeps until the
   * next task finishes, then spins again: a first task that finishes while the second
   * waits for a helper brings the waiter back even on a loaded machine. */
  for (int round = 0; round < 3; round++) {
    atomic_int flag = 0;
    shared_job j = {pool, pthread_self(), 0, 0};
    tpu_task_t first = {set_flag_run, NULL, &flag, "first"};
    tpu_task_t t = {shared_task, NULL, &j, "shared"};
    CHECK_OK(tpu_stream_enqueue(s, &first));
    CHECK_OK(tpu_stream_enqueue(s, &t));
    CHECK_OK(tpu_stream_synchronize(s));
    CHECK(atomic_load(&flag) == 1);
    CHECK(atomic_load(&j.entered) == 2);
    CHECK(atomic_load(&j.by_waiter) == 1); /* the waiting thread ran one chunk */
  }
  CHECK(tpu_pool_helpers(pool) == 0);
  tpu_stream_destroy(s);
  tpu_pool_destroy(pool);
}

static int most_spinning_now(void) {
  int most = 0;
  for (int k = 0; k < 100; k++) {
    int n = tpu_stream_spinning_workers();
    if (n > most) most = n;
  }
  return most;
}

static void run_one(tpu_stream_t *s) {
  atomic_int runs = 0;
  tpu_task_t t = {count_run, NULL, &runs, "count"};
  CHECK_OK(tpu_stream_enqueue(s, &t));
  CHECK_OK(tpu_stream_synchronize(s));
  CHECK(atomic_load(&runs) == 1);
}

/* An idle worker allowed to spin does so for a while after its node, then sleeps; one not
 * allowed (the default) never spins. */
TEST(only_workers_allowed_to_spin_do) {
  enum { kStreams = 4 };
  tpu_stream_t *s[kStreams];
  for (int i = 0; i < kStreams; i++) s[i] = make_stream("tpu:spin");
  CHECK(!tpu_stream_idle_spin(s[0]));
  tpu_stream_set_idle_spin(s[0], true);
  CHECK(tpu_stream_idle_spin(s[0]));
  int most = 0;
  for (int round = 0; round < 50; round++) {
    for (int i = 1; i < kStreams; i++) run_one(s[i]); /* to sleeping workers */
    run_one(s[0]); /* to a worker spinning since the last round, or asleep if that was long */
    run_one(s[0]); /* after a short spell: it spins now */
    int n = most_spinning_now();
    if (n > most) most = n;
  }
  CHECK(most == 1);
  sleep_ms(50); /* far longer than a spin */
  CHECK(tpu_stream_spinning_workers() == 0);
  for (int i = 0; i < kStreams; i++) tpu_stream_destroy(s[i]);
}

/* After two idle spells longer than a spin (graphs queued ahead, idle only between steps)
 * the worker sleeps at once; after a short spell it spins again. */
TEST(worker_stops_spinning_after_long_idle_spells) {
  tpu_stream_t *s = make_stream("tpu:spin");
  tpu_stream_set_idle_spin(s, true);
  run_one(s);
  for (int i = 0; i < 3; i++) {
    sleep_ms(5);
    run_one(s);
  }
  CHECK(most_spinning_now() == 0);
  bool spins_again = false; /* a push right after the sync: a short spell (a few tries,
                               since a wake-up on a loaded machine can outlast a spin) */
  for (int i = 0; i < 20 && !spins_again; i++) {
    run_one(s);
    run_one(s);
    spins_again = most_spinning_now() >= 1;
  }
  CHECK(spins_again);
  tpu_stream_destroy(s);
}

/* The spin outlasts the gap between two synchronized compiled steps (250-500 us of Python
 * from a GPT step's last graph to its next forward), so the next forward needs no
 * wake-up. (Its length, not a timing: on a loaded machine a spinning worker is preempted
 * and seems to spin for milliseconds.) */
TEST(worker_spins_across_the_gap_between_steps) {
  CHECK(tpu_stream_idle_spin_ns() >= 600 * 1000);
  CHECK(tpu_stream_idle_spin_ns() <= 2000 * 1000); /* a bounded waste when nothing comes */
}

TEST(worker_is_named) { /* tpu_stream: its CPU time is the chip's kernels (bench_modes) */
  int before = threads_named("tpu_stream");
  CHECK(before >= 0);
  tpu_stream_t *s = make_stream("tpu:0");
  if (!s) return;
  static log_t log;
  log.count = 0;
  CHECK_OK(enqueue_append(s, &log, 1)); /* the worker has started once a task has run */
  CHECK_OK(tpu_stream_synchronize(s));
  CHECK(threads_named("tpu_stream") == before + 1);
  tpu_stream_destroy(s);
  CHECK(threads_named("tpu_stream") == before);
}

int main(void) {
  RUN(tasks_run_in_fifo_order);
  RUN(enqueue_returns_before_the_task_runs);
  RUN(errors_surface_at_synchronize_and_are_cleared);
  RUN(invalid_task_is_rejected);
  RUN(destroy_drains_the_queue);
  RUN(enqueue_from_two_threads);
  RUN(event_query_synchronize_and_rerecord);
  RUN(event_elapsed_time);
  RUN(wait_event_orders_two_streams);
  RUN(event_destroy_waits_and_waiters_survive_it);
  RUN(synchronize_helps_the_pool);
  RUN(only_workers_allowed_to_spin_do);
  RUN(worker_stops_spinning_after_long_idle_spells);
  RUN(worker_spins_across_the_gap_between_steps);
  RUN(worker_is_named);
  return check_report();
}

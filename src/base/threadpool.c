/* threadpool.c: the kernels' worker threads (see include/tpu/threadpool.h).
 *
 * One job at a time: the caller publishes {fn, ctx, n, chunk} under the pool mutex, wakes
 * the workers, and everyone (caller included) claims chunks with an atomic counter until
 * none are left. The caller returns when every chunk has finished and no worker is inside
 * the job, and closes the job under the mutex: a worker that wakes only after that skips
 * it, so a straggler never claims chunks while the next job's fields are being written.
 *
 * Helpers: a thread that would otherwise sleep (one waiting for a stream) spins in
 * tpu_pool_help and joins jobs as they are published, the same way a woken worker does.
 * parallel_for_helpers publishes a job without waking anyone, for work too short to pay
 * for a wake-up (tens of microseconds on a VM), and its caller spins for the helpers'
 * last chunks instead of sleeping. A helper that finds itself on the CPU a job was
 * published from (it could only steal the caller's time) moves to another CPU until it
 * returns, or leaves if it cannot, unless the pool keeps its helpers in place.
 * generation, closed, chunks_done and active are written under the mutex and read
 * without it by spinning threads.
 */
#include "tpu/threadpool.h"

#include "base/spin.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct tpu_pool {
  tpu_allocator_t host;
  int num_threads;               /* including the caller */
  pthread_t *workers;            /* num_threads - 1 */
  pthread_mutex_t job_mutex;     /* one job at a time */
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  _Atomic uint64_t generation;   /* bumped per job, under mu */
  _Atomic uint64_t closed;       /* the last job whose caller returned, under mu */
  atomic_int helpers;            /* threads inside tpu_pool_help */
  atomic_int poster_cpu;         /* the CPU the current job's caller published it from */
  bool helpers_in_place;         /* helpers never move off poster_cpu */
  bool stop;
  /* the current job */
  tpu_range_fn fn;
  void *ctx;
  int64_t n, chunk, num_chunks;
  atomic_int_fast64_t next_chunk;
  _Atomic int64_t chunks_done;   /* written under mu */
  atomic_int active;             /* workers and helpers inside the job, written under mu */
};

static _Thread_local bool t_in_job;

static void run_chunks(tpu_pool_t *p) {
  int64_t finished = 0;
  for (;;) {
    int64_t c = atomic_fetch_add(&p->next_chunk, 1);
    if (c >= p->num_chunks) break;
    int64_t begin = c * p->chunk;
    int64_t end = begin + p->chunk < p->n ? begin + p->chunk : p->n;
    p->fn(p->ctx, begin, end);
    finished++;
  }
  if (finished) {
    pthread_mutex_lock(&p->mu);
    p->chunks_done += finished;
    if (p->chunks_done == p->num_chunks) pthread_cond_broadcast(&p->done);
    pthread_mutex_unlock(&p->mu);
  }
}

/* Runs chunks of job |gen| if it is still open; called and returns with p->mu held. */
static void join_job(tpu_pool_t *p, uint64_t gen) {
  if (p->generation != gen || p->closed == gen) return; /* over: nothing left to claim */
  p->active++;
  pthread_mutex_unlock(&p->mu);
  run_chunks(p);
  pthread_mutex_lock(&p->mu);
  if (--p->active == 0) pthread_cond_broadcast(&p->done);
}

static void *worker_main(void *arg) {
  tpu_pool_t *p = arg;
  uint64_t seen = 0;
  pthread_setname_np(pthread_self(), "tpu_pool"); /* top -H, perf, /proc/<pid>/task/<tid>/comm */
  t_in_job = true; /* kernels called from a chunk run their own loops inline */
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
    if (p->stop) break;
    seen = p->generation;
    join_job(p, seen);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

tpu_status_t tpu_pool_create(int num_threads, tpu_allocator_t host, tpu_pool_t **out_pool) {
  if (num_threads < 1 || num_threads > 1024) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "pool_create: %d threads (1..1024)",
                          num_threads);
  }
  tpu_pool_t *p;
  TPU_RETURN_IF_ERROR(tpu_allocator_calloc(host, 1, sizeof *p, "pool_create", (void **)&p));
  p->host = host;
  p->num_threads = 1;
  atomic_init(&p->poster_cpu, -1);
  pthread_mutex_init(&p->job_mutex, NULL);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  if (num_threads > 1) {
    tpu_status_t st = tpu_allocator_calloc(host, (size_t)num_threads - 1, sizeof(pthread_t),
                                           "pool_create", (void **)&p->workers);
    if (st != TPU_OK) {
      tpu_pool_destroy(p);
      return st;
    }
    for (int i = 0; i < num_threads - 1; i++) {
      if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0) {
        tpu_pool_destroy(p);
        return tpu_status_set(TPU_ERR_UNAVAILABLE, "pool_create: cannot start thread %d", i);
      }
      p->num_threads++;
    }
  }
  *out_pool = p;
  return TPU_OK;
}

void tpu_pool_destroy(tpu_pool_t *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->num_threads - 1; i++) pthread_join(p->workers[i], NULL);
  tpu_allocator_free(p->host, p->workers);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->job_mutex);
  tpu_allocator_free(p->host, p);
}

int tpu_pool_num_threads(const tpu_pool_t *p) { return p ? p->num_threads : 1; }

static tpu_pool_t *g_default_pool;
static tpu_status_t g_default_status = TPU_OK;
static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;

static void create_default_pool(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int n = cores > 0 ? (int)cores : 1;
  const char *env = getenv("TORCHTPU_NUM_THREADS");
  if (env && *env) {
    char *end;
    long v = strtol(env, &end, 10);
    if (*end == '\0' && v >= 1 && v <= 1024) n = (int)v;
  }
  g_default_status = tpu_pool_create(n, tpu_allocator_system(), &g_default_pool);
}

tpu_status_t tpu_pool_default(tpu_pool_t **out_pool) {
  pthread_once(&g_default_once, create_default_pool);
  if (g_default_status != TPU_OK) {
    return tpu_status_set(g_default_status, "pool_default: cannot start the kernel threads");
  }
  *out_pool = g_default_pool;
  return TPU_OK;
}

static bool job_finished(tpu_pool_t *p) {
  return atomic_load(&p->chunks_done) == p->num_chunks && atomic_load(&p->active) == 0;
}

/* How long a caller spins for helpers' last chunks before sleeping. */
static const uint64_t kCallerSpinNs = 200 * 1000;

/* Publishes a job of |threads| participants' worth of chunks, takes part, and returns when
 * it is over. The caller holds job_mutex. |wake|: wake the sleeping workers (else only
 * helpers already spinning join, and the caller spins for their last chunks). */
static void run_job(tpu_pool_t *p, int64_t n, int64_t grain, tpu_range_fn fn, void *ctx,
                    int threads, bool wake) {
  /* chunks: at least |grain| items, about 4 per thread for balance */
  int64_t chunk = (n + 4 * (int64_t)threads - 1) / (4 * (int64_t)threads);
  if (chunk < grain) chunk = grain;
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->ctx = ctx;
  p->n = n;
  p->chunk = chunk;
  p->num_chunks = (n + chunk - 1) / chunk;
  p->chunks_done = 0;
  atomic_store(&p->next_chunk, 0);
  atomic_store(&p->poster_cpu, sched_getcpu());
  p->generation++;
  if (wake) pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);

  t_in_job = true;
  run_chunks(p);
  t_in_job = false;

  if (!wake) {
    uint64_t t0 = tpu_now_ns();
    for (unsigned spin = 1; !job_finished(p); spin++) {
      if (spin % 64 == 0 && tpu_now_ns() - t0 > kCallerSpinNs) break;
      tpu_cpu_relax();
    }
  }
  pthread_mutex_lock(&p->mu);
  while (p->chunks_done < p->num_chunks || p->active > 0) pthread_cond_wait(&p->done, &p->mu);
  p->closed = p->generation;
  pthread_mutex_unlock(&p->mu);
}

void tpu_pool_parallel_for(tpu_pool_t *p, int64_t n, int64_t grain, tpu_range_fn fn,
                           void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (!p || p->num_threads == 1 || t_in_job || n <= grain) {
    fn(ctx, 0, n);
    return;
  }
  pthread_mutex_lock(&p->job_mutex);
  run_job(p, n, grain, fn, ctx, p->num_threads + atomic_load(&p->helpers), true);
  pthread_mutex_unlock(&p->job_mutex);
}

void tpu_pool_keep_helpers_in_place(tpu_pool_t *p) {
  if (p) p->helpers_in_place = true;
}

bool tpu_pool_swap_in_job(bool in_job) {
  bool was = t_in_job;
  t_in_job = in_job;
  return was;
}

int tpu_pool_helpers(tpu_pool_t *p) { return p ? atomic_load(&p->helpers) : 0; }

/* The job shared with the helpers spinning in |p|, and, when |joinable|, with those that
 * start to while it runs (else inline when none spins). Inline also from inside a chunk or
 * when another caller's job is running: this one is short, run it rather than queue. */
static void with_helpers(tpu_pool_t *p, int64_t n, int64_t grain, tpu_range_fn fn, void *ctx,
                         bool joinable) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int helpers = tpu_pool_helpers(p);
  if (!p || (helpers == 0 && !joinable) || t_in_job || n <= grain ||
      pthread_mutex_trylock(&p->job_mutex) != 0) {
    fn(ctx, 0, n);
    return;
  }
  run_job(p, n, grain, fn, ctx, 1 + helpers, false);
  pthread_mutex_unlock(&p->job_mutex);
}

void tpu_pool_parallel_for_helpers(tpu_pool_t *p, int64_t n, int64_t grain, tpu_range_fn fn,
                                   void *ctx) {
  with_helpers(p, n, grain, fn, ctx, false);
}

void tpu_pool_parallel_for_joinable(tpu_pool_t *p, int64_t n, int64_t grain, tpu_range_fn fn,
                                    void *ctx) {
  with_helpers(p, n, grain, fn, ctx, true);
}

/* Takes the calling thread off |cpu| (its affinity minus that CPU), saving the affinity it
 * had in |saved|; false if it cannot (no other CPU allowed). */
static bool move_off(int cpu, cpu_set_t *saved) {
  if (sched_getaffinity(0, sizeof *saved, saved) != 0) return false;
  cpu_set_t others = *saved;
  CPU_CLR(cpu, &others);
  return CPU_COUNT(&others) > 0 && sched_setaffinity(0, sizeof others, &others) == 0;
}

/* A helper on the CPU the last job was published from could only steal the poster's time
 * (the scheduler does not always separate them: a thread that wakes from a nap tends to
 * go back to its last CPU): moves it to another CPU once per tpu_pool_help call (|moved|,
 * the affinity to restore in |saved|). False: it must leave instead. */
static bool off_poster_cpu(tpu_pool_t *p, bool *moved, cpu_set_t *saved) {
  if (p->helpers_in_place) return true;
  int cpu = sched_getcpu();
  if (cpu < 0 || atomic_load(&p->poster_cpu) != cpu) return true;
  if (*moved || !move_off(cpu, saved)) return false;
  *moved = true;
  return true;
}

bool tpu_pool_help(tpu_pool_t *p, bool (*done)(void *arg), void *arg, uint64_t idle_ns,
                   int64_t *jobs_joined) {
  int64_t joined = 0;
  if (jobs_joined) *jobs_joined = 0;
  if (!p || t_in_job) return done(arg);
  atomic_fetch_add(&p->helpers, 1);
  uint64_t seen = atomic_load(&p->generation);
  if (atomic_load(&p->closed) != seen) seen--; /* a job is open: join it below */
  uint64_t idle_since = tpu_now_ns();
  bool finished = false, moved = false;
  cpu_set_t mask; /* the affinity to restore when moved */
  for (unsigned spin = 1;; spin++) {
    uint64_t gen = atomic_load(&p->generation);
    if (gen != seen) {
      seen = gen;
      if (!off_poster_cpu(p, &moved, &mask)) break;
      t_in_job = true;
      pthread_mutex_lock(&p->mu);
      join_job(p, gen);
      pthread_mutex_unlock(&p->mu);
      t_in_job = false;
      joined++;
      idle_since = tpu_now_ns();
      continue;
    }
    if (spin % 16 == 0) {
      if (done(arg)) {
        finished = true;
        break;
      }
      if (!off_poster_cpu(p, &moved, &mask) || tpu_now_ns() - idle_since > idle_ns) break;
    }
    tpu_cpu_relax();
  }
  atomic_fetch_sub(&p->helpers, 1);
  if (moved) sched_setaffinity(0, sizeof mask, &mask);
  if (jobs_joined) *jobs_joined = joined;
  return finished;
}

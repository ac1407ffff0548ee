/* test_shm_group.c: collectives between forked processes through tpu_shm_group: results
 * against values computed in the test (with slots small enough to force many rounds),
 * mismatch errors on every rank, a rank dead before or during a collective and a stalled rank
 * named within the timeout. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "tpu/shm_group.h"

typedef int (*body_fn)(tpu_shm_group_t *g, int rank);

/* Runs body on |world| ranks: rank 0 here, the others in forked children. Returns the
 * number of ranks whose body failed (nonzero). */
static int run_group(int world, const tpu_shm_group_options_t *opts, body_fn body) {
  tpu_shm_group_t *g = NULL;
  int fd = -1;
  if (tpu_shm_group_create(world, opts, &g, &fd) != TPU_OK) {
    fprintf(stderr, "  create: %s\n", tpu_status_message());
    return world;
  }
  pid_t kids[TPU_SHM_MAX_RANKS];
  int parent = (int)getpid();
  for (int r = 1; r < world; r++) {
    kids[r] = fork();
    if (kids[r] == 0) {
      tpu_shm_group_close(g); /* the child's copy of rank 0's mapping */
      tpu_shm_group_t *mine = NULL;
      int rc = 1;
      if (tpu_shm_group_attach(parent, fd, r, world, opts, &mine) == TPU_OK &&
          tpu_shm_group_seal(mine) == TPU_OK)
        rc = body(mine, r);
      else
        fprintf(stderr, "  rank %d attach: %s\n", r, tpu_status_message());
      tpu_shm_group_close(mine);
      _exit(rc);
    }
  }
  int failed = 0;
  if (tpu_shm_group_seal(g) != TPU_OK || body(g, 0) != 0) failed++;
  tpu_shm_group_close(g);
  for (int r = 1; r < world; r++) {
    int status = 0;
    waitpid(kids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
  }
  return failed;
}

#define EXPECT(cond)                                                                    \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      fprintf(stderr, "  rank %d: %s:%d: %s (%s)\n", rank, __FILE__, __LINE__, #cond,   \
              tpu_status_message());                                                    \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

static int collectives_body(tpu_shm_group_t *g, int rank) {
  const int w = tpu_shm_group_world(g);
  /* all_reduce sum, 1000 f32 over 256-byte slots; exact since values are small integers. */
  float x[1000], y[1000];
  for (int i = 0; i < 1000; i++) x[i] = (float)(rank * 1000 + i);
  EXPECT(tpu_shm_all_reduce(g, x, y, 1000, TPU_F32, TPU_RED_SUM) == TPU_OK);
  for (int i = 0; i < 1000; i++) EXPECT(y[i] == (float)(w * i + 1000 * (w * (w - 1) / 2)));
  /* in place, max over int64 and avg over f32 */
  int64_t m[50];
  for (int i = 0; i < 50; i++) m[i] = (i % w == rank) ? 100 + i : -i;
  EXPECT(tpu_shm_all_reduce(g, m, m, 50, TPU_I64, TPU_RED_MAX) == TPU_OK);
  for (int i = 0; i < 50; i++) EXPECT(m[i] == 100 + i);
  for (int i = 0; i < 1000; i++) x[i] = (float)rank;
  EXPECT(tpu_shm_all_reduce(g, x, x, 1000, TPU_F32, TPU_RED_AVG) == TPU_OK);
  EXPECT(x[999] == (float)(w - 1) / 2.0f);
  /* broadcast of 5000 bytes from the last rank */
  unsigned char b[5000];
  for (int i = 0; i < 5000; i++) b[i] = (unsigned char)(rank == w - 1 ? i * 7 : 0);
  EXPECT(tpu_shm_broadcast(g, b, sizeof(b), w - 1) == TPU_OK);
  for (int i = 0; i < 5000; i++) EXPECT(b[i] == (unsigned char)(i * 7));
  /* all_gather of 777 bytes per rank */
  unsigned char in[777], out[777 * 4];
  for (int i = 0; i < 777; i++) in[i] = (unsigned char)(rank + i);
  EXPECT(tpu_shm_all_gather(g, in, out, sizeof(in)) == TPU_OK);
  for (int q = 0; q < w; q++)
    for (int i = 0; i < 777; i++) EXPECT(out[q * 777 + i] == (unsigned char)(q + i));
  /* reduce_scatter: 300 f32 per rank */
  float rs_in[300 * 4], rs_out[300];
  for (int i = 0; i < 300 * w; i++) rs_in[i] = (float)(i + rank);
  EXPECT(tpu_shm_reduce_scatter(g, rs_in, rs_out, 300, TPU_F32, TPU_RED_SUM) == TPU_OK);
  for (int i = 0; i < 300; i++)
    EXPECT(rs_out[i] == (float)(w * (rank * 300 + i) + w * (w - 1) / 2));
  /* all_to_all with uneven sizes: rank r sends (r+1)*(p+1)*10 bytes of value 16r+p to p */
  size_t sb[4], so[4], rb[4], ro[4], stot = 0, rtot = 0;
  for (int p = 0; p < w; p++) {
    sb[p] = (size_t)(rank + 1) * (size_t)(p + 1) * 10;
    so[p] = stot;
    stot += sb[p];
    rb[p] = (size_t)(p + 1) * (size_t)(rank + 1) * 10;
    ro[p] = rtot;
    rtot += rb[p];
  }
  unsigned char a_in[400], a_out[400];
  for (int p = 0; p < w; p++) memset(a_in + so[p], 16 * rank + p, sb[p]);
  EXPECT(tpu_shm_all_to_all(g, a_in, sb, so, a_out, rb, ro) == TPU_OK);
  for (int p = 0; p < w; p++)
    for (size_t i = 0; i < rb[p]; i++) EXPECT(a_out[ro[p] + i] == 16 * p + rank);
  /* send/recv in several chunks: 0 -> 1, then 1 -> 0 */
  int32_t msg[300];
  if (rank == 0) {
    for (int i = 0; i < 300; i++) msg[i] = i * 3;
    EXPECT(tpu_shm_send(g, msg, sizeof(msg), 1, 7) == TPU_OK);
    EXPECT(tpu_shm_recv(g, msg, 40, 1, 8) == TPU_OK);
    EXPECT(msg[9] == -9);
  } else if (rank == 1) {
    EXPECT(tpu_shm_recv(g, msg, sizeof(msg), 0, 7) == TPU_OK);
    for (int i = 0; i < 300; i++) EXPECT(msg[i] == i * 3);
    for (int i = 0; i < 10; i++) msg[i] = -i;
    EXPECT(tpu_shm_send(g, msg, 40, 0, 8) == TPU_OK);
  }
  EXPECT(tpu_shm_barrier(g) == TPU_OK);
  return 0;
}

TEST(collectives_on_three_and_four_ranks) {
  tpu_shm_group_options_t o = {.slot_bytes = 256, .p2p_bytes = 64, .timeout_s = 20};
  CHECK(run_group(3, &o, collectives_body) == 0);
  CHECK(run_group(4, &o, collectives_body) == 0);
  tpu_shm_group_options_t big = {0};
  CHECK(run_group(2, &big, collectives_body) == 0);
}

static int size_mismatch_body(tpu_shm_group_t *g, int rank) {
  float x[16] = {0};
  tpu_shm_group_set_next_label(g, rank ? "float32[12]" : "float32[16]");
  EXPECT(tpu_shm_all_reduce(g, x, x, rank ? 12 : 16, TPU_F32, TPU_RED_SUM) ==
         TPU_ERR_INVALID_ARGUMENT);
  const char *m = tpu_status_message();
  EXPECT(strstr(m, "size mismatch") && strstr(m, "rank 0 has float32[16]") &&
         strstr(m, "rank 1 has float32[12]"));
  EXPECT(tpu_shm_barrier(g) == TPU_ERR_UNAVAILABLE);
  EXPECT(strstr(tpu_status_message(), "unusable after an earlier error"));
  return 0;
}

static int kind_mismatch_body(tpu_shm_group_t *g, int rank) {
  float x[4] = {0};
  tpu_status_t st = rank ? tpu_shm_broadcast(g, x, sizeof(x), 0)
                         : tpu_shm_all_reduce(g, x, x, 4, TPU_F32, TPU_RED_SUM);
  EXPECT(st == TPU_ERR_INVALID_ARGUMENT);
  EXPECT(strstr(tpu_status_message(), "rank 0 called all_reduce (#1) while rank 1 called broadcast"));
  return 0;
}

static int split_mismatch_body(tpu_shm_group_t *g, int rank) {
  size_t sb[2] = {8, 8}, so[2] = {0, 8}, rb[2] = {8, rank ? 8 : 4}, ro[2] = {0, 8};
  char in[16] = {0}, out[16];
  EXPECT(tpu_shm_all_to_all(g, in, sb, so, out, rb, ro) == TPU_ERR_INVALID_ARGUMENT);
  EXPECT(strstr(tpu_status_message(), "rank 1 sends 8 bytes to rank 0, which expects 4"));
  return 0;
}

TEST(mismatches_fail_on_every_rank) {
  tpu_shm_group_options_t o = {.timeout_s = 20};
  CHECK(run_group(2, &o, size_mismatch_body) == 0);
  CHECK(run_group(2, &o, kind_mismatch_body) == 0);
  CHECK(run_group(2, &o, split_mismatch_body) == 0);
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int dead_rank_body(tpu_shm_group_t *g, int rank) {
  if (rank == 2) return 0; /* exits without joining the collective (a zombie until reaped) */
  float x[8] = {0};
  double t0 = seconds();
  EXPECT(tpu_shm_all_reduce(g, x, x, 8, TPU_F32, TPU_RED_SUM) == TPU_ERR_UNAVAILABLE);
  EXPECT(strstr(tpu_status_message(), "rank 2 (pid") && strstr(tpu_status_message(), "exited"));
  EXPECT(seconds() - t0 < 5.0); /* well before the 30 s timeout */
  return 0;
}

typedef struct big_job {
  tpu_shm_group_t *g;
  float *x; /* (1 << 20) f32: 16384 rounds of 256-byte slots, 2 barriers each */
} big_job_t;

static void *big_all_reduce(void *arg) {
  big_job_t *job = arg;
  (void)tpu_shm_all_reduce(job->g, job->x, job->x, (size_t)1 << 20, TPU_F32, TPU_RED_SUM);
  return NULL;
}

/* Rank 2 dies inside a long all_reduce, after passing some of its barriers: the others must
 * name it well before the timeout, whichever barrier it stopped at. */
static int dies_mid_collective_body(tpu_shm_group_t *g, int rank) {
  big_job_t job = {g, calloc((size_t)1 << 20, sizeof(float))};
  EXPECT(job.x != NULL);
  if (rank == 2) {
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, big_all_reduce, &job) == 0);
    usleep(50 * 1000);
    _exit(0); /* a clean exit status: only the peers can tell that the rank died */
  }
  double t0 = seconds();
  EXPECT(tpu_shm_all_reduce(g, job.x, job.x, (size_t)1 << 20, TPU_F32, TPU_RED_SUM) ==
         TPU_ERR_UNAVAILABLE);
  /* Either this rank saw rank 2 die, or it shows the message of the peer that did. */
  const char *m = tpu_status_message();
  EXPECT(strstr(m, "rank 2 (pid") && strstr(m, "exited") && strstr(m, "in all_reduce #1"));
  EXPECT(seconds() - t0 < 5.0); /* well before the 30 s timeout */
  free(job.x);
  return 0;
}

static int stalled_rank_body(tpu_shm_group_t *g, int rank) {
  float x[8] = {0};
  if (rank == 1) {
    usleep(1500 * 1000);
    EXPECT(tpu_shm_all_reduce(g, x, x, 8, TPU_F32, TPU_RED_SUM) == TPU_ERR_UNAVAILABLE);
    EXPECT(strstr(tpu_status_message(), "rank 0 failed"));
    return 0;
  }
  double t0 = seconds();
  EXPECT(tpu_shm_all_reduce(g, x, x, 8, TPU_F32, TPU_RED_SUM) == TPU_ERR_UNAVAILABLE);
  double dt = seconds() - t0;
  EXPECT(strstr(tpu_status_message(), "timed out after 0.3 s in all_reduce #1 on rank 0 waiting "
                                      "for rank(s) 1"));
  EXPECT(dt >= 0.3 && dt < 1.3);
  return 0;
}

static int p2p_mismatch_body(tpu_shm_group_t *g, int rank) {
  char buf[32] = {0};
  if (rank == 0) {
    EXPECT(tpu_shm_send(g, buf, 32, 1, 3) == TPU_OK);
    return 0;
  }
  EXPECT(tpu_shm_recv(g, buf, 16, 0, 3) == TPU_ERR_INVALID_ARGUMENT);
  EXPECT(strstr(tpu_status_message(), "rank 1 expected 16 bytes with tag 3 from rank 0, which "
                                      "sent 32 bytes"));
  return 0;
}

TEST(faults_name_the_missing_rank) {
  tpu_shm_group_options_t slow = {.timeout_s = 30};
  CHECK(run_group(3, &slow, dead_rank_body) == 0);
  tpu_shm_group_options_t small = {.slot_bytes = 256, .timeout_s = 30};
  CHECK(run_group(3, &small, dies_mid_collective_body) == 0);
  tpu_shm_group_options_t fast = {.timeout_s = 0.3};
  CHECK(run_group(2, &fast, stalled_rank_body) == 0);
  CHECK(run_group(2, &slow, p2p_mismatch_body) == 0);
}

TEST(bad_arguments) {
  tpu_shm_group_t *g = NULL;
  int fd;
  CHECK(tpu_shm_group_create(0, NULL, &g, &fd) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_shm_group_attach(1, 999, 5, 2, NULL, &g) == TPU_ERR_OUT_OF_RANGE);
  CHECK(tpu_shm_group_attach(getpid(), 999, 1, 2, NULL, &g) == TPU_ERR_UNAVAILABLE);
  CHECK_CONTAINS(tpu_status_message(), "TORCHTPU_DIST_TRANSPORT=gloo");
  CHECK(g == NULL);
}

int main(void) {
  RUN(collectives_on_three_and_four_ranks);
  RUN(mismatches_fail_on_every_rank);
  RUN(faults_name_the_missing_rank);
  RUN(bad_arguments);
  return check_report();
}

/* kernels_elementwise.c: times the elementwise kernels alone (no PyTorch, no runtime) on
 * 16M-element f32 tensors (64 MiB) with 1 and 2 threads, prints GB/s (bytes read + written,
 * best of the repetitions) and, when .venv/bin/python has torch, PyTorch CPU's GB/s for
 * the same work in the same run and the ratio ours / PyTorch. Ours and PyTorch's rows
 * alternate over several rounds and each keeps its best, so a busy machine hurts both alike.
 *
 * Build and run from the repo root (after `make lib`):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc bench/kernels_elementwise.c \
 *      build/release/libtpu.a -pthread -lm -o build/kernels_elementwise && build/kernels_elementwise
 * TORCHTPU_ISA=portable|avx2|avx512 picks the SIMD code. PyTorch is timed with out= into a
 * preallocated tensor (its best case: no allocation), torch.set_num_threads(1 or 2), without
 * loading the torchtpu extension (TORCH_DEVICE_BACKEND_AUTOLOAD=0); the script is written
 * to build/kernels_elementwise_torch.py.
 *
 * Rows: add (a + b), mul by a scalar, exp, tanh, erf, sigmoid (LOGISTIC), f32->bf16 and
 * bf16->f32 converts, bf16 add, and gelu: ours is the unfused chain PyTorch's erf gelu
 * decomposes into (x * 1/sqrt2, erf, + 1, * x, * 0.5: five kernel passes), PyTorch's is its
 * fused gelu kernel; both are counted as one read and one write of the tensor. "gelu fused"
 * runs the same five ops as one tpu_kernel_ew_program (src/vtpu/kernels/ew_program.h):
 * block by block in L1, one read and one write of memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench_util.h"
#include "tpu/kernels.h"
#include "vtpu/kernels/ew_program.h"

#define N (16 * 1024 * 1024)
#define REPS 5   /* timed runs per row per round (after one warm-up) */
#define ROUNDS 5 /* rounds alternate ours and PyTorch's; each row keeps its best */

static const int64_t kN[1] = {N}, kBroadcast[1] = {0};

static tpu_buf_t vec(void *data, tpu_dtype_t dt) { return bench_buf(data, dt, 1, kN, NULL); }

static tpu_buf_t scalar(void *data, tpu_dtype_t dt) {
  return bench_buf(data, dt, 1, kN, kBroadcast);
}

enum { ADD, MULS, EXP, TANH, ERF, SIGMOID, TO_BF16, FROM_BF16, ADD_BF16, GELU, GELU_FUSED, NROWS };
static const char *const kNames[NROWS] = {"add", "mul scalar", "exp", "tanh", "erf", "sigmoid",
                                          "f32->bf16", "bf16->f32", "add bf16", "gelu",
                                          "gelu fused"};
static const double kBytes[NROWS] = {12, 8, 8, 8, 8, 8, 6, 6, 6, 8, 8}; /* per element */

typedef struct bufs {
  float *a, *b, *o;
  uint16_t *ha, *hb, *ho;
  float half, inv_sqrt2, one;
  tpu_pool_t *pool; /* the threads of the pass being timed */
} bufs;

/* gelu as one fused program (src/vtpu/kernels/ew_program.h). */
static const tpu_ew_program_t kGelu = {
    .num_inputs = 1, .num_consts = 3, .consts = {0.70710678f, 1.0f, 0.5f}, .num_instrs = 5,
    .instrs = {{TPU_OP_MUL, 4, 0, 1}, {TPU_OP_ERF, 4, 4, 0}, {TPU_OP_ADD, 4, 4, 2},
               {TPU_OP_MUL, 4, 4, 0}, {TPU_OP_MUL, 4, 4, 3}},
    .result = 4};

static tpu_status_t run(int row, void *ctx) {
  bufs *m = ctx;
  tpu_pool_t *pool = m->pool;
  tpu_buf_t a = vec(m->a, TPU_F32), b = vec(m->b, TPU_F32), o = vec(m->o, TPU_F32);
  tpu_buf_t ha = vec(m->ha, TPU_BF16), hb = vec(m->hb, TPU_BF16), ho = vec(m->ho, TPU_BF16);
  tpu_buf_t half = scalar(&m->half, TPU_F32), is2 = scalar(&m->inv_sqrt2, TPU_F32);
  tpu_buf_t one = scalar(&m->one, TPU_F32);
  switch (row) {
    case ADD: return tpu_kernel_binary(TPU_OP_ADD, &a, &b, &o, pool);
    case MULS: return tpu_kernel_binary(TPU_OP_MUL, &a, &half, &o, pool);
    case EXP: return tpu_kernel_unary(TPU_OP_EXP, &a, &o, pool);
    case TANH: return tpu_kernel_unary(TPU_OP_TANH, &a, &o, pool);
    case ERF: return tpu_kernel_unary(TPU_OP_ERF, &a, &o, pool);
    case SIGMOID: return tpu_kernel_unary(TPU_OP_LOGISTIC, &a, &o, pool);
    case TO_BF16: return tpu_kernel_unary(TPU_OP_CONVERT, &a, &ho, pool);
    case FROM_BF16: return tpu_kernel_unary(TPU_OP_CONVERT, &ha, &o, pool);
    case ADD_BF16: return tpu_kernel_binary(TPU_OP_ADD, &ha, &hb, &ho, pool);
    case GELU_FUSED: {
      const tpu_buf_t *ins[1] = {&a};
      return tpu_kernel_ew_program(&kGelu, ins, &o, pool);
    }
    default: /* gelu = x * 0.5 * (1 + erf(x / sqrt2)), unfused */
      TPU_RETURN_IF_ERROR(tpu_kernel_binary(TPU_OP_MUL, &a, &is2, &o, pool));
      TPU_RETURN_IF_ERROR(tpu_kernel_unary(TPU_OP_ERF, &o, &o, pool));
      TPU_RETURN_IF_ERROR(tpu_kernel_binary(TPU_OP_ADD, &o, &one, &o, pool));
      TPU_RETURN_IF_ERROR(tpu_kernel_binary(TPU_OP_MUL, &o, &a, &o, pool));
      return tpu_kernel_binary(TPU_OP_MUL, &o, &half, &o, pool);
  }
}

/* GB/s of one row on m->pool: the best of REPS runs after a warm-up (page faults); 0 on an
 * error. */
static double bench_row(int row, bufs *m) {
  double us = bench_case_us(run, row, m, kNames[row], REPS, 1);
  return us < 0 ? 0 : kBytes[row] * N / (us * 1e-6) / 1e9;
}

/* PyTorch's GB/s per row for 1 and 2 threads, from one python process. */
static const char *kTorchScript =
    "import torch,time\n"
    "N=16*2**20\n"
    "a=torch.randn(N);b=torch.randn(N);o=torch.empty(N)\n"
    "ha=a.bfloat16();hb=b.bfloat16();ho=torch.empty(N,dtype=torch.bfloat16)\n"
    "F=torch.nn.functional\n"
    "rows=[(lambda:torch.add(a,b,out=o),12),(lambda:torch.mul(a,0.5,out=o),8),\n"
    " (lambda:torch.exp(a,out=o),8),(lambda:torch.tanh(a,out=o),8),(lambda:torch.erf(a,out=o),8),\n"
    " (lambda:torch.sigmoid(a,out=o),8),(lambda:ho.copy_(a),6),(lambda:o.copy_(ha),6),\n"
    " (lambda:torch.add(ha,hb,out=ho),6),(lambda:torch._C._nn.gelu(a,out=o),8),\n"
    " (lambda:torch._C._nn.gelu(a,out=o),8)]\n"
    "for th in (1,2):\n"
    "  torch.set_num_threads(th)\n"
    "  for f,nb in rows:\n"
    "    f();ts=[]\n"
    "    for _ in range(5):\n"
    "      t=time.perf_counter();f();ts.append(time.perf_counter()-t)\n"
    "    print(nb*N/min(ts)/1e9)\n";

static int torch_gbps(double out[2][NROWS]) {
  if (access(".venv/bin/python", X_OK) != 0) return 0;
  FILE *f = fopen("build/kernels_elementwise_torch.py", "w");
  if (!f) return 0;
  fputs(kTorchScript, f);
  fclose(f);
  FILE *p = popen("TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python "
                  "build/kernels_elementwise_torch.py 2>/dev/null", "r");
  if (!p) return 0;
  int got = 0;
  for (int t = 0; t < 2; t++) {
    for (int r = 0; r < NROWS; r++) got += fscanf(p, "%lf", &out[t][r]) == 1;
  }
  pclose(p);
  return got == 2 * NROWS;
}

int main(void) {
  bufs m;
  m.a = malloc((size_t)N * 4);
  m.b = malloc((size_t)N * 4);
  m.o = malloc((size_t)N * 4);
  m.ha = malloc((size_t)N * 2);
  m.hb = malloc((size_t)N * 2);
  m.ho = malloc((size_t)N * 2);
  m.half = 0.5f;
  m.inv_sqrt2 = 0.70710678f;
  m.one = 1.0f;
  if (!m.a || !m.b || !m.o || !m.ha || !m.hb || !m.ho) return 1;
  srand(1);
  for (int i = 0; i < N; i++) {
    m.a[i] = (float)rand() / RAND_MAX * 6.0f - 3.0f;
    m.b[i] = (float)rand() / RAND_MAX * 6.0f - 3.0f;
    m.ha[i] = tpu_f32_to_bf16(m.a[i]);
    m.hb[i] = tpu_f32_to_bf16(m.b[i]);
  }
  double ours[2][NROWS] = {{0}}, torch[2][NROWS] = {{0}};
  int have_torch = 1;
  tpu_pool_t *pools[2];
  for (int t = 0; t < 2; t++) {
    if (tpu_pool_create(t + 1, tpu_allocator_system(), &pools[t]) != TPU_OK) return 1;
  }
  for (int round = 0; round < ROUNDS; round++) {
    for (int t = 0; t < 2; t++) {
      m.pool = pools[t];
      for (int r = 0; r < NROWS; r++) {
        double g = bench_row(r, &m);
        if (g > ours[t][r]) ours[t][r] = g;
      }
    }
    double tr[2][NROWS];
    if (have_torch && (have_torch = torch_gbps(tr))) {
      for (int t = 0; t < 2; t++) {
        for (int r = 0; r < NROWS; r++) {
          if (tr[t][r] > torch[t][r]) torch[t][r] = tr[t][r];
        }
      }
    }
  }
  for (int t = 0; t < 2; t++) tpu_pool_destroy(pools[t]);
  const tpu_cpu_features_t *f = tpu_cpu_features();
  printf("elementwise kernels, %d f32 elements (64 MiB), GB/s read+written, best of %d x %d; "
         "ISA %s\n",
         N, ROUNDS, REPS, f->avx512f ? "avx512" : f->avx2_fma ? "avx2" : "portable");
  printf("%-12s %9s %9s", "op", "1 thread", "2 threads");
  if (have_torch) printf(" %9s %9s %7s %7s", "torch 1t", "torch 2t", "ratio1", "ratio2");
  printf("\n");
  for (int r = 0; r < NROWS; r++) {
    printf("%-12s %9.1f %9.1f", kNames[r], ours[0][r], ours[1][r]);
    if (have_torch) {
      printf(" %9.1f %9.1f %6.2fx %6.2fx", torch[0][r], torch[1][r], ours[0][r] / torch[0][r],
             ours[1][r] / torch[1][r]);
    }
    printf("\n");
  }
  if (!have_torch) printf("(PyTorch not found at .venv/bin/python: no comparison)\n");
  free(m.a);
  free(m.b);
  free(m.o);
  free(m.ha);
  free(m.hb);
  free(m.ho);
  return 0;
}

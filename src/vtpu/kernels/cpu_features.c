/* cpu_features.c: what SIMD the host CPU offers the kernels (include/tpu/kernels.h).
 *
 * Detection uses cpuid and xgetbv: an ISA counts only if the CPU has the instructions
 * and the OS saves the registers (XCR0: YMM state for AVX2; opmask, ZMM_Hi256 and
 * Hi16_ZMM for AVX-512). TORCHTPU_ISA=portable|avx2|avx512 masks the result down (never
 * up), so one test binary can run every code path; unknown values are ignored.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/kernels.h"
#include "vtpu/kernels/vec.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>

static uint64_t read_xcr0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

static void detect(tpu_cpu_features_t *f) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
  if (!osxsave || !avx) return;
  uint64_t xcr0 = read_xcr0();
  bool ymm_ok = (xcr0 & 0x6) == 0x6;
  bool zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
  bool avx2 = (b >> 5) & 1;
  bool avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1,
       avx512vl = (b >> 31) & 1;
  unsigned max_sub = a;
  bool bf16 = false;
  if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) bf16 = (a >> 5) & 1;
  f->avx2_fma = ymm_ok && avx2 && fma;
  f->avx512f = f->avx2_fma && zmm_ok && avx512f && avx512dq && avx512bw && avx512vl;
  f->avx512_bf16 = f->avx512f && bf16;
}
#else
static void detect(tpu_cpu_features_t *f) { (void)f; }
#endif

static tpu_cpu_features_t g_detected, g_masked;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_features(void) {
  detect(&g_detected);
  g_masked = g_detected;
  const char *isa = getenv("TORCHTPU_ISA");
  if (!isa) return;
  if (strcmp(isa, "portable") == 0) {
    memset(&g_masked, 0, sizeof g_masked);
  } else if (strcmp(isa, "avx2") == 0) {
    g_masked.avx512f = false;
    g_masked.avx512_bf16 = false;
  }
}

const tpu_cpu_features_t *tpu_cpu_features(void) {
  pthread_once(&g_once, init_features);
  return &g_masked;
}

const tpu_cpu_features_t *tpu_cpu_features_detected(void) {
  pthread_once(&g_once, init_features);
  return &g_detected;
}

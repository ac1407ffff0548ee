/* gemm_kernels.h: the GEMM micro-kernels and panel packers, one set per ISA (internal).
 *
 * gemm.c picks one tpu_gemm_kernel_t at run time (tpu_cpu_features) and drives it:
 *
 *   packed A panel (mr rows):  F32 format [ksteps][mr] f32; BF16 format [ksteps][mr] u32,
 *                              each u32 a pair (k, k+1) of bf16 (low half = k)
 *   packed B panel (nr cols):  F32 [ksteps][nr] f32;       BF16 [ksteps][nr] u32 pairs
 *
 * The packed k axis is pass-major: k' = pass * Kpass + k, where Kpass is K (F32 format) or
 * K rounded up to even (BF16 format, so that a pair never straddles two passes); the
 * padding rows and columns are zeros. Both formats take 4 bytes per (k step, row).
 *
 * A micro-kernel computes one (mr, nr) f32 tile: C = (accumulate ? C : 0) + A x B over
 * |ksteps| packed steps, C row-major with row stride ldc (elements).
 */
#ifndef TPU_VTPU_KERNELS_GEMM_KERNELS_H
#define TPU_VTPU_KERNELS_GEMM_KERNELS_H

#include "gemm.h"

typedef enum tpu_gemm_format {
  TPU_GEMM_FORMAT_F32,  /* f32 values (exact f32, or bf16 components widened to f32) */
  TPU_GEMM_FORMAT_BF16, /* bf16 pairs for vdpbf16ps */
} tpu_gemm_format_t;

typedef void (*tpu_gemm_ukernel_fn)(int64_t ksteps, const void *a, const void *b, float *c,
                                    int64_t ldc, bool accumulate);
/* A micro-kernel for the first |rows| (1 .. mr - 1) rows of a tile, all nr columns, from a
 * packed A panel that is still mr wide: what ukernel gives for those rows, bit for bit. */
typedef void (*tpu_gemm_ukernel_rows_fn)(int rows, int64_t ksteps, const void *a, const void *b,
                                         float *c, int64_t ldc, bool accumulate);

/* What one packed panel reads: element (w, k) of the source is at
 * data + w_axis(w) + k_axis(k); w is M for A and N for B. */
typedef struct tpu_gemm_panel_src {
  const void *data; /* batch offset applied */
  tpu_dtype_t dtype;
  const tpu_gemm_axis_t *w, *k;
  int num_passes;     /* BF16 mode: passes; F32 mode: 1 */
  const int8_t *comp; /* (num_passes,) bf16 component per pass; NULL: raw f32 */
} tpu_gemm_panel_src_t;

/* A vector packer for one format: writes what tpu_gemm_pack_panel would, or returns false
 * (nothing written) when the source's dtype or layout is not one it handles. */
typedef bool (*tpu_gemm_pack_panel_fn)(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                                       int64_t kpass, int64_t kb, int64_t ke, void *dst);
/* A whole-row packer (see tpu_gemm_pack_rows_f32_avx512); false when it does not apply. */
typedef bool (*tpu_gemm_pack_rows_fn)(const tpu_gemm_panel_src_t *src, int width,
                                      int64_t npanels, int64_t kpass, int64_t kb, int64_t ke,
                                      void *dst, int64_t panel_stride);

typedef struct tpu_gemm_kernel {
  const char *name;
  tpu_gemm_format_t format;
  int mr, nr;     /* micro-tile of C */
  int64_t kc;     /* packed k steps per cache block (B micro-panel kc x nr in L1) */
  int64_t mc, nc; /* C rows / cols per task (A block mc x kc in L2), multiples of mr, nr */
  tpu_gemm_ukernel_fn ukernel;
  tpu_gemm_pack_panel_fn pack_panel; /* this ISA's packer; NULL: the portable one */
  tpu_gemm_pack_rows_fn pack_rows;   /* this ISA's whole-row packer; NULL: panel by panel */
  /* a panel's last rows in place; NULL: through ukernel on a local tile, then copied */
  tpu_gemm_ukernel_rows_fn ukernel_rows;
  /* c[i][j] += bias[j] for i < rows, j < cols (cols <= nr) on a finished tile; NULL: a
   * plain loop */
  void (*add_bias)(float *c, int64_t ldc, int rows, int cols, const float *bias);
  /* ukernel that also adds bias[j] (nr f32) to each element as it stores it, bit for bit
   * ukernel then add_bias; NULL: those two */
  void (*ukernel_bias)(int64_t ksteps, const void *a, const void *b, float *c, int64_t ldc,
                       bool accumulate, const float *bias);
} tpu_gemm_kernel_t;

/* Packs rows [w0, w0 + width) of |src| (zero past the end) into the panel at |dst| in
 * |format|: (passes * kpass, width) entries of 4 bytes (k pairs for BF16), writing the
 * k range [kb, ke) of every pass (kb, ke even for BF16; rows past K are zeros). The
 * portable packer handles every case. */
void tpu_gemm_pack_panel(tpu_gemm_format_t format, const tpu_gemm_panel_src_t *src, int64_t w0,
                         int width, int64_t kpass, int64_t kb, int64_t ke, void *dst);

/* Whether the packers walk |src| k outer, reading along w (w contiguous, strided or a
 * table), rather than one contiguous k run per panel row (k contiguous, w not). The
 * driver then packs such an operand k-chunk by k-chunk across all its panels, so that
 * the reads follow the source's rows in memory. */
static inline bool tpu_gemm_panel_reads_rows(const tpu_gemm_panel_src_t *src) {
  bool w_unit = !src->w->offsets && src->w->stride == 1;
  bool k_unit = !src->k->offsets && src->k->stride == 1;
  return w_unit || !k_unit;
}

/* For the vector packers that read along w: the source offsets of the panel's valid rows
 * woff[0, wn) (rows w0 ..), and run[g], whether rows [g * lanes, (g + 1) * lanes) that
 * exist form one contiguous run (loaded at once; else gathered). run needs
 * ceil(width / lanes) entries. */
static inline void tpu_gemm_panel_runs(const tpu_gemm_axis_t *wax, int64_t w0, int wn, int width,
                                       int lanes, int64_t *woff, bool *run) {
  for (int i = 0; i < wn; i++) woff[i] = tpu_gemm_axis_offset(wax, w0 + i);
  for (int g = 0; g * lanes < width; g++) {
    int n = wn - g * lanes < lanes ? wn - g * lanes : lanes;
    run[g] = n > 0;
    for (int j = 1; j < n && run[g]; j++) run[g] = woff[g * lanes + j] == woff[g * lanes] + j;
  }
}

/* AVX512-BF16 packer for the BF16 format (f32 or bf16 sources, any layout: contiguous
 * runs are loaded, the rest gathered); false (nothing written) when it does not apply. */
bool tpu_gemm_pack_panel_bf16_avx512(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                                     int64_t kpass, int64_t kb, int64_t ke, void *dst);

/* AVX-512F packer for the F32 format (f32, bf16 or f16 sources, any layout); false when
 * it does not apply. */
bool tpu_gemm_pack_panel_f32_avx512(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                                    int64_t kpass, int64_t kb, int64_t ke, void *dst);

/* Packs the k range [kb, ke) of all |npanels| panels of a source that is contiguous along
 * w, sweeping each source row end to end (panel i at dst + i * panel_stride entries);
 * false when it does not apply (w not unit-stride, width not a multiple of 16, dtype or
 * ISA missing). One per format. */
bool tpu_gemm_pack_rows_bf16_avx512(const tpu_gemm_panel_src_t *src, int width, int64_t npanels,
                                    int64_t kpass, int64_t kb, int64_t ke, void *dst,
                                    int64_t panel_stride);
bool tpu_gemm_pack_rows_f32_avx512(const tpu_gemm_panel_src_t *src, int width, int64_t npanels,
                                   int64_t kpass, int64_t kb, int64_t ke, void *dst,
                                   int64_t panel_stride);

/* The AVX2 packers for the F32 format (f32 or bf16 sources; the whole-row one for widths
 * that are multiples of 8): what CPUs without AVX-512 pack DEFAULT/HIGH components with. */
bool tpu_gemm_pack_panel_f32_avx2(const tpu_gemm_panel_src_t *src, int64_t w0, int width,
                                  int64_t kpass, int64_t kb, int64_t ke, void *dst);
bool tpu_gemm_pack_rows_f32_avx2(const tpu_gemm_panel_src_t *src, int width, int64_t npanels,
                                 int64_t kpass, int64_t kb, int64_t ke, void *dst,
                                 int64_t panel_stride);

extern const tpu_gemm_kernel_t tpu_gemm_kernel_portable;    /* F32 format, plain C */
extern const tpu_gemm_kernel_t tpu_gemm_kernel_avx2;        /* F32 format, AVX2 + FMA */
extern const tpu_gemm_kernel_t tpu_gemm_kernel_avx512;      /* F32 format, AVX-512F */
extern const tpu_gemm_kernel_t tpu_gemm_kernel_avx512_bf16; /* BF16 format, vdpbf16ps */

/* tpu_gemm_run with a given kernel (tests run every kernel the CPU has; the kernel's
 * ISA must be present). */
tpu_status_t tpu_gemm_run_kernel(const tpu_gemm_t *g, const tpu_gemm_kernel_t *kern,
                                 tpu_pool_t *pool);

/* tpu_gemm_run_kernel without the small-matrix path (tests compare the two bit for bit). */
tpu_status_t tpu_gemm_run_blocked(const tpu_gemm_t *g, const tpu_gemm_kernel_t *kern,
                                  tpu_pool_t *pool);

/* Who runs a GEMM's pieces: the whole pool; only the helpers spinning in it now
 * (helpers_only: too little work to pay for waking a worker); or, with pool NULL, the
 * calling thread alone. |threads|: how many may take part. */
typedef struct tpu_gemm_team {
  tpu_pool_t *pool;
  bool helpers_only;
  int threads;
} tpu_gemm_team_t;

/* parallel_for over the team; a NULL team is the calling thread alone. */
void tpu_gemm_team_for(const tpu_gemm_team_t *team, int64_t n, int64_t grain, tpu_range_fn fn,
                       void *ctx);

/* The small-matrix path (gemm_small_avx512.c): runs |g| when |kern| is the AVX512-BF16
 * kernel, the CPU has it, and g is small (bf16 passes, M <= 64, N <= 32, at most 64
 * packed k steps, f32 or bf16 A and B each with a unit stride along one of its two dims,
 * affine); false, with nothing written, otherwise. The same bits as the blocked path.
 * Called by tpu_gemm_run_kernel after its checks (sizes consistent, K > 0); team NULL:
 * this thread alone. */
bool tpu_gemm_small_run(const tpu_gemm_t *g, const tpu_gemm_kernel_t *kern,
                        const tpu_gemm_team_t *team);

/* The direct path of the AVX2 kernel (gemm_direct_avx2.c): runs |g| when |kern| is the
 * AVX2 kernel, the CPU has it, the plan is bf16 passes or exact f32, A and B are f32 or
 * bf16 each with a unit stride along one of its two dims (affine), and one batch takes at
 * most 2^22 multiply-adds (all passes) and 512 KiB of converted operands; false, with
 * nothing written, otherwise. Adds g->bias itself. The same bits as the blocked path.
 * Called like tpu_gemm_small_run. */
bool tpu_gemm_direct_run(const tpu_gemm_t *g, const tpu_gemm_kernel_t *kern,
                         const tpu_gemm_team_t *team);

/* A GEMM workspace of |size| bytes (a multiple of 64), 64-aligned: the calling thread's
 * cached one (kept up to 32 MiB for its next GEMM) when free and large enough, else a
 * fresh allocation; NULL when out of memory. *owner says which, for the put. */
typedef struct tpu_gemm_ws tpu_gemm_ws_t;
void *tpu_gemm_workspace_get(size_t size, tpu_gemm_ws_t **owner);
void tpu_gemm_workspace_put(void *p, tpu_gemm_ws_t *owner);

/* Whether the compiler could build the x86 kernels (false elsewhere: portable only). */
bool tpu_gemm_have_x86_kernels(void);

#endif /* TPU_VTPU_KERNELS_GEMM_KERNELS_H */

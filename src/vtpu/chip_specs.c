/* chip_specs.c: the table of TPU generations the virtual TPU models, and name lookup.
 *
 * Every value comes from shared/reference/tpu-hardware.md; the comment beside each
 * cites its source key and the .src strings carry the same keys for the cost model
 * and the docs. Values are per chip. Derived values say how they were derived;
 * "(?)" marks a value the reference itself flags as uncertain.
 */
#include "tpu/chip.h"

#include <ctype.h>
#include <stddef.h>
#include <string.h>

#define KIB 1024ull
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)

static const tpu_chip_spec_t kSpecs[TPU_CHIP_GEN_COUNT] = {
    [TPU_CHIP_V4] = {
        .gen = TPU_CHIP_V4,
        .name = "v4",
        .marketing_name = "TPU v4",
        .hbm_bytes = 32 * GIB,              /* 32 GiB HBM2 [GC-v4][J] */
        .hbm_bytes_per_s = 1200e9,          /* 1200 GB/s (JAX: 1.23e12) [GC-v4][J] */
        .peak_bf16_flops = 275e12,          /* 275 TFLOP/s bf16 [GC-v4][J] */
        .tensorcores = 2,                   /* 2 TC, megacore [GC-v4][J][SB-tpu] */
        .mxu_count = 8,                     /* 4 MXU per TC x 2 TC [GC-v4][J][SB-tpu] */
        .mxu_dim = 128,                     /* 128x128 [GC-v4][J][SB-tpu] */
        .vmem_bytes = 2 * 16 * MIB,         /* 16 MiB per TC x 2 TC [J][SB-tpu] */
        .ici_links = 6,                     /* 6 links (3D) [SB-tpu][GC-v4] */
        .ici_link_bytes_per_s = 45e9,       /* ~4.5e10 B/s one-way per link [SB-tpu] */
        .torus_dims = 3,                    /* 3D torus (4x4x4 cubes) [GC-v4] */
        .src = {.hbm = "[GC-v4][J]", .peak = "[GC-v4][J]", .mxu = "[GC-v4][J][SB-tpu]",
                .vmem = "[J][SB-tpu]", .ici = "[SB-tpu][GC-v4]", .topology = "[GC-v4]"},
    },
    [TPU_CHIP_V5E] = {
        .gen = TPU_CHIP_V5E,
        .name = "v5e",
        .marketing_name = "TPU v5e",
        .hbm_bytes = 16 * GIB,              /* 16 GB (16 GiB) [GC-v5e][J] */
        .hbm_bytes_per_s = 819e9,           /* 819 GB/s (JAX: 8.2e11) [GC-v5e][J] */
        .peak_bf16_flops = 197e12,          /* 197 TFLOP/s bf16 [GC-v5e][J] */
        .tensorcores = 1,                   /* 1 TC [GC-v5e][J] */
        .mxu_count = 4,                     /* 4 MXU [GC-v5e][J] */
        .mxu_dim = 128,                     /* 128x128 [GC-v5e][J] */
        .vmem_bytes = 128 * MIB,            /* 128 MiB [J][SB-tpu] */
        .ici_links = 4,                     /* 4 ports [GC-v5e] */
        .ici_link_bytes_per_s = 50e9,       /* 400 GB/s bidi / 4 ports / 2 directions;
                                               SB uses 4.5e10 [GC-v5e][SB-tpu] */
        .torus_dims = 2,                    /* 2D torus, 16x16 pod [GC-v5e][SB-tpu] */
        .src = {.hbm = "[GC-v5e][J]", .peak = "[GC-v5e][J]", .mxu = "[GC-v5e][J]",
                .vmem = "[J][SB-tpu]", .ici = "[GC-v5e][SB-tpu]",
                .topology = "[GC-v5e][SB-tpu]"},
    },
    [TPU_CHIP_V5P] = {
        .gen = TPU_CHIP_V5P,
        .name = "v5p",
        .marketing_name = "TPU v5p",
        .hbm_bytes = 95 * GIB,              /* 96 GiB physical, 95 GiB user-allocatable
                                               [GC-v5p][J] */
        .hbm_bytes_per_s = 2765e9,          /* 2765 GB/s (JAX 2.46e12, SB 2.8e12) [GC-v5p][J] */
        .peak_bf16_flops = 459e12,          /* 459 TFLOP/s bf16 [GC-v5p][J] */
        .tensorcores = 2,                   /* 2 TC, megacore [GC-v5p][J] */
        .mxu_count = 8,                     /* 4 MXU per TC x 2 TC [GC-v5p][J] */
        .mxu_dim = 128,                     /* 128x128 [GC-v5p][J] */
        .vmem_bytes = 2 * 64 * MIB,         /* 64 MiB per TC x 2 TC [J][SB-tpu] */
        .ici_links = 6,                     /* 6 ports [GC-v5p][SB-tpu] */
        .ici_link_bytes_per_s = 100e9,      /* 1200 GB/s bidi / 6 ports / 2 directions;
                                               SB: 9e10 [GC-v5p][SB-tpu] */
        .torus_dims = 3,                    /* 3D torus via 4x4x4 OCS cubes [GC-v5p][SB-tpu] */
        .src = {.hbm = "[GC-v5p][J]", .peak = "[GC-v5p][J]", .mxu = "[GC-v5p][J]",
                .vmem = "[J][SB-tpu]", .ici = "[GC-v5p][SB-tpu]",
                .topology = "[GC-v5p][SB-tpu]"},
    },
    [TPU_CHIP_V6E] = {
        .gen = TPU_CHIP_V6E,
        .name = "v6e",
        .marketing_name = "TPU v6e",
        .hbm_bytes = 32 * GIB,              /* 32 GB (32 GiB) [GC-v6e][J] */
        .hbm_bytes_per_s = 1638e9,          /* 1638 GB/s (JAX 1.64e12) [GC-v6e][J] */
        .peak_bf16_flops = 918e12,          /* 918 TFLOP/s bf16 (JAX 920) [GC-v6e][GC-7x][J] */
        .tensorcores = 1,                   /* 1 TC [GC-v6e][J] */
        .mxu_count = 2,                     /* two MXUs [GC-v6e][J] */
        .mxu_dim = 256,                     /* 256x256 [GC-v6e][J] */
        .vmem_bytes = 128 * MIB,            /* 128 MiB [J] */
        .ici_links = 4,                     /* 4 ports [GC-v6e] */
        .ici_link_bytes_per_s = 100e9,      /* 800 GB/s bidi / 4 ports / 2 directions;
                                               SB: 9e10 [GC-v6e][SB-tpu] */
        .torus_dims = 2,                    /* 2D torus, 16x16 pod [GC-v6e] */
        .src = {.hbm = "[GC-v6e][J]", .peak = "[GC-v6e][GC-7x][J]", .mxu = "[GC-v6e][J]",
                .vmem = "[J]", .ici = "[GC-v6e][SB-tpu]", .topology = "[GC-v6e]"},
    },
    [TPU_CHIP_V7] = {
        .gen = TPU_CHIP_V7,
        .name = "v7",
        .marketing_name = "TPU v7",
        .hbm_bytes = 192 * GIB,             /* 192 GiB HBM3e [GC-7x][J][HC25] */
        .hbm_bytes_per_s = 7.37e12,         /* ~7.37 TB/s (JAX 7.4e12) [GC-7x][J][HC25] */
        .peak_bf16_flops = 2307e12,         /* 2307 TFLOP/s bf16 [GC-7x][GC-IWperf][J] */
        .tensorcores = 2,                   /* 2 TC, no megacore [GC-7x][J] */
        .mxu_count = 4,                     /* 2 MXU per TC x 2 TC [GC-7x][J] */
        .mxu_dim = 256,                     /* 256x256 (JAX) [J] */
        .vmem_bytes = 2 * 64 * MIB,         /* 64 MiB per TC x 2 TC [J] */
        .ici_links = 6,                     /* likely 6, like v5p (?) [HC25] */
        .ici_link_bytes_per_s = 100e9,      /* ~1.2 TB/s bidi per chip (2nd) / 6 links (?) / 2
                                               directions [HC25] */
        .torus_dims = 3,                    /* 3D torus + OCS, like v5p [GC-7x][HC25] */
        .src = {.hbm = "[GC-7x][J][HC25]", .peak = "[GC-7x][GC-IWperf][J]",
                .mxu = "[GC-7x][J]", .vmem = "[J]", .ici = "[HC25] (?)",
                .topology = "[GC-7x][HC25]"},
    },
};

const tpu_chip_spec_t *tpu_chip_spec(tpu_chip_gen_t gen) {
  if ((int)gen < 0 || gen >= TPU_CHIP_GEN_COUNT) return NULL;
  return &kSpecs[gen];
}

/* Other names users type for a generation (compared after lowercasing and dropping
 * a leading "tpu" and separator). */
static const struct {
  const char *alias;
  tpu_chip_gen_t gen;
} kAliases[] = {
    {"v4p", TPU_CHIP_V4},       {"v5litepod", TPU_CHIP_V5E}, {"v5lite", TPU_CHIP_V5E},
    {"trillium", TPU_CHIP_V6E}, {"7x", TPU_CHIP_V7},         {"v7x", TPU_CHIP_V7},
    {"ironwood", TPU_CHIP_V7},
};

tpu_status_t tpu_chip_spec_find(const char *name, const tpu_chip_spec_t **out_spec) {
  *out_spec = NULL;
  if (!name) return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "tpu_chip_spec_find: name is NULL");
  /* Lowercase copy; too-long names cannot match and fall through to the error. */
  char key[32];
  size_t n = strlen(name);
  if (n < sizeof(key)) {
    for (size_t i = 0; i <= n; i++) key[i] = (char)tolower((unsigned char)name[i]);
    const char *k = key;
    if (strncmp(k, "tpu", 3) == 0) {
      k += 3;
      if (*k == ' ' || *k == '-' || *k == '_') k++;
    }
    for (int g = 0; g < TPU_CHIP_GEN_COUNT; g++) {
      if (strcmp(k, kSpecs[g].name) == 0) {
        *out_spec = &kSpecs[g];
        return TPU_OK;
      }
    }
    for (size_t a = 0; a < sizeof(kAliases) / sizeof(kAliases[0]); a++) {
      if (strcmp(k, kAliases[a].alias) == 0) {
        *out_spec = &kSpecs[kAliases[a].gen];
        return TPU_OK;
      }
    }
  }
  char valid[64] = "";
  for (int g = 0; g < TPU_CHIP_GEN_COUNT; g++) {
    if (g) strncat(valid, ", ", sizeof(valid) - strlen(valid) - 1);
    strncat(valid, kSpecs[g].name, sizeof(valid) - strlen(valid) - 1);
  }
  return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "unknown TPU generation \"%.40s\"; valid: %s",
                        name, valid);
}

/* test_chip.c: the TPU generation table and name lookup. */
#include <string.h>

#include "check.h"
#include "tpu/chip.h"

#define GIB (1024ull * 1024 * 1024)
#define MIB (1024ull * 1024)

TEST(every_generation_has_a_complete_spec) {
  for (int g = 0; g < TPU_CHIP_GEN_COUNT; g++) {
    const tpu_chip_spec_t *s = tpu_chip_spec((tpu_chip_gen_t)g);
    CHECK(s != NULL);
    if (!s) continue;
    CHECK(s->gen == (tpu_chip_gen_t)g);
    CHECK(s->name && s->marketing_name && strstr(s->marketing_name, s->name));
    CHECK(s->hbm_bytes >= 16 * GIB && s->hbm_bytes % 512 == 0);
    CHECK(s->hbm_bytes_per_s > 1e11 && s->peak_bf16_flops > 1e14);
    CHECK(s->tensorcores == 1 || s->tensorcores == 2);
    CHECK(s->mxu_count >= s->tensorcores && s->mxu_count % s->tensorcores == 0);
    CHECK(s->mxu_dim == 128 || s->mxu_dim == 256);
    CHECK(s->vmem_bytes >= 16 * MIB);
    CHECK(s->ici_links >= 4 && s->ici_link_bytes_per_s > 1e10);
    CHECK(s->torus_dims == 2 || s->torus_dims == 3);
    const char *srcs[] = {s->src.hbm, s->src.peak, s->src.mxu,
                          s->src.vmem, s->src.ici, s->src.topology};
    for (size_t i = 0; i < sizeof(srcs) / sizeof(srcs[0]); i++) {
      CHECK(srcs[i] != NULL && srcs[i][0] == '[');
    }
  }
  CHECK(tpu_chip_spec(TPU_CHIP_GEN_COUNT) == NULL);
  CHECK(tpu_chip_spec((tpu_chip_gen_t)-1) == NULL);
}

TEST(reference_values) {
  const tpu_chip_spec_t *v4 = tpu_chip_spec(TPU_CHIP_V4);
  CHECK(v4->hbm_bytes == 32 * GIB && v4->hbm_bytes_per_s == 1200e9);
  CHECK(v4->peak_bf16_flops == 275e12 && v4->tensorcores == 2 && v4->mxu_count == 8);
  CHECK(v4->mxu_dim == 128 && v4->ici_links == 6 && v4->ici_link_bytes_per_s == 45e9);
  CHECK(v4->torus_dims == 3 && v4->vmem_bytes == 32 * MIB);

  const tpu_chip_spec_t *v5e = tpu_chip_spec(TPU_CHIP_V5E);
  CHECK(strcmp(v5e->name, "v5e") == 0 && strcmp(v5e->marketing_name, "TPU v5e") == 0);
  CHECK(v5e->hbm_bytes == 16 * GIB && v5e->hbm_bytes_per_s == 819e9);
  CHECK(v5e->peak_bf16_flops == 197e12 && v5e->tensorcores == 1 && v5e->mxu_count == 4);
  CHECK(v5e->mxu_dim == 128 && v5e->vmem_bytes == 128 * MIB);
  CHECK(v5e->ici_links == 4 && v5e->ici_link_bytes_per_s == 50e9 && v5e->torus_dims == 2);
  CHECK_CONTAINS(v5e->src.hbm, "[GC-v5e]");

  const tpu_chip_spec_t *v5p = tpu_chip_spec(TPU_CHIP_V5P);
  CHECK(v5p->hbm_bytes == 95 * GIB && v5p->hbm_bytes_per_s == 2765e9);
  CHECK(v5p->peak_bf16_flops == 459e12 && v5p->tensorcores == 2 && v5p->mxu_count == 8);
  CHECK(v5p->torus_dims == 3 && v5p->vmem_bytes == 128 * MIB);

  const tpu_chip_spec_t *v6e = tpu_chip_spec(TPU_CHIP_V6E);
  CHECK(v6e->hbm_bytes == 32 * GIB && v6e->hbm_bytes_per_s == 1638e9);
  CHECK(v6e->peak_bf16_flops == 918e12 && v6e->tensorcores == 1);
  CHECK(v6e->mxu_count == 2 && v6e->mxu_dim == 256 && v6e->torus_dims == 2);

  const tpu_chip_spec_t *v7 = tpu_chip_spec(TPU_CHIP_V7);
  CHECK(v7->hbm_bytes == 192 * GIB && v7->hbm_bytes_per_s == 7.37e12);
  CHECK(v7->peak_bf16_flops == 2307e12 && v7->tensorcores == 2);
  CHECK(v7->mxu_count == 4 && v7->mxu_dim == 256 && v7->vmem_bytes == 128 * MIB);
  CHECK(v7->torus_dims == 3);
  CHECK_CONTAINS(v7->src.ici, "(?)");
}

static tpu_chip_gen_t find_gen(const char *name) {
  const tpu_chip_spec_t *s = NULL;
  if (tpu_chip_spec_find(name, &s) != TPU_OK || !s) return TPU_CHIP_GEN_COUNT;
  return s->gen;
}

TEST(find_by_name_and_alias) {
  CHECK(find_gen("v4") == TPU_CHIP_V4);
  CHECK(find_gen("v5e") == TPU_CHIP_V5E);
  CHECK(find_gen("V5E") == TPU_CHIP_V5E);
  CHECK(find_gen("v5p") == TPU_CHIP_V5P);
  CHECK(find_gen("v6e") == TPU_CHIP_V6E);
  CHECK(find_gen("v7") == TPU_CHIP_V7);
  CHECK(find_gen("tpuv5e") == TPU_CHIP_V5E);
  CHECK(find_gen("TPU v5e") == TPU_CHIP_V5E);
  CHECK(find_gen("tpu-v6e") == TPU_CHIP_V6E);
  CHECK(find_gen("v5litepod") == TPU_CHIP_V5E);
  CHECK(find_gen("V5LitePod") == TPU_CHIP_V5E);
  CHECK(find_gen("tpu7x") == TPU_CHIP_V7);
  CHECK(find_gen("TPU7X") == TPU_CHIP_V7);
}

TEST(unknown_names_list_the_valid_ones) {
  const char *bad[] = {"v9", "", "v5", "v5ee", "tpu", "gpu", "v5e ",
                       "a-name-that-is-much-longer-than-any-buffer-used-for-lookup"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    const tpu_chip_spec_t *s = (const tpu_chip_spec_t *)1;
    CHECK(tpu_chip_spec_find(bad[i], &s) == TPU_ERR_INVALID_ARGUMENT);
    CHECK(s == NULL);
    CHECK_CONTAINS(tpu_status_message(), "valid: v4, v5e, v5p, v6e, v7");
  }
  const tpu_chip_spec_t *s;
  CHECK(tpu_chip_spec_find("v9", &s) == TPU_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(tpu_status_message(), "\"v9\"");
  CHECK(tpu_chip_spec_find(NULL, &s) == TPU_ERR_INVALID_ARGUMENT);
}

int main(void) {
  RUN(every_generation_has_a_complete_spec);
  RUN(reference_values);
  RUN(find_by_name_and_alias);
  RUN(unknown_names_list_the_valid_ones);
  return check_report();
}

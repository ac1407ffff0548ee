/* test_interconnect.c: the ICI collective time model against values computed by hand from
 * the formulas of shared/reference/tpu-hardware.md section 4 (see src/vtpu/interconnect.c). */
#include <math.h>

#include "check.h"
#include "tpu/chip.h"
#include "tpu/interconnect.h"

static int close_to(double a, double b) { return fabs(a - b) <= 1e-12 + 1e-9 * fabs(b); }

static const tpu_chip_spec_t *chip(const char *name) {
  const tpu_chip_spec_t *s = NULL;
  tpu_chip_spec_find(name, &s);
  return s;
}

TEST(ring_of_four_v5e_has_no_wraparound) {
  /* v5e W_uni = 50e9 B/s; 4 chips on one axis, no wraparound (axis < 16):
   * L = 3 hops * 1 us = 3e-6 s; B = W_uni; V = 64 MiB = 67108864 B.
   * all_reduce = 2 * max(3e-6, 67108864 / 50e9) = 2 * 1.34217728e-3 = 2.68435456e-3 s. */
  tpu_ici_topology_t t = tpu_ici_topology_ring(4);
  double s;
  CHECK(!tpu_ici_axis_wraps(chip("v5e"), &t, 0));
  CHECK_OK(tpu_ici_collective_seconds(TPU_COLL_ALL_REDUCE, 67108864, chip("v5e"), &t, &s));
  CHECK(close_to(s, 2.68435456e-3));
  CHECK_OK(tpu_ici_collective_seconds(TPU_COLL_ALL_GATHER, 67108864, chip("v5e"), &t, &s));
  CHECK(close_to(s, 1.34217728e-3));
  /* all_to_all: bandwidth term / 4 = 3.3554432e-4 s. */
  CHECK_OK(tpu_ici_collective_seconds(TPU_COLL_ALL_TO_ALL, 67108864, chip("v5e"), &t, &s));
  CHECK(close_to(s, 3.3554432e-4));
  /* Small messages are latency bound: 1000 B / 50e9 = 2e-8 < 3e-6. */
  CHECK_OK(tpu_ici_collective_seconds(TPU_COLL_REDUCE_SCATTER, 1000, chip("v5e"), &t, &s));
  CHECK(close_to(s, 3e-6));
  CHECK_OK(tpu_ici_collective_seconds(TPU_COLL_BARRIER, 0, chip("v5e"), &t, &s));
  CHECK(close_to(s, 6e-6));
}

TEST(full_v5e_pod_wraps_both_axes) {
  /* 16x16 v5e: both axes wrap; L = (8 + 8) us = 1.6e-5 s; B = 2 axes * W_bi = 4 * 50e9 = 2e11.
   * all_gather of V = 1e9 B: max(1.6e-5, 5e-3) = 5e-3 s (= V/(W_bi * n_axes) of [SB-shard]). */
  tpu_ici_topology_t t = {.ndim = 2, .dims = {16, 16, 1}};
  double s;
  CHECK(tpu_ici_axis_wraps(chip("v5e"), &t, 0) && tpu_ici_axis_wraps(chip("v5e"), &t, 1));
  CHECK_OK(tpu_ici_collective_seconds(TPU_COLL_ALL_GATHER, 1000000000ull, chip("v5e"), &t, &s));
  CHECK(close_to(s, 5e-3));
  CHECK_OK(tpu_ici_collective_seconds(TPU_COLL_ALL_GATHER, 1000, chip("v5e"), &t, &s));
  CHECK(close_to(s, 1.6e-5));
}

TEST(v4_cube_wraps_and_sub_cube_does_not) {
  /* v4 W_uni = 45e9. 4x4x4: all three axes wrap: L = 3 * 2 us = 6e-6; B = 3 * 9e10 = 2.7e11.
   * all_reduce of 27e9 B = 2 * 0.1 = 0.2 s. */
  tpu_ici_topology_t cube = {.ndim = 3, .dims = {4, 4, 4}};
  tpu_ici_topology_t sub = {.ndim = 3, .dims = {2, 2, 4}};
  double s;
  CHECK(tpu_ici_axis_wraps(chip("v4"), &cube, 2));
  CHECK(!tpu_ici_axis_wraps(chip("v4"), &sub, 2));
  CHECK_OK(tpu_ici_collective_seconds(TPU_COLL_ALL_REDUCE, 27000000000ull, chip("v4"), &cube, &s));
  CHECK(close_to(s, 0.2));
  /* 2x2x4 without wraparound: B = 3 * 45e9 = 1.35e11: twice the time, 0.4 s. */
  CHECK_OK(tpu_ici_collective_seconds(TPU_COLL_ALL_REDUCE, 27000000000ull, chip("v4"), &sub, &s));
  CHECK(close_to(s, 0.4));
}

TEST(single_chip_and_p2p) {
  tpu_ici_topology_t one = tpu_ici_topology_ring(1), t = {.ndim = 2, .dims = {2, 4, 1}};
  double s = -1;
  CHECK_OK(tpu_ici_collective_seconds(TPU_COLL_ALL_REDUCE, 1 << 20, chip("v6e"), &one, &s));
  CHECK(s == 0);
  /* v6e W_uni = 100e9; chips 0 (0,0) and 7 (1,3) in 2x4 without wraparound: 1 + 3 = 4 hops.
   * 4e-6 + 1e8 / 1e11 = 1.004e-3 s. */
  CHECK_OK(tpu_ici_p2p_seconds(100000000ull, chip("v6e"), &t, 0, 7, &s));
  CHECK(close_to(s, 1.004e-3));
  CHECK_OK(tpu_ici_collective_seconds(TPU_COLL_SEND_RECV, 100000000ull, chip("v6e"), &t, &s));
  CHECK(close_to(s, 1.001e-3));
}

TEST(invalid_arguments) {
  tpu_ici_topology_t bad = {.ndim = 0, .dims = {0, 0, 0}}, t = tpu_ici_topology_ring(2);
  double s;
  CHECK(tpu_ici_collective_seconds(TPU_COLL_ALL_REDUCE, 1, chip("v5e"), &bad, &s) ==
        TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_ici_collective_seconds(TPU_COLL_ALL_REDUCE, 1, NULL, &t, &s) == TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_ici_collective_seconds(TPU_COLL_KIND_COUNT, 1, chip("v5e"), &t, &s) ==
        TPU_ERR_INVALID_ARGUMENT);
  CHECK(tpu_ici_p2p_seconds(1, chip("v5e"), &t, 0, 2, &s) == TPU_ERR_OUT_OF_RANGE);
  CHECK_CONTAINS(tpu_collective_kind_name(TPU_COLL_REDUCE_SCATTER), "reduce_scatter");
}

int main(void) {
  RUN(ring_of_four_v5e_has_no_wraparound);
  RUN(full_v5e_pod_wraps_both_axes);
  RUN(v4_cube_wraps_and_sub_cube_does_not);
  RUN(single_chip_and_p2p);
  RUN(invalid_arguments);
  return check_report();
}

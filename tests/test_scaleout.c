/* Check suite for the scale-out estimate (driver/scaleout.c): the
 * roofline of a step, ring all-reduces inside and across nodes, the
 * stage split (balanced, weighing cut costs, deterministic, strided on
 * big graphs), and whole splits worked out by hand from the formulas of
 * docs/parallel.md. */
#include "check_quiet.h"
#include <math.h>
#include <stdlib.h>

#include "driver/scaleout.h"

static const ScaleDevice *h200(void) {
  const ScaleDevice *d = scale_device("h200");
  ck_assert_ptr_nonnull(d);
  return d;
}

#define CLOSE(a, b)                                                                                \
  ck_assert_msg(fabs((double)(a) - (double)(b)) <= 1e-9 * fmax(1, fabs((double)(b))), "%.12g != %.12g", \
                (double)(a), (double)(b))

START_TEST(test_device_table) {
  ck_assert_ptr_nonnull(scale_device("h100"));
  ck_assert_ptr_nonnull(scale_device("a100"));
  ck_assert_ptr_null(scale_device("h300"));
  ck_assert_ptr_null(scale_device(""));
  const ScaleDevice *d = h200();
  /* data-sheet figures the docs quote */
  CLOSE(d->half_flops, 989e12);
  CLOSE(d->hbm_bytes, 4.8e12);
  CLOSE(d->memory, 141e9);
}
END_TEST

START_TEST(test_step_time) {
  const ScaleDevice *d = h200();
  /* compute-bound on each kind of unit, then bandwidth-bound */
  CLOSE(scale_step_time(d, 67e12, 0, SCALE_ON_F32), 1 + d->launch_s);
  CLOSE(scale_step_time(d, 989e12, 0, SCALE_ON_HALF), 1 + d->launch_s);
  CLOSE(scale_step_time(d, 494e12, 0, SCALE_ON_TF32), 1 + d->launch_s);
  CLOSE(scale_step_time(d, 1e9, 4.8e12, SCALE_ON_HALF), 1 + d->launch_s);
  CLOSE(scale_step_time(d, 0, 0, SCALE_ON_F32), d->launch_s);
}
END_TEST

START_TEST(test_allreduce) {
  const ScaleDevice *d = h200();
  CLOSE(scale_allreduce_time(d, 1e9, 1, false), 0);
  CLOSE(scale_allreduce_time(d, 1e9, 0, true), 0);
  CLOSE(scale_allreduce_time(d, 800e6, 8, false), 2.0 * 7 / 8 * 800e6 / 450e9 + 14 * 3e-6);
  CLOSE(scale_allreduce_time(d, 800e6, 8, true), 2.0 * 7 / 8 * 800e6 / 50e9 + 14 * 8e-6);
}
END_TEST

static double no_cost(void *ctx, int stage, int at) {
  (void)ctx, (void)stage, (void)at;
  return 0;
}

/* Cutting before node 2 costs 10, anywhere else nothing. */
static double dear_at_2(void *ctx, int stage, int at) {
  (void)ctx, (void)stage;
  return at == 2 ? 10 : 0;
}

START_TEST(test_partition) {
  int cut[3];
  double even[] = {1, 1, 1, 1};
  CLOSE(scale_partition(even, 4, 2, no_cost, NULL, cut), 2);
  ck_assert_int_eq(cut[0], 2);
  double heavy[] = {5, 1, 1, 1, 1, 1};
  CLOSE(scale_partition(heavy, 6, 2, no_cost, NULL, cut), 5);
  ck_assert_int_eq(cut[0], 1);
  /* every stage non-empty, even when one node outweighs the rest */
  double lopsided[] = {100, 1, 1, 1};
  CLOSE(scale_partition(lopsided, 4, 4, no_cost, NULL, cut), 100);
  ck_assert_int_eq(cut[0], 1);
  ck_assert_int_eq(cut[1], 2);
  ck_assert_int_eq(cut[2], 3);
  /* ties keep the earliest cut: 1 | 1 1 and 1 1 | 1 are both 2 */
  double three[] = {1, 1, 1};
  CLOSE(scale_partition(three, 3, 2, no_cost, NULL, cut), 2);
  ck_assert_int_eq(cut[0], 1);
  /* a dear boundary moves the cut off it, at the price of balance */
  CLOSE(scale_partition(even, 4, 2, dear_at_2, NULL, cut), 3);
  ck_assert_int_eq(cut[0], 1);
  /* one stage, and more stages than nodes */
  CLOSE(scale_partition(even, 4, 1, no_cost, NULL, cut), 4);
  CLOSE(scale_partition(even, 4, 5, no_cost, NULL, cut), -1);
  CLOSE(scale_partition(even, 4, 0, no_cost, NULL, cut), -1);
}
END_TEST

START_TEST(test_partition_big) {
  /* past 1,000 nodes the cuts fall on every 5th boundary of 5,000: the
   * even split of 4 stages is still among them */
  int n = 5000, cut[3];
  double *c = malloc(n * sizeof *c);
  for (int i = 0; i < n; i++) c[i] = 1;
  CLOSE(scale_partition(c, n, 4, no_cost, NULL, cut), 1250);
  ck_assert_int_eq(cut[0], 1250);
  ck_assert_int_eq(cut[1], 2500);
  ck_assert_int_eq(cut[2], 3750);
  free(c);
}
END_TEST

static const ScaleModel model = {
    .batch = 64, .weight_bytes = 4e9, .grad_bytes = 1e9, .optim_s = 0.004, .bucket_bytes = 25e6};

START_TEST(test_data_parallel) {
  const ScaleDevice *d = h200();
  ScaleStep local = {.compute_s = 0.030, .split_s = 0.020, .arena_bytes = 10e9};
  ScaleSplit s = {.data = 8, .tensor = 1, .stages = 1, .gpus_per_node = 8};
  ScaleResult r = scale_estimate(d, &model, &s, &local);
  double ar = scale_allreduce_time(d, 1e9, 8, false);
  CLOSE(r.compute_s, 0.030 + 0.004);
  /* hidden behind 2/3 of the work, all but the last 25 MB bucket */
  CLOSE(r.dp_s, fmax(ar - 0.020, ar * 25e6 / 1e9));
  CLOSE(r.tp_s + r.p2p_s + r.bubble_s, 0);
  CLOSE(r.step_s, r.compute_s + r.dp_s);
  CLOSE(r.samples_per_s, 64 / r.step_s);
  CLOSE(r.memory, 4e9 + 1e9 + 10e9);
  /* two nodes of four: the ring crosses InfiniBand */
  s.gpus_per_node = 4;
  ScaleResult across = scale_estimate(d, &model, &s, &local);
  double ar2 = scale_allreduce_time(d, 1e9, 8, true);
  CLOSE(across.dp_s, fmax(ar2 - 0.020, ar2 * 25e6 / 1e9));
  ck_assert(across.step_s > r.step_s);
}
END_TEST

START_TEST(test_tensor_parallel) {
  const ScaleDevice *d = h200();
  ScaleStep local = {.compute_s = 0.030, .split_s = 0.020, .arena_bytes = 10e9, .tp_bytes = 4e8, .tp_count = 4};
  ScaleSplit s = {.data = 1, .tensor = 4, .stages = 1, .gpus_per_node = 8};
  ScaleResult r = scale_estimate(d, &model, &s, &local);
  CLOSE(r.compute_s, 0.010 + 0.020 / 4 + 0.004 / 4);
  CLOSE(r.tp_s, 4 * scale_allreduce_time(d, 1e8, 4, false));
  CLOSE(r.dp_s, 0);
  CLOSE(r.memory, 5e9 / 4 + 10e9 / 4);
  /* a tensor group of 4 on nodes of 2 GPUs crosses nodes */
  s.gpus_per_node = 2;
  r = scale_estimate(d, &model, &s, &local);
  CLOSE(r.tp_s, 4 * scale_allreduce_time(d, 1e8, 4, true));
}
END_TEST

static double node_s[] = {1, 1, 1, 1};
static double cut_bytes[] = {9e9, 45e6, 9e9, 0};

START_TEST(test_pipeline) {
  const ScaleDevice *d = h200();
  ScaleStep local = {.compute_s = 0.008,
                     .split_s = 0,
                     .arena_bytes = 1e9,
                     .n_nodes = 4,
                     .node_s = node_s,
                     .cut_bytes = cut_bytes};
  ScaleSplit s = {.data = 1, .tensor = 1, .stages = 2, .micro_batches = 8, .gpus_per_node = 8};
  ScaleResult r = scale_estimate(d, &model, &s, &local);
  /* the cheap boundary is the middle one: 45 MB each way */
  double p2p = 2 * 45e6 / 450e9 + 2 * 3e-6;
  double slot = 0.004 + p2p;
  CLOSE(r.stage_share, 0.5);
  CLOSE(r.compute_s, 8 * 0.004 + 0.004 / 2);
  CLOSE(r.p2p_s, 8 * p2p);
  CLOSE(r.bubble_s, 1 * slot);
  CLOSE(r.step_s, (8 + 2 - 1) * slot + 0.004 / 2);
  /* 1F1B holds min(M, S) micro-batches of the stage, GPipe all M */
  CLOSE(r.memory, 5e9 / 2 + 1e9 * 0.5 * 2);
  s.gpipe = true;
  CLOSE(scale_estimate(d, &model, &s, &local).memory, 5e9 / 2 + 1e9 * 0.5 * 8);
  /* the stages on two nodes: the send crosses InfiniBand */
  s.gpipe = false;
  s.gpus_per_node = 1;
  double p2p_ib = 2 * 45e6 / 50e9 + 2 * 8e-6;
  CLOSE(scale_estimate(d, &model, &s, &local).p2p_s, 8 * p2p_ib);
}
END_TEST

static Suite *scaleout_suite(void) {
  Suite *s = suite_create("scaleout");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_device_table);
  tcase_add_test(tc, test_step_time);
  tcase_add_test(tc, test_allreduce);
  tcase_add_test(tc, test_partition);
  tcase_add_test(tc, test_partition_big);
  tcase_add_test(tc, test_data_parallel);
  tcase_add_test(tc, test_tensor_parallel);
  tcase_add_test(tc, test_pipeline);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(scaleout_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* The host-thread contract of docs/runtime.md ("several models, any
 * threads"), run under ThreadSanitizer by tests/threads.sh: 8 threads,
 * each with its own model opened from the same model.so on emu, RUNS
 * runs each (1,000 unless told) on inputs of their own, every output bit-identical to what
 * one thread computes for the same input.  The runtime is built with
 * -fsanitize=thread (tests/tsan.mk), so a data race between the models'
 * runs, the kernel cache or the loader stops the test with TSan's report.
 *
 *     threads MODEL.so [THREADS [RUNS]] */
#include "check_quiet.h"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlcrt.h"

enum { MAX_THREADS = 64, DISTINCT_INPUTS = 5 };

static const char *model_path;
static int n_threads = 8, n_runs = 1000;
static size_t in_bytes, out_bytes;
/* expected[k]: one thread's output for input pattern k, computed first. */
static float *inputs[DISTINCT_INPUTS], *expected[DISTINCT_INPUTS];

typedef struct {
  int id;
  long mismatches, runs;
  char error[512];
} Worker;

static DlrtModel *open_model(char *error, size_t len) {
  DlrtModel *m = NULL;
  if (dlrt_open_file(model_path, "emu", &m) != DLRT_OK) {
    snprintf(error, len, "dlrt_open_file(%s): %s", model_path, dlrt_error(m));
    dlrt_close(m);
    return NULL;
  }
  return m;
}

static int run_once(DlrtModel *m, const float *in, float *out, char *error, size_t len) {
  if (dlrt_set_input(m, 0, in, in_bytes) != DLRT_OK || dlrt_run(m) != DLRT_OK ||
      dlrt_get_output(m, 0, out, out_bytes) != DLRT_OK) {
    snprintf(error, len, "%s", dlrt_error(m));
    return -1;
  }
  return 0;
}

static void *worker_main(void *arg) {
  Worker *w = arg;
  DlrtModel *m = open_model(w->error, sizeof w->error);
  float *out = malloc(out_bytes);
  if (!m || !out) {
    if (!out) snprintf(w->error, sizeof w->error, "out of memory");
    dlrt_close(m);
    free(out);
    return NULL;
  }
  for (int r = 0; r < n_runs; r++) {
    /* Threads walk the inputs in different orders, so that at any moment
     * they run the same kernels on different data. */
    int k = (r + w->id) % DISTINCT_INPUTS;
    if (run_once(m, inputs[k], out, w->error, sizeof w->error) != 0) break;
    w->runs++;
    w->mismatches += memcmp(out, expected[k], out_bytes) != 0;
  }
  dlrt_close(m);
  free(out);
  return NULL;
}

START_TEST(test_threads_bit_identical) {
  char error[512];
  DlrtModel *m = open_model(error, sizeof error);
  ck_assert_msg(m, "%s", error);
  DlrtTensorInfo ii, oi;
  ck_assert_int_eq(dlrt_input_info(m, 0, &ii), DLRT_OK);
  ck_assert_int_eq(dlrt_output_info(m, 0, &oi), DLRT_OK);
  ck_assert_int_eq(ii.dtype, DLRT_F32);
  ck_assert_int_eq(oi.dtype, DLRT_F32);
  in_bytes = ii.nbytes, out_bytes = oi.nbytes;
  uint64_t state = 0x9e3779b97f4a7c15u;
  for (int k = 0; k < DISTINCT_INPUTS; k++) {
    inputs[k] = malloc(in_bytes), expected[k] = malloc(out_bytes);
    ck_assert(inputs[k] && expected[k]);
    for (size_t i = 0; i < in_bytes / sizeof(float); i++) {
      state = state * 6364136223846793005u + 1442695040888963407u;
      inputs[k][i] = (float)((state >> 40) % 2001) / 500.0f - 2.0f;
    }
    ck_assert_msg(run_once(m, inputs[k], expected[k], error, sizeof error) == 0, "%s", error);
  }
  /* Different inputs give different outputs, so a thread reading another
   * thread's buffers could not go unnoticed. */
  ck_assert(memcmp(expected[0], expected[1], out_bytes) != 0);
  dlrt_close(m);

  Worker workers[MAX_THREADS] = {0};
  pthread_t tids[MAX_THREADS];
  for (int t = 0; t < n_threads; t++) {
    workers[t].id = t;
    ck_assert_int_eq(pthread_create(&tids[t], NULL, worker_main, &workers[t]), 0);
  }
  for (int t = 0; t < n_threads; t++) ck_assert_int_eq(pthread_join(tids[t], NULL), 0);
  for (int t = 0; t < n_threads; t++) {
    ck_assert_msg(!workers[t].error[0], "thread %d: %s", t, workers[t].error);
    ck_assert_int_eq(workers[t].runs, n_runs);
    ck_assert_msg(workers[t].mismatches == 0, "thread %d: %ld of %d runs differ from one thread's result", t,
                  workers[t].mismatches, n_runs);
  }
  for (int k = 0; k < DISTINCT_INPUTS; k++) free(inputs[k]), free(expected[k]);
}
END_TEST

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: threads MODEL.so [THREADS [RUNS]]\n");
    return 2;
  }
  model_path = argv[1];
  if (argc > 2) n_threads = atoi(argv[2]);
  if (argc > 3) n_runs = atoi(argv[3]);
  if (n_threads < 1 || n_threads > MAX_THREADS || n_runs < 1) {
    fprintf(stderr, "threads: 1..%d threads and at least 1 run\n", MAX_THREADS);
    return 2;
  }
  Suite *s = suite_create("threads");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_threads_bit_identical);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  /* In the test's own process, so TSan's report and exit code are the test's. */
  srunner_set_fork_status(r, CK_NOFORK);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}

/* The failing-allocator sweep (tests/failalloc.h): each example compiled
 * and run through the JIT API (include/dlcc.h) with its Nth allocation
 * failing, and compiled to a plan (cg_compile) the same way, for every N
 * or every Kth.  Every outcome must be a success with the outputs of an
 * undisturbed run, or a clean error: a failing status with a message,
 * and nothing left allocated after dlc_free.  A crash or an abort fails
 * the suite.  DLCC_ALLOC_SWEEP=full takes every N of every example and
 * backend (many minutes; make check takes a stride of the big ones). */
#include "check_quiet.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "dlcc.h"
#include "frontend/ast.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "runtime/tensorio.h"
#include "tests/failalloc.h"
#include "tests/testutil.h"

static const char *srcdir(void) {
  const char *s = getenv("top_srcdir");
  return s ? s : ".";
}

typedef struct Example {
  const char *file;
  int n_defines;
  dlc_define defines[5];
} Example;

static const Example mlp = {"mlp.dl", 1, {{"N", 1}}};
static const Example lenet = {"lenet.dl", 1, {{"N", 1}}};
static const Example lstm = {"lstm.dl", 5, {{"N", 1}, {"T", 3}, {"V", 20}, {"E", 8}, {"H", 8}}};
static const Example transformer = {"transformer.dl", 3, {{"N", 1}, {"S", 4}, {"D", 16}}};
static const Example mobilenet = {"mobilenetv2.dl", 2, {{"N", 1}, {"HW", 32}}};
static const Example resnet18 = {"resnet18.dl", 2, {{"N", 1}, {"HW", 32}}};
static const Example resnet50 = {"resnet50.dl", 2, {{"N", 1}, {"HW", 32}}};

static bool full_sweep(void) {
  const char *s = getenv("DLCC_ALLOC_SWEEP");
  return s && strcmp(s, "full") == 0;
}

/* Where a crash happened, for the message a signal leaves. */
static char where[256];

static void on_signal(int sig) {
  if (write(2, where, strlen(where)) < 0) _exit(98);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void note_where(const char *what, const Example *ex, long n) {
  snprintf(where, sizeof where, "allocfail: died with allocation %ld failing in %s of %s\n", n, what, ex->file);
}

/* ---- through the JIT API ---- */

typedef struct Run {
  const Example *ex;
  dlc_options opt;
  const char *weights; /* a safetensors file, or NULL: dlc_init_weights */
  /* The outputs of the undisturbed run. */
  int n_out;
  void *want[4];
  size_t want_bytes[4];
} Run;

typedef struct Outcome {
  long counted;
  bool failed; /* the Nth allocation did fail */
  dlc_status st;
} Outcome;

/* Deterministic values that are valid for every input: indices below
 * their bound, small floats. */
static void fill(void *buf, const dlc_tensor_info *in) {
  size_t n = in->nbytes / dlc_dtype_size(in->dtype);
  for (size_t i = 0; i < n; i++) {
    int64_t k = in->index_bound > 0 ? (int64_t)(i * 7 % (size_t)in->index_bound) : (int64_t)(i % 5);
    switch (in->dtype) {
      case DLC_F32: ((float *)buf)[i] = (float)(i % 11) * 0.125f - 0.5f; break;
      case DLC_I64: ((int64_t *)buf)[i] = k; break;
      case DLC_I32: ((int32_t *)buf)[i] = (int32_t)k; break;
      default: ((unsigned char *)buf)[i * dlc_dtype_size(in->dtype)] = (unsigned char)k; break;
    }
  }
}

/* Check allocates for every assertion, so none runs while armed: what
 * went wrong is kept here and asserted after. */
static char problem[1024];

static bool clean(dlc_model *m, dlc_status st, const char *call, long n, const Run *r) {
  if (st == DLC_OK) return true;
  const char *msg = dlc_error(m);
  if ((!msg || !*msg) && !problem[0])
    snprintf(problem, sizeof problem, "%s: %s returned %d with no message (allocation %ld failing)", r->ex->file,
             call, (int)st, n);
  return false;
}

/* One compile and run with allocation n failing (0: none). */
static Outcome run_once(Run *r, long n) {
  char path[512];
  snprintf(path, sizeof path, "%s/examples/%s", srcdir(), r->ex->file);
  note_where("a run", r->ex, n);
  problem[0] = 0;
  failalloc_arm(n);
  dlc_model *m = NULL;
  dlc_status st = dlc_compile_file(path, &r->opt, &m);
  bool ok = clean(m, st, "dlc_compile_file", n, r);
  if (ok) {
    st = r->weights ? dlc_load_weights(m, r->weights) : dlc_init_weights(m, 7);
    ok = clean(m, st, "setting the weights", n, r);
  }
  for (int i = 0; ok && i < dlc_num_inputs(m); i++) {
    dlc_tensor_info in;
    st = dlc_input_info(m, i, &in);
    if (!clean(m, st, "dlc_input_info", n, r)) break;
    failalloc_pause();
    void *buf = calloc(1, in.nbytes);
    if (buf) fill(buf, &in);
    failalloc_resume();
    st = buf ? dlc_set_input(m, in.name, buf, in.nbytes) : DLC_ERR_NOMEM;
    failalloc_pause();
    free(buf);
    failalloc_resume();
    ok = clean(m, st, "dlc_set_input", n, r);
  }
  if (ok) {
    st = dlc_run(m);
    ok = clean(m, st, "dlc_run", n, r);
  }
  for (int i = 0; ok && i < dlc_num_outputs(m) && i < 4; i++) {
    const void *data;
    size_t bytes;
    st = dlc_get_output(m, i, &data, &bytes);
    ok = clean(m, st, "dlc_get_output", n, r);
    if (!ok) break;
    failalloc_pause();
    if (n == 0) {
      r->n_out = i + 1;
      r->want[i] = malloc(bytes);
      if (r->want[i]) memcpy(r->want[i], data, bytes);
      r->want_bytes[i] = bytes;
    } else if (bytes != r->want_bytes[i] || memcmp(data, r->want[i], bytes) != 0) {
      /* A failure the library got around must change nothing. */
      snprintf(problem, sizeof problem, "%s: output %d differs from the undisturbed run's (allocation %ld failed)",
               r->ex->file, i, n);
    }
    failalloc_resume();
  }
  dlc_free(m);
  Outcome o = {failalloc_disarm(), failalloc_failed(), st};
  ck_assert_msg(!problem[0], "%s", problem);
  char one[512];
  long live = failalloc_live(one, sizeof one);
  ck_assert_msg(live == 0, "%s: %ld blocks leaked (%s) with allocation %ld failing", r->ex->file, live, one, n);
  return o;
}

/* Every stride-th allocation of the run fails in turn, from the first. */
static void sweep_run(Run *rp, long stride) {
  Run r = *rp;
  const Example *ex = r.ex;
  const char *backend = r.opt.backend;
  /* Once to fill the kernel cache (a cold cache's compile allocates
   * more), then the run every later one repeats. */
  Outcome base = run_once(&r, 0);
  for (int i = 0; i < r.n_out; i++) free(r.want[i]);
  r.n_out = 0;
  if (base.st == DLC_OK) base = run_once(&r, 0);
  ck_assert_msg(base.st == DLC_OK, "%s on %s: %s", ex->file, backend, "the undisturbed run failed");
  if (full_sweep()) stride = 1;
  long failures = 0;
  for (long n = 1; n <= base.counted; n += stride) {
    Outcome o = run_once(&r, n);
    ck_assert_msg(o.failed, "%s: allocation %ld of %ld never happened", ex->file, n, base.counted);
    failures += o.st != DLC_OK;
  }
  fprintf(stderr, "%s on %s: %ld allocations, every %ld failed in turn: %ld errors, %ld runs unharmed\n", ex->file,
          backend, base.counted, stride, failures, (base.counted + stride - 1) / stride - failures);
  ck_assert_int_gt(failures, 0);
  for (int i = 0; i < r.n_out; i++) free(r.want[i]);
}

static void sweep_jit(const Example *ex, const char *backend, const char *weights, long stride) {
  Run r = {.ex = ex, .opt = {.backend = backend, .n_defines = ex->n_defines, .defines = ex->defines},
           .weights = weights};
  sweep_run(&r, stride);
}

/* ---- the plan builder ---- */

typedef struct PlanJob {
  const Example *ex;
  bool lower_only;
  Graph *g;
  CgResult cg;
} PlanJob;

static int plan_job(Ctx *c, void *data) {
  PlanJob *j = data;
  Define defs[5];
  for (int i = 0; i < j->ex->n_defines; i++) defs[i] = (Define){j->ex->defines[i].name, j->ex->defines[i].value};
  Graph *g = j->g = test_lower_example(c, j->ex->file, j->ex->n_defines, defs);
  if (!g) return 1;
  if (j->lower_only) return 0;
  PassOptions po = {.opt_level = 2};
  if (!pass_run_pipeline(g, &po, NULL)) return 1;
  return cg_compile(g, &j->cg) ? 0 : 1;
}

static void sweep_plan(const Example *ex, long stride) {
  if (full_sweep()) stride = 1;
  long total = -1, failures = 0;
  for (long n = 0; total < 0 || n <= total; n += n == 0 ? 1 : stride) {
    note_where("a plan build", ex, n);
    Ctx c;
    ctx_init(&c);
    PlanJob j = {.ex = ex};
    failalloc_arm(n);
    int rc = ctx_guard(&c, plan_job, &j);
    long counted = failalloc_disarm();
    if (n == 0) ck_assert_msg(rc == 0, "%s: %s", ex->file, diag_text(&c));
    if (rc != 0) {
      ck_assert_msg(diag_text(&c)[0], "%s: plan build failed with no message (allocation %ld failing)", ex->file, n);
      failures++;
    }
    ctx_free(&c);
    if (n == 0) total = counted;
    else ck_assert(failalloc_failed());
    char one[512];
    long live = failalloc_live(one, sizeof one);
    ck_assert_msg(live == 0, "%s: plan build leaked %ld blocks (%s) with allocation %ld failing", ex->file, live,
                  one, n);
  }
  fprintf(stderr, "%s, plan: %ld allocations, every %ld failed in turn: %ld errors\n", ex->file, total, stride,
          failures);
  ck_assert_int_gt(failures, 0);
}

/* A safetensors file with random weights for ex, in dir: the runtime's
 * reader and cJSON's parser get their turn. */
static char *write_weights(const Example *ex, const char *dir) {
  Ctx c;
  ctx_init(&c);
  PlanJob j = {.ex = ex, .lower_only = true};
  ck_assert_msg(ctx_guard(&c, plan_job, &j) == 0, "%s", diag_text(&c));
  TensorMap map;
  char err[512];
  ck_assert_msg(ir_init_params(j.g, 3, IR_INIT_RANDOM, &map, err, sizeof err), "%s", err);
  RtTensorSet set = {.n = map.n, .names = (char **)map.names, .tensors = calloc((size_t)map.n + 1, sizeof(RtTensor))};
  ck_assert_ptr_nonnull(set.tensors);
  for (int i = 0; i < map.n; i++) {
    const Tensor *t = &map.tensors[i];
    RtTensor *rt = &set.tensors[i];
    rt->dtype = (RtDType)t->type.dtype;
    rt->rank = t->type.rank;
    for (int d = 0; d < t->type.rank; d++) rt->dims[d] = t->type.dims[d];
    rt->data = t->data;
    rt->nbytes = ir_tensor_nbytes(&t->type);
  }
  char *path = malloc(strlen(dir) + 32);
  ck_assert_ptr_nonnull(path);
  sprintf(path, "%s/w.safetensors", dir);
  ck_assert_msg(rt_safetensors_write(path, &set, err, sizeof err) == 0, "%s", err);
  free(set.tensors);
  ir_tensor_map_free(&map);
  ctx_free(&c);
  return path;
}

/* ---- the suites ---- */

START_TEST(ref_small_every) {
  sweep_jit(&mlp, "ref", NULL, 1);
  sweep_jit(&lenet, "ref", NULL, 1);
  sweep_jit(&lstm, "ref", NULL, 1);
  sweep_jit(&transformer, "ref", NULL, 1);
}
END_TEST

START_TEST(ref_big_stride) {
  sweep_jit(&mobilenet, "ref", NULL, 101);
  sweep_jit(&resnet18, "ref", NULL, 53);
  sweep_jit(&resnet50, "ref", NULL, 211);
}
END_TEST

START_TEST(plan_every) {
  sweep_plan(&mlp, 1);
  sweep_plan(&lenet, 1);
  sweep_plan(&lstm, 1);
  sweep_plan(&transformer, 1);
}
END_TEST

START_TEST(plan_stride) {
  sweep_plan(&mobilenet, 89);
  sweep_plan(&resnet18, 47);
  sweep_plan(&resnet50, 197);
}
END_TEST

START_TEST(emu_stride) {
  char dir[] = "/tmp/dlcc-allocfail-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char *weights = write_weights(&mlp, dir);
  sweep_jit(&mlp, "emu", weights, 1);
  remove(weights);
  free(weights);
  rmdir(dir);
}
END_TEST

/* int8: calibration on two samples, with the weights the compile binds. */
START_TEST(int8_every) {
  char dir[] = "/tmp/dlcc-allocfail-XXXXXX", path[64], err[256];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char *weights = write_weights(&mlp, dir);
  snprintf(path, sizeof path, "%s/samples", dir);
  ck_assert_int_eq(mkdir(path, 0700), 0);
  float x[784];
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 784; i++) x[i] = (float)((i * (k + 3)) % 17) / 16.0f;
    RtTensor t = {.dtype = RT_F32, .rank = 2, .dims = {1, 784}, .data = x, .nbytes = sizeof x};
    snprintf(path, sizeof path, "%s/samples/%d.npy", dir, k);
    ck_assert_msg(rt_npy_write(path, &t, err, sizeof err) == 0, "%s", err);
  }
  snprintf(path, sizeof path, "%s/samples", dir);
  Run r = {.ex = &mlp,
           .opt = {.backend = "ref", .n_defines = mlp.n_defines, .defines = mlp.defines, .weights = weights,
                   .quantize = "int8", .calibrate_dir = path, .calib_backend = "ref"}};
  sweep_run(&r, 1);
  for (int k = 0; k < 2; k++) {
    snprintf(path, sizeof path, "%s/samples/%d.npy", dir, k);
    remove(path);
  }
  snprintf(path, sizeof path, "%s/samples", dir);
  rmdir(path);
  remove(weights);
  free(weights);
  rmdir(dir);
}
END_TEST

static Suite *allocfail_suite(void) {
  Suite *s = suite_create("allocfail");
  TCase *t = tcase_create("sweep");
  tcase_set_timeout(t, full_sweep() ? 36000 : 600);
  suite_add_tcase(s, t);
  /* DLCC_ALLOC_SWEEP_TEST=name: that test alone (Check here has no
   * CK_RUN_TEST). */
  const char *only = getenv("DLCC_ALLOC_SWEEP_TEST");
  const struct {
    const char *name;
    const TTest *test;
  } tests[] = {{"ref_small_every", ref_small_every}, {"ref_big_stride", ref_big_stride},
               {"plan_every", plan_every},           {"plan_stride", plan_stride},
               {"emu_stride", emu_stride},           {"int8_every", int8_every}};
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
    if (!only || strcmp(only, tests[i].name) == 0) tcase_add_test(t, tests[i].test);
  return s;
}

int main(void) {
  signal(SIGSEGV, on_signal);
  signal(SIGABRT, on_signal);
  signal(SIGBUS, on_signal);
  SRunner *sr = srunner_create(allocfail_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

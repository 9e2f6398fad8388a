/* The training API (dlc_train_* in include/dlcc.h) and dlcc train's host
 * pieces (driver/train_sched.c, train_data.c): the schedules against
 * PyTorch's closed forms (numbers from NumPy), the data order, an SGD
 * step's update read back against its kept gradient, copy_state between
 * steps of two batches and an eval model, what save writes, and the
 * errors. */
#include "check_quiet.h"
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/train.h"
#include "include/dlcc.h"
#include "runtime/tensorio.h"

static char path_buf[4096];

static const char *model_path(const char *file) {
  const char *s = getenv("top_srcdir");
  snprintf(path_buf, sizeof path_buf, "%s/tests/train/%s", s ? s : ".", file);
  return path_buf;
}

static const char *tiny_path(void) { return model_path("tiny.dl"); }

START_TEST(step_lr_and_warmup) {
  TrainSchedule s;
  char err[512];
  ck_assert(train_sched_parse("step:3:0.1", &s, err, sizeof err));
  for (int t = 0; t < 8; t++)
    ck_assert_double_eq_tol(train_sched_lr(&s, 0.5, t, 100), 0.5 * pow(0.1, t / 3), 1e-15);
  /* LinearLR(start_factor=0.25, total_iters=4). */
  ck_assert(train_sched_parse("warmup:4:0.25", &s, err, sizeof err));
  const double f[] = {0.25, 0.4375, 0.625, 0.8125, 1, 1};
  for (int t = 0; t < 6; t++) ck_assert_double_eq_tol(train_sched_lr(&s, 2.0, t, 100), 2.0 * f[t], 1e-15);
  ck_assert(!train_sched_parse("warmup:4,warmup:2", &s, err, sizeof err));
  ck_assert_str_eq(err, "--schedule: 'warmup:2': expected step:N:GAMMA, multistep:M1/M2/...:GAMMA, exp:GAMMA, "
                        "cosine[:T_MAX[:ETA_MIN]], cosine_restarts:T0[:TMULT[:ETA_MIN]], poly[:T[:POWER]], "
                        "linear:START:END[:T], plateau[:PATIENCE[:FACTOR[:MIN_LR]]], "
                        "onecycle[:PCT_START[:DIV[:FINAL_DIV]]], cyclic:BASE_LR:UP[/DOWN][:MODE[:GAMMA]] or "
                        "warmup:N[:START], at most one warmup and one of the others");
  ck_assert(!train_sched_parse("step:2", &s, err, sizeof err));
}
END_TEST

/* MultiStepLR, ExponentialLR, PolynomialLR and LinearLR from 0.1, the
 * rates torch 2.15's schedulers set (stepped as dlcc steps them), in a
 * run of 999 steps; then in a run of 10, SequentialLR of a warmup and
 * ExponentialLR, and Hugging Face's get_cosine_schedule_with_warmup(3,
 * 10) (a LambdaLR from 0). */
START_TEST(more_schedules_as_pytorch) {
  static const struct {
    const char *text;
    int64_t run;
    double lr[8];
  } cases[] = {
      {"multistep:2/5:0.3", 999, {0.1, 0.1, 0.03, 0.03, 0.03, 0.009, 0.009, 0.009}},
      {"exp:0.9", 999,
       {0.1, 0.09000000000000001, 0.08100000000000002, 0.07290000000000002, 0.06561000000000002, 0.05904900000000002,
        0.05314410000000002, 0.04782969000000002}},
      {"poly:6:2", 999,
       {0.1, 0.06944444444444446, 0.04444444444444447, 0.02500000000000001, 0.011111111111111117,
        0.0027777777777777775, 0.0, 0.0}},
      {"linear:1:0.25:4", 999,
       {0.1, 0.08125, 0.0625, 0.04375, 0.024999999999999998, 0.024999999999999998, 0.024999999999999998,
        0.024999999999999998}},
      {"cosine_restarts:3:1:0", 999,
       {0.1, 0.07500000000000001, 0.025000000000000012, 0.1, 0.07500000000000001, 0.025000000000000012, 0.1,
        0.07500000000000001}},
      {"cosine_restarts:2:2:0.001", 999,
       {0.1, 0.0505, 0.1, 0.0855017856687341, 0.0505, 0.0154982143312659, 0.1, 0.0962320368593087}},
      {"warmup:3:0.25+exp:0.5", 10, {0.025, 0.05, 0.07500000000000001, 0.1, 0.05, 0.025, 0.0125, 0.00625}},
      {"warmup:3:0+cosine", 10,
       {0.0, 0.03333333333333333, 0.06666666666666667, 0.1, 0.09504844339512096, 0.08117449009293669,
        0.06112604669781572, 0.03887395330218429}},
  };
  TrainSchedule s;
  char err[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ck_assert_msg(train_sched_parse(cases[i].text, &s, err, sizeof err), "%s", err);
    for (int t = 0; t < 8; t++) {
      double got = train_sched_lr(&s, 0.1, t, cases[i].run);
      ck_assert_msg(fabs(got - cases[i].lr[t]) <= 1e-15, "%s at %d: %.17g, want %.17g", cases[i].text, t, got,
                    cases[i].lr[t]);
    }
  }
  /* OneCycleLR(max_lr=0.1, total_steps=10): the rate and Adam's beta1 */
  static const double cycle_lr[8] = {0.0040000000000000036, 0.052000000000000005, 0.1, 0.09504846320134738,
                                     0.0811745653949763,    0.06112620219362893,  0.03887419780637107,
                                     0.0188258346050237};
  static const double cycle_m[8] = {0.95, 0.8999999999999999, 0.85, 0.854951556604879, 0.8688255099070633,
                                    0.8888739533021842, 0.9111260466978157, 0.9311744900929366};
  ck_assert(train_sched_parse("onecycle", &s, err, sizeof err));
  for (int t = 0; t < 8; t++) {
    double m;
    ck_assert(train_sched_momentum(&s, t, 10, &m));
    ck_assert_msg(fabs(train_sched_lr(&s, 0.1, t, 10) - cycle_lr[t]) <= 1e-15 && fabs(m - cycle_m[t]) <= 1e-15,
                  "onecycle at %d: rate %.17g momentum %.17g", t, train_sched_lr(&s, 0.1, t, 10), m);
  }
  /* CyclicLR(base_lr, max_lr=0.1, ...) with SGD: its rate and momentum,
   * as torch 2.15 sets them */
  static const struct {
    const char *text;
    double lr[12], m[12];
  } cyclics[] = {
      {"cyclic:0.01:2/3:triangular2",
       {0.01, 0.055, 0.09999999999999999, 0.06999999999999999, 0.039999999999999994, 0.01, 0.03250000000000002, 0.055,
        0.039999999999999994, 0.025000000000000015, 0.01, 0.021250000000000012},
       {0.9, 0.8500000000000001, 0.8, 0.8333333333333334, 0.8666666666666667, 0.9, 0.875, 0.8500000000000001,
        0.8666666666666667, 0.8833333333333333, 0.9, 0.8875000000000001}},
      {"cyclic:0.02:3:exp_range:0.9",
       {0.02, 0.04400000000000001, 0.06319999999999999, 0.07832000000000001, 0.05499200000000001, 0.03574639999999999,
        0.02, 0.032754584000000024, 0.042958251199999985, 0.05099363912, 0.03859618347199999, 0.028368282562400017},
       {0.9, 0.87, 0.8460000000000001, 0.8271000000000001, 0.85626, 0.880317, 0.9, 0.8840567699999999,
        0.8713021860000001, 0.8612579511, 0.8767547706600001, 0.889539646797}},
  };
  for (size_t i = 0; i < sizeof cyclics / sizeof cyclics[0]; i++) {
    ck_assert_msg(train_sched_parse(cyclics[i].text, &s, err, sizeof err), "%s", err);
    for (int t = 0; t < 12; t++) {
      double m, lr = train_sched_lr(&s, 0.1, t, 999);
      ck_assert(train_sched_momentum(&s, t, 999, &m));
      ck_assert_msg(fabs(lr - cyclics[i].lr[t]) <= 1e-15 && fabs(m - cyclics[i].m[t]) <= 1e-15,
                    "%s at %d: rate %.17g momentum %.17g", cyclics[i].text, t, lr, m);
    }
  }
  ck_assert(!train_sched_parse("cyclic:0.01:2:triangular:0.9", &s, err, sizeof err)); /* gamma is exp_range's */
  ck_assert(!train_sched_parse("cyclic:0.01:2/0", &s, err, sizeof err));
  ck_assert(!train_sched_parse("warmup:3,cyclic:0.01:2", &s, err, sizeof err));
  /* nor after one (the momentum would count the warmup's steps, the rate not) */
  ck_assert(!train_sched_parse("warmup:3+cyclic:0.01:2", &s, err, sizeof err));
  ck_assert(!train_sched_parse("warmup:3+onecycle", &s, err, sizeof err));
  ck_assert(!train_sched_parse("warmup:3+plateau", &s, err, sizeof err));
  ck_assert_str_eq(err, "--schedule: 'warmup:3+plateau': plateau steps by the validation loss and takes no warmup");
  ck_assert(train_sched_parse("cosine", &s, err, sizeof err));
  double unused;
  ck_assert(!train_sched_momentum(&s, 1, 10, &unused));
  ck_assert(!train_sched_parse("cosine+warmup:3", &s, err, sizeof err));
  ck_assert_str_eq(err, "--schedule: 'cosine+warmup:3': '+' joins a warmup:N[:START] and one decay after it");
  /* ReduceLROnPlateau stepped by these validation losses: the rates
   * torch 2.15's sets (0.89995 is no better than 0.9 by 1e-4; the
   * second's min_lr stops its cuts) */
  static const double metrics[13] = {1.0, 0.9, 0.95, 0.9, 0.89995, 0.91, 0.8, 0.85, 0.86, 0.87, 0.88, 0.7, 0.71};
  static const struct {
    const char *text;
    double lr[13];
  } plateaus[] = {
      {"plateau:1:0.5",
       {0.1, 0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125, 0.00625, 0.00625, 0.00625}},
      {"plateau:0:0.1:0.0015",
       {0.1, 0.1, 0.010000000000000002, 0.0015, 0.0015, 0.0015, 0.0015, 0.0015, 0.0015, 0.0015, 0.0015, 0.0015,
        0.0015}},
  };
  for (size_t i = 0; i < sizeof plateaus / sizeof plateaus[0]; i++) {
    ck_assert_msg(train_sched_parse(plateaus[i].text, &s, err, sizeof err), "%s", err);
    TrainPlateau p;
    train_plateau_start(&p, 0.1);
    for (int e = 0; e < 13; e++) {
      train_plateau_step(&s, &p, metrics[e]);
      ck_assert_msg(fabs(p.lr - plateaus[i].lr[e]) <= 1e-17, "%s after epoch %d: %.17g, want %.17g",
                    plateaus[i].text, e, p.lr, plateaus[i].lr[e]);
    }
  }
  ck_assert(!train_sched_parse("warmup:2,plateau", &s, err, sizeof err));
  ck_assert_str_eq(err, "--schedule: 'warmup:2,plateau': plateau steps by the validation loss and takes no warmup");
  /* poly and linear span the run's steps unless told */
  ck_assert(train_sched_parse("linear:1:0", &s, err, sizeof err));
  ck_assert_double_eq_tol(train_sched_lr(&s, 0.1, 5, 20), 0.075, 1e-15);
  ck_assert(train_sched_parse("poly", &s, err, sizeof err));
  ck_assert_double_eq_tol(train_sched_lr(&s, 0.1, 15, 20), 0.025, 1e-15);
  static const char *const bad[] = {"multistep:5/3:0.1", "multistep::0.1", "linear:0:1", "linear:1:2", "exp", "poly:0"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_msg(!train_sched_parse(bad[i], &s, err, sizeof err), "%s was taken", bad[i]);
    ck_assert_msg(strstr(err, "is not step:N:GAMMA"), "%s: %s", bad[i], err);
  }
  ck_assert(!train_sched_parse("exp:0.9,step:2:0.5", &s, err, sizeof err));
  ck_assert_msg(strstr(err, "at most one warmup and one of the others"), "%s", err);
}
END_TEST

START_TEST(cosine_as_pytorch) {
  /* CosineAnnealingLR(T_max=10, eta_min=0.001) from 0.1, NumPy's closed form. */
  static const double want[] = {0.10000000000000001, 0.097577297556610113, 0.090546341221559898,
                                0.079595369988477424, 0.065796341221559904, 0.050500000000000003,
                                0.035203658778440103, 0.021404630011522593, 0.010453658778440102,
                                0.0034227024433898948, 0.001, 0.003422702443389884};
  TrainSchedule s;
  char err[256];
  ck_assert(train_sched_parse("cosine:10:0.001", &s, err, sizeof err));
  for (int t = 0; t < 12; t++) ck_assert_double_eq_tol(train_sched_lr(&s, 0.1, t, 999), want[t], 1e-15);
  /* T_max defaults to the run's steps. */
  ck_assert(train_sched_parse("cosine", &s, err, sizeof err));
  ck_assert_double_eq_tol(train_sched_lr(&s, 0.1, 5, 10), 0.05, 1e-15);
}
END_TEST

static bool is_permutation(const int64_t *o, int64_t n) {
  bool seen[64] = {0};
  for (int64_t i = 0; i < n; i++) {
    if (o[i] < 0 || o[i] >= n || seen[o[i]]) return false;
    seen[o[i]] = true;
  }
  return true;
}

START_TEST(data_order) {
  int64_t a[50], b[50], c[50];
  train_data_order(50, false, 7, 3, a);
  for (int i = 0; i < 50; i++) ck_assert_int_eq(a[i], i);
  train_data_order(50, true, 7, 3, a);
  train_data_order(50, true, 7, 3, b);
  train_data_order(50, true, 7, 4, c);
  ck_assert(is_permutation(a, 50) && is_permutation(c, 50));
  ck_assert(memcmp(a, b, sizeof a) == 0);
  ck_assert(memcmp(a, c, sizeof a) != 0);
}
END_TEST

/* A data folder of x [40, 3] (x[i][j] = 10 i + j) and target [40] (i),
 * in a fresh temporary directory written into dir. */
static void write_data(char *dir, size_t n) {
  snprintf(dir, n, "/tmp/dlcc-train-data-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  float x[40 * 3];
  int64_t y[40];
  for (int i = 0; i < 40; i++) {
    y[i] = i;
    for (int j = 0; j < 3; j++) x[i * 3 + j] = (float)(10 * i + j);
  }
  RtTensor tx = {.dtype = RT_F32, .rank = 2, .dims = {40, 3}, .data = x, .nbytes = sizeof x};
  RtTensor ty = {.dtype = RT_I64, .rank = 1, .dims = {40}, .data = y, .nbytes = sizeof y};
  char path[512], err[512];
  snprintf(path, sizeof path, "%s/x.npy", dir);
  ck_assert_msg(rt_npy_write(path, &tx, err, sizeof err) == 0, "%s", err);
  snprintf(path, sizeof path, "%s/target.npy", dir);
  ck_assert_msg(rt_npy_write(path, &ty, err, sizeof err) == 0, "%s", err);
}

static void remove_data(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/x.npy", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/target.npy", dir);
  unlink(path);
  rmdir(dir);
}

/* Streamed arrays (--stream-mb): rows gathered from the files equal the
 * same rows read whole, runs of consecutive samples and a padded tail
 * included; the read ahead gives its buffers for exactly the batch it
 * read and none for another; a file that shrinks under a run is an
 * error naming it, in the gather and the read ahead alike; the headers
 * alone read no data. */
START_TEST(streamed_data) {
  char dir[64], err[512];
  write_data(dir, sizeof dir);
  TrainData whole, streamed, headers;
  ck_assert_msg(train_data_read(dir, true, -1, &whole, err, sizeof err), "%s", err);
  ck_assert_msg(train_data_read(dir, true, 0, &streamed, err, sizeof err), "%s", err);
  ck_assert_msg(train_data_read(dir, true, TRAIN_HEADERS_ONLY, &headers, err, sizeof err), "%s", err);
  ck_assert_int_eq(streamed.count, 40);
  for (int i = 0; i < streamed.n; i++) {
    ck_assert(whole.a[i].fd < 0 && whole.a[i].t.data);
    ck_assert(streamed.a[i].fd >= 0 && !streamed.a[i].t.data);
    ck_assert(headers.a[i].fd < 0 && !headers.a[i].t.data);
    ck_assert_int_eq(headers.a[i].t.dims[0], 40);
  }
  const int64_t order[6] = {7, 8, 9, 3, 39, 0};
  unsigned char a[6 * 12], b[6 * 12];
  for (int i = 0; i < whole.n; i++) {
    for (int64_t n = 1; n <= 6; n++) {
      memset(a, 0, sizeof a), memset(b, 1, sizeof b);
      ck_assert(train_data_gather(&whole.a[i], order, n, 6, a, err, sizeof err));
      ck_assert_msg(train_data_gather(&streamed.a[i], order, n, 6, b, err, sizeof err), "%s", err);
      ck_assert(memcmp(a, b, 6 * whole.a[i].sample_bytes) == 0);
    }
  }
  TrainPrefetch *p = train_prefetch_new(&streamed, 6);
  ck_assert_ptr_nonnull(p);
  void *const *bufs;
  train_prefetch_start(p, order, 5);
  ck_assert(train_prefetch_take(p, order, 4, &bufs, err, sizeof err) && !bufs); /* another batch */
  train_prefetch_start(p, order, 5);
  ck_assert(train_prefetch_take(p, order, 5, &bufs, err, sizeof err) && bufs);
  const TrainArray *x = train_data_find(&streamed, "x");
  const float *rows = bufs[x - streamed.a];
  ck_assert(rows[0] == 70 && rows[4 * 3 + 2] == 392);
  int64_t hits, takes;
  train_prefetch_count(p, &hits, &takes);
  ck_assert(hits == 1 && takes == 2);
  /* the file shrinks: x.npy keeps its header and 20 samples */
  char path[512];
  snprintf(path, sizeof path, "%s/x.npy", dir);
  ck_assert_int_eq(truncate(path, x->data_start + 20 * 12), 0);
  ck_assert(!train_data_gather(x, order, 5, 0, b, err, sizeof err));
  ck_assert_msg(strstr(err, "x.npy: cannot read samples 39..39: the file shrank"), "%s", err);
  train_prefetch_start(p, order, 5);
  ck_assert(!train_prefetch_take(p, order, 5, &bufs, err, sizeof err));
  ck_assert_msg(strstr(err, "x.npy: cannot read samples 39..39: the file shrank"), "%s", err);
  train_prefetch_free(p);
  train_data_free(&whole);
  train_data_free(&streamed);
  train_data_free(&headers);
  remove_data(dir);
}
END_TEST

/* A step of tiny.dl's kind on ref at batch: x [batch, 4], class
 * targets, cross_entropy; shapes and dims (3) hold what o points to. */
static void tiny_options(dlc_train_options *o, const char *optimizer, int64_t batch, dlc_input_shape *shapes,
                         int64_t *dims) {
  ck_assert_int_eq(dlc_train_options_init(o, optimizer), DLC_OK);
  dims[0] = dims[2] = batch, dims[1] = 4;
  shapes[0] = (dlc_input_shape){"x", 2, dims};
  shapes[1] = (dlc_input_shape){"target", 1, dims + 2};
  o->model.backend = "ref";
  o->model.n_input_shapes = 2;
  o->model.input_shapes = shapes;
  o->loss = "cross_entropy";
}

static dlc_train *compile_model(const char *file, int64_t batch, const char *optimizer, int eval, int keep_grads) {
  dlc_train_options o;
  dlc_input_shape shapes[2];
  int64_t dims[3];
  tiny_options(&o, optimizer, batch, shapes, dims);
  o.eval = eval;
  o.optimizer.keep_grads = keep_grads;
  dlc_train *t;
  dlc_status st = dlc_train_compile(model_path(file), &o, &t);
  if (st != DLC_OK) fprintf(stderr, "%s", dlc_train_error(t));
  ck_assert_int_eq(st, DLC_OK);
  return t;
}

static dlc_train *compile_tiny(int64_t batch, const char *optimizer, int eval, int keep_grads) {
  return compile_model("tiny.dl", batch, optimizer, eval, keep_grads);
}

static void set_batch(dlc_train *t, int64_t batch) {
  float x[8 * 4];
  int64_t y[8];
  for (int i = 0; i < batch * 4; i++) x[i] = (float)sin(i * 0.7);
  for (int i = 0; i < batch; i++) y[i] = i % 3;
  ck_assert_int_eq(dlc_set_input(dlc_train_model(t), "x", x, sizeof *x * (size_t)batch * 4), DLC_OK);
  ck_assert_int_eq(dlc_set_input(dlc_train_model(t), "target", y, sizeof *y * (size_t)batch), DLC_OK);
}

static int output_named(dlc_model *m, const char *name) {
  for (int i = 0; i < dlc_num_outputs(m); i++) {
    dlc_tensor_info info;
    dlc_output_info(m, i, &info);
    if (strcmp(info.name, name) == 0) return i;
  }
  return -1;
}

START_TEST(sgd_step_updates_by_the_gradient) {
  dlc_train *t = compile_tiny(8, "sgd", 0, 1);
  dlc_model *m = dlc_train_model(t);
  ck_assert_int_eq(dlc_init_weights(m, 3), DLC_OK);
  set_batch(t, 8);
  float before[3], after[3], loss;
  ck_assert_int_eq(dlc_get_weight(m, "fc2.bias", before, sizeof before), DLC_OK);
  ck_assert_int_eq(dlc_train_step(t, 0.25f, &loss), DLC_OK);
  ck_assert(isfinite(loss) && loss > 0);
  ck_assert_int_eq(dlc_get_weight(m, "fc2.bias", after, sizeof after), DLC_OK);
  int gi = output_named(m, "fc2.bias.grad");
  ck_assert_int_ge(gi, 0);
  const void *g;
  size_t n;
  ck_assert_int_eq(dlc_get_output(m, gi, &g, &n), DLC_OK);
  ck_assert_uint_eq(n, sizeof before);
  for (int i = 0; i < 3; i++) ck_assert_float_eq_tol(after[i], before[i] - 0.25f * ((const float *)g)[i], 1e-7);
  /* The same inputs again: a smaller loss. */
  float loss2;
  ck_assert_int_eq(dlc_train_step(t, 0.25f, &loss2), DLC_OK);
  ck_assert_float_lt(loss2, loss);
  dlc_train_free(t);
}
END_TEST

/* dlc_train_compile_string (how pipeline stages compile their IR): the
 * step from tiny.dl's text takes the same step as from the file. */
START_TEST(compile_string_as_file) {
  dlc_train *f = compile_tiny(8, "adam", 0, 0), *s;
  FILE *in = fopen(model_path("tiny.dl"), "r");
  ck_assert(in);
  char text[4096];
  size_t n = fread(text, 1, sizeof text - 1, in);
  fclose(in);
  text[n] = 0;
  dlc_train_options o;
  dlc_input_shape shapes[2];
  int64_t dims[3];
  tiny_options(&o, "adam", 8, shapes, dims);
  ck_assert_int_eq(dlc_train_compile_string("tiny.dl", text, &o, &s), DLC_OK);
  float lf, ls, wf[3], ws[3];
  for (int k = 0; k < 2; k++) {
    dlc_train *t = k ? s : f;
    ck_assert_int_eq(dlc_init_weights(dlc_train_model(t), 5), DLC_OK);
    set_batch(t, 8);
    ck_assert_int_eq(dlc_train_step(t, 0.1f, k ? &ls : &lf), DLC_OK);
    ck_assert_int_eq(dlc_get_weight(dlc_train_model(t), "fc2.bias", k ? ws : wf, sizeof wf), DLC_OK);
  }
  ck_assert(lf == ls && memcmp(wf, ws, sizeof wf) == 0);
  dlc_train_free(s);
  ck_assert_int_eq(dlc_train_compile_string("bad.dl", "model m(", &o, &s), DLC_ERR_COMPILE);
  ck_assert_ptr_nonnull(strstr(dlc_train_error(s), "bad.dl:1:"));
  dlc_train_free(s);
  dlc_train_free(f);
}
END_TEST

/* dlc_optimizer.grad_stats_input (a pipeline stage's optimizer): the
 * clip's sum of squares is the input's, not the step's own gradients':
 * 0 leaves the step unclipped (the same weights as without a clip), a
 * huge one all but stops it; with f16's split loss scaling
 * (DLC_LOSS_SCALE_FED) the overflow flag is an input too, and NaN there
 * skips the step.  A loss_scale out of range is refused. */
static dlc_train *compile_stats(double clip, const char *precision, int loss_scale) {
  dlc_train_options o;
  dlc_input_shape shapes[2];
  int64_t dims[3];
  tiny_options(&o, "sgd", 8, shapes, dims);
  o.model.precision = precision;
  o.model.loss_scale = loss_scale;
  o.optimizer.clip_grad_norm = clip;
  o.optimizer.grad_stats_input = clip > 0 || loss_scale;
  dlc_train *t;
  dlc_status st = dlc_train_compile(model_path("tiny.dl"), &o, &t);
  if (st != DLC_OK) fprintf(stderr, "%s", dlc_train_error(t));
  ck_assert_int_eq(st, DLC_OK);
  ck_assert_int_eq(dlc_init_weights(dlc_train_model(t), 3), DLC_OK);
  set_batch(t, 8);
  return t;
}

static void stats_step(dlc_train *t, const char *input, float value, float *bias) {
  ck_assert_int_eq(dlc_set_input(dlc_train_model(t), input, &value, sizeof value), DLC_OK);
  ck_assert_int_eq(dlc_train_step(t, 0.25f, NULL), DLC_OK);
  ck_assert_int_eq(dlc_get_weight(dlc_train_model(t), "fc2.bias", bias, 3 * sizeof *bias), DLC_OK);
}

START_TEST(grad_stats_from_inputs) {
  float plain[3], zero[3], huge[3], before[3];
  dlc_train *t = compile_tiny(8, "sgd", 0, 0);
  ck_assert_int_eq(dlc_init_weights(dlc_train_model(t), 3), DLC_OK);
  set_batch(t, 8);
  ck_assert_int_eq(dlc_get_weight(dlc_train_model(t), "fc2.bias", before, sizeof before), DLC_OK);
  ck_assert_int_eq(dlc_train_step(t, 0.25f, NULL), DLC_OK);
  ck_assert_int_eq(dlc_get_weight(dlc_train_model(t), "fc2.bias", plain, sizeof plain), DLC_OK);
  dlc_train_free(t);
  t = compile_stats(0.5, NULL, 0);
  stats_step(t, "dlcc.optim.grad_sumsq", 0, zero);
  dlc_train_free(t);
  t = compile_stats(0.5, NULL, 0);
  stats_step(t, "dlcc.optim.grad_sumsq", 1e12f, huge);
  dlc_train_free(t);
  for (int i = 0; i < 3; i++) {
    ck_assert_float_eq(zero[i], plain[i]);
    ck_assert(plain[i] != before[i] && fabsf(huge[i] - before[i]) < 1e-6f * fabsf(plain[i] - before[i]) + 1e-9f);
  }
  /* f16, the gradients scaled elsewhere: a NaN flag skips the step and
   * halves the scale, 0 takes it */
  float skipped[3], taken[3], scale;
  t = compile_stats(0, "f16", DLC_LOSS_SCALE_FED);
  stats_step(t, "dlcc.optim.nonfinite", NAN, skipped);
  ck_assert_int_eq(dlc_get_weight(dlc_train_model(t), "dlcc.amp.scale", &scale, sizeof scale), DLC_OK);
  ck_assert_float_eq(scale, 32768);
  stats_step(t, "dlcc.optim.nonfinite", 0, taken);
  dlc_train_free(t);
  for (int i = 0; i < 3; i++) ck_assert(skipped[i] == before[i] && taken[i] != before[i]);
  dlc_train_options o;
  ck_assert_int_eq(dlc_train_options_init(&o, "sgd"), DLC_OK);
  int64_t xd[2] = {8, 4};
  dlc_input_shape shape = {"x", 2, xd};
  o.model.backend = "ref";
  o.model.n_input_shapes = 1;
  o.model.input_shapes = &shape;
  o.model.loss_scale = 3;
  ck_assert_int_eq(dlc_train_compile(model_path("tiny.dl"), &o, &t), DLC_ERR_COMPILE);
  ck_assert_ptr_nonnull(strstr(dlc_train_error(t), "loss_scale must be 0, DLC_LOSS_SCALE_SEED or DLC_LOSS_SCALE_FED, got 3"));
  dlc_train_free(t);
}
END_TEST

START_TEST(copy_state_and_save) {
  dlc_train *t = compile_tiny(8, "adamw", 0, 0), *rest = compile_tiny(6, "adamw", 0, 0);
  dlc_train *eval = compile_tiny(8, "adamw", 1, 0);
  ck_assert_int_eq(dlc_init_weights(dlc_train_model(t), 1), DLC_OK);
  set_batch(t, 8);
  ck_assert_int_eq(dlc_train_step(t, 0.01f, NULL), DLC_OK);
  ck_assert_int_eq(dlc_train_copy_state(rest, t), DLC_OK);
  ck_assert_int_eq(dlc_train_copy_state(eval, t), DLC_OK);
  ck_assert_int_eq(dlc_train_num_params(rest), dlc_train_num_params(t));
  ck_assert_int_lt(dlc_train_num_params(eval), dlc_train_num_params(t)); /* no optimizer state */
  float a[24], b[24], c[24];
  ck_assert_int_eq(dlc_get_weight(dlc_train_model(t), "dlcc.optim.fc2.weight.exp_avg", a, sizeof a), DLC_OK);
  ck_assert_int_eq(dlc_get_weight(dlc_train_model(rest), "dlcc.optim.fc2.weight.exp_avg", b, sizeof b), DLC_OK);
  ck_assert(memcmp(a, b, sizeof a) == 0);
  ck_assert_int_eq(dlc_get_weight(dlc_train_model(t), "fc2.weight", a, sizeof a), DLC_OK);
  ck_assert_int_eq(dlc_get_weight(dlc_train_model(eval), "fc2.weight", c, sizeof c), DLC_OK);
  ck_assert(memcmp(a, c, sizeof a) == 0);
  /* An eval model takes no step; its loss is one value per sample. */
  ck_assert_int_eq(dlc_train_step(eval, 0.1f, NULL), DLC_ERR_ARGUMENT);
  ck_assert_str_eq(dlc_train_error(eval), "dlcc: error: an eval model takes no step: dlc_run it\n");
  dlc_tensor_info info;
  ck_assert_int_eq(dlc_output_info(dlc_train_model(eval), 0, &info), DLC_OK);
  ck_assert_int_eq(info.rank, 1);
  ck_assert_int_eq(info.dims[0], 8);

  char dir[] = "/tmp/dlcc_train_api_XXXXXX", sd[64], ck[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(sd, sizeof sd, "%s/w.safetensors", dir);
  snprintf(ck, sizeof ck, "%s/c.safetensors", dir);
  const char *k[] = {"epoch"}, *v[] = {"7"};
  ck_assert_int_eq(dlc_train_save(t, sd, 0, 0, NULL, NULL), DLC_OK);
  ck_assert_int_eq(dlc_train_save(t, ck, 1, 1, k, v), DLC_OK);
  RtTensorSet s;
  char err[256];
  ck_assert_int_eq(rt_safetensors_read(sd, &s, err, sizeof err), 0);
  ck_assert_int_eq(s.n, 4);
  ck_assert_str_eq(s.names[0], "fc1.weight");
  ck_assert_int_eq(s.n_meta, 0);
  rt_tensor_set_free(&s);
  ck_assert_int_eq(rt_safetensors_read(ck, &s, err, sizeof err), 0);
  ck_assert_int_eq(s.n, dlc_train_num_params(t));
  ck_assert_ptr_nonnull(rt_tensor_set_find(&s, "dlcc.optim.step"));
  rt_tensor_set_free(&s);
  char *value;
  ck_assert_int_eq(dlc_train_checkpoint_meta(t, ck, "epoch", &value), DLC_OK);
  ck_assert_str_eq(value, "7");
  free(value);
  ck_assert_int_eq(dlc_train_checkpoint_meta(t, ck, "position", &value), DLC_ERR_WEIGHTS);
  ck_assert_int_eq(dlc_train_checkpoint_meta(t, sd, "epoch", &value), DLC_ERR_WEIGHTS);
  /* Resuming from the checkpoint gives the same state. */
  ck_assert_int_eq(dlc_load_weights(dlc_train_model(rest), ck), DLC_OK);
  ck_assert_int_eq(dlc_get_weight(dlc_train_model(rest), "fc2.weight", b, sizeof b), DLC_OK);
  ck_assert(memcmp(a, b, sizeof a) == 0);
  unlink(sd), unlink(ck), rmdir(dir);
  dlc_train_free(t), dlc_train_free(rest), dlc_train_free(eval);
}
END_TEST

/* PyTorch's BatchNorm has the buffer num_batches_tracked, which dlcc's
 * model lacks: the state_dict gains it, the steps taken, and dlcc loads
 * the file back. */
START_TEST(batchnorm_state_dict) {
  dlc_train *t = compile_model("tinybn.dl", 8, "sgd", 0, 0), *eval = compile_model("tinybn.dl", 8, "sgd", 1, 0);
  ck_assert_int_eq(dlc_init_weights(dlc_train_model(t), 2), DLC_OK);
  set_batch(t, 8);
  ck_assert_int_eq(dlc_train_step(t, 0.1f, NULL), DLC_OK);
  ck_assert_int_eq(dlc_train_step(t, 0.1f, NULL), DLC_OK);
  char dir[] = "/tmp/dlcc_train_bn_XXXXXX", sd[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(sd, sizeof sd, "%s/w.safetensors", dir);
  ck_assert_int_eq(dlc_train_save(t, sd, 0, 0, NULL, NULL), DLC_OK);
  RtTensorSet s;
  char err[256];
  ck_assert_int_eq(rt_safetensors_read(sd, &s, err, sizeof err), 0);
  const RtTensor *n = rt_tensor_set_find(&s, "bn.num_batches_tracked");
  ck_assert_ptr_nonnull(n);
  ck_assert_int_eq(n->dtype, RT_I64);
  ck_assert_int_eq(n->rank, 0);
  ck_assert_int_eq(*(const int64_t *)n->data, 2);
  ck_assert_ptr_nonnull(rt_tensor_set_find(&s, "bn.running_var"));
  rt_tensor_set_free(&s);
  dlc_status st = dlc_load_weights(dlc_train_model(eval), sd);
  ck_assert_msg(st == DLC_OK, "%s", dlc_train_error(eval));
  unlink(sd), rmdir(dir);
  dlc_train_free(t), dlc_train_free(eval);
}
END_TEST

START_TEST(option_errors) {
  dlc_train_options o;
  ck_assert_int_eq(dlc_train_options_init(&o, "lbfgs"), DLC_ERR_ARGUMENT);
  ck_assert_int_eq(dlc_train_options_init(&o, "rmsprop"), DLC_OK);
  ck_assert_double_eq_tol(o.optimizer.alpha, 0.99, 1e-15);
  ck_assert_int_eq(dlc_train_options_init(&o, "adagrad"), DLC_OK);
  ck_assert_double_eq_tol(o.optimizer.eps, 1e-10, 1e-20);
  ck_assert_int_eq(dlc_train_options_init(&o, "adamw"), DLC_OK);
  ck_assert_double_eq_tol(o.optimizer.weight_decay, 0.01, 1e-15);
  ck_assert_int_eq(o.ignore_index, -100);
  o.loss = "hinge";
  dlc_train *t;
  ck_assert_int_eq(dlc_train_compile(tiny_path(), &o, &t), DLC_ERR_ARGUMENT);
  ck_assert_str_eq(dlc_train_error(t),
                   "dlcc: error: unknown loss 'hinge' (expected cross_entropy, nll, mse, l1, smooth_l1, "
                   "bce_with_logits, huber, bce or kl_div)\n");
  dlc_train_free(t);
  o.loss = "mse";
  static const float w[3] = {1, 2, 3};
  o.class_weight = w;
  o.class_weight_count = 3;
  ck_assert_int_eq(dlc_train_compile(tiny_path(), &o, &t), DLC_ERR_ARGUMENT);
  ck_assert_str_eq(dlc_train_error(t), "dlcc: error: class_weight is for cross_entropy and nll\n");
  dlc_train_free(t);
  o.class_weight = NULL;
  o.loss = "cross_entropy";
  o.model.grad = 1;
  ck_assert_int_eq(dlc_train_compile(tiny_path(), &o, &t), DLC_ERR_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(dlc_train_error(t), "takes no grad, optimizer, quantize or weights"));
  dlc_train_free(t);
  o.model.grad = 0;
  o.eval = 1;
  o.loss = NULL;
  ck_assert_int_eq(dlc_train_compile(tiny_path(), &o, &t), DLC_ERR_ARGUMENT);
  ck_assert_str_eq(dlc_train_error(t), "dlcc: error: an eval model needs a loss\n");
  dlc_train_free(t);
  /* a batchnorm's statistics over ranks are a training step's */
  int64_t xd[2] = {8, 4};
  dlc_input_shape shape = {"x", 2, xd};
  dlc_options mo = {.backend = "ref", .n_input_shapes = 1, .input_shapes = &shape, .sync_bn = 2};
  dlc_model *m;
  ck_assert_int_eq(dlc_compile_file(model_path("tinybn.dl"), &mo, &m), DLC_ERR_COMPILE);
  ck_assert_ptr_nonnull(strstr(dlc_error(m), "sync_bn must be 0, or a count of ranks with grad"));
  dlc_free(m);
  t = compile_tiny(8, "sgd", 0, 0);
  ck_assert_int_eq(dlc_train_save(t, "/nonexistent/x.safetensors", 0, 0, NULL, NULL), DLC_ERR_ARGUMENT);
  ck_assert_str_eq(dlc_train_error(t), "dlcc: error: the training step has no weights bound yet\n");
  dlc_train_free(t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("train_api");
  TCase *tc = tcase_create("train_api");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, step_lr_and_warmup);
  tcase_add_test(tc, cosine_as_pytorch);
  tcase_add_test(tc, more_schedules_as_pytorch);
  tcase_add_test(tc, data_order);
  tcase_add_test(tc, streamed_data);
  tcase_add_test(tc, sgd_step_updates_by_the_gradient);
  tcase_add_test(tc, compile_string_as_file);
  tcase_add_test(tc, grad_stats_from_inputs);
  tcase_add_test(tc, copy_state_and_save);
  tcase_add_test(tc, batchnorm_state_dict);
  tcase_add_test(tc, option_errors);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

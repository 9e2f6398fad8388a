/* Whole-model tests through the public API (include/dlcc.h): every example
 * under examples/ runs with random weights and inputs; LeNet and the MLP
 * run with weights this test writes and are compared with forward passes
 * written here as plain loops; bad weights and bad inputs give their exact
 * messages.  Files live in a mkdtemp dir made per test. */
#include "check_quiet.h"
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "include/dlcc.h"
#include "runtime/tensorio.h"
#include "tests/testutil.h"

static char dir[64];
static char err[4096];
static int nfiles;

static void setup(void) {
  strcpy(dir, "/tmp/dlcc-models-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  nfiles = 0;
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

static const char *path_for(const char *name) {
  static char paths[32][128];
  char *p = paths[nfiles++ % 32];
  snprintf(p, 128, "%s/%s", dir, name);
  return p;
}

static const char *srcdir(void) {
  const char *s = getenv("top_srcdir");
  return s ? s : ".";
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
  s[n] = 0;
  fclose(f);
  return s;
}

/* splitmix64: the test's own numbers, independent of ir/init.c. */
static uint64_t rng_state;
static uint64_t rng_next(void) { return test_splitmix64(&rng_state); }
static double rng_uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(rng_next() >> 11) / 9007199254740992.0;
}

static dlc_model *compile_text(const char *name, const char *text, int n_defines,
                               const dlc_define *defines) {
  dlc_options opt = {.n_defines = n_defines, .defines = defines};
  dlc_model *m = NULL;
  dlc_status st = dlc_compile_string(name, text, &opt, &m);
  ck_assert_msg(st == DLC_OK, "%s does not compile: %s", name, dlc_error(m));
  return m;
}

static dlc_model *compile_example_on(const char *file, int n_defines, const dlc_define *defines,
                                     const char *backend) {
  char path[512];
  snprintf(path, sizeof path, "%s/examples/%s", srcdir(), file);
  dlc_options opt = {.n_defines = n_defines, .defines = defines, .backend = backend};
  dlc_model *m = NULL;
  dlc_status st = dlc_compile_file(path, &opt, &m);
  ck_assert_msg(st == DLC_OK, "%s does not compile: %s", path, dlc_error(m));
  return m;
}

static dlc_model *compile_example(const char *file, int n_defines, const dlc_define *defines) {
  return compile_example_on(file, n_defines, defines, NULL);
}

/* Random data for every input: floats in [-1, 1), indices in [0, bound). */
static void set_random_inputs(dlc_model *m, uint64_t seed) {
  rng_state = seed;
  for (int i = 0; i < dlc_num_inputs(m); i++) {
    dlc_tensor_info in;
    ck_assert_int_eq(dlc_input_info(m, i, &in), DLC_OK);
    size_t n = in.nbytes / dlc_dtype_size(in.dtype);
    void *data = malloc(in.nbytes ? in.nbytes : 1);
    for (size_t k = 0; k < n; k++) {
      switch (in.dtype) {
      case DLC_F32: ((float *)data)[k] = (float)rng_uniform(-1, 1); break;
      case DLC_I64:
        ck_assert_int_gt(in.index_bound, 0);
        ((int64_t *)data)[k] = (int64_t)(rng_next() % (uint64_t)in.index_bound);
        break;
      case DLC_I32:
        ck_assert_int_gt(in.index_bound, 0);
        ((int32_t *)data)[k] = (int32_t)(rng_next() % (uint64_t)in.index_bound);
        break;
      default: ck_abort_msg("input '%s': no random data for %s", in.name, dlc_dtype_name(in.dtype));
      }
    }
    ck_assert_msg(dlc_set_input(m, in.name, data, in.nbytes) == DLC_OK, "%s", dlc_error(m));
    free(data);
  }
}

/* ---- every example runs ---- */

/* How each example is shrunk (-D) to keep the suite fast; 64x64 images
 * still leave 2x2 before the global pooling.  from/to, when set, rewrite
 * the text first for what -D cannot reach.  out: the output's shape after
 * shrinking. */
typedef struct Example {
  const char *file;
  int n_defines;
  dlc_define defines[5];
  const char *from, *to;
  int out_rank;
  int64_t out[4];
} Example;

static const Example examples[] = {
    {"mlp.dl", 1, {{"N", 3}}, NULL, NULL, 2, {3, 10}},
    {"lenet.dl", 1, {{"N", 2}}, NULL, NULL, 2, {2, 10}},
    {"lstm.dl", 5, {{"N", 2}, {"T", 6}, {"V", 500}, {"E", 32}, {"H", 48}}, NULL, NULL, 3, {2, 6, 500}},
    {"transformer.dl", 3, {{"N", 2}, {"S", 7}, {"D", 64}}, NULL, NULL, 3, {2, 7, 64}},
    {"resnet18.dl", 2, {{"N", 1}, {"HW", 64}}, NULL, NULL, 2, {1, 1000}},
    {"resnet50.dl", 2, {{"N", 1}, {"HW", 64}}, NULL, NULL, 2, {1, 1000}},
    {"mobilenetv2.dl", 2, {{"N", 2}, {"HW", 64}}, NULL, NULL, 2, {2, 1000}},
    {"gpt2_block.dl", 1, {{"S", 7}}, NULL, NULL, 3, {2, 7, 64}},
    {"llama_block.dl", 1, {{"S", 7}}, NULL, NULL, 3, {2, 7, 64}},
    {"bert_layer.dl", 1, {{"S", 7}}, NULL, NULL, 3, {2, 7, 64}},
    {"unet.dl", 2, {{"HW", 32}, {"C", 8}}, NULL, NULL, 4, {1, 2, 32, 32}},
};
enum { N_EXAMPLES = sizeof examples / sizeof examples[0] };

START_TEST(every_example_is_listed) {
  char path[512];
  snprintf(path, sizeof path, "%s/examples", srcdir());
  DIR *d = opendir(path);
  ck_assert_msg(d != NULL, "cannot open %s", path);
  int found = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len < 3 || strcmp(e->d_name + len - 3, ".dl") != 0) continue;
    bool listed = false;
    for (int i = 0; i < N_EXAMPLES; i++) listed |= strcmp(examples[i].file, e->d_name) == 0;
    ck_assert_msg(listed, "examples/%s is not in test_models.c's examples table", e->d_name);
    found++;
  }
  closedir(d);
  ck_assert_int_eq(found, N_EXAMPLES);
}
END_TEST

static char *replace_once(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  ck_assert_msg(at != NULL, "'%s' not found: update the examples table", from);
  ck_assert_msg(strstr(at + 1, from) == NULL, "'%s' occurs twice", from);
  size_t head = (size_t)(at - text), nf = strlen(from), nt = strlen(to);
  char *s = malloc(strlen(text) - nf + nt + 1);
  memcpy(s, text, head);
  memcpy(s + head, to, nt);
  strcpy(s + head + nt, at + nf);
  return s;
}

START_TEST(example_runs_with_random_weights) {
  const Example *ex = &examples[_i];
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  dlc_model *m;
  if (ex->from) {
    char path[512];
    snprintf(path, sizeof path, "%s/examples/%s", srcdir(), ex->file);
    char *text = slurp(path);
    char *small = replace_once(text, ex->from, ex->to);
    m = compile_text(ex->file, small, ex->n_defines, ex->defines);
    free(small);
    free(text);
  } else {
    m = compile_example(ex->file, ex->n_defines, ex->defines);
  }
  ck_assert_int_eq(dlc_init_weights(m, 7), DLC_OK);
  set_random_inputs(m, 11);
  ck_assert_msg(dlc_run(m) == DLC_OK, "%s: %s", ex->file, dlc_error(m));
  ck_assert_int_ge(dlc_num_outputs(m), 1);

  dlc_tensor_info out;
  ck_assert_int_eq(dlc_output_info(m, 0, &out), DLC_OK);
  ck_assert_int_eq(out.dtype, DLC_F32);
  ck_assert_int_eq(out.rank, ex->out_rank);
  for (int d = 0; d < ex->out_rank; d++) ck_assert_int_eq(out.dims[d], ex->out[d]);
  for (int k = 0; k < dlc_num_outputs(m); k++) {
    dlc_tensor_info info;
    ck_assert_int_eq(dlc_output_info(m, k, &info), DLC_OK);
    const void *data;
    size_t nbytes;
    ck_assert_int_eq(dlc_get_output(m, k, &data, &nbytes), DLC_OK);
    ck_assert_uint_eq(nbytes, info.nbytes);
    size_t numel = 1;
    for (int d = 0; d < info.rank; d++) numel *= (size_t)info.dims[d];
    ck_assert_uint_eq(nbytes, numel * dlc_dtype_size(info.dtype));
    if (info.dtype != DLC_F32) continue;
    const float *y = data;
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < numel; i++) {
      ck_assert_msg(isfinite(y[i]), "%s: output '%s'[%zu] is %g", ex->file, info.name, i, y[i]);
      lo = fminf(lo, y[i]);
      hi = fmaxf(hi, y[i]);
    }
    /* Random weights and inputs give varied outputs, not a constant. */
    ck_assert_msg(numel < 2 || hi > lo, "%s: output '%s' is constant %g", ex->file, info.name, lo);
  }
  dlc_free(m);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%s: %.2f s\n", ex->file, (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
}
END_TEST

/* The generated CUDA C, run by the emu device with the planned arena,
 * against the reference interpreter: same weights, same inputs, every
 * output within 1e-5 of the reference, relative to the output's scale. */
START_TEST(example_on_emu_matches_reference) {
  const Example *ex = &examples[_i];
  if (ex->from) return; /* rewritten text: covered by the run above */
  dlc_model *emu = compile_example_on(ex->file, ex->n_defines, ex->defines, "emu");
  dlc_model *ref = compile_example_on(ex->file, ex->n_defines, ex->defines, "ref");
  dlc_model *both[2] = {emu, ref};
  for (int b = 0; b < 2; b++) {
    ck_assert_msg(dlc_init_weights(both[b], 5) == DLC_OK, "%s", dlc_error(both[b]));
    set_random_inputs(both[b], 13);
    ck_assert_msg(dlc_run(both[b]) == DLC_OK, "%s on %s: %s", ex->file, b ? "ref" : "emu",
                  dlc_error(both[b]));
  }
  for (int k = 0; k < dlc_num_outputs(ref); k++) {
    dlc_tensor_info info;
    ck_assert_int_eq(dlc_output_info(ref, k, &info), DLC_OK);
    const void *got, *want;
    size_t n1, n2;
    ck_assert_int_eq(dlc_get_output(emu, k, &got, &n1), DLC_OK);
    ck_assert_int_eq(dlc_get_output(ref, k, &want, &n2), DLC_OK);
    ck_assert_uint_eq(n1, n2);
    if (info.dtype != DLC_F32) {
      ck_assert_msg(memcmp(got, want, n1) == 0, "%s: output '%s' differs", ex->file, info.name);
      continue;
    }
    const float *a = got, *w = want;
    size_t n = n1 / sizeof(float);
    double scale = 0, worst = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(w[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - w[i]) / fmax(scale, 1e-6));
    printf("%s: output '%s' on emu: max error %.3g relative to its scale %.3g\n", ex->file, info.name,
           worst, scale);
    ck_assert_msg(worst <= 1e-5, "%s: output '%s' on emu differs from ref by %.3g (relative)", ex->file,
                  info.name, worst);
  }
  dlc_free(emu);
  dlc_free(ref);
}
END_TEST

/* Reproducible random weights: the same seed gives the same outputs. */
static float *mlp_output_for_seed(uint64_t seed) {
  dlc_define n = {"N", 2};
  dlc_model *m = compile_example("mlp.dl", 1, &n);
  ck_assert_int_eq(dlc_init_weights(m, seed), DLC_OK);
  set_random_inputs(m, 3);
  ck_assert_int_eq(dlc_run(m), DLC_OK);
  const void *y;
  size_t nbytes;
  ck_assert_int_eq(dlc_get_output(m, 0, &y, &nbytes), DLC_OK);
  ck_assert_uint_eq(nbytes, 2 * 10 * sizeof(float));
  float *copy = malloc(nbytes);
  memcpy(copy, y, nbytes);
  dlc_free(m);
  return copy;
}

START_TEST(random_weights_follow_the_seed) {
  float *a = mlp_output_for_seed(5), *b = mlp_output_for_seed(5), *c = mlp_output_for_seed(6);
  ck_assert_mem_eq(a, b, 20 * sizeof(float));
  ck_assert_int_ne(memcmp(a, c, 20 * sizeof(float)), 0);
  free(a);
  free(b);
  free(c);
}
END_TEST

/* ---- LeNet and the MLP against forward passes written here ---- */

typedef struct Weights {
  int n;
  char *names[16];
  RtTensor tensors[16];
} Weights;

/* Adds an f32 tensor of uniform(-b, b) values (plus shift) and returns its data. */
static float *add_tensor(Weights *w, const char *name, int rank, const int64_t *dims, double b,
                         double shift) {
  ck_assert_int_lt(w->n, 16);
  RtTensor *t = &w->tensors[w->n];
  memset(t, 0, sizeof *t);
  t->dtype = RT_F32;
  t->rank = rank;
  size_t n = 1;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i], n *= (size_t)dims[i];
  t->nbytes = n * sizeof(float);
  float *data = malloc(t->nbytes);
  for (size_t i = 0; i < n; i++) data[i] = (float)(rng_uniform(-b, b) + shift);
  t->data = data;
  w->names[w->n++] = strdup(name);
  return data;
}

/* name.weight [out, in] and name.bias [out]: gain times PyTorch's default scale. */
static void add_linear(Weights *w, const char *name, int64_t out, int64_t in, double gain,
                       float **wt, float **bias) {
  char buf[64];
  snprintf(buf, sizeof buf, "%s.weight", name);
  *wt = add_tensor(w, buf, 2, (int64_t[]){out, in}, gain / sqrt((double)in), 0);
  snprintf(buf, sizeof buf, "%s.bias", name);
  *bias = add_tensor(w, buf, 1, (int64_t[]){out}, gain / sqrt((double)in), 0);
}

static void add_conv(Weights *w, const char *name, int64_t out, int64_t in, int64_t k, float **wt,
                     float **bias) {
  char buf[64];
  double b = 1 / sqrt((double)(in * k * k));
  snprintf(buf, sizeof buf, "%s.weight", name);
  *wt = add_tensor(w, buf, 4, (int64_t[]){out, in, k, k}, b, 0);
  snprintf(buf, sizeof buf, "%s.bias", name);
  *bias = add_tensor(w, buf, 1, (int64_t[]){out}, b, 0);
}

static const char *write_weights(const Weights *w, const char *file) {
  const char *p = path_for(file);
  RtTensorSet set = {.n = w->n, .names = (char **)w->names, .tensors = (RtTensor *)w->tensors};
  ck_assert_msg(rt_safetensors_write(p, &set, err, sizeof err) == 0, "%s", err);
  return p;
}

static void free_weights(Weights *w) {
  for (int i = 0; i < w->n; i++) {
    free(w->names[i]);
    free(w->tensors[i].data);
  }
  w->n = 0;
}

/* y[n][o] = b[o] + sum_i x[n][i] w[o][i] */
static void ref_linear(const double *x, int n, int in, const float *w, const float *b, int out,
                       double *y) {
  for (int r = 0; r < n; r++)
    for (int o = 0; o < out; o++) {
      double s = b[o];
      for (int i = 0; i < in; i++) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
}

/* max |got - want| over max(max |want|, 1e-3); prints it for the record. */
static double rel_error(const char *what, const float *got, const double *want, size_t n) {
  double diff = 0, scale = 1e-3;
  for (size_t i = 0; i < n; i++) {
    diff = fmax(diff, fabs(got[i] - want[i]));
    scale = fmax(scale, fabs(want[i]));
  }
  printf("%s: max |dlcc - loops| %.3g, relative %.3g\n", what, diff, diff / scale);
  return diff / scale;
}

static const float *run_output(dlc_model *m, size_t want_floats) {
  ck_assert_msg(dlc_run(m) == DLC_OK, "%s", dlc_error(m));
  const void *y;
  size_t nbytes;
  ck_assert_int_eq(dlc_get_output(m, 0, &y, &nbytes), DLC_OK);
  ck_assert_uint_eq(nbytes, want_floats * sizeof(float));
  return y;
}

static double gelu_tanh(double x) {
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

START_TEST(mlp_matches_plain_loops) {
  enum { N = 3 };
  rng_state = 42;
  Weights w = {0};
  float *w1, *b1, *w2, *b2, *w3, *b3;
  /* Pre-activations of a few units, where gelu's tanh approximation and
   * its erf form differ by 1e-3, so the test sees which one ran. */
  add_linear(&w, "fc1", 512, 784, 3, &w1, &b1);
  add_linear(&w, "fc2", 512, 512, 3, &w2, &b2);
  add_linear(&w, "fc3", 10, 512, 1, &w3, &b3);
  const char *path = write_weights(&w, "mlp.safetensors");

  static float x[N * 784];
  static double xd[N * 784], h1[N * 512], h2[N * 512], logits[N * 10], want[N * 10];
  for (int i = 0; i < N * 784; i++) xd[i] = x[i] = (float)rng_uniform(-2, 2);
  ref_linear(xd, N, 784, w1, b1, 512, h1);
  for (int i = 0; i < N * 512; i++) h1[i] = gelu_tanh(h1[i]);
  ref_linear(h1, N, 512, w2, b2, 512, h2);
  for (int i = 0; i < N * 512; i++) h2[i] = gelu_tanh(h2[i]);
  ref_linear(h2, N, 512, w3, b3, 10, logits);
  for (int r = 0; r < N; r++) {
    double mx = -INFINITY, sum = 0;
    for (int o = 0; o < 10; o++) mx = fmax(mx, logits[r * 10 + o]);
    for (int o = 0; o < 10; o++) sum += want[r * 10 + o] = exp(logits[r * 10 + o] - mx);
    for (int o = 0; o < 10; o++) want[r * 10 + o] /= sum;
  }

  dlc_define n = {"N", N};
  dlc_model *m = compile_example("mlp.dl", 1, &n);
  ck_assert_msg(dlc_load_weights(m, path) == DLC_OK, "%s", dlc_error(m));
  ck_assert_int_eq(dlc_set_input(m, "x", x, sizeof x), DLC_OK);
  const float *y = run_output(m, N * 10);
  ck_assert_double_le(rel_error("mlp", y, want, N * 10), 1e-5);
  /* The softmax's rows were not flattened into something trivial. */
  ck_assert_double_gt(fabs(want[0] - want[1]), 1e-4);
  dlc_free(m);
  free_weights(&w);
}
END_TEST

/* x [n][c][h][w] -> y [n][co][h'][w'], square kernel k, stride 1, pad p. */
static void ref_conv(const double *x, int n, int c, int h, int wd, const float *w, const float *b,
                     int co, int k, int p, double *y) {
  int oh = h + 2 * p - k + 1, ow = wd + 2 * p - k + 1;
  for (int i = 0; i < n; i++)
    for (int o = 0; o < co; o++)
      for (int r = 0; r < oh; r++)
        for (int s = 0; s < ow; s++) {
          double acc = b[o];
          for (int ci = 0; ci < c; ci++)
            for (int u = 0; u < k; u++)
              for (int v = 0; v < k; v++) {
                int yy = r + u - p, xx = s + v - p;
                if (yy < 0 || yy >= h || xx < 0 || xx >= wd) continue;
                acc += x[((i * c + ci) * h + yy) * wd + xx] * w[((o * c + ci) * k + u) * k + v];
              }
          y[((i * co + o) * oh + r) * ow + s] = acc;
        }
}

/* relu then 2x2 max pooling with stride 2. */
static void ref_relu_pool(const double *x, int nc, int h, int wd, double *y) {
  for (int i = 0; i < nc; i++)
    for (int r = 0; r < h / 2; r++)
      for (int s = 0; s < wd / 2; s++) {
        double m = 0; /* relu: the max of the window and 0 */
        for (int u = 0; u < 2; u++)
          for (int v = 0; v < 2; v++) m = fmax(m, x[(i * h + 2 * r + u) * wd + 2 * s + v]);
        y[(i * (h / 2) + r) * (wd / 2) + s] = m;
      }
}

START_TEST(lenet_matches_plain_loops) {
  enum { N = 2 };
  rng_state = 1234;
  Weights w = {0};
  float *c1w, *c1b, *c2w, *c2b, *f1w, *f1b, *f2w, *f2b, *f3w, *f3b;
  add_conv(&w, "conv1", 6, 1, 5, &c1w, &c1b);
  add_conv(&w, "conv2", 16, 6, 5, &c2w, &c2b);
  add_linear(&w, "fc1", 120, 400, 1, &f1w, &f1b);
  add_linear(&w, "fc2", 84, 120, 1, &f2w, &f2b);
  add_linear(&w, "fc3", 10, 84, 1, &f3w, &f3b);
  const char *path = write_weights(&w, "lenet.safetensors");

  static float x[N * 28 * 28];
  static double xd[N * 28 * 28], a1[N * 6 * 28 * 28], p1[N * 6 * 14 * 14], a2[N * 16 * 10 * 10],
      p2[N * 400], h1[N * 120], h2[N * 84], want[N * 10];
  for (int i = 0; i < N * 28 * 28; i++) xd[i] = x[i] = (float)rng_uniform(0, 1);
  ref_conv(xd, N, 1, 28, 28, c1w, c1b, 6, 5, 2, a1);
  ref_relu_pool(a1, N * 6, 28, 28, p1);
  ref_conv(p1, N, 6, 14, 14, c2w, c2b, 16, 5, 0, a2);
  ref_relu_pool(a2, N * 16, 10, 10, p2); /* [N, 16, 5, 5] is already flat in C order */
  ref_linear(p2, N, 400, f1w, f1b, 120, h1);
  for (int i = 0; i < N * 120; i++) h1[i] = fmax(h1[i], 0);
  ref_linear(h1, N, 120, f2w, f2b, 84, h2);
  for (int i = 0; i < N * 84; i++) h2[i] = fmax(h2[i], 0);
  ref_linear(h2, N, 84, f3w, f3b, 10, want);

  dlc_define n = {"N", N};
  dlc_model *m = compile_example("lenet.dl", 1, &n);
  ck_assert_msg(dlc_load_weights(m, path) == DLC_OK, "%s", dlc_error(m));
  ck_assert_int_eq(dlc_set_input(m, "x", x, sizeof x), DLC_OK);
  const float *y = run_output(m, N * 10);
  ck_assert_double_le(rel_error("lenet", y, want, N * 10), 1e-5);
  dlc_free(m);
  free_weights(&w);
}
END_TEST

/* ---- bad weights and inputs through the API ---- */

static const char tiny[] = "model tiny(x: f32[2, 3]) -> f32[2, 4] {\n  return linear(x, 4) as fc\n}\n";

static dlc_model *compile_tiny(void) { return compile_text("tiny.dl", tiny, 0, NULL); }

/* fc.weight [4, 3] and fc.bias [4] as the test wants them (dtype, dims). */
static void add_raw(Weights *w, const char *name, RtDType dt, int rank, const int64_t *dims) {
  RtTensor *t = &w->tensors[w->n];
  memset(t, 0, sizeof *t);
  t->dtype = dt;
  t->rank = rank;
  size_t n = 1;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i], n *= (size_t)dims[i];
  t->nbytes = n * (size_t)rt_dtype_size(dt);
  t->data = calloc(1, t->nbytes ? t->nbytes : 1);
  w->names[w->n++] = strdup(name);
}

static void assert_load_fails(const char *path, const char *want) {
  dlc_model *m = compile_tiny();
  ck_assert_int_eq(dlc_load_weights(m, path), DLC_ERR_WEIGHTS);
  ck_assert_str_eq(dlc_error(m), want);
  /* Nothing half-bound: the model still has no weights. */
  float x[6] = {0};
  ck_assert_int_eq(dlc_set_input(m, "x", x, sizeof x), DLC_OK);
  ck_assert_int_eq(dlc_run(m), DLC_ERR_WEIGHTS);
  ck_assert_str_eq(dlc_error(m),
                   "dlcc: error: the model has 2 parameters and no weights: load a file or "
                   "initialize them\n");
  dlc_free(m);
}

static const char *tiny_weights(const char *file, RtDType wdt, const int64_t *wdims, RtDType bdt,
                                int64_t bdim, const char *extra) {
  Weights w = {0};
  if (wdims) add_raw(&w, "fc.weight", wdt, 2, wdims);
  if (bdim) add_raw(&w, "fc.bias", bdt, 1, (int64_t[]){bdim});
  if (extra) add_raw(&w, extra, RT_F32, 1, (int64_t[]){1});
  const char *p = write_weights(&w, file);
  free_weights(&w);
  return p;
}

static char msg[1024];

/* Where tiny declares fc's parameters, as an error shows it. */
#define AT_FC "      return linear(x, 4) as fc\n             ^\n"

START_TEST(weights_that_fit_load_and_run) {
  const char *p = tiny_weights("ok.safetensors", RT_F32, (int64_t[]){4, 3}, RT_F32, 4, NULL);
  dlc_model *m = compile_tiny();
  ck_assert_msg(dlc_load_weights(m, p) == DLC_OK, "%s", dlc_error(m));
  float x[6] = {1, 2, 3, 4, 5, 6};
  ck_assert_int_eq(dlc_set_input(m, "x", x, sizeof x), DLC_OK);
  const float *y = run_output(m, 8);
  for (int i = 0; i < 8; i++) ck_assert_float_eq(y[i], 0); /* zero weights, zero bias */
  dlc_free(m);
}
END_TEST

START_TEST(missing_tensor) {
  const char *p = tiny_weights("missing.safetensors", RT_F32, (int64_t[]){4, 3}, RT_F32, 0, NULL);
  snprintf(msg, sizeof msg, "tiny.dl:2:10: error: missing tensor 'fc.bias' (expected f32[4]) in %s\n" AT_FC, p);
  assert_load_fails(p, msg);
}
END_TEST

START_TEST(extra_tensor) {
  const char *p = tiny_weights("extra.safetensors", RT_F32, (int64_t[]){4, 3}, RT_F32, 4, "fc.scale");
  snprintf(msg, sizeof msg,
           "dlcc: error: %s: unexpected tensor 'fc.scale' (the model has no such parameter)\n", p);
  assert_load_fails(p, msg);
}
END_TEST

START_TEST(wrong_shape) {
  const char *p = tiny_weights("shape.safetensors", RT_F32, (int64_t[]){3, 4}, RT_F32, 4, NULL);
  snprintf(msg, sizeof msg,
           "tiny.dl:2:10: error: tensor 'fc.weight' is [3, 4] in %s, the model expects [4, 3]\n" AT_FC, p);
  assert_load_fails(p, msg);
}
END_TEST

START_TEST(wrong_dtype) {
  const char *p = tiny_weights("dtype.safetensors", RT_F32, (int64_t[]){4, 3}, RT_F16, 4, NULL);
  snprintf(msg, sizeof msg, "tiny.dl:2:10: error: tensor 'fc.bias' is f16 in %s, the model expects f32\n" AT_FC, p);
  assert_load_fails(p, msg);
}
END_TEST

START_TEST(wrong_dtype_and_shape) {
  const char *p = tiny_weights("both.safetensors", RT_F32, (int64_t[]){4, 3}, RT_I32, 5, NULL);
  snprintf(msg, sizeof msg,
           "tiny.dl:2:10: error: tensor 'fc.bias' is i32[5] in %s, the model expects f32[4]\n" AT_FC, p);
  assert_load_fails(p, msg);
}
END_TEST

START_TEST(every_mismatch_is_reported) {
  const char *p = tiny_weights("all.safetensors", RT_F32, (int64_t[]){4, 4}, RT_F32, 0, "fc.scale");
  snprintf(msg, sizeof msg,
           "tiny.dl:2:10: error: tensor 'fc.weight' is [4, 4] in %s, the model expects [4, 3]\n" AT_FC
           "tiny.dl:2:10: error: missing tensor 'fc.bias' (expected f32[4]) in %s\n" AT_FC
           "dlcc: error: %s: unexpected tensor 'fc.scale' (the model has no such parameter)\n",
           p, p, p);
  assert_load_fails(p, msg);
}
END_TEST

/* nn.DataParallel's "module." prefix: the message names the near miss. */
START_TEST(prefixed_names_are_named) {
  const char *p = tiny_weights("prefixed.safetensors", RT_F32, (int64_t[]){4, 3}, RT_F32, 0,
                               "module.fc.bias");
  snprintf(msg, sizeof msg,
           "tiny.dl:2:10: error: missing tensor 'fc.bias' (expected f32[4]) in %s; it has 'module.fc.bias': "
           "are the names prefixed differently?\n" AT_FC
           "dlcc: error: %s: unexpected tensor 'module.fc.bias' (the model has no such parameter)\n",
           p, p);
  assert_load_fails(p, msg);
}
END_TEST

/* Every name under DataParallel's "module." (or torch.compile's
 * "_orig_mod.", or both): the file's names lose it and bind, as PyTorch
 * users strip it; a file that also holds a name as it is stays as it is
 * (the test above). */
START_TEST(wrapper_prefix_is_stripped) {
  static const char *const prefixes[] = {"module.", "_orig_mod.", "module._orig_mod."};
  for (size_t k = 0; k < sizeof prefixes / sizeof prefixes[0]; k++) {
    Weights w = {0};
    char wn[64], bn[64];
    snprintf(wn, sizeof wn, "%sfc.weight", prefixes[k]);
    snprintf(bn, sizeof bn, "%sfc.bias", prefixes[k]);
    add_raw(&w, wn, RT_F32, 2, (int64_t[]){4, 3});
    add_raw(&w, bn, RT_F32, 1, (int64_t[]){4});
    const char *p = write_weights(&w, "wrapped.safetensors");
    free_weights(&w);
    dlc_model *m = compile_tiny();
    ck_assert_msg(dlc_load_weights(m, p) == DLC_OK, "%s: %s", prefixes[k], dlc_error(m));
    dlc_free(m);
  }
}
END_TEST

static void truncate_to(const char *p, off_t size) { ck_assert_int_eq(truncate(p, size), 0); }

START_TEST(truncated_data) {
  const char *p = tiny_weights("cut.safetensors", RT_F32, (int64_t[]){4, 3}, RT_F32, 4, NULL);
  struct stat st;
  ck_assert_int_eq(stat(p, &st), 0);
  truncate_to(p, st.st_size - 4);
  /* fc.weight holds bytes [0, 48), fc.bias [48, 64); 60 are left. */
  snprintf(msg, sizeof msg,
           "dlcc: error: %s: tensor 'fc.bias': data_offsets [48, 64] run past the end of the "
           "data (60 bytes)\n",
           p);
  assert_load_fails(p, msg);
}
END_TEST

START_TEST(truncated_header) {
  const char *p = tiny_weights("cuthead.safetensors", RT_F32, (int64_t[]){4, 3}, RT_F32, 4, NULL);
  FILE *f = fopen(p, "rb");
  unsigned char len8[8];
  ck_assert_uint_eq(fread(len8, 1, 8, f), 8);
  fclose(f);
  uint64_t hsize = 0;
  for (int i = 7; i >= 0; i--) hsize = hsize << 8 | len8[i];
  truncate_to(p, 20);
  snprintf(msg, sizeof msg,
           "dlcc: error: %s: header size %llu is larger than the file (20 bytes)\n", p,
           (unsigned long long)hsize);
  assert_load_fails(p, msg);
}
END_TEST

START_TEST(no_such_file) {
  const char *p = path_for("nothere.safetensors");
  snprintf(msg, sizeof msg, "dlcc: error: %s: No such file or directory\n", p);
  assert_load_fails(p, msg);
}
END_TEST

START_TEST(input_of_the_wrong_size) {
  dlc_model *m = compile_tiny();
  ck_assert_int_eq(dlc_init_weights(m, 1), DLC_OK);
  float x[5] = {0};
  ck_assert_int_eq(dlc_set_input(m, "x", x, sizeof x), DLC_ERR_ARGUMENT);
  ck_assert_str_eq(dlc_error(m), "dlcc: error: input 'x' is f32[2, 3] (24 bytes), got 20 bytes\n");
  /* The failed call left the input unset. */
  ck_assert_int_eq(dlc_run(m), DLC_ERR_INPUT);
  ck_assert_str_eq(dlc_error(m), "dlcc: error: input 'x' was not set\n");
  dlc_free(m);
}
END_TEST

START_TEST(input_not_set) {
  dlc_model *m = compile_tiny();
  ck_assert_int_eq(dlc_init_weights(m, 1), DLC_OK);
  ck_assert_int_eq(dlc_run(m), DLC_ERR_INPUT);
  ck_assert_str_eq(dlc_error(m), "dlcc: error: input 'x' was not set\n");
  const void *y;
  size_t n;
  ck_assert_int_eq(dlc_get_output(m, 0, &y, &n), DLC_ERR_ARGUMENT);
  ck_assert_str_eq(dlc_error(m), "dlcc: error: the model has not run yet\n");
  dlc_free(m);
}
END_TEST

START_TEST(input_that_does_not_exist) {
  dlc_model *m = compile_tiny();
  float x[6] = {0};
  ck_assert_int_eq(dlc_set_input(m, "y", x, sizeof x), DLC_ERR_ARGUMENT);
  ck_assert_str_eq(dlc_error(m), "dlcc: error: the model has no input 'y'\n");
  ck_assert_int_eq(dlc_input_index(m, "y"), -1);
  ck_assert_int_eq(dlc_input_index(m, "x"), 0);
  dlc_free(m);
}
END_TEST

static Suite *models_suite(void) {
  Suite *s = suite_create("models");
  TCase *tc = tcase_create("examples");
  tcase_set_timeout(tc, 120); /* the interpreter on ResNet-50 */
  tcase_add_test(tc, every_example_is_listed);
  tcase_add_loop_test(tc, example_runs_with_random_weights, 0, N_EXAMPLES);
  tcase_add_loop_test(tc, example_on_emu_matches_reference, 0, N_EXAMPLES);
  tcase_add_test(tc, random_weights_follow_the_seed);
  suite_add_tcase(s, tc);

  tc = tcase_create("reference");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, mlp_matches_plain_loops);
  tcase_add_test(tc, lenet_matches_plain_loops);
  suite_add_tcase(s, tc);

  tc = tcase_create("bad weights and inputs");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, weights_that_fit_load_and_run);
  tcase_add_test(tc, missing_tensor);
  tcase_add_test(tc, extra_tensor);
  tcase_add_test(tc, wrong_shape);
  tcase_add_test(tc, wrong_dtype);
  tcase_add_test(tc, wrong_dtype_and_shape);
  tcase_add_test(tc, every_mismatch_is_reported);
  tcase_add_test(tc, prefixed_names_are_named);
  tcase_add_test(tc, wrapper_prefix_is_stripped);
  tcase_add_test(tc, truncated_data);
  tcase_add_test(tc, truncated_header);
  tcase_add_test(tc, no_such_file);
  tcase_add_test(tc, input_of_the_wrong_size);
  tcase_add_test(tc, input_not_set);
  tcase_add_test(tc, input_that_does_not_exist);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(models_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

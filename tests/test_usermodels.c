/* Models users write that the examples do not cover (tests/usermodels/
 * *.dl: VGG, U-Net, SqueezeNet, DenseNet, MobileNetV1, ResNeXt, ViT, GPT
 * with a causal mask, GRU and LSTM sequence models, several outputs of
 * several dtypes, i32 embeddings, every reduction, broadcasting, odd
 * sizes, pooling and data movement corner cases): each runs through the
 * public API on the reference interpreter and on emu, at -O0 and -O2,
 * with the same weights and inputs, and every output must agree with the
 * reference at -O0 within 1e-5 of its scale (integer outputs exactly). */
#include "check_quiet.h"
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/dlcc.h"

static const char *const models[] = {
    "vgg11",       "unet",        "squeezenet", "densenet", "mobilenetv1", "resnext",
    "vit",         "gpt",         "gru_classifier", "seq2seq", "autoencoder", "multi_dtype",
    "embed_i32",   "reductions",  "broadcast",  "odd_sizes", "pools",      "movement",
    "generator",   "segment",     "masking",
};

static const char *srcdir(void) {
  const char *s = getenv("top_srcdir");
  return s ? s : ".";
}

/* splitmix64: inputs independent of the compiler's own generator. */
static uint64_t rng_state;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

typedef struct Outputs {
  int n;
  dlc_tensor_info info[16];
  void *data[16];
} Outputs;

static size_t numel(const dlc_tensor_info *t) {
  size_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= (size_t)t->dims[i];
  return n;
}

/* Fills every input from seed: floats in [-1, 1), index inputs below their
 * bound, other integers in [0, 4). */
static void set_inputs(dlc_model *m, uint64_t seed) {
  rng_state = seed;
  for (int i = 0; i < dlc_num_inputs(m); i++) {
    dlc_tensor_info t;
    ck_assert_int_eq(dlc_input_info(m, i, &t), DLC_OK);
    size_t n = numel(&t);
    void *buf = malloc(t.nbytes ? t.nbytes : 1);
    ck_assert_ptr_nonnull(buf);
    int64_t bound = t.index_bound > 0 ? t.index_bound : 4;
    for (size_t k = 0; k < n; k++) {
      uint64_t r = rng_next();
      switch (t.dtype) {
      case DLC_F32: ((float *)buf)[k] = (float)((double)(r >> 11) / 4503599627370496.0 - 1.0); break;
      case DLC_I32: ((int32_t *)buf)[k] = (int32_t)(r % (uint64_t)bound); break;
      case DLC_I64: ((int64_t *)buf)[k] = (int64_t)(r % (uint64_t)bound); break;
      default: ck_abort_msg("input '%s': no generator for %s", t.name, dlc_dtype_name(t.dtype));
      }
    }
    ck_assert_msg(dlc_set_input(m, t.name, buf, t.nbytes) == DLC_OK, "%s", dlc_error(m));
    free(buf);
  }
}

static void run_model(const char *name, const char *backend, int opt_level, Outputs *out) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/usermodels/%s.dl", srcdir(), name);
  dlc_options o = {.backend = backend, .opt_level = opt_level};
  dlc_model *m = NULL;
  dlc_status st = dlc_compile_file(path, &o, &m);
  ck_assert_msg(st == DLC_OK, "%s on %s: %s", name, backend, dlc_error(m));
  ck_assert_msg(dlc_init_weights(m, 7) == DLC_OK, "%s", dlc_error(m));
  set_inputs(m, 11);
  ck_assert_msg(dlc_run(m) == DLC_OK, "%s on %s: %s", name, backend, dlc_error(m));
  out->n = dlc_num_outputs(m);
  ck_assert_int_le(out->n, 16);
  for (int i = 0; i < out->n; i++) {
    const void *d;
    size_t nb;
    ck_assert_int_eq(dlc_output_info(m, i, &out->info[i]), DLC_OK);
    ck_assert_int_eq(dlc_get_output(m, i, &d, &nb), DLC_OK);
    ck_assert_uint_eq(nb, out->info[i].nbytes);
    out->data[i] = malloc(nb ? nb : 1);
    memcpy(out->data[i], d, nb);
    out->info[i].name = strdup(out->info[i].name);
  }
  dlc_free(m);
}

static void free_outputs(Outputs *o) {
  for (int i = 0; i < o->n; i++) {
    free(o->data[i]);
    free((char *)o->info[i].name);
  }
}

static double value_at(const dlc_tensor_info *t, const void *d, size_t k) {
  switch (t->dtype) {
  case DLC_F32: return ((const float *)d)[k];
  case DLC_I32: return ((const int32_t *)d)[k];
  case DLC_I64: return (double)((const int64_t *)d)[k];
  default: ck_abort_msg("output '%s': unexpected dtype %s", t->name, dlc_dtype_name(t->dtype));
  }
  return 0;
}

static void compare(const char *model, const char *what, const Outputs *ref, const Outputs *got) {
  ck_assert_int_eq(got->n, ref->n);
  for (int i = 0; i < ref->n; i++) {
    const dlc_tensor_info *a = &ref->info[i], *b = &got->info[i];
    ck_assert_str_eq(b->name, a->name);
    ck_assert_int_eq(b->dtype, a->dtype);
    ck_assert_uint_eq(b->nbytes, a->nbytes);
    size_t n = numel(a);
    double scale = 0, worst = 0;
    size_t at = 0;
    for (size_t k = 0; k < n; k++) scale = fmax(scale, fabs(value_at(a, ref->data[i], k)));
    for (size_t k = 0; k < n; k++) {
      double x = value_at(a, ref->data[i], k), y = value_at(b, got->data[i], k);
      double e = fabs(x - y);
      ck_assert_msg(!isnan(y) || isnan(x), "%s %s: output '%s'[%zu] is nan", model, what, a->name, k);
      if (e > worst) worst = e, at = k;
    }
    double tol = a->dtype == DLC_F32 ? 1e-5 * fmax(scale, 1e-30) : 0;
    ck_assert_msg(worst <= tol, "%s %s: output '%s'[%zu] differs by %g (scale %g)", model, what,
                  a->name, at, worst, scale);
    ck_assert_msg(a->dtype != DLC_F32 || scale > 0, "%s: output '%s' is all zeros", model, a->name);
  }
}

START_TEST(agrees_everywhere) {
  const char *name = models[_i];
  Outputs ref, ref2, emu0, emu2;
  run_model(name, "ref", DLC_O0, &ref);
  run_model(name, "ref", 2, &ref2);
  run_model(name, "emu", DLC_O0, &emu0);
  run_model(name, "emu", 2, &emu2);
  compare(name, "ref -O2", &ref, &ref2);
  compare(name, "emu -O0", &ref, &emu0);
  compare(name, "emu -O2", &ref, &emu2);
  free_outputs(&ref);
  free_outputs(&ref2);
  free_outputs(&emu0);
  free_outputs(&emu2);
}
END_TEST

static Suite *usermodels_suite(void) {
  Suite *s = suite_create("usermodels");
  TCase *t = tcase_create("models");
  tcase_set_timeout(t, 120);
  tcase_add_loop_test(t, agrees_everywhere, 0, (int)(sizeof models / sizeof models[0]));
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(usermodels_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

/* The dtypes beyond f32/f16/bf16/i8/i32/i64/u8 in the kernels: takes IR
 * graphs of f64, u64, u32, i16 and u16 ops and of fp_round into every
 * narrow format, runs them on the reference interpreter and on emu (the
 * generated CUDA text, at -O0 and -O2; the text also through NVRTC for
 * sm_90), and checks that both agree: f64 to 1e-13 (the kernels compute
 * in double, so what an f32 step would lose shows), the integers and
 * the roundings bit for bit.  The inputs sit where a narrower or signed
 * computation would differ: u64 values past 2^63, double values that
 * round differently through float, i16/u16 sums that wrap, float8 ties
 * and values past the largest finite one. */
#include "check_quiet.h"
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/irjob.h"
#include "tests/testutil.h"

/* ---- f64 ---- */

static const char f64_text[] =
    "graph f64 {\n"
    "  %x = input {name=\"x\"} : f64[2, 6]\n"
    "  %y = input {name=\"y\"} : f64[2, 6]\n"
    "  %e = exp %x : f64[2, 6]\n"
    "  %s = sin %y : f64[2, 6]\n"
    "  %m = mul %e, %y : f64[2, 6]\n"
    "  %d = div %s, %y : f64[2, 6]\n"
    "  %a = add %m, %d : f64[2, 6]\n"
    "  %l = leaky_relu %a {alpha=0.1} : f64[2, 6]\n"
    "  %c = clip %x {min=-0.3, max=0.7} : f64[2, 6]\n"
    "  %r = reduce_sum %a {axes=[1]} : f64[2]\n"
    "  %g = argmax %x {axis=1} : i64[2]\n"
    "  %h = cast %x {to=f16} : f16[2, 6]\n"
    "  %i = cast %x {to=i32} : i32[2, 6]\n"
    "  return %l as \"l\", %c as \"c\", %r as \"r\", %g as \"g\", %h as \"h\", %i as \"i\"\n"
    "}\n";

/* x: 1 + 2^-11 + 2^-40 is just above an f16 tie (through float it is the
 * tie itself, and rounds down to even); 2.9999999999 is 3 in float, 2 as
 * an int from double; 0.7 + 2^-50 and 0.7 - 2^-50 differ only in double
 * (argmax of row 1 is the larger, index 7 - 6 = 1). */
static const double f64_x[] = {1.0 + 0x1p-11 + 0x1p-40, 2.9999999999, -0.25, 0.1, -1.5, 0.3,
                               0.5, 0.7 + 0x1p-50, 0.7 - 0x1p-50, -2.0, 0.69999999999, 1e-3};
static const double f64_y[] = {1.25, -0.75, 3.0, 0.1, 2.5, -1.125, 0.3, 1.0 / 3.0, 7.0, -0.2, 0.9, 1.5};

static void f64_inputs(Data *d) {
  int64_t dims[2] = {2, 6};
  TensorType t = ir_type_make(TY_F64, 2, dims);
  ck_assert(ir_tensor_alloc(&d->t[0], &t) && ir_tensor_alloc(&d->t[1], &t));
  memcpy(d->t[0].data, f64_x, sizeof f64_x);
  memcpy(d->t[1].data, f64_y, sizeof f64_y);
  d->names[0] = "x", d->names[1] = "y";
  d->inputs = (TensorMap){2, d->names, d->t};
}

/* Within tol of want relatively (1e-300 absolutely), or both NaN. */
static void expect_close(const Tensor *got, const Tensor *want, double tol, const char *where, int out) {
  ck_assert_int_eq(got->type.dtype, want->type.dtype);
  for (int64_t i = 0; i < ir_type_numel(&want->type); i++) {
    double g = ir_tensor_get(got, i), w = ir_tensor_get(want, i);
    bool ok = (isnan(g) && isnan(w)) || g == w || fabs(g - w) <= tol * fabs(w) + 1e-300;
    ck_assert_msg(ok, "%s: output %d element %" PRId64 ": %.17g, expected %.17g", where, out, i, g, w);
  }
}

/* Every output of j on emu against ir_eval: exact when tol is 0 (bits
 * of the integer dtypes compared through get_i's int64 for u64). */
static void emu_matches_eval(Job *j, const TensorMap *inputs, double tol, const char *where) {
  test_nvrtc(j->cg.source, "sm_90");
  Tensor *want = eval_all(j->g, inputs);
  Tensor *got = test_run_emu(j->cg.plan, NULL, inputs);
  for (int o = 0; o < j->g->n_outputs; o++) {
    if (tol > 0 || ir_dtype_is_float(want[o].type.dtype)) {
      expect_close(&got[o], &want[o], tol, where, o);
      continue;
    }
    size_t nb = ir_tensor_nbytes(&want[o].type);
    ck_assert_msg(nb == ir_tensor_nbytes(&got[o].type) && memcmp(got[o].data, want[o].data, nb) == 0,
                  "%s: output %d (%s) differs from ir_eval", where, o, ir_dtype_name(want[o].type.dtype));
  }
  free_outputs(want, j->g->n_outputs);
  free_outputs(got, j->g->n_outputs);
}

START_TEST(f64_kernels_compute_in_double) {
  for (int level = 0; level <= 2; level += 2) {
    Ctx c;
    ctx_init(&c);
    Job j = compile_at(&c, f64_text, level);
    Data d = {0};
    f64_inputs(&d);
    Tensor *want = eval_all(j.g, &d.inputs);
    /* the cases the inputs were chosen for, on the interpreter */
    ck_assert_int_eq(((const uint16_t *)want[4].data)[0], 0x3c01); /* up, not to the even 0x3c00 */
    ck_assert_int_eq(((const int32_t *)want[5].data)[1], 2);
    ck_assert_int_eq(((const int64_t *)want[3].data)[1], 1);
    free_outputs(want, j.g->n_outputs);
    emu_matches_eval(&j, &d.inputs, 1e-13, level ? "f64 -O2" : "f64 -O0");
    free_inputs(&d);
    ctx_free(&c);
  }
}
END_TEST

/* ---- the unsigned and 16-bit integers ---- */

static const char int_text[] =
    "graph ints {\n"
    "  %a = input {name=\"a\"} : u64[6]\n"
    "  %b = input {name=\"b\"} : u64[6]\n"
    "  %p = input {name=\"p\"} : i16[6]\n"
    "  %q = input {name=\"q\"} : u16[6]\n"
    "  %w = input {name=\"w\"} : u32[6]\n"
    "  %dv = div %a, %b : u64[6]\n"
    "  %md = mod %a, %b : u64[6]\n"
    "  %mx = maximum %a, %b : u64[6]\n"
    "  %lt = less %a, %b : bool[6]\n"
    "  %sr = shr %a, %b : u64[6]\n"
    "  %f = cast %a {to=f32} : f32[6]\n"
    "  %ps = add %p, %p : i16[6]\n"
    "  %pr = shr %p, %p : i16[6]\n"
    "  %qs = add %q, %q : u16[6]\n"
    "  %qn = bit_not %q : u16[6]\n"
    "  %ww = mul %w, %w : u32[6]\n"
    "  %wh = cast %w {to=bf16} : bf16[6]\n"
    "  return %dv as \"dv\", %md as \"md\", %mx as \"mx\", %lt as \"lt\", %sr as \"sr\", %f as \"f\", "
    "%ps as \"ps\", %pr as \"pr\", %qs as \"qs\", %qn as \"qn\", %ww as \"ww\", %wh as \"wh\"\n"
    "}\n";

static void int_inputs(Data *d) {
  static const uint64_t a[] = {UINT64_MAX, (uint64_t)1 << 63, 12345678901234567890u, 7, 0, 1u << 20};
  static const uint64_t b[] = {3, 5, (uint64_t)1 << 62, 9, 64, 70};
  static const int16_t p[] = {32767, -32768, -5, 3, 20000, -1};
  static const uint16_t q[] = {65535, 40000, 0, 1, 32768, 12345};
  /* 2^24 + 2^16 + 1 lies above a bf16 tie that float rounds onto */
  static const uint32_t w[] = {4294967295u, 65537, 16842753, 3, 0x80000001u, 100000};
  int64_t n = 6;
  TensorType t64 = ir_type_make(TY_U64, 1, &n), t16 = ir_type_make(TY_I16, 1, &n),
             tu16 = ir_type_make(TY_U16, 1, &n), t32 = ir_type_make(TY_U32, 1, &n);
  ck_assert(ir_tensor_alloc(&d->t[0], &t64) && ir_tensor_alloc(&d->t[1], &t64) && ir_tensor_alloc(&d->t[2], &t16) &&
            ir_tensor_alloc(&d->t[3], &tu16) && ir_tensor_alloc(&d->t[4], &t32));
  memcpy(d->t[0].data, a, sizeof a);
  memcpy(d->t[1].data, b, sizeof b);
  memcpy(d->t[2].data, p, sizeof p);
  memcpy(d->t[3].data, q, sizeof q);
  memcpy(d->t[4].data, w, sizeof w);
  static const char *const names[] = {"a", "b", "p", "q", "w"};
  for (int i = 0; i < 5; i++) d->names[i] = names[i];
  d->inputs = (TensorMap){5, d->names, d->t};
}

START_TEST(unsigned_and_16_bit_kernels_wrap_and_order_as_unsigned) {
  for (int level = 0; level <= 2; level += 2) {
    Ctx c;
    ctx_init(&c);
    Job j = compile_at(&c, int_text, level);
    Data d = {0};
    int_inputs(&d);
    Tensor *want = eval_all(j.g, &d.inputs);
    const uint64_t *dv = want[0].data, *mx = want[2].data, *sr = want[4].data;
    ck_assert(dv[0] == UINT64_MAX / 3 && dv[1] == ((uint64_t)1 << 63) / 5);
    ck_assert(mx[1] == (uint64_t)1 << 63 && !((const uint8_t *)want[3].data)[0]);
    ck_assert(sr[0] == UINT64_MAX >> 3 && sr[4] == 0 && sr[5] == 0); /* 0 >> 64, a shift past the width */
    ck_assert(((const float *)want[5].data)[0] == 18446744073709551616.0f);
    ck_assert_int_eq(((const int16_t *)want[6].data)[0], -2); /* 32767 + 32767 wraps */
    ck_assert_int_eq(((const int16_t *)want[7].data)[1], -1); /* -32768 >> -32768: the sign fill */
    ck_assert_int_eq(((const uint16_t *)want[8].data)[0], 65534);
    ck_assert_int_eq(((const uint16_t *)want[9].data)[2], 65535);
    ck_assert(((const uint32_t *)want[10].data)[1] == 131073u); /* 65537^2 mod 2^32 */
    ck_assert_int_eq(((const uint16_t *)want[11].data)[2], 0x4b81);
    free_outputs(want, j.g->n_outputs);
    emu_matches_eval(&j, &d.inputs, 0, level ? "ints -O2" : "ints -O0");
    free_inputs(&d);
    ctx_free(&c);
  }
}
END_TEST

/* ---- fp_round ---- */

static const char *const formats[] = {"e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz", "e2m1", "i4", "u4", "i2", "u2"};
enum { N_FORMATS = sizeof formats / sizeof *formats };

/* Ties, subnormals, the largest finite values and just past them, the
 * specials, and int4's truncation and range. */
static const float narrow_x[] = {0.0f, -0.0f, 1.0625f, 1.1875f, 0x1p-9f, 0x1.8p-10f, 0x1p-17f, 448.0f,
                                 464.0f, 465.0f, 480.0f, 240.0f, 248.0f, 57344.0f, 61440.0f, 61441.0f,
                                 INFINITY, -INFINITY, NAN, -NAN, 0.25f, 0.75f, 2.5f, 5.0f,
                                 7.5f, -8.9f, 15.9f, 16.0f, -2.5f, 1.99f, -3.0f, 3.4e38f};
enum { N_NARROW = sizeof narrow_x / sizeof *narrow_x };

START_TEST(fp_round_kernels_match_the_interpreter) {
  char text[8192];
  int len = snprintf(text, sizeof text, "graph narrow {\n  %%x = input {name=\"x\"} : f32[%d]\n", N_NARROW);
  for (int f = 0; f < N_FORMATS; f++)
    for (int sat = 0; sat <= 1; sat++)
      len += snprintf(text + len, sizeof text - (size_t)len,
                      "  %%r%d_%d = fp_round %%x {format=\"%s\", saturate=%d} : f32[%d]\n", f, sat, formats[f], sat,
                      N_NARROW);
  len += snprintf(text + len, sizeof text - (size_t)len, "  return");
  for (int f = 0; f < N_FORMATS; f++)
    for (int sat = 0; sat <= 1; sat++)
      len += snprintf(text + len, sizeof text - (size_t)len, "%s %%r%d_%d as \"r%d_%d\"", f || sat ? "," : "", f, sat,
                      f, sat);
  snprintf(text + len, sizeof text - (size_t)len, "\n}\n");
  Ctx c;
  ctx_init(&c);
  Job j = compile_at(&c, text, 2);
  Data d = {0};
  int64_t n = N_NARROW;
  TensorType t = ir_type_make(TY_F32, 1, &n);
  ck_assert(ir_tensor_alloc(&d.t[0], &t));
  memcpy(d.t[0].data, narrow_x, sizeof narrow_x);
  d.names[0] = "x";
  d.inputs = (TensorMap){1, d.names, d.t};
  Tensor *want = eval_all(j.g, &d.inputs);
  /* e4m3fn, saturating: 464 is a tie down to 448, 465 past it saturates */
  const float *fn = want[1].data;
  ck_assert(fn[8] == 448.0f && fn[9] == 448.0f && fn[16] == 448.0f);
  ck_assert(isnan(((const float *)want[0].data)[9])); /* without saturation: NaN */
  ck_assert(isinf(((const float *)want[4].data)[16])); /* e5m2 keeps inf */
  ck_assert(((const float *)want[10].data)[25] == -8.0f && ((const float *)want[12].data)[26] == 15.0f);
  free_outputs(want, j.g->n_outputs);
  test_nvrtc(j.cg.source, "sm_90");
  Tensor *got = test_run_emu(j.cg.plan, NULL, &d.inputs);
  want = eval_all(j.g, &d.inputs);
  for (int o = 0; o < j.g->n_outputs; o++)
    for (int i = 0; i < N_NARROW; i++) {
      float g = ((const float *)got[o].data)[i], e = ((const float *)want[o].data)[i];
      ck_assert_msg((isnan(g) && isnan(e)) || (g == e && signbit(g) == signbit(e)),
                    "fp_round %s saturate=%d of %a: emu %a, ir_eval %a", formats[o / 2], o % 2, (double)narrow_x[i],
                    (double)g, (double)e);
    }
  free_outputs(got, j.g->n_outputs);
  free_outputs(want, j.g->n_outputs);
  free_inputs(&d);
  ctx_free(&c);
}
END_TEST

static Suite *dtypes_suite(void) {
  Suite *s = suite_create("dtypes");
  TCase *t = tcase_create("kernels");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, f64_kernels_compute_in_double);
  tcase_add_test(t, unsigned_and_16_bit_kernels_wrap_and_order_as_unsigned);
  tcase_add_test(t, fp_round_kernels_match_the_interpreter);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(dtypes_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

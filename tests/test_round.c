/* Rounding to f16 and bf16: takes a table of inputs whose correctly
 * rounded (nearest, ties to even) f16 and bf16 bits are known, casts them
 * on the reference interpreter, on emu (the generated CUDA text, at -O0
 * and -O2) and compiles that text with NVRTC for sm_90, and checks the
 * bits: ties between an even and an odd neighbour each way, just above
 * and below a tie, subnormals and their ties, the subnormal-normal
 * boundary, overflow to inf, inf and NaN; and i32/i64 to bf16 and f16,
 * which must round once (through float they round twice). */
#include "check_quiet.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/irjob.h"
#include "tests/testutil.h"

typedef struct FloatCase {
  uint32_t in; /* f32 bits */
  uint16_t f16, bf16;
} FloatCase;

/* 0xffff: a NaN is expected (any payload: CUDA's canonical NaN is 0x7fff,
 * the interpreter's a quiet one of the input's sign). */
static const FloatCase float_cases[] = {
    {0x3f800000, 0x3c00, 0x3f80}, /* 1 */
    {0x3f801000, 0x3c00, 0x3f80}, /* 1 + 2^-11: f16 tie, even below */
    {0x3f803000, 0x3c02, 0x3f80}, /* 1 + 3*2^-11: f16 tie, odd below: up */
    {0x3f801001, 0x3c01, 0x3f80}, /* just above the f16 tie */
    {0x3f800fff, 0x3c00, 0x3f80}, /* just below it */
    {0x3f808000, 0x3c04, 0x3f80}, /* 1 + 2^-8: bf16 tie, even below */
    {0x3f818000, 0x3c0c, 0x3f82}, /* 1 + 3*2^-8: bf16 tie, odd below: up */
    {0x3f808001, 0x3c04, 0x3f81}, /* just above the bf16 tie */
    {0xbf818000, 0xbc0c, 0xbf82}, /* negative ties round the magnitude */
    {0x33000000, 0x0000, 0x3300}, /* 2^-25: f16 tie between 0 and the least subnormal */
    {0x33400000, 0x0001, 0x3340}, /* 1.5*2^-25: above it */
    {0x33c00000, 0x0002, 0x33c0}, /* 1.5*2^-24: subnormal tie, odd below: up */
    {0x34200000, 0x0002, 0x3420}, /* 2.5*2^-24: subnormal tie, even below */
    {0x387fe000, 0x0400, 0x3880}, /* 2^-14 - 2^-25: the largest subnormal is odd: up to 2^-14 */
    {0x00008000, 0x0000, 0x0000}, /* f32 subnormal, bf16 tie between 0 and 1 */
    {0x00018000, 0x0000, 0x0002}, /* bf16 subnormal tie, odd below: up */
    {0x00028000, 0x0000, 0x0002}, /* even below */
    {0x477fefff, 0x7bff, 0x4780}, /* just below 65520 */
    {0x477ff000, 0x7c00, 0x4780}, /* 65520: the f16 tie above 65504 overflows */
    {0xc77ff000, 0xfc00, 0xc780},
    {0x7f7f7fff, 0x7c00, 0x7f7f}, /* below the tie above the largest bf16 */
    {0x7f7f8000, 0x7c00, 0x7f80}, /* that tie: 0x7f7f is odd, so inf */
    {0x7f7fffff, 0x7c00, 0x7f80}, /* FLT_MAX */
    {0x7f800000, 0x7c00, 0x7f80}, /* inf */
    {0xff800000, 0xfc00, 0xff80},
    {0x80000000, 0x8000, 0x8000}, /* -0 */
    {0x7fc00000, 0xffff, 0xffff}, /* NaN */
    {0xffc00001, 0xffff, 0xffff},
};
enum { N_FLOAT = sizeof float_cases / sizeof *float_cases };

typedef struct IntCase {
  int64_t in;
  uint16_t f16, bf16;
} IntCase;

/* An i32 column and an i64 column, cast to both. */
static const IntCase i32_cases[] = {
    {2049, 0x6800, 0x4500},          /* f16 tie between 2048 and 2050: even */
    {2051, 0x6802, 0x4500},          /* f16 tie, odd below: up */
    {16842752, 0x7c00, 0x4b80},      /* 2^24 + 2^16: bf16 tie, even below */
    {16842753, 0x7c00, 0x4b81},      /* one above: up (through float: a tie, down) */
    {-16842753, 0xfc00, 0xcb81},
    {65519, 0x7bff, 0x4780},
    {65520, 0x7c00, 0x4780},
    {INT32_MAX, 0x7c00, 0x4f00},
};
static const IntCase i64_cases[] = {
    {((int64_t)1 << 62) + ((int64_t)1 << 54), 0x7c00, 0x5e80},     /* bf16 tie, even below */
    {((int64_t)1 << 62) + ((int64_t)1 << 54) + 1, 0x7c00, 0x5e81}, /* above it: up */
    {((int64_t)1 << 31) + ((int64_t)1 << 23) + 1, 0x7c00, 0x4f01}, /* above a tie, past float's 24 bits */
    {-((int64_t)1 << 31) - ((int64_t)1 << 23), 0xfc00, 0xcf00},
    {INT64_MIN, 0xfc00, 0xdf00},
    {2049, 0x6800, 0x4500},
};
enum { N_I32 = sizeof i32_cases / sizeof *i32_cases, N_I64 = sizeof i64_cases / sizeof *i64_cases };

static const char text[] =
    "graph round {\n"
    "  %x = input {name=\"x\"} : f32[28]\n"
    "  %n = input {name=\"n\"} : i32[8]\n"
    "  %l = input {name=\"l\"} : i64[6]\n"
    "  %xh = cast %x {to=f16} : f16[28]\n"
    "  %xb = cast %x {to=bf16} : bf16[28]\n"
    "  %nh = cast %n {to=f16} : f16[8]\n"
    "  %nb = cast %n {to=bf16} : bf16[8]\n"
    "  %lh = cast %l {to=f16} : f16[6]\n"
    "  %lb = cast %l {to=bf16} : bf16[6]\n"
    "  return %xh as \"xh\", %xb as \"xb\", %nh as \"nh\", %nb as \"nb\", %lh as \"lh\", %lb as \"lb\"\n"
    "}\n";

typedef struct Inputs {
  Tensor t[3];
  const char *names[3];
  TensorMap map;
} Inputs;

static void make(Inputs *in) {
  ck_assert_int_eq(N_FLOAT, 28);
  ck_assert_int_eq(N_I32, 8);
  ck_assert_int_eq(N_I64, 6);
  int64_t nf = N_FLOAT, n32 = N_I32, n64 = N_I64;
  TensorType tf = ir_type_make(TY_F32, 1, &nf), t32 = ir_type_make(TY_I32, 1, &n32),
             t64 = ir_type_make(TY_I64, 1, &n64);
  ck_assert(ir_tensor_alloc(&in->t[0], &tf) && ir_tensor_alloc(&in->t[1], &t32) &&
            ir_tensor_alloc(&in->t[2], &t64));
  for (int i = 0; i < N_FLOAT; i++) memcpy((uint32_t *)in->t[0].data + i, &float_cases[i].in, 4);
  for (int i = 0; i < N_I32; i++) ((int32_t *)in->t[1].data)[i] = (int32_t)i32_cases[i].in;
  for (int i = 0; i < N_I64; i++) ((int64_t *)in->t[2].data)[i] = i64_cases[i].in;
  in->names[0] = "x", in->names[1] = "n", in->names[2] = "l";
  in->map = (TensorMap){3, in->names, in->t};
}

static void release(Inputs *in) {
  for (int i = 0; i < 3; i++) ir_tensor_free(&in->t[i]);
}

static void expect_bits(const Tensor *t, int n, const uint16_t *want, size_t stride, const char *where,
                        const char *what) {
  for (int i = 0; i < n; i++) {
    uint16_t got = ((const uint16_t *)t->data)[i];
    uint16_t w = *(const uint16_t *)((const char *)want + (size_t)i * stride);
    bool is_nan = (got & 0x7fff) > (t->type.dtype == TY_F16 ? 0x7c00 : 0x7f80);
    bool ok = w == 0xffff ? is_nan : got == w;
    ck_assert_msg(ok, "%s: %s case %d: 0x%04x, expected 0x%04x", where, what, i, got, w);
  }
}

/* Outputs in the graph's order: xh, xb, nh, nb, lh, lb. */
static void check_outputs(const Tensor *out, const char *where) {
  expect_bits(&out[0], N_FLOAT, &float_cases[0].f16, sizeof(FloatCase), where, "f32 -> f16");
  expect_bits(&out[1], N_FLOAT, &float_cases[0].bf16, sizeof(FloatCase), where, "f32 -> bf16");
  expect_bits(&out[2], N_I32, &i32_cases[0].f16, sizeof(IntCase), where, "i32 -> f16");
  expect_bits(&out[3], N_I32, &i32_cases[0].bf16, sizeof(IntCase), where, "i32 -> bf16");
  expect_bits(&out[4], N_I64, &i64_cases[0].f16, sizeof(IntCase), where, "i64 -> f16");
  expect_bits(&out[5], N_I64, &i64_cases[0].bf16, sizeof(IntCase), where, "i64 -> bf16");
}

START_TEST(reference_rounds_to_nearest_even) {
  Ctx c;
  ctx_init(&c);
  Job j = compile_at(&c, text, -1);
  Inputs in;
  make(&in);
  Tensor *out = eval_all(j.g, &in.map);
  check_outputs(out, "ir_eval");
  free_outputs(out, j.g->n_outputs);
  release(&in);
  ctx_free(&c);
}
END_TEST

START_TEST(kernels_round_to_nearest_even) {
  for (int level = 0; level <= 2; level += 2) {
    Ctx c;
    ctx_init(&c);
    Job j = compile_at(&c, text, level);
    test_nvrtc(j.cg.source, "sm_90");
    Inputs in;
    make(&in);
    Tensor *out = test_run_emu(j.cg.plan, NULL, &in.map);
    check_outputs(out, level ? "emu -O2" : "emu -O0");
    free_outputs(out, j.g->n_outputs);
    release(&in);
    ctx_free(&c);
  }
}
END_TEST

static Suite *round_suite(void) {
  Suite *s = suite_create("round");
  TCase *t = tcase_create("ties");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, reference_rounds_to_nearest_even);
  tcase_add_test(t, kernels_round_to_nearest_even);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(round_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

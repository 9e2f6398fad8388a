/* Check suite for attention's training: attention_lse's forward (the
 * result and each row's logsumexp, codegen/attention.c) and
 * attention_grad's two kernels (codegen/attention_grad.c), the
 * gradients from that lse: on emu against ir_eval in f32, f16,
 * bf16 and f32 under --tf32 (the tensor cores) for every mask (none, causal, bool, additive, key padding, rows
 * with every key masked), Sq != Sk both ways, lengths that are no
 * multiple of a tile, grouped and multi-query heads, d = 20 to 256 (the
 * 32-row tiles), both layouts, empty lengths; NVRTC compiles each for
 * sm_90.  The gradients' values against finite differences are
 * test_grad's; training through it test_train's. */
#include "check_quiet.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tests/irjob.h"
#include "tests/testutil.h"

static Ctx ctx;
static void setup(void) { ctx_init(&ctx); }
static void teardown(void) { ctx_free(&ctx); }

/* Each output within this much of max(1, its largest magnitude): f32 sums in
 * another order than the interpreter's doubles; f16 and bf16 round their
 * operands and results. */
static bool tf32; /* variant 3 of the loop tests: f32 under --tf32 */

/* tf32's is the largest: its operands round f32 inputs, so where a
 * gradient is 0 in exact arithmetic (one key: P = 1, dP = D, dk = 0)
 * it is the noise of dy's rounding in dP against D's f32 products, 8.6e-3
 * of 1 in lengths' Sk = 1 case (a numpy model of the kernels' roundings
 * agrees with emu to 1e-4 on its first); every other case passes at
 * 4e-3. */
static double tolerance(DType dt) { return dt == TY_F32 ? (tf32 ? 1.5e-2 : 5e-6) : dt == TY_F16 ? 2e-3 : 8e-3; }

/* attention_lse and attention_grad of q [B, H, Sq, d] ([B, Sq, H, d]
 * under bshd), k and v [B, Hkv, Sk, d], dy q's type, in dt, with attrs
 * and, when mask_type is not NULL, a mask of that type (%1$s in it is
 * dt's name): the result, each row's lse, dq, dk and dv; compiled,
 * through NVRTC, and run on emu against the interpreter,
 * inputs in [-2, 2) (a bool mask half true). */
static void check(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t d, const char *attrs,
                  const char *mask_type) {
  const char *t = ir_dtype_name(dt);
  char mask[128] = "", mask_in[160] = "";
  if (mask_type) {
    snprintf(mask, sizeof mask, mask_type, t);
    snprintf(mask_in, sizeof mask_in, "  %%m = input {name=\"m\"} : %s\n", mask);
  }
  bool bshd = strstr(attrs, "bshd") != NULL;
  const char *qt = arena_printf(&ctx.arena, "%s[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", t, B,
                                bshd ? Sq : H, bshd ? H : Sq, d);
  const char *kt = arena_printf(&ctx.arena, "%s[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", t, B,
                                bshd ? Sk : Hkv, bshd ? Hkv : Sk, d);
  const char *lt = arena_printf(&ctx.arena, "f32[%" PRId64 ", %" PRId64 ", %" PRId64 "]", B, H, Sq);
  char *s = arena_printf(&ctx.arena,
                         "graph attn {\n"
                         "  %%q = input {name=\"q\"} : %s\n"
                         "  %%k = input {name=\"k\"} : %s\n"
                         "  %%v = input {name=\"v\"} : %s\n"
                         "  %%dy = input {name=\"dy\"} : %s\n"
                         "%s"
                         "  %%o, %%lse = attention_lse %%q, %%k, %%v%s %s : %s, %s\n"
                         "  %%dq, %%dk, %%dv = attention_grad %%q, %%k, %%v, %%o, %%dy, %%lse%s %s : %s, %s, %s\n"
                         "  return %%dq as \"dq\", %%dk as \"dk\", %%dv as \"dv\", %%o as \"o\", %%lse as \"lse\"\n"
                         "}\n",
                         qt, kt, kt, qt, mask_in, mask_type ? ", %m" : "", attrs, qt, lt, mask_type ? ", %m" : "", attrs,
                         qt, kt, kt);
  Job j = compile_opts(&ctx, s, 0, (CgOptions){.tf32 = tf32}); /* no passes: the two ops as written */
  test_nvrtc(j.cg.source, "sm_90");
  ck_assert(test_emu_near_eval(j.g, j.cg.plan, 17, -2, 2, tolerance(dt)));
}

static const DType dtypes[] = {TY_F32, TY_F16, TY_BF16, TY_F32};

static DType variant(int i) {
  tf32 = i == 3;
  return dtypes[i];
}

/* causal over three tiles of 64 rows with one key/value head for two
 * query heads; a bool mask; an additive one with causal */
START_TEST(masks) {
  DType dt = variant(_i);
  check(dt, 1, 2, 1, 130, 130, 32, "{causal=1}", NULL);
  check(dt, 1, 2, 1, 70, 70, 16, "", "bool[1, 2, 70, 70]");
  check(dt, 1, 2, 1, 70, 70, 16, "{causal=1}", "%s[70, 70]");
}
END_TEST

/* a key padding mask over two batch rows; rows whose every key is
 * masked (their P and every gradient through them 0) */
START_TEST(padding) {
  DType dt = variant(_i);
  check(dt, 2, 2, 2, 33, 70, 16, "", "bool[2, 1, 1, 70]");
  check(dt, 1, 2, 2, 40, 70, 16, "{causal=1}", "bool[40, 1]");
}
END_TEST

/* Sq != Sk both ways (causal with more keys than queries leaves key
 * tiles no query reaches: dk and dv 0 there; 5 rows over 300 keys split
 * the forward's keys), Sk = 1, a scale of its own with 4 query heads
 * over 2, no keys (dq 0), no queries (dk, dv 0) */
START_TEST(lengths) {
  DType dt = variant(_i);
  check(dt, 1, 4, 2, 5, 70, 16, "{scale=0.3}", NULL);
  check(dt, 1, 2, 1, 70, 1, 16, "", NULL);
  check(dt, 1, 2, 1, 20, 150, 16, "{causal=1}", NULL);
  /* few query rows over many keys: the forward splits the keys, its lse
   * from the combine */
  check(dt, 1, 2, 1, 5, 300, 16, "", "bool[5, 300]");
  check(dt, 1, 2, 1, 5, 0, 16, "", NULL);
  check(dt, 1, 2, 1, 0, 5, 16, "", NULL);
}
END_TEST

/* bshd with grouped heads, causal and a key padding mask; d = 20 (no
 * whole 16 columns) with an additive mask per head */
START_TEST(layout_bshd) {
  DType dt = variant(_i);
  check(dt, 2, 4, 2, 70, 33, 16, "{causal=1, layout=\"bshd\"}", "bool[2, 1, 1, 33]");
  check(dt, 1, 3, 3, 9, 17, 20, "{layout=\"bshd\"}", "%s[1, 3, 9, 17]");
}
END_TEST

/* d = 64 and 128 (threads sharing a row: 2, 4), 256 (32-row tiles, 8
 * threads a row; f16 and bf16 on FMA there), 80 causal over several
 * tiles (the tensor cores' 32-key dq tiles and 16-query dk/dv tiles), 40
 * (whole chunks, columns past d zero-filled by cp.async) */
START_TEST(head_dims) {
  DType dt = variant(_i);
  check(dt, 1, 1, 1, 40, 70, 64, "{causal=1}", NULL);
  check(dt, 1, 2, 1, 17, 33, 128, "", NULL);
  check(dt, 1, 1, 1, 40, 35, 256, "{causal=1}", NULL);
  check(dt, 1, 2, 1, 130, 150, 80, "{causal=1}", NULL);
  check(dt, 2, 2, 2, 33, 20, 40, "", "bool[2, 1, 1, 20]");
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("attention_grad");
  TCase *tc = tcase_create("emu");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, masks, 0, 4);
  tcase_add_loop_test(tc, padding, 0, 4);
  tcase_add_loop_test(tc, lengths, 0, 4);
  tcase_add_loop_test(tc, layout_bshd, 0, 4);
  tcase_add_loop_test(tc, head_dims, 0, 4);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}

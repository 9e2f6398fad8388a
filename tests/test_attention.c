/* Check suite for the attention op and its FlashAttention-style kernel
 * (codegen/attention.c): on emu against ir_eval in f32 (1e-5), f16
 * (1e-2) and bf16 (2e-2) for every mask (none, causal, additive, bool,
 * key padding, rows with every key masked), Sq != Sk, Sk = 1, lengths
 * that are no multiple of a tile, fewer key/value heads than query
 * heads, d = 20 to 256, both layouts; NVRTC compiles each for
 * sm_90; the f16 and bf16 kernels use mma.sync and ldmatrix; the cost
 * report's FLOPs; the shape rule's messages; the attention pass (fused
 * equals unfused); the language's multihead_attention with kv_heads. */
#include "check_quiet.h"
#include <float.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/kernel.h"
#include "frontend/ast.h"
#include "frontend/onnx.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "tests/onnxbuild.h"
#include "tests/testutil.h"

typedef struct Job {
  const char *text;
  CgOptions opts;
  Graph *g;
  CgResult r;
  bool ok;
} Job;

static Ctx ctx;
static void setup(void) { ctx_init(&ctx); }
static void teardown(void) { ctx_free(&ctx); }

static int run_job(Ctx *c, void *data) {
  Job *j = data;
  j->g = ir_parse(c, ctx_add_file(c, "test.ir", j->text, strlen(j->text)));
  if (!j->g || !ir_verify(j->g)) return 0;
  j->ok = cg_compile_opts(j->g, &j->opts, &j->r);
  return 0;
}

/* Whether this test's f32 compiles with --tf32 (variant 3 of the loop
 * tests: f32 on the tensor cores, operands rounded to tf32).  Its
 * tolerance is bf16's: q, k, v and P rounded to 10 fraction bits give up
 * to 1.1e-2 of |o| + 0.1 in a numpy model of the kernel's roundings
 * (inputs in [-2, 2), d = 64, scale 0.3: lengths' first case), 1.0e-2
 * here. */
static bool tf32;

static double tolerance(DType dt) {
  return dt == TY_F32 ? (tf32 ? 2e-2 : 1e-5) : dt == TY_F16 ? 1e-2 : 2e-2;
}

/* One attention of q [B, H, Sq, d], k and v [B, Hkv, Sk, d] in dt, with
 * attrs and, when mask_type is not NULL, a mask input of that type
 * (%1$s in it is dt's name). */
static Job compile_attention(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t d,
                             const char *attrs, const char *mask_type) {
  const char *t = ir_dtype_name(dt);
  char mask[128] = "", mask_in[160] = "";
  if (mask_type) {
    snprintf(mask, sizeof mask, mask_type, t);
    snprintf(mask_in, sizeof mask_in, "  %%m = input {name=\"m\"} : %s\n", mask);
  }
  /* layout "bshd" in attrs: the operands [B, S, H, d] */
  bool bshd = strstr(attrs, "bshd") != NULL;
  const char *qt = arena_printf(&ctx.arena, "%s[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", t, B,
                                bshd ? Sq : H, bshd ? H : Sq, d);
  const char *kt = arena_printf(&ctx.arena, "%s[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", t, B,
                                bshd ? Sk : Hkv, bshd ? Hkv : Sk, d);
  char *s = arena_printf(&ctx.arena,
                         "graph attn {\n"
                         "  %%q = input {name=\"q\"} : %s\n"
                         "  %%k = input {name=\"k\"} : %s\n"
                         "  %%v = input {name=\"v\"} : %s\n"
                         "%s"
                         "  %%0 = attention %%q, %%k, %%v%s %s : %s\n"
                         "  return %%0 as \"o\"\n"
                         "}\n",
                         qt, kt, kt, mask_in, mask_type ? ", %m" : "", attrs, qt);
  Job j = {.text = s, .opts = {.tf32 = tf32}};
  int rc = ctx_guard(&ctx, run_job, &j);
  ck_assert_msg(rc == 0 && j.ok, "compile failed:\n%s\n%s", s, diag_text(&ctx));
  return j;
}

/* Compiled (NVRTC for sm_90 too) and run on emu against the interpreter,
 * inputs in [-2, 2) (a bool mask half true). */
static Job check(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t d, const char *attrs,
                 const char *mask_type) {
  Job j = compile_attention(dt, B, H, Hkv, Sq, Sk, d, attrs, mask_type);
  test_nvrtc(j.r.source, "sm_90");
  ck_assert(test_emu_matches_eval(j.g, j.r.plan, 29, -2, 2, tolerance(dt)));
  return j;
}

static const DType dtypes[] = {TY_F32, TY_F16, TY_BF16, TY_F32};

/* Loop test i's dtype; i = 3 is f32 under --tf32. */
static DType variant(int i) {
  tf32 = i == 3;
  return dtypes[i];
}

/* Masks: causal (over three blocks of query rows), bool and additive
 * per query and key, and both with causal, in each dtype.  One key/value
 * head for two query heads (multi-query). */
START_TEST(masks) {
  DType dt = variant(_i);
  check(dt, 1, 1, 1, 130, 130, 64, "{causal=1}", NULL);
  check(dt, 1, 2, 1, 70, 70, 64, "", "bool[1, 2, 70, 70]");
  check(dt, 1, 2, 1, 70, 70, 64, "{causal=1}", "%s[70, 70]");
}
END_TEST

/* PyTorch's key_padding_mask as a bool [B, 1, 1, Sk] (true: attend), two
 * batches; rows whose every key is masked (a bool [Sq, 1]) give zeros. */
START_TEST(padding) {
  DType dt = variant(_i);
  check(dt, 2, 2, 2, 33, 70, 64, "", "bool[2, 1, 1, 70]");
  check(dt, 1, 2, 2, 40, 70, 64, "{causal=1}", "bool[40, 1]");
}
END_TEST

/* Sq != Sk both ways, Sk = 1, lengths no multiple of a tile, grouped
 * query heads (4 over 2), a scale of its own, Sk = 0 and Sq = 0. */
START_TEST(lengths) {
  DType dt = variant(_i);
  check(dt, 1, 4, 2, 5, 70, 64, "{scale=0.3}", NULL);
  check(dt, 1, 2, 1, 70, 1, 64, "", NULL);
  check(dt, 1, 2, 1, 70, 3, 64, "{causal=1}", NULL);
  /* no keys at all: every row zeros; no queries: nothing to launch */
  check(dt, 1, 2, 1, 5, 0, 64, "", NULL);
  check(dt, 1, 2, 1, 0, 5, 64, "", NULL);
}
END_TEST

/* Layout "bshd" (q, k, v and the result [B, S, H, d]): grouped heads,
 * causal with a key padding mask, d = 128 and one of no whole chunk. */
START_TEST(layout_bshd) {
  DType dt = variant(_i);
  check(dt, 2, 4, 2, 70, 33, 64, "{causal=1, layout=\"bshd\"}", "bool[2, 1, 1, 33]");
  check(dt, 1, 2, 1, 17, 70, 128, "{layout=\"bshd\"}", "%s[1, 2, 17, 70]");
  check(dt, 1, 3, 3, 9, 9, 20, "{layout=\"bshd\"}", NULL);
}
END_TEST

/* Head dims: 128; 256 (the largest) on FMA (its 32-key tiles) and on
 * the tensor cores in bf16; 40 (no whole K step) in f16; 20 (no whole
 * 16-byte chunk: element loads). */
START_TEST(head_dims) {
  DType dt = variant(_i);
  check(dt, 1, 2, 1, 70, 70, 128, "{causal=1}", NULL);
  if (dt != TY_F16) check(dt, 1, 1, 1, 66, 66, 256, "", "%s[1, 1, 66, 66]");
  if (dt == TY_F16) check(dt, 1, 2, 2, 17, 70, 40, "", NULL);
  check(dt, 1, 2, 2, 17, 20, 20, "{causal=1}", NULL);
}
END_TEST

/* The tensor cores' softmax in the mma accumulators (quad shuffles, P
 * packed as the A fragment of P V) at the edges of its layouts: d = 80
 * (five 16-column steps of O, an odd number of its ldmatrix pairs) over
 * odd lengths with 3 query heads a key/value head, causal and a key
 * padding mask; d = 256 in f16 (bf16 is in head_dims) with an additive
 * mask and odd lengths; about half the rows fully masked (a bool
 * [Sq, 1]), so that quads whose rows have no key sit beside quads whose
 * rows have some. */
START_TEST(register_softmax) {
  DType dt = dtypes[1 + _i];
  check(dt, 2, 6, 2, 67, 77, 80, "{causal=1}", "bool[2, 1, 1, 77]");
  if (dt == TY_F16) check(dt, 1, 2, 1, 19, 45, 256, "", "%s[1, 2, 19, 45]");
  check(dt, 1, 2, 2, 31, 45, 64, "", "bool[31, 1]");
}
END_TEST

/* A NaN in one query row makes that row's output NaN and leaves the
 * others finite, in every dtype (the tensor cores' row max skips NaN
 * scores, so NaN reaches the row through its P): emu against the
 * interpreter's NaN pattern. */
START_TEST(nan_rows) {
  DType dt = variant(_i);
  Job j = compile_attention(dt, 1, 2, 1, 20, 20, 64, "{causal=1}", NULL);
  TensorMap inputs = {.n = 3};
  const char *names[3] = {"q", "k", "v"};
  Tensor t[3];
  uint64_t state = 7;
  for (int i = 0; i < 3; i++) {
    const RtTensorDesc *in = &j.r.plan->inputs[i];
    TensorType ty = ir_type_make((DType)in->dtype, (int)in->rank, in->dims);
    ck_assert(ir_tensor_alloc(&t[i], &ty));
    for (int64_t e = 0; e < ir_type_numel(&ty); e++)
      ir_tensor_set(&t[i], e, (double)((state = state * 6364136223846793005ull + 1442695040888963407ull) >> 40) /
                                  (double)(1 << 24) - 0.5);
  }
  for (int i = 0; i < 3; i++) names[i] = j.r.plan->inputs[i].name;
  /* q of head 1, row 5, element 3 */
  ir_tensor_set(&t[0], (20 + 5) * 64 + 3, NAN);
  inputs.names = names, inputs.tensors = t;
  Tensor want;
  char err[256];
  ck_assert_msg(ir_eval(j.g, &inputs, NULL, &want, err, sizeof err), "%s", err);
  Tensor *got = test_run_emu(j.r.plan, NULL, &inputs);
  for (int64_t e = 0; e < ir_type_numel(&want.type); e++) {
    double w = ir_tensor_get(&want, e), g = ir_tensor_get(&got[0], e);
    ck_assert_msg(isnan(w) == isnan(g), "element %" PRId64 ": %g, eval says %g", e, g, w);
    ck_assert_msg(isnan(w) == (e / 64 == 20 + 5), "element %" PRId64 ": eval %g", e, w);
  }
  ir_tensor_free(&want);
  ir_tensor_free(&got[0]);
  free(got);
  for (int i = 0; i < 3; i++) ir_tensor_free(&t[i]);
}
END_TEST

/* Steps of j's plan whose label has `what`. */
static int steps_with(const Job *j, const char *what) {
  int n = 0;
  for (uint32_t i = 0; i < j->r.plan->n_steps; i++)
    n += j->r.plan->steps[i].label && strstr(j->r.plan->steps[i].label, what) != NULL;
  return n;
}

/* Flash-decoding: few query blocks and at least 4 key tiles split the
 * keys over blocks, and the last split of a query block to arrive
 * combines the parts, in the same launch.  One query row over 300 keys
 * with grouped heads; causal over 300 keys where the first query block's
 * second split has no tile left (its part empty); layout "bshd" with a
 * key padding mask over 520 keys in 3 splits; f32's 32-key tiles at
 * d = 256; rows with every key masked stay zeros.  Each on emu against
 * the interpreter, and one launch with its counters in the plan. */
START_TEST(split_keys) {
  DType dt = variant(_i);
  Job j = check(dt, 2, 4, 2, 1, 300, 64, "", NULL);
  ck_assert_int_eq(steps_with(&j, "keys in 2 splits"), 1);
  ck_assert_int_eq((int)j.r.plan->n_steps, 1);
  /* a counter per query block, head and batch row: 1 x 4 x 2 */
  ck_assert_uint_eq(j.r.plan->sync_bytes, 8 * 4);
  j = check(dt, 1, 2, 2, 70, 300, 64, "{causal=1}", "%s[70, 300]");
  ck_assert_int_eq(steps_with(&j, "keys in"), 1);
  ck_assert_int_eq((int)j.r.plan->n_steps, 1);
  j = check(dt, 2, 2, 1, 3, 520, 128, "{layout=\"bshd\"}", "bool[2, 1, 1, 520]");
  /* tf32's 32-key tiles at d = 128 split otherwise */
  ck_assert_int_eq(steps_with(&j, tf32 ? "keys in" : "keys in 3 splits"), 1);
  ck_assert_int_eq((int)j.r.plan->n_steps, 1);
  if (dt != TY_F16) check(dt, 1, 1, 1, 2, 200, 256, "", NULL);
  check(dt, 1, 2, 1, 40, 400, 64, "", "bool[40, 1]");
}
END_TEST

/* Decoding: up to 16 query rows take a block of 16 rows and one warp
 * (32 threads), not 64 rows of which 63 stay empty; Sq = 1 over 1, 17
 * and 300 keys (split, and with --no-split-keys), one launch each, and
 * 16 rows causal (the bound).  The split kernel writes the result from
 * the last split's combination, and counts arrivals in SYNC. */
START_TEST(decode) {
  DType dt = variant(_i);
  static const int64_t keys[] = {1, 17, 300};
  for (int i = 0; i < 3; i++) {
    Job j = check(dt, 2, 4, 2, 1, keys[i], 64, "", NULL);
    ck_assert_int_eq(steps_with(&j, "16x"), 1);
    ck_assert_uint_eq(j.r.plan->steps[0].launch.block[0], 32);
    ck_assert_int_eq((int)j.r.plan->n_steps, 1);
  }
  Job s = compile_attention(dt, 2, 4, 2, 1, 300, 64, "", NULL);
  const RtLaunch *l = &s.r.plan->steps[0].launch;
  int outputs = 0, counters = 0;
  for (uint32_t a = 0; a < l->n_args; a++) {
    outputs += l->args[a].kind == RT_ARG_PTR && l->args[a].ref.space == RT_SPACE_OUTPUT;
    counters += l->args[a].kind == RT_ARG_PTR && l->args[a].ref.space == RT_SPACE_SYNC;
  }
  ck_assert_int_eq(outputs, 1);
  ck_assert_int_eq(counters, 1);
  Job one = {.text = s.text, .opts = {.no_split_keys = true, .tf32 = tf32}};
  ck_assert(ctx_guard(&ctx, run_job, &one) == 0 && one.ok);
  ck_assert_int_eq((int)one.r.plan->n_steps, 1);
  ck_assert(test_emu_matches_eval(one.g, one.r.plan, 29, -2, 2, tolerance(dt)));
  Job c = check(dt, 1, 2, 1, 16, 70, 64, "{causal=1}", NULL);
  ck_assert_int_eq(steps_with(&c, "16x"), 1);
}
END_TEST

static int count_op(const Graph *g, OpKind op) {
  int n = 0;
  for (const Node *it = g->first; it; it = it->next) n += it->op == op;
  return n;
}

/* ---- the kernel's text and cost ---- */

/* f16 and bf16 take the tensor cores for both products (mma.sync through
 * ldmatrix, .trans for V) and cp.async for K and V; f32 none of them.
 * The cost report gives the step 4 B H Sq Sk d FLOPs and moves Q, K, V,
 * the mask and O once. */
START_TEST(text_and_cost) {
  for (int i = 0; i < 3; i++) {
    DType dt = dtypes[i];
    Job j = compile_attention(dt, 2, 4, 2, 100, 90, 64, "{causal=1}", "bool[2, 1, 1, 90]");
    const char *src = j.r.source;
    bool tc = dt != TY_F32;
    ck_assert_int_eq(strstr(src, dt == TY_BF16 ? "dl_mma_bf16(&" : "dl_mma_f16(&") != NULL, tc);
    ck_assert_int_eq(strstr(src, "dl_ldmatrix_x4_trans(&") != NULL, tc);
    ck_assert_ptr_nonnull(strstr(src, "dl_cp_async16(&"));
    /* the softmax: in the accumulators on the tensor cores, through
     * shared S (and alpha, 1 / l per row) on FMA */
    ck_assert_int_eq(strstr(src, "__shfl_xor_sync(0xffffffffu, ") != NULL, tc);
    ck_assert_int_eq(strstr(src, dt == TY_BF16 ? "= dl_pack_bf16x2(" : "= dl_pack_f16x2(") != NULL, tc);
    ck_assert_int_eq(strstr(src, " *Ss") != NULL, !tc);
    ck_assert_int_eq(strstr(src, " *rowv") != NULL, !tc);
    ck_assert_int_eq(j.r.plan->n_steps, 1);
    const RtStep *st = &j.r.plan->steps[0];
    /* Q, two stages of K and of V (rows of 64 + 8 halves); f32: rows of
     * 64 + 4 floats, and S and rowv */
    ck_assert_uint_eq(st->launch.dynamic_shared_bytes, tc ? 46080 : 104704);
    ck_assert_int_eq(st->kind, RT_STEP_LAUNCH);
    ck_assert_ptr_nonnull(strstr(j.r.plan->kernels[st->launch.kernel].name, "attention"));
    IrCost c = j.r.step_costs[0];
    double es = dt == TY_F32 ? 4 : 2;
    ck_assert_double_eq(c.flops, 4.0 * 2 * 4 * 100 * 90 * 64);
    ck_assert_double_eq(c.bytes, es * (2 * 4 * 100 * 64 * 2 + 2 * 2 * 2 * 90 * 64) + 2 * 90);
  }
}
END_TEST

/* f32 under --tf32 takes the tensor cores (m16n8k8): Q K^T by ldmatrix
 * on the f32 tiles, P V with P from the accumulators and V by scalar
 * loads (ldmatrix.trans moves 16-bit elements), every operand rounded
 * to tf32; the label says so, and the tiles are f32 (rows of 64 + 4
 * floats: Q and two stages of K and V).  The backward's two kernels
 * too. */
START_TEST(tf32_text) {
  tf32 = true;
  Job j = compile_attention(TY_F32, 2, 4, 2, 100, 90, 64, "{causal=1}", "bool[2, 1, 1, 90]");
  const char *src = j.r.source;
  ck_assert_ptr_nonnull(strstr(src, "dl_mma_tf32(&"));
  ck_assert_ptr_nonnull(strstr(src, "dl_ldmatrix_x4(&"));
  ck_assert_ptr_null(strstr(src, "dl_ldmatrix_x4_trans(&"));
  ck_assert_ptr_nonnull(strstr(src, "= dl_tf32("));
  ck_assert_ptr_null(strstr(src, " *Ss"));
  ck_assert_int_eq(steps_with(&j, "flash attention mma tf32, 64x64 tiles"), 1);
  ck_assert_uint_eq(j.r.plan->steps[0].launch.dynamic_shared_bytes, 3 * 64 * 68 * 4 * 2 - 64 * 68 * 4);
  /* past d = 64, 32-key tiles */
  j = compile_attention(TY_F32, 1, 2, 2, 70, 70, 128, "", NULL);
  ck_assert_int_eq(steps_with(&j, "flash attention mma tf32, 64x32 tiles"), 1);
}
END_TEST

/* Over 256, the kernel's registers for O would not fit: a clear error. */
START_TEST(head_dim_limit) {
  char *s = arena_printf(&ctx.arena, "graph big {\n"
                                     "  %%q = input {name=\"q\"} : f16[1, 1, 8, 288]\n"
                                     "  %%0 = attention %%q, %%q, %%q : f16[1, 1, 8, 288]\n"
                                     "  return %%0 as \"o\"\n"
                                     "}\n");
  Job j = {.text = s};
  ck_assert_int_eq(ctx_guard(&ctx, run_job, &j), 0);
  ck_assert(!j.ok);
  ck_assert_ptr_nonnull(strstr(diag_text(&ctx), "error: attention: the fused kernel takes head dims up to 256, got 288"));
}
END_TEST

/* The shape rule's messages. */
START_TEST(shape_errors) {
  static const struct {
    const char *k, *mask, *want;
  } cases[] = {
      {"f32[1, 3, 5, 8]", NULL, "the 3 key/value heads must divide the 4 query heads"},
      {"f32[1, 2, 5, 7]", NULL, "k must be [1, Hkv, Sk, 8] of f32[1, 4, 6, 8]'s dtype, got f32[1, 2, 5, 7]"},
      {"f32[1, 2, 5, 8]", "bool[6, 4]", "the mask bool[6, 4] does not broadcast to [1, 4, 6, 5]"},
      {"f32[1, 2, 5, 8]", "i32[6, 5]", "the mask must be bool or f32[1, 4, 6, 8]'s dtype, got i32[6, 5]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char mask[96] = "";
    if (cases[i].mask) snprintf(mask, sizeof mask, "  %%m = input {name=\"m\"} : %s\n", cases[i].mask);
    char *s = arena_printf(&ctx.arena,
                           "graph bad {\n  %%q = input {name=\"q\"} : f32[1, 4, 6, 8]\n"
                           "  %%k = input {name=\"k\"} : %s\n%s"
                           "  %%0 = attention %%q, %%k, %%k%s : f32[1, 4, 6, 8]\n  return %%0 as \"o\"\n}\n",
                           cases[i].k, mask, cases[i].mask ? ", %m" : "");
    Job j = {.text = s};
    ck_assert_int_eq(ctx_guard(&ctx, run_job, &j), 0);
    ck_assert(!j.ok);
    ck_assert_msg(strstr(diag_text(&ctx), cases[i].want), "%s\nwant: %s", diag_text(&ctx), cases[i].want);
    ctx_free(&ctx);
    ctx_init(&ctx);
  }
}
END_TEST

/* ---- the attention pass ---- */

/* The chain of an older export: K transposed by its own transpose, the
 * scores divided by sqrt(d), an additive mask, a bool mask that hides
 * keys (where(c, -inf, s), c computed), softmax, the product with V.  The
 * pass makes it one attention op, and the fused plan on emu equals
 * ir_eval of the unfused graph on the same inputs (in [-1, 1): the
 * unfused graph rounds its scores to the half type, the kernel keeps
 * them in f32). */
static const char chain_text[] =
    "graph chain {\n"
    "  %%q = input {name=\"q\"} : %1$s[1, 2, 37, 64]\n"
    "  %%k = input {name=\"k\"} : %1$s[1, 2, 70, 64]\n"
    "  %%v = input {name=\"v\"} : %1$s[1, 2, 70, 64]\n"
    "  %%a = input {name=\"a\"} : %1$s[37, 70]\n"
    "  %%hf = input {name=\"hf\"} : %1$s[1, 1, 1, 70]\n"
    "  %%z = const {value=0} : %1$s[]\n"
    "  %%h = greater %%hf, %%z : bool[1, 1, 1, 70]\n"
    "  %%kt = transpose %%k {perm=[0, 1, 3, 2]} : %1$s[1, 2, 64, 70]\n"
    "  %%s = matmul %%q, %%kt : %1$s[1, 2, 37, 70]\n"
    "  %%c = const {value=8} : %1$s[]\n"
    "  %%d = div %%s, %%c : %1$s[1, 2, 37, 70]\n"
    "  %%e = add %%a, %%d : %1$s[1, 2, 37, 70]\n"
    "  %%i = const {value=-inf} : %1$s[]\n"
    "  %%w = where %%h, %%i, %%e : %1$s[1, 2, 37, 70]\n"
    "  %%p = softmax %%w {axis=3} : %1$s[1, 2, 37, 70]\n"
    "  %%o = matmul %%p, %%v : %1$s[1, 2, 37, 64]\n"
    "  return %%o as \"o\"\n"
    "}\n";

typedef struct PassJob {
  const char *text;
  Graph *unfused, *g;
  CgResult r;
  bool changed, ok;
} PassJob;

static int run_pass_job(Ctx *c, void *data) {
  PassJob *j = data;
  j->unfused = ir_parse(c, ctx_add_file(c, "chain.ir", j->text, strlen(j->text)));
  if (!j->unfused || !ir_verify(j->unfused) || !(j->g = ir_copy(j->unfused, "chain.ir"))) return 0;
  PassOptions po = {.opt_level = 2, .passes = "attention,dce", .verify_each = true};
  j->changed = pass_run_pipeline(j->g, &po, NULL) && count_op(j->g, OP_ATTENTION) == 1;
  j->ok = j->changed && cg_compile(j->g, &j->r);
  return 0;
}

START_TEST(pass_equals_unfused) {
  DType dt = variant(_i);
  PassJob j = {.text = arena_printf(&ctx.arena, chain_text, ir_dtype_name(dt))};
  ck_assert_int_eq(ctx_guard(&ctx, run_pass_job, &j), 0);
  ck_assert_msg(j.ok, "%s", diag_text(&ctx));
  ck_assert_int_eq(count_op(j.g, OP_SOFTMAX), 0);
  ck_assert_int_eq(count_op(j.g, OP_MATMUL), 0);
  ck_assert(test_emu_matches_eval(j.unfused, j.r.plan, 31, -1, 1, tolerance(dt)));
}
END_TEST

/* PyTorch's safe softmax as exported (Hugging Face's attention with a
 * padding mask): where(isnan(P), 0, P).  A mask that hides whole query
 * rows (about half of them, by the sign of hf) makes those rows NaN in
 * the softmax and 0 after the where, as in the op: the chain fuses, and
 * the plan on emu equals ir_eval of the unfused graph, zero rows too. */
static const char safe_text[] =
    "graph safe {\n"
    "  %%q = input {name=\"q\"} : %1$s[1, 2, 37, 64]\n"
    "  %%k = input {name=\"k\"} : %1$s[1, 2, 70, 64]\n"
    "  %%v = input {name=\"v\"} : %1$s[1, 2, 70, 64]\n"
    "  %%hf = input {name=\"hf\"} : %1$s[1, 1, 37, 1]\n"
    "  %%z = const {value=0} : %1$s[]\n"
    "  %%h = greater %%hf, %%z : bool[1, 1, 37, 1]\n"
    "  %%kt = transpose %%k {perm=[0, 1, 3, 2]} : %1$s[1, 2, 64, 70]\n"
    "  %%s = matmul %%q, %%kt : %1$s[1, 2, 37, 70]\n"
    "  %%c = const {value=0.125} : %1$s[]\n"
    "  %%d = mul %%s, %%c : %1$s[1, 2, 37, 70]\n"
    "  %%i = const {value=-inf} : %1$s[]\n"
    "  %%w = where %%h, %%i, %%d : %1$s[1, 2, 37, 70]\n"
    "  %%p = softmax %%w {axis=3} : %1$s[1, 2, 37, 70]\n"
    "  %%n = isnan %%p : bool[1, 2, 37, 70]\n"
    "  %%g = where %%n, %%z, %%p : %1$s[1, 2, 37, 70]\n"
    "  %%o = matmul %%g, %%v : %1$s[1, 2, 37, 64]\n"
    "  return %%o as \"o\"\n"
    "}\n";

START_TEST(pass_safe_softmax) {
  DType dt = variant(_i);
  PassJob j = {.text = arena_printf(&ctx.arena, safe_text, ir_dtype_name(dt))};
  ck_assert_int_eq(ctx_guard(&ctx, run_pass_job, &j), 0);
  ck_assert_msg(j.ok, "%s", diag_text(&ctx));
  ck_assert_int_eq(count_op(j.g, OP_ISNAN) + count_op(j.g, OP_SOFTMAX) + count_op(j.g, OP_WHERE), 0);
  ck_assert(test_emu_matches_eval(j.unfused, j.r.plan, 29, -1, 1, tolerance(dt)));
}
END_TEST

/* What the pass leaves: a softmax over another axis, a scores matmul
 * used twice, V with other heads than Q (broadcast). */
START_TEST(pass_leaves) {
  static const char *const texts[] = {
      "graph a {\n  %q = input {name=\"q\"} : f32[1, 2, 4, 8]\n  %k = input {name=\"k\"} : f32[1, 2, 8, 4]\n"
      "  %s = matmul %q, %k : f32[1, 2, 4, 4]\n  %p = softmax %s {axis=2} : f32[1, 2, 4, 4]\n"
      "  %o = matmul %p, %q : f32[1, 2, 4, 8]\n  return %o as \"o\"\n}\n",
      "graph b {\n  %q = input {name=\"q\"} : f32[1, 2, 4, 8]\n  %k = input {name=\"k\"} : f32[1, 2, 8, 4]\n"
      "  %s = matmul %q, %k : f32[1, 2, 4, 4]\n  %p = softmax %s {axis=3} : f32[1, 2, 4, 4]\n"
      "  %o = matmul %p, %q : f32[1, 2, 4, 8]\n  return %o as \"o\", %s as \"s\"\n}\n",
      "graph c {\n  %q = input {name=\"q\"} : f32[1, 2, 4, 8]\n  %k = input {name=\"k\"} : f32[1, 2, 8, 4]\n"
      "  %v = input {name=\"v\"} : f32[1, 1, 4, 8]\n"
      "  %s = matmul %q, %k : f32[1, 2, 4, 4]\n  %p = softmax %s {axis=3} : f32[1, 2, 4, 4]\n"
      "  %o = matmul %p, %v : f32[1, 2, 4, 8]\n  return %o as \"o\"\n}\n",
  };
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    PassJob j = {.text = texts[i]};
    ck_assert_int_eq(ctx_guard(&ctx, run_pass_job, &j), 0);
    ck_assert_msg(!j.changed, "%s", texts[i]);
  }
}
END_TEST

/* ---- causal masks and repeated heads as exporters write them ---- */

/* torch.finfo(dt).min as the IR text writes it. */
static const char *finfo_min(DType dt) {
  return dt == TY_F16 ? "-65504" : dt == TY_BF16 ? "-3.3895313892515355e+38" : "-3.4028234663852886e+38";
}

/* A chain over q [1, 4, Sq, 32] and k, v [1, 2, 70, 32] repeated to 4
 * heads as HF's repeat_kv writes it (reshape to [1, 2, 1, 70, 32],
 * expand, reshape; with `tile` the order a Tile gives, [1, 1, 2, ..]),
 * K transposed after; the scaled scores %d go through mask, which must
 * define %w.  %r [Sq, 1] counts rows from row0 and %cl [1, 70] columns,
 * so that `greater %cl, %r` is true above the diagonal. */
static const char *gqa_chain(DType dt, int64_t sq, int64_t row0, bool tile, const char *mask) {
  const char *t = ir_dtype_name(dt);
  const char *rep = tile ? "1, 1, 2" : "1, 2, 1";
  return arena_printf(
      &ctx.arena,
      "graph gqa {\n"
      "  %%q = input {name=\"q\"} : %1$s[1, 4, %2$" PRId64 ", 32]\n"
      "  %%k = input {name=\"k\"} : %1$s[1, 2, 70, 32]\n"
      "  %%v = input {name=\"v\"} : %1$s[1, 2, 70, 32]\n"
      "  %%k1 = reshape %%k {shape=[%4$s, 70, 32]} : %1$s[%4$s, 70, 32]\n"
      "  %%k2 = expand %%k1 {shape=[1, 2, 2, 70, 32]} : %1$s[1, 2, 2, 70, 32]\n"
      "  %%k3 = reshape %%k2 {shape=[1, 4, 70, 32]} : %1$s[1, 4, 70, 32]\n"
      "  %%v1 = reshape %%v {shape=[%4$s, 70, 32]} : %1$s[%4$s, 70, 32]\n"
      "  %%v2 = expand %%v1 {shape=[1, 2, 2, 70, 32]} : %1$s[1, 2, 2, 70, 32]\n"
      "  %%v3 = reshape %%v2 {shape=[1, 4, 70, 32]} : %1$s[1, 4, 70, 32]\n"
      "  %%kt = transpose %%k3 {perm=[0, 1, 3, 2]} : %1$s[1, 4, 32, 70]\n"
      "  %%s = matmul %%q, %%kt : %1$s[1, 4, %2$" PRId64 ", 70]\n"
      "  %%c = const {value=0.125} : %1$s[]\n"
      "  %%d = mul %%s, %%c : %1$s[1, 4, %2$" PRId64 ", 70]\n"
      "  %%r = iota {shape=[%2$" PRId64 ", 1], dtype=i64, axis=0, start=%3$" PRId64 ", step=1} : i64[%2$" PRId64
      ", 1]\n"
      "  %%cl = iota {shape=[1, 70], dtype=i64, axis=1, start=0, step=1} : i64[1, 70]\n"
      "%5$s"
      "  %%p = softmax %%w {axis=3} : %1$s[1, 4, %2$" PRId64 ", 70]\n"
      "  %%o = matmul %%p, %%v3 : %1$s[1, 4, %2$" PRId64 ", 32]\n"
      "  return %%o as \"o\"\n"
      "}\n",
      t, sq, row0, rep, arena_printf(&ctx.arena, mask, t, (int)sq, finfo_min(dt)));
}

/* The masks (%1$s the dtype, %2$d Sq, %3$s its finfo.min): PyTorch's masked_fill of
 * triu(ones, 1) with -inf; HF GPT-2's where(tril, s, finfo.min); HF
 * Llama's additive mask, finfo.min above the diagonal and 0 elsewhere;
 * the same with one more entry hidden (row 5, key 2): almost causal. */
static const char mask_triu[] =
    "  %%m = greater %%cl, %%r : bool[%2$d, 70]\n"
    "  %%i = const {value=-inf} : %1$s[]\n"
    "  %%w = where %%m, %%i, %%d : %1$s[1, 4, %2$d, 70]\n";
static const char mask_tril_min[] =
    "  %%m = less_equal %%cl, %%r : bool[%2$d, 70]\n"
    "  %%i = const {value=%3$s} : %1$s[]\n"
    "  %%w = where %%m, %%d, %%i : %1$s[1, 4, %2$d, 70]\n";
static const char mask_additive_min[] =
    "  %%m = greater %%cl, %%r : bool[%2$d, 70]\n"
    "  %%i = const {value=%3$s} : %1$s[]\n"
    "  %%z = const {value=0} : %1$s[]\n"
    "  %%a = where %%m, %%i, %%z : %1$s[%2$d, 70]\n"
    "  %%w = add %%d, %%a : %1$s[1, 4, %2$d, 70]\n";
static const char mask_almost[] =
    "  %%m0 = greater %%cl, %%r : bool[%2$d, 70]\n"
    "  %%five = const {value=5} : i64[]\n"
    "  %%two = const {value=2} : i64[]\n"
    "  %%r5 = equal %%r, %%five : bool[%2$d, 1]\n"
    "  %%c2 = equal %%cl, %%two : bool[1, 70]\n"
    "  %%x = logical_and %%r5, %%c2 : bool[%2$d, 70]\n"
    "  %%m = logical_or %%m0, %%x : bool[%2$d, 70]\n"
    "  %%i = const {value=-inf} : %1$s[]\n"
    "  %%w = where %%m, %%i, %%d : %1$s[1, 4, %2$d, 70]\n";

static const Node *the_attention(const Graph *g) {
  for (const Node *n = g->first; n; n = n->next)
    if (n->op == OP_ATTENTION) return n;
  return NULL;
}

/* Runs the pass on the chain; the attention op's causal flag, operand
 * count and K's and V's head count must be as given. */
static PassJob pass_on(const char *text, int64_t causal, int n_in, int64_t kv_heads) {
  PassJob j = {.text = text};
  ck_assert_int_eq(ctx_guard(&ctx, run_pass_job, &j), 0);
  ck_assert_msg(j.changed, "%s\n%s", text, diag_text(&ctx));
  const Node *a = the_attention(j.g);
  ck_assert_int_eq(ir_attr_int(a, "causal"), causal);
  ck_assert_int_eq(a->n_in, n_in);
  ck_assert_int_eq(a->in[1]->type.dims[1], kv_heads);
  ck_assert_int_eq(a->in[2]->type.dims[1], kv_heads);
  ck_assert_int_eq(count_op(j.g, OP_EXPAND), kv_heads == 4 ? 2 : 0);
  return j;
}

/* Each causal mask an export writes becomes causal=1 with no mask
 * operand, and K and V reach the op with their 2 heads; the fused plan
 * on emu equals ir_eval of the unfused graph (f32 for the triu mask, f16
 * for GPT-2's and bf16 for Llama's finfo.min). */
START_TEST(pass_causal_masks) {
  static const char *const causal_masks[] = {mask_triu, mask_tril_min, mask_additive_min};
  DType dt = variant(_i);
  PassJob j = pass_on(gqa_chain(dt, 70, 0, false, causal_masks[_i]), 1, 3, 2);
  ck_assert_msg(cg_compile(j.g, &j.r), "%s", diag_text(&ctx));
  ck_assert(test_emu_matches_eval(j.unfused, j.r.plan, 37, -1, 1, tolerance(dt)));
}
END_TEST

/* What stays a tensor mask: a causal mask with one more entry hidden;
 * one aligned bottom-right (Sq 5 of Sk 70, row i keeping keys up to i +
 * 65: PyTorch's causal after a kv cache, not the op's); and the repeat a
 * Tile writes ([1, 1, 2, ..] expanded on axis 1: head h reads h % 2, not
 * h / 2) stays expanded, while its triu mask still becomes causal. */
START_TEST(pass_causal_leaves) {
  pass_on(gqa_chain(TY_F32, 70, 0, false, mask_almost), 0, 4, 2);
  pass_on(gqa_chain(TY_F32, 5, 65, false, mask_triu), 0, 4, 2);
  pass_on(gqa_chain(TY_F32, 70, 0, true, mask_triu), 1, 3, 4);
  /* finfo.min that does not make a causal mask: the op has no such
   * mask, and the chain stays whole */
  const char *text = gqa_chain(TY_F32, 5, 65, false,
                               "  %%m = less_equal %%cl, %%r : bool[%2$d, 70]\n"
                               "  %%i = const {value=%3$s} : %1$s[]\n"
                               "  %%w = where %%m, %%d, %%i : %1$s[1, 4, %2$d, 70]\n");
  PassJob j = {.text = text};
  ck_assert_int_eq(ctx_guard(&ctx, run_pass_job, &j), 0);
  ck_assert(!j.changed);
}
END_TEST

/* ---- the same chains imported from ONNX ---- */

/* The importer folds a mask built from initializers into host data; a
 * triangle of it comes into the graph as iotas, so the pass sees the
 * causal mask.  GPT-2's export: its tril buffer "attn.bias" [1, 1, 16,
 * 16] sliced to the 10 positions, Where(mask, scores / 4, finfo.min).
 * Llama's: Trilu(upper, k=1) of finfo.min added to the scores, K and V
 * of 2 heads through Unsqueeze, Expand and Reshape to 4.  Each becomes
 * one attention op with causal=1 and no mask, K and V as imported, no
 * param left; the fused plan on emu equals ir_eval of the import. */
/* The chain from k and v: sd = scale_op(q kᵀ, scale), w = mask_op over
 * mask_ins (naming sd), y = softmax(w) v. */
static void onnx_chain(Model *b, const char *k, const char *scale_op, const char *scale, const char *mask_op,
                       const char *mask_ins, const char *v) {
  attr_is(add_node(b, "Transpose", k, "kt"), "perm", 4, (const int64_t[]){0, 1, 3, 2});
  add_node(b, "MatMul", "q,kt", "s");
  add_node(b, scale_op, arena_printf(&ctx.arena, "s,%s", scale), "sd");
  add_node(b, mask_op, mask_ins, "w");
  attr_i(add_node(b, "Softmax", "w", "p"), "axis", -1);
  add_node(b, "MatMul", arena_printf(&ctx.arena, "p,%s", v), "y");
  add_output(b, "y");
}

static Model *gpt2_onnx(void) {
  enum { P = 16, S = 10 };
  Model *b = model_new(17);
  for (int i = 0; i < 3; i++) add_input(b, (const char *[]){"q", "k", "v"}[i], 4, (const int64_t[]){1, 2, S, 16});
  uint8_t tril[P * P];
  for (int i = 0; i < P * P; i++) tril[i] = i % P <= i / P;
  add_init_raw(b, "attn.bias", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 4, (const int64_t[]){1, 1, P, P}, tril,
               sizeof tril);
  add_init_i64(b, "st", 2, (const int64_t[]){0, 0});
  add_init_i64(b, "en", 2, (const int64_t[]){S, S});
  add_init_i64(b, "ax", 2, (const int64_t[]){2, 3});
  add_init_f32(b, "four", 0, NULL, 1, (const float[]){4});
  add_init_f32(b, "fmin", 0, NULL, 1, (const float[]){-FLT_MAX});
  add_node(b, "Slice", "attn.bias,st,en,ax", "cm");
  onnx_chain(b, "k", "Div", "four", "Where", "cm,sd,fmin", "v");
  return b;
}

static Model *llama_onnx(void) {
  enum { S = 10 };
  Model *b = model_new(17);
  add_input(b, "q", 4, (const int64_t[]){1, 4, S, 16});
  add_input(b, "k", 4, (const int64_t[]){1, 2, S, 16});
  add_input(b, "v", 4, (const int64_t[]){1, 2, S, 16});
  float fill[S * S];
  for (int i = 0; i < S * S; i++) fill[i] = -FLT_MAX;
  add_init_f32(b, "fill", 2, (const int64_t[]){S, S}, S * S, fill);
  add_init_i64(b, "one", 1, (const int64_t[]){1});
  add_init_i64(b, "two", 1, (const int64_t[]){2});
  add_init_i64(b, "shp5", 5, (const int64_t[]){1, 2, 2, S, 16});
  add_init_i64(b, "shp4", 4, (const int64_t[]){1, 4, S, 16});
  add_init_f32(b, "quarter", 0, NULL, 1, (const float[]){0.25f});
  attr_i(add_node(b, "Trilu", "fill,one", "mask"), "upper", 1);
  for (int i = 0; i < 2; i++) {
    const char *x = i ? "v" : "k";
    add_node(b, "Unsqueeze", arena_printf(&ctx.arena, "%s,two", x), arena_printf(&ctx.arena, "%s1", x));
    add_node(b, "Expand", arena_printf(&ctx.arena, "%s1,shp5", x), arena_printf(&ctx.arena, "%s2", x));
    add_node(b, "Reshape", arena_printf(&ctx.arena, "%s2,shp4", x), arena_printf(&ctx.arena, "%s3", x));
  }
  onnx_chain(b, "k3", "Mul", "quarter", "Add", "sd,mask", "v3");
  return b;
}

static int import_job(Ctx *c, void *data) {
  PassJob *j = data;
  size_t len;
  uint8_t *buf = pack_model((Model *)j->text, &len);
  TensorMap params = {0};
  j->unfused = fe_onnx_import_bytes(c, "export.onnx", buf, len, NULL, &params);
  ir_tensor_map_free(&params);
  if (!j->unfused || !(j->g = ir_copy(j->unfused, "export.onnx"))) return 0;
  PassOptions po = {.opt_level = 2, .passes = "attention,dce", .verify_each = true};
  j->changed = pass_run_pipeline(j->g, &po, NULL) && count_op(j->g, OP_ATTENTION) == 1;
  j->ok = j->changed && cg_compile(j->g, &j->r);
  return 0;
}

START_TEST(onnx_exports) {
  PassJob j = {.text = (const char *)(_i ? llama_onnx() : gpt2_onnx())};
  ck_assert_int_eq(ctx_guard(&ctx, import_job, &j), 0);
  ck_assert_msg(j.ok, "%s", diag_text(&ctx));
  const Node *a = the_attention(j.g);
  ck_assert_int_eq(ir_attr_int(a, "causal"), 1);
  ck_assert_int_eq(a->n_in, 3);
  ck_assert_int_eq(a->in[1]->type.dims[1], 2);
  ck_assert_int_eq(count_op(j.unfused, OP_PARAM), 0);
  ck_assert_int_eq(count_op(j.g, OP_EXPAND), 0);
  ck_assert(test_emu_matches_eval(j.unfused, j.r.plan, 41, -1, 1, 1e-5));
  pool_free();
}
END_TEST

/* ---- the language's multihead_attention ---- */

/* kv_heads=2 of 4 heads: the packed projection's rows are q's 32, then
 * k's and v's 16 each; the core is one attention op in layout "bshd"
 * over [N, S, heads, 8] and [N, S, 2, 8], no transposes; on emu equal to
 * ir_eval, a layernorm of more threads after it (the emu's fibers grow
 * between the two). */
START_TEST(language_kv_heads) {
  TestSource s = {.text = "model m(x: f32[2, 70, 32]) -> f32[2, 70, 32] {\n"
                      "  return layernorm(x + multihead_attention(x, x, x, 4, kv_heads=2) as attn) as norm\n"
                      "}\n"};
  ctx_guard(&ctx, test_lower_source, &s);
  ck_assert_msg(s.g && ir_verify(s.g), "%s", diag_text(&ctx));
  char ty[IR_TYPE_STR_MAX];
  int found = 0;
  for (Node *n = s.g->first; n; n = n->next) {
    if (n->op == OP_PARAM && strcmp(ir_attr_str(n, "name"), "attn.in_proj_weight") == 0) {
      ck_assert_str_eq(ir_type_str(&n->out[0].type, ty, sizeof ty), "f32[64, 32]");
      found++;
    }
    if (n->op == OP_ATTENTION) {
      ck_assert_str_eq(ir_attr_str(n, "layout"), "bshd");
      ck_assert_str_eq(ir_type_str(&n->in[0]->type, ty, sizeof ty), "f32[2, 70, 4, 8]");
      ck_assert_str_eq(ir_type_str(&n->in[1]->type, ty, sizeof ty), "f32[2, 70, 2, 8]");
      found++;
    }
  }
  ck_assert_int_eq(found, 2);
  ck_assert_int_eq(count_op(s.g, OP_TRANSPOSE), 0);
  CgResult r;
  ck_assert_msg(cg_compile(s.g, &r), "%s", diag_text(&ctx));
  ck_assert(test_emu_matches_eval(s.g, r.plan, 5, -1, 1, 1e-5));
}
END_TEST

START_TEST(language_kv_heads_error) {
  TestSource s = {.text = "model m(x: f32[2, 5, 32]) -> f32[2, 5, 32] {\n"
                      "  return multihead_attention(x, x, x, 4, kv_heads=3)\n"
                      "}\n"};
  ctx_guard(&ctx, test_lower_source, &s);
  ck_assert_ptr_nonnull(strstr(diag_text(&ctx), "t.dl:2:"));
  ck_assert_ptr_nonnull(strstr(diag_text(&ctx), "error: multihead_attention: kv_heads=3 does not divide heads=4"));
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("attention");
  TCase *tc = tcase_create("emu");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, masks, 0, 4);
  tcase_add_loop_test(tc, padding, 0, 4);
  tcase_add_loop_test(tc, lengths, 0, 4);
  tcase_add_loop_test(tc, head_dims, 0, 4);
  tcase_add_loop_test(tc, register_softmax, 0, 2);
  tcase_add_loop_test(tc, nan_rows, 0, 4);
  tcase_add_loop_test(tc, layout_bshd, 0, 4);
  tcase_add_loop_test(tc, split_keys, 0, 4);
  tcase_add_loop_test(tc, decode, 0, 4);
  tcase_add_loop_test(tc, pass_equals_unfused, 0, 3);
  tcase_add_loop_test(tc, pass_safe_softmax, 0, 3);
  tcase_add_test(tc, pass_leaves);
  tcase_add_test(tc, text_and_cost);
  tcase_add_test(tc, tf32_text);
  tcase_add_test(tc, head_dim_limit);
  tcase_add_test(tc, shape_errors);
  tcase_add_test(tc, language_kv_heads);
  tcase_add_test(tc, language_kv_heads_error);
  suite_add_tcase(s, tc);
  /* the attention pass on chains as exporters write them */
  TCase *ex = tcase_create("exports");
  tcase_add_checked_fixture(ex, setup, teardown);
  tcase_set_timeout(ex, 120);
  tcase_add_loop_test(ex, pass_causal_masks, 0, 3);
  tcase_add_test(ex, pass_causal_leaves);
  tcase_add_loop_test(ex, onnx_exports, 0, 2);
  suite_add_tcase(s, ex);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}

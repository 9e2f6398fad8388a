/* onnxruntime's attention ops with a KV cache (frontend/onnx_kv_cache.c):
 * GroupQueryAttention decoding a padded batch and over a windowed cache,
 * MultiHeadAttention with a past, causality and a padding mask, and
 * com.microsoft RotaryEmbedding, on models built here with protobuf-c,
 * run by the reference interpreter: Y against onnxruntime 1.32's values
 * on the same models, present against where each cached row must go.
 * Inputs are the pattern ((i a + b) mod 17 - 8) / 8, exact in f32.
 * tests/onnx/models.py runs larger ones (rotary, genai's graph around
 * the op) against onnxruntime itself, on ref and emu. */
#include "check_quiet.h"
#include <math.h>
#include <string.h>

#include "frontend/onnx.h"
#include "frontend/onnx.pb-c.h"
#include "ir/eval.h"
#include "onnxbuild.h"

#define params onnxb_params
#define import(b) onnxb_import((b), NULL)
#define expect_error onnxb_expect_error
#define must_import onnxb_must_import
#define pattern onnxb_pattern

enum { MAX_VALUES = 64 };

static Onnx__NodeProto *ms_node(Model *b, const char *op, const char *ins, const char *outs) {
  Onnx__NodeProto *n = add_node(b, op, ins, outs);
  n->domain = str("com.microsoft");
  return n;
}

static void add_i32(Model *b, const char *name, int rank, const int64_t *dims, int n, const int32_t *v) {
  add_init_raw(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT32, rank, dims, v, sizeof(int32_t) * (size_t)n);
}

/* Runs g on Q (an f32 input of dims): its n_out outputs into out. */
static void run(Graph *g, int rank, const int64_t *dims, const float *q, int n_out, Tensor *out) {
  Tensor in = {ir_type_make(TY_F32, rank, dims), (void *)q};
  TensorMap inputs = {1, (const char *[]){"Q"}, &in};
  char err[512];
  ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "%s", err);
  ck_assert_int_le(n_out, 3);
}

static void expect_values(const Tensor *t, int n, const double *want, const char *what) {
  ck_assert_int_eq(ir_type_numel(&t->type), n);
  for (int i = 0; i < n; i++)
    ck_assert_msg(fabs(((float *)t->data)[i] - want[i]) < 2e-6, "%s[%d] is %.9g, want %.9g", what, i,
                  ((float *)t->data)[i], want[i]);
}

/* Row t of a [.., T, 8] cache entry equals row r of src (or is zero
 * when src is NULL). */
static void expect_row(const Tensor *t, int64_t at, const float *src, int64_t r, const char *what) {
  const float *got = (const float *)t->data + at * 8;
  for (int i = 0; i < 8; i++)
    ck_assert_msg(got[i] == (src ? src[r * 8 + i] : 0), "%s: row %lld value %d is %g", what, (long long)at, i,
                  got[i]);
}

/* GroupQueryAttention decoding one token for each of 2 entries, packed
 * QKV (2 query heads over 1 KV head of 8), a past of 3 rows of which
 * entry 0 uses 3 and entry 1 one (seqlens_k {3, 1}: right padding), total
 * 4: each token sees its entry's own keys alone, and present puts it
 * right after them, zeros after. */
START_TEST(test_gqa_decode) {
  static const double want[32] = {
      -0.313449383, -0.0239667743, 0.44446221,  -0.465031713, -0.175549105, 0.292879879, -0.16471459,  0.166529089,
      -0.180715278, -0.210900724,  0.568964243, -0.330651194, -0.360836625, 0.419028372, -0.0566765517, -0.0915197879,
      0.344085008,  0.366601259,   -0.804771304, 0.148856267, 0.171372488,  -1,          -0.046372477, -0.0238562692,
      0.47536093,   0.136868343,   -0.837590218, 0.312951177, -0.0255414154, -0.99999994, 0.15054141,   -0.187951177};
  const float *q = pattern(64, 5, 1), *pk = pattern(48, 3, 2), *pv = pattern(48, 11, 4);
  const int64_t qd[3] = {2, 1, 32}, pd[4] = {2, 1, 3, 8};
  Model *b = model_new(17);
  add_input(b, "Q", 3, qd);
  add_init_f32(b, "PK", 4, pd, 48, pk);
  add_init_f32(b, "PV", 4, pd, 48, pv);
  add_i32(b, "SL", 1, (const int64_t[]){2}, 2, (const int32_t[]){3, 1});
  add_i32(b, "TOT", 0, NULL, 1, (const int32_t[]){4});
  Onnx__NodeProto *n = ms_node(b, "GroupQueryAttention", "Q,,,PK,PV,SL,TOT", "Y,PRK,PRV");
  attr_i(n, "num_heads", 2);
  attr_i(n, "kv_num_heads", 1);
  add_output(b, "Y");
  add_output(b, "PRK");
  add_output(b, "PRV");
  Tensor out[3];
  run(must_import(b), 3, qd, q, 3, out);
  expect_values(&out[0], 32, want, "Y");
  for (int o = 1; o < 3; o++) {
    ck_assert(onnxb_same_dims(&out[o].type, 4, (const int64_t[]){2, 1, 4, 8}));
    const float *past = o == 1 ? pk : pv;
    /* this step's K is columns 16..23 of Q, V 24..31 */
    float now[2][8];
    for (int e = 0; e < 2; e++)
      for (int i = 0; i < 8; i++) now[e][i] = q[e * 32 + (o == 1 ? 16 : 24) + i];
    int64_t past_len[2] = {3, 1};
    for (int e = 0; e < 2; e++)
      for (int64_t t = 0; t < 4; t++) {
        int64_t at = e * 4 + t;
        if (t < past_len[e]) expect_row(&out[o], at, past + e * 24, t, "present");
        else if (t == past_len[e]) expect_row(&out[o], at, now[e], 0, "present");
        else expect_row(&out[o], at, NULL, 0, "present");
      }
  }
  for (int o = 0; o < 3; o++) ir_tensor_free(&out[o]);
}
END_TEST

/* One head of 8 over a windowed cache of 4 rows (window W, soft cap 3):
 * Q [1, 2, 8] the input, K and V of this step, the past, seqlens_k {5},
 * total 6; outputs Y, PRK and PRV. */
static Model *windowed_gqa(int64_t W, const float *k, const float *v, const float *pk, const float *pv) {
  const int64_t qd[3] = {1, 2, 8}, pd[4] = {1, 1, 4, 8};
  Model *b = model_new(17);
  add_input(b, "Q", 3, qd);
  add_init_f32(b, "K", 3, qd, 16, k);
  add_init_f32(b, "V", 3, qd, 16, v);
  add_init_f32(b, "PK", 4, pd, 32, pk);
  add_init_f32(b, "PV", 4, pd, 32, pv);
  add_i32(b, "SL", 1, (const int64_t[]){1}, 1, (const int32_t[]){5});
  add_i32(b, "TOT", 0, NULL, 1, (const int32_t[]){6});
  Onnx__NodeProto *n = ms_node(b, "GroupQueryAttention", "Q,K,V,PK,PV,SL,TOT", "Y,PRK,PRV");
  attr_i(n, "num_heads", 1);
  attr_i(n, "kv_num_heads", 1);
  attr_i(n, "local_window_size", W);
  attr_i(n, "sliding_window_cache", 1);
  attr_f(n, "softcap", 3);
  add_output(b, "Y");
  add_output(b, "PRK");
  add_output(b, "PRV");
  return b;
}

/* GroupQueryAttention over a windowed cache (sliding_window_cache) of 4
 * rows, window 2, soft cap 3: a prompt of 2 after 4 tokens.  Before it
 * the cache holds positions 0..3; after it L(6) = 6 - 3 ceil(2 / 3) = 3
 * rows, positions 3, 4 and 5: past row 3, then the two new ones. */
START_TEST(test_gqa_window) {
  static const double want[16] = {0.262488037,  0.362511963,  0.0799952149, 0.18001914,  -0.102497607, -0.385014355,
                                  -0.28499043,  -0.567507148, 0.0838933438, -0.210153386, 0.208893329,  -0.0851533785,
                                  0.333893329,  -0.666106582, 0.458893329,  -0.541106582};
  const float *q = pattern(16, 7, 3), *k = pattern(16, 2, 5), *v = pattern(16, 9, 6), *pk = pattern(32, 4, 7),
              *pv = pattern(32, 6, 8);
  const int64_t qd[3] = {1, 2, 8}, pd[4] = {1, 1, 4, 8};
  Tensor out[3];
  run(must_import(windowed_gqa(2, k, v, pk, pv)), 3, qd, q, 3, out);
  expect_values(&out[0], 16, want, "Y");
  for (int o = 1; o < 3; o++) {
    ck_assert(onnxb_same_dims(&out[o].type, 4, pd));
    expect_row(&out[o], 0, o == 1 ? pk : pv, 3, "present");
    expect_row(&out[o], 1, o == 1 ? k : v, 0, "present");
    expect_row(&out[o], 2, o == 1 ? k : v, 1, "present");
    expect_row(&out[o], 3, NULL, 0, "present");
  }
  for (int o = 0; o < 3; o++) ir_tensor_free(&out[o]);
  /* A cache shorter than its window is refused. */
  expect_error(import(windowed_gqa(5, k, v, pk, pv)), "a windowed cache of 4 rows cannot hold local_window_size 5");
}
END_TEST

/* MultiHeadAttention, one head of 8, a past of 1, causal, the bias of
 * the three projections, a padding mask {0, 1, 1}: the first query sees
 * the past key (padding) and its own, so all its weight is on its own;
 * the second sees three.  Present is the past then this step's K + bias. */
START_TEST(test_mha_past) {
  static const double want[16] = {0.375,         0,          -0.375,      -0.75,       1,           -1.5,
                                  0.25,          2,          -0.0709487796, 1.44933355, -0.82094878, 0.699333549,
                                  0.55405122,    -0.0506664813, -0.19594878, 1.55405128};
  const float *q = pattern(16, 3, 9), *k = pattern(16, 5, 10), *v = pattern(16, 8, 11), *pk = pattern(8, 2, 12),
              *pv = pattern(8, 10, 13), *bias = pattern(24, 6, 14);
  const int64_t qd[3] = {1, 2, 8}, pd[4] = {1, 1, 1, 8};
  Model *b = model_new(17);
  add_input(b, "Q", 3, qd);
  add_init_f32(b, "K", 3, qd, 16, k);
  add_init_f32(b, "V", 3, qd, 16, v);
  add_init_f32(b, "B", 1, (const int64_t[]){24}, 24, bias);
  add_i32(b, "M", 2, (const int64_t[]){1, 3}, 3, (const int32_t[]){0, 1, 1});
  add_init_f32(b, "PK", 4, pd, 8, pk);
  add_init_f32(b, "PV", 4, pd, 8, pv);
  Onnx__NodeProto *n = ms_node(b, "MultiHeadAttention", "Q,K,V,B,M,,PK,PV", "Y,PRK");
  attr_i(n, "num_heads", 1);
  attr_i(n, "unidirectional", 1);
  add_output(b, "Y");
  add_output(b, "PRK");
  Tensor out[3];
  run(must_import(b), 3, qd, q, 2, out);
  expect_values(&out[0], 16, want, "Y");
  ck_assert(onnxb_same_dims(&out[1].type, 4, (const int64_t[]){1, 1, 3, 8}));
  expect_row(&out[1], 0, pk, 0, "present");
  for (int t = 0; t < 2; t++)
    for (int i = 0; i < 8; i++)
      ck_assert_float_eq(((float *)out[1].data)[(1 + t) * 8 + i], k[t * 8 + i] + bias[8 + i]);
  for (int o = 0; o < 2; o++) ir_tensor_free(&out[o]);
}
END_TEST

/* GroupQueryAttention of packed Q [1, 1, 32] (2 query heads over one KV
 * head of 8), seqlens_k {0}, total_sequence_length total (-1: a graph
 * input), with a past of one row or none, and the int attribute extra
 * set to value when given. */
static Model *packed_gqa(int32_t total, bool past, const char *extra, int64_t value) {
  Model *b = model_new(17);
  add_input(b, "Q", 3, (const int64_t[]){1, 1, 32});
  add_i32(b, "SL", 1, (const int64_t[]){1}, 1, (const int32_t[]){0});
  if (total < 0) add_input_typed(b, "TOT", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 0, NULL);
  else add_i32(b, "TOT", 0, NULL, 1, &total);
  if (past) add_init_f32(b, "PK", 4, (const int64_t[]){1, 1, 1, 8}, 8, pattern(8, 1, 0));
  Onnx__NodeProto *n = ms_node(b, "GroupQueryAttention", past ? "Q,,,PK,PK,SL,TOT" : "Q,,,,,SL,TOT", "Y");
  attr_i(n, "num_heads", 2);
  attr_i(n, "kv_num_heads", 1);
  if (extra) attr_i(n, extra, value);
  add_output(b, "Y");
  return b;
}

/* com.microsoft RotaryEmbedding, interleaved, positions from the offset
 * [1] {2}; and the refusals of what dlcc does not import. */
START_TEST(test_ms_rotary_and_refusals) {
  static const double want[16] = {-0.453125, -0.171875, -0.3125, 0.078125, -0.625,    0.53125,  0.203125, 0.921875,
                                  0.3125,    -0.609375, -0.5625, 0.1875,   -0.296875, -0.140625, -0.484375, 0.53125};
  const int64_t qd[3] = {1, 2, 8};
  Model *b = model_new(17);
  add_input(b, "Q", 3, qd);
  add_init_i64(b, "P", 1, (const int64_t[]){2});
  add_init_f32(b, "C", 2, (const int64_t[]){4, 4}, 16, pattern(16, 3, 16));
  add_init_f32(b, "S", 2, (const int64_t[]){4, 4}, 16, pattern(16, 7, 0));
  attr_i(ms_node(b, "RotaryEmbedding", "Q,P,C,S", "Y"), "interleaved", 1);
  add_output(b, "Y");
  Tensor y = onnxb_run1(must_import(b), "Q", 3, qd, pattern(16, 5, 15));
  onnxb_expect_values(&y, 16, want, "Y");

  /* total_sequence_length fixes present's length: it must be known. */
  expect_error(import(packed_gqa(-1, false, NULL, 0)),
               "total_sequence_length (present's length) computed at run time is not supported");
  /* nor can a malicious one make present (and the tables of its
   * positions) as long as it likes */
  expect_error(import(packed_gqa(2147483647, true, NULL, 0)),
               "total_sequence_length 2147483647 is more than dlcc imports (1048576)");
  expect_error(import(packed_gqa(1, false, "kv_cache_bit_width", 8)),
               "(GroupQueryAttention): a quantized cache is not supported");
  /* a bias with packed K and V */
  b = model_new(17);
  add_input(b, "Q", 3, qd);
  add_init_f32(b, "KV", 5, (const int64_t[]){1, 2, 1, 2, 8}, 32, pattern(32, 1, 0));
  add_init_f32(b, "B", 1, (const int64_t[]){24}, 24, pattern(24, 1, 0));
  attr_i(ms_node(b, "MultiHeadAttention", "Q,KV,,B", "Y"), "num_heads", 1);
  add_output(b, "Y");
  expect_error(import(b), "a bias with packed K and V is not supported");
}
END_TEST

/* What onnxruntime does with odd but valid values, and what it refuses
 * at run time: a window of 0 sees no key (Y is 0); seqlens_k past the
 * total fails the run, naming the node and the input. */
START_TEST(test_gqa_edges) {
  Model *b = packed_gqa(1, false, "local_window_size", 0);
  Tensor y = onnxb_run1(must_import(b), "Q", 3, (const int64_t[]){1, 1, 32}, pattern(32, 5, 1));
  onnxb_expect_values(&y, 16, (const double[16]){0}, "Y");

  b = model_new(17);
  add_input(b, "Q", 3, (const int64_t[]){1, 1, 32});
  add_input_typed(b, "SL", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, (const int64_t[]){1});
  add_i32(b, "TOT", 0, NULL, 1, (const int32_t[]){1});
  Onnx__NodeProto *n = ms_node(b, "GroupQueryAttention", "Q,,,,,SL,TOT", "Y");
  attr_i(n, "num_heads", 2);
  attr_i(n, "kv_num_heads", 1);
  add_output(b, "Y");
  Graph *g = must_import(b);
  Tensor in[2] = {{ir_type_make(TY_F32, 3, (const int64_t[]){1, 1, 32}), pattern(32, 5, 1)},
                  {ir_type_make(TY_I32, 1, (const int64_t[]){1}), (int32_t[]){7}}};
  TensorMap inputs = {2, (const char *[]){"Q", "SL"}, in};
  char err[512];
  Tensor out;
  ck_assert(!ir_eval(g, &inputs, &params, &out, err, sizeof err));
  ck_assert_msg(strstr(err, "(GroupQueryAttention): seqlens_k is out of range at run time (each must be in [0, 0])"),
                "%s", err);
  /* MultiHeadAttention's causal mask where a step brings more keys than
   * queries: onnxruntime's is irregular there, so it is refused. */
  b = model_new(17);
  add_input(b, "Q", 3, (const int64_t[]){1, 2, 8});
  add_init_f32(b, "K", 3, (const int64_t[]){1, 3, 8}, 24, pattern(24, 3, 1));
  n = ms_node(b, "MultiHeadAttention", "Q,K,K", "Y");
  attr_i(n, "num_heads", 1);
  attr_i(n, "unidirectional", 1);
  add_output(b, "Y");
  expect_error(import(b), "unidirectional with 3 new keys for 2 queries is not supported");
}
END_TEST

int main(void) {
  const TTest *tests[] = {test_gqa_decode, test_gqa_window, test_mha_past, test_ms_rotary_and_refusals, test_gqa_edges};
  return onnxb_run_suite("onnx_kv_cache", (int)ARRAY_LEN(tests), tests);
}

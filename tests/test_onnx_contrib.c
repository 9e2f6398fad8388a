/* onnxruntime's contrib ops that its transformer optimizer writes
 * (frontend/onnx_contrib.c): FastGelu, BiasGelu, QuickGelu,
 * SkipLayerNormalization, SkipSimplifiedLayerNormalization,
 * SimplifiedLayerNormalization, Attention, EmbedLayerNormalization,
 * MatMulNBits, and the graph optimizer's FusedConv, FusedGemm and
 * FusedMatMul on
 * models built here with protobuf-c, run
 * by the reference interpreter, against onnxruntime 1.32's values on the
 * same models. */
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

static const int64_t xd[3] = {1, 2, 4};
static const float x[8] = {0.5f, -1, 2, 0.25f, 1.5f, 0, -0.75f, 3};

/* A model of one node on x [1, 2, 4] with initializers S (a skip), G (a
 * scale), B (a shift) and BI (a bias); outputs as listed. */
static Onnx__NodeProto *contrib_node(Model *b, const char *op, const char *ins, const char *outs, bool ms) {
  add_input(b, "X", 3, xd);
  add_init_f32(b, "S", 3, xd, 8, (const float[]){0.1f, 0.2f, -0.3f, 0.4f, -1, 0.5f, 0.25f, 0});
  add_init_f32(b, "G", 1, (const int64_t[]){4}, 4, (const float[]){1, 0.5f, 2, -1});
  add_init_f32(b, "B", 1, (const int64_t[]){4}, 4, (const float[]){0.1f, -0.2f, 0.3f, 0});
  add_init_f32(b, "BI", 1, (const int64_t[]){4}, 4, (const float[]){0.05f, 0, -0.1f, 0.2f});
  Onnx__NodeProto *n = add_node(b, op, ins, outs);
  if (ms) n->domain = str("com.microsoft");
  return n;
}

static void expect_near(const Tensor *t, const double *want, const char *what) {
  ck_assert_int_eq(ir_type_numel(&t->type), 8);
  for (int i = 0; i < 8; i++)
    ck_assert_msg(fabs(((float *)t->data)[i] - want[i]) < 2e-6, "%s[%d] is %.9g, want %.9g", what, i, ((float *)t->data)[i],
                  want[i]);
}

/* Each op's outputs on x against onnxruntime's: the activations (FastGelu
 * is the tanh form, with its bias), the skip norms (the sum output
 * includes the bias in both), the simplified norm. */
START_TEST(test_contrib_ops) {
  static const struct {
    const char *op, *ins, *outs;
    bool ms;
    double want[2][8];
  } c[6] = {
      {"FastGelu", "X,BI", "Y", true,
       {{0.389837921, -0.158807963, 1.84545124, 0.303128451, 1.45591211, 0, -0.168113425, 3.19813037}}},
      {"BiasGelu", "X,BI", "Y", true,
       {{0.38986218, -0.158655256, 1.84543848, 0.303140134, 1.45611525, 0, -0.168013155, 3.19780135}}},
      {"QuickGelu", "X", "Y", true,
       {{0.339589357, -0.182425559, 1.90514827, 0.148166656, 1.35697579, 0, -0.183813751, 2.96703911}}},
      {"SkipLayerNormalization", "X,S,G,B,BI", "Y,,,SUM", true,
       {{0.186279088, -0.990891039, 2.65829349, -0.316356391, -0.159227759, -0.347491652, -1.86321092, -1.63581634},
        {0.65, -0.8, 1.6, 0.85, 0.55, 0.5, -0.6, 3.2}}},
      {"SkipSimplifiedLayerNormalization", "X,S,G,BI", "Y,,,SUM", true,
       {{0.623658001, -0.38378951, 3.07031608, -0.815552652, 0.329386473, 0.149721116, -0.718661427, -1.91643035},
        {0.65, -0.8, 1.6, 0.85, 0.55, 0.5, -0.6, 3.2}}},
      {"SimplifiedLayerNormalization", "X,G", "Y", false,
       {{0.433859289, -0.433859289, 3.47087431, -0.216929644, 0.872870088, 0, -0.872870088, -1.74574018}}},
  };
  for (int k = 0; k < 6; k++) {
    Model *b = model_new(17);
    Onnx__NodeProto *n = contrib_node(b, c[k].op, c[k].ins, c[k].outs, c[k].ms);
    if (k == 2) attr_f(n, "alpha", 1.5f);
    if (k >= 3) attr_f(n, "epsilon", 1e-5f);
    add_output(b, "Y");
    bool sum = strstr(c[k].outs, "SUM") != NULL;
    if (sum) add_output(b, "SUM");
    Graph *g = must_import(b);
    Tensor in = {ir_type_make(TY_F32, 3, xd), (void *)x}, out[2];
    TensorMap inputs = {1, (const char *[]){"X"}, &in};
    char err[512];
    ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "%s: %s", c[k].op, err);
    for (int o = 0; o < (sum ? 2 : 1); o++) {
      expect_near(&out[o], c[k].want[o], c[k].op);
      ir_tensor_free(&out[o]);
    }
  }
  /* the training outputs are refused where read */
  Model *b = model_new(17);
  contrib_node(b, "SkipLayerNormalization", "X,S,G", "Y,M", true);
  add_output(b, "M");
  expect_error(import(b), "(SkipLayerNormalization): output 2 (the mean) is not supported");
}
END_TEST

/* com.microsoft Attention of two heads over x [2, 3, 4] with weights
 * [4, 12]: a 1-d mask_index of lengths, a 2-d mask, and unidirectional;
 * EmbedLayerNormalization with segments, with and without a mask (its
 * mask_index the mask's counts, or zeros).  onnxruntime's values. */
START_TEST(test_ms_attention_and_embeddings) {
  static const float ax[24] = {1.78862846f, 0.436509848f, 0.0964974687f, -1.86349273f, -0.277388215f, -0.354758978f,
                               -0.082741484f, -0.62700069f, -0.0438181683f, -0.477218032f, -1.31386471f, 0.884622395f,
                               0.881318033f, 1.70957303f, 0.0500336438f, -0.404677421f, -0.545359969f, -1.54647732f,
                               0.982367456f, -1.10106766f, -1.18504655f, -0.205649897f, 1.48614836f, 0.23671627f};
  static const float w[48] = {-0.511892557f, -0.356496602f, 0.312622488f, -0.0802566782f, -0.38441819f, -0.115015358f,
                              0.372528136f, 0.988055408f, -0.62206167f, -0.313208461f, -0.401883036f, -1.20954156f,
                              -0.461896002f, -0.511937857f, 0.56198895f, -0.0659571141f, -0.811642706f, 0.323337734f,
                              -0.17813538f, -0.871570528f, -0.298324823f, -0.294297189f, -0.436941147f, 0.0148569075f,
                              -1.12412894f, -0.133880928f, 0.506591737f, 0.426398933f, 0.554093778f, 0.559695303f,
                              0.743771553f, -0.559150338f, 0.42291671f, -0.930444777f, -0.301442564f, -0.957235992f,
                              0.52407378f, 0.666868925f, -0.0987073407f, 0.887322545f, -0.33736375f, 0.0753084347f,
                              0.0764728487f, -0.532097638f, 0.218973309f, 0.969489217f, -0.512465417f, 0.449669212f};
  static const float bias[12] = {-0.0154506853f, 0.176962733f, 0.0483788364f, 0.0676216409f, 0.0643163249f, 0.0249086712f,
                                 -0.139576346f, 0.139166296f, -0.137066901f, 0.0238563195f, 0.0614077076f, -0.0837912261f};
  static const double want[3][24] = {
      {-0.597626984, 1.17120695, 0.489789575, 0.154729098, -0.698748529, -0.234982818, 0.378658265, 0.0850492194,
       -0.370445549, -0.551344216, 0.31036967, -0.080332458, -1.21976447, -1.19700158, 0.316123366, -1.08937097,
       -1.02295804, -1.20988691, -0.0646698028, -1.17605436, -1.11692154, -1.20373487, 0.692709029, -1.00364554},
      {-0.626701653, 1.24750102, 0.189422712, 0.335602075, -1.05031574, -0.192464858, 0.182318106, 0.112516321,
       -1.35739577, -1.23630357, 0.174703211, -0.126592398, -1.21976447, -1.19700158, 0.316123366, -1.08937097,
       -1.02295804, -1.20988691, -0.0646698028, -1.17605436, -1.11692154, -1.20373487, 0.692709029, -1.00364554},
      {-1.74717069, -2.56124258, 0.0777462721, -3.17105246, -0.874159694, -1.41898334, 0.482631505, -0.988628626,
       -0.370445549, -0.551344216, 0.31036967, -0.080332458, -1.26276255, -1.19418645, -0.847460985, -1.35424805,
       -1.02295804, -1.20988691, -0.0646698028, -1.17605436, -0.715015173, -1.12102449, 0.635517955, -0.910443008}};
  for (int k = 0; k < 3; k++) {
    Model *b = model_new(17);
    add_input(b, "X", 3, (const int64_t[]){2, 3, 4});
    add_init_f32(b, "W", 2, (const int64_t[]){4, 12}, 48, w);
    add_init_f32(b, "BI", 1, (const int64_t[]){12}, 12, bias);
    if (k == 0) add_init_raw(b, "M", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, (const int64_t[]){2}, (const int32_t[]){3, 2}, 8);
    if (k == 1)
      add_init_raw(b, "M", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 2, (const int64_t[]){2, 3}, (const int32_t[]){1, 0, 1, 1, 1, 0},
                   24);
    Onnx__NodeProto *n = add_node(b, "Attention", k < 2 ? "X,W,BI,M" : "X,W,BI", "Y");
    n->domain = str("com.microsoft");
    attr_i(n, "num_heads", 2);
    if (k == 2) attr_i(n, "unidirectional", 1);
    add_output(b, "Y");
    Tensor y = onnxb_run1(must_import(b), "X", 3, (const int64_t[]){2, 3, 4}, ax);
    for (int i = 0; i < 24; i++)
      ck_assert_msg(fabs(((float *)y.data)[i] - want[k][i]) < 2e-6, "Attention %d [%d] is %.9g, want %.9g", k, i,
                    ((float *)y.data)[i], want[k][i]);
    ir_tensor_free(&y);
  }
  static const float word[20] = {0.145063221f, 1.16788232f, -0.0241044704f, -0.888657391f, -2.91573787f, -0.971840501f,
                                 -0.591078758f, -0.516417384f, -0.959996164f, 0.377295226f, -0.574708402f, -0.109454334f,
                                 0.679071605f, -0.85543716f, -0.300206065f, 2.15814924f, 0.874285698f, -1.29353666f,
                                 -0.0797409415f, 0.56448549f};
  static const float pos[16] = {1.23347104f, 0.148986399f, -0.53058213f, -0.730526626f, 0.64506197f, 0.313060373f,
                                -0.516647935f, -0.18907167f, -0.416198015f, 0.724657655f, -0.689960659f, 0.486414462f,
                                0.851518929f, 0.486249328f, -0.834239841f, 1.3449924f};
  static const float seg[8] = {-0.678212702f, 0.426435083f, -0.75333482f, -1.74411023f, 0.225750268f, 0.287035167f,
                               -0.0774409622f, 0.276068509f};
  static const double emb[24] = {-0.375153452, 0.788531482, -0.135757715, 1.43403101, 1.11915195, 0.0526941381,
                                 -3.47761679, -0.214268148, -0.211832106, 0.836630404, -2.15503263, 0.683912277,
                                 0.856666207, 0.573859453, -2.87483191, 0.866969228, 0.0582775921, 0.821933329,
                                 -1.64400971, 1.18013942, 0.873114765, 0.457282007, -3.39870739, 0.388325065};
  for (int with_mask = 1; with_mask >= 0; with_mask--) {
    Model *b = model_new(17);
    add_input_typed(b, "I", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 2, (const int64_t[]){2, 3});
    add_init_raw(b, "SI", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 2, (const int64_t[]){2, 3}, (const int32_t[]){0, 0, 1, 1, 0, 0}, 24);
    add_init_f32(b, "WE", 2, (const int64_t[]){5, 4}, 20, word);
    add_init_f32(b, "PE", 2, (const int64_t[]){4, 4}, 16, pos);
    add_init_f32(b, "SE", 2, (const int64_t[]){2, 4}, 8, seg);
    add_init_f32(b, "G", 1, (const int64_t[]){4}, 4, (const float[]){1, 0.5f, 2, -1});
    add_init_f32(b, "B", 1, (const int64_t[]){4}, 4, (const float[]){0.1f, 0, -0.2f, 0.3f});
    add_init_raw(b, "MK", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 2, (const int64_t[]){2, 3}, (const int32_t[]){1, 1, 0, 1, 1, 1}, 24);
    Onnx__NodeProto *n = add_node(b, "EmbedLayerNormalization", with_mask ? "I,SI,WE,PE,SE,G,B,MK" : "I,SI,WE,PE,SE,G,B", "Y,MI");
    n->domain = str("com.microsoft");
    attr_f(n, "epsilon", 1e-5f);
    add_output(b, "Y");
    add_output(b, "MI");
    Graph *g = must_import(b);
    Tensor in = {ir_type_make(TY_I32, 2, (const int64_t[]){2, 3}), (int32_t[]){1, 3, 0, 2, 2, 4}}, out[2];
    TensorMap inputs = {1, (const char *[]){"I"}, &in};
    char err[512];
    ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "%s", err);
    for (int i = 0; i < 24; i++)
      ck_assert_msg(fabs(((float *)out[0].data)[i] - emb[i]) < 2e-6, "EmbedLayerNormalization [%d] is %.9g", i,
                    ((float *)out[0].data)[i]);
    ck_assert(out[1].type.dtype == TY_I32);
    ck_assert_int_eq(((int32_t *)out[1].data)[0], with_mask ? 2 : 0);
    ck_assert_int_eq(((int32_t *)out[1].data)[1], with_mask ? 3 : 0);
    ir_tensor_free(&out[0]), ir_tensor_free(&out[1]);
  }
}
END_TEST

/* MatMulNBits of 4 bits: K 20 (a last block of 4 of its 16), packed zero
 * points (block 0 the low nibble), a bias; onnxruntime's values. */
START_TEST(test_matmul_nbits) {
  static const uint8_t bq[32] = {99,  206, 239, 189, 230, 118, 144, 73,  8,   228, 231, 190, 155, 112, 158, 208,
                                 7,   204, 143, 113, 181, 231, 80,  27,  44,  205, 203, 65,  175, 30,  212, 86};
  float a[40];
  for (int i = 0; i < 40; i++) a[i] = (float)i / 10 - 1;
  Model *b = model_new(17);
  add_input(b, "A", 2, (const int64_t[]){2, 20});
  add_init_raw(b, "B", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 3, (const int64_t[]){2, 2, 8}, bq, 32);
  add_init_f32(b, "S", 1, (const int64_t[]){4}, 4, (const float[]){0.5f, -0.25f, 1, 0.125f});
  add_init_raw(b, "Z", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 1, (const int64_t[]){2}, (const uint8_t[]){0x3a, 0x5f}, 2);
  add_init_f32(b, "BI", 1, (const int64_t[]){2}, 2, (const float[]){1, -2});
  Onnx__NodeProto *n = add_node(b, "MatMulNBits", "A,B,S,Z,,BI", "Y");
  n->domain = str("com.microsoft");
  attr_i(n, "K", 20);
  attr_i(n, "N", 2);
  attr_i(n, "bits", 4);
  attr_i(n, "block_size", 16);
  add_output(b, "Y");
  Tensor y = onnxb_run1(must_import(b), "A", 2, (const int64_t[]){2, 20}, a);
  static const double want[4] = {-4.949999809265137, 25.050003051757812, -28.950000762939453, -218.1999969482422};
  for (int i = 0; i < 4; i++)
    ck_assert_msg(fabs(((float *)y.data)[i] - want[i]) < 1e-4, "MatMulNBits [%d] is %.9g", i, ((float *)y.data)[i]);
  ir_tensor_free(&y);
}
END_TEST

/* What onnxruntime saves optimized (extended level): FusedConv (Clip
 * after the conv plus Z), FusedGemm (LeakyRelu) and FusedMatMul
 * (transBatchA: A's first dim moved after its batch dims; transB;
 * alpha), against its values; inputs ((i a + b) mod 17 - 8) / 8. */
START_TEST(test_fused_ops) {
  static const double conv[8] = {0.4375, -0.421875, -0.5, 0.140625, 1, 0.234375, 0.84375, -0.421875};
  static const double gemm[8] = {0.375, -0.05078125, 0.9453125, 0.6328125, 0.28125, -0.046875, 0.8046875, 0.8671875};
  static const double mm[18] = {1.8125,  -0.15625, -1.59375, 0.125,    0.78125, -1.21875, -0.5,    -0.9375, 1.8125,
                                0.59375, -1.125,   0.875,    0.40625,  -1.875,  -0.4375,  -0.84375, 1.625,  -1.21875};
  Model *b = model_new(17);
  add_input(b, "X", 4, (const int64_t[]){1, 2, 3, 3});
  add_init_f32(b, "W", 4, (const int64_t[]){2, 2, 2, 2}, 16, pattern(16, 3, 2));
  add_init_f32(b, "B", 1, (const int64_t[]){2}, 2, pattern(2, 7, 3));
  add_init_f32(b, "Z", 4, (const int64_t[]){1, 2, 2, 2}, 8, pattern(8, 11, 4));
  Onnx__NodeProto *n = add_node(b, "FusedConv", "X,W,B,Z", "Y");
  n->domain = str("com.microsoft");
  attr_s(n, "activation", "Clip");
  attr_fs(n, "activation_params", 2, (const float[]){-0.5f, 1});
  add_output(b, "Y");
  Tensor y = onnxb_run1(must_import(b), "X", 4, (const int64_t[]){1, 2, 3, 3}, pattern(18, 5, 1));
  onnxb_expect_values(&y, 8, conv, "FusedConv");

  b = model_new(17);
  add_input(b, "X", 2, (const int64_t[]){2, 3});
  add_init_f32(b, "B", 2, (const int64_t[]){4, 3}, 12, pattern(12, 3, 7));
  add_init_f32(b, "C", 1, (const int64_t[]){4}, 4, pattern(4, 2, 8));
  n = add_node(b, "FusedGemm", "X,B,C", "Y");
  n->domain = str("com.microsoft");
  attr_i(n, "transB", 1);
  attr_f(n, "alpha", 0.5f);
  attr_s(n, "activation", "LeakyRelu");
  attr_f(n, "activation_alpha", 0.25f);
  add_output(b, "Y");
  y = onnxb_run1(must_import(b), "X", 2, (const int64_t[]){2, 3}, pattern(6, 5, 6));
  onnxb_expect_values(&y, 8, gemm, "FusedGemm");

  b = model_new(17);
  add_input(b, "X", 3, (const int64_t[]){3, 2, 2});
  add_init_f32(b, "B", 3, (const int64_t[]){2, 3, 2}, 12, pattern(12, 5, 10));
  n = add_node(b, "FusedMatMul", "X,B", "Y");
  n->domain = str("com.microsoft");
  attr_i(n, "transBatchA", 1);
  attr_i(n, "transB", 1);
  attr_f(n, "alpha", 2);
  add_output(b, "Y");
  y = onnxb_run1(must_import(b), "X", 3, (const int64_t[]){3, 2, 2}, pattern(12, 7, 9));
  ck_assert(onnxb_same_dims(&y.type, 3, (const int64_t[]){2, 3, 3}));
  onnxb_expect_values(&y, 18, mm, "FusedMatMul");

  /* an activation onnxruntime's fused kernels do not have */
  b = model_new(17);
  add_input(b, "X", 2, (const int64_t[]){2, 3});
  add_init_f32(b, "B", 2, (const int64_t[]){3, 4}, 12, pattern(12, 3, 7));
  n = add_node(b, "FusedGemm", "X,B", "Y");
  n->domain = str("com.microsoft");
  attr_s(n, "activation", "Softplus");
  add_output(b, "Y");
  expect_error(import(b), "(FusedGemm): activation 'Softplus' is not supported");
}
END_TEST

/* quantize_dynamic's product as onnxruntime saves it fused:
 * DynamicQuantizeMatMul (A quantized at run time, int8 B per column with
 * zero points, a bias), against its values; the same codes, so within
 * f32 rounding of them. */
START_TEST(test_dynamic_quantize_matmul) {
  static const double want[6] = {2.79827452, -0.538941145, 0.476156861, 3.24113727, -0.273098052, -0.673058867};
  static const int8_t bq[8] = {-116, -79, -42, -5, 32, 69, 106, -112};
  Model *b = model_new(17);
  add_input(b, "X", 2, (const int64_t[]){3, 4});
  add_init_raw(b, "B", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 2, (const int64_t[]){4, 2}, bq, 8);
  add_init_f32(b, "S", 1, (const int64_t[]){2}, 2, (const float[]){0.01f, 0.02f});
  add_init_raw(b, "Z", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 1, (const int64_t[]){2}, (const int8_t[]){1, -2}, 2);
  add_init_f32(b, "BI", 1, (const int64_t[]){2}, 2, (const float[]){0.5f, -0.25f});
  add_node(b, "DynamicQuantizeMatMul", "X,B,S,Z,BI", "Y")->domain = str("com.microsoft");
  add_output(b, "Y");
  Tensor y = onnxb_run1(must_import(b), "X", 2, (const int64_t[]){3, 4}, pattern(12, 5, 1));
  onnxb_expect_values(&y, 6, want, "DynamicQuantizeMatMul");
}
END_TEST

/* quantize_dynamic's BERT ops against onnxruntime's values: QAttention
 * (two heads, after a DynamicQuantizeLinear of X, weight codes
 * ((29 i + 3) mod 255) - 127, a mask of lengths) and
 * QEmbedLayerNormalization (uint8 tables). */
START_TEST(test_quantized_bert_ops) {
  static const double att[16] = {-1.64653301,  2.4330008,    2.22561121,   0.560137808, -3.44006467, 1.45663297,
                                 1.8605864,    0.250601888,  -0.539000034, -0.101725519, -0.304450989, -2.6321764,
                                 -0.539000034, -0.101725519, -0.304450989, -2.6321764};
  static const double emb[12] = {-1.69557703, -0.223596171, 0.221394271, 1.89297128, -1.69557703, -0.223596141,
                                 0.221394211, 1.89297116,   -1.69557726, -0.223596156, 0.221393973, 1.89297116};
  int8_t w[48];
  for (int i = 0; i < 48; i++) w[i] = (int8_t)((i * 29 + 3) % 255 - 127);
  Model *b = model_new(17);
  add_input(b, "X", 3, (const int64_t[]){2, 2, 4});
  add_init_raw(b, "W", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 2, (const int64_t[]){4, 12}, w, 48);
  add_init_f32(b, "BI", 1, (const int64_t[]){12}, 12, pattern(12, 3, 2));
  add_init_f32(b, "WS", 0, NULL, 1, (const float[]){0.02f});
  add_init_raw(b, "M", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, (const int64_t[]){2}, (const int32_t[]){2, 1}, 8);
  add_node(b, "DynamicQuantizeLinear", "X", "XQ,XS,XZ");
  Onnx__NodeProto *n = add_node(b, "QAttention", "XQ,W,BI,XS,WS,M,XZ", "Y");
  n->domain = str("com.microsoft");
  attr_i(n, "num_heads", 2);
  add_output(b, "Y");
  Tensor y = onnxb_run1(must_import(b), "X", 3, (const int64_t[]){2, 2, 4}, pattern(16, 5, 1));
  onnxb_expect_values(&y, 16, att, "QAttention");

  uint8_t word[20], pos[12];
  for (int i = 0; i < 20; i++) word[i] = (uint8_t)((i * 7 + 1) % 256);
  for (int i = 0; i < 12; i++) pos[i] = (uint8_t)((i * 11 + 5) % 256);
  b = model_new(17);
  add_input_typed(b, "I", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 2, (const int64_t[]){1, 3});
  add_init_raw(b, "WE", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 2, (const int64_t[]){5, 4}, word, 20);
  add_init_raw(b, "PE", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 2, (const int64_t[]){3, 4}, pos, 12);
  add_init_raw(b, "G", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 1, (const int64_t[]){4},
               (const uint8_t[]){200, 100, 150, 250}, 4);
  add_init_raw(b, "B", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 1, (const int64_t[]){4},
               (const uint8_t[]){10, 128, 90, 200}, 4);
  static const char *const scales[4] = {"WS", "PS", "GS", "BS"}, *const zps[4] = {"WZ", "PZ", "GZ", "BZ"};
  static const float scale[4] = {0.01f, 0.02f, 0.005f, 0.003f};
  static const uint8_t zp[4] = {128, 100, 0, 128};
  for (int i = 0; i < 4; i++) {
    add_init_f32(b, scales[i], 0, NULL, 1, &scale[i]);
    add_init_raw(b, zps[i], ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &zp[i], 1);
  }
  n = add_node(b, "QEmbedLayerNormalization", "I,,WE,PE,,G,B,,WS,PS,,GS,BS,WZ,PZ,,GZ,BZ", "Y");
  n->domain = str("com.microsoft");
  attr_f(n, "epsilon", 1e-5f);
  add_output(b, "Y");
  Graph *g = must_import(b);
  Tensor in = {ir_type_make(TY_I32, 2, (const int64_t[]){1, 3}), (int32_t[]){1, 4, 0}}, out;
  TensorMap inputs = {1, (const char *[]){"I"}, &in};
  char err[512];
  ck_assert_msg(ir_eval(g, &inputs, &params, &out, err, sizeof err), "%s", err);
  onnxb_expect_values(&out, 12, emb, "QEmbedLayerNormalization");
}
END_TEST

/* RelativePositionBias (T5 through onnxruntime's optimizer) over a
 * head-major table whose value is 10 head + bucket, so the output shows
 * each pair's bucket: Hugging Face's T5Attention._relative_position_bucket
 * for 8 buckets, max_distance 10, L = 6 (bidirectional everywhere;
 * causal where the key is not after the query, the part a decoder's
 * mask leaves). */
START_TEST(test_relative_position_bias) {
  static const int64_t hf[2][36] = {
      {0, 5, 6, 6, 6, 7, 1, 0, 5, 6, 6, 6, 2, 1, 0, 5, 6, 6, 2, 2, 1, 0, 5, 6, 2, 2, 2, 1, 0, 5, 3, 2, 2, 2, 1, 0},
      {0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 3, 2, 1, 0, 0, 0, 4, 3, 2, 1, 0, 0, 4, 4, 3, 2, 1, 0}};
  float table[16];
  for (int i = 0; i < 16; i++) table[i] = (float)(10 * (i / 8) + i % 8);
  for (int bidirectional = 1; bidirectional >= 0; bidirectional--) {
    Model *b = model_new(17);
    add_input(b, "T", 2, (const int64_t[]){8, 2});
    add_init_i64(b, "L", 1, (const int64_t[]){6});
    Onnx__NodeProto *n = add_node(b, "RelativePositionBias", "T,L,L", "Y");
    n->domain = str("com.microsoft");
    attr_i(n, "max_distance", 10);
    attr_i(n, "is_bidirectional", bidirectional);
    add_output(b, "Y");
    Tensor y = onnxb_run1(must_import(b), "T", 2, (const int64_t[]){8, 2}, table);
    ck_assert(onnxb_same_dims(&y.type, 4, (const int64_t[]){1, 2, 6, 6}));
    for (int h = 0; h < 2; h++)
      for (int i = 0; i < 6; i++)
        for (int j = 0; j <= (bidirectional ? 5 : i); j++)
          ck_assert_double_eq(ir_tensor_get(&y, (h * 6 + i) * 6 + j), 10 * h + hf[!bidirectional][i * 6 + j]);
    ir_tensor_free(&y);
  }
}
END_TEST

int main(void) {
  const TTest *tests[] = {test_contrib_ops, test_ms_attention_and_embeddings, test_matmul_nbits, test_fused_ops,
                          test_dynamic_quantize_matmul, test_quantized_bert_ops,
                          test_relative_position_bias};
  return onnxb_run_suite("onnx_contrib", (int)ARRAY_LEN(tests), tests);
}

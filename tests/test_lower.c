/* Lowering tests: takes .dl text (the examples, the files under
 * tests/errors and inline snippets), parses and lowers it, and checks the
 * graph (verifier, parameter names, shapes and inits, op counts) or the
 * exact diagnostics. */
#include "check_quiet.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"
#include "ir/ir.h"

typedef struct Lowered {
  Ctx c;
  Graph *g;
  bool verified;
  char *text; /* the source, freed with the result */
} Lowered;

typedef struct Job {
  const char *name, *text;
  const LowerOptions *opt;
  Graph *g;
  bool verified;
} Job;

static int run_job(Ctx *c, void *data) {
  Job *j = data;
  const SrcFile *f = ctx_add_file(c, j->name, j->text, strlen(j->text));
  Program *p = fe_parse(c, f);
  if (!p) return 0;
  j->g = fe_lower(c, p, j->opt);
  j->verified = j->g && ir_verify(j->g);
  return j->g != NULL;
}

static void lower_named(Lowered *r, const char *name, const char *text, const LowerOptions *opt) {
  memset(r, 0, sizeof *r);
  ctx_init(&r->c);
  Job j = {name, text, opt, NULL, false};
  ck_assert_int_ne(ctx_guard(&r->c, run_job, &j), -1);
  r->g = j.g;
  r->verified = j.verified;
}

static void lower_text(Lowered *r, const char *text) { lower_named(r, "t.dl", text, NULL); }

static char *read_source(const char *rel) {
  const char *top = getenv("top_srcdir");
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", top ? top : ".", rel);
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = 0;
  fclose(f);
  return buf;
}

/* Lowers a file of the source tree, named in messages by its relative path. */
static void lower_file(Lowered *r, const char *rel, const LowerOptions *opt) {
  char *text = read_source(rel);
  lower_named(r, rel, text, opt);
  r->text = text;
}

static void done(Lowered *r) {
  ctx_free(&r->c);
  free(r->text);
}

static const char *diags(const Lowered *r) { return diag_text(&r->c); }

static int count_op(const Graph *g, OpKind op) {
  int n = 0;
  for (Node *x = g->first; x; x = x->next) n += x->op == op;
  return n;
}

static Node *find_param(const Graph *g, const char *name) {
  for (Node *x = g->first; x; x = x->next)
    if (x->op == OP_PARAM && strcmp(ir_attr_str(x, "name"), name) == 0) return x;
  return NULL;
}

static void check_param(const Graph *g, const char *name, const char *type) {
  Node *p = find_param(g, name);
  ck_assert_msg(p != NULL, "no parameter '%s'", name);
  char buf[IR_TYPE_STR_MAX];
  ck_assert_str_eq(ir_type_str(&p->out[0].type, buf, sizeof buf), type);
}

static const char *param_init(const Graph *g, const char *name) {
  Node *p = find_param(g, name);
  ck_assert_msg(p != NULL, "no parameter '%s'", name);
  const Attr *a = ir_attr(p, "init");
  return a ? a->s : "";
}

/* Elements of the learnable parameters (batchnorm statistics left out):
 * what PyTorch's sum(p.numel() for p in model.parameters()) counts. */
static long long learnable_numel(const Graph *g) {
  long long n = 0;
  for (Node *x = g->first; x; x = x->next)
    if (x->op == OP_PARAM && !strstr(ir_attr_str(x, "name"), ".running_"))
      n += ir_type_numel(&x->out[0].type);
  return n;
}

static const char *type_text(const Value *v) {
  static char buf[IR_TYPE_STR_MAX];
  return ir_type_str(&v->type, buf, sizeof buf);
}

/* Lowers text that must succeed and verify. */
#define LOWER_OK(r, text)                                              \
  do {                                                                 \
    lower_text(&(r), text);                                            \
    ck_assert_msg((r).g != NULL, "lowering failed:\n%s", diags(&(r))); \
    ck_assert_msg((r).verified, "verifier failed:\n%s", diags(&(r)));  \
  } while (0)

/* ---- the examples ---- */

static void lower_example(Lowered *r, const char *rel) {
  lower_file(r, rel, NULL);
  ck_assert_msg(r->g != NULL, "%s:\n%s", rel, diags(r));
  ck_assert_msg(r->verified, "%s does not verify:\n%s", rel, diags(r));
  ck_assert_str_eq(diags(r), "");
}

START_TEST(example_mlp) {
  Lowered r;
  lower_example(&r, "examples/mlp.dl");
  ck_assert_int_eq(count_op(r.g, OP_PARAM), 6);
  check_param(r.g, "fc1.weight", "f32[512, 784]");
  check_param(r.g, "fc3.bias", "f32[10]");
  ck_assert_int_eq(count_op(r.g, OP_GELU), 2);
  ck_assert_int_eq(count_op(r.g, OP_SOFTMAX), 1);
  ck_assert_str_eq(param_init(r.g, "fc1.weight"), "uniform(0.03571428571428571)"); /* 1/sqrt(784) */
  ck_assert_int_eq(r.g->n_outputs, 1);
  ck_assert_str_eq(r.g->output_names[0], "probs");
  ck_assert_str_eq(type_text(r.g->outputs[0]), "f32[8, 10]");
  done(&r);
}
END_TEST

START_TEST(example_lenet) {
  Lowered r;
  lower_example(&r, "examples/lenet.dl");
  ck_assert_int_eq(count_op(r.g, OP_PARAM), 10);
  check_param(r.g, "conv1.weight", "f32[6, 1, 5, 5]");
  check_param(r.g, "conv2.weight", "f32[16, 6, 5, 5]");
  check_param(r.g, "fc1.weight", "f32[120, 400]");
  check_param(r.g, "fc2.weight", "f32[84, 120]");
  check_param(r.g, "fc3.bias", "f32[10]");
  ck_assert_str_eq(param_init(r.g, "conv1.bias"), "uniform(0.2)"); /* 1/sqrt(1*5*5) */
  ck_assert_int_eq(count_op(r.g, OP_MAXPOOL2D), 2);
  done(&r);
}
END_TEST

START_TEST(example_resnet18) {
  Lowered r;
  lower_example(&r, "examples/resnet18.dl");
  /* torchvision: 62 parameters() + 40 running stats = 102 state_dict
   * entries without num_batches_tracked. */
  ck_assert_int_eq(count_op(r.g, OP_PARAM), 102);
  ck_assert_int_eq(count_op(r.g, OP_CONV2D), 20);
  ck_assert_int_eq(count_op(r.g, OP_BATCHNORM), 20);
  check_param(r.g, "conv1.weight", "f32[64, 3, 7, 7]");
  check_param(r.g, "layer1.0.conv1.weight", "f32[64, 64, 3, 3]");
  check_param(r.g, "layer2.0.downsample.0.weight", "f32[128, 64, 1, 1]");
  check_param(r.g, "layer2.0.downsample.1.running_var", "f32[128]");
  check_param(r.g, "layer4.1.bn2.bias", "f32[512]");
  check_param(r.g, "fc.weight", "f32[1000, 512]");
  ck_assert_ptr_null(find_param(r.g, "layer1.0.downsample.0.weight"));
  ck_assert_int_eq(learnable_numel(r.g), 11689512); /* torchvision's count */
  ck_assert_str_eq(param_init(r.g, "layer1.0.bn1.running_var"), "ones");
  ck_assert_str_eq(param_init(r.g, "layer1.0.bn1.running_mean"), "zeros");
  ck_assert_str_eq(type_text(r.g->outputs[0]), "f32[1, 1000]");
  done(&r);
}
END_TEST

START_TEST(example_resnet50) {
  Lowered r;
  lower_example(&r, "examples/resnet50.dl");
  ck_assert_int_eq(count_op(r.g, OP_CONV2D), 53);
  ck_assert_int_eq(count_op(r.g, OP_BATCHNORM), 53);
  /* torchvision's resnet50 has 161 parameters(); with the 2 * 53 running
   * statistics the state_dict (less num_batches_tracked) has 267. */
  int learnable = 0, all = 0;
  for (Node *x = r.g->first; x; x = x->next) {
    if (x->op != OP_PARAM) continue;
    all++;
    learnable += strstr(ir_attr_str(x, "name"), ".running_") == NULL;
  }
  ck_assert_int_eq(all, 267);
  ck_assert_int_eq(learnable, 161);
  check_param(r.g, "layer1.0.downsample.0.weight", "f32[256, 64, 1, 1]");
  check_param(r.g, "layer1.2.bn3.running_var", "f32[256]");
  check_param(r.g, "layer3.5.conv2.weight", "f32[256, 256, 3, 3]");
  check_param(r.g, "layer4.0.downsample.0.weight", "f32[2048, 1024, 1, 1]");
  check_param(r.g, "fc.weight", "f32[1000, 2048]");
  ck_assert_ptr_null(find_param(r.g, "layer1.1.downsample.0.weight"));
  ck_assert_int_eq(learnable_numel(r.g), 25557032);
  done(&r);
}
END_TEST

START_TEST(example_mobilenetv2) {
  Lowered r;
  lower_example(&r, "examples/mobilenetv2.dl");
  /* torchvision's mobilenet_v2: 158 parameters(), 52 batchnorms. */
  ck_assert_int_eq(count_op(r.g, OP_PARAM), 158 + 2 * 52);
  ck_assert_int_eq(count_op(r.g, OP_CONV2D), 52);
  ck_assert_int_eq(count_op(r.g, OP_ADD), 10);
  check_param(r.g, "features.0.0.weight", "f32[32, 3, 3, 3]");
  check_param(r.g, "features.0.1.running_mean", "f32[32]");
  check_param(r.g, "features.1.conv.0.0.weight", "f32[32, 1, 3, 3]");
  check_param(r.g, "features.1.conv.1.weight", "f32[16, 32, 1, 1]");
  check_param(r.g, "features.1.conv.2.weight", "f32[16]");
  check_param(r.g, "features.2.conv.0.0.weight", "f32[96, 16, 1, 1]");
  check_param(r.g, "features.2.conv.1.0.weight", "f32[96, 1, 3, 3]");
  check_param(r.g, "features.2.conv.3.running_var", "f32[24]");
  check_param(r.g, "features.17.conv.2.weight", "f32[320, 960, 1, 1]");
  check_param(r.g, "features.18.0.weight", "f32[1280, 320, 1, 1]");
  check_param(r.g, "classifier.1.weight", "f32[1000, 1280]");
  ck_assert_int_eq(learnable_numel(r.g), 3504872);
  done(&r);
}
END_TEST

START_TEST(example_lstm) {
  Lowered r;
  lower_example(&r, "examples/lstm.dl");
  ck_assert_int_eq(count_op(r.g, OP_PARAM), 11);
  check_param(r.g, "embed.weight", "f32[10000, 512]");
  check_param(r.g, "lstm.weight_ih_l0", "f32[2048, 512]");
  check_param(r.g, "lstm.weight_hh_l1", "f32[2048, 512]");
  check_param(r.g, "lstm.bias_ih_l1", "f32[2048]");
  check_param(r.g, "head.weight", "f32[10000, 512]");
  ck_assert_str_eq(param_init(r.g, "embed.weight"), "normal(1)");
  ck_assert_str_eq(param_init(r.g, "lstm.weight_hh_l0"), "uniform(0.044194173824159216)");
  ck_assert_int_eq(count_op(r.g, OP_LSTM), 1);
  ck_assert_int_eq(count_op(r.g, OP_GATHER), 1);
  ck_assert_str_eq(type_text(r.g->outputs[0]), "f32[4, 32, 10000]");
  done(&r);
}
END_TEST

START_TEST(example_transformer) {
  Lowered r;
  lower_example(&r, "examples/transformer.dl");
  ck_assert_int_eq(count_op(r.g, OP_PARAM), 12);
  check_param(r.g, "self_attn.in_proj_weight", "f32[1536, 512]");
  check_param(r.g, "self_attn.in_proj_bias", "f32[1536]");
  check_param(r.g, "self_attn.out_proj.weight", "f32[512, 512]");
  check_param(r.g, "self_attn.out_proj.bias", "f32[512]");
  check_param(r.g, "linear1.weight", "f32[2048, 512]");
  check_param(r.g, "linear2.weight", "f32[512, 2048]");
  check_param(r.g, "norm1.weight", "f32[512]");
  check_param(r.g, "norm2.bias", "f32[512]");
  /* Self-attention: three projections by the packed weight's and
   * bias's slices (weights only: computed at load). */
  ck_assert_int_eq(count_op(r.g, OP_LINEAR), 6);
  ck_assert_int_eq(count_op(r.g, OP_SLICE), 6);
  ck_assert_int_eq(count_op(r.g, OP_TRANSPOSE), 0);
  /* The core, scores to weighted values: one attention op. */
  ck_assert_int_eq(count_op(r.g, OP_ATTENTION), 1);
  ck_assert_int_eq(count_op(r.g, OP_MATMUL), 0);
  ck_assert_int_eq(count_op(r.g, OP_SOFTMAX), 0);
  ck_assert_int_eq(count_op(r.g, OP_LAYERNORM), 2);
  done(&r);
}
END_TEST

/* ---- error classes: tests/errors/<name>.dl and its exact report ---- */

typedef struct ErrorCase {
  const char *file;
  const char *want;
} ErrorCase;

static const ErrorCase error_cases[] = {
    {"unknown_name",
     "tests/errors/unknown_name.dl:3:10: error: unknown name 'hiden'; did you mean 'hidden'?\n"
     "      return hiden\n"
     "             ^\n"},
    {"unknown_function",
     "tests/errors/unknown_function.dl:2:10: error: unknown function 'batchnrom'; did you mean "
     "'batchnorm'?\n"
     "      return batchnrom(x)\n"
     "             ^\n"},
    {"unknown_argument",
     "tests/errors/unknown_argument.dl:2:34: error: conv2d has no argument 'strid'; did you mean "
     "'stride'?\n"
     "      return conv2d(x, 16, kernel=3, strid=2, pad=1)\n"
     "                                     ^\n"},
    {"wrong_arg_kind",
     "tests/errors/wrong_arg_kind.dl:2:34: error: conv2d: 'stride' must be a positive int or a "
     "list "
     "of 2 positive ints, got a string\n"
     "      return conv2d(x, 16, kernel=3, stride=\"two\", pad=1)\n"
     "                                     ^\n"},
    {"shape_mismatch",
     "tests/errors/shape_mismatch.dl:2:12: error: add: cannot broadcast f32[8, 10] with f32[8, "
     "12]\n"
     "      return x + y\n"
     "               ^\n"},
    {"wrong_return_type",
     "tests/errors/wrong_return_type.dl:2:10: error: model returns f32[8, 12], but its signature "
     "says f32[8, 10]\n"
     "      return linear(x, 12)\n"
     "             ^\n"},
    {"return_count",
     "tests/errors/return_count.dl:2:3: error: model returns 1 value, but its signature declares "
     "2\n"
     "      return relu(x)\n"
     "      ^\n"},
    {"unknown_dtype",
     "tests/errors/unknown_dtype.dl:1:12: error: unknown dtype 'f31'; expected one of f32, f16, "
     "bf16, i8, i32, i64, bool, u8\n"
     "    model m(x: f31[8, 784]) -> f32[8, 784] {\n"
     "               ^\n"},
    {"unknown_dimension",
     "tests/errors/unknown_dimension.dl:1:16: error: unknown dimension 'N': define it with 'let N "
     "= ...' or -D N=..., or give the input 'x' (its shape binds N)\n"
     "    model m(x: f32[N, 784]) -> f32[N, 784] {\n"
     "                   ^\n"},
    {"recursion",
     "tests/errors/recursion.dl:6:10: error: block 'a' calls itself: a -> b -> a\n"
     "      return a(relu(x))\n"
     "             ^\n"},
    {"absurd_size",
     "tests/errors/absurd_size.dl:1:12: error: f32[1000000000, 1000000000] is too large (more than "
     "1099511627776 elements)\n"
     "    model m(x: f32[1000000000, 1000000000]) -> f32[1000000000, 1000000000] {\n"
     "               ^\n"
     "tests/errors/absurd_size.dl:1:44: error: f32[1000000000, 1000000000] is too large (more than "
     "1099511627776 elements)\n"
     "    model m(x: f32[1000000000, 1000000000]) -> f32[1000000000, 1000000000] {\n"
     "                                               ^\n"},
    {"too_large_loop",
     "tests/errors/too_large_loop.dl:3:9: error: model too large: more than 1000000 operations\n"
     "        x = relu(x)\n"
     "            ^\n"},
    {"tuple_count",
     "tests/errors/tuple_count.dl:2:3: error: cannot unpack a tuple of 3 values into 2 names\n"
     "      y, h = lstm(x, 32)\n"
     "      ^\n"},
    {"duplicate_param",
     "tests/errors/duplicate_param.dl:3:10: error: parameter 'fc.weight' is defined twice\n"
     "      return linear(h, 10) as fc\n"
     "             ^\n"
     "tests/errors/duplicate_param.dl:2:12: note: 'fc.weight' was first defined here\n"
     "      h = relu(linear(x, 64) as fc)\n"
     "               ^\n"
     "tests/errors/duplicate_param.dl:7:10: note: in block 'mlp', called from here\n"
     "      return mlp(x)\n"
     "             ^\n"},
    {"error_in_nested_block",
     "tests/errors/error_in_nested_block.dl:6:17: error: add: cannot broadcast f32[1, 16, 8, 8] "
     "with f32[1, 8, 16, 16]\n"
     "      return relu(y + x)\n"
     "                    ^\n"
     "tests/errors/error_in_nested_block.dl:10:7: note: in block 'basic', called from here\n"
     "      x = basic(x, cout, stride) as 0\n"
     "          ^\n"
     "tests/errors/error_in_nested_block.dl:17:7: note: in block 'stage', called from here\n"
     "      y = stage(y, 16, 2, 2) as layer2\n"
     "          ^\n"},
    {"tensor_condition",
     "tests/errors/tensor_condition.dl:2:6: error: condition must be known at compile time, got a "
     "tensor f32[8]\n"
     "      if x {\n"
     "         ^\n"},
    {"wrong_layer_rank",
     "tests/errors/wrong_layer_rank.dl:2:15: error: conv2d expects a 4-d input [N, C, H, W], got "
     "f32[8, 512]\n"
     "      return relu(conv2d(x, 64, kernel=3) as conv3)\n"
     "                  ^\n"},
    {"block_arguments",
     "tests/errors/block_arguments.dl:6:19: error: block 'basic' has no parameter 'strid'; did you "
     "mean 'stride'?\n"
     "      a = basic(x, 4, strid=2)\n"
     "                      ^\n"
     "tests/errors/block_arguments.dl:7:7: error: block 'basic': missing argument 'cout'\n"
     "      b = basic(x)\n"
     "          ^\n"
     "tests/errors/block_arguments.dl:8:22: error: block 'basic' takes 3 arguments, got 4\n"
     "      c = basic(x, 4, 1, 5)\n"
     "                         ^\n"},
    {"compile_time_math",
     "tests/errors/compile_time_math.dl:2:13: error: integer overflow: 9223372036854775807 + 1\n"
     "    let A = BIG + 1\n"
     "                ^\n"
     "tests/errors/compile_time_math.dl:3:11: error: division by zero\n"
     "    let B = 7 // 0\n"
     "              ^\n"
     "tests/errors/compile_time_math.dl:4:11: error: integer overflow: 2 ** 64\n"
     "    let C = 2 ** 64\n"
     "              ^\n"},
    {"several_errors",
     "tests/errors/several_errors.dl:8:26: error: linear: 'bias' must be true or false, got 1\n"
     "      a = relu(linear(x, 32, bias=1))\n"
     "                             ^\n"
     "tests/errors/several_errors.dl:9:15: error: unknown name 'undefined_thing'\n"
     "      b = sigmoid(undefined_thing)\n"
     "                  ^\n"
     "tests/errors/several_errors.dl:10:15: error: block 'head' has no parameter 'clases'; did you "
     "mean 'classes'?\n"
     "      c = head(x, clases=10)\n"
     "                  ^\n"
     "tests/errors/several_errors.dl:11:7: error: reshape: cannot reshape f32[8, 64] (512 "
     "elements) "
     "to [8, 5] (40 elements)\n"
     "      d = reshape(x, [N, 5])\n"
     "          ^\n"},
    /* PyTorch's spellings (frontend/pytorch.c): kernel_size, padding,
     * out_features, bias=False, negative_slope, cat, dim and start_dim are
     * accepted (no error in head), the rest get hints. */
    {"pytorch_names",
     "tests/errors/pytorch_names.dl:8:46: error: conv2d has no argument 'in_channels' (dlcc takes it from the input's shape: leave it out)\n"
     "      y = conv2d(x, 4, kernel_size=3, padding=1, in_channels=3)\n"
     "                                                 ^\n"
     "tests/errors/pytorch_names.dl:9:15: error: relu has no argument 'inplace' (dlcc has no in-place ops: leave it out)\n"
     "      z = relu(x, inplace=True)\n"
     "                  ^\n"
     "tests/errors/pytorch_names.dl:10:7: error: unknown function 'interpolate'; did you mean 'upsample'? (upsample(x, scale=2) or upsample(x, size=[h, w]))\n"
     "      u = interpolate(x, scale_factor=2)\n"
     "          ^\n"
     "tests/errors/pytorch_names.dl:11:25: error: dropout has no argument 'training' (dlcc compiles for inference, where dropout is the identity: leave it out)\n"
     "      v = dropout(x, p=0.5, training=False)\n"
     "                            ^\n"
     "tests/errors/pytorch_names.dl:12:18: error: unknown name 'None' (dlcc has no None: leave the argument out to take its default)\n"
     "      w = reshape(x, None)\n"
     "                     ^\n"
     "tests/errors/pytorch_names.dl:13:7: error: unknown function 'Linear'; did you mean 'linear'? (dlcc calls a layer where PyTorch builds a module: linear(x, 10) as fc)\n"
     "      s = Linear(x, 4)\n"
     "          ^\n"},
    {"pytorch_syntax",
     "tests/errors/pytorch_syntax.dl:2:1: error: unexpected identifier 'def', expected 'let', 'block' or 'model' (did you mean the keyword 'block'? a block is a function: block mlp(x) { ... return y })\n"
     "    def mlp(x):\n"
     "    ^\n"
     "tests/errors/pytorch_syntax.dl:6:12: error: a loop runs over a range lo..hi (write 0..4 for range(4): a..b runs up to b - 1)\n"
     "      for i in range(4) {\n"
     "               ^\n"
     "tests/errors/pytorch_syntax.dl:9:12: error: unexpected '.', expected newline (dlcc's functions have no module prefix: relu(x), not torch.relu(x))\n"
     "      y = torch.relu(x)\n"
     "               ^\n"
     "tests/errors/pytorch_syntax.dl:11:8: error: unexpected '.', expected newline (dlcc has no methods: reshape(x, shape) for x.view(shape), dim(x, 0) for x.shape[0])\n"
     "      z = x.view(3, 2)\n"
     "           ^\n"
     "tests/errors/pytorch_syntax.dl:13:9: error: unexpected identifier 'i', expected '=' or ',' (did you mean the keyword 'for'? loops run over a range: for i in 0..n)\n"
     "      while i < 3 {\n"
     "            ^\n"},
};

START_TEST(error_file) {
  const ErrorCase *ec = &error_cases[_i];
  char rel[256];
  snprintf(rel, sizeof rel, "tests/errors/%s.dl", ec->file);
  Lowered r;
  lower_file(&r, rel, NULL);
  ck_assert_msg(r.g == NULL, "%s lowered without errors", rel);
  ck_assert_str_eq(diags(&r), ec->want);
  done(&r);
}
END_TEST

/* ---- language semantics ---- */

/* The value of `let V = <expr>` seen through a model input of f32[V]. */
static long long int_of(const char *expr) {
  char text[512];
  snprintf(text, sizeof text, "let V = %s\nmodel m(x: f32[V]) -> f32[V] { return x }\n", expr);
  Lowered r;
  lower_text(&r, text);
  ck_assert_msg(r.g != NULL, "%s:\n%s", expr, diags(&r));
  long long v = r.g->outputs[0]->type.dims[0];
  done(&r);
  return v;
}

START_TEST(scalar_arithmetic) {
  ck_assert_int_eq(int_of("7 // 2"), 3);
  ck_assert_int_eq(int_of("-7 // 2 + 10"), 6); /* floor, as Python: -4 */
  ck_assert_int_eq(int_of("-7 % 3"), 2);       /* sign of the divisor */
  ck_assert_int_eq(int_of("7 % -3 + 5"), 3);   /* -2 + 5 */
  ck_assert_int_eq(int_of("2 ** 10"), 1024);
  ck_assert_int_eq(int_of("int(7 / 2 * 2)"), 7); /* / is true division */
  ck_assert_int_eq(int_of("int(sqrt(16))"), 4);
  ck_assert_int_eq(int_of("max(3, 9, 4) - min(5, 2)"), 7);
  ck_assert_int_eq(int_of("abs(-6)"), 6);
  ck_assert_int_eq(int_of("len([1, 2, 3])"), 3);
}
END_TEST

START_TEST(conditions_and_loops) {
  ck_assert_int_eq(int_of("1 + 2 * 3"), 7);
  Lowered r;
  LOWER_OK(r,
           "block f(n) {\n"
           "  s = 0\n"
           "  for i in 0..n { if i % 2 == 0 and not (i == 4) { s = s + i } else if i == 5 { s = s "
           "+ 100 } }\n"
           "  return s\n"
           "}\n"
           "model m(x: f32[f(7)]) -> f32[108] { return x }\n");
  /* 0 + 2 + 100 + 6 */
  ck_assert_int_eq(r.g->outputs[0]->type.dims[0], 108);
  done(&r);
}
END_TEST

START_TEST(auto_names) {
  Lowered r;
  LOWER_OK(r,
           "block mlp(x) { return linear(relu(linear(x, 16)), 4) }\n"
           "model m(x: f32[2, 8]) -> f32[2, 4] {\n"
           "  y = linear(x, 8)\n"
           "  y = mlp(y) as head\n"
           "  return y\n"
           "}\n");
  check_param(r.g, "linear_0.weight", "f32[8, 8]");
  check_param(r.g, "head.linear_0.weight", "f32[16, 8]");
  check_param(r.g, "head.linear_1.weight", "f32[4, 16]");
  ck_assert_int_eq(count_op(r.g, OP_PARAM), 6);
  done(&r);
}
END_TEST

START_TEST(nested_scopes_and_interpolation) {
  Lowered r;
  LOWER_OK(r,
           "block unit(x, c) { return relu(linear(x, c) as fc) }\n"
           "model m(x: f32[2, 8]) -> f32[2, 8] {\n"
           "  for i in 0..3 { x = unit(x, 8) as layers.{i}.{\"sub\"} }\n"
           "  return x\n"
           "}\n");
  check_param(r.g, "layers.0.sub.fc.weight", "f32[8, 8]");
  check_param(r.g, "layers.2.sub.fc.bias", "f32[8]");
  ck_assert_int_eq(count_op(r.g, OP_PARAM), 6);
  done(&r);
}
END_TEST

/* torchvision's denseblock1.denselayer2, layer3: a '{' right after a part
 * joins the value to it; a '{' after a space is an error, not a body. */
START_TEST(glued_scope_parts) {
  Lowered r;
  LOWER_OK(r,
           "block unit(x, c) { return relu(linear(x, c) as fc) }\n"
           "model m(x: f32[2, 8]) -> f32[2, 8] {\n"
           "  for i in 1..3 { x = unit(x, 8) as denseblock1.denselayer{i}.{i}{\"x\"}.p{i * 10} }\n"
           "  return x\n"
           "}\n");
  check_param(r.g, "denseblock1.denselayer1.1x.p10.fc.weight", "f32[8, 8]");
  check_param(r.g, "denseblock1.denselayer2.2x.p20.fc.bias", "f32[8]");
  ck_assert_int_eq(count_op(r.g, OP_PARAM), 4);
  done(&r);
  lower_text(&r, "model m(x: f32[2, 8]) -> f32[2, 8] {\n"
                 "  for i in 1..3 { x = linear(x, 8) as layer {i} }\n"
                 "  return x\n"
                 "}\n");
  ck_assert_ptr_null(r.g);
  ck_assert_str_eq(diags(&r), "t.dl:2:45: error: no space may come before '{' in a scope: write "
                              "name{expr} (one part, as in denselayer{i}) or name.{expr} (two parts)\n"
                              "      for i in 1..3 { x = linear(x, 8) as layer {i} }\n"
                              "                                                ^\n");
  done(&r);
}
END_TEST

/* VGG's cfg lists: list[i], tuple[i] and string[i], negative from the end. */
START_TEST(indexing) {
  Lowered r;
  LOWER_OK(r,
           "let CFG = [4, 0, 6]\n"
           "model m(x: f32[1, 3, 8, 8]) -> f32[1, 6, 4, 4] {\n"
           "  for i in 0..len(CFG) {\n"
           "    if CFG[i] == 0 { x = maxpool2d(x, 2) } else { x = conv2d(x, CFG[i], 3, pad=1) as f.{i} }\n"
           "  }\n"
           "  t = [[1, 2], [3, 5]]\n"
           "  return x + t[-1][1] + len(\"abc\"[-1])\n"
           "}\n");
  check_param(r.g, "f.0.weight", "f32[4, 3, 3, 3]");
  check_param(r.g, "f.2.weight", "f32[6, 4, 3, 3]");
  done(&r);
}
END_TEST

START_TEST(defines) {
  const char *text = "let N = 8\nmodel m(x: f32[N, B]) -> f32[N, B] { return x }\n";
  Define d[3] = {{"N", 3}, {"B", 5}, {"Z", 1}};
  LowerOptions opt = {.model = NULL, .n_defines = 3, .defines = d};
  Lowered r;
  lower_named(&r, "t.dl", text, &opt);
  ck_assert_msg(r.g != NULL, "%s", diags(&r));
  ck_assert_str_eq(type_text(r.g->outputs[0]), "f32[3, 5]");
  ck_assert_str_eq(diags(&r), "dlcc: warning: -D Z=1 matches no 'let' and no name in t.dl\n");
  done(&r);
}
END_TEST

START_TEST(model_selection) {
  const char *text =
      "model a(x: f32[2]) -> f32[2] { return x }\n"
      "model b(x: f32[3]) -> f32[3] { return x }\n";
  Lowered r;
  lower_text(&r, text);
  ck_assert_str_eq(r.g->name, "b");
  done(&r);
  LowerOptions opt = {.model = "a", .n_defines = 0, .defines = NULL};
  lower_named(&r, "t.dl", text, &opt);
  ck_assert_str_eq(r.g->name, "a");
  done(&r);
  opt.model = "c";
  lower_named(&r, "t.dl", text, &opt);
  ck_assert_ptr_null(r.g);
  ck_assert_str_eq(diags(&r), "dlcc: error: no model named 'c' in t.dl; available: a, b\n");
  done(&r);
}
END_TEST

START_TEST(outputs_and_tuples) {
  Lowered r;
  LOWER_OK(r,
           "block two(x) { return relu(x), sigmoid(x) }\n"
           "model m(x: f32[2, 5, 3]) -> (y: f32[2, 5, 4], f32[1, 2, 4], f32[2]) {\n"
           "  y, h, c = lstm(x, 4)\n"
           "  a, b = two(x)\n"
           "  return y, h, sum(a + b, axis=[1, -1])\n"
           "}\n");
  ck_assert_int_eq(r.g->n_outputs, 3);
  ck_assert_str_eq(r.g->output_names[0], "y");
  ck_assert_str_eq(r.g->output_names[1], "output1");
  ck_assert_str_eq(r.g->output_names[2], "output2");
  const Node *red = r.g->outputs[2]->def;
  ck_assert_int_eq(red->op, OP_REDUCE_SUM);
  int n;
  const int64_t *axes = ir_attr_ints(red, "axes", &n);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(axes[0], 1);
  ck_assert_int_eq(axes[1], 2);
  done(&r);
}
END_TEST

START_TEST(block_defaults_and_keywords) {
  Lowered r;
  LOWER_OK(r,
           "block f(x, c, hidden=c * 2, act=\"relu\") {\n"
           "  h = linear(x, hidden) as up\n"
           "  if act == \"gelu\" { h = gelu(h) } else { h = relu(h) }\n"
           "  return linear(h, c) as down\n"
           "}\n"
           "model m(x: f32[2, 8]) -> f32[2, 8] { return f(x, act=\"gelu\", c=8) }\n");
  check_param(r.g, "up.weight", "f32[16, 8]");
  ck_assert_int_eq(count_op(r.g, OP_GELU), 1);
  ck_assert_int_eq(count_op(r.g, OP_RELU), 0);
  done(&r);
}
END_TEST

START_TEST(scalars_meet_tensors) {
  Lowered r;
  LOWER_OK(r,
           "let D = 16\n"
           "model m(x: f16[4, D]) -> f16[4, D] { return (1.0 - x) * (1.0 / sqrt(D)) + x ** 2 }\n");
  ck_assert_int_eq(count_op(r.g, OP_CONST), 3);
  for (Node *n = r.g->first; n; n = n->next)
    if (n->op == OP_CONST) ck_assert_int_eq(n->out[0].type.dtype, TY_F16);
  const Node *mul = r.g->outputs[0]->def->in[0]->def;
  ck_assert_int_eq(mul->op, OP_MUL);
  ck_assert_double_eq_tol(ir_attr_float(mul->in[1]->def, "value"), 0.25, 1e-12);
  done(&r);
}
END_TEST

START_TEST(data_movement) {
  Lowered r;
  LOWER_OK(r,
           "model m(x: f32[2, 3, 4]) -> (a: f32[2, 12], b: f32[2, 2, 4], c: f32[2, 5, 7], d: "
           "f32[2, 4, 3], e: f32[4, 3, 4]) {\n"
           "  a = reshape(x, [2, -1])\n"
           "  b = slice(x, 1, -2)\n"
           "  c = pad(x, [1, 2, 0, 2])\n"
           "  d = transpose(x)\n"
           "  e = concat([x, x], axis=0)\n"
           "  return a, b, c, d, e\n"
           "}\n");
  int n;
  const Node *sl = r.g->outputs[1]->def;
  const int64_t *starts = ir_attr_ints(sl, "starts", &n);
  ck_assert_int_eq(n, 3);
  ck_assert_int_eq(starts[1], 1);
  ck_assert_int_eq(ir_attr_ints(sl, "ends", &n)[1], 3);
  /* F.pad order [left, right, top, bottom] -> [begins..., ends...] */
  const int64_t *pads = ir_attr_ints(r.g->outputs[2]->def, "pads", &n);
  ck_assert_int_eq(n, 6);
  int64_t want[6] = {0, 0, 1, 0, 2, 2};
  for (int i = 0; i < 6; i++) ck_assert_int_eq(pads[i], want[i]);
  const int64_t *perm = ir_attr_ints(r.g->outputs[3]->def, "perm", &n);
  ck_assert_int_eq(perm[1], 2);
  ck_assert_int_eq(perm[2], 1);
  done(&r);
}
END_TEST

/* Python's subscripts as PyTorch means them: each is one slice over every
 * axis (clamped bounds, negative from the end, steps), an int index a
 * reshape that drops its axis, the ellipsis the axes between. */
static void check_slice(const Value *v, const int64_t *starts, const int64_t *ends, const int64_t *steps, int r) {
  const Node *s = v->def;
  ck_assert_int_eq(s->op, OP_SLICE);
  int n;
  const int64_t *got[3] = {ir_attr_ints(s, "starts", &n), ir_attr_ints(s, "ends", &n), ir_attr_ints(s, "steps", &n)};
  const int64_t *want[3] = {starts, ends, steps};
  ck_assert_int_eq(n, r);
  for (int k = 0; k < 3; k++)
    for (int d = 0; d < r; d++) ck_assert_int_eq(got[k][d], want[k][d]);
}

START_TEST(python_slicing) {
  Lowered r;
  LOWER_OK(r,
           "let half = 4\n"
           "model m(x: f32[2, 3, 8]) -> (a: f32[2, 3, 4], b: f32[2, 3, 4], c: f32[2, 2, 8], d: f32[2, 8],\n"
           "                             e: f32[3, 2], f: f32[2, 3, 8], g: f32[]) {\n"
           "  a = x[..., :half]\n"
           "  b = x[..., half:]\n"
           "  c = x[:, -2:, 0:99]\n"
           "  d = x[:, 0]\n"
           "  e = x[1, :, 1::4]\n"
           "  f = x[...]\n"
           "  return a, b, c, d, e, f, x[-1, 2, -1]\n"
           "}\n");
  Value **o = r.g->outputs;
  check_slice(o[0], (int64_t[]){0, 0, 0}, (int64_t[]){2, 3, 4}, (int64_t[]){1, 1, 1}, 3);
  check_slice(o[1], (int64_t[]){0, 0, 4}, (int64_t[]){2, 3, 8}, (int64_t[]){1, 1, 1}, 3);
  check_slice(o[2], (int64_t[]){0, 1, 0}, (int64_t[]){2, 3, 8}, (int64_t[]){1, 1, 1}, 3);
  ck_assert_int_eq(o[3]->def->op, OP_RESHAPE);
  check_slice(o[3]->def->in[0], (int64_t[]){0, 0, 0}, (int64_t[]){2, 1, 8}, (int64_t[]){1, 1, 1}, 3);
  check_slice(o[4]->def->in[0], (int64_t[]){1, 0, 1}, (int64_t[]){2, 3, 8}, (int64_t[]){1, 1, 4}, 3);
  ck_assert_int_eq(o[5]->def->op, OP_INPUT);
  check_slice(o[6]->def->in[0], (int64_t[]){1, 2, 7}, (int64_t[]){2, 3, 8}, (int64_t[]){1, 1, 1}, 3);
  done(&r);
}
END_TEST

START_TEST(conv_padding_and_groups) {
  Lowered r;
  LOWER_OK(r,
           "model m(x: f32[1, 8, 9, 9]) -> f32[1, 8, 9, 9] {\n"
           "  return conv2d(x, 8, kernel=[3, 4], pad=\"same\", groups=4) as c\n"
           "}\n");
  check_param(r.g, "c.weight", "f32[8, 2, 3, 4]");
  int n;
  const int64_t *pad = ir_attr_ints(r.g->outputs[0]->def, "pad", &n);
  ck_assert_int_eq(n, 4);
  ck_assert_int_eq(pad[0], 1);
  ck_assert_int_eq(pad[1], 1);
  ck_assert_int_eq(pad[2], 1);
  ck_assert_int_eq(pad[3], 2);
  ck_assert_str_eq(param_init(r.g, "c.weight"), "uniform(0.20412414523193154)"); /* 1/sqrt(2*3*4) */
  done(&r);
}
END_TEST

START_TEST(conv_transpose_and_upsample) {
  Lowered r;
  LOWER_OK(r,
           "model m(x: f32[1, 4, 5, 5]) -> f32[1, 6, 20, 22] {\n"
           "  y = conv_transpose2d(x, 6, kernel=[3, 4], stride=2, pad=1, output_pad=1, groups=2) as up\n"
           "  return upsample(y, [2, 2], mode=\"bilinear\", align_corners=true)\n"
           "}\n");
  /* PyTorch's layout [Cin, out/groups, kh, kw] and its fan-in out/groups*kh*kw. */
  check_param(r.g, "up.weight", "f32[4, 3, 3, 4]");
  check_param(r.g, "up.bias", "f32[6]");
  ck_assert_str_eq(param_init(r.g, "up.weight"), "uniform(0.16666666666666666)");
  const Node *rs = r.g->outputs[0]->def;
  ck_assert_int_eq(rs->op, OP_RESIZE);
  ck_assert_str_eq(ir_attr_str(rs, "mode"), "bilinear");
  ck_assert_int_eq(ir_attr_int(rs, "align_corners"), 1);
  const Node *ct = rs->in[0]->def;
  ck_assert_int_eq(ct->op, OP_CONV_TRANSPOSE2D);
  int n;
  const int64_t *opad = ir_attr_ints(ct, "output_pad", &n);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(opad[0], 1);
  ck_assert_int_eq(opad[1], 1);
  done(&r);
}
END_TEST

START_TEST(tensor_comparisons) {
  Lowered r;
  LOWER_OK(r,
           "model m(x: f32[2, 4], y: f32[4]) -> f32[2, 4] {\n"
           "  return (x < 0.5) + (x <= y) + (x > y) + (x >= 1) + (x == y) + (x != y)\n"
           "}\n");
  ck_assert_int_eq(count_op(r.g, OP_LT), 1);
  ck_assert_int_eq(count_op(r.g, OP_LE), 1);
  ck_assert_int_eq(count_op(r.g, OP_GT), 1);
  ck_assert_int_eq(count_op(r.g, OP_GE), 1);
  ck_assert_int_eq(count_op(r.g, OP_EQ), 1);
  ck_assert_int_eq(count_op(r.g, OP_NE), 1);
  done(&r);
}
END_TEST

START_TEST(attention_with_separate_inputs) {
  Lowered r;
  LOWER_OK(r,
           "model m(q: f32[2, 5, 8], kv: f32[2, 7, 8]) -> f32[2, 5, 8] {\n"
           "  return multihead_attention(q, kv, kv, heads=2) as attn\n"
           "}\n");
  /* The packed weight and bias are sliced into three each. */
  ck_assert_int_eq(count_op(r.g, OP_SLICE), 6);
  ck_assert_int_eq(count_op(r.g, OP_LINEAR), 4);
  check_param(r.g, "attn.in_proj_weight", "f32[24, 8]");
  ck_assert_str_eq(param_init(r.g, "attn.in_proj_bias"), "zeros");
  done(&r);
}
END_TEST

START_TEST(param_statement) {
  Lowered r;
  LOWER_OK(r,
           "block layer(x) {\n"
           "  param w: f32[4, 4]\n"
           "  param b: f32[4] = 0.5\n"
           "  return tanh(matmul(x, w) + b)\n"
           "}\n"
           "model m(x: f32[3, 4]) -> f32[3, 4] { return layer(x) as l1 }\n");
  check_param(r.g, "l1.w", "f32[4, 4]");
  ck_assert_str_eq(param_init(r.g, "l1.b"), "fill(0.5)");
  ck_assert_str_eq(param_init(r.g, "l1.w"), "");
  done(&r);
}
END_TEST

START_TEST(errors_in_snippets) {
  static const struct {
    const char *text, *want;
  } cases[] = {
      {"model m(x: f32[4]) -> f32[4] { if x < 1 { x = relu(x) }\n return x }\n",
       NULL},
      {"model m(x: f32[4]) -> f32[4] { y = x\n}\n",
       "t.dl:1:7: error: model 'm' ends without 'return'\n"},
      {"model m(x: f32[4]) -> f32[4] { return x }\nmodel m(x: f32[4]) -> f32[4] { return x }\n",
       "t.dl:2:7: error: model 'm' is defined twice\nt.dl:1:7: note: first defined here\n"},
      {"block f(x) { return x }\nmodel m(x: f32[4]) -> f32[4] { return f }\n",
       "t.dl:2:39: error: 'f' is a block: call it as f(...)\n"},
      {"model m(x: f32[2, 3]) -> f32[2, 3] { return softmax(x, axis=2) }\n",
       "t.dl:1:56: error: softmax: axis 2 is out of range for a tensor of rank 2\n"},
      {"model m(x: f32[4]) -> f32[4] { for i in 0..2.5 { x = relu(x) }\n return x }\n",
       "t.dl:1:44: error: a loop bound must be an int, got 2.5\n"},
      {"model m(x: i32[4]) -> i32[4] { return x * 0.5 }\n",
       "t.dl:1:41: error: mul: cannot combine a tensor i32[4] with the float 0.5\n"},
      {"model m(x: f32[4]) -> f32[4] { return gelu(x, approximate=\"fast\") }\n",
       "t.dl:1:47: error: gelu: 'approximate' must be \"none\" or \"tanh\", got \"fast\"\n"},
      {"model m(x: f32[0]) -> f32[4] { return x }\n",
       "t.dl:1:16: error: a dimension must be a positive int, got 0\n"},
      {"model m(x: f32[2, 4]) -> (a: f32[2, 4], a: f32[2, 4]) { return x, x }\n",
       "t.dl:1:41: error: model result 'a' is named twice\n"},
      {"model m(x: f32[2, 4]) -> (output1: f32[2, 4], f32[2, 4]) { return x, x }\n",
       "t.dl:1:47: error: model result 'output1' is named twice (unnamed results are output0, "
       "output1, ...)\n"},
      {"model m(x: f32[2, 4]) -> f32[2, 4] { return layernorm(x, eps=-1e-5) }\n",
       "t.dl:1:45: error: layernorm: eps must be a finite number >= 0, got -1e-05\n"},
      {"model m(x: f32[2, 4, 3, 3]) -> f32[2, 4, 3, 3] { return batchnorm(x, eps=-1) }\n",
       "t.dl:1:57: error: batchnorm: eps must be a finite number >= 0, got -1\n"},
      {"model m(x: f32[2, 6, 3]) -> f32[2, 6, 3] { return group_norm(x, 4) }\n",
       "t.dl:1:51: error: group_norm: 4 groups do not divide the 6 channels of f32[2, 6, 3]\n"},
      {"model m(x: f32[4]) -> f32[4] { return group_norm(x, 1) }\n",
       "t.dl:1:39: error: group_norm expects an input [N, C, ...], got f32[4]\n"},
      {"model m(x: f32[2, 4]) -> f32[2, 4] { return rms_norm(x, eps=-1) }\n",
       "t.dl:1:45: error: rms_norm: eps must be a finite number >= 0, got -1\n"},
      {"model m(x: f32[4]) -> f32[4] { l = [1, 2]\n y = l[2]\n z = l[-3]\n w = l[0.5]\n v = x[4]\n return x }\n",
       "t.dl:2:8: error: index 2 is out of range for a list of length 2\n"
       "t.dl:3:8: error: index -3 is out of range for a list of length 2\n"
       "t.dl:4:8: error: an index must be an int, got 0.5\n"
       "t.dl:5:8: error: index 4 is out of range for axis 0 (size 4) of f32[4]\n"},
      {"model m(x: f32[4, 8]) -> f32[4, 8] {\n  a = x[:, 9:12]\n  b = x[:, -9]\n  c = x[0, 0, 0]\n"
       "  d = x[..., ...]\n  e = x[:, ::-1]\n  g = x[:, 1.5:]\n  h = x[:, x]\n  k = [1, 2][0:1]\n  return x }\n",
       "t.dl:2:12: error: slice 9:12 of axis 1 (size 8) of f32[4, 8] is empty: PyTorch clamps it to 8:8, an "
       "empty tensor, and dlcc has no empty tensors\n"
       "t.dl:3:12: error: index -9 is out of range for axis 1 (size 8) of f32[4, 8]\n"
       "t.dl:4:8: error: 3 indices for f32[4, 8], which has 2 dims\n"
       "t.dl:5:14: error: an index can have only one ellipsis ('...')\n"
       "t.dl:6:12: error: slice ::-1 of axis 1 of f32[4, 8]: the step must be positive (PyTorch refuses a "
       "negative or zero step too)\n"
       "t.dl:7:12: error: a slice's start must be an int, got 1.5\n"
       "t.dl:8:12: error: an index must be an int, got a tensor f32[4, 8] (index by a tensor with "
       "index_select(x, axis, indices) or gather)\n"
       "t.dl:9:14: error: a list takes one int index (slices and several indices apply to tensors)\n"},
      {"model m(x: i64[4]) -> f32[4, 3] { return embedding(cast(x, f16), 10, 3) }\n",
       "t.dl:1:52: error: embedding: 'indices' must be an i32 or i64 tensor, got a tensor "
       "f16[4]\n"},
      {"model m(x: f32[1, 4, 3, 3]) -> f32[1, 4, 6, 6] { return conv_transpose2d(x, 4, kernel=2, "
       "stride=2, output_pad=2) }\n",
       "t.dl:1:100: error: conv_transpose2d: output_pad 2 must be smaller than the stride (2) or "
       "the dilation (1)\n"},
      {"model m(x: f32[1, 4, 3, 3]) -> f32[1, 4, 6, 6] { return upsample(x, mode=\"bicubic\") }\n",
       "t.dl:1:69: error: upsample: mode must be \"nearest\" or \"bilinear\", got \"bicubic\"\n"},
      {"model m(x: f32[1, 4, 3, 3]) -> f32[1, 4, 6, 6] { return upsample(x, align_corners=true) }\n",
       "t.dl:1:69: error: upsample: align_corners needs mode=\"bilinear\"\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    Lowered r;
    lower_text(&r, cases[i].text);
    ck_assert_msg(r.g == NULL, "accepted: %s", cases[i].text);
    if (cases[i].want) {
      /* Only the message lines: the source and caret are checked by the files. */
      char *got = strdup(diags(&r)), *o = got;
      for (const char *line = diags(&r); *line;) {
        const char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line + 1) : strlen(line);
        if (strncmp(line, "    ", 4) != 0) {
          memcpy(o, line, n);
          o += n;
        }
        line += n;
      }
      *o = 0;
      ck_assert_str_eq(got, cases[i].want);
      free(got);
    }
    done(&r);
  }
}
END_TEST

START_TEST(call_depth_limit) {
  /* 300 blocks, each calling the next: deeper than 100, but no cycle. */
  size_t cap = 1 << 16, len = 0;
  char *text = malloc(cap);
  for (int i = 0; i < 300; i++)
    len += (size_t)snprintf(text + len, cap - len, "block b%d(x) { return b%d(x) }\n", i, i + 1);
  len += (size_t)snprintf(text + len, cap - len, "block b300(x) { return x }\n");
  snprintf(text + len, cap - len, "model m(x: f32[4]) -> f32[4] { return b0(x) }\n");
  Lowered r;
  lower_text(&r, text);
  ck_assert_ptr_null(r.g);
  ck_assert_msg(strstr(diags(&r), "error: block calls nested more than 100 deep") != NULL, "%s",
                diags(&r));
  done(&r);
  free(text);
}
END_TEST

START_TEST(long_loop_without_nodes_stops) {
  Lowered r;
  lower_text(&r,
             "model m(x: f32[4]) -> f32[4] {\n  n = 0\n  for i in 0..1000000000000 { n = n + 1 }\n "
             " return x\n}\n");
  ck_assert_ptr_null(r.g);
  ck_assert_msg(
      strstr(diags(&r),
             "t.dl:3:3: error: model too large: compile-time evaluation takes more than") != NULL,
      "%s", diags(&r));
  done(&r);
}
END_TEST

START_TEST(repeated_error_reported_once) {
  Lowered r;
  lower_text(&r,
             "model m(x: f32[4]) -> f32[4] {\n  for i in 0..1000 { x = relu(y) }\n  return x\n}\n");
  ck_assert_ptr_null(r.g);
  ck_assert_int_eq(r.c.diag.errors, 1);
  done(&r);
}
END_TEST

static Suite *lower_suite(void) {
  Suite *s = suite_create("lower");
  TCase *ex = tcase_create("examples");
  tcase_set_timeout(ex, 60);
  tcase_add_test(ex, example_mlp);
  tcase_add_test(ex, example_lenet);
  tcase_add_test(ex, example_resnet18);
  tcase_add_test(ex, example_resnet50);
  tcase_add_test(ex, example_mobilenetv2);
  tcase_add_test(ex, example_lstm);
  tcase_add_test(ex, example_transformer);
  suite_add_tcase(s, ex);
  TCase *err = tcase_create("errors");
  tcase_set_timeout(err, 60);
  tcase_add_loop_test(err, error_file, 0, (int)(sizeof error_cases / sizeof error_cases[0]));
  tcase_add_test(err, errors_in_snippets);
  tcase_add_test(err, call_depth_limit);
  tcase_add_test(err, long_loop_without_nodes_stops);
  tcase_add_test(err, repeated_error_reported_once);
  suite_add_tcase(s, err);
  TCase *sem = tcase_create("semantics");
  tcase_add_test(sem, scalar_arithmetic);
  tcase_add_test(sem, conditions_and_loops);
  tcase_add_test(sem, auto_names);
  tcase_add_test(sem, nested_scopes_and_interpolation);
  tcase_add_test(sem, glued_scope_parts);
  tcase_add_test(sem, indexing);
  tcase_add_test(sem, defines);
  tcase_add_test(sem, model_selection);
  tcase_add_test(sem, outputs_and_tuples);
  tcase_add_test(sem, block_defaults_and_keywords);
  tcase_add_test(sem, scalars_meet_tensors);
  tcase_add_test(sem, data_movement);
  tcase_add_test(sem, python_slicing);
  tcase_add_test(sem, conv_padding_and_groups);
  tcase_add_test(sem, attention_with_separate_inputs);
  tcase_add_test(sem, conv_transpose_and_upsample);
  tcase_add_test(sem, tensor_comparisons);
  tcase_add_test(sem, param_statement);
  suite_add_tcase(s, sem);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(lower_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

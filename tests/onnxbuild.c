/* ONNX models built in C with protobuf-c (tests/onnxbuild.h). */
#include "onnxbuild.h"

#include "ir/eval.h"

#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *pool[4096];
static int n_pool;

void *mem(size_t n) {
  void *p = calloc(1, n);
  ck_assert_ptr_nonnull(p);
  ck_assert_int_lt(n_pool, (int)(sizeof pool / sizeof *pool));
  pool[n_pool++] = p;
  return p;
}

char *str(const char *s) {
  char *p = mem(strlen(s) + 1);
  strcpy(p, s);
  return p;
}

void pool_free(void) {
  while (n_pool) free(pool[--n_pool]);
}

Model *model_new(int opset) {
  Model *b = mem(sizeof *b);
  onnx__model_proto__init(&b->m);
  onnx__graph_proto__init(&b->g);
  onnx__operator_set_id_proto__init(&b->opset);
  b->m.has_ir_version = 1;
  b->m.ir_version = 8;
  b->opset.domain = str("");
  b->opset.has_version = 1;
  b->opset.version = opset;
  b->opsets[0] = &b->opset;
  b->m.n_opset_import = 1;
  b->m.opset_import = b->opsets;
  b->g.name = str("test");
  b->g.node = b->nodes;
  b->g.initializer = b->inits;
  b->g.input = b->ins;
  b->g.output = b->outs;
  b->m.graph = &b->g;
  return b;
}

Onnx__ValueInfoProto *value_info(const char *name, int32_t elem, int rank, const int64_t *dims,
                                 const char *const *sym) {
  Onnx__ValueInfoProto *vi = mem(sizeof *vi);
  onnx__value_info_proto__init(vi);
  vi->name = str(name);
  Onnx__TypeProto *tp = mem(sizeof *tp);
  onnx__type_proto__init(tp);
  Onnx__TypeProto__Tensor *tt = mem(sizeof *tt);
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = 1;
  tt->elem_type = elem;
  Onnx__TensorShapeProto *sh = mem(sizeof *sh);
  onnx__tensor_shape_proto__init(sh);
  sh->n_dim = (size_t)rank;
  sh->dim = mem(sizeof *sh->dim * (size_t)(rank + 1));
  for (int i = 0; i < rank; i++) {
    Onnx__TensorShapeProto__Dimension *d = mem(sizeof *d);
    onnx__tensor_shape_proto__dimension__init(d);
    if (sym && sym[i]) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = str(sym[i]);
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = dims[i];
    }
    sh->dim[i] = d;
  }
  tt->shape = sh;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  vi->type = tp;
  return vi;
}

void add_input_typed(Model *b, const char *name, int32_t elem, int rank, const int64_t *dims) {
  ck_assert_uint_lt(b->g.n_input, sizeof b->ins / sizeof *b->ins);
  b->ins[b->g.n_input++] = value_info(name, elem, rank, dims, NULL);
}

void add_input(Model *b, const char *name, int rank, const int64_t *dims) {
  add_input_typed(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, rank, dims);
}

void add_output(Model *b, const char *name) {
  Onnx__ValueInfoProto *vi = mem(sizeof *vi);
  onnx__value_info_proto__init(vi);
  vi->name = str(name);
  ck_assert_uint_lt(b->g.n_output, sizeof b->outs / sizeof *b->outs);
  b->outs[b->g.n_output++] = vi;
}

Onnx__TensorProto *tensor(const char *name, int32_t dtype, int rank, const int64_t *dims) {
  Onnx__TensorProto *t = mem(sizeof *t);
  onnx__tensor_proto__init(t);
  t->name = str(name);
  t->has_data_type = 1;
  t->data_type = dtype;
  t->n_dims = (size_t)rank;
  t->dims = mem(sizeof(int64_t) * (size_t)(rank + 1));
  if (rank > 0) memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
  return t;
}

Onnx__TensorProto *add_init_f32(Model *b, const char *name, int rank, const int64_t *dims, int n,
                                const float *data) {
  Onnx__TensorProto *t = tensor(name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, rank, dims);
  t->n_float_data = (size_t)n;
  t->float_data = mem(sizeof(float) * (size_t)(n + 1));
  if (n > 0) memcpy(t->float_data, data, sizeof(float) * (size_t)n); /* an empty one may pass NULL */
  ck_assert_uint_lt(b->g.n_initializer, sizeof b->inits / sizeof *b->inits);
  b->inits[b->g.n_initializer++] = t;
  return t;
}

void add_init_i64(Model *b, const char *name, int n, const int64_t *data) {
  int64_t dim = n;
  Onnx__TensorProto *t = tensor(name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, &dim);
  t->has_raw_data = 1;
  t->raw_data.len = sizeof(int64_t) * (size_t)n;
  t->raw_data.data = mem(t->raw_data.len);
  if (n > 0) memcpy(t->raw_data.data, data, t->raw_data.len);
  ck_assert_uint_lt(b->g.n_initializer, sizeof b->inits / sizeof *b->inits);
  b->inits[b->g.n_initializer++] = t;
}

char **names(const char *list, size_t *n) {
  *n = 0;
  if (!*list) return NULL;
  size_t count = 1;
  for (const char *p = list; *p; p++) count += *p == ',';
  char **v = mem(sizeof(char *) * count);
  for (const char *p = list;; p++) {
    size_t k = strcspn(p, ",");
    char *s = mem(k + 1);
    memcpy(s, p, k);
    v[(*n)++] = s;
    p += k;
    if (!*p) break;
  }
  return v;
}

Onnx__NodeProto *add_node(Model *b, const char *op, const char *ins, const char *outs) {
  Onnx__NodeProto *n = mem(sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = str(op);
  char nm[32];
  snprintf(nm, sizeof nm, "n%zu", b->g.n_node);
  n->name = str(nm);
  n->input = names(ins, &n->n_input);
  n->output = names(outs, &n->n_output);
  n->attribute = mem(sizeof *n->attribute * 16);
  ck_assert_uint_lt(b->g.n_node, sizeof b->nodes / sizeof *b->nodes);
  b->nodes[b->g.n_node++] = n;
  return n;
}

Onnx__AttributeProto *attr(Onnx__NodeProto *n, const char *name, Onnx__AttributeProto__AttributeType type) {
  Onnx__AttributeProto *a = mem(sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = str(name);
  a->has_type = 1;
  a->type = type;
  n->attribute[n->n_attribute++] = a;
  return a;
}

void attr_i(Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1;
  a->i = v;
}

void attr_f(Onnx__NodeProto *n, const char *name, float v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  a->has_f = 1;
  a->f = v;
}

void attr_s(Onnx__NodeProto *n, const char *name, const char *v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  a->has_s = 1;
  a->s.data = (uint8_t *)str(v);
  a->s.len = strlen(v);
}

void attr_is(Onnx__NodeProto *n, const char *name, int k, const int64_t *v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  a->n_ints = (size_t)k;
  a->ints = mem(sizeof(int64_t) * (size_t)(k + 1));
  if (k > 0) memcpy(a->ints, v, sizeof(int64_t) * (size_t)k);
}

void attr_fs(Onnx__NodeProto *n, const char *name, int k, const float *v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
  a->n_floats = (size_t)k;
  a->floats = mem(sizeof(float) * (size_t)(k + 1));
  if (k > 0) memcpy(a->floats, v, sizeof(float) * (size_t)k);
}

uint8_t *pack_model(Model *b, size_t *len) {
  *len = onnx__model_proto__get_packed_size(&b->m);
  uint8_t *buf = mem(*len + 1);
  onnx__model_proto__pack(&b->m, buf);
  return buf;
}


Onnx__TensorProto *add_init_raw(Model *b, const char *name, int32_t dtype, int rank, const int64_t *dims,
                                const void *data, size_t nbytes) {
  Onnx__TensorProto *t = tensor(name, dtype, rank, dims);
  t->has_raw_data = 1;
  t->raw_data.len = nbytes;
  t->raw_data.data = mem(nbytes + 1);
  if (nbytes > 0) memcpy(t->raw_data.data, data, nbytes);
  ck_assert_uint_lt(b->g.n_initializer, sizeof b->inits / sizeof *b->inits);
  b->inits[b->g.n_initializer++] = t;
  return t;
}

Ctx onnxb_ctx;
TensorMap onnxb_params;

void onnxb_setup(void) {
  ctx_init(&onnxb_ctx);
  onnxb_params = (TensorMap){0};
}

void onnxb_teardown(void) {
  ir_tensor_map_free(&onnxb_params);
  ctx_free(&onnxb_ctx);
  pool_free();
}

/* A test may import several models: the last one's params are kept. */
Graph *onnxb_import(Model *b, const OnnxOptions *o) {
  size_t len;
  uint8_t *buf = pack_model(b, &len);
  ir_tensor_map_free(&onnxb_params);
  return fe_onnx_import_bytes(&onnxb_ctx, "/tmp/model.onnx", buf, len, o, &onnxb_params);
}

void onnxb_expect_error(Graph *g, const char *want) {
  ck_assert_msg(g == NULL, "imported, expected an error with '%s'", want);
  ck_assert_int_gt(onnxb_ctx.diag.errors, 0);
  ck_assert_msg(strstr(diag_text(&onnxb_ctx), want), "messages lack '%s':\n%s", want, diag_text(&onnxb_ctx));
}

Graph *onnxb_must_import(Model *b) {
  Graph *g = onnxb_import(b, NULL);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&onnxb_ctx));
  return g;
}

int onnxb_count_op(Graph *g, OpKind op) {
  int k = 0;
  for (Node *n = g->first; n; n = n->next) k += n->op == op;
  return k;
}

bool onnxb_same_dims(const TensorType *t, int rank, const int64_t *dims) {
  if (t->rank != rank) return false;
  for (int i = 0; i < rank; i++)
    if (t->dims[i] != dims[i]) return false;
  return true;
}

Tensor onnxb_run1(Graph *g, const char *name, int rank, const int64_t *dims, const float *x) {
  Tensor in = {ir_type_make(TY_F32, rank, dims), (void *)x};
  const char *nm[1] = {name};
  TensorMap inputs = {1, nm, &in};
  Tensor out[4];
  char err[512];
  ck_assert_msg(ir_eval(g, &inputs, &onnxb_params, out, err, sizeof err), "eval: %s", err);
  for (int i = 1; i < g->n_outputs; i++) ir_tensor_free(&out[i]);
  return out[0];
}

void onnxb_expect_values(Tensor *t, int n, const double *want, const char *what) {
  ck_assert_int_eq(ir_type_numel(&t->type), n);
  for (int i = 0; i < n; i++)
    ck_assert_msg(fabs(ir_tensor_get(t, i) - want[i]) < 1e-6, "%s[%d] is %g, want %g", what, i, ir_tensor_get(t, i),
                  want[i]);
  ir_tensor_free(t);
}

float *onnxb_pattern(int n, int a, int b) {
  float *v = mem(sizeof(float) * (size_t)n);
  for (int i = 0; i < n; i++) v[i] = (float)(((i * a + b) % 17) - 8) / 8;
  return v;
}

int onnxb_run_suite(const char *name, int n, const TTest *const *tests) {
  Suite *s = suite_create(name);
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, onnxb_setup, onnxb_teardown);
  for (int i = 0; i < n; i++) tcase_add_test(tc, tests[i]);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}

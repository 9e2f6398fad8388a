/* ONNX models built in C with protobuf-c, for the importer's suites
 * (tests/test_onnx.c, tests/test_qdq.c): no Python needed.  Memory comes
 * from a pool that onnxb_pool_free() empties after each test; a failed
 * allocation fails the calling Check test. */
#ifndef DLCC_TESTS_ONNXBUILD_H
#define DLCC_TESTS_ONNXBUILD_H

#include <stddef.h>
#include <stdint.h>

#include "check_quiet.h"

#include "frontend/onnx.h"
#include "frontend/onnx.pb-c.h"

typedef struct Model {
  Onnx__ModelProto m;
  Onnx__GraphProto g;
  Onnx__OperatorSetIdProto opset;
  Onnx__OperatorSetIdProto *opsets[1];
  Onnx__NodeProto *nodes[64];
  Onnx__TensorProto *inits[32];
  Onnx__ValueInfoProto *ins[16], *outs[16];
} Model;

void *mem(size_t n); /* zeroed, from the pool */
char *str(const char *s);
void pool_free(void);

Model *model_new(int opset);
/* dims: > 0 a value; 0 with sym[i] a dim_param. */
Onnx__ValueInfoProto *value_info(const char *name, int32_t elem, int rank, const int64_t *dims,
                                 const char *const *sym);
void add_input(Model *b, const char *name, int rank, const int64_t *dims); /* FLOAT */
void add_input_typed(Model *b, const char *name, int32_t elem, int rank, const int64_t *dims);
void add_output(Model *b, const char *name);
Onnx__TensorProto *tensor(const char *name, int32_t dtype, int rank, const int64_t *dims);
Onnx__TensorProto *add_init_f32(Model *b, const char *name, int rank, const int64_t *dims, int n,
                                const float *data);
void add_init_i64(Model *b, const char *name, int n, const int64_t *data);
/* An initializer of any dtype from its little-endian bytes (raw_data). */
Onnx__TensorProto *add_init_raw(Model *b, const char *name, int32_t dtype, int rank, const int64_t *dims,
                                const void *data, size_t nbytes);
/* A list of names separated by commas ("" entries allowed). */
char **names(const char *list, size_t *n);
/* ins and outs: such lists. */
Onnx__NodeProto *add_node(Model *b, const char *op, const char *ins, const char *outs);
Onnx__AttributeProto *attr(Onnx__NodeProto *n, const char *name, Onnx__AttributeProto__AttributeType type);
void attr_i(Onnx__NodeProto *n, const char *name, int64_t v);
void attr_f(Onnx__NodeProto *n, const char *name, float v);
void attr_s(Onnx__NodeProto *n, const char *name, const char *v);
void attr_is(Onnx__NodeProto *n, const char *name, int k, const int64_t *v);
void attr_fs(Onnx__NodeProto *n, const char *name, int k, const float *v);
uint8_t *pack_model(Model *b, size_t *len);

/* A Check fixture for a suite that imports models: its context and the
 * last import's params, and the import (as "/tmp/model.onnx"). */
extern Ctx onnxb_ctx;
extern TensorMap onnxb_params;
void onnxb_setup(void);
void onnxb_teardown(void);
Graph *onnxb_import(Model *b, const OnnxOptions *o);
/* The import failed (g NULL) with a message containing want. */
void onnxb_expect_error(Graph *g, const char *want);
/* The import of b, which must succeed. */
Graph *onnxb_must_import(Model *b);
int onnxb_count_op(Graph *g, OpKind op);
bool onnxb_same_dims(const TensorType *t, int rank, const int64_t *dims);
/* Runs g on the reference interpreter with one f32 input: its first output. */
Tensor onnxb_run1(Graph *g, const char *name, int rank, const int64_t *dims, const float *x);
/* Runs the tests (a suite of one case with the import fixture): 0 when
 * all pass, else 1, for main to return. */
int onnxb_run_suite(const char *name, int n, const TTest *const *tests);
/* n values ((i a + b) mod 17 - 8) / 8, exact in f32 (and in the
 * numpy that computes a test's expected values), from the pool. */
float *onnxb_pattern(int n, int a, int b);
/* t holds n values, each within 1e-6 of want's; frees t. */
void onnxb_expect_values(Tensor *t, int n, const double *want, const char *what);

#endif

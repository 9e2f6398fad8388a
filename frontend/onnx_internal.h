/* Shared by the ONNX importer's files (frontend/onnx*.c; nothing else
 * includes it): the importer's state, the values it tracks, and the
 * builders every op's import uses.  onnx.c walks the graph and holds the
 * op table; onnx_tensor.c reads TensorProtos and files; onnx_build.c
 * makes values and nodes (folded when their operands are known);
 * onnx_ops.c, onnx_shape.c, onnx_resize.c, onnx_rnn.c and onnx_quant.c
 * import the ops. */
#ifndef DLCC_FRONTEND_ONNX_INTERNAL_H
#define DLCC_FRONTEND_ONNX_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/onnx.h"
#include "frontend/onnx.pb-c.h"

/* What the importer knows about one ONNX value. */
typedef struct Val {
  const char *name; /* ONNX name; NULL for temporaries */
  TensorType type;
  Value *v;           /* in the graph; NULL until a runtime op needs it */
  Tensor *k;          /* contents known at import, or NULL */
  const Tensor *hint; /* OnnxOptions.known's value for a graph input */
  /* DequantizeLinear's codes and scales when it made this value, or the
   * accumulator of an int8 product this value dequantizes (QDQ). */
  const struct Quant *dq;
  /* An empty tensor (a dim of 0): ONNX's way, besides an empty name, to
   * leave out an optional operand (Resize's roi and scales).  dlcc has no
   * empty tensors; only the ops that read one as not given take it. */
  bool empty;
} Val;

typedef struct Entry {
  const char *name;
  Val *val;
  int producer; /* node index; -1 for graph inputs and initializers */
  struct Entry *next;
} Entry;

enum { N_BUCKETS = 4096 };

typedef struct Imp {
  Ctx *c;
  Graph *g;
  const char *file; /* for messages */
  const char *dir;  /* external data */
  const SrcFile *src;
  const OnnxOptions *opt;
  bool *define_used;
  int64_t opset;
  Entry **buckets;
  /* Every known tensor (malloc'd), freed at the end unless a param took it. */
  Tensor **owned;
  int n_owned, cap_owned;
  /* Params in graph order; each is a Val whose k is its data. */
  Val **params;
  int n_params, cap_params;
  int n_temps;
  /* The node being imported. */
  const Onnx__NodeProto *np;
  int node_index;
  bool *attr_used;
  SrcLoc loc;
  int64_t fold_max;
} Imp;

typedef struct Emit {
  Node *n;
  Graph *fold; /* non-NULL: evaluated at once */
  int n_in;
  Val **in;
} Emit;

typedef struct ONode {
  int n_in;
  Val **in; /* NULL where the name is empty */
  int n_out;
  Val **out;
  const bool *want; /* output named (used) */
} ONode;

typedef struct Window {
  int spatial;                      /* 1, 2 or 3: the ONNX node's */
  int nsp;                          /* 2 or 3: the IR op's (1-d is 2-d of height 1) */
  int64_t kernel[3], stride[3], dil[3];
  int64_t pad[6];                   /* the nsp starts, then the ends: 2-d [top, left, bottom, right] */
} Window;
/* Imports one ONNX node into n->out; false after reporting. */
typedef bool OpFn(Imp *im, ONode *n);

/* onnx_tensor.c: dtypes and files. */
extern const char dtypes_we_have[];
const char *onnx_type_name(int32_t t);
bool dtype_from_onnx(int32_t t, DType *out);
void *read_whole(const char *path, size_t *len, char *err, size_t errlen);
char *dir_of(Arena *a, const char *path);
bool tensor_from_proto(const Onnx__TensorProto *t, const char *dir, Tensor *out, char *err, size_t errlen);

/* onnx_build.c: names, values, nodes, attributes and operands. */
Entry *find_entry(Imp *im, const char *name);
Entry *add_entry(Imp *im, const char *name, int producer);
bool bad(Imp *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
Val *known(Imp *im, Tensor t);
Val *known_new(Imp *im, const TensorType *t);
bool proto_is_empty(const Onnx__TensorProto *t);
Val *empty_val(Imp *im);
Val *scalar(Imp *im, double x, DType dt);
Val *ints_val(Imp *im, int n, const int64_t *x);
Value *use(Imp *im, Val *v);
Val *val_of(Imp *im, Value *x);
Node *begin(Imp *im, Emit *e, OpKind op, int n_in, Val *const *in);
bool finish(Imp *im, Emit *e, Val **out);
Val *emit1(Imp *im, Emit *e);
Val *op1(Imp *im, OpKind op, Val *x);
Val *op2(Imp *im, OpKind op, Val *a, Val *b);
Val *op2s(Imp *im, OpKind op, Val *a, double s);
Val *op1f(Imp *im, OpKind op, Val *x, const char *attr, double v);
bool same_dims(const TensorType *t, int rank, const int64_t *dims);
Val *reshape(Imp *im, Val *x, int rank, const int64_t *dims);
Val *transpose(Imp *im, Val *x, const int64_t *perm);
Val *cast(Imp *im, Val *x, DType dt);
Val *slice_axis(Imp *im, Val *x, int axis, int64_t start, int64_t end, int64_t step);
Val *concat(Imp *im, int n_in, Val **in, int axis);
Val *reduce(Imp *im, OpKind op, Val *x, int n_axes, const int64_t *axes, bool keep);
Val *gather(Imp *im, Val *data, Val *idx, int axis);
Val *reverse_axis(Imp *im, Val *x, int axis);
Val *iota_along(Imp *im, int r, int axis, int64_t len);
const Onnx__AttributeProto *find_attr(Imp *im, const char *name);
bool attr_int(Imp *im, const char *name, int64_t def, int64_t *out);
bool attr_float(Imp *im, const char *name, double def, double *out);
bool attr_str(Imp *im, const char *name, const char *def, const char **out);
bool attr_ints(Imp *im, const char *name, int *n, const int64_t **v);
bool attr_only(Imp *im, const char *name, int64_t def, int64_t allowed);
Val *in_opt(const ONode *n, int i);
Val *in_req(Imp *im, const ONode *n, int i);
const Tensor *need_const(Imp *im, Val *v, const char *what);
bool const_ints(Imp *im, Val *v, const char *what, int *n, int64_t *out);
bool const_scalar(Imp *im, Val *v, const char *what, double *out);
bool norm_axis(Imp *im, int64_t a, int rank, int *out);
bool norm_axes(Imp *im, int n, const int64_t *in, int rank, int *n_out, int64_t *out);
bool need_float_in(Imp *im, Val *x);

/* onnx_ops.c: elementwise, products, convolution, pooling,
 * normalization, losses, reductions. */
OpFn op_unary, op_leaky_relu, op_gelu, op_elu_family, op_hardsigmoid, op_softplus, op_softsign, op_prelu,
    op_clip, op_binary, op_mod, op_variadic, op_logic, op_isinf, op_where, op_thresholded_relu, op_shrink,
    op_trilu, op_identity, op_dropout, op_cast, op_matmul, op_gemm, op_conv, op_conv_transpose, op_pool,
    op_global_pool, op_batchnorm, op_layernorm, op_lrn, op_instancenorm, op_softmax, op_nll_loss,
    op_softmax_ce_loss, op_reduce, op_argmax, op_hardmax;
Val *neg_exp_side(Imp *im, Val *x, double alpha, double scale);
Val *hardsigmoid_of(Imp *im, Val *x, double alpha, double beta);
Val *softplus_of(Imp *im, Val *x);
Val *softsign_of(Imp *im, Val *x);
Val *where(Imp *im, Val *cond, Val *a, Val *b);
bool window_attrs(Imp *im, const Val *x, const int64_t *wkernel, Window *w);
Val *to_2d(Imp *im, Val *x);
Val *from_2d(Imp *im, Val *y, int spatial);

/* onnx_shape.c: shapes, data movement, indexing, values known at import. */
OpFn op_reshape, op_flatten, op_squeeze, op_unsqueeze, op_transpose, op_concat, op_split, op_slice, op_gather,
    op_gather_elements, op_gather_nd, op_scatter_elements, op_scatter_nd, op_topk, op_one_hot, op_eye_like,
    op_expand, op_tile, op_pad, op_depth_space, op_constant, op_constant_of_shape, op_shape, op_size, op_range;

/* onnx_resize.c: Resize, Upsample and GridSample. */
OpFn op_resize, op_grid_sample;

/* onnx_rnn.c: RNN, GRU and LSTM, unrolled. */
OpFn op_rnn;

/* onnx_quant.c: QDQ and QOperator int8 models. */
OpFn op_quantize_linear, op_dequantize_linear, op_conv_integer, op_qlinear_conv, op_matmul_integer,
    op_qlinear_matmul, op_conv_qdq, op_matmul_qdq, op_gemm_qdq;

#endif

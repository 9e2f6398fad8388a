/* The reference interpreter: takes a graph and host tensors for its inputs
 * and parameters, returns host tensors for its outputs.  It defines what
 * every op means; optimized graphs and generated kernels are judged
 * against it.  Also: random parameter initialization and exact
 * conversions to and from the 16-bit float formats.
 *
 * Numerics.  Float ops compute each element in double and round once to
 * the result dtype (round to nearest even); reductions, matmul, linear,
 * conv and recurrent layers accumulate in double.  f16 and bf16 elements
 * are uint16_t bit patterns.  Integer ops are exact in int64 and wrap to
 * the result width (two's complement), as do int->int casts; integer
 * division truncates toward zero and division by zero is an error.
 * Float->int casts truncate toward zero and saturate, NaN -> 0.
 * maximum/minimum and reduce_max/min propagate NaN; argmax counts NaN as
 * the largest value (first one wins), as PyTorch does.  A bool element
 * is a byte, 0 or 1: storing a value gives 1 when it is nonzero (NaN
 * too), which is what a cast to bool does; read as a number it is 0 or
 * 1.  Comparisons follow IEEE (NaN is unequal to everything). */
#ifndef DLCC_EVAL_H
#define DLCC_EVAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir.h"

/* Host memory, C order, elements in type.dtype. */
typedef struct Tensor {
  TensorType type;
  void *data;
} Tensor;

/* names[i] names tensors[i].  Maps returned by ir_init_params and
 * api_bind_weights own their names and data: free them with
 * ir_tensor_map_free.  Maps a caller builds may point anywhere. */
typedef struct TensorMap {
  int n;
  const char **names;
  Tensor *tensors;
} TensorMap;

/* Cuts each output of run-time length (ir_output_length) to the length
 * its length output holds, in place; the lengths stay.  False, with a
 * message, when a length is outside [0, its bound]. */
bool ir_trim_outputs(const Graph *g, Tensor *outputs, char *err, size_t errlen);

/* Evaluates g.  input and param nodes are looked up by their "name"
 * attribute in inputs and params (either map may be NULL when empty); the
 * tensor's type must equal the node's exactly.  outputs has g->n_outputs
 * entries; each gets malloc'd data that the caller frees with
 * ir_tensor_free.  Each node's result types are checked against its
 * shape rule first.  Returns false with a message in err (a missing or
 * mistyped input or param, integer division by zero, an index out of
 * range, a graph out of order); outputs are then left empty.  Renumbers
 * g (ir_number) as scratch. */
bool ir_eval(Graph *g, const TensorMap *inputs, const TensorMap *params, Tensor *outputs,
             char *err, size_t errlen);

/* ir_eval that also shows every node's results, as each is computed, to
 * observe (calibration records activation ranges this way).  v is the
 * value in g, t its data: valid only during the call. */
typedef void (*IrEvalObserver)(void *ud, const Value *v, const Tensor *t);
bool ir_eval_observe(Graph *g, const TensorMap *inputs, const TensorMap *params, Tensor *outputs,
                     IrEvalObserver observe, void *ud, char *err, size_t errlen);

/* The ranks an evaluation's allreduce_mean and allreduce_sum span (a
 * data- or tensor-parallel job on the ref backend, docs/parallel.md):
 * reduce replaces count f32 values at data by their mean (sum false) or
 * sum over the ranks, in the same order on every rank (the graph's),
 * and returns when that is done; false with a message in err. */
typedef struct IrEvalComm {
  bool (*reduce)(void *ctx, float *data, int64_t count, bool sum, char *err, size_t errlen);
  void *ctx;
} IrEvalComm;
/* ir_eval with those ranks (comm NULL: one, each all-reduce a copy). */
bool ir_eval_comm(Graph *g, const TensorMap *inputs, const TensorMap *params, Tensor *outputs,
                  const IrEvalComm *comm, char *err, size_t errlen);

/* Zeroed storage for type; false when it is too large or malloc fails. */
bool ir_tensor_alloc(Tensor *t, const TensorType *type);
void ir_tensor_free(Tensor *t);
size_t ir_tensor_nbytes(const TensorType *type);
/* Element i (C order) as a double, and stored from a double with the
 * rounding rules above. */
double ir_tensor_get(const Tensor *t, int64_t i);
/* Element i as an integer: exact for every integer dtype (a u64 past
 * INT64_MAX saturates), a float truncated toward zero and saturated, NaN
 * 0: an index or a size read from data, never undefined. */
int64_t ir_tensor_get_int(const Tensor *t, int64_t i);
void ir_tensor_set(Tensor *t, int64_t i, double v);

const Tensor *ir_tensor_map_find(const TensorMap *m, const char *name);
/* A map's names in sorted order, for the callers that look up every name
 * of a graph (a param each): O(log n) a lookup instead of a scan, so that
 * a model of many params binds in n log n.  Built once over a map that
 * does not change while it is used; an equal name finds the first. */
typedef struct TensorMapIndex {
  const TensorMap *map;
  struct TensorMapEntry *sorted;
} TensorMapIndex;
/* False when out of memory.  A NULL map gives an empty index. */
bool ir_tensor_map_index(TensorMapIndex *ix, const TensorMap *m);
const Tensor *ir_tensor_map_index_find(const TensorMapIndex *ix, const char *name);
/* The position in the map of name's first entry, or -1. */
int ir_tensor_map_index_pos(const TensorMapIndex *ix, const char *name);
void ir_tensor_map_index_free(TensorMapIndex *ix);
void ir_tensor_map_free(TensorMap *m);

/* Exact conversions, round to nearest even; NaN stays NaN (quiet, sign
 * kept), overflow gives infinity, subnormals are kept. */
uint16_t ir_f16_from_double(double x);
double ir_f16_to_double(uint16_t h);
uint16_t ir_bf16_from_double(double x);
double ir_bf16_to_double(uint16_t h);

/* ONNX's narrow formats (ir/narrow.c), held in a wider dtype: float8
 * ("e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz") and float4 ("e2m1") in f16,
 * "i4", "u4", "i2", "u2" in i8/u8.  For ints emin and max are the range. */
/* IR_NARROW_E8M0: FLOAT8E8M0, a power of two 2^(code - 127) or NaN
 * (0xFF), held in f32; m is its rounding ("e8m0" up, as ONNX's Cast by
 * default, "e8m0_down" 1, "e8m0_nearest" 2, on the f32 bits as onnx's
 * numpy_helper.to_float8e8m0). */
typedef enum { IR_NARROW_FLOAT, IR_NARROW_INT, IR_NARROW_E8M0 } IrNarrowKind;
typedef struct IrNarrow {
  const char *name;
  IrNarrowKind kind;
  int bits, m, emin;
  double max, ovf;
  bool uz;
} IrNarrow;
const IrNarrow *ir_narrow_find(const char *name);
int ir_narrow_index(const IrNarrow *f);
const IrNarrow *ir_narrow_at(int i); /* NULL past the last */
/* x rounded into the format (the fp_round op) and a code's value. */
double ir_narrow_round(const IrNarrow *f, double x, bool saturate);
double ir_narrow_decode(const IrNarrow *f, unsigned code);

typedef enum {
  /* Every float param random, so that nothing is trivially the identity:
   * "ones" gives U(0.75, 1.25) and "zeros" U(-0.1, 0.1). */
  IR_INIT_RANDOM,
  /* "ones" and "zeros" exact, as a freshly built PyTorch model has them. */
  IR_INIT_EXACT,
} IrInitMode;

/* Fills every param of g (out gets one entry per distinct param name, in
 * graph order; free with ir_tensor_map_free).  Each param draws from its
 * own generator, seeded from seed and a hash of its name, so values do not
 * depend on the order or number of params.  The "init" attribute:
 *   "uniform(b)" U(-b, b); "normal(s)" N(0, s^2); "fill(v)" exactly v;
 *   "ones", "zeros" as IrInitMode says;
 *   absent: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = product of
 *   dims[1:] (1 below rank 2), PyTorch's default for linear and conv.
 * Integer params get uniform integers in [-4, 4], except fill(v) (exact,
 * saturated), "ones" and "zeros" (exact).  Params named "dlcc.*" (the
 * training state: step counters, optimizer state) are 0 whatever their
 * init but fill(v), as api/weights.c starts them when a file lacks them.  False with a message in err for
 * an unknown init text or two params of one name with different types. */
bool ir_init_params(Graph *g, uint64_t seed, IrInitMode mode, TensorMap *out, char *err,
                    size_t errlen);
/* Where a training-state param ("dlcc.*") starts when no file gives it:
 * its init fill(v) (the loss scale's 65536), else 0. */
double ir_state_start(const Node *param);

/* resize's source coordinate along an axis of in pixels for output d of
 * out (eval.c): half-pixel, clamped at 0, or with align the corners. */
double ir_resize_src(int64_t d, int64_t in, int64_t out, bool align);

/* ---- training (train_ops.c) ---- */

/* The training ops of ops.def (conv_weight_grad .. resize_grad): eval.c's
 * for them, false with a message in err. */
bool ir_eval_train_op(const Node *n, Tensor *const *in, Tensor *out, char *err, size_t errlen);
/* optim_update's states (ops.def) for kind with its options: their
 * keys, PyTorch's names in its optimizer's state ("exp_avg", ...), in
 * operand order into keys, their count returned; -1 for a kind that is
 * not "sgd", "adam", "adamw", "rmsprop", "adagrad", "adamax",
 * "adadelta", "radam" or "nadam". */
enum { IR_OPTIM_MAX_STATES = 3 };
int ir_optim_states(const char *kind, double momentum, bool amsgrad, bool centered,
                    const char *keys[IR_OPTIM_MAX_STATES]);
/* The same for optim_update n, from its attributes. */
int ir_optim_node_states(const Node *n, const char *keys[IR_OPTIM_MAX_STATES]);
/* The operand index of optim_update n's first state: 5, and one more
 * after a momentum operand (momentum_input) and after NAdam's
 * mu_product (in that order). */
int ir_optim_first_state(const Node *n);
/* The operand index of NAdam's mu_product (after the momentum operand
 * when there is one), or -1 for the other kinds. */
int ir_optim_mu_product_operand(const Node *n);
/* The per-step scalars of optim_update n at rate lr and step t that
 * PyTorch computes as Python floats (double), each rounded to f32 as a
 * tensor op rounds its scalar: 1 - beta^t for beta1 and beta2 and the
 * root of the second; Adamax's -lr / (1 - beta1^t) (c1); RAdam's
 * rectification (rect, when rectify: rho_t > 5); NAdam's coefficients
 * of the gradient and of exp_avg (c1, c2) from its momentum schedule
 * and mu_product (the product through this step).  beta1 is the step's
 * (the attribute's, or the momentum operand's). */
typedef struct IrOptimScalars {
  float bc1, bc2, sqrt_bc2, rect, c1, c2;
  bool rectify;
} IrOptimScalars;
void ir_optim_scalars(const Node *n, float lr, float t, double beta1, float mu_product, IrOptimScalars *s);
/* Adam's bias correction 1 - beta^t in f32, as exact as PyTorch's,
 * which computes it in double: 1 - powf((float)beta, t) would carry
 * beta's rounding to f32 (0.999 is off by 1.3e-8, which is 1.3e-5 of
 * 1 - 0.999), so it is -expm1(t log beta) instead, expm1(y) by Kahan's
 * (e^y - 1) y / log(e^y), whose errors cancel; codegen/lower_train.c
 * computes the same operations. */
float ir_bias_correction(double beta, float t);
/* The same for a beta known only at run time (an f32): t logf(beta). */
float ir_bias_correction_f(float beta, float t);
/* The end of a training step on the interpreter: each output of g that
 * updates a param (ir_output_update) is copied into that param's tensor
 * in params (outputs as ir_eval returned them).  False with a message
 * when params lacks one or has it with another type. */
bool ir_apply_updates(const Graph *g, const Tensor *outputs, TensorMap *params, char *err,
                      size_t errlen);
/* Philox4x32-10: the four words at counter ctr under key. */
void ir_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* dropout's draw for element i (ops.def): 24 random bits; the element is
 * kept when they are at least ir_dropout_threshold(p), and then scaled
 * by ir_dropout_scale(p, its dtype). */
uint32_t ir_dropout_bits(uint64_t seed, uint64_t offset, uint64_t i, uint32_t stream);
uint32_t ir_dropout_threshold(double p);
double ir_dropout_scale(double p, DType dt);
/* The element index where a dropout of x, from a batch of `batch`
 * samples (0: x's axis 0) that starts at sample `first` of the global
 * batch, begins drawing (ops.def). */
int64_t ir_dropout_base(const TensorType *x, int64_t batch, int64_t first);
/* Where a draw's elements lie in the tensor it draws for: element i of
 * the draw is element i + (i / block) * skip + at of `whole` (dropout's
 * part attribute, ops.def; without it the identity and whole = x). */
typedef struct DrawPart {
  int64_t block, skip, at;
  TensorType whole;
} DrawPart;
DrawPart ir_draw_part(const Node *n, const TensorType *x);
/* The `batch` attribute of a draw of type x in g (dropout, random_uniform):
 * the samples of g's first input (its axis 0) when x's elements divide
 * among them, else 0.  What both frontends give, so that a split batch
 * draws per sample as the whole batch does. */
int64_t ir_draw_batch(const Graph *g, const TensorType *x);

#endif

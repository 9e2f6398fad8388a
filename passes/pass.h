/* The pass manager's contract.  A pass takes a verified graph and rewrites
 * it in place; it returns whether it changed anything.  Passes are listed
 * once in passes.def; pipelines (-O0/-O1/-O2, --passes=a,b,c) are lists of
 * their names.  The verifier runs after every pass under --verify-each
 * and in every test. */
#ifndef DLCC_PASS_H
#define DLCC_PASS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"

/* Counters a pass may bump for --stats ("fused ops", "folded", ...). */
typedef struct PassStat {
  const char *name;
  int64_t value;
} PassStat;

typedef struct PassCtx {
  Ctx *ctx;
  /* Options that passes read; 0 means the default. */
  int unroll;      /* --unroll=N: largest trip count to unroll */
  bool no_unroll;  /* --no-unroll */
  /* The options the pipeline runs under (NULL when a pass runs alone). */
  const struct PassOptions *options;
  /* Statistics, appended through pass_stat. */
  int n_stats, cap_stats;
  PassStat *stats;
} PassCtx;

typedef struct Pass {
  const char *name;
  const char *summary; /* one line for --help and docs/passes.md */
  bool (*run)(Graph *g, PassCtx *pc);
} Pass;

/* Declarations of every pass function, from the table. */
#define PASS(name, summary, fn) bool fn(Graph *g, PassCtx *pc);
#include "passes.def"
#undef PASS

/* Adds delta to the named counter (created at 0). */
void pass_stat(PassCtx *pc, const char *name, int64_t delta);

/* ---- the pass manager (pipeline.c) ---- */

/* ---- int8 quantization (quantize.c) ----
 * The quantize pass asks a calibrator for the range of every activation
 * it quantizes.  g is the graph as the pass received it (f32, verified,
 * numbered with ir_number); the calibrator may evaluate it (ir/eval.h's
 * ir_eval_observe) but must not change it.  It writes amax[i] >= 0, the
 * absolute range chosen for values[i] (by min/max, a percentile or
 * entropy: the calibrator's business), and returns true; or it reports
 * why it cannot (an empty folder, a shape mismatch, NaN in an input) to
 * g->ctx's diagnostics and returns false, which fails the pipeline. */
typedef bool (*PassCalibrateFn)(void *ud, Graph *g, int n, const Value *const *values,
                                double *amax);

/* One quantized product, for reports (dlcc quant-report). */
typedef struct QuantLayer {
  const char *label;  /* "conv2d %12 layer1.0.conv1.weight" */
  SrcLoc loc;         /* the product's source position */
  int orig_value_id;  /* its f32 result's Value.id in the graph the pass received */
  Value *result;      /* the f32 value (after dequantize and bias) standing in for it now */
  double amax;        /* the calibrated range of its activation operand */
  double scale;       /* that operand's scale: amax / 127, or (amax - lo) / 255 with a zero point */
  int zero_point;     /* 0 (symmetric), or where a real 0 lands when the graph bounds the
                       * activation below by lo > -amax (-128 for a relu's) */
  bool channels_last; /* result is [N, H, W, C] now: the nhwc pass put it in a region */
} QuantLayer;

typedef struct QuantSummary {
  int n_layers;
  QuantLayer *layers; /* in graph order, in the graph's arena */
  int n_kept_f32;     /* products left in f32 (#f32, no weight operand, ...) */
} QuantSummary;

/* What the command line (or the API) asks of the pipeline.  A zeroed
 * struct runs -O0 quietly. */
typedef struct PassOptions {
  int opt_level;            /* 0: nothing; 1: cheap cleanups; 2: everything */
  const char *passes;       /* --passes=a,b,c: run exactly these instead; NULL: by opt_level */
  const char *stop_before;  /* by opt_level, the passes before the first run of this one (a prefix
                             * whose graph a caller finishes later); NULL: all */
  const char *print_before; /* --print-before=NAME */
  const char *print_after;  /* --print-after=NAME */
  bool print_after_all;
  const char *dump_dir;     /* --dump-dir=D: D/NNN_name.ir after each pass */
  bool time_passes;         /* a timing table to the dump stream */
  bool verify_each;         /* ir_verify after every pass */
  bool stats;               /* counters and graph facts to the dump stream */
  int unroll;               /* copied into PassCtx */
  bool no_unroll;
  bool no_vectorize;        /* --no-vectorize: codegen's float4 pass off */
  bool tf32;                /* --tf32: codegen's f32 convolutions on tensor cores */
  bool no_tensor_cores;     /* --no-tensor-cores: codegen's convolutions on FMA only */
  bool no_wgmma;            /* --no-wgmma: codegen's tensor-core GEMMs on mma.sync alone */
  bool no_nhwc;             /* --no-nhwc: the nhwc pass leaves every convolution NCHW */
  bool no_gemm_batch;       /* --no-gemm-batch: codegen's linears one GEMM each */
  bool no_split_keys;       /* --no-split-keys: attention's keys in one block a query block */
  bool no_split_k;          /* --no-split-k: every convolution's K in one block a tile */
  bool no_persistent_rnn;   /* --no-persistent-rnn: codegen's recurrent layers a kernel per step */
  bool unroll_rnn;          /* --unroll-rnn: training mode unrolls lstm over time (AutodiffOptions) */
  bool no_update_in_place;  /* --no-update-in-place: a step's updates copied over the params */
  bool no_merge_launches;   /* --no-merge-launches: no two kernels share a launch */
  bool no_chain_launches;   /* --no-chain-launches: no kernel joins the launch it depends on */
  /* --precision=f16|bf16: the precision pass runs (at -O2 after bn-fold,
   * so folded weights are computed in f32 and then cast; below -O2
   * first).  TY_F32, the zero, leaves the graph in f32. */
  DType precision;
  /* --quantize=int8: the quantize pass runs (at -O2 after the cleanups,
   * before fuse; at -O0/-O1 after everything else) and calls calibrate,
   * which must then be set.  summary, when not NULL, receives what it
   * quantized. */
  bool quantize_int8;
  PassCalibrateFn calibrate;
  void *calibrate_ud;
  QuantSummary *quant_summary;
  /* --recompute[=SCOPE,...] (passes/recompute.c, at -O2): NULL off, ""
   * the automatic segments, else the scopes to recompute. */
  const char *recompute;
} PassOptions;

/* The pass of that name, or NULL. */
const Pass *pass_find(const char *name);
/* Every pass, in passes.def order. */
int pass_count(void);
const Pass *pass_at(int i);
/* Checks the pass names the options mention (--passes, --print-before,
 * --print-after): false after reporting "unknown pass 'fsue'; did you
 * mean 'fuse'?" to c. */
bool pass_check_options(Ctx *c, const PassOptions *o);
/* Runs the pipeline on g in place.  Dumps (--print-*), the timing table
 * and statistics go to dump (stderr for the CLI; NULL: none).  False
 * after reporting errors: a bad option, a pass that broke the verifier
 * under verify_each, an unwritable --dump-dir. */
bool pass_run_pipeline(Graph *g, const PassOptions *o, FILE *dump);
/* Whether the pipeline o asks for runs the attention pass (-O2, or a
 * --passes list naming it): autodiff then runs it on the forward first
 * (AutodiffOptions.fuse_attention). */
bool pass_fuses_attention(const PassOptions *o);
/* Ops in g: nodes other than input, param and const. */
int pass_count_ops(const Graph *g);
/* Wrapping integer arithmetic of one dtype, i8, u8, i32 or i64, which
 * fuse.c puts in groups (an int8 product's zero-point corrections between
 * its accumulator and its requantize; a loss's class indices moved before
 * they are read) and codegen's fused lowering computes. */
bool pass_is_int_arith(const Node *n);
/* After fusion (precision.c): kernels that only convert (a cast, or a
 * group of casts and reshapes over a GEMM's result), split into those
 * over weights only (params and consts: work a load-time step can do
 * once), the casts a matrix product reads (of a graph input, an lstm's
 * result: nothing could convert them on the way), and the rest. */
typedef struct CastKernels {
  int standalone, for_products, over_weights;
} CastKernels;
void pass_count_cast_kernels(Graph *g, CastKernels *out);

/* ---- rewriting helpers (rewrite.c) ----
 * Passes walk the graph once in order and replace values as they go.
 * Rewriting every use at once (ir_replace_uses) is linear per call and so
 * quadratic per pass; instead a PassRewrite remembers "from -> to" and
 * each node's operands are resolved when the walk reaches it, which is
 * linear since uses follow definitions. */
typedef struct PassRewrite PassRewrite;
PassRewrite *pass_rewrite_new(Graph *g);
/* Records that every later use of from reads to instead. */
void pass_rewrite_replace(PassRewrite *rw, const Value *from, Value *to);
/* Where v now reads from (v itself when it was not replaced). */
Value *pass_rewrite_resolve(PassRewrite *rw, Value *v);
/* Resolves n's operands; call on each node before looking at it. */
void pass_rewrite_operands(PassRewrite *rw, Node *n);
/* Resolves the graph outputs; call once after the walk. */
void pass_rewrite_finish(PassRewrite *rw);

/* Which nodes compute functions of the weights alone: by Node.id after
 * the ir_number this calls, true for params, consts and every node whose
 * operands all are (never an input, nor a param an output updates: a
 * training step changes it every run).  In g's arena. */
bool *pass_weight_only(Graph *g);

/* Removes every node none of whose results is used (dce.c): inputs
 * stay, and params too with keep_params (a model's names, when a pass
 * other than dce drops what it replaced); the count removed, the
 * params among them in *params (may be NULL). */
int pass_remove_dead(Graph *g, bool keep_params, int *params);

/* Use counts (operands plus graph outputs) of every value, computed once;
 * values made later count 0 unless bumped. */
typedef struct PassUses PassUses;
PassUses *pass_uses_new(Graph *g);
int pass_uses(const PassUses *u, const Value *v);
void pass_uses_add(PassUses *u, const Value *v, int delta);

/* A new node of op over in (n_in operands) with attrs copied from like (or
 * none when like is NULL), inserted before `before`, types inferred; an
 * internal error when inference fails (the caller built a bad node). */
Node *pass_new_node(Graph *g, Node *before, OpKind op, int n_in, Value *const *in,
                    const Node *like, SrcLoc loc);
/* The first param of g called name, or NULL. */
Node *pass_find_param(Graph *g, const char *name);
/* The comma-separated items of list (names or shell patterns of params:
 * --freeze, --no-decay; one between two commas or before the first is
 * empty, none follows a last comma; "\," is a comma of an item, which
 * fnmatch then reads as one), in a's memory: their count, the items in
 * *items. */
int pass_split_names(Arena *a, const char *list, const char ***items);
/* The item of such a list that matches exactly name (a model's, so any
 * character): \ before each of \ * ? [ and ,. */
const char *pass_name_pattern(Arena *a, const char *name);
/* Whether one of patterns[0..n) (fnmatch's shell patterns) matches name. */
bool pass_name_matches(const char *const *patterns, int n, const char *name);
/* A const splat of value with type t, inserted before `before`. */
Value *pass_new_const(Graph *g, Node *before, double value, const TensorType *t, SrcLoc loc);
/* True when v is a const splat; its value (rounded to v's dtype) in *value. */
bool pass_is_const(const Value *v, double *value);
/* v's elements when it is computed from consts and iotas alone, by
 * elementwise and data-movement ops (a mask built from iota and
 * comparisons, triu of ones): evaluated by the reference interpreter into
 * *out (the caller frees it with ir_tensor_free).  False, with nothing to
 * free, when v reads an input or a param, when its subgraph has more than
 * 64 nodes or a value of more than max_elems elements. */
struct Tensor;
bool pass_eval_const(Graph *g, const Value *v, int64_t max_elems, struct Tensor *out);

#endif

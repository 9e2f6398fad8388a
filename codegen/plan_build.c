/* The plan builder: takes a verified graph, returns an RtPlan and the CUDA
 * source it launches.  It decides where every value lives (weights in
 * graph order, inputs and outputs in their own spaces, everything else in
 * the arena, derived weights after the weights), lowers the init graph
 * (initgraph.c) into the init steps and then the rest node after node
 * through lower_kernels.c, each inside branch steps that skip it when
 * its If's branch is not taken (Node.guard), and keeps one kernel per
 * distinct text and one contract (plan.h) per distinct way a launch
 * uses it. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "kernel.h"
#include "runtime/runtime.h"
#include "passes/memplan.h"

enum { ALIGN = 256 };
/* Ifs nested deeper than this compute their inner branches both. */
enum { MAX_BRANCH_DEPTH = 16 };

/* Strings by hash (index_find, index_add): slots hold a position in an
 * array of strings, plus one; 0 is empty. */
typedef struct StrIndex {
  int *slots;
  int cap; /* a power of two, or 0 */
} StrIndex;

struct CgBuild {
  Ctx *ctx;
  Graph *g;
  bool allreduce_pending; /* an all-reduce started that no wait step has ended */
  const Node *allreduce_last; /* ... the last one started (for the closing wait's label) */
  const CgGroup *group; /* the fusion group being lowered */
  CgOptions opts;
  int n_values;
  RtRef *home;
  bool *has_home;
  /* By value id: the value, and what it is a reshape of (itself when it
   * is none), so that a chain of reshapes is not walked at every use. */
  const Value **value, **unshaped;
  uint64_t arena_top, weights_top;
  uint64_t derived_top; /* from weights_bytes: the derived region */
  CgInit init;
  CgGemmBatch **batch_of; /* by node id (gemm_batch.c); NULL: none */
  double flops_elsewhere; /* of the unit being lowered (cg_note_elsewhere) */

  /* The init steps, then a run's: one list, so that liveness and the
   * planner see init as the first steps of a run (its scratch is free
   * once a run starts). */
  RtStep *steps;
  CgStepNote *notes; /* beside steps: what each launch's kernel touches */
  const Node **step_nodes; /* beside steps: the node each was made for */
  Kernel **step_kernel;    /* beside steps: a launch's kernel (merge_launch) */
  int n_steps, cap_steps;
  /* The first step a later launch may share (merge_launch): a run's
   * first; -1 in init and where no launch is merged. */
  int merge_from;
  int unit_first; /* the first step of the unit being lowered (lower_nodes) */
  int merged_at;  /* the step the unit's last launch joined, or -1 */
  int n_init_steps;
  CgUnit *units; /* which steps each node or group became, for their cost */
  int n_units, cap_units;

  RtKernel *kernels;
  const char **keys; /* each kernel's text under a neutral name: the dedupe key */
  const char **texts;
  const char **names; /* == kernels[i].name */
  StrIndex by_key, by_name;
  int n_kernels, cap_kernels;
  bool needs_fp16, needs_bf16, needs_tc, needs_philox, needs_grid_sync, needs_arrival;
  RtContract *contracts;
  int n_contracts, cap_contracts;
  int *first_contract; /* by kernel: its latest contract, or -1 */
  int *next_contract;  /* by contract: the kernel's one before, or -1 */
  uint64_t status_top; /* STATUS: the index reports handed out */
  uint64_t sync_top;   /* SYNC: the counters handed out */

  /* Branches (RT_STEP_BRANCH) open around the steps being lowered, the
   * outermost first, each with its step's index; done: nodes lowered. */
  const Guard *open[MAX_BRANCH_DEPTH];
  int open_step[MAX_BRANCH_DEPTH];
  int n_open;
  bool *done;
  /* By node id: a loop_begin's loop_end (ir/loop.c), which a loop's
   * frame closes with. */
  const Node **loop_end_of;

  RtTensorDesc *weights, *inputs, *outputs;
  int n_weights, n_inputs;
  /* The most arena bytes live during any step chain_target has looked
   * at (live_during): what a chain may hold without raising the peak. */
  uint64_t live_peak;
  /* A second build's bound on a step's live bytes, the first build's
   * arena (cg_compile_opts), or 0; and whether the memory rule kept a
   * chain apart (else a second build would make the same plan). */
  uint64_t chain_bound;
  bool chain_held_back;

  CgBuffer *buffers;
  int n_buffers, cap_buffers;

  /* memory planning (plan_memory) */
  struct InplaceHint *hints;
  int n_hints, cap_hints;
  /* Launches that may write an update output over its param's bytes. */
  struct InplaceHint *update_hints;
  int n_update_hints, cap_update_hints;
  int n_updates_in_place;
  uint64_t naive_bytes, lower_bound;
  const char *memplan;
  int n_inplace;
};

static uint64_t align_up(uint64_t v) { return (v + ALIGN - 1) / ALIGN * ALIGN; }

static uint64_t value_bytes(const Value *v) {
  int64_t n = ir_type_numel(&v->type);
  return n < 0 ? 0 : (uint64_t)n * (uint64_t)ir_dtype_size(v->type.dtype);
}

static RtTensorDesc desc_of(const char *name, const Value *v, RtRef where) {
  RtTensorDesc d = {.name = name,
                    .dtype = v->type.dtype,
                    .rank = (uint32_t)v->type.rank,
                    .nbytes = value_bytes(v),
                    .where = where};
  for (int i = 0; i < v->type.rank; i++) d.dims[i] = v->type.dims[i];
  return d;
}

/* Until plan_memory, buffer k lives in its own slot of a virtual arena
 * at (k + 1) << SLOT_SHIFT, so every arena ref names its buffer: 1 TiB a
 * buffer (past any GPU's memory), 2^24 buffers. */
enum { SLOT_SHIFT = 40 };

static RtRef place(CgBuild *b, uint64_t nbytes, const char *what) {
  /* a model can ask for this (a big batch of a big model): the user's
   * error, reported, and the build goes on to fail at its end */
  if (nbytes >> SLOT_SHIFT) {
    diag_error(b->ctx, (SrcLoc){0}, "%s: %" PRIu64 " bytes in one buffer, more than the 1 TiB a plan's buffer may hold",
               what, nbytes);
    nbytes = 0;
  }
  if ((uint64_t)b->n_buffers + 1 >= (uint64_t)1 << (64 - SLOT_SHIFT)) {
    diag_error(b->ctx, (SrcLoc){0}, "%s: more buffers than the 2^24 a plan may hold", what);
    b->n_buffers = 0; /* the refs stay in range until the build fails at its end */
  }
  RtRef r = {.space = RT_SPACE_ARENA, .offset = (uint64_t)(b->n_buffers + 1) << SLOT_SHIFT};
  if (b->n_buffers == b->cap_buffers) {
    int old = b->cap_buffers, cap = old ? 2 * old : 64;
    b->buffers = arena_realloc(&b->ctx->arena, b->buffers, sizeof(CgBuffer) * (size_t)old,
                               sizeof(CgBuffer) * (size_t)cap);
    b->cap_buffers = cap;
  }
  b->buffers[b->n_buffers++] =
      (CgBuffer){.what = what, .ref = r, .nbytes = nbytes, .inplace_of = -1};
  return r;
}

static const char *value_name(CgBuild *b, const Value *v) {
  return arena_printf(&b->ctx->arena, "%%%d", v->id);
}

static void set_home(CgBuild *b, const Value *v, RtRef r) {
  b->home[v->id] = r;
  b->has_home[v->id] = true;
}

/* The one place that decides where values live: weights, inputs and
 * outputs in their spaces, values of the init graph that a run reads in
 * the derived region after the weights, every other value and every
 * scratch range a slot of the arena (place), laid out by plan_memory
 * once the steps are known.  Consts and reshapes get bytes while
 * lowering: a const only when something needs it in memory, a reshape
 * the bytes of its operand. */
typedef struct ParamRef {
  const char *name;
  int id; /* the node's */
} ParamRef;

static int by_name_then_id(const void *pa, const void *pb) {
  const ParamRef *a = pa, *b = pb;
  int c = strcmp(a->name, b->name);
  return c ? c : a->id - b->id;
}

/* By node id, for each param: the first param of its name, in graph
 * order (two params of one name share one weight).  Sorted, not
 * searched per param: a model has tens of thousands. */
static int *first_of_name(CgBuild *b, int n_par) {
  Arena *a = &b->ctx->arena;
  ParamRef *refs = ARENA_ARRAY(a, ParamRef, n_par + 1);
  int k = 0;
  for (Node *n = b->g->first; n; n = n->next)
    if (n->op == OP_PARAM) refs[k++] = (ParamRef){ir_attr_str(n, "name"), n->id};
  qsort(refs, (size_t)k, sizeof *refs, by_name_then_id);
  int *first = ARENA_ARRAY(a, int, b->g->n_nodes + 1);
  for (int i = 0; i < k; i++)
    first[refs[i].id] = i && strcmp(refs[i - 1].name, refs[i].name) == 0 ? first[refs[i - 1].id] : refs[i].id;
  return first;
}

/* n bytes of the derived region. */
static RtRef derive(CgBuild *b, uint64_t weights_bytes, uint64_t nbytes) {
  RtRef r = {.space = RT_SPACE_WEIGHTS, .offset = weights_bytes + align_up(b->derived_top)};
  b->derived_top = r.offset - weights_bytes + nbytes;
  return r;
}

/* A batch's weights (biases) side by side in the derived region; a
 * weight the init steps compute is computed right there, any other is
 * copied there (copy_batch_weights).  Its results in one arena slot. */
static void place_batch_operands(CgBuild *b, uint64_t weights_bytes, const CgGemmBatch *bt, int operand,
                                 int64_t stride, RtRef *at) {
  const Value *v0 = bt->lin[0]->in[operand];
  uint64_t es = (uint64_t)ir_dtype_size(v0->type.dtype);
  *at = derive(b, weights_bytes, (uint64_t)(bt->n - 1) * (uint64_t)stride * es + value_bytes(v0));
  for (int i = 0; i < bt->n; i++) {
    const Value *v = bt->lin[i]->in[operand];
    if (b->init.node[v->def->id] && v->def->op != OP_RESHAPE && !b->has_home[v->id])
      set_home(b, v, cg_ref_at(*at, (uint64_t)i * (uint64_t)stride * es));
  }
}

static void place_batches(CgBuild *b, uint64_t weights_bytes) {
  for (Node *n = b->g->first; b->batch_of && n; n = n->next) {
    CgGemmBatch *bt = b->batch_of[n->id];
    if (!bt || bt->lin[0] != n) continue;
    if (bt->stride_b) place_batch_operands(b, weights_bytes, bt, 1, bt->stride_b, &bt->w);
    if (bt->stride_bias) place_batch_operands(b, weights_bytes, bt, 2, bt->stride_bias, &bt->bias);
    const Value *c = bt->c[0];
    uint64_t es = (uint64_t)ir_dtype_size(c->type.dtype), stride = (uint64_t)bt->stride_c * es;
    RtRef slot = place(b, (uint64_t)(bt->n - 1) * stride + value_bytes(c),
                       arena_printf(&b->ctx->arena, "%s and the batch", value_name(b, c)));
    for (int i = 0; i < bt->n; i++) set_home(b, bt->c[i], cg_ref_at(slot, (uint64_t)i * stride));
  }
}

/* Init steps: the weights of each batch that are not computed in place. */
static void copy_batch_weights(CgBuild *b) {
  for (Node *n = b->g->first; b->batch_of && n; n = n->next) {
    const CgGemmBatch *bt = b->batch_of[n->id];
    if (!bt || bt->lin[0] != n) continue;
    for (int operand = 1; operand <= 2; operand++) {
      int64_t stride = operand == 1 ? bt->stride_b : bt->stride_bias;
      for (int i = 0; stride && i < bt->n; i++) {
        const Value *v = bt->lin[i]->in[operand];
        uint64_t es = (uint64_t)ir_dtype_size(v->type.dtype);
        RtRef to = cg_ref_at(operand == 1 ? bt->w : bt->bias, (uint64_t)i * (uint64_t)stride * es), from = cg_ref(b, v);
        if (from.space != to.space || from.offset != to.offset)
          cg_copy(b, bt->lin[i], operand == 1 ? "weight into its batch" : "bias into its batch", to, from,
                  value_bytes(v));
      }
    }
  }
}

CgGemmBatch *cg_gemm_batch_of(CgBuild *b, const Node *n) { return b->batch_of ? b->batch_of[n->id] : NULL; }

void cg_note_elsewhere(CgBuild *b, double flops) { b->flops_elsewhere += flops; }

/* A concat along an axis with only dims of 1 before it holds each
 * operand as one run of its bytes: the operands are computed right
 * there and the concat copies nothing (lower_concat finds them in
 * place).  For a concat no fusion group holds, whose operands are all
 * computed by steps of their own (no source, const, reshape, init
 * value or value that already has bytes: an output, a batch's), each
 * once, none inside an If's branches, each starting at a multiple of
 * 16 bytes. */
static void place_concat_operands(CgBuild *b) {
  for (Node *n = b->g->first; n; n = n->next) {
    if (n->op != OP_CONCAT || n->group >= 0 || n->guard || b->init.node[n->id]) continue;
    const TensorType *ot = &n->out[0].type;
    int axis = (int)ir_attr_int(n, "axis");
    if (axis < 0) axis += ot->rank;
    bool ok = value_bytes(&n->out[0]) > 0;
    for (int d = 0; d < axis; d++) ok &= ot->dims[d] == 1;
    uint64_t start = 0;
    for (int i = 0; ok && i < n->n_in; i++) {
      const Value *v = n->in[i];
      const Node *d = v->def;
      /* aligned as vector accesses and tiles' stores need (16 bytes) */
      ok = start % 16 == 0;
      start += value_bytes(v);
      ok = ok && !b->has_home[v->id] && ir_ops[d->op].cls != K_SOURCE && d->op != OP_RESHAPE && !d->guard &&
           !b->init.node[d->id] && (d->group < 0 || d->group != n->group) && value_bytes(v) > 0;
      for (int j = 0; ok && j < i; j++) ok = n->in[j] != v;
    }
    if (!ok) continue;
    if (!b->has_home[n->out[0].id]) set_home(b, &n->out[0], place(b, value_bytes(&n->out[0]), value_name(b, &n->out[0])));
    uint64_t at = 0;
    for (int i = 0; i < n->n_in; i++) {
      set_home(b, n->in[i], cg_ref_at(b->home[n->out[0].id], at));
      at += value_bytes(n->in[i]);
    }
  }
}

static bool plan_storage(CgBuild *b) {
  Graph *g = b->g;
  int n_in = 0, n_par = 0;
  for (Node *n = g->first; n; n = n->next) {
    n_in += n->op == OP_INPUT;
    n_par += n->op == OP_PARAM;
  }
  int *first = first_of_name(b, n_par);
  /* By node id: the weight a param's first of its name got. */
  int *weight = ARENA_ARRAY(&b->ctx->arena, int, g->n_nodes + 1);
  b->inputs = ARENA_ARRAY(&b->ctx->arena, RtTensorDesc, n_in + 1);
  b->weights = ARENA_ARRAY(&b->ctx->arena, RtTensorDesc, n_par + 1);
  b->outputs = ARENA_ARRAY(&b->ctx->arena, RtTensorDesc, g->n_outputs + 1);
  bool ok = true;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op == OP_INPUT) {
      RtRef r = {.space = RT_SPACE_INPUT, .index = (uint32_t)b->n_inputs};
      b->inputs[b->n_inputs++] = desc_of(ir_attr_str(n, "name"), &n->out[0], r);
      set_home(b, &n->out[0], r);
    } else if (n->op == OP_PARAM) {
      const char *name = ir_attr_str(n, "name");
      int w = first[n->id] == n->id ? b->n_weights : weight[first[n->id]];
      weight[n->id] = w;
      if (w == b->n_weights) {
        RtRef r = {.space = RT_SPACE_WEIGHTS, .offset = align_up(b->weights_top)};
        b->weights[b->n_weights++] = desc_of(name, &n->out[0], r);
        b->weights_top = r.offset + value_bytes(&n->out[0]);
      } else if (b->weights[w].nbytes != value_bytes(&n->out[0]) ||
                 b->weights[w].dtype != (uint32_t)n->out[0].type.dtype) {
        diag_error(b->ctx, n->loc, "param '%s' is used with two different types", name);
        ok = false;
      }
      set_home(b, &n->out[0], b->weights[w].where);
    }
  }
  uint64_t weights_bytes = align_up(b->weights_top);
  place_batches(b, weights_bytes);
  for (Node *n = g->first; n; n = n->next) {
    if (!b->init.node[n->id] || n->op == OP_RESHAPE) continue;
    for (int i = 0; i < n->n_out; i++) {
      if (!b->init.need[n->out[i].id] || b->has_home[n->out[i].id]) continue;
      RtRef r = {.space = RT_SPACE_WEIGHTS, .offset = weights_bytes + align_up(b->derived_top)};
      b->derived_top = r.offset - weights_bytes + value_bytes(&n->out[i]);
      set_home(b, &n->out[i], r);
    }
  }
  for (int i = 0; i < g->n_outputs; i++) {
    const Value *v = g->outputs[i];
    RtRef r = {.space = RT_SPACE_OUTPUT, .index = (uint32_t)i};
    b->outputs[i] = desc_of(g->output_names[i], v, r);
    int axis, len = ir_output_length(g, i, &axis);
    if (len >= 0) b->outputs[i].length_output = (uint32_t)len + 1, b->outputs[i].length_axis = (uint32_t)axis;
    /* Init steps never write OUTPUT: a run copies the derived value. */
    if (b->init.node[v->def->id]) continue;
    /* Computed straight into the output, unless it already lives
     * elsewhere: then a copy at the end (emit_output_copies).  A
     * reshape has its operand's bytes, so the value it reshapes (a
     * batchnorm weight's gradient summed as [1, C, 1, 1]) is computed
     * there too rather than copied. */
    const Value *u = v;
    while (u->def->op == OP_RESHAPE && !b->has_home[u->id]) u = u->def->in[0];
    if (u != v && !b->has_home[u->id] && u->def->op != OP_CONST && !b->init.node[u->def->id]) set_home(b, u, r);
    if (!b->has_home[v->id]) set_home(b, v, r);
  }
  place_concat_operands(b);
  for (Node *n = g->first; n; n = n->next) {
    if (n->op == OP_CONST || n->op == OP_RESHAPE) continue;
    for (int i = 0; i < n->n_out; i++)
      if (!b->has_home[n->out[i].id])
        set_home(b, &n->out[i], place(b, value_bytes(&n->out[i]), value_name(b, &n->out[i])));
  }
  return ok;
}

/* ---- memory planning ---- */

/* A launch whose kernel may write out over in: it reads in[i] only at
 * the index i where it then stores out[i], before that store. */
typedef struct InplaceHint {
  int step;
  RtRef in, out;
  /* How many times the launch names in before the hinted kernel joined
   * it (a chain's earlier phases, done with it at the grid barrier): the
   * bytes are free to take only if nothing after names them too. */
  int in_before;
} InplaceHint;

typedef struct InplaceScan {
  const KBuf *in, *out;
  const KVar *i; /* the grid-stride variable */
  int stores;
  bool stored, ok;
} InplaceScan;

static void scan_expr(InplaceScan *sc, const KExpr *e) {
  if (!e || !sc->ok) return;
  if (e->kind == KE_LOAD) {
    if (e->buf == sc->out) sc->ok = false;
    /* one element: its index 0 is the only i there is */
    bool at_i = e->a[0] && ((e->a[0]->kind == KE_VAR && e->a[0]->var == sc->i) ||
                            (e->a[0]->kind == KE_INT && e->a[0]->i == 0 && sc->in->numel == 1));
    if (e->buf == sc->in && (sc->stored || !at_i)) sc->ok = false;
  }
  for (int k = 0; k < 3; k++) scan_expr(sc, e->a[k]);
}

/* nested: inside a loop or reduction within the grid-stride loop */
static void scan_block(InplaceScan *sc, const KBlock *blk, bool nested) {
  for (const KStmt *st = blk->first; st && sc->ok; st = st->next) {
    switch (st->kind) {
      case KS_LOOP:
        scan_expr(sc, st->extent);
        scan_block(sc, &st->body, true);
        break;
      case KS_REDUCE:
        scan_expr(sc, st->init);
        scan_expr(sc, st->extent);
        scan_block(sc, &st->body, true);
        scan_expr(sc, st->value);
        break;
      case KS_LET:
      case KS_SET: scan_expr(sc, st->value); break;
      case KS_STORE:
        scan_expr(sc, st->index);
        scan_expr(sc, st->value);
        if (st->buf == sc->in) sc->ok = false;
        if (st->buf == sc->out) {
          sc->stores++;
          sc->stored = true;
          if (nested || st->index->kind != KE_VAR || st->index->var != sc->i) sc->ok = false;
        }
        break;
      case KS_IF:
        scan_expr(sc, st->cond);
        scan_block(sc, &st->body, nested);
        scan_block(sc, &st->orelse, nested);
        break;
      case KS_BARRIER:
      case KS_GRID_SYNC:
      case KS_LAST_ARRIVAL:
      case KS_VLOAD:
      case KS_VSTORE:
      case KS_CHUNK:
      case KS_MMA:
      case KS_LDMATRIX:
      case KS_CP_ASYNC:
      case KS_CP_COMMIT:
      case KS_CP_WAIT:
      case KS_TF32:
      case KS_PACK:
      case KS_WG_IF:
      case KS_WG_MMA:
      case KS_WG_FENCE:
      case KS_WG_COMMIT:
      case KS_WG_WAIT:
      case KS_WG_ACC:
      case KS_PROXY_FENCE:
      case KS_ALLREDUCE: sc->ok = false; break;
    }
  }
}

/* Pure elementwise only: the body is one grid-stride loop (each i to one
 * thread), out is stored once per i at i, and in is read at i alone. */
static bool may_write_over(const Kernel *k, const KBuf *in, const KBuf *out) {
  if (out->overwrites == in && in->space == KSP_GLOBAL && out->space == KSP_GLOBAL && !in->written &&
      out->written && in->numel == out->numel && ir_dtype_size(in->dtype) == ir_dtype_size(out->dtype))
    return true;
  const KStmt *loop = k->body.first;
  if (!loop || loop->next || loop->kind != KS_LOOP || loop->map != KM_GRID_STRIDE) return false;
  if (in->space != KSP_GLOBAL || out->space != KSP_GLOBAL || in->written || !out->written)
    return false;
  if (in->numel != out->numel || ir_dtype_size(in->dtype) != ir_dtype_size(out->dtype))
    return false;
  InplaceScan sc = {.in = in, .out = out, .i = loop->var, .ok = true};
  scan_block(&sc, &loop->body, false);
  return sc.ok && sc.stores == 1;
}

static void push_hint(CgBuild *b, InplaceHint **hints, int *n, int *cap, InplaceHint h) {
  if (*n == *cap) {
    int old = *cap, grown = old ? 2 * old : 64;
    *hints = arena_realloc(&b->ctx->arena, *hints, sizeof(InplaceHint) * (size_t)old,
                           sizeof(InplaceHint) * (size_t)grown);
    *cap = grown;
  }
  (*hints)[(*n)++] = h;
}

/* The weight output i updates, or -1 (no update, or none of its bytes). */
static int update_weight(CgBuild *b, int i) {
  const char *param = ir_output_update(b->g, i);
  if (!param) return -1;
  for (int w = 0; w < b->n_weights; w++)
    if (strcmp(b->weights[w].name, param) == 0)
      return b->weights[w].nbytes == value_bytes(b->g->outputs[i]) ? w : -1;
  return -1;
}

/* A launch that computes an update output from its param, reading each
 * element before it stores it there, may write it over the param
 * (decided for good once the steps exist: emit_update_copies). */
static void note_update_inplace(CgBuild *b, Kernel *k, int step) {
  for (int o = 0; o < k->n_params; o++) {
    KParam *po = &k->params[o];
    if (!po->buf || po->arg.ref.space != RT_SPACE_OUTPUT || po->arg.ref.offset) continue;
    int w = update_weight(b, (int)po->arg.ref.index);
    if (w < 0) continue;
    for (int i = 0; i < k->n_params; i++) {
      KParam *pi = &k->params[i];
      if (i == o || !pi->buf || !cg_same_ref(pi->arg.ref, b->weights[w].where) ||
          !may_write_over(k, pi->buf, po->buf))
        continue;
      pi->may_alias = po->may_alias = true;
      push_hint(b, &b->update_hints, &b->n_update_hints, &b->cap_update_hints,
                (InplaceHint){step, pi->arg.ref, po->arg.ref, 0});
    }
  }
}

static int slot_of(CgBuild *b, RtRef r);

/* How many of step t's launch arguments name slot ref's bytes. */
static int names_of_slot(CgBuild *b, int t, RtRef ref) {
  const Kernel *k = t < b->n_steps ? b->step_kernel[t] : NULL;
  if (!k) return 0;
  int n = 0, slot = slot_of(b, ref);
  for (int j = 0; j < k->n_params; j++) {
    const KParam *p = &k->params[j];
    n += p->buf && p->arg.ref.space == RT_SPACE_ARENA && slot_of(b, p->arg.ref) == slot;
  }
  return n;
}

/* k's in-place hints at step: a launch of its own (step is a new one),
 * one it shares, or the chain it joins as the next phase (chained). */
static void note_inplace(CgBuild *b, Kernel *k, int step, bool chained) {
  note_update_inplace(b, k, step);
  for (int o = 0; o < k->n_params; o++) {
    KParam *po = &k->params[o];
    if (!po->buf || po->arg.ref.space != RT_SPACE_ARENA) continue;
    for (int i = 0; i < k->n_params; i++) {
      KParam *pi = &k->params[i];
      if (i == o || !pi->buf || pi->arg.ref.space != RT_SPACE_ARENA) continue;
      if (!may_write_over(k, pi->buf, po->buf)) continue;
      /* the earlier phases are done with in when this one writes over
       * it, whether they read it or wrote it */
      int before = chained ? names_of_slot(b, step, pi->arg.ref) : 0;
      /* Decided before the planner runs, so both lose __restrict__
       * whether or not the planner then shares their bytes. */
      pi->may_alias = po->may_alias = true;
      push_hint(b, &b->hints, &b->n_hints, &b->cap_hints,
                (InplaceHint){step, pi->arg.ref, po->arg.ref, before});
    }
  }
}

/* Every ref of one space the steps hold, with its step.  A new kind of step or
 * a new ref in one must be added here (the plan validator would refuse
 * the unplanned offset). */
typedef struct StepRef {
  RtRef *ref;
  int step;
} StepRef;

static int step_refs(CgBuild *b, RtSpace space, StepRef *out) {
  int n = 0;
#define ADD(r)                                                \
  do {                                                        \
    if ((r).space == space) {                                 \
      if (out) out[n] = (StepRef){&(r), s};                   \
      n++;                                                    \
    }                                                         \
  } while (0)
  for (int s = 0; s < b->n_steps; s++) {
    RtStep *st = &b->steps[s];
    switch (st->kind) {
      case RT_STEP_LAUNCH: {
        RtArg *args = (RtArg *)st->launch.args; /* ours, from cg_launch */
        for (uint32_t a = 0; a < st->launch.n_args; a++)
          if (args[a].kind == RT_ARG_PTR) ADD(args[a].ref);
        break;
      }
      case RT_STEP_GEMM:
        ADD(st->gemm.a);
        ADD(st->gemm.b);
        ADD(st->gemm.c);
        if (st->gemm.beta != 0.0f) ADD(st->gemm.c_in);
        if (st->gemm.epilogue) ADD(st->gemm.bias);
        break;
      case RT_STEP_COPY:
      case RT_STEP_ALLREDUCE:
        ADD(st->copy.src);
        ADD(st->copy.dst);
        break;
      case RT_STEP_BRANCH:
      case RT_STEP_REPEAT: ADD(st->branch.cond); break;
    }
  }
#undef ADD
  return n;
}

static int slot_of(CgBuild *b, RtRef r) {
  uint64_t k = (r.offset >> SLOT_SHIFT) - 1;
  if ((r.offset >> SLOT_SHIFT) == 0 || k >= (uint64_t)b->n_buffers)
    dl_internal(b->ctx, "arena ref +%" PRIu64 " names no buffer", r.offset);
  return (int)k;
}

static uint64_t slot_inner(RtRef r) { return r.offset & (((uint64_t)1 << SLOT_SHIFT) - 1); }

static int find_root(int *parent, int k) {
  while (parent[k] != k) k = parent[k] = parent[parent[k]];
  return k;
}

/* Takes a hint when its input's bytes die at that very launch and its
 * output is born there, both whole buffers of one size that the launch
 * names once each: then the two become one buffer. */
static bool take_inplace(CgBuild *b, const InplaceHint *h, const StepRef *refs, int n_refs,
                         const int *first_ref, int *parent, int64_t *gu) {
  int ki = slot_of(b, h->in), ko = slot_of(b, h->out);
  if (ki == ko || slot_inner(h->in) || slot_inner(h->out)) return false;
  CgBuffer *bi = &b->buffers[ki], *bo = &b->buffers[ko];
  if (bi->nbytes != bo->nbytes || !bi->nbytes) return false;
  int ri = find_root(parent, ki);
  if (gu[ri] != h->step + 1 || bi->upper != h->step + 1) return false;
  if (parent[ko] != ko || bo->lower != h->step) return false;
  int seen_i = 0, seen_o = 0;
  for (int r = first_ref[h->step]; r < n_refs && refs[r].step == h->step; r++) {
    int k = slot_of(b, *refs[r].ref);
    seen_i += k == ki, seen_o += k == ko;
  }
  if (seen_i != 1 + h->in_before || seen_o != 1) return false;
  parent[ko] = ri;
  if (gu[ko] > gu[ri]) gu[ri] = gu[ko];
  bo->inplace_of = ki;
  return true;
}

/* Liveness over the final steps, in-place merges, then the solver;
 * rewrites every arena ref from its slot to its planned offset. */
static void plan_memory(CgBuild *b) {
  Arena *a = &b->ctx->arena;
  int nb = b->n_buffers;
  int n_refs = step_refs(b, RT_SPACE_ARENA, NULL);
  StepRef *refs = ARENA_ARRAY(a, StepRef, n_refs + 1);
  step_refs(b, RT_SPACE_ARENA, refs);
  int *first_ref = ARENA_ARRAY(a, int, b->n_steps + 1);
  for (int s = 0, r = 0; s <= b->n_steps; s++) {
    while (r < n_refs && refs[r].step < s) r++;
    first_ref[s] = r;
  }
  for (int k = 0; k < nb; k++) b->buffers[k].lower = b->buffers[k].upper = 0;
  bool *used = ARENA_ARRAY(a, bool, nb + 1);
  for (int r = 0; r < n_refs; r++) {
    int k = slot_of(b, *refs[r].ref), s = refs[r].step;
    CgBuffer *buf = &b->buffers[k];
    if (!used[k]) buf->lower = s, used[k] = true;
    buf->upper = s + 1;
  }
  /* What a loop's steps read and an earlier step wrote (its carried
   * values, what its body reads from before it) lives until the loop's
   * last step: every step of the loop reads it again.  Inner loops end
   * first, so an outer one extends what they did. */
  for (int r = 0; r < b->n_steps; r++) {
    if (b->steps[r].kind != RT_STEP_REPEAT) continue;
    int first = r - (int)b->steps[r].branch.skip;
    for (int k = 0; k < nb; k++)
      if (used[k] && b->buffers[k].lower < first && b->buffers[k].upper > first && b->buffers[k].upper < r + 1)
        b->buffers[k].upper = r + 1;
  }
  int *parent = ARENA_ARRAY(a, int, nb + 1);
  int64_t *gu = ARENA_ARRAY(a, int64_t, nb + 1); /* a merged group's end, at its root */
  for (int k = 0; k < nb; k++) {
    parent[k] = k, gu[k] = b->buffers[k].upper;
    if (used[k] && b->buffers[k].nbytes) b->naive_bytes += align_up(b->buffers[k].nbytes);
  }
  for (int h = 0; h < b->n_hints; h++)
    b->n_inplace += take_inplace(b, &b->hints[h], refs, n_refs, first_ref, parent, gu);

  MemBuf *mb = ARENA_ARRAY(a, MemBuf, nb + 1);
  for (int k = 0; k < nb; k++) {
    int r = find_root(parent, k);
    if (r != k || !used[k]) continue;
    /* the root is the group's first buffer: its lower is the group's */
    mb[k] = (MemBuf){.id = k, .lower = b->buffers[k].lower, .upper = gu[k], .size = b->buffers[k].nbytes,
                     .align = ALIGN};
  }
  /* the search's work grows with the graph, so compile time stays linear */
  MemPlanOptions mo = {.budget = 200000 + 20000 * (int64_t)nb};
  MemPlanResult res;
  pass_memplan_solve(a, mb, nb, &mo, &res);
  b->lower_bound = res.lower_bound;
  b->memplan = res.heuristic;
  b->arena_top = res.arena;
  for (int k = 0; k < nb; k++) {
    CgBuffer *buf = &b->buffers[k];
    buf->ref.offset = used[k] ? mb[find_root(parent, k)].offset : 0;
  }
  for (int r = 0; r < n_refs; r++) {
    RtRef *ref = refs[r].ref;
    ref->offset = b->buffers[slot_of(b, *ref)].ref.offset + slot_inner(*ref);
  }
}

/* ---- the memory plan's checker ---- */

typedef struct ShareCheck {
  const CgBuffer *bufs;
} ShareCheck;

/* Only a buffer written in place over another, at the one step where
 * the other dies. */
static bool may_share(void *data, int i, int j) {
  const CgBuffer *bufs = ((ShareCheck *)data)->bufs;
  for (int t = 0; t < 2; t++, i ^= j, j ^= i, i ^= j) {
    const CgBuffer *x = &bufs[i], *y = &bufs[j];
    if (y->inplace_of == i && y->lower == x->upper - 1 && y->ref.offset == x->ref.offset &&
        y->nbytes == x->nbytes)
      return true;
  }
  return false;
}

typedef struct LiveAt {
  uint64_t off, end;
  int k;
} LiveAt;

typedef struct ByLower {
  int lower, k;
} ByLower;

static int cmp_lower(const void *pa, const void *pb) {
  const ByLower *a = pa, *b = pb;
  if (a->lower != b->lower) return (a->lower > b->lower) - (a->lower < b->lower);
  return (a->k > b->k) - (a->k < b->k);
}

bool cg_check_memory(const CgResult *r, char *err, size_t len) {
  const RtPlan *p = r->plan;
  int nb = r->n_buffers;
  Arena a;
  arena_init(&a);
  /* Its failures unwind through the compilation's guard, which must
   * free it then. */
  Ctx *c = ctx_current();
  if (c) ctx_hold_arena(c, &a);
  bool ok = true;
  MemBuf *mb = ARENA_ARRAY(&a, MemBuf, nb + 1);
  uint64_t top = 0;
  for (int k = 0; k < nb; k++) {
    const CgBuffer *x = &r->buffers[k];
    mb[k] = (MemBuf){.id = k, .lower = x->lower, .upper = x->upper, .size = x->nbytes,
                     .align = ALIGN, .offset = x->ref.offset};
    if (x->lower < x->upper && x->ref.offset + x->nbytes > top) top = x->ref.offset + x->nbytes;
  }
  int bi, bj;
  ShareCheck sc = {r->buffers};
  /* Buffers are live over steps numbered init steps first. */
  int n_init = (int)p->n_init_steps;
  int across = -1;
  for (int k = 0; k < nb && across < 0; k++)
    if (r->buffers[k].lower < n_init && r->buffers[k].upper > n_init) across = k;
  if (across >= 0) {
    snprintf(err, len, "%s is in the arena from init step %d to step %d: it does not last between runs",
             r->buffers[across].what, r->buffers[across].lower, r->buffers[across].upper - 1 - n_init);
    ok = false;
  } else if (top > p->arena_bytes) {
    snprintf(err, len, "buffers reach byte %" PRIu64 " of an arena of %" PRIu64, top,
             p->arena_bytes);
    ok = false;
  } else if (!pass_memplan_check(&a, mb, nb, may_share, &sc, &bi, &bj)) {
    const CgBuffer *x = &r->buffers[bi];
    if (bj < 0)
      snprintf(err, len, "%s at +%" PRIu64 " is not aligned", x->what, x->ref.offset);
    else
      snprintf(err, len,
               "%s (+%" PRIu64 ", %" PRIu64 " bytes, steps %d..%d) and %s (+%" PRIu64
               ", %" PRIu64 " bytes, steps %d..%d) share bytes while both live",
               x->what, x->ref.offset, x->nbytes, x->lower, x->upper - 1, r->buffers[bj].what,
               r->buffers[bj].ref.offset, r->buffers[bj].nbytes, r->buffers[bj].lower,
               r->buffers[bj].upper - 1);
    ok = false;
  }
  /* Every arena ref of step s inside a buffer live at s: a sweep over
   * the steps with the live buffers sorted by offset, each buffer
   * joining at its first step (by = the buffers in that order). */
  LiveAt *live = ARENA_ARRAY(&a, LiveAt, nb + 1);
  ByLower *by = ARENA_ARRAY(&a, ByLower, nb + 1);
  for (int k = 0; k < nb; k++) by[k] = (ByLower){r->buffers[k].lower, k};
  qsort(by, (size_t)nb, sizeof *by, cmp_lower);
  int n_live = 0, next = 0;
  for (uint32_t s = 0; s < p->n_init_steps + p->n_steps && ok; s++) {
    int k2 = 0;
    for (int q = 0; q < n_live; q++)
      if (r->buffers[live[q].k].upper > (int)s) live[k2++] = live[q];
    n_live = k2;
    while (next < nb && by[next].lower < (int)s) next++;
    for (; next < nb && by[next].lower == (int)s; next++) {
      int k = by[next].k;
      const CgBuffer *x = &r->buffers[k];
      if (x->upper <= x->lower) continue;
      int at = n_live++;
      while (at > 0 && live[at - 1].off > x->ref.offset) live[at] = live[at - 1], at--;
      live[at] = (LiveAt){x->ref.offset, x->ref.offset + x->nbytes, k};
    }
    const RtStep *st = s < p->n_init_steps ? &p->init_steps[s] : &p->steps[s - p->n_init_steps];
    RtRef refs[5];
    int nr = 0;
    const RtArg *args = st->kind == RT_STEP_LAUNCH ? st->launch.args : NULL;
    uint32_t n_args = st->kind == RT_STEP_LAUNCH ? st->launch.n_args : 0;
    if (st->kind == RT_STEP_GEMM) {
      refs[0] = st->gemm.a, refs[1] = st->gemm.b, refs[2] = st->gemm.c, nr = 3;
      if (st->gemm.beta != 0.0f) refs[nr++] = st->gemm.c_in;
      if (st->gemm.epilogue) refs[nr++] = st->gemm.bias;
    }
    if (st->kind == RT_STEP_COPY || st->kind == RT_STEP_ALLREDUCE) refs[0] = st->copy.src, refs[1] = st->copy.dst, nr = 2;
    if (st->kind == RT_STEP_BRANCH || st->kind == RT_STEP_REPEAT) refs[0] = st->branch.cond, nr = 1;
    for (uint32_t q = 0; q < n_args + (uint32_t)nr && ok; q++) {
      RtRef ref;
      if (q < n_args) {
        if (args[q].kind != RT_ARG_PTR) continue;
        ref = args[q].ref;
      } else {
        ref = refs[q - n_args];
      }
      if (ref.space != RT_SPACE_ARENA) continue;
      int l = 0, h = n_live;
      while (l < h) {
        int mid = (l + h) / 2;
        if (live[mid].off <= ref.offset) l = mid + 1;
        else h = mid;
      }
      bool inside = false;
      for (int q2 = l - 1; q2 >= 0 && !inside; q2--) inside = ref.offset <= live[q2].end;
      if (!inside) {
        snprintf(err, len, "%sstep %u (%s) uses arena+%" PRIu64 ", in no buffer live then",
                 s < p->n_init_steps ? "init " : "",
                 s < p->n_init_steps ? s : s - p->n_init_steps, st->label, ref.offset);
        ok = false;
      }
    }
  }
  if (c) ctx_release(c, &a);
  arena_free(&a);
  return ok;
}

/* ---- what lowering asks for ---- */

Ctx *cg_build_ctx(CgBuild *b) { return b->ctx; }

const Graph *cg_build_graph(CgBuild *b) { return b->g; }

const CgGroup *cg_group(CgBuild *b) { return b->group; }
const CgOptions *cg_options(CgBuild *b) { return &b->opts; }
void cg_set_group(CgBuild *b, const CgGroup *grp) { b->group = grp; }

bool cg_has_ref(CgBuild *b, const Value *v) { return b->has_home[v->id]; }

bool cg_const_of(CgBuild *b, const Value *v, double *value) {
  if (v->id >= 0 && v->id < b->n_values && b->value[v->id] == v) v = b->unshaped[v->id];
  while (v->def->op == OP_RESHAPE) v = v->def->in[0];
  if (v->def->op != OP_CONST) return false;
  *value = ir_attr_float(v->def, "value");
  return true;
}

RtRef cg_ref(CgBuild *b, const Value *v) {
  if (b->has_home[v->id]) return b->home[v->id];
  double c;
  if (!cg_const_of(b, v, &c))
    dl_internal(b->ctx, "value %%%d (%s) has no storage", v->id, ir_ops[v->def->op].name);
  /* A const something needs in memory (a GEMM operand): fill it once. */
  RtRef r = place(b, value_bytes(v), value_name(b, v));
  set_home(b, v, r);
  cg_fill(b, v->def, NULL, r, v->type.dtype, ir_type_numel(&v->type), c);
  return r;
}

void cg_alias(CgBuild *b, const Value *v, RtRef r) { set_home(b, v, r); }

RtRef cg_scratch(CgBuild *b, const Node *n, uint64_t nbytes) {
  return place(b, nbytes, arena_printf(&b->ctx->arena, "scratch %s", cg_label(b->ctx, n, NULL)));
}

RtRef cg_ref_at(RtRef r, uint64_t byte_offset) {
  r.offset += byte_offset;
  return r;
}

const char *cg_label(Ctx *c, const Node *n, const char *what) {
  if (what) return arena_printf(&c->arena, "%s %%%d %s", ir_ops[n->op].name, n->out[0].id, what);
  return arena_printf(&c->arena, "%s %%%d", ir_ops[n->op].name, n->out[0].id);
}

static RtStep *add_step(CgBuild *b, RtStepKind kind, const Node *n, const char *what) {
  if (b->n_steps == b->cap_steps) {
    int cap = b->cap_steps ? 2 * b->cap_steps : 64;
    b->steps = arena_realloc(&b->ctx->arena, b->steps, sizeof(RtStep) * (size_t)b->cap_steps,
                             sizeof(RtStep) * (size_t)cap);
    b->notes = arena_realloc(&b->ctx->arena, b->notes, sizeof(CgStepNote) * (size_t)b->cap_steps,
                             sizeof(CgStepNote) * (size_t)cap);
    b->step_nodes = arena_realloc(&b->ctx->arena, b->step_nodes, sizeof(Node *) * (size_t)b->cap_steps,
                                  sizeof(Node *) * (size_t)cap);
    b->step_kernel = arena_realloc(&b->ctx->arena, b->step_kernel, sizeof(Kernel *) * (size_t)b->cap_steps,
                                   sizeof(Kernel *) * (size_t)cap);
    b->cap_steps = cap;
  }
  b->notes[b->n_steps] = (CgStepNote){0};
  b->step_nodes[b->n_steps] = n;
  b->step_kernel[b->n_steps] = NULL;
  RtStep *s = &b->steps[b->n_steps++];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->label = cg_label(b->ctx, n, what);
  /* What eval.c's messages start with, for the runtime's index errors;
   * a check's message is whole. */
  if (n->op == OP_CHECK)
    s->origin = ir_attr_str(n, "message");
  else if (n->loc.file && n->loc.line == 0)
    s->origin = arena_printf(&b->ctx->arena, "%s: %s", n->loc.file->name, ir_op_origin(n));
  else if (n->loc.file)
    s->origin = arena_printf(&b->ctx->arena, "%s:%d:%d: %s", n->loc.file->name, n->loc.line, n->loc.col,
                             ir_op_origin(n));
  else
    s->origin = ir_op_origin(n);
  return s;
}

/* FNV-1a. */
static uint64_t str_hash(const char *s) {
  uint64_t h = 1469598103934665603u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

/* The position of s in strs (indexed by x), or -1. */
static int index_find(const StrIndex *x, const char *const *strs, const char *s) {
  for (int i = x->cap ? (int)(str_hash(s) & (uint64_t)(x->cap - 1)) : 0; x->cap; i = (i + 1) & (x->cap - 1)) {
    if (!x->slots[i]) return -1;
    if (strcmp(strs[x->slots[i] - 1], s) == 0) return x->slots[i] - 1;
  }
  return -1;
}

/* Indexes strs[k], strs[0..k) being indexed already. */
static void index_add(Arena *a, StrIndex *x, const char *const *strs, int k) {
  if (2 * (k + 1) > x->cap) {
    StrIndex bigger = {.cap = x->cap ? 2 * x->cap : 64};
    bigger.slots = ARENA_ARRAY(a, int, bigger.cap);
    for (int j = 0; j < k; j++) index_add(a, &bigger, strs, j);
    *x = bigger;
  }
  int i = (int)(str_hash(strs[k]) & (uint64_t)(x->cap - 1));
  while (x->slots[i]) i = (i + 1) & (x->cap - 1);
  x->slots[i] = k + 1;
}

/* The kernel whose text k has, added when it is new.  Texts and names
 * are found through hash indexes: a graph of many distinct kernels
 * stays linear. */
static uint32_t intern_kernel(CgBuild *b, const Kernel *k) {
  const char *key = cg_emit_kernel(b->ctx, k, "K", false);
  int same = index_find(&b->by_key, b->keys, key);
  if (same >= 0) return (uint32_t)same;
  if (b->n_kernels == b->cap_kernels) {
    int old = b->cap_kernels, cap = old ? 2 * old : 32;
    Arena *a = &b->ctx->arena;
    b->kernels = arena_realloc(a, b->kernels, sizeof(RtKernel) * (size_t)old,
                               sizeof(RtKernel) * (size_t)cap);
    b->keys = arena_realloc(a, b->keys, sizeof(char *) * (size_t)old, sizeof(char *) * (size_t)cap);
    b->texts =
        arena_realloc(a, b->texts, sizeof(char *) * (size_t)old, sizeof(char *) * (size_t)cap);
    b->names =
        arena_realloc(a, b->names, sizeof(char *) * (size_t)old, sizeof(char *) * (size_t)cap);
    b->first_contract =
        arena_realloc(a, b->first_contract, sizeof(int) * (size_t)old, sizeof(int) * (size_t)cap);
    b->cap_kernels = cap;
  }
  const char *name =
      arena_printf(&b->ctx->arena, "%s_%d", k->hint, k->node ? k->node->out[0].id : 0);
  for (int i = 2; index_find(&b->by_name, b->names, name) >= 0; i++)
    name = arena_printf(&b->ctx->arena, "%s_%d_%d", k->hint, k->node ? k->node->out[0].id : 0, i);
  int i = b->n_kernels++;
  b->kernels[i] = (RtKernel){
      .name = name,
      .uses_barriers = k->uses_barriers,
      .static_shared_bytes = k->shared_bytes,
      .cooperative = !k->cooperative ? RT_COOP_NONE : k->grid_stride ? RT_COOP_STRIDE : RT_COOP_EXACT};
  b->keys[i] = key;
  b->names[i] = name;
  b->first_contract[i] = -1;
  index_add(&b->ctx->arena, &b->by_key, b->keys, i);
  index_add(&b->ctx->arena, &b->by_name, b->names, i);
  b->texts[i] = cg_emit_kernel(b->ctx, k, name, true);
  /* Half values may live in a kernel's expressions only (a cast, an
   * immediate), so the text says which header it needs. */
  b->needs_fp16 |= strstr(b->texts[i], "__half") != NULL;
  b->needs_bf16 |= strstr(b->texts[i], "bfloat16") != NULL;
  b->needs_tc |= k->uses_tc;
  b->needs_grid_sync |= k->cooperative;
  b->needs_arrival |= k->counts_arrivals;
  b->needs_philox |= strstr(b->texts[i], "dl_dropout_bits(") != NULL;
  return (uint32_t)i;
}

static bool same_contract(const RtContract *a, const RtContract *b) {
  if (a->kernel != b->kernel || a->n_params != b->n_params || a->dynamic_shared_bytes != b->dynamic_shared_bytes ||
      memcmp(a->grid, b->grid, sizeof a->grid) || memcmp(a->block, b->block, sizeof a->block))
    return false;
  for (uint32_t i = 0; i < a->n_params; i++) {
    const RtParam *x = &a->params[i], *y = &b->params[i];
    if (x->kind != y->kind || x->access != y->access || x->nbytes != y->nbytes || x->lo != y->lo || x->hi != y->hi)
      return false;
  }
  return true;
}

/* The contract of launching k (kernel idx): what each parameter lets it
 * touch, from the kernel IR's own buffer sizes and access flags. */
static uint32_t intern_contract(CgBuild *b, const Kernel *k, uint32_t idx) {
  Arena *a = &b->ctx->arena;
  RtParam *params = ARENA_ARRAY(a, RtParam, k->n_params + 1);
  for (int i = 0; i < k->n_params; i++) {
    const KParam *p = &k->params[i];
    RtParam *q = &params[i];
    q->kind = p->arg.kind;
    if (p->buf) {
      q->access = (p->buf->written ? RT_ACCESS_WRITE : 0) | (p->buf->read || !p->buf->written ? RT_ACCESS_READ : 0);
      q->nbytes = (uint64_t)p->buf->numel * (uint64_t)ir_dtype_size(p->buf->dtype);
    } else if (q->kind != RT_ARG_F32) {
      q->lo = p->lo, q->hi = p->hi;
    }
  }
  RtContract c = {.kernel = idx,
                  .dynamic_shared_bytes = k->dynamic_shared_bytes,
                  .n_params = (uint32_t)k->n_params,
                  .params = params};
  memcpy(c.grid, k->grid, sizeof c.grid);
  memcpy(c.block, k->block, sizeof c.block);
  /* Only the kernel's own contracts can be the same. */
  for (int i = b->first_contract[idx]; i >= 0; i = b->next_contract[i])
    if (same_contract(&b->contracts[i], &c)) return (uint32_t)i;
  if (b->n_contracts == b->cap_contracts) {
    int old = b->cap_contracts, cap = old ? 2 * old : 32;
    b->contracts = arena_realloc(a, b->contracts, sizeof(RtContract) * (size_t)old, sizeof(RtContract) * (size_t)cap);
    b->next_contract =
        arena_realloc(a, b->next_contract, sizeof(int) * (size_t)old, sizeof(int) * (size_t)cap);
    b->cap_contracts = cap;
  }
  b->contracts[b->n_contracts] = c;
  b->next_contract[b->n_contracts] = b->first_contract[idx];
  b->first_contract[idx] = b->n_contracts;
  return (uint32_t)b->n_contracts++;
}

RtRef cg_status(CgBuild *b, int n_reports) {
  RtRef r = {.space = RT_SPACE_STATUS, .offset = b->status_top};
  b->status_top += (uint64_t)n_reports * RT_STATUS_WORDS * 8;
  return r;
}

RtRef cg_sync_words(CgBuild *b, int64_t n_words) {
  RtRef r = {.space = RT_SPACE_SYNC, .offset = b->sync_top};
  b->sync_top += (uint64_t)n_words * 4;
  return r;
}

/* ---- horizontal fusion: independent kernels share a launch ---- */

static bool ranges_meet(const RtAccessRange *x, const RtAccessRange *y) {
  return x->ref.space == y->ref.space && x->ref.index == y->ref.index && x->nbytes && y->nbytes &&
         x->ref.offset < y->ref.offset + y->nbytes && y->ref.offset < x->ref.offset + x->nbytes;
}

/* Whether step t and kernel k (not yet a step) must keep their order:
 * one writes a byte the other touches.  Arena refs are still slots
 * (plan_memory has not run), so distinct values never meet. */
static bool step_orders(CgBuild *b, int t, const Kernel *k) {
  RtPlan view = {.contracts = b->contracts, .n_contracts = (uint32_t)b->n_contracts};
  const RtStep *st = &b->steps[t];
  if (st->kind == RT_STEP_ALLREDUCE) return true; /* its wait is a step of its own */
  int max = st->kind == RT_STEP_LAUNCH ? (int)st->launch.n_args + 1 : 8;
  RtAccessRange *acc = ARENA_ARRAY(&b->ctx->arena, RtAccessRange, max);
  int n = rt_step_access(&view, st, acc, max);
  if (n < 0) return true;
  for (int i = 0; i < k->n_params; i++) {
    const KParam *p = &k->params[i];
    if (!p->buf) continue;
    if (p->arg.ref.space == RT_SPACE_STATUS) return true; /* its reports name the step's node */
    RtAccessRange mine = {p->arg.ref, (uint64_t)p->buf->numel * (uint64_t)ir_dtype_size(p->buf->dtype),
                          p->buf->written};
    for (int j = 0; j < n; j++)
      if ((mine.write || acc[j].write) && ranges_meet(&mine, &acc[j])) return true;
  }
  return false;
}

static int accesses(CgBuild *b, int t, RtAccessRange **out) {
  RtPlan view = {.contracts = b->contracts, .n_contracts = (uint32_t)b->n_contracts};
  const RtStep *st = &b->steps[t];
  if (st->kind == RT_STEP_ALLREDUCE) return -1;
  int max = st->kind == RT_STEP_LAUNCH ? (int)st->launch.n_args + 1 : 8;
  *out = ARENA_ARRAY(&b->ctx->arena, RtAccessRange, max);
  return rt_step_access(&view, st, *out, max);
}

/* Whether steps t and u must keep their order. */
static bool steps_order(CgBuild *b, int t, int u) {
  RtAccessRange *x, *y;
  int nx = accesses(b, t, &x), ny = accesses(b, u, &y);
  if (nx < 0 || ny < 0) return true;
  for (int i = 0; i < nx; i++)
    for (int j = 0; j < ny; j++)
      if ((x[i].write || y[j].write) && ranges_meet(&x[i], &y[j])) return true;
  return false;
}

/* How far back a launch may move to share an earlier one: its results
 * then live from there, so not far; and the arena bytes whose life a
 * move lengthens (a moved-up kernel's results, a moved-down one's
 * operands that nothing after reads) are at most MERGE_HOLD_BYTES, so
 * that sharing a launch never holds a large activation (fuse.c's
 * sibling reductions keep the same rule). */
enum { MERGE_REACH = 8, MERGE_HOLD_BYTES = 16384 };

static uint64_t param_bytes(const KParam *p) {
  return (uint64_t)p->buf->numel * (uint64_t)ir_dtype_size(p->buf->dtype);
}

/* Whether kernel k reads the bytes of p: where k joins p's kernel at the
 * end, p's operand lives there anyway. */
static bool read_by(const Kernel *k, const KParam *p) {
  RtAccessRange mine = {p->arg.ref, param_bytes(p), false};
  for (int i = 0; i < k->n_params; i++) {
    const KParam *q = &k->params[i];
    RtAccessRange r = {q->arg.ref, q->buf ? param_bytes(q) : 0, false};
    if (q->buf && ranges_meet(&mine, &r)) return true;
  }
  return false;
}

/* Whether kernel k has index reports (a STATUS buffer): its launch keeps
 * a step of its own, whose node the runtime's messages name. */
static bool reports(const Kernel *k) {
  for (int i = 0; i < k->n_params; i++)
    if (k->params[i].buf && k->params[i].arg.ref.space == RT_SPACE_STATUS) return true;
  return false;
}

/* The earlier launch kernel k can join (horizontal fusion: one launch
 * runs both on their own blocks), or -1: the nearest one before which
 * nothing k reads is written and nothing k writes is touched, with a
 * shape cg_kernel_merge accepts.  A launch with index reports keeps its
 * own step, whose node the runtime's messages name. */
static int merge_target(CgBuild *b, Kernel *k) {
  if (b->merge_from < 0 || !b->opts.merge_launches || b->n_open) return -1;
  if (reports(k)) return -1;
  uint64_t made = 0; /* the arena bytes k writes: born at t, not at the end */
  for (int i = 0; i < k->n_params; i++)
    if (k->params[i].buf && k->params[i].buf->written && k->params[i].arg.ref.space == RT_SPACE_ARENA)
      made += param_bytes(&k->params[i]);
  for (int t = b->n_steps - 1; t >= b->merge_from && t >= b->n_steps - MERGE_REACH; t--) {
    if (step_orders(b, t, k)) return -1;
    if (b->steps[t].kind == RT_STEP_LAUNCH && b->step_kernel[t] && cg_kernel_can_merge(b->step_kernel[t], k) &&
        (t == b->n_steps - 1 || made <= MERGE_HOLD_BYTES))
      return t;
  }
  return -1;
}

/* Or the other way (merge_target found none): the nearest earlier
 * launch that can move down past every step after it, to share kernel
 * k's launch at the end (a loss's sum beside the backward's first map). */
static int merge_down_target(CgBuild *b, Kernel *k) {
  if (b->merge_from < 0 || !b->opts.merge_launches || b->n_open) return -1;
  if (reports(k)) return -1;
  for (int t = b->n_steps - 1; t >= b->merge_from && t >= b->n_steps - MERGE_REACH; t--) {
    if (b->steps[t].kind != RT_STEP_LAUNCH || !b->step_kernel[t] || !cg_kernel_can_merge(b->step_kernel[t], k) ||
        step_orders(b, t, k))
      continue;
    bool free = true;
    for (int u = t + 1; u < b->n_steps && free; u++) free = !steps_order(b, t, u);
    const Kernel *a = b->step_kernel[t];
    uint64_t held = 0; /* its operands that may live to the end for it alone */
    for (int i = 0; free && i < a->n_params; i++) {
      const KParam *p = &a->params[i];
      if (p->buf && !p->buf->written && p->arg.ref.space == RT_SPACE_ARENA && !read_by(k, p))
        held += param_bytes(p);
    }
    if (free && held <= MERGE_HOLD_BYTES) return t;
  }
  return -1;
}

/* What the arena's slots are to the last step, by slot: */
enum {
  SLOT_NAMED = 1, /* a step so far names it */
  SLOT_LATER = 2, /* a node not lowered yet reads it */
  SLOT_LAST = 4,  /* the last step's kernel (a) names it */
};

/* The marks of every slot (calloc'd, the caller frees them). */
static unsigned char *slot_marks(CgBuild *b, const Kernel *a) {
  unsigned char *mark = calloc((size_t)b->n_buffers + 1, 1);
  int n_refs = step_refs(b, RT_SPACE_ARENA, NULL);
  StepRef *refs = malloc(sizeof *refs * ((size_t)n_refs + 1));
  if (!mark || !refs) {
    free(mark), free(refs);
    ctx_out_of_memory(b->ctx);
  }
  step_refs(b, RT_SPACE_ARENA, refs);
  for (int r = 0; r < n_refs; r++) mark[slot_of(b, *refs[r].ref)] |= SLOT_NAMED;
  free(refs);
  for (const Node *n = b->g->first; n; n = n->next) {
    if (b->done[n->id]) continue;
    for (int i = 0; i < n->n_in; i++) {
      const Value *v = n->in[i];
      if (b->has_home[v->id] && b->home[v->id].space == RT_SPACE_ARENA)
        mark[slot_of(b, b->home[v->id])] |= SLOT_LATER;
    }
  }
  for (int i = 0; i < a->n_params; i++)
    if (a->params[i].buf && a->params[i].arg.ref.space == RT_SPACE_ARENA)
      mark[slot_of(b, a->params[i].arg.ref)] |= SLOT_LAST;
  return mark;
}

/* The arena bytes live during the last step: every buffer a step so far
 * names that a node not lowered yet reads, or that the step itself
 * names (for the last time, then). */
static uint64_t live_during(CgBuild *b, const unsigned char *mark) {
  uint64_t live = 0;
  for (int k = 0; k < b->n_buffers; k++)
    if ((mark[k] & SLOT_NAMED) && (mark[k] & (SLOT_LATER | SLOT_LAST))) live += align_up(b->buffers[k].nbytes);
  return live;
}

/* The launch kernel k can join as the next phase of a chain
 * (cg_kernel_chain: vertical fusion, after a grid barrier), or -1: the
 * last step, where horizontal fusion found no launch to share.  Neither
 * may have index reports (the runtime names their step's node). */
static int chain_target(CgBuild *b, Kernel *k) {
  int t = b->n_steps - 1;
  if (b->merge_from < 0 || !b->opts.merge_launches || b->opts.no_chain_launches || b->n_open ||
      t < b->merge_from || b->steps[t].kind != RT_STEP_LAUNCH || !b->step_kernel[t])
    return -1;
  const Kernel *a = b->step_kernel[t];
  if (reports(k) || reports(a)) return -1;
  if (!cg_kernel_can_chain(a, k)) return -1;
  /* What a chain costs in memory: the launch is one step to the
   * planner, so a buffer the earlier phases read for the last time can
   * no longer give its bytes to what k writes.  Those are the buffers
   * they name that neither k (a batchnorm's map reads what its
   * statistics read; a recurrent step writes the state the step
   * before read) names nor a node not lowered yet (the activation a
   * backward reads) reads, scratch too (a split-K GEMM's partial sums,
   * which a later split GEMM apart would reuse); of them and of what k
   * writes, the smaller may be at most MERGE_HOLD_BYTES. */
  unsigned char *mark = slot_marks(b, a);
  uint64_t born = 0, dying = 0, during = live_during(b, mark), peak = b->live_peak;
  if (during > b->live_peak) b->live_peak = during;
  for (int i = 0; i < k->n_params; i++)
    if (k->params[i].buf && k->params[i].buf->written && k->params[i].arg.ref.space == RT_SPACE_ARENA)
      born += param_bytes(&k->params[i]);
  for (int i = 0; i < a->n_params && born > MERGE_HOLD_BYTES && dying <= MERGE_HOLD_BYTES; i++) {
    const KParam *p = &a->params[i];
    if (!p->buf || p->arg.ref.space != RT_SPACE_ARENA) continue;
    bool also = false;
    for (int j = 0; j < k->n_params && !also; j++)
      also = k->params[j].buf && k->params[j].arg.ref.space == RT_SPACE_ARENA &&
             slot_of(b, k->params[j].arg.ref) == slot_of(b, p->arg.ref);
    if (!also && !(mark[slot_of(b, p->arg.ref)] & SLOT_LATER)) dying += param_bytes(p);
  }
  free(mark);
  /* Or where the step's live bytes and what k adds to them stay within
   * the peak of the steps before (the backward of a network, whose
   * activations die as it goes): the arena does not grow for it. */
  if (born <= MERGE_HOLD_BYTES || dying <= MERGE_HOLD_BYTES || during + born <= peak) return t;
  if (b->chain_bound && during + born <= b->chain_bound) return t;
  b->chain_held_back = true;
  return -1;
}

/* In a chain, a phase may read bytes an earlier one wrote under another
 * parameter's name: neither may then be __restrict__ (nor read through
 * the non-coherent cache that promise allows). */
static void chain_aliases(Kernel *m) {
  for (int i = 0; i < m->n_params; i++) {
    KParam *p = &m->params[i];
    if (!p->buf) continue;
    RtAccessRange x = {p->arg.ref, param_bytes(p), p->buf->written};
    for (int j = 0; j < m->n_params; j++) {
      KParam *q = &m->params[j];
      if (j == i || !q->buf) continue;
      RtAccessRange y = {q->arg.ref, param_bytes(q), q->buf->written};
      if ((x.write || y.write) && ranges_meet(&x, &y)) p->may_alias = q->may_alias = true;
    }
  }
}

/* Step t moved to the end, the steps after it one earlier. */
static void move_to_end(CgBuild *b, int t) {
  int n = b->n_steps;
  RtStep st = b->steps[t];
  CgStepNote no = b->notes[t];
  const Node *sn = b->step_nodes[t];
  Kernel *sk = b->step_kernel[t];
  memmove(b->steps + t, b->steps + t + 1, sizeof *b->steps * (size_t)(n - t - 1));
  memmove(b->notes + t, b->notes + t + 1, sizeof *b->notes * (size_t)(n - t - 1));
  memmove(b->step_nodes + t, b->step_nodes + t + 1, sizeof *b->step_nodes * (size_t)(n - t - 1));
  memmove(b->step_kernel + t, b->step_kernel + t + 1, sizeof *b->step_kernel * (size_t)(n - t - 1));
  b->steps[n - 1] = st, b->notes[n - 1] = no, b->step_nodes[n - 1] = sn, b->step_kernel[n - 1] = sk;
  for (int h = 0; h < b->n_hints; h++)
    b->hints[h].step = b->hints[h].step == t ? n - 1 : b->hints[h].step - (b->hints[h].step > t);
  for (int h = 0; h < b->n_update_hints; h++) {
    int *at = &b->update_hints[h].step;
    *at = *at == t ? n - 1 : *at - (*at > t);
  }
  /* a unit of that step alone follows it (the merged step's cost is its
   * parts' units'); one of more steps loses it */
  for (int u = 0; u < b->n_units; u++) {
    CgUnit *un = &b->units[u];
    if (un->first == t && un->end == t + 1) {
      un->first = n - 1, un->end = n;
      continue;
    }
    un->first -= un->first > t;
    un->end -= un->end > t;
  }
  if (b->unit_first > t) b->unit_first--;
}

static void set_launch(CgBuild *b, RtStep *s, Kernel *k) {
  uint32_t idx = intern_kernel(b, k);
  RtLaunch *l = &s->launch;
  l->kernel = idx;
  l->contract = intern_contract(b, k, idx);
  memcpy(l->grid, k->grid, sizeof l->grid);
  memcpy(l->block, k->block, sizeof l->block);
  l->dynamic_shared_bytes = k->dynamic_shared_bytes;
  l->n_args = (uint32_t)k->n_params;
  RtArg *args = ARENA_ARRAY(&b->ctx->arena, RtArg, k->n_params + 1);
  for (int i = 0; i < k->n_params; i++) args[i] = k->params[i].arg;
  l->args = args;
}

void cg_launch(CgBuild *b, Kernel *k) {
  int t = merge_target(b, k);
  bool chained = false;
  if (t < 0 && (t = merge_down_target(b, k)) >= 0) {
    move_to_end(b, t);
    t = b->n_steps - 1;
  }
  if (t < 0) chained = (t = chain_target(b, k)) >= 0;
  /* Read in place on the scalar nest (at the step it will be part of): a
   * vectorized map is just as safe, but its two loops are harder to read. */
  note_inplace(b, k, t >= 0 ? t : b->n_steps, chained);
  CgStepNote note = cg_note_kernel(k);
  /* The kernel-IR passes, before the text exists. */
  if (!b->opts.no_vectorize) cg_vectorize(k);
  cg_unroll(k, b->opts.no_unroll ? 0 : b->opts.unroll > 0 ? b->opts.unroll : 8);
  cg_kernel_finish(k);
  Kernel *m = NULL;
  if (chained) {
    Kernel *a = b->step_kernel[t];
    m = cg_kernel_chain(a, k, a->phase_bar ? (RtRef){0} : cg_sync_words(b, CG_CHAIN_BAR_WORDS));
    if (m) chain_aliases(m);
  } else if (t >= 0) {
    m = cg_kernel_merge(b->step_kernel[t], k);
  }
  if (m) {
    RtStep *s = &b->steps[t];
    set_launch(b, s, m);
    b->step_kernel[t] = m;
    b->merged_at = t;
    s->label = arena_printf(&b->ctx->arena, "%s, %s", s->label, cg_label(b->ctx, k->node, k->what));
    CgStepNote *n = &b->notes[t];
    n->bytes += note.bytes, n->ops += note.ops, n->reads |= note.reads;
    return;
  }
  if (t >= 0) {
    /* its hints were for step t: it stays a step of its own */
    dl_internal(b->ctx, "kernel %s: no launch to share after all", k->hint);
    return;
  }
  RtStep *s = add_step(b, RT_STEP_LAUNCH, k->node, k->what);
  b->notes[b->n_steps - 1] = note;
  b->step_kernel[b->n_steps - 1] = k;
  set_launch(b, s, k);
}

void cg_gemm(CgBuild *b, const Node *n, const char *what, const RtGemm *g) {
  RtStep *s = add_step(b, RT_STEP_GEMM, n, what);
  s->gemm = *g;
  /* --tf32 is PyTorch's allow_tf32: matrix products too, not only the
   * convolutions' kernels */
  s->gemm.tf32 = g->dtype == RT_DT_F32 && cg_options(b)->tf32;
}


bool cg_gemm_bias_grad(CgBuild *b, const Node *n) {
  if (n->op != OP_REDUCE_SUM) return false;
  const CgGroup *grp = b->group;
  const Value *x = n->in[0];
  const TensorType *xt = &x->type;
  int n_axes;
  const int64_t *axes = ir_attr_ints(n, "axes", &n_axes);
  if ((grp && (grp->n != 1 || grp->n_siblings || grp->n_side)) || xt->rank != 2 ||
      n_axes != 1 || (axes[0] != 0 && axes[0] != -2) || n->out[0].type.dtype != xt->dtype ||
      (xt->dtype != TY_F32 && xt->dtype != TY_F16 && xt->dtype != TY_BF16) || b->n_steps <= b->n_init_steps)
    return false;
  /* The GEMM's own all-reduce may sit between (it reads the weight's
   * gradient; --bucket-mb moves it later, and the bits must not
   * change with it). */
  int at = b->n_steps - 1;
  while (at > b->n_init_steps && b->steps[at].kind == RT_STEP_ALLREDUCE) at--;
  RtStep *s = &b->steps[at];
  RtGemm *g = &s->gemm;
  if (s->kind != RT_STEP_GEMM || g->epilogue || g->batch != 1 || !g->trans_a || g->alpha != 1.0f ||
      g->beta != 0.0f || g->dtype != (uint32_t)xt->dtype || g->m != xt->dims[1] || g->k != xt->dims[0] ||
      g->lda != xt->dims[1] || !cg_same_ref(g->a, cg_ref(b, x)))
    return false;
  /* The GEMM's A is x as this reduction reads it: no kernel between. */
  g->epilogue = RT_EPILOGUE_BGRAD;
  g->bias = cg_ref(b, &n->out[0]);
  s->label = arena_printf(&b->ctx->arena, "%s, %s", s->label, cg_label(b->ctx, n, NULL));
  return true;
}

void cg_copy(CgBuild *b, const Node *n, const char *what, RtRef dst, RtRef src, uint64_t nbytes) {
  RtStep *s = add_step(b, RT_STEP_COPY, n, what);
  s->copy = (RtCopy){.dst = dst, .src = src, .nbytes = nbytes};
}

void cg_allreduce(CgBuild *b, const Node *n, RtRef dst, RtRef src, uint64_t nbytes) {
  RtStep *s = add_step(b, RT_STEP_ALLREDUCE, n, NULL);
  s->copy = (RtCopy){.dst = dst, .src = src, .nbytes = nbytes,
                     .reduce = n->op == OP_ALLREDUCE_SUM ? RT_REDUCE_SUM : RT_REDUCE_MEAN};
  b->allreduce_pending = true;
  b->allreduce_last = n;
}

static bool reads_allreduce(const Node *n) {
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i]->def->op == OP_ALLREDUCE_MEAN || n->in[i]->def->op == OP_ALLREDUCE_SUM) return true;
  return false;
}

/* The all-reduces run while the steps after them compute (the rest of
 * the backward); the first step that reads a result waits for all of
 * them: an all-reduce step of 0 bytes. */
static void wait_allreduces(CgBuild *b, const Node *n, const CgGroup *grp) {
  if (!b->allreduce_pending) return;
  bool reads = reads_allreduce(n);
  for (int i = 0; grp && !reads && i < grp->n; i++) reads = reads_allreduce(grp->members[i]);
  if (!reads) return;
  add_step(b, RT_STEP_ALLREDUCE, n, "wait for the all-reduces");
  b->allreduce_pending = false;
}

/* The end of the init steps or of a run's: all-reduces still in flight
 * are waited for there, as their results may be read by no node (an
 * output, or a value the other list reads). */
static void end_allreduces(CgBuild *b) {
  if (!b->allreduce_pending) return;
  add_step(b, RT_STEP_ALLREDUCE, b->allreduce_last, "wait for the all-reduces");
  b->allreduce_pending = false;
}

/* Outputs whose value lives elsewhere (an input, a param, another output)
 * get their bytes after everything else has run.  Naive storage keeps
 * every value alive to the end; a planner must keep these too. */
static void emit_output_copies(CgBuild *b) {
  Graph *g = b->g;
  for (int i = 0; i < g->n_outputs; i++) {
    const Value *v = g->outputs[i];
    RtRef dst = {.space = RT_SPACE_OUTPUT, .index = (uint32_t)i};
    RtRef src = cg_ref(b, v);
    if (cg_same_ref(src, dst)) continue;
    const char *what = arena_printf(&b->ctx->arena, "to output '%s'", g->output_names[i]);
    double c;
    if (cg_const_of(b, v, &c))
      cg_fill(b, v->def, what, dst, v->type.dtype, ir_type_numel(&v->type), c);
    else if (value_bytes(v))
      cg_copy(b, v->def, what, dst, src, value_bytes(v));
  }
}

/* A training step's updates (docs/training.md): after every other step,
 * each update output copied over its param's bytes in WEIGHTS, the one
 * write a run makes there (RtPlan.n_update_steps).  Appended after the
 * memory plan: they touch no arena. */
/* Whether step t touches [at, at + n) of ref's space and index, and
 * whether it writes there; false for a step rt_step_access cannot say
 * (a branch: then *unknown). */
static bool step_touches(CgBuild *b, int t, RtRef at, uint64_t n, bool *writes, bool *unknown) {
  RtPlan view = {.contracts = b->contracts, .n_contracts = (uint32_t)b->n_contracts};
  const RtStep *st = &b->steps[t];
  int max = st->kind == RT_STEP_LAUNCH ? (int)st->launch.n_args + 1 : 8;
  RtAccessRange *acc = ARENA_ARRAY(&b->ctx->arena, RtAccessRange, max);
  int k = rt_step_access(&view, st, acc, max);
  *writes = false;
  if (k < 0) return *unknown = true, false;
  bool met = false;
  for (int j = 0; j < k; j++) {
    RtRef r = acc[j].ref;
    if (r.space != at.space || r.index != at.index || !acc[j].nbytes || !n) continue;
    if (r.offset < at.offset + n && at.offset < r.offset + acc[j].nbytes) {
      met = true;
      *writes |= acc[j].write;
    }
  }
  return met;
}

/* Update output i computed straight over weight w, with no copy: when
 * one launch or GEMM writes the output, no other step reads the param's
 * old bytes after it (nor writes them before), and the writer itself
 * reads the param only as a hint says it may (each element before it
 * stores there).  The output's refs become the weight's and its desc
 * says where it lives (docs/training.md). */
static bool update_in_place(CgBuild *b, int i, int w) {
  const RtTensorDesc *wd = &b->weights[w];
  RtRef out = {.space = RT_SPACE_OUTPUT, .index = (uint32_t)i};
  int s = -1;
  bool writes, unknown = false;
  for (int t = b->n_init_steps; t < b->n_steps; t++)
    if (step_touches(b, t, out, wd->nbytes, &writes, &unknown) && writes) {
      if (s >= 0) return false;
      s = t;
    }
  if (s < 0 || unknown || (b->steps[s].kind != RT_STEP_LAUNCH && b->steps[s].kind != RT_STEP_GEMM)) return false;
  if (step_touches(b, s, wd->where, wd->nbytes, &writes, &unknown)) {
    bool hinted = false;
    for (int h = 0; h < b->n_update_hints; h++)
      hinted |= b->update_hints[h].step == s && cg_same_ref(b->update_hints[h].out, out) &&
                cg_same_ref(b->update_hints[h].in, wd->where);
    if (!hinted) return false;
    /* In a merged launch another part may read the param too, at the
     * same time as the hinted part writes it: one argument may name it. */
    const RtStep *st = &b->steps[s];
    if (st->kind == RT_STEP_LAUNCH && b->step_kernel[s] && b->step_kernel[s]->n_parts) {
      int named = 0;
      for (uint32_t j = 0; j < st->launch.n_args; j++) {
        const RtArg *arg = &st->launch.args[j];
        named += arg->kind == RT_ARG_PTR && arg->ref.space == wd->where.space &&
                 arg->ref.offset < wd->where.offset + wd->nbytes && wd->where.offset <= arg->ref.offset;
      }
      if (named != 1) return false;
    }
  }
  for (int t = b->n_init_steps; t < b->n_steps; t++)
    if (t != s && step_touches(b, t, wd->where, wd->nbytes, &writes, &unknown) && (t > s || writes)) return false;
  int n_refs = step_refs(b, RT_SPACE_OUTPUT, NULL);
  StepRef *refs = ARENA_ARRAY(&b->ctx->arena, StepRef, n_refs + 1);
  step_refs(b, RT_SPACE_OUTPUT, refs);
  for (int r = 0; r < n_refs; r++) {
    RtRef *ref = refs[r].ref;
    if (ref->index == (uint32_t)i)
      *ref = (RtRef){.space = RT_SPACE_WEIGHTS, .offset = wd->where.offset + ref->offset};
  }
  b->outputs[i].where = wd->where;
  return true;
}

static int emit_update_copies(CgBuild *b) {
  Graph *g = b->g;
  int count = 0;
  for (int i = 0; i < g->n_outputs; i++) {
    const char *param = ir_output_update(g, i);
    if (!param) continue;
    int in_place = update_weight(b, i);
    if (in_place >= 0 && !b->opts.no_update_in_place && update_in_place(b, i, in_place)) {
      b->n_updates_in_place++;
      continue;
    }
    const Value *v = g->outputs[i];
    int w = 0;
    while (w < b->n_weights && strcmp(b->weights[w].name, param) != 0) w++;
    if (w == b->n_weights || b->weights[w].nbytes != value_bytes(v)) {
      diag_error(b->ctx, v->def->loc, "the update of '%s' has no weight of %" PRIu64 " bytes to write%s", param,
                 value_bytes(v), w == b->n_weights ? "" : " (a lower precision keeps it in another type)");
      continue;
    }
    RtRef dst = b->weights[w].where, src = {.space = RT_SPACE_OUTPUT, .index = (uint32_t)i};
    cg_copy(b, v->def, arena_printf(&b->ctx->arena, "update '%s'", param), dst, src, value_bytes(v));
    count++;
  }
  return count;
}

/* A kernel that later joined another's launch (merge_launch) may have
 * no launch of its own left: it leaves the plan, with its contracts. */
static void drop_unlaunched(CgBuild *b) {
  Arena *a = &b->ctx->arena;
  int *kmap = ARENA_ARRAY(a, int, b->n_kernels + 1), *cmap = ARENA_ARRAY(a, int, b->n_contracts + 1);
  for (int i = 0; i < b->n_kernels; i++) kmap[i] = -1;
  for (int i = 0; i < b->n_contracts; i++) cmap[i] = -1;
  for (int s = 0; s < b->n_steps; s++)
    if (b->steps[s].kind == RT_STEP_LAUNCH) kmap[b->steps[s].launch.kernel] = cmap[b->steps[s].launch.contract] = 0;
  int nk = 0, nc = 0;
  for (int i = 0; i < b->n_kernels; i++) {
    if (kmap[i] < 0) continue;
    kmap[i] = nk;
    b->kernels[nk] = b->kernels[i], b->keys[nk] = b->keys[i], b->texts[nk] = b->texts[i], b->names[nk] = b->names[i];
    nk++;
  }
  for (int i = 0; i < b->n_contracts; i++) {
    if (cmap[i] < 0) continue;
    cmap[i] = nc;
    b->contracts[nc] = b->contracts[i];
    b->contracts[nc].kernel = (uint32_t)kmap[b->contracts[i].kernel];
    nc++;
  }
  for (int s = 0; s < b->n_steps; s++) {
    RtLaunch *l = &b->steps[s].launch;
    if (b->steps[s].kind != RT_STEP_LAUNCH) continue;
    l->kernel = (uint32_t)kmap[l->kernel];
    l->contract = (uint32_t)cmap[l->contract];
  }
  /* the indexes by key and name are no longer asked */
  b->n_kernels = nk, b->n_contracts = nc;
}

/* Kernel text a code part holds at least (CgOptions.code_part_bytes):
 * NVRTC parses the prelude once a part (about 0.06 s), so a small plan
 * stays one part. */
enum { PART_BYTES = 48 * 1024 };

typedef struct BySize {
  size_t bytes;
  int kernel;
} BySize;

static int larger_first(const void *pa, const void *pb) {
  const BySize *a = pa, *b = pb;
  return a->bytes != b->bytes ? (a->bytes < b->bytes ? 1 : -1) : a->kernel - b->kernel;
}

/* Deals the kernels into code parts of about equal text (the largest
 * first, each to the lightest part), PART_BYTES a part or more, at most
 * RT_MAX_CODE_PARTS: NVRTC compiles the parts side by side
 * (rt_nvrtc_run_jobs).  Returns how many. */
static uint32_t split_code(CgBuild *b) {
  size_t total = 0;
  BySize *order = ARENA_ARRAY(&b->ctx->arena, BySize, b->n_kernels + 1);
  for (int i = 0; i < b->n_kernels; i++) {
    order[i] = (BySize){strlen(b->texts[i]), i};
    total += order[i].bytes;
  }
  size_t want = total / (b->opts.code_part_bytes ? b->opts.code_part_bytes : PART_BYTES);
  uint32_t n = want < 1 ? 1 : want > RT_MAX_CODE_PARTS ? RT_MAX_CODE_PARTS : (uint32_t)want;
  if (n > (uint32_t)b->n_kernels) n = b->n_kernels > 0 ? (uint32_t)b->n_kernels : 1;
  qsort(order, (size_t)b->n_kernels, sizeof *order, larger_first);
  size_t load[RT_MAX_CODE_PARTS] = {0};
  for (int i = 0; i < b->n_kernels; i++) {
    uint32_t best = 0;
    for (uint32_t q = 1; q < n; q++)
      if (load[q] < load[best]) best = q;
    load[best] += order[i].bytes;
    b->kernels[order[i].kernel].part = best;
  }
  return n;
}

static const char *join_source(CgBuild *b, uint32_t parts) {
  const char *prelude = cg_cuda_prelude(b->ctx, b->needs_fp16, b->needs_bf16, b->needs_tc);
  if (b->needs_philox) prelude = arena_printf(&b->ctx->arena, "%s%s", prelude, cg_cuda_philox());
  if (b->needs_grid_sync) prelude = arena_printf(&b->ctx->arena, "%s%s", prelude, cg_grid_sync_prelude());
  if (b->needs_arrival) prelude = arena_printf(&b->ctx->arena, "%s%s", prelude, cg_arrival_prelude());
  size_t len = strlen(prelude);
  enum { GUARD = 64 }; /* "#if !defined(DL_PART) || DL_PART == 15\n" and "#endif\n" */
  for (int i = 0; i < b->n_kernels; i++) len += strlen(b->texts[i]) + 1 + (parts > 1 ? GUARD : 0);
  char *s = arena_alloc(&b->ctx->arena, len + 1), *p = s;
  p = stpcpy(p, prelude);
  for (int i = 0; i < b->n_kernels; i++) {
    *p++ = '\n';
    if (parts > 1) p += sprintf(p, "#if !defined(DL_PART) || DL_PART == %" PRIu32 "\n", b->kernels[i].part);
    p = stpcpy(p, b->texts[i]);
    if (parts > 1) p = stpcpy(p, p[-1] == '\n' ? "#endif\n" : "\n#endif\n");
  }
  *p = 0;
  return s;
}

static void note_unit(CgBuild *b, const Node *n, const CgGroup *grp, int first) {
  double elsewhere = b->flops_elsewhere;
  b->flops_elsewhere = 0;
  int end = b->n_steps;
  if (end == first) {
    /* its one launch joined an earlier step: its cost is part of that one's */
    if (b->merged_at < 0) return;
    first = b->merged_at, end = first + 1;
  }
  if (b->n_units == b->cap_units) {
    int old = b->cap_units, cap = old ? 2 * old : 64;
    b->units = arena_realloc(&b->ctx->arena, b->units, sizeof(CgUnit) * (size_t)old,
                             sizeof(CgUnit) * (size_t)cap);
    b->cap_units = cap;
  }
  b->units[b->n_units++] =
      (CgUnit){.node = n, .group = grp, .first = first, .end = end, .flops_elsewhere = elsewhere};
}

/* ---- branches: the steps of an If's branch skipped when not taken ---- */

/* The frames of guard gd the plan can branch on before node n: those
 * whose condition an earlier step computed (or a source holds) in memory.
 * A frame it cannot is computed whatever the condition. */
static const Guard *branchable(CgBuild *b, const Guard *gd) {
  const Guard *keep = gd;
  for (const Guard *f = gd; f; f = f->outer) {
    const Node *d = f->cond->def;
    if (f->loop) continue; /* its loop_begin put enter in memory (cg_lower_loop) */
    bool ready = ir_ops[d->op].cls == K_SOURCE ? d->op != OP_CONST : b->done[d->id];
    if (!ready || !cg_has_ref(b, f->cond) || f->depth > MAX_BRANCH_DEPTH) keep = f->outer;
  }
  return keep;
}

static void rotate_steps(CgBuild *b, int mark, int k);
static int close_loop(CgBuild *b, const Guard *f, int at, int end);

/* Ends the open branches past the first keep: each skips the steps
 * from it up to step end, a loop's after the steps that end its step
 * (close_loop), put at end.  Returns where the steps at end now are. */
static int close_branches(CgBuild *b, int keep, int end) {
  while (b->n_open > keep) {
    int at = b->open_step[--b->n_open];
    if (b->open[b->n_open]->loop) end = close_loop(b, b->open[b->n_open], at, end);
    b->steps[at].branch.skip = (uint32_t)(end - at - 1);
  }
  return end;
}

/* Steps [mark, n_steps) rotated by k: the last k first. */
static void rotate_steps(CgBuild *b, int mark, int k) {
  int n = b->n_steps - mark;
  if (n <= 0) return;
  Arena *a = &b->ctx->arena;
  RtStep *st = ARENA_ARRAY(a, RtStep, n);
  CgStepNote *no = ARENA_ARRAY(a, CgStepNote, n);
  const Node **sn = ARENA_ARRAY(a, const Node *, n);
  Kernel **sk = ARENA_ARRAY(a, Kernel *, n);
  for (int i = 0; i < n; i++) {
    int from = mark + (i + n - k) % n;
    st[i] = b->steps[from], no[i] = b->notes[from], sn[i] = b->step_nodes[from], sk[i] = b->step_kernel[from];
  }
  /* the launches' in-place hints follow their steps */
  for (int h = 0; h < b->n_hints; h++)
    if (b->hints[h].step >= mark) b->hints[h].step = mark + (b->hints[h].step - mark + k) % n;
  for (int h = 0; h < b->n_update_hints; h++)
    if (b->update_hints[h].step >= mark) b->update_hints[h].step = mark + (b->update_hints[h].step - mark + k) % n;
  memcpy(b->step_kernel + mark, sk, sizeof *sk * (size_t)n);
  memcpy(b->steps + mark, st, sizeof *st * (size_t)n);
  memcpy(b->notes + mark, no, sizeof *no * (size_t)n);
  memcpy(b->step_nodes + mark, sn, sizeof *sn * (size_t)n);
}

/* Node n (or its group) lowered into steps [mark, n_steps): puts them
 * inside the branches of its guard, those it shares with the open ones
 * kept, the others closed before them, its own opened just before them.
 * Returns where its own steps now start. */
static int place_in_branches(CgBuild *b, const Node *n, const CgGroup *grp, int mark) {
  if (b->n_steps == mark) return mark;
  const Guard *gd = n->guard;
  for (int i = 0; grp && i < grp->n; i++) gd = ir_guard_common(gd, grp->members[i]->guard);
  gd = branchable(b, gd);
  const Guard *chain[MAX_BRANCH_DEPTH];
  int depth = 0;
  for (const Guard *f = gd; f; f = f->outer) depth++;
  int i = depth;
  for (const Guard *f = gd; f; f = f->outer) chain[--i] = f;
  int keep = 0;
  while (keep < b->n_open && keep < depth && b->open[keep] == chain[keep]) keep++;
  mark = close_branches(b, keep, mark);
  for (i = keep; i < depth; i++) {
    RtStep *s = add_step(b, RT_STEP_BRANCH, n, "branch");
    s->branch = (RtBranch){.cond = cg_ref(b, chain[i]->cond), .when = chain[i]->when};
    b->open[b->n_open] = chain[i];
    b->open_step[b->n_open++] = mark + (i - keep);
  }
  if (depth > keep) rotate_steps(b, mark, depth - keep);
  return mark + (depth - keep);
}

/* One node at a time, or a whole fusion group at its root: those of the
 * init graph (init) or the others; a run's inside the branches of their
 * guards. */
static void lower_nodes(CgBuild *b, CgGroup **groups, bool init) {
  for (Node *n = b->g->first; n && !diag_should_stop(b->ctx); n = n->next) {
    if (b->init.node[n->id] != init) continue;
    b->unit_first = b->n_steps; /* merge_launch may move a step before it to the end */
    b->merged_at = -1;
    if (n->group < 0 || groups[n->id]) wait_allreduces(b, n, n->group < 0 ? NULL : groups[n->id]);
    if (n->group < 0) {
      cg_lower_node(b, n);
      int first = init ? b->unit_first : place_in_branches(b, n, NULL, b->unit_first);
      note_unit(b, n, NULL, first);
      b->done[n->id] = true;
    } else if (groups[n->id]) {
      b->group = groups[n->id];
      cg_lower_group(b, groups[n->id]);
      b->group = NULL;
      int first = init ? b->unit_first : place_in_branches(b, n, groups[n->id], b->unit_first);
      note_unit(b, NULL, groups[n->id], first);
      for (int i = 0; i < groups[n->id]->n; i++) b->done[groups[n->id]->members[i]->id] = true;
    }
  }
  close_branches(b, 0, b->n_steps);
}

/* ---- loops of the plan (ir/loop.c): a branch on enter around the
 * body's steps, which end with the next values' copies over the carried
 * ones and a repeat while keep holds ---- */

/* v's bytes are one of loop_begin bg's carried values', which the step's
 * copies overwrite. */
static bool reads_carried(CgBuild *b, const Node *bg, const Value *v) {
  RtRef r = cg_ref(b, v);
  for (int i = 0; i < bg->n_out; i++)
    if (cg_same_ref(r, cg_ref(b, &bg->out[i]))) return true;
  return false;
}

/* The steps that end a step of loop frame f (BRANCH at step at), put at
 * end: each next value over its carried value (a next that is itself a
 * carried value, as a body that swaps two gives, through scratch first,
 * and keep too), then the repeat, back to the step after at. */
static int close_loop(CgBuild *b, const Guard *f, int at, int end) {
  const Node *bg = f->loop, *e = b->loop_end_of[bg->id];
  int k = e->n_out, from = b->n_steps;
  RtRef *src = ARENA_ARRAY(&b->ctx->arena, RtRef, k + 2);
  for (int i = 0; i <= k; i++) {
    const Value *v = e->in[k + i]; /* keep, then the nexts */
    src[i] = cg_ref(b, v);
    if (reads_carried(b, bg, v) && !(i > 0 && v == &bg->out[i - 1])) {
      RtRef s = cg_scratch(b, e, value_bytes(v));
      cg_copy(b, e, "next", s, src[i], value_bytes(v));
      src[i] = s;
    }
  }
  for (int i = 0; i < k; i++) {
    RtRef c = cg_ref(b, &bg->out[i]);
    if (!cg_same_ref(c, src[1 + i])) cg_copy(b, e, "next", c, src[1 + i], value_bytes(&bg->out[i]));
  }
  RtStep *s = add_step(b, RT_STEP_REPEAT, e, "repeat");
  int added = b->n_steps - from;
  s->branch = (RtBranch){.cond = src[0], .when = 1, .skip = (uint32_t)(end + added - 1 - (at + 1))};
  rotate_steps(b, end, added);
  return end + added;
}

bool cg_lower_loop(CgBuild *b, const Node *n) {
  if (n->op == OP_LOOP_BEGIN) {
    cg_ref(b, n->in[0]); /* the branch into the body reads it, a const too */
    for (int i = 0; i < n->n_out; i++)
      cg_copy(b, n, "init", cg_ref(b, &n->out[i]), cg_ref(b, n->in[1 + i]), value_bytes(&n->out[i]));
  } else {
    const Node *bg = n->in[0]->def;
    for (int i = 0; i < n->n_out; i++)
      cg_copy(b, n, "result", cg_ref(b, &n->out[i]), cg_ref(b, &bg->out[i]), value_bytes(&n->out[i]));
  }
  return true;
}

/* Init steps see the weights, the derived region and arena values of
 * their own: a const they need in memory is filled into the arena by an
 * init step, and nothing in the arena lasts from init into a run (init
 * runs once, the run many times), so a run gets homes of its own. */
static void begin_init(CgBuild *b, RtRef *run_home, bool *run_has_home) {
  memcpy(run_home, b->home, sizeof *run_home * (size_t)b->n_values);
  memcpy(run_has_home, b->has_home, sizeof *run_has_home * (size_t)b->n_values);
  for (int v = 0; v < b->n_values; v++)
    if (b->has_home[v] && b->home[v].space == RT_SPACE_OUTPUT) b->has_home[v] = false;
}

/* Back to a run's homes, keeping those the init graph's values got (an
 * alias of a param or of the derived region). */
static void end_init(CgBuild *b, const RtRef *run_home, const bool *run_has_home) {
  b->n_init_steps = b->n_steps;
  for (Node *n = b->g->first; n; n = n->next) {
    if (b->init.node[n->id]) continue;
    for (int i = 0; i < n->n_out; i++) {
      int v = n->out[i].id;
      b->home[v] = run_home[v];
      b->has_home[v] = run_has_home[v];
    }
  }
}

bool cg_compile(Graph *g, CgResult *out) { return cg_compile_opts(g, NULL, out); }

static bool build(Graph *g, const CgOptions *o, uint64_t chain_bound, CgResult *out, bool *held_back) {
  Ctx *c = g->ctx;
  memset(out, 0, sizeof *out);
  int errors = c->diag.errors;
  ir_guards_fix(g); /* after every pass; a group's branch is its members' widest guard */
  ir_number(g);
  CgBuild *b = ARENA_NEW(&c->arena, CgBuild);
  b->ctx = c;
  b->g = g;
  b->merge_from = -1;
  b->chain_bound = chain_bound;
  if (o) b->opts = *o;
  for (Node *n = g->first; n; n = n->next) b->n_values += n->n_out;
  b->home = ARENA_ARRAY(&c->arena, RtRef, b->n_values + 1);
  b->has_home = ARENA_ARRAY(&c->arena, bool, b->n_values + 1);
  b->value = ARENA_ARRAY(&c->arena, const Value *, b->n_values + 1);
  b->unshaped = ARENA_ARRAY(&c->arena, const Value *, b->n_values + 1);
  b->done = ARENA_ARRAY(&c->arena, bool, (g->last ? g->last->id : 0) + 2);
  b->loop_end_of = ARENA_ARRAY(&c->arena, const Node *, (g->last ? g->last->id : 0) + 2);
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_LOOP_END) b->loop_end_of[n->in[0]->def->id] = n;
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_out; i++) {
      const Value *v = &n->out[i];
      b->value[v->id] = v;
      b->unshaped[v->id] = n->op == OP_RESHAPE ? b->unshaped[n->in[0]->id] : v;
    }
  CgGroup **groups = cg_find_groups(c, g);
  b->init = cg_split_init(c, g, groups);
  if (!b->opts.no_gemm_batch) b->batch_of = cg_find_gemm_batches(c, g, groups, &b->init);
  if (!plan_storage(b)) return false;
  /* The init graph first, into the init steps; then a run's. */
  RtRef *run_home = ARENA_ARRAY(&c->arena, RtRef, b->n_values + 1);
  bool *run_has_home = ARENA_ARRAY(&c->arena, bool, b->n_values + 1);
  begin_init(b, run_home, run_has_home);
  lower_nodes(b, groups, true);
  end_allreduces(b);
  copy_batch_weights(b);
  end_init(b, run_home, run_has_home);
  b->merge_from = b->n_steps;
  for (Node *n = g->first; n; n = n->next)
    if (n->guard) b->merge_from = -1; /* steps move between branches */
  lower_nodes(b, groups, false);
  if (c->diag.errors > errors) return false;
  end_allreduces(b);
  emit_output_copies(b);
  plan_memory(b);
  int n_updates = emit_update_copies(b);
  if (c->diag.errors > errors) return false;
  drop_unlaunched(b);

  RtPlan *p = ARENA_NEW(&c->arena, RtPlan);
  p->magic = RT_PLAN_MAGIC;
  p->version = RT_PLAN_VERSION;
  p->model_name = g->name ? g->name : "model";
  p->n_code_parts = split_code(b);
  p->source = join_source(b, p->n_code_parts);
  p->n_kernels = (uint32_t)b->n_kernels;
  p->kernels = b->kernels;
  p->n_contracts = (uint32_t)b->n_contracts;
  p->contracts = b->contracts;
  p->status_bytes = b->status_top;
  p->sync_bytes = b->sync_top;
  p->n_init_steps = (uint32_t)b->n_init_steps;
  p->init_steps = b->n_init_steps ? b->steps : NULL;
  p->n_steps = (uint32_t)(b->n_steps - b->n_init_steps);
  p->steps = b->steps ? b->steps + b->n_init_steps : NULL;
  p->n_update_steps = (uint32_t)n_updates;
  p->arena_bytes = align_up(b->arena_top);
  p->weights_bytes = align_up(b->weights_top);
  p->derived_bytes = align_up(b->derived_top);
  p->n_weights = (uint32_t)b->n_weights;
  p->weights = b->weights;
  p->n_inputs = (uint32_t)b->n_inputs;
  p->inputs = b->inputs;
  p->n_outputs = (uint32_t)g->n_outputs;
  p->outputs = b->outputs;
  out->plan = p;
  out->source = p->source;
  out->n_buffers = b->n_buffers;
  out->buffers = b->buffers;
  out->naive_bytes = b->naive_bytes;
  out->lower_bound = b->lower_bound;
  out->memplan = b->memplan;
  out->n_inplace = b->n_inplace;
  out->step_costs = cg_plan_costs(c, b->steps, b->notes, b->n_steps, b->units, b->n_units);
  out->step_nodes = b->step_nodes;
  char err[512];
  if (!cg_check_memory(out, err, sizeof err)) dl_internal(c, "memory plan: %s", err);
  if (held_back) *held_back = b->chain_held_back;
  return true;
}

/* With chains, twice: chain_target's rule knows only the steps so far,
 * so it refuses a chain whose bytes outlive the peak of those steps, in
 * a training step's forward too, where the true peak (at the loss) is
 * still to come.  The second build may hold a step's live bytes up to
 * the first's whole arena, and is kept where its arena is no larger
 * (ResNet-50's step: 143 launches to 111, the same arena); only where
 * the first kept a chain apart for its memory.  Lowering is
 * a small part of a compile; NVRTC, which runs once, the most of it. */
bool cg_compile_opts(Graph *g, const CgOptions *o, CgResult *out) {
  if (!o || !o->merge_launches || o->no_chain_launches) return build(g, o, 0, out, NULL);
  CgResult strict;
  bool held_back = false;
  if (!build(g, o, 0, &strict, &held_back)) return *out = strict, false;
  if (!held_back) return *out = strict, true;
  if (!build(g, o, strict.plan->arena_bytes, out, NULL) || out->plan->arena_bytes > strict.plan->arena_bytes)
    *out = strict;
  return true;
}

/* Pipeline parallel training for `dlcc train --pipeline=S` (pipeline.h
 * says the contract, docs/parallel.md the design).  Rank s holds stage s
 * as three plans compiled from the stage's graphs: a forward (stage
 * inputs to the values it passes on; the last stage has none), a
 * backward that recomputes the forward from the stage inputs it kept and
 * returns the gradients of its inputs and parameters (GPipe's
 * re-materialisation, through the ordinary autodiff), and an optimizer
 * step fed the gradients accumulated over the micro-batches. */
#include "config.h"

#include "driver/pipeline.h"

#include "driver/comm.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/model.h"
#include "frontend/ast.h"
#include "frontend/dims.h"
#include "frontend/onnx.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/autodiff.h"
#include "passes/optim.h"
#include "passes/pass.h"
#include "passes/stages.h"
#include "passes/tensor_par.h"

/* Message tags: what travels, and the cut value's number.  Messages
 * between two ranks under one tag arrive in the order sent (MPI's
 * non-overtaking rule), so micro-batches need no number of their own. */
enum { TAG_ACT, TAG_GRAD, TAG_LOSS, TAG_GATHER, TAG_KINDS };
#define TAG(kind, k) ((kind) + TAG_KINDS * ((k) % 4096))

/* How a parameter is held under tensor parallelism inside the stage
 * (the forward and backward plans'; the optimizer's holds it whole). */
typedef enum { TP_WHOLE, TP_SHARDED, TP_PART } TpHold;

typedef struct StageParam {
  const char *name;
  size_t bytes;      /* as every plan of the stage holds it: a shard's part */
  int rank;          /* its whole dims */
  int64_t dims[DLC_MAX_RANK];
  int grad_out;      /* the backward's output "NAME.grad" */
  /* TP_SHARDED: every plan holds this rank's part, the optimizer's state
   * too; TP_PART: whole, the backward's gradient zero but for this rank's
   * rows (summed over the stage's ranks for the optimizer) */
  TpHold hold;
  float *acc;        /* the backward's gradient summed over the micro-batches */
  float *grad;       /* what the optimizer takes (acc itself but for TP_PART) */
} StageParam;

typedef struct DeferredBn {
  const char *mean, *var; /* the running statistics' names */
  double momentum;
  int64_t channels, count; /* values per channel in a micro-batch */
  float *old_mean, *old_var, *new_mean, *new_var;
  double *sum_mean, *sum_var, *sum_sq; /* over the micro-batches: means, (count - 1) var, count mean^2 */
} DeferredBn;

struct Pipeline {
  PipeConfig c;
  int s, n_stages, m_count;
  int64_t b; /* samples per micro-batch */
  Ctx ctx;   /* the whole model's graph and the split */
  Graph *g;
  StageSplit sp;
  int *param_stage; /* by node id: the stage of a param's readers, -1 when none */
  dlc_model *fwd, *bwd;
  dlc_train *opt;
  int n_in, n_out;            /* values of cut s and cut s + 1 */
  size_t *in_bytes, *out_bytes;
  int *in_grad_out;           /* the backward's output "stage_in.K.grad" */
  int n_params;
  StageParam *params;
  /* The stage's batchnorm running statistics: the backward plan
   * recomputes each micro-batch's forward and updates them, and it alone
   * holds them (the forward normalizes with the batch's, the optimizer
   * does not train them). */
  int n_states;
  const char **state_names;
  size_t *state_bytes;
  /* --deferred-bn: the stage's batchnorms and, per global batch, the
   * running statistics before it and the sums of the micro-batches'
   * statistics (recovered from each one's update, then undone). */
  int n_bns;
  DeferredBn *bns;
  unsigned char **stash;      /* [m][k]: the stage inputs of micro-batch m, kept for its backward */
  unsigned char **fsend, **bsend; /* [m][k]: activations and input gradients in flight */
  unsigned char **dy;         /* [k]: the gradient of stage output k */
  void **bufs;                /* per data array: a micro-batch */
  float loss;
  /* The clip's norm or f16's loss scaler: both span every stage's
   * gradients, so each step the stages sum their share (grad_stats) and
   * feed the totals to their optimizers (dlc_optimizer.grad_stats_input). */
  bool clip, loss_scaling;
  /* The forward's and backward's all-reduces: sums over the tensor
   * group, means (--sync-bn's statistics) over the replicas */
  DistComm comm;
  int sync_bn; /* the replicas' count under --sync-bn, else 0 */
  /* --bucket-mb: the gradients' average over the stage's D copies in
   * buckets of consecutive parameters (bucket b holds params
   * [bucket_first[b], bucket_first[b + 1])); n_buckets 0: one each */
  int n_buckets;
  int *bucket_first;
  float **bucket;
  bool speaks;   /* the first rank of its stage in the first pipeline (the full batch's plans) */
  /* Dropout's state when the stage has dropouts: the whole model's seed
   * and step count (one process's dlcc.step, advanced per global batch,
   * not per plan run), set into both plans before each micro-batch with
   * the micro-batch's first sample, so the masks are one process's. */
  bool dropout;
  int64_t seed, step;
};

static bool is_stage_name(const char *name) {
  return strncmp(name, "stage_", 6) == 0 || strncmp(name, "grad.", 5) == 0 || strncmp(name, "dlcc.", 5) == 0;
}

static bool run_failed(dlc_model *m, char *err, size_t errlen) {
  snprintf(err, errlen, "%s", dlc_error(m));
  return false;
}

/* ---- the whole model and its split ---- */

typedef struct BuildJob {
  const PipeConfig *c;
  int64_t micro_batch;
  Graph *g;
} BuildJob;

/* The forward graph with its loss, as dlc_train_compile builds it before
 * autodiff: lowered for training, the loss appended. */
static int build_graph(Ctx *ctx, void *data) {
  BuildJob *job = data;
  const PipeConfig *c = job->c;
  size_t n = strlen(c->model_path);
  const dlc_options *mo = &c->train->model;
  const TrainData *d = c->data;
  Define *defs = ARENA_ARRAY(&ctx->arena, Define, mo->n_defines + 1);
  for (int i = 0; i < mo->n_defines; i++) defs[i] = (Define){mo->defines[i].name, mo->defines[i].value};
  /* The data's arrays at a micro-batch: they bind the inputs' shapes. */
  InputShape *shapes = ARENA_ARRAY(&ctx->arena, InputShape, d->n + 1);
  for (int i = 0; i < d->n; i++) {
    int64_t *dims = ARENA_ARRAY(&ctx->arena, int64_t, d->a[i].t.rank);
    dims[0] = job->micro_batch;
    for (int k = 1; k < d->a[i].t.rank; k++) dims[k] = d->a[i].t.dims[k];
    shapes[i] = (InputShape){d->a[i].name, d->a[i].t.rank, dims};
  }
  Graph *g;
  const SrcFile *f = NULL;
  if (n > 5 && strcmp(c->model_path + n - 5, ".onnx") == 0) {
    /* The weights come from the whole model's step (pipe_bind), which
     * holds the initializers: these are dropped. */
    OnnxOptions oo = {.n_defines = mo->n_defines, .defines = defs, .n_input_shapes = d->n, .input_shapes = shapes,
                      .loop_bound = mo->loop_bound};
    TensorMap params;
    g = fe_onnx_import(ctx, c->model_path, &oo, &params);
    ir_tensor_map_free(&params);
  } else if (!(f = ctx_load_file(ctx, c->model_path))) {
    return 1;
  } else if (n > 3 && strcmp(c->model_path + n - 3, ".ir") == 0) {
    g = ir_parse(ctx, f);
  } else {
    Program *p = fe_parse(ctx, f);
    if (!p) return 1;
    LowerOptions lo = {.model = mo->model, .n_defines = mo->n_defines, .defines = defs, .training = true,
                       .n_input_shapes = d->n, .input_shapes = shapes};
    g = fe_lower(ctx, p, &lo);
  }
  if (!g || !ir_verify(g)) return 1;
  if (c->loss) {
    const TrainArray *target = train_data_find(c->data, TRAIN_TARGET);
    TensorType tt = {0}, *tp = NULL;
    if (target && target->t.dtype < RT_F64) {
      tt.dtype = (DType)target->t.dtype;
      tt.rank = target->t.rank;
      tt.dims[0] = job->micro_batch;
      for (int k = 1; k < target->t.rank; k++) tt.dims[k] = target->t.dims[k];
      tp = &tt;
    }
    if (!pass_append_loss(g, c->loss, c->loss_output, TRAIN_TARGET, tp) || !ir_verify(g)) return 1;
  }
  /* --freeze on the whole model, before the split: a stage trains its
   * params but the frozen, whichever stage holds them */
  if (mo->freeze && !pass_freeze_params(g, mo->freeze)) return 1;
  job->g = g;
  return 0;
}

/* The `as` scopes a stage computes, in order, each once: "fc1, fc2". */
static void print_scopes(FILE *f, Graph *g, const StageSplit *sp, int s) {
  const char *prev = NULL;
  int shown = 0;
  for (Node *n = g->first; n; n = n->next) {
    if (sp->stage[n->id] != s || !n->scope || !n->scope[0]) continue;
    if (prev && strcmp(prev, n->scope) == 0) continue;
    bool again = false;
    for (Node *m = g->first; m != n && !again; m = m->next)
      again = sp->stage[m->id] == s && m->scope && strcmp(m->scope, n->scope) == 0;
    if (again) continue;
    fprintf(f, "%s%s", shown++ ? ", " : "", n->scope);
    prev = n->scope;
  }
  if (!shown) fputs("(no named layers)", f);
}

void pipe_print_split(Graph *g, const StageSplit *sp, int M, int64_t b, const char *schedule, int D,
                      int64_t per_pipeline, int T) {
  int S = sp->n_stages;
  if (S == 1 && T == 1) {
    printf("gradient accumulation: %d micro-batch%s", M, M == 1 ? "" : "es");
    if (b > 0) printf(" of %" PRId64, b);
    printf(", one optimizer step a batch\n");
    if (D > 1) printf("  data parallel: %d ranks, each %" PRId64 " samples of every batch\n", D, per_pipeline);
    return;
  }
  printf("pipeline: %d stage%s%s, %d micro-batch%s", S, S == 1 ? "" : "s", sp->marked ? " at the model's stage() marks" : "", M,
         M == 1 ? "" : "es");
  if (b > 0) printf(" of %" PRId64, b);
  printf(", %s; bubble (S-1)/(M+S-1) = %.1f%%\n", schedule, 100.0 * (S - 1) / (double)(M + S - 1));
  if (T > 1)
    printf("  tensor parallel: each stage on %d consecutive ranks (world rank w is rank w %% %d of stage (w / %d) %% "
           "%d of pipeline w / %d)\n", T, T, T, S, S * T);
  if (D > 1 && T == 1)
    printf("  data parallel: %d pipelines of %d stage%s (world rank w is stage w %% %d of pipeline w / %d), "
           "each %" PRId64 " samples of every batch\n", D, S, S == 1 ? "" : "s", S, S, per_pipeline);
  else if (D > 1)
    printf("  data parallel: %d pipelines of %d stage%s of %d ranks, each %" PRId64 " samples of every batch\n", D, S,
           S == 1 ? "" : "s", T, per_pipeline);
  for (int s = 0; s < S; s++) {
    if (s > 0) {
      const StageCut *c = &sp->cut[s];
      printf("  cut %d|%d: %d tensor%s, %.0f bytes:", s - 1, s, c->n, c->n == 1 ? "" : "s", c->bytes);
      for (int k = 0; k < c->n; k++) {
        char ty[128];
        printf(" %s", ir_type_str(&c->values[k]->type, ty, sizeof ty));
      }
      printf("\n");
    }
    if (T > 1)
      printf("  stage %d (ranks %d-%d)", s, s * T, s * T + T - 1);
    else
      printf("  stage %d (rank %d)", s, s);
    printf(": %d op%s, %.1f%% of the cost, %.0f bytes of parameters: ", sp->n_nodes[s], sp->n_nodes[s] == 1 ? "" : "s",
           sp->total > 0 ? 100.0 * sp->cost[s] / sp->total : 0.0, sp->param_bytes[s]);
    print_scopes(stdout, g, sp, s);
    printf("\n");
  }
  fflush(stdout);
}

static void print_split(Pipeline *p) {
  pipe_print_split(p->g, &p->sp, p->m_count, p->b, p->c.one_f_one_b ? "1F1B" : "GPipe",
                   p->c.replicas ? p->c.replicas->size : 1, p->c.batch, p->c.tensor ? p->c.tensor->size : 1);
}

/* ---- this rank's plans ---- */

typedef struct StageGraphs {
  Pipeline *p;
  Graph *graph[3];
} StageGraphs;

static int build_stage(Ctx *ctx, void *data) {
  (void)ctx;
  StageGraphs *sg = data;
  Pipeline *p = sg->p;
  bool last = p->s == p->n_stages - 1;
  for (int k = STAGE_FORWARD; k <= STAGE_OPTIMIZER; k++)
    if ((k != STAGE_FORWARD || !last) && !(k == STAGE_OPTIMIZER && !p->sp.param_bytes[p->s]) &&
        !(sg->graph[k] = pass_stage_graph(p->g, &p->sp, p->s, (StageKind)k, p->sync_bn)))
      return 1;
  return 0;
}

/* The model options a stage's IR compiles with: the backend and
 * precision the user gave; shapes and defines are in the IR already. */
static dlc_options stage_options(const Pipeline *p) {
  dlc_options o = p->c.train->model;
  o.model = NULL;
  o.n_defines = 0;
  o.defines = NULL;
  o.n_input_shapes = 0;
  o.input_shapes = NULL;
  o.freeze = NULL; /* marked in the IR already (the split graph's) */
  return o;
}

static TpHold hold_of(dlc_model *m, const char *name, int *axis);

/* Under tensor parallelism the optimizer holds this rank's part of each
 * parameter the backward shards, and so of its state (Megatron's
 * memory): the param and its gradient input ("grad.NAME") in the
 * optimizer's graph take the part's shape, and the types after them
 * follow. */
static bool shard_optimizer_graph(Pipeline *p, Graph *g, char *err, size_t errlen) {
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_PARAM && n->op != OP_INPUT) continue;
    const char *name = ir_attr_str(n, "name");
    if (n->op == OP_INPUT && strncmp(name, "grad.", 5) == 0) name += 5;
    int axis;
    if (hold_of(p->bwd, name, &axis) != TP_SHARDED) continue;
    TensorType *t = &n->out[0].type;
    if (axis >= t->rank || t->dims[axis] % p->c.tensor->size)
      return snprintf(err, errlen, "stage %d: '%s' does not shard %d ways", p->s, name, p->c.tensor->size), false;
    t->dims[axis] /= p->c.tensor->size;
  }
  char why[256];
  for (Node *n = g->first; n; n = n->next)
    if (n->op != OP_PARAM && n->op != OP_INPUT && n->op != OP_CONST && !ir_infer(n, why, sizeof why))
      return snprintf(err, errlen, "stage %d's optimizer on its parts: %s", p->s, why), false;
  return true;
}

/* The names of g's params that a pattern of list (the whole model's
 * no_decay) names, each as a pattern matching it alone, joined by ',': a
 * stage's optimizer has only its own params, where the whole model's
 * patterns may name none.  NULL: none. */
static const char *stage_no_decay(Graph *g, const char *list) {
  const char *names = NULL, **pats = NULL;
  int n_pats = list ? pass_split_names(&g->ctx->arena, list, &pats) : 0;
  for (Node *n = g->first; n; n = n->next) {
    const char *name = n->op == OP_PARAM ? ir_attr_str(n, "name") : NULL;
    if (name && pass_name_matches(pats, n_pats, name)) {
      const char *exact = pass_name_pattern(&g->ctx->arena, name);
      names = names ? arena_printf(&g->ctx->arena, "%s,%s", names, exact) : exact;
    }
  }
  return names;
}

static bool compile_stage(Pipeline *p, Graph *const *graphs, char *err, size_t errlen) {
  const char *what[] = {"forward", "backward", "optimizer"};
  bool last = p->s == p->n_stages - 1;
  for (int k = STAGE_FORWARD; k <= STAGE_OPTIMIZER; k++) {
    if (!graphs[k]) continue;
    if (k == STAGE_OPTIMIZER && p->c.tensor && !shard_optimizer_graph(p, graphs[k], err, errlen)) return false;
    char *text = ir_print_text(graphs[k]), name[64];
    if (!text) return snprintf(err, errlen, "out of memory"), false;
    snprintf(name, sizeof name, "stage%d.%s.ir", p->s, what[k]);
    dlc_status st;
    const char *msg;
    if (k == STAGE_OPTIMIZER) {
      dlc_train_options o = *p->c.train;
      o.model = stage_options(p);
      o.loss = NULL;
      o.loss_output = 0;
      o.target_rank = 0;
      o.optimizer.grad_stats_input = p->clip || p->loss_scaling;
      o.optimizer.no_decay = stage_no_decay(graphs[k], o.optimizer.no_decay);
      /* the gradients it is fed are scaled: it unscales them */
      if (p->loss_scaling) o.model.loss_scale = DLC_LOSS_SCALE_FED;
      st = dlc_train_compile_string(name, text, &o, &p->opt);
      msg = dlc_train_error(p->opt);
    } else {
      dlc_options o = stage_options(p);
      o.grad = k == STAGE_BACKWARD;
      o.sync_bn = o.grad ? p->sync_bn : 0;
      /* the loss's gradient starts at the scale, as in one process */
      if (p->loss_scaling && last && o.grad) o.loss_scale = DLC_LOSS_SCALE_SEED;
      if (p->c.tensor) o.tensor_parallel = p->c.tensor->size, o.tensor_rank = p->c.tensor->rank;
      o.tensor_parallel_step = 1; /* the forward splits as the backward */
      dlc_model **m = k == STAGE_FORWARD ? &p->fwd : &p->bwd;
      st = dlc_compile_string(name, text, &o, m);
      msg = dlc_error(*m);
      if (st == DLC_OK && (p->c.tensor || p->sync_bn)) {
        st = dlc_set_comm(*m, dist_comm, &p->comm);
        msg = dlc_error(*m);
      }
      /* the loss's weights (the last stage's inputs) */
      if (st == DLC_OK && (st = api_set_loss_weights(*m, p->c.train)) != DLC_OK) msg = dlc_error(*m);
    }
    free(text);
    if (st != DLC_OK) {
      snprintf(err, errlen, "stage %d's %s plan: %s", p->s, what[k], msg ? msg : "out of memory");
      return false;
    }
  }
  return true;
}

/* The forward and backward plans must split the stage's parameters
 * alike: the optimizer's whole values are cut into both the same way. */
static bool same_splits(const Pipeline *p, char *err, size_t errlen) {
  if (!p->fwd || !p->c.tensor) return true;
  int n = dlc_num_tensor_splits(p->bwd);
  bool same = n == dlc_num_tensor_splits(p->fwd);
  for (int i = 0; same && i < n; i++) {
    dlc_tensor_split a, b;
    same = dlc_tensor_split_info(p->fwd, i, &a) == DLC_OK && dlc_tensor_split_info(p->bwd, i, &b) == DLC_OK &&
           strcmp(a.param, b.param) == 0 && a.axis == b.axis && a.start == b.start && a.len == b.len &&
           a.sharded == b.sharded;
  }
  if (!same) snprintf(err, errlen, "stage %d: its forward and backward plans split its parameters differently", p->s);
  return same;
}

/* How m holds name; *axis its split axis (when axis is not NULL). */
static TpHold hold_of(dlc_model *m, const char *name, int *axis) {
  TpHold h = TP_WHOLE;
  for (int i = 0; i < dlc_num_tensor_splits(m); i++) {
    dlc_tensor_split s;
    if (dlc_tensor_split_info(m, i, &s) != DLC_OK || strcmp(s.param, name)) continue;
    h = s.sharded ? TP_SHARDED : TP_PART;
    if (axis) *axis = s.axis;
  }
  return h;
}

static int output_named(dlc_model *m, const char *name) {
  for (int i = 0; i < dlc_num_outputs(m); i++) {
    dlc_tensor_info info;
    if (dlc_output_info(m, i, &info) == DLC_OK && strcmp(info.name, name) == 0) return i;
  }
  return -1;
}

static void *alloc_or(size_t n, bool *ok) {
  void *q = calloc(1, n ? n : 1);
  if (!q) *ok = false;
  return q;
}

/* The whole model's param node of that name (the stage's are among them). */
static const Node *whole_param(const Pipeline *p, const char *name) {
  for (const Node *n = p->g->first; n; n = n->next)
    if (n->op == OP_PARAM && strcmp(ir_attr_str(n, "name"), name) == 0) return n;
  return NULL;
}

/* The buffers, and where the backward's outputs are. */
static bool prepare(Pipeline *p, const Graph *opt_graph, char *err, size_t errlen) {
  bool ok = true;
  const StageCut *in = p->s > 0 ? &p->sp.cut[p->s] : NULL;
  const StageCut *out = p->s < p->n_stages - 1 ? &p->sp.cut[p->s + 1] : NULL;
  p->n_in = in ? in->n : 0;
  p->n_out = out ? out->n : 0;
  p->in_bytes = alloc_or(sizeof(size_t) * (size_t)p->n_in, &ok);
  p->out_bytes = alloc_or(sizeof(size_t) * (size_t)p->n_out, &ok);
  p->in_grad_out = alloc_or(sizeof(int) * (size_t)p->n_in, &ok);
  if (!ok) return snprintf(err, errlen, "out of memory"), false;
  for (int k = 0; k < p->n_in; k++) {
    p->in_bytes[k] = ir_tensor_nbytes(&in->values[k]->type);
    char name[64];
    snprintf(name, sizeof name, "stage_in.%d.grad", k);
    if ((p->in_grad_out[k] = output_named(p->bwd, name)) < 0)
      return snprintf(err, errlen, "stage %d: its input %d does not reach its outputs (no gradient)", p->s, k), false;
  }
  for (int k = 0; k < p->n_out; k++) p->out_bytes[k] = ir_tensor_nbytes(&out->values[k]->type);
  for (Node *n = opt_graph ? opt_graph->first : NULL; n; n = n->next) p->n_params += n->op == OP_PARAM;
  p->params = alloc_or(sizeof *p->params * (size_t)p->n_params, &ok);
  int j = 0;
  for (Node *n = opt_graph ? opt_graph->first : NULL; ok && n; n = n->next) {
    if (n->op != OP_PARAM) continue;
    StageParam *sp = &p->params[j++];
    sp->name = ir_attr_str(n, "name");
    sp->bytes = ir_tensor_nbytes(&n->out[0].type);
    const Node *w = whole_param(p, sp->name);
    sp->rank = w->out[0].type.rank;
    memcpy(sp->dims, w->out[0].type.dims, sizeof(int64_t) * (size_t)sp->rank);
    if (n->out[0].type.dtype != TY_F32)
      return snprintf(err, errlen, "pipeline parallel and gradient accumulation train f32 parameters; '%s' is %s",
                      sp->name, ir_dtype_name(n->out[0].type.dtype)),
             false;
    char name[512];
    snprintf(name, sizeof name, "%s.grad", sp->name);
    if ((sp->grad_out = output_named(p->bwd, name)) < 0)
      return snprintf(err, errlen, "stage %d: the loss does not depend on '%s'", p->s, sp->name), false;
    sp->hold = hold_of(p->bwd, sp->name, NULL);
    dlc_tensor_info gi;
    if (dlc_output_info(p->bwd, sp->grad_out, &gi) != DLC_OK) return run_failed(p->bwd, err, errlen);
    if (gi.nbytes != sp->bytes)
      return snprintf(err, errlen, "stage %d: the backward's gradient of '%s' is %zu bytes, the optimizer's %zu", p->s,
                      sp->name, gi.nbytes, sp->bytes), false;
    sp->acc = alloc_or(sp->bytes, &ok);
    sp->grad = sp->hold == TP_PART ? alloc_or(sp->bytes, &ok) : sp->acc;
  }
  int M = p->m_count;
  p->stash = alloc_or(sizeof *p->stash * (size_t)(M * p->n_in), &ok);
  p->bsend = alloc_or(sizeof *p->bsend * (size_t)(M * p->n_in), &ok);
  p->fsend = alloc_or(sizeof *p->fsend * (size_t)(M * p->n_out), &ok);
  p->dy = alloc_or(sizeof *p->dy * (size_t)p->n_out, &ok);
  for (int m = 0; ok && m < M; m++) {
    for (int k = 0; ok && k < p->n_in; k++) {
      p->stash[m * p->n_in + k] = alloc_or(p->in_bytes[k], &ok);
      p->bsend[m * p->n_in + k] = alloc_or(p->in_bytes[k], &ok);
    }
    for (int k = 0; ok && k < p->n_out; k++) p->fsend[m * p->n_out + k] = alloc_or(p->out_bytes[k], &ok);
  }
  for (int k = 0; ok && k < p->n_out; k++) p->dy[k] = alloc_or(p->out_bytes[k], &ok);
  const TrainData *d = p->c.data;
  p->bufs = alloc_or(sizeof *p->bufs * (size_t)d->n, &ok);
  for (int i = 0; ok && i < d->n; i++) p->bufs[i] = alloc_or(d->a[i].sample_bytes * (size_t)p->b, &ok);
  if (!ok) snprintf(err, errlen, "out of memory");
  return ok;
}

/* The shard whose part `name` is in the optimizer's plan: the param
 * itself or its state ("dlcc.optim.NAME.exp_avg"), or NULL when name is
 * held whole. */
static const StageParam *shard_of(const Pipeline *p, const char *name) {
  const char *prefix = "dlcc.optim.";
  size_t np = strlen(prefix);
  for (int j = 0; p->c.tensor && j < p->n_params; j++) {
    const StageParam *sp = &p->params[j];
    size_t len = strlen(sp->name);
    if (sp->hold != TP_SHARDED) continue;
    if (strcmp(name, sp->name) == 0) return sp;
    if (strncmp(name, prefix, np) == 0 && strncmp(name + np, sp->name, len) == 0 && name[np + len] == '.' &&
        !strchr(name + np + len + 1, '.'))
      return sp;
  }
  return NULL;
}

/* The stage's batchnorms in training mode whose running statistics it
 * keeps: their names, momentum (PyTorch's 0.1 when unset) and values per
 * channel at the micro-batch. */
static bool deferred_bns(Pipeline *p) {
  Arena *a = &p->ctx.arena;
  for (Node *n = p->g->first; n; n = n->next) p->n_bns += n->op == OP_BATCHNORM && p->sp.stage[n->id] == p->s;
  p->bns = ARENA_ARRAY(a, DeferredBn, p->n_bns + 1);
  int k = 0;
  for (Node *n = p->g->first; n; n = n->next) {
    if (n->op != OP_BATCHNORM || p->sp.stage[n->id] != p->s) continue;
    if (n->in[3]->def->op != OP_PARAM || n->in[4]->def->op != OP_PARAM) {
      p->n_bns--;
      continue;
    }
    DeferredBn *b = &p->bns[k++];
    const Attr *mom = ir_attr(n, "momentum");
    b->mean = ir_attr_str(n->in[3]->def, "name");
    b->var = ir_attr_str(n->in[4]->def, "name");
    b->momentum = mom ? mom->f : 0.1;
    b->channels = n->in[0]->type.dims[1];
    b->count = b->channels ? ir_type_numel(&n->in[0]->type) / b->channels : 0;
    if (p->sync_bn) b->count *= p->sync_bn; /* the statistics are the replicas' together */
    size_t C = (size_t)b->channels + 1;
    b->old_mean = ARENA_ARRAY(a, float, C), b->old_var = ARENA_ARRAY(a, float, C);
    b->new_mean = ARENA_ARRAY(a, float, C), b->new_var = ARENA_ARRAY(a, float, C);
    b->sum_mean = ARENA_ARRAY(a, double, C), b->sum_var = ARENA_ARRAY(a, double, C);
    b->sum_sq = ARENA_ARRAY(a, double, C);
  }
  return true;
}

/* Whether a param is frozen (--freeze, an export's folded constant): no
 * step changes it, and the whole model holds it already. */
static bool is_frozen(const Node *param) { return ir_attr(param, "frozen") && ir_attr_int(param, "frozen"); }

static bool frozen(Pipeline *p, const char *name) {
  const Node *n = pass_find_param(p->g, name);
  return n && is_frozen(n);
}

/* --bucket-mb's buckets: consecutive parameters' gradients up to about
 * that many MiB each (one alone when larger), as DDP's bucket_cap_mb;
 * false when memory ran out. */
static bool make_buckets(Pipeline *p) {
  size_t cap = (size_t)(p->c.bucket_mb * 1024 * 1024);
  p->bucket_first = calloc((size_t)p->n_params + 1, sizeof *p->bucket_first);
  p->bucket = calloc((size_t)p->n_params + 1, sizeof *p->bucket);
  if (!p->bucket_first || !p->bucket) return false;
  for (int j = 0; j < p->n_params;) {
    size_t bytes = 0;
    int first = j;
    while (j < p->n_params && (j == first || bytes + p->params[j].bytes <= cap)) bytes += p->params[j++].bytes;
    p->bucket_first[p->n_buckets] = first;
    p->bucket_first[p->n_buckets + 1] = j;
    if (!(p->bucket[p->n_buckets++] = malloc(bytes ? bytes : 1))) return false;
  }
  return true;
}

static Pipeline *create(const PipeConfig *c, const Pipeline *like, char *err, size_t errlen) {
  Pipeline *p = calloc(1, sizeof *p);
  if (!p) return snprintf(err, errlen, "out of memory"), NULL;
  p->c = *c;
  p->s = c->dist->rank;
  p->n_stages = c->dist->size;
  p->m_count = (int)c->micro;
  p->b = c->batch / c->micro;
  p->sync_bn = c->sync_bn && c->replicas ? c->replicas->size : 0;
  const char *prec = c->train->model.precision;
  p->loss_scaling = prec && strcmp(prec, "f16") == 0;
  p->clip = c->train->optimizer.clip_grad_norm > 0;
  ctx_init(&p->ctx);
  BuildJob job = {.c = c, .micro_batch = p->b};
  int rc = ctx_guard(&p->ctx, build_graph, &job);
  if (rc || p->ctx.diag.errors) {
    snprintf(err, errlen, "%s", rc < 0 ? "out of memory" : diag_text(&p->ctx));
    size_t n = strlen(err);
    while (n && err[n - 1] == '\n') err[--n] = 0;
    pipe_free(p);
    return NULL;
  }
  p->g = job.g;
  if (!(like ? pass_stage_split_like(p->g, &like->sp, &p->sp, err, errlen)
             : pass_stage_split(p->g, p->n_stages, &p->sp, err, errlen))) {
    pipe_free(p);
    return NULL;
  }
  /* Each param's stage, for the gather: its readers' (they share one). */
  p->param_stage = ARENA_ARRAY(&p->ctx.arena, int, p->g->n_nodes + 1);
  for (Node *n = p->g->first; n; n = n->next) p->param_stage[n->id] = -1;
  for (Node *n = p->g->first; n; n = n->next)
    for (int i = 0; i < n->n_in && p->sp.stage[n->id] >= 0; i++)
      if (n->in[i]->def->op == OP_PARAM) p->param_stage[n->in[i]->def->id] = p->sp.stage[n->id];
  for (Node *n = p->g->first; n; n = n->next) p->dropout |= (n->op == OP_DROPOUT || n->op == OP_RANDOM_UNIFORM) && p->sp.stage[n->id] == p->s;
  bool *trains = pass_trainable_params(p->g);
  p->state_names = ARENA_ARRAY(&p->ctx.arena, const char *, p->g->n_nodes + 1);
  p->state_bytes = ARENA_ARRAY(&p->ctx.arena, size_t, p->g->n_nodes + 1);
  for (Node *n = p->g->first; n; n = n->next)
    if (n->op == OP_PARAM && ir_dtype_is_float(n->out[0].type.dtype) && !trains[n->id] &&
        p->param_stage[n->id] == p->s && !is_frozen(n)) {
      p->state_names[p->n_states] = ir_attr_str(n, "name");
      p->state_bytes[p->n_states++] = ir_tensor_nbytes(&n->out[0].type);
    }
  if (c->deferred_bn && !deferred_bns(p)) {
    snprintf(err, errlen, "out of memory");
    pipe_free(p);
    return NULL;
  }
  if (c->world->rank == 0 && !like) print_split(p);
  StageGraphs sg = {.p = p};
  rc = ctx_guard(&p->ctx, build_stage, &sg);
  if (rc || p->ctx.diag.errors) {
    snprintf(err, errlen, "%s", rc < 0 ? "out of memory" : diag_text(&p->ctx));
    pipe_free(p);
    return NULL;
  }
  /* The last stage's backward reads the scale its optimizer updates. */
  if (p->loss_scaling && p->s == p->n_stages - 1 && !sg.graph[STAGE_OPTIMIZER]) {
    snprintf(err, errlen,
             "--precision=f16 under a pipeline needs parameters in the last stage, whose optimizer keeps the loss "
             "scale; stage %d has none",
             p->s);
    pipe_free(p);
    return NULL;
  }
  /* One group stands in for the other where a job has one: the plans
   * then hold no all-reduce of the missing kind. */
  Dist *sums = c->tensor ? c->tensor : c->replicas, *means = p->sync_bn ? c->replicas : c->tensor;
  p->comm = (DistComm){sums, means ? means : sums, NULL, NULL};
  if (!compile_stage(p, sg.graph, err, errlen) || !same_splits(p, err, errlen) ||
      !prepare(p, sg.graph[STAGE_OPTIMIZER], err, errlen)) {
    pipe_free(p);
    return NULL;
  }
  /* What each stage split: said by its first rank in the first pipeline
   * (a line at a time: the stages' lines may interleave) */
  bool first = c->tensor && c->tensor->rank == 0 && (!c->replicas || c->replicas->rank == 0) && !like;
  for (int i = 0; first && i < dlc_num_tensor_notes(p->bwd); i++) {
    printf("  stage %d: tensor parallel: %s\n", p->s, dlc_tensor_note(p->bwd, i));
    fflush(stdout);
  }
  p->speaks = first;
  if (c->replicas && c->bucket_mb > 0) {
    if (!make_buckets(p)) {
      snprintf(err, errlen, "out of memory for the gradients' buckets");
      pipe_free(p);
      return NULL;
    }
    if ((!c->tensor || c->tensor->rank == 0) && c->replicas->rank == 0 && !like) {
      printf("  stage %d: gradients averaged over the %d pipelines in %d bucket%s of up to %g MiB\n", p->s,
             c->replicas->size, p->n_buckets, p->n_buckets == 1 ? "" : "s", c->bucket_mb);
      fflush(stdout);
    }
  }
  return p;
}

Pipeline *pipe_new(const PipeConfig *c, char *err, size_t errlen) { return create(c, NULL, err, errlen); }

Pipeline *pipe_new_like(const PipeConfig *c, const Pipeline *like, char *err, size_t errlen) {
  return create(c, like, err, errlen);
}

/* ---- parameters in and out ---- */

static bool copy_weight(dlc_model *from, dlc_model *to, const char *name, size_t bytes, char *err, size_t errlen) {
  void *buf = malloc(bytes ? bytes : 1);
  if (!buf) return snprintf(err, errlen, "out of memory"), false;
  dlc_status st = dlc_get_weight(from, name, buf, bytes);
  dlc_model *bad = from;
  if (st == DLC_OK) st = dlc_set_weight(to, name, buf, bytes), bad = to;
  free(buf);
  if (st != DLC_OK) snprintf(err, errlen, "%s", dlc_error(bad));
  return st == DLC_OK;
}

/* The stage's parameters from the optimizer's plan into the others, and
 * in the last stage the loss scale it updates, over M, into the backward
 * that seeds with it: each micro-batch's gradient is that of its mean
 * loss over M, so that the sum over the micro-batches is the mean and
 * each sample's share of every f16 value in the backward is what it is
 * in one process (S / B), which overflows where one process's does. */
static bool share_params(Pipeline *p, char *err, size_t errlen) {
  dlc_model *om = dlc_train_model(p->opt); /* NULL in a stage without parameters */
  for (int j = 0; j < p->n_params; j++) {
    const StageParam *sp = &p->params[j];
    if ((p->fwd && !copy_weight(om, p->fwd, sp->name, sp->bytes, err, errlen)) ||
        !copy_weight(om, p->bwd, sp->name, sp->bytes, err, errlen))
      return false;
  }
  if (p->loss_scaling && p->s == p->n_stages - 1) {
    float s;
    if (dlc_get_weight(om, AMP_SCALE_PARAM, &s, sizeof s) != DLC_OK) return run_failed(om, err, errlen);
    s /= (float)p->m_count;
    if (dlc_set_weight(p->bwd, AMP_SCALE_PARAM, &s, sizeof s) != DLC_OK) return run_failed(p->bwd, err, errlen);
  }
  return true;
}

static bool has_param(dlc_train *t, const char *name) {
  for (int i = 0; i < dlc_train_num_params(t); i++) {
    dlc_tensor_info info;
    if (dlc_train_param_info(t, i, &info) == DLC_OK && strcmp(info.name, name) == 0) return true;
  }
  return false;
}

/* dlcc.seed, dlcc.step and dlcc.first_sample into a plan with dropouts. */
static bool set_rng(Pipeline *p, dlc_model *m, int64_t first, char *err, size_t errlen) {
  if (!m || !p->dropout) return true;
  if (dlc_set_weight(m, "dlcc.seed", &p->seed, sizeof p->seed) != DLC_OK ||
      dlc_set_weight(m, "dlcc.step", &p->step, sizeof p->step) != DLC_OK ||
      dlc_set_weight(m, "dlcc.first_sample", &first, sizeof first) != DLC_OK)
    return run_failed(m, err, errlen);
  return true;
}

/* This rank's part of the whole tensor info names (sp's or its state's)
 * from wm into om. */
static bool bind_part(Pipeline *p, dlc_model *wm, dlc_model *om, const StageParam *sp, const dlc_tensor_info *info,
                      char *err, size_t errlen) {
  size_t whole_bytes = info->nbytes * (size_t)p->c.tensor->size;
  unsigned char *whole = malloc(whole_bytes + info->nbytes + 1);
  if (!whole) return snprintf(err, errlen, "out of memory"), false;
  unsigned char *part = whole + whole_bytes;
  bool ok = dlc_get_weight(wm, info->name, whole, whole_bytes) == DLC_OK || run_failed(wm, err, errlen);
  ok = ok && (dlc_weight_part(p->bwd, sp->name, p->c.tensor->rank, sp->rank, sp->dims, whole, part, 0) == DLC_OK ||
              run_failed(p->bwd, err, errlen));
  ok = ok && (dlc_set_weight(om, info->name, part, info->nbytes) == DLC_OK || run_failed(om, err, errlen));
  free(whole);
  return ok;
}

/* The whole value of info (a tensor holder keeps for this stage) into
 * buf: a shard's (or its state's) parts gathered from the stage's tensor
 * ranks, which all come here for it in the same order. */
static bool fetch_whole(Pipeline *p, dlc_model *holder, const dlc_tensor_info *info, void *buf, bool *comm, char *err,
                        size_t errlen) {
  const StageParam *sp = shard_of(p, info->name);
  if (!sp) return dlc_get_weight(holder, info->name, buf, info->nbytes) == DLC_OK || run_failed(holder, err, errlen);
  Dist *tg = p->c.tensor;
  size_t part = info->nbytes / (size_t)tg->size;
  unsigned char *mine = malloc(part * (size_t)(tg->size + 1) + 1);
  if (!mine) return snprintf(err, errlen, "out of memory"), false;
  unsigned char *all = mine + part;
  bool ok = dlc_get_weight(holder, info->name, mine, part) == DLC_OK || run_failed(holder, err, errlen);
  if (ok && dist_allgather(tg, mine, all, part) != DIST_OK) ok = false, *comm = true;
  for (int q = 0; ok && q < tg->size; q++)
    if (dlc_weight_part(p->bwd, sp->name, q, sp->rank, sp->dims, buf, all + (size_t)q * part, 1) != DLC_OK)
      ok = run_failed(p->bwd, err, errlen);
  free(mine);
  return ok;
}

/* The stage plans' other values from the whole model: what no optimizer
 * trains and no run sets (an ONNX export's folded constants, such as
 * BERT's position ids; frozen params), which dlc_init_weights drew. */
static bool bind_frozen(Pipeline *p, dlc_model *wm, char *err, size_t errlen) {
  dlc_model *plans[2] = {p->fwd, p->bwd};
  for (int k = 0; k < 2; k++)
    for (int i = 0; plans[k] && i < plans[k]->params.n; i++) {
      const char *name = plans[k]->params.names[i];
      if (strncmp(name, "dlcc.", 5) == 0 || strncmp(name, "stage_in.", 9) == 0 || (p->opt && shard_of(p, name)))
        continue;
      const Tensor *whole = ir_tensor_map_find(&wm->params, name);
      const TensorType *t = &plans[k]->params.tensors[i].type;
      size_t bytes = ir_tensor_nbytes(t);
      int axis;
      if (!whole) continue;
      if (!tp_is_sharded(&plans[k]->tp, name, &axis)) {
        if (!copy_weight(wm, plans[k], name, bytes, err, errlen)) return false;
        continue;
      }
      /* a frozen param split by tensor parallelism: this rank's part */
      size_t wbytes = ir_tensor_nbytes(&whole->type);
      char *buf = malloc(wbytes ? wbytes : 1), *part = malloc(bytes ? bytes : 1);
      bool ok = buf && part && dlc_get_weight(wm, name, buf, wbytes) == DLC_OK &&
                tp_copy_part(&plans[k]->tp, name, plans[k]->tp.rank, whole->type.rank, whole->type.dims,
                             ir_dtype_size(t->dtype), buf, part, false) &&
                dlc_set_weight(plans[k], name, part, bytes) == DLC_OK;
      free(buf), free(part);
      if (!ok) return snprintf(err, errlen, "binding stage %d's part of '%s' failed", p->s, name), false;
    }
  return true;
}

bool pipe_bind(Pipeline *p, dlc_train *whole, char *err, size_t errlen) {
  dlc_model *wm = dlc_train_model(whole), *om = dlc_train_model(p->opt);
  if ((has_param(whole, "dlcc.seed") && dlc_get_weight(wm, "dlcc.seed", &p->seed, sizeof p->seed) != DLC_OK) ||
      (has_param(whole, "dlcc.step") && dlc_get_weight(wm, "dlcc.step", &p->step, sizeof p->step) != DLC_OK))
    return run_failed(wm, err, errlen);
  /* Bound first (any values: each is set below, the stage inputs per
   * micro-batch). */
  if ((p->fwd && dlc_init_weights(p->fwd, 0) != DLC_OK) || dlc_init_weights(p->bwd, 0) != DLC_OK ||
      (om && dlc_init_weights(om, 0) != DLC_OK))
    return snprintf(err, errlen, "binding stage %d's weights failed", p->s), false;
  for (int i = 0; i < dlc_train_num_params(p->opt); i++) {
    dlc_tensor_info info;
    if (dlc_train_param_info(p->opt, i, &info) != DLC_OK) return run_failed(om, err, errlen);
    const StageParam *sp = shard_of(p, info.name);
    if (!(sp ? bind_part(p, wm, om, sp, &info, err, errlen) : copy_weight(wm, om, info.name, info.nbytes, err, errlen)))
      return false;
  }
  if (!bind_frozen(p, wm, err, errlen)) return false;
  for (int i = 0; i < p->n_states; i++)
    if (!copy_weight(wm, p->bwd, p->state_names[i], p->state_bytes[i], err, errlen)) return false;
  size_t held = 0, all = 0;
  for (int i = 0; p->speaks && p->opt && i < dlc_train_num_params(p->opt); i++) {
    dlc_tensor_info info;
    if (dlc_train_param_info(p->opt, i, &info) != DLC_OK) continue;
    held += info.nbytes;
    all += shard_of(p, info.name) ? info.nbytes * (size_t)p->c.tensor->size : info.nbytes;
  }
  if (p->speaks && p->opt) {
    printf("  stage %d: tensor parallel: rank 0 holds %zu of the %zu bytes of its parameters and optimizer state\n",
           p->s, held, all);
    fflush(stdout);
  }
  return share_params(p, err, errlen);
}

bool pipe_copy_state(Pipeline *to, const Pipeline *from, char *err, size_t errlen) {
  to->seed = from->seed, to->step = from->step;
  for (int i = 0; to->opt && i < dlc_train_num_params(to->opt); i++) {
    dlc_tensor_info info;
    if (dlc_train_param_info(to->opt, i, &info) != DLC_OK ||
        !copy_weight(dlc_train_model(from->opt), dlc_train_model(to->opt), info.name, info.nbytes, err, errlen))
      return false;
  }
  for (int i = 0; i < to->n_states; i++)
    if (!copy_weight(from->bwd, to->bwd, to->state_names[i], to->state_bytes[i], err, errlen)) return false;
  return share_params(to, err, errlen);
}

static bool is_state(const Pipeline *p, const char *name) {
  for (int i = 0; i < p->n_states; i++)
    if (strcmp(p->state_names[i], name) == 0) return true;
  return false;
}

/* Where this rank keeps the whole model's tensor `name` that its stage
 * owns: the optimizer's plan (a parameter, its optimizer state), the
 * backward's (running statistics), or none (whole keeps its own). */
static dlc_model *holder_of(Pipeline *p, const char *name) {
  if (p->opt && has_param(p->opt, name)) return dlc_train_model(p->opt);
  return is_state(p, name) ? p->bwd : NULL;
}

/* The rank whose stage holds the whole model's tensor `name`: the stage
 * of the param it is, or whose optimizer state it is
 * ("dlcc.optim.NAME.exp_avg"); the last stage for the loss scaler's
 * (every optimizer keeps the same, the last one surely); rank 0 for the
 * rest (the step counters, which every stage counts alike, dropout's
 * seed). */
static int owner_of(const Pipeline *p, const char *name) {
  if (strncmp(name, "dlcc.amp.", 9) == 0) return p->n_stages - 1;
  const char *prefix = "dlcc.optim.";
  size_t np = strlen(prefix), best = 0;
  int owner = 0;
  for (Node *n = p->g->first; n; n = n->next) {
    if (n->op != OP_PARAM || p->param_stage[n->id] < 0 || !ir_dtype_is_float(n->out[0].type.dtype)) continue;
    const char *pn = ir_attr_str(n, "name");
    size_t len = strlen(pn);
    bool state = strncmp(name, prefix, np) == 0 && strncmp(name + np, pn, len) == 0 && name[np + len] == '.';
    if ((strcmp(name, pn) == 0 || state) && len > best) best = len, owner = p->param_stage[n->id];
  }
  return owner;
}

bool pipe_gather(Pipeline *p, dlc_train *whole, bool *comm, char *err, size_t errlen) {
  Dist *d = p->c.dist;
  dlc_model *wm = dlc_train_model(whole);
  *comm = false;
  if (has_param(whole, "dlcc.step") && dlc_set_weight(wm, "dlcc.step", &p->step, sizeof p->step) != DLC_OK)
    return run_failed(wm, err, errlen);
  bool ok = true;
  for (int i = 0; ok && i < dlc_train_num_params(whole); i++) {
    dlc_tensor_info info;
    if (dlc_train_param_info(whole, i, &info) != DLC_OK || frozen(p, info.name)) continue;
    int owner = owner_of(p, info.name);
    if (owner != d->rank && d->rank != 0) continue;
    dlc_model *holder = owner == d->rank ? holder_of(p, info.name) : NULL;
    if (owner == d->rank && !holder) continue; /* not the stage's: whole keeps its own */
    void *buf = malloc(info.nbytes ? info.nbytes : 1);
    if (!buf) return snprintf(err, errlen, "out of memory"), false;
    if (owner == 0) {
      ok = fetch_whole(p, holder, &info, buf, comm, err, errlen);
      if (ok && dlc_set_weight(wm, info.name, buf, info.nbytes) != DLC_OK) ok = run_failed(wm, err, errlen);
    } else if (d->rank == owner) {
      ok = fetch_whole(p, holder, &info, buf, comm, err, errlen);
      if (ok && (dist_isend(d, 0, TAG(TAG_GATHER, 0), buf, info.nbytes) != DIST_OK || dist_wait_sends(d) != DIST_OK))
        ok = false, *comm = true;
    } else {
      char what[96];
      snprintf(what, sizeof what, "receiving stage %d's parameters from rank %d", owner, d->world_rank + owner);
      if (dist_recv(d, owner, TAG(TAG_GATHER, 0), buf, info.nbytes, what) != DIST_OK)
        ok = false, *comm = true;
      else if (dlc_set_weight(wm, info.name, buf, info.nbytes) != DLC_OK)
        ok = false, snprintf(err, errlen, "%s", dlc_error(wm));
    }
    free(buf);
  }
  return ok;
}

/* ---- a global batch ---- */

/* The model's inputs that come from the data: micro-batch order[0..b). */
static bool set_data(Pipeline *p, dlc_model *m, const int64_t *order, char *err, size_t errlen) {
  const TrainData *d = p->c.data;
  for (int i = 0; i < dlc_num_inputs(m); i++) {
    dlc_tensor_info info;
    if (dlc_input_info(m, i, &info) != DLC_OK || is_stage_name(info.name)) continue;
    const TrainArray *a = train_data_find(d, info.name);
    if (!a) return snprintf(err, errlen, "stage %d reads the model input '%s', and %s has no %s.npy", p->s, info.name,
                            d->dir, info.name), false;
    void *buf = p->bufs[a - d->a];
    if (!train_data_gather(a, order, p->b, 0, buf, err, errlen)) return false;
    if (dlc_set_input(m, a->name, buf, a->sample_bytes * (size_t)p->b) != DLC_OK)
      return snprintf(err, errlen, "%s", dlc_error(m)), false;
  }
  return true;
}

/* Micro-batch m's forward: the stage inputs from the previous rank, kept
 * for the backward; the outputs on to the next. */
static bool forward(Pipeline *p, int m, const int64_t *order, bool *comm, char *err, size_t errlen) {
  Dist *d = p->c.dist;
  char what[96];
  snprintf(what, sizeof what, "receiving activations from rank %d", p->c.world->rank - 1);
  for (int k = 0; k < p->n_in; k++)
    if (dist_recv(d, p->s - 1, TAG(TAG_ACT, k), p->stash[m * p->n_in + k], p->in_bytes[k], what) != DIST_OK)
      return *comm = true, false;
  if (!p->fwd) return true; /* the last stage's forward is in its backward */
  if (!set_data(p, p->fwd, order, err, errlen) ||
      !set_rng(p, p->fwd, p->c.first_sample + m * p->b, err, errlen))
    return false;
  for (int k = 0; k < p->n_in; k++) {
    char name[32];
    snprintf(name, sizeof name, "stage_in.%d", k);
    if (dlc_set_input(p->fwd, name, p->stash[m * p->n_in + k], p->in_bytes[k]) != DLC_OK)
      return run_failed(p->fwd, err, errlen);
  }
  if (dlc_run(p->fwd) != DLC_OK) return run_failed(p->fwd, err, errlen);
  for (int k = 0; k < p->n_out; k++) {
    const void *y;
    size_t n;
    if (dlc_get_output(p->fwd, k, &y, &n) != DLC_OK) return run_failed(p->fwd, err, errlen);
    unsigned char *buf = p->fsend[m * p->n_out + k];
    memcpy(buf, y, n);
    if (dist_isend(d, p->s + 1, TAG(TAG_ACT, k), buf, n) != DIST_OK) return *comm = true, false;
  }
  return true;
}

/* Micro-batch m's backward: the output gradients from the next rank, the
 * forward recomputed from the kept inputs, the parameter gradients
 * summed, the input gradients on to the previous rank. */
/* --deferred-bn.  Before a global batch: each running statistic as it
 * is, the sums cleared. */
static bool deferred_begin(Pipeline *p, char *err, size_t errlen) {
  for (int k = 0; k < p->n_bns; k++) {
    DeferredBn *b = &p->bns[k];
    size_t bytes = sizeof(float) * (size_t)b->channels;
    if (dlc_get_weight(p->bwd, b->mean, b->old_mean, bytes) != DLC_OK ||
        dlc_get_weight(p->bwd, b->var, b->old_var, bytes) != DLC_OK)
      return run_failed(p->bwd, err, errlen);
    for (int64_t c = 0; c < b->channels; c++) b->sum_mean[c] = b->sum_var[c] = b->sum_sq[c] = 0;
  }
  return true;
}

/* After a micro-batch's backward: its batch statistics from the update
 * the plan made, new = (1 - momentum) old + momentum stat, added to the
 * sums; the update undone.  (Solving for stat divides the update's
 * rounding by the momentum; the final update multiplies it back.) */
static bool deferred_add(Pipeline *p, char *err, size_t errlen) {
  for (int k = 0; k < p->n_bns; k++) {
    DeferredBn *b = &p->bns[k];
    size_t bytes = sizeof(float) * (size_t)b->channels;
    if (b->momentum == 0) continue;
    if (dlc_get_weight(p->bwd, b->mean, b->new_mean, bytes) != DLC_OK ||
        dlc_get_weight(p->bwd, b->var, b->new_var, bytes) != DLC_OK ||
        dlc_set_weight(p->bwd, b->mean, b->old_mean, bytes) != DLC_OK ||
        dlc_set_weight(p->bwd, b->var, b->old_var, bytes) != DLC_OK)
      return run_failed(p->bwd, err, errlen);
    double keep = 1 - b->momentum;
    for (int64_t c = 0; c < b->channels; c++) {
      double mean = (b->new_mean[c] - keep * b->old_mean[c]) / b->momentum;
      double var = (b->new_var[c] - keep * b->old_var[c]) / b->momentum; /* unbiased, over count */
      b->sum_mean[c] += mean;
      b->sum_var[c] += (double)(b->count - 1) * var;
      b->sum_sq[c] += (double)b->count * mean * mean;
    }
  }
  return true;
}

/* After the global batch: one update by the statistics of all M
 * micro-batches' values together (the mean of the means; the unbiased
 * variance over all M count values from each one's and its mean's
 * distance to the whole mean). */
static bool deferred_end(Pipeline *p, char *err, size_t errlen) {
  double M = p->m_count;
  for (int k = 0; k < p->n_bns; k++) {
    DeferredBn *b = &p->bns[k];
    if (b->momentum == 0) continue;
    double n = M * (double)b->count, keep = 1 - b->momentum;
    for (int64_t c = 0; c < b->channels; c++) {
      double mean = b->sum_mean[c] / M;
      double ss = b->sum_var[c] + b->sum_sq[c] - n * mean * mean;
      double var = n > 1 ? (ss > 0 ? ss : 0) / (n - 1) : 0;
      b->new_mean[c] = (float)(keep * b->old_mean[c] + b->momentum * mean);
      b->new_var[c] = (float)(keep * b->old_var[c] + b->momentum * var);
    }
    size_t bytes = sizeof(float) * (size_t)b->channels;
    if (dlc_set_weight(p->bwd, b->mean, b->new_mean, bytes) != DLC_OK ||
        dlc_set_weight(p->bwd, b->var, b->new_var, bytes) != DLC_OK)
      return run_failed(p->bwd, err, errlen);
  }
  return true;
}

static bool backward(Pipeline *p, int m, const int64_t *order, bool *comm, char *err, size_t errlen) {
  Dist *d = p->c.dist;
  char what[96], name[32];
  snprintf(what, sizeof what, "receiving gradients from rank %d", p->c.world->rank + 1);
  for (int k = 0; k < p->n_out; k++)
    if (dist_recv(d, p->s + 1, TAG(TAG_GRAD, k), p->dy[k], p->out_bytes[k], what) != DIST_OK)
      return *comm = true, false;
  if (!set_data(p, p->bwd, order, err, errlen) ||
      !set_rng(p, p->bwd, p->c.first_sample + m * p->b, err, errlen))
    return false;
  for (int k = 0; k < p->n_in; k++) {
    snprintf(name, sizeof name, "stage_in.%d", k);
    if (dlc_set_weight(p->bwd, name, p->stash[m * p->n_in + k], p->in_bytes[k]) != DLC_OK)
      return run_failed(p->bwd, err, errlen);
  }
  for (int k = 0; k < p->n_out; k++) {
    snprintf(name, sizeof name, "stage_dy.%d", k);
    if (dlc_set_input(p->bwd, name, p->dy[k], p->out_bytes[k]) != DLC_OK) return run_failed(p->bwd, err, errlen);
  }
  if (dlc_run(p->bwd) != DLC_OK) return run_failed(p->bwd, err, errlen);
  if (!deferred_add(p, err, errlen)) return false;
  const void *out;
  size_t n;
  if (dlc_get_output(p->bwd, 0, &out, &n) != DLC_OK) return run_failed(p->bwd, err, errlen);
  p->loss += *(const float *)out;
  for (int j = 0; j < p->n_params; j++) {
    StageParam *sp = &p->params[j];
    if (dlc_get_output(p->bwd, sp->grad_out, &out, &n) != DLC_OK) return run_failed(p->bwd, err, errlen);
    const float *g = out;
    if (m == 0)
      memcpy(sp->acc, g, sp->bytes);
    else
      for (size_t i = 0; i < sp->bytes / sizeof(float); i++) sp->acc[i] += g[i];
  }
  for (int k = 0; k < p->n_in; k++) {
    if (dlc_get_output(p->bwd, p->in_grad_out[k], &out, &n) != DLC_OK) return run_failed(p->bwd, err, errlen);
    unsigned char *buf = p->bsend[m * p->n_in + k];
    memcpy(buf, out, n);
    if (dist_isend(d, p->s - 1, TAG(TAG_GRAD, k), buf, n) != DIST_OK) return *comm = true, false;
  }
  return true;
}

/* Under tensor parallelism the gradient of a parameter the stage's
 * ranks hold whole but each reads only its rows of: zero but for those
 * rows on each rank, so summed over them in rank order it is the whole
 * one.  A shard's part and an unsplit parameter's gradient (the same on
 * every rank) the optimizer takes as they are. */
static bool part_grads(Pipeline *p, bool *comm) {
  Dist *tg = p->c.tensor;
  for (int j = 0; tg && j < p->n_params; j++) {
    StageParam *sp = &p->params[j];
    if (sp->hold != TP_PART) continue;
    memcpy(sp->grad, sp->acc, sp->bytes);
    if (dist_start(tg, sp->grad, sp->bytes / sizeof(float), true) != DIST_OK || dist_wait(tg) != DIST_OK)
      return *comm = true, false;
  }
  return true;
}

/* The micro-batches' summed gradients scaled, then averaged over the
 * stage's D copies (each element alone, in rank order: the same bits
 * whatever the buckets). */
static bool average_copies(Pipeline *p, float scale, bool *comm) {
  Dist *rd = p->c.replicas;
  for (int j = 0; j < p->n_params; j++)
    for (size_t i = 0; i < p->params[j].bytes / sizeof(float); i++) p->params[j].acc[i] *= scale;
  if (!rd) return true;
  if (!p->n_buckets) {
    for (int j = 0; j < p->n_params; j++)
      if (dist_start(rd, p->params[j].acc, p->params[j].bytes / sizeof(float), false) != DIST_OK)
        return *comm = true, false;
    return dist_wait(rd) == DIST_OK || (*comm = true, false);
  }
  for (int b = 0; b < p->n_buckets; b++) {
    size_t at = 0;
    for (int j = p->bucket_first[b]; j < p->bucket_first[b + 1]; j++)
      memcpy((char *)p->bucket[b] + at, p->params[j].acc, p->params[j].bytes), at += p->params[j].bytes;
    if (dist_start(rd, p->bucket[b], at / sizeof(float), false) != DIST_OK) return *comm = true, false;
  }
  if (dist_wait(rd) != DIST_OK) return *comm = true, false;
  for (int b = 0; b < p->n_buckets; b++) {
    size_t at = 0;
    for (int j = p->bucket_first[b]; j < p->bucket_first[b + 1]; j++)
      memcpy(p->params[j].acc, (char *)p->bucket[b] + at, p->params[j].bytes), at += p->params[j].bytes;
  }
  return true;
}

/* The optimizer once, with the mean of the micro-batches' gradients (each
 * the gradient of its micro-batch's mean loss, so their mean is the
 * pipeline's share's), averaged over the stage's D copies in rank order
 * (equal shares: the global batch's, the same bits on each copy), then
 * the new parameters into the other plans. */
static bool update(Pipeline *p, float lr, float momentum, bool *comm, char *err, size_t errlen) {
  float scale = p->loss_scaling ? 1.0f : 1.0f / (float)p->m_count; /* the seed divided already */
  if (!average_copies(p, scale, comm)) return false;
  if (!part_grads(p, comm)) return false;
  /* Every stage's share of the statistics its optimizer is fed, summed
   * over the stage's tensor ranks (their parts of the shards; the whole
   * parameters once, by rank 0) and then over the pipeline, in rank
   * order (the same bits on every stage and, the gradients being the
   * same, in every pipeline); a stage without parameters adds zeros. */
  float stats[2] = {0, 0}; /* the sum of squares, the count of gradients holding inf or NaN */
  if (p->clip || p->loss_scaling) {
    double sumsq = 0;
    bool bad = false;
    Dist *tg = p->c.tensor;
    for (int j = 0; j < p->n_params; j++) {
      const StageParam *sp = &p->params[j];
      if (tg && tg->rank && sp->hold != TP_SHARDED) continue;
      for (size_t i = 0; i < sp->bytes / sizeof(float); i++) {
        double g = sp->grad[i];
        sumsq += g * g;
        bad |= !isfinite(sp->grad[i]);
      }
    }
    stats[0] = (float)sumsq, stats[1] = bad;
    if (tg && (dist_start(tg, stats, 2, true) != DIST_OK || dist_wait(tg) != DIST_OK)) return *comm = true, false;
    if (dist_start(p->c.dist, stats, 2, true) != DIST_OK || dist_wait(p->c.dist) != DIST_OK) return *comm = true, false;
  }
  if (!p->opt) return true;
  dlc_model *om = dlc_train_model(p->opt);
  float nonfinite = stats[1] > 0 ? NAN : 0.0f;
  if ((p->clip && dlc_set_input(om, OPTIM_SUMSQ_INPUT, &stats[0], sizeof(float)) != DLC_OK) ||
      (p->loss_scaling && dlc_set_input(om, OPTIM_NONFINITE_INPUT, &nonfinite, sizeof nonfinite) != DLC_OK))
    return run_failed(om, err, errlen);
  for (int j = 0; j < p->n_params; j++) {
    StageParam *sp = &p->params[j];
    char name[512];
    snprintf(name, sizeof name, "grad.%s", sp->name);
    if (dlc_set_input(om, name, sp->grad, sp->bytes) != DLC_OK) return run_failed(om, err, errlen);
  }
  if (!isnan(momentum) && dlc_train_set_momentum(p->opt, momentum) != DLC_OK) return run_failed(om, err, errlen);
  if (dlc_train_step(p->opt, lr, NULL) != DLC_OK) return run_failed(om, err, errlen);
  return share_params(p, err, errlen);
}

bool pipe_step(Pipeline *p, const int64_t *order, float lr, float momentum, float *loss, bool *comm, char *err,
               size_t errlen) {
  Dist *d = p->c.dist;
  *comm = false;
  /* Every rank's status first: one that failed since the last step ends
   * the others here with its message. */
  if (dist_check(p->c.world, true, NULL) != DIST_OK) return *comm = true, false;
  int M = p->m_count, S = p->n_stages;
  /* GPipe: every forward, then every backward.  1F1B: S - s - 1 forwards
   * to fill the pipe, then one forward and one backward in turn, then
   * the backwards left.  Both take the backwards in micro-batch order,
   * so the gradients are summed alike and the bits agree. */
  int warm = p->c.one_f_one_b ? (S - p->s - 1 < M ? S - p->s - 1 : M) : M;
  int f = 0, b = 0;
  p->loss = 0;
  bool ok = deferred_begin(p, err, errlen);
  for (; ok && f < warm; f++) ok = forward(p, f, order + f * p->b, comm, err, errlen);
  while (ok && f < M) {
    ok = forward(p, f, order + f * p->b, comm, err, errlen) && backward(p, b, order + b * p->b, comm, err, errlen);
    f++, b++;
  }
  for (; ok && b < M; b++) ok = backward(p, b, order + b * p->b, comm, err, errlen);
  if (ok && dist_wait_sends(d) != DIST_OK) ok = false, *comm = true;
  if (!ok || !deferred_end(p, err, errlen) || !update(p, lr, momentum, comm, err, errlen)) return false;
  p->step++;
  /* The loss: the last stage's mean of the micro-batches', to rank 0. */
  float mean = p->loss / (float)M;
  if (S > 1 && p->s == S - 1 && (dist_isend(d, 0, TAG(TAG_LOSS, 0), &mean, sizeof mean) != DIST_OK ||
                                 dist_wait_sends(d) != DIST_OK))
    return *comm = true, false;
  if (S > 1 && p->s == 0 &&
      dist_recv(d, S - 1, TAG(TAG_LOSS, 0), &mean, sizeof mean, "receiving the loss from the last stage") != DIST_OK)
    return *comm = true, false;
  /* The global batch's: the mean of the pipelines' (equal shares). */
  if (p->c.replicas && p->s == 0 && dist_allreduce_mean(p->c.replicas, &mean, 1) != DIST_OK) return *comm = true, false;
  *loss = mean;
  return true;
}

void pipe_free(Pipeline *p) {
  if (!p) return;
  for (int i = 0; i < p->m_count * p->n_in; i++) {
    if (p->stash) free(p->stash[i]);
    if (p->bsend) free(p->bsend[i]);
  }
  for (int i = 0; p->fsend && i < p->m_count * p->n_out; i++) free(p->fsend[i]);
  for (int k = 0; p->dy && k < p->n_out; k++) free(p->dy[k]);
  for (int j = 0; p->params && j < p->n_params; j++) {
    if (p->params[j].grad != p->params[j].acc) free(p->params[j].grad);
    free(p->params[j].acc);
  }
  for (int i = 0; p->bufs && i < p->c.data->n; i++) free(p->bufs[i]);
  free(p->stash), free(p->bsend), free(p->fsend), free(p->dy), free(p->params), free(p->bufs);
  free(p->in_bytes), free(p->out_bytes), free(p->in_grad_out);
  for (int b = 0; b < p->n_buckets; b++) free(p->bucket[b]);
  free(p->bucket), free(p->bucket_first);
  dlc_free(p->fwd);
  dlc_free(p->bwd);
  dlc_train_free(p->opt);
  dist_comm_free(&p->comm);
  ctx_free(&p->ctx);
  free(p);
}

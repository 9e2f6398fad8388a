/* The compiler API (include/dlcc.h): compiles text to a verified graph,
 * binds weights and inputs, and runs it on the chosen backend.  Each
 * entry point runs under ctx_guard, so an internal error anywhere below
 * comes back as a status and a message, never as an exit. */
#include "dlcc.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/calibrate.h"
#include "api/model.h"
#include "api/weights.h"
#include "codegen/codegen.h"
#include "dlcrt.h"
#include "frontend/ast.h"
#include "frontend/onnx.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/autodiff.h"
#include "passes/optim.h"
#include "passes/pass.h"

static_assert((int)DLC_F32 == (int)TY_F32 && (int)DLC_BF16 == (int)TY_BF16 &&
                  (int)DLC_I64 == (int)TY_I64 && (int)DLC_BOOL == (int)TY_BOOL &&
                  (int)DLC_U8 == (int)TY_U8 && (int)DLC_F64 == (int)TY_F64 &&
                  (int)DLC_I16 == (int)TY_I16 && (int)DLC_U64 == (int)TY_U64 && (int)DLC_U64 + 1 == (int)TY_COUNT,
              "dlc_dtype follows DType");
static_assert((int)DLC_MAX_RANK == (int)DL_MAX_RANK, "one rank limit");

dlc_status api_fail(dlc_model *m, dlc_status st, const char *fmt, ...) {
  free(m->error);
  m->error = NULL;
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&m->error, fmt, ap) < 0) m->error = NULL;
  va_end(ap);
  m->error_lost = st != DLC_OK && !m->error;
  return st;
}

/* The name every call here uses. */
#define fail api_fail

/* What a call that unwound out of its guard returns. */
static dlc_status unwound(dlc_model *m) {
  return fail(m, m->ctx.oom ? DLC_ERR_NOMEM : DLC_ERR_INTERNAL, "%s", diag_text(&m->ctx));
}

/* One "dlcc: error: " per line of a report of several mismatches. */
static dlc_status fail_lines(dlc_model *m, dlc_status st, const char *text) {
  size_t lines = 1;
  for (const char *c = text; *c; c++) lines += *c == '\n';
  char *out = malloc(strlen(text) + lines * 16 + 2);
  if (!out) return fail(m, st, "dlcc: error: %s\n", text);
  char *o = out;
  for (const char *line = text;;) {
    const char *eol = strchr(line, '\n');
    size_t n = eol ? (size_t)(eol - line) : strlen(line);
    o += sprintf(o, "dlcc: error: %.*s\n", (int)n, line);
    if (!eol) break;
    line = eol + 1;
  }
  st = fail(m, st, "%s", out);
  free(out);
  return st;
}

static void clear_error(dlc_model *m) {
  free(m->error);
  m->error = NULL;
  m->error_lost = false;
}

const char *dlc_error(const dlc_model *m) {
  if (!m || m->error_lost) return "dlcc: out of memory\n";
  return m->error ? m->error : "";
}

const char *dlc_dtype_name(dlc_dtype t) { return ir_dtype_name((DType)t); }
size_t dlc_dtype_size(dlc_dtype t) { return (size_t)ir_dtype_size((DType)t); }

typedef struct CompileJob {
  const char *path;
  const char *name, *text; /* compile_string */
  const dlc_options *opt;
  const ApiTrainSpec *train; /* api_compile_train */
  dlc_model *m;
  CalibMethod calib_method; /* checked before the compile starts */
  CalibBackend calib_backend;
  bool weights_failed;      /* options.weights did not bind */
} CompileJob;

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* dlc_define and Define have the same layout by construction, but the
 * public header must not depend on the frontend's: copy. */
static Define *copy_defines(Ctx *c, const dlc_options *opt, int *n) {
  int nd = opt ? opt->n_defines : 0;
  Define *defs = ARENA_ARRAY(&c->arena, Define, nd > 0 ? nd : 1);
  for (int i = 0; i < nd; i++) {
    defs[i].name = arena_strdup(&c->arena, opt->defines[i].name);
    defs[i].value = opt->defines[i].value;
  }
  *n = nd;
  return defs;
}

/* dlc_input_shape and InputShape likewise. */
static InputShape *copy_input_shapes(Ctx *c, const dlc_options *opt, int *n) {
  int ns = opt ? opt->n_input_shapes : 0;
  InputShape *shapes = ARENA_ARRAY(&c->arena, InputShape, ns > 0 ? ns : 1);
  for (int i = 0; i < ns; i++) {
    const dlc_input_shape *s = &opt->input_shapes[i];
    int64_t *dims = ARENA_ARRAY(&c->arena, int64_t, s->rank > 0 ? s->rank : 1);
    if (s->rank > 0) memcpy(dims, s->dims, sizeof *dims * (size_t)s->rank);
    shapes[i] = (InputShape){arena_strdup(&c->arena, s->name), s->rank, dims};
  }
  *n = ns;
  return shapes;
}

/* A model run for inference (no grad, not a training API's step or
 * eval model, no eval_mode) that computes as in training: an ONNX file
 * exported with torch.onnx's TRAINING mode, which a user may not have
 * meant to run so.  Said once, with the option that runs it as eval(). */
static void note_training_mode(Ctx *c, const Graph *g) {
  for (const Node *n = g->first; n; n = n->next)
    if (n->op == OP_DROPOUT || (n->op == OP_BATCHNORM && ir_attr(n, "batch_stats"))) {
      diag_warning(c, n->loc,
                   "the model computes as in training (%s): it was exported in training mode; eval_mode (dlcc run "
                   "--eval) runs it as PyTorch's eval()",
                   n->op == OP_DROPOUT ? "dropout draws a mask" : "batchnorm by the batch's statistics");
      return;
    }
}

/* An ONNX model brings its weights: they are bound at once. */
static Graph *import_onnx(Ctx *c, CompileJob *job) {
  OnnxOptions oo = {0};
  ir_tensor_map_free(&job->m->own.values);
  oo.own = &job->m->own;
  oo.defines = copy_defines(c, job->opt, &oo.n_defines);
  oo.input_shapes = copy_input_shapes(c, job->opt, &oo.n_input_shapes);
  oo.loop_bound = job->opt ? job->opt->loop_bound : 0;
  TensorMap params;
  Graph *g = fe_onnx_import(c, job->path, &oo, &params);
  if (g) {
    job->m->params = params;
    job->m->have_params = true;
  }
  return g;
}

static bool wants_int8(const dlc_options *opt) {
  return opt && opt->quantize && strcmp(opt->quantize, "int8") == 0;
}

/* Each line of a multi-line message as an error of its own. */
static void report_lines(Ctx *c, const char *text) {
  for (const char *line = text; *line;) {
    size_t n = strcspn(line, "\n");
    diag_error(c, (SrcLoc){0}, "%.*s", (int)n, line);
    line += n + (line[n] == '\n');
  }
}

/* options.weights, bound to the graph as it compiled (before the passes,
 * which may drop params a full state_dict still names); they replace an
 * .onnx file's own. */
static bool bind_at_compile(Ctx *c, CompileJob *job, Graph *g) {
  TensorMap map;
  if (!api_check_weights(c, g, job->opt->weights, &job->m->own.values, &map)) {
    job->weights_failed = true;
    return false;
  }
  if (job->m->have_params) ir_tensor_map_free(&job->m->params);
  job->m->params = map;
  job->m->have_params = true;
  return true;
}

static void free_map(void *map) { ir_tensor_map_free(map); }

/* The pipeline, with a calibrator over the bound weights (or random ones
 * from calibrate_seed) when int8 is asked for. */
static bool run_passes(Ctx *c, CompileJob *job, Graph *g, PassOptions *po) {
  if (!wants_int8(job->opt)) return pass_run_pipeline(g, po, NULL);
  TensorMap random = {0};
  const TensorMap *params = &job->m->params;
  if (!job->m->have_params) {
    char err[8192];
    if (!ir_init_params(g, job->opt->calibrate_seed, IR_INIT_RANDOM, &random, err, sizeof err)) {
      report_lines(c, err);
      return false;
    }
    params = &random;
  }
  ApiCalibration cal = {.dir = job->opt->calibrate_dir,
                        .method = job->calib_method,
                        .params = params,
                        .max_samples = job->opt->calib_samples,
                        .backend = job->calib_backend,
                        .passes = po};
  po->quantize_int8 = true;
  po->calibrate = api_calibrate;
  po->calibrate_ud = &cal;
  /* The passes allocate from the arena: a failure unwinds past the map. */
  ctx_hold_with(c, free_map, &random);
  bool ok = pass_run_pipeline(g, po, NULL);
  ctx_release(c, &random);
  ir_tensor_map_free(&random);
  return ok;
}

static void index_inputs(dlc_model *m) {
  int n = 0;
  for (Node *node = m->g->first; node; node = node->next) n += node->op == OP_INPUT;
  m->n_inputs = n;
  m->inputs = ARENA_ARRAY(&m->ctx.arena, Node *, n > 0 ? n : 1);
  m->input_data = calloc((size_t)(n > 0 ? n : 1), sizeof(Tensor));
  m->outputs = calloc((size_t)(m->g->n_outputs > 0 ? m->g->n_outputs : 1), sizeof(Tensor));
  n = 0;
  for (Node *node = m->g->first; node; node = node->next)
    if (node->op == OP_INPUT) m->inputs[n++] = node;
}

static bool optim_spec_from_api(Ctx *c, const dlc_options *opt, OptimSpec *out) {
  const dlc_optimizer *o = opt->optimizer;
  OptimKind kind;
  if (!opt->grad) return diag_error(c, (SrcLoc){0}, "an optimizer needs grad (a training step)"), false;
  if (!optim_from_name(o->kind, &kind))
    return diag_error(c, (SrcLoc){0}, "unknown optimizer '%s' (expected %s)", o->kind ? o->kind : "(null)",
                      optim_names().s),
           false;
  *out = (OptimSpec){.kind = kind, .momentum = o->momentum, .dampening = o->dampening, .nesterov = o->nesterov,
                     .weight_decay = o->weight_decay, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                     .clip_grad_norm = o->clip_grad_norm, .keep_grads = o->keep_grads,
                     .data_parallel = o->data_parallel, .grad_stats_input = o->grad_stats_input != 0,
                     .maximize = o->maximize != 0, .amsgrad = o->amsgrad != 0, .alpha = o->alpha,
                     .centered = o->centered != 0, .lr_decay = o->lr_decay,
                     .initial_accumulator_value = o->initial_accumulator_value,
                     .momentum_input = o->momentum_input != 0, .no_decay = o->no_decay,
                     .clip_grad_value = o->clip_grad_value, .rho = o->rho, .momentum_decay = o->momentum_decay,
                     .decoupled_weight_decay = o->decoupled_weight_decay != 0};
  if (!(o->bucket_mb >= 0 && o->bucket_mb < 1e6))
    return diag_error(c, (SrcLoc){0}, "bucket_mb must be in [0, 1e6) MiB, got %g", o->bucket_mb), false;
  out->bucket_bytes = (int64_t)(o->bucket_mb * 1024 * 1024);
  return true;
}

/* dlc_options.tensor_parallel: this rank's graph (passes/tensor_par.c),
 * or false after reporting what it does not combine with. */
static bool split_tensors(Ctx *c, const dlc_options *o, Graph *g, TpResult *tp) {
  const char *no = o->tensor_rank < 0 || o->tensor_rank >= o->tensor_parallel ? "a rank outside [0, tensor_parallel)"
                   : o->quantize && strcmp(o->quantize, "none")                  ? "int8 quantization"
                                                                                : NULL;
  if (no) {
    diag_error(c, (SrcLoc){0}, "tensor parallel over %d ranks does not support %s yet", o->tensor_parallel, no);
    return false;
  }
  TpOptions to = {.ranks = o->tensor_parallel, .rank = o->tensor_rank,
                  .fuse_attention = o->opt_level == 0 || o->opt_level == 2, .inference = !o->grad && !o->tensor_parallel_step};
  return pass_tensor_parallel(g, &to, tp) && ir_verify(g);
}

/* The optimizer's state of a split parameter NAME ("dlcc.optim.NAME.*")
 * is split as NAME is. */
static void split_optimizer_state(Graph *g, TpResult *tp) {
  int n = tp->n_splits;
  for (Node *p = g->first; p; p = p->next) {
    const char *name = p->op == OP_PARAM ? ir_attr_str(p, "name") : NULL;
    if (!name || strncmp(name, "dlcc.optim.", 11)) continue;
    for (int i = 0; i < n; i++) {
      size_t k = strlen(tp->splits[i].param);
      if (strncmp(name + 11, tp->splits[i].param, k) || name[11 + k] != '.' || strchr(name + 12 + k, '.')) continue;
      TpSplit *s = ARENA_ARRAY(&g->ctx->arena, TpSplit, tp->n_splits + 1);
      memcpy(s, tp->splits, sizeof *s * (size_t)tp->n_splits);
      s[tp->n_splits] = tp->splits[i];
      s[tp->n_splits++].param = name;
      tp->splits = s;
    }
  }
}

/* Tensor parallel: each sharded weight of map (whole, as a file or a
 * seed gives it) cut to this rank's parts; false when memory ran out. */
static bool tp_localize(const TpResult *tp, TensorMap *map) {
  for (int i = 0; i < map->n; i++) {
    Tensor *t = &map->tensors[i];
    int axis;
    if (!tp_is_sharded(tp, map->names[i], &axis)) continue;
    TensorType local = t->type;
    local.dims[axis] /= tp->ranks;
    Tensor part;
    if (!ir_tensor_alloc(&part, &local)) return false;
    tp_copy_part(tp, map->names[i], tp->rank, t->type.rank, t->type.dims, (size_t)ir_dtype_size(t->type.dtype),
                 t->data, part.data, false);
    ir_tensor_free(t);
    *t = part;
  }
  return true;
}

/* The sharded params of g in their whole shape (whole) or this rank's
 * (not), so that a file or a seed binds them as one process would. */
static void tp_param_shapes(Graph *g, const TpResult *tp, bool whole) {
  for (Node *n = g->first; n; n = n->next) {
    int axis;
    if (n->op != OP_PARAM || !tp_is_sharded(tp, ir_attr_str(n, "name"), &axis)) continue;
    if (whole)
      n->out[0].type.dims[axis] *= tp->ranks;
    else
      n->out[0].type.dims[axis] /= tp->ranks;
  }
}

static int compile_job(Ctx *c, void *data) {
  CompileJob *job = data;
  Graph *g;
  if (job->path && has_suffix(job->path, ".onnx")) {
    g = import_onnx(c, job);
    goto have_graph;
  }
  const SrcFile *f;
  if (job->path) {
    f = ctx_load_file(c, job->path);
    if (!f) return 1;
  } else {
    f = ctx_add_file(c, job->name, arena_strdup(&c->arena, job->text), strlen(job->text));
  }
  if (has_suffix(f->name, ".ir")) {
    g = ir_parse(c, f);
  } else {
    Program *p = fe_parse(c, f);
    if (!p) return 1;
    int nd;
    Define *defs = copy_defines(c, job->opt, &nd);
    LowerOptions lo = {.model = job->opt ? job->opt->model : NULL, .n_defines = nd, .defines = defs,
                       .training = job->opt && job->opt->grad};
    lo.input_shapes = copy_input_shapes(c, job->opt, &lo.n_input_shapes);
    g = fe_lower(c, p, &lo);
  }
have_graph:
  if (!g || !ir_verify(g)) return 1;
  if (job->opt && job->opt->eval_mode) {
    if (job->opt->grad)
      return diag_error(c, (SrcLoc){0}, "eval_mode and grad: a training step runs in training mode"), 1;
    if (!pass_eval_mode(g) || !ir_verify(g)) return 1;
  } else if (!job->train && !(job->opt && job->opt->grad)) {
    note_training_mode(c, g);
  }
  if (job->opt && job->opt->weights && !bind_at_compile(c, job, g)) return 1;
  if (job->train && job->train->has_loss &&
      (!pass_append_loss(g, &job->train->loss, job->train->output, API_TARGET_INPUT,
                         job->train->has_target_type ? &job->train->target_type : NULL) ||
       !ir_verify(g)))
    return 1;
  /* f16 training steps scale the loss (GradScaler); bf16 has f32's
   * range and needs none, nor do gradients without an optimizer. */
  bool f16_step = job->opt && job->opt->optimizer && job->opt->precision && strcmp(job->opt->precision, "f16") == 0;
  int split = job->opt ? job->opt->loss_scale : 0;
  if (split && split != DLC_LOSS_SCALE_SEED && split != DLC_LOSS_SCALE_FED) {
    diag_error(c, (SrcLoc){0}, "loss_scale must be 0, DLC_LOSS_SCALE_SEED or DLC_LOSS_SCALE_FED, got %d", split);
    return 1;
  }
  if (job->opt && (job->opt->sync_bn < 0 || (job->opt->sync_bn && !job->opt->grad))) {
    diag_error(c, (SrcLoc){0}, "sync_bn must be 0, or a count of ranks with grad (a training step's batchnorm), got %d",
               job->opt->sync_bn);
    return 1;
  }
  if (job->opt && job->opt->optimizer && job->opt->sync_bn && job->opt->sync_bn != job->opt->optimizer->sync_bn) {
    diag_error(c, (SrcLoc){0}, "sync_bn is %d in the model's options and %d in the optimizer's: a step with an "
               "optimizer takes the optimizer's (set that one)", job->opt->sync_bn, job->opt->optimizer->sync_bn);
    return 1;
  }
  /* A pipeline's stages split the scaler: the last one's backward seeds
   * with the scale, each optimizer unscales what it is fed. */
  bool seed_scaled = split ? split == DLC_LOSS_SCALE_SEED : f16_step;
  bool loss_scaling = split ? split == DLC_LOSS_SCALE_FED : f16_step;
  if (job->opt && job->opt->tensor_parallel > 1 && !split_tensors(c, job->opt, g, &job->m->tp)) return 1;
  if (job->opt && job->opt->grad && job->opt->freeze && !pass_freeze_params(g, job->opt->freeze)) return 1;
  int level = job->opt ? job->opt->opt_level : 0;
  AutodiffOptions ado = {.loss_scale = seed_scaled,
                         .sync_bn = !job->opt                  ? 0
                                    : job->opt->optimizer ? job->opt->optimizer->sync_bn
                                                          : job->opt->sync_bn,
                         .unroll_rnn = job->opt && job->opt->unroll_rnn,
                         .fuse_attention = level == 0 || level == 2};
  if (job->opt && job->opt->grad && (!pass_autodiff(g, &ado) || !ir_verify(g))) return 1;
  if (job->opt && job->opt->optimizer) {
    OptimSpec spec;
    if (!optim_spec_from_api(c, job->opt, &spec)) return 1;
    spec.loss_scaling = loss_scaling;
    spec.scaled_elsewhere = split == DLC_LOSS_SCALE_FED;
    /* the clip's norm and the overflow check span the tensor group */
    spec.tp_parts = tp_split_names(g, &job->m->tp);
    spec.n_tp_parts = job->m->tp.n_splits;
    if (!pass_append_optimizer(g, &spec) || !ir_verify(g)) return 1;
    split_optimizer_state(g, &job->m->tp);
  }
  if (job->m->have_params && !tp_localize(&job->m->tp, &job->m->params)) {
    diag_error(c, (SrcLoc){0}, "out of memory cutting the weights to this rank's parts");
    return 1;
  }
  PassOptions po = {.opt_level = level == DLC_O0 ? 0 : level == 0 ? 2 : level,
                    .recompute = job->opt && job->opt->grad ? job->opt->recompute : NULL};
  const char *prec = job->opt ? job->opt->precision : NULL;
  if (prec && (!ir_dtype_from_name(prec, &po.precision) ||
               (po.precision != TY_F32 && po.precision != TY_F16 && po.precision != TY_BF16))) {
    diag_error(c, (SrcLoc){0}, "unknown precision '%s' (expected f32, f16 or bf16)", prec);
    return 1;
  }
  if (!run_passes(c, job, g, &po)) return 1;
  CgOptions cgo = {.tf32 = job->opt && job->opt->tf32,
                   .no_split_k = job->opt && job->opt->no_split_k,
                   .merge_launches = po.opt_level > 0 && !(job->opt && job->opt->no_merge_launches),
                   .no_chain_launches = job->opt && job->opt->no_chain_launches};
  if (job->m->use_runtime && !cg_compile_opts(g, &cgo, &job->m->cg)) return 1;
  job->m->g = g;
  index_inputs(job->m);
  return 0;
}

dlc_status dlc_optimizer_defaults(const char *kind, dlc_optimizer *out) {
  OptimKind k;
  if (!out || !optim_from_name(kind, &k)) return DLC_ERR_ARGUMENT;
  OptimSpec s = optim_spec_default(k);
  *out = (dlc_optimizer){.kind = optim_name(k), .momentum = s.momentum, .dampening = s.dampening,
                         .nesterov = s.nesterov, .weight_decay = s.weight_decay, .beta1 = s.beta1,
                         .beta2 = s.beta2, .eps = s.eps, .clip_grad_norm = s.clip_grad_norm, .alpha = s.alpha,
                         .rho = s.rho, .momentum_decay = s.momentum_decay};
  return DLC_OK;
}

/* Weights that came with the model (ONNX initializers) to the runtime;
 * those the optimizer removed are not in the plan. */
static dlc_status push_bound_params(dlc_model *m) {
  for (int i = 0; i < m->params.n; i++) {
    bool used = false;
    for (Node *n = m->g->first; n && !used; n = n->next)
      used = n->op == OP_PARAM && strcmp(ir_attr_str(n, "name"), m->params.names[i]) == 0;
    const Tensor *t = &m->params.tensors[i];
    if (used && dlrt_set_weight(m->rt, m->params.names[i], t->data, ir_tensor_nbytes(&t->type)) != DLRT_OK) {
      dlc_status st = fail(m, DLC_ERR_WEIGHTS, "dlcc: error: %s\n", dlrt_error(m->rt));
      m->g = NULL;
      return st;
    }
  }
  return DLC_OK;
}

/* quantize, calibrate_dir, calib_method, calib_samples and
 * calib_backend, together. */
static dlc_status check_quant_options(dlc_model *m, CompileJob *job) {
  const dlc_options *opt = job->opt;
  job->calib_method = api_calib_default_method();
  job->calib_backend = CALIB_ON_AUTO;
  if (!opt) return DLC_OK;
  if (opt->quantize && strcmp(opt->quantize, "int8") != 0 && strcmp(opt->quantize, "none") != 0)
    return fail(m, DLC_ERR_ARGUMENT, "dlcc: error: unknown quantize '%s' (expected int8 or none)\n",
                opt->quantize);
  if (!wants_int8(opt)) {
    if (opt->calibrate_dir || opt->calib_method || opt->calib_samples)
      return fail(m, DLC_ERR_ARGUMENT,
                  "dlcc: error: calibrate_dir, calib_method and calib_samples are for quantize \"int8\"\n");
    if (opt->calib_backend)
      return fail(m, DLC_ERR_ARGUMENT, "dlcc: error: calib_backend is for quantize \"int8\"\n");
    return DLC_OK;
  }
  if (!opt->calibrate_dir)
    return fail(m, DLC_ERR_ARGUMENT,
                "dlcc: error: quantize \"int8\" needs calibrate_dir, a folder of sample inputs (.npy) to "
                "measure the activations' ranges on\n");
  if (opt->precision && (strcmp(opt->precision, "f16") == 0 || strcmp(opt->precision, "bf16") == 0))
    return fail(m, DLC_ERR_ARGUMENT,
                "dlcc: error: quantize \"int8\" and precision \"%s\" do not combine: choose one\n",
                opt->precision);
  if (opt->calib_samples < 0)
    return fail(m, DLC_ERR_ARGUMENT, "dlcc: error: calib_samples is %d; it counts samples (0: all)\n",
                opt->calib_samples);
  char err[256];
  if (opt->calib_method && !api_calib_parse_method(opt->calib_method, &job->calib_method, err, sizeof err))
    return fail(m, DLC_ERR_ARGUMENT, "dlcc: error: calib_method: %s\n", err);
  if (opt->calib_backend && !api_calib_parse_backend(opt->calib_backend, &job->calib_backend, err, sizeof err))
    return fail(m, DLC_ERR_ARGUMENT, "dlcc: error: calib_backend: %s\n", err);
  return DLC_OK;
}

static dlc_status compile(CompileJob *job, dlc_model **out) {
  *out = NULL;
  dlc_model *m = calloc(1, sizeof *m);
  if (!m) return DLC_ERR_NOMEM;
  ctx_init(&m->ctx);
  *out = m;
  const char *backend = job->opt && job->opt->backend ? job->opt->backend : "auto";
  if (strcmp(backend, "ref") != 0) {
    if (strcmp(backend, "auto") != 0 && strcmp(backend, "emu") != 0 && strcmp(backend, "cuda") != 0)
      return fail(m, DLC_ERR_ARGUMENT,
                  "dlcc: error: unknown backend '%s' (expected auto, cuda, emu or ref)\n", backend);
    m->use_runtime = true;
  }
  if (check_quant_options(m, job) != DLC_OK) return DLC_ERR_ARGUMENT;
  job->m = m;
  int rc = ctx_guard(&m->ctx, compile_job, job);
  if (rc != 0 || m->ctx.diag.errors) {
    m->g = NULL;
    if (rc < 0) return unwound(m);
    return fail(m, job->weights_failed ? DLC_ERR_WEIGHTS : DLC_ERR_COMPILE, "%s", diag_text(&m->ctx));
  }
  if (!m->input_data || !m->outputs) {
    m->g = NULL;
    return fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
  }
  if (m->use_runtime && dlrt_open(m->cg.plan, backend, &m->rt) != DLRT_OK) {
    dlc_status st = fail(m, DLC_ERR_COMPILE, "dlcc: error: %s\n", dlrt_error(m->rt));
    m->g = NULL;
    return st;
  }
  if (m->use_runtime && job->opt && job->opt->no_graphs && dlrt_set_graphs(m->rt, 0) != DLRT_OK) {
    dlc_status st = fail(m, DLC_ERR_COMPILE, "dlcc: error: %s\n", dlrt_error(m->rt));
    m->g = NULL;
    return st;
  }
  if (m->use_runtime && m->have_params) {
    dlc_status st = push_bound_params(m);
    if (st != DLC_OK) return st;
  }
  /* Warnings (an unused -D, say) travel with a successful compile. */
  if (m->ctx.diag.len) fail(m, DLC_OK, "%s", diag_text(&m->ctx));
  return DLC_OK;
}

dlc_status dlc_compile_file(const char *path, const dlc_options *opt, dlc_model **out) {
  if (!out) return DLC_ERR_ARGUMENT;
  if (!path) {
    *out = NULL;
    return DLC_ERR_ARGUMENT;
  }
  CompileJob job = {.path = path, .opt = opt};
  return compile(&job, out);
}

dlc_status api_compile_train(const char *path, const dlc_options *opt, const ApiTrainSpec *spec,
                             dlc_model **out) {
  if (!out) return DLC_ERR_ARGUMENT;
  *out = NULL;
  if (!path || !spec) return DLC_ERR_ARGUMENT;
  CompileJob job = {.path = path, .opt = opt, .train = spec};
  return compile(&job, out);
}

dlc_status api_compile_train_text(const char *name, const char *text, const dlc_options *opt,
                                  const ApiTrainSpec *spec, dlc_model **out) {
  if (!out) return DLC_ERR_ARGUMENT;
  *out = NULL;
  if (!name || !text || !spec) return DLC_ERR_ARGUMENT;
  CompileJob job = {.name = name, .text = text, .opt = opt, .train = spec};
  return compile(&job, out);
}

dlc_status dlc_compile_string(const char *name, const char *text, const dlc_options *opt,
                              dlc_model **out) {
  if (!out) return DLC_ERR_ARGUMENT;
  *out = NULL;
  if (!text) return DLC_ERR_ARGUMENT;
  CompileJob job = {.name = name ? name : "<string>", .text = text, .opt = opt};
  return compile(&job, out);
}

static void free_outputs(dlc_model *m) {
  if (!m->outputs || !m->g) return;
  for (int i = 0; i < m->g->n_outputs; i++) ir_tensor_free(&m->outputs[i]);
  m->have_outputs = false;
}

void dlc_free(dlc_model *m) {
  if (!m) return;
  free_outputs(m);
  for (int i = 0; m->input_data && i < m->n_inputs; i++) ir_tensor_free(&m->input_data[i]);
  free(m->input_data);
  free(m->outputs);
  if (m->have_params) ir_tensor_map_free(&m->params);
  ir_tensor_map_free(&m->own.values);
  free(m->error);
  dlrt_close(m->rt);
  ctx_free(&m->ctx);
  free(m);
}

const char *dlc_backend(const dlc_model *m) {
  if (!m || !m->g) return "";
  return m->use_runtime ? dlrt_backend(m->rt) : "ref";
}

const char *dlc_engine_report(dlc_model *m) {
  if (!m || !m->g) return "";
  return m->use_runtime ? dlrt_engine_report(m->rt) : "the reference interpreter: no graphs, no staging";
}

int dlc_num_tensor_splits(const dlc_model *m) { return m && m->g ? m->tp.n_splits : 0; }

dlc_status dlc_tensor_split_info(const dlc_model *m, int index, dlc_tensor_split *out) {
  if (!out || index < 0 || index >= dlc_num_tensor_splits(m)) return DLC_ERR_ARGUMENT;
  const TpSplit *s = &m->tp.splits[index];
  *out = (dlc_tensor_split){.param = s->param, .axis = s->axis, .start = s->start, .len = s->len,
                            .sharded = s->sharded};
  return DLC_OK;
}

dlc_status dlc_weight_part(const dlc_model *m, const char *name, int rank, int dims, const int64_t *whole_dims,
                           void *whole, void *part, int to_whole) {
  if (!m || !m->g || !name || !whole_dims || !whole || !part || dims < 1 || dims > DL_MAX_RANK) return DLC_ERR_ARGUMENT;
  const Tensor *t = m->have_params ? ir_tensor_map_find(&m->params, name) : NULL;
  if (!t || t->type.rank != dims) return DLC_ERR_ARGUMENT;
  return tp_copy_part(&m->tp, name, rank, dims, whole_dims, (size_t)ir_dtype_size(t->type.dtype), whole, part,
                      to_whole != 0)
             ? DLC_OK
             : DLC_ERR_ARGUMENT;
}

dlc_status dlc_set_comm(dlc_model *m, dlc_comm_fn fn, void *ctx) {
  if (!m || !m->g) return DLC_ERR_ARGUMENT;
  if (!m->use_runtime) {
    m->ref_comm = fn, m->ref_comm_ctx = ctx;
    return DLC_OK;
  }
  if (!m->rt) return api_fail(m, DLC_ERR_ARGUMENT, "the model has no plan to run");
  if (dlrt_set_comm(m->rt, fn, ctx)) return api_fail(m, DLC_ERR_RUN, "%s", dlrt_error(m->rt));
  return DLC_OK;
}

dlc_status dlc_plan_memory(const dlc_model *m, uint64_t *weights_bytes, uint64_t *arena_bytes) {
  if (!m || !m->g || !m->use_runtime || !m->cg.plan || !weights_bytes || !arena_bytes) return DLC_ERR_ARGUMENT;
  *weights_bytes = m->cg.plan->weights_bytes;
  *arena_bytes = m->cg.plan->arena_bytes;
  return DLC_OK;
}

int dlc_num_tensor_notes(const dlc_model *m) { return m && m->g ? m->tp.n_lines : 0; }

const char *dlc_tensor_note(const dlc_model *m, int index) {
  return index >= 0 && index < dlc_num_tensor_notes(m) ? m->tp.lines[index] : NULL;
}

int dlc_num_inputs(const dlc_model *m) { return m && m->g ? m->n_inputs : 0; }
int dlc_num_outputs(const dlc_model *m) { return m && m->g ? ir_visible_outputs(m->g) : 0; }

void api_tensor_info(dlc_tensor_info *out, const char *name, const TensorType *t) {
  memset(out, 0, sizeof *out);
  out->name = name;
  out->dtype = (dlc_dtype)t->dtype;
  out->rank = t->rank;
  for (int i = 0; i < t->rank; i++) out->dims[i] = t->dims[i];
  out->nbytes = ir_tensor_nbytes(t);
  out->run_time_axis = -1;
}

/* The smallest extent any gather indexes with this value. */
dlc_status dlc_input_info(const dlc_model *m, int index, dlc_tensor_info *out) {
  if (!m || !m->g || !out || index < 0 || index >= m->n_inputs) return DLC_ERR_ARGUMENT;
  Node *n = m->inputs[index];
  api_tensor_info(out, ir_attr(n, "name")->s, &n->out[0].type);
  out->index_bound = ir_index_bound(m->g, &n->out[0]);
  return DLC_OK;
}

dlc_status dlc_output_info(const dlc_model *m, int index, dlc_tensor_info *out) {
  if (!m || !m->g || !out || index < 0 || index >= m->g->n_outputs) return DLC_ERR_ARGUMENT;
  api_tensor_info(out, m->g->output_names[index], &m->g->outputs[index]->type);
  ir_output_length(m->g, index, &out->run_time_axis);
  return DLC_OK;
}

int dlc_input_index(const dlc_model *m, const char *name) {
  if (!m || !m->g || !name) return -1;
  for (int i = 0; i < m->n_inputs; i++)
    if (strcmp(ir_attr(m->inputs[i], "name")->s, name) == 0) return i;
  return -1;
}

static dlc_status no_model(dlc_model *m) {
  return fail(m, DLC_ERR_ARGUMENT, "dlcc: error: the model did not compile\n");
}

static void set_params(dlc_model *m, TensorMap *params) {
  if (m->have_params) ir_tensor_map_free(&m->params);
  m->params = *params;
  m->have_params = true;
}

typedef struct WeightsJob {
  dlc_model *m;
  const char *path;
  uint64_t seed;
  TensorMap map;
  char err[8192];
  bool ok;
} WeightsJob;

/* An ONNX model's constants (own's values) stay through a random draw:
 * they are no weights. */
static void keep_own(const TensorMap *own, TensorMap *map) {
  for (int i = 0; i < own->n; i++) {
    Tensor *t = own->tensors[i].data ? (Tensor *)ir_tensor_map_find(map, own->names[i]) : NULL;
    if (t && ir_type_eq(&t->type, &own->tensors[i].type))
      memcpy(t->data, own->tensors[i].data, ir_tensor_nbytes(&t->type));
  }
}

static int bind_job(Ctx *c, void *data) {
  WeightsJob *job = data;
  job->ok = job->path ? api_check_weights(c, job->m->g, job->path, &job->m->own.values, &job->map)
                      : ir_init_params(job->m->g, job->seed, IR_INIT_RANDOM, &job->map, job->err,
                                       sizeof job->err);
  if (job->ok && !job->path) keep_own(&job->m->own.values, &job->map);
  return 0;
}

static dlc_status weights(dlc_model *m, const char *path, uint64_t seed) {
  if (!m) return DLC_ERR_ARGUMENT;
  if (!m->g) return no_model(m);
  WeightsJob *job = calloc(1, sizeof *job);
  if (!job) return fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
  job->m = m;
  job->path = path;
  job->seed = seed;
  diag_clear(&m->ctx);
  dlc_status st = DLC_OK;
  tp_param_shapes(m->g, &m->tp, true);
  int rc = ctx_guard(&m->ctx, bind_job, job);
  tp_param_shapes(m->g, &m->tp, false);
  if (rc >= 0 && job->ok && !tp_localize(&m->tp, &job->map)) {
    ir_tensor_map_free(&job->map);
    free(job);
    return fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
  }
  if (rc < 0)
    st = unwound(m);
  else if (!job->ok && path)
    st = fail(m, DLC_ERR_WEIGHTS, "%s", diag_text(&m->ctx));
  else if (!job->ok)
    st = fail_lines(m, DLC_ERR_INTERNAL, job->err);
  else {
    for (int i = 0; m->use_runtime && st == DLC_OK && i < job->map.n; i++) {
      const Tensor *t = &job->map.tensors[i];
      if (dlrt_set_weight(m->rt, job->map.names[i], t->data, ir_tensor_nbytes(&t->type)) != DLRT_OK)
        st = fail(m, DLC_ERR_WEIGHTS, "dlcc: error: %s\n", dlrt_error(m->rt));
    }
    if (st == DLC_OK) {
      set_params(m, &job->map);
      clear_error(m);
    } else {
      ir_tensor_map_free(&job->map);
    }
  }
  free(job);
  return st;
}

dlc_status dlc_load_weights(dlc_model *m, const char *path) {
  if (!path) return m ? fail(m, DLC_ERR_ARGUMENT, "dlcc: error: no weights file given\n") : DLC_ERR_ARGUMENT;
  return weights(m, path, 0);
}

dlc_status dlc_init_weights(dlc_model *m, uint64_t seed) { return weights(m, NULL, seed); }

int dlc_weights_bound(const dlc_model *m) { return m && m->g && m->have_params; }

/* The bound weight `name` of nbytes, or NULL after failing m. */
static Tensor *bound_weight(dlc_model *m, const char *name, const void *data, size_t nbytes, dlc_status *st) {
  *st = DLC_ERR_ARGUMENT;
  if (!m) return NULL;
  if (!m->g) return *st = no_model(m), NULL;
  if (!m->have_params) {
    *st = fail(m, DLC_ERR_WEIGHTS, "dlcc: error: the model's weights are not bound\n");
    return NULL;
  }
  Tensor *t = (Tensor *)ir_tensor_map_find(&m->params, name);
  if (!t) {
    *st = fail(m, DLC_ERR_ARGUMENT, "dlcc: error: the model has no weight '%s'\n", name ? name : "(null)");
    return NULL;
  }
  size_t want = ir_tensor_nbytes(&t->type);
  if (!data || nbytes != want) {
    char buf[IR_TYPE_STR_MAX];
    *st = fail(m, DLC_ERR_ARGUMENT, "dlcc: error: weight '%s' is %s (%zu bytes), got %zu bytes\n", name,
               ir_type_str(&t->type, buf, sizeof buf), want, data ? nbytes : 0);
    return NULL;
  }
  return t;
}

dlc_status dlc_get_weight(dlc_model *m, const char *name, void *data, size_t nbytes) {
  dlc_status st;
  Tensor *t = bound_weight(m, name, data, nbytes, &st);
  if (!t) return st;
  if (m->use_runtime && dlrt_get_weight(m->rt, name, data, nbytes) != DLRT_OK)
    return fail(m, DLC_ERR_RUN, "dlcc: error: %s\n", dlrt_error(m->rt));
  if (!m->use_runtime) memcpy(data, t->data, nbytes);
  clear_error(m);
  return DLC_OK;
}

dlc_status dlc_set_weight(dlc_model *m, const char *name, const void *data, size_t nbytes) {
  dlc_status st;
  Tensor *t = bound_weight(m, name, data, nbytes, &st);
  if (!t) return st;
  if (m->use_runtime && dlrt_set_weight(m->rt, name, data, nbytes) != DLRT_OK)
    return fail(m, DLC_ERR_WEIGHTS, "dlcc: error: %s\n", dlrt_error(m->rt));
  memcpy(t->data, data, nbytes);
  clear_error(m);
  return DLC_OK;
}

dlc_status dlc_set_input(dlc_model *m, const char *name, const void *data, size_t nbytes) {
  if (!m) return DLC_ERR_ARGUMENT;
  if (!m->g) return no_model(m);
  int i = dlc_input_index(m, name);
  if (i < 0) return fail(m, DLC_ERR_ARGUMENT, "dlcc: error: the model has no input '%s'\n", name ? name : "(null)");
  const TensorType *t = &m->inputs[i]->out[0].type;
  size_t want = ir_tensor_nbytes(t);
  if (!data || nbytes != want) {
    char buf[IR_TYPE_STR_MAX];
    return fail(m, DLC_ERR_ARGUMENT, "dlcc: error: input '%s' is %s (%zu bytes), got %zu bytes\n", name,
                ir_type_str(t, buf, sizeof buf), want, data ? nbytes : 0);
  }
  Tensor *slot = &m->input_data[i];
  if (!slot->data && !ir_tensor_alloc(slot, t)) return fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
  memcpy(slot->data, data, nbytes);
  clear_error(m);
  return DLC_OK;
}

typedef struct RunJob {
  dlc_model *m;
  TensorMap inputs;
  char err[4096];
  bool ok;
} RunJob;

/* An all-reduce of the ref backend's evaluation through dlc_set_comm's
 * communicator, on host memory (device "ref"), started and waited for
 * at once: the evaluation needs its result next. */
static bool ref_reduce(void *ctx, float *data, int64_t count, bool sum, char *err, size_t errlen) {
  dlc_model *m = ctx;
  int op = sum ? DLRT_COMM_SUM : DLRT_COMM_MEAN;
  return m->ref_comm(m->ref_comm_ctx, "ref", (uint64_t)(uintptr_t)data, (uint64_t)count, m->ref_buckets++, op, err,
                     errlen) == 0 &&
         m->ref_comm(m->ref_comm_ctx, "ref", 0, 0, DLRT_COMM_WAIT, 0, err, errlen) == 0;
}

static int run_job(Ctx *c, void *data) {
  RunJob *job = data;
  dlc_model *m = job->m;
  IrEvalComm comm = {ref_reduce, m};
  m->ref_buckets = 0;
  job->ok = ir_eval_comm(m->g, &job->inputs, &m->params, m->outputs, m->ref_comm ? &comm : NULL, job->err,
                         sizeof job->err) &&
            ir_apply_updates(m->g, m->outputs, &m->params, job->err, sizeof job->err) &&
            ir_trim_outputs(m->g, m->outputs, job->err, sizeof job->err);
  return 0;
}

static dlc_status run_on_runtime(dlc_model *m) {
  for (int i = 0; i < m->n_inputs; i++) {
    const Tensor *t = &m->input_data[i];
    if (dlrt_set_input_by_name(m->rt, ir_attr(m->inputs[i], "name")->s, t->data,
                               ir_tensor_nbytes(&t->type)) != DLRT_OK)
      return fail(m, DLC_ERR_RUN, "dlcc: error: %s\n", dlrt_error(m->rt));
  }
  if (dlrt_run(m->rt) != DLRT_OK) return fail(m, DLC_ERR_RUN, "dlcc: error: %s\n", dlrt_error(m->rt));
  /* Each output is copied out when it is first asked for (fetch_output):
   * a training step's state stays on the device unless someone reads it. */
  m->have_outputs = true;
  clear_error(m);
  return DLC_OK;
}

dlc_status dlc_run(dlc_model *m) {
  if (!m) return DLC_ERR_ARGUMENT;
  if (!m->g) return no_model(m);
  for (int i = 0; i < m->n_inputs; i++)
    if (!m->input_data[i].data)
      return fail(m, DLC_ERR_INPUT, "dlcc: error: input '%s' was not set\n", ir_attr(m->inputs[i], "name")->s);
  if (!m->have_params) {
    int n_params = 0;
    for (Node *n = m->g->first; n; n = n->next) n_params += n->op == OP_PARAM;
    if (n_params)
      return fail(m, DLC_ERR_WEIGHTS,
                  "dlcc: error: the model has %d parameters and no weights: load a file or "
                  "initialize them\n",
                  n_params);
  }
  free_outputs(m);
  if (m->use_runtime) return run_on_runtime(m);
  RunJob *job = calloc(1, sizeof *job);
  const char **names = calloc((size_t)(m->n_inputs > 0 ? m->n_inputs : 1), sizeof *names);
  if (!job || !names) {
    free(job);
    free(names);
    return fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
  }
  for (int i = 0; i < m->n_inputs; i++) names[i] = ir_attr(m->inputs[i], "name")->s;
  job->m = m;
  job->inputs = (TensorMap){m->n_inputs, names, m->input_data};
  diag_clear(&m->ctx);
  dlc_status st = DLC_OK;
  if (ctx_guard(&m->ctx, run_job, job) < 0)
    st = unwound(m);
  else if (!job->ok)
    st = fail(m, DLC_ERR_RUN, "dlcc: error: %s\n", job->err);
  else {
    m->have_outputs = true;
    clear_error(m);
  }
  free(names);
  free(job);
  return st;
}

int dlc_num_steps(const dlc_model *m) { return m && m->g && m->use_runtime ? dlrt_num_steps(m->rt) : 0; }

dlc_status dlc_profile(dlc_model *m, dlc_step_time *steps, int n) {
  if (!m || !steps) return DLC_ERR_ARGUMENT;
  if (!m->g) return no_model(m);
  if (!m->use_runtime) return fail(m, DLC_ERR_RUN, "dlcc: error: profile: the reference interpreter runs no steps\n");
  if (!m->have_outputs) return fail(m, DLC_ERR_RUN, "dlcc: error: profile: run the model once first (dlc_run)\n");
  double *us = malloc((size_t)(n > 0 ? n : 1) * sizeof *us);
  if (!us) return fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
  free_outputs(m);
  if (dlrt_profile(m->rt, us, n) != DLRT_OK) {
    free(us);
    return fail(m, DLC_ERR_RUN, "dlcc: error: %s\n", dlrt_error(m->rt));
  }
  m->have_outputs = true;
  for (int i = 0; i < n; i++) {
    /* the costs count the init steps first (plan_print.c) */
    IrCost c = m->cg.step_costs ? m->cg.step_costs[m->cg.plan->n_init_steps + (uint32_t)i] : (IrCost){0, 0};
    steps[i] = (dlc_step_time){.label = dlrt_step_label(m->rt, i), .us = us[i], .flops = c.flops, .bytes = c.bytes};
  }
  free(us);
  clear_error(m);
  return DLC_OK;
}

/* Output index of the last run on the runtime, copied out of it once. */
static dlc_status fetch_output(dlc_model *m, int index) {
  Tensor *t = &m->outputs[index];
  if (!m->use_runtime || t->data) return DLC_OK;
  TensorType type = m->g->outputs[index]->type;
  int axis;
  if (ir_output_length(m->g, index, &axis) >= 0) {
    DlrtTensorInfo run;
    if (dlrt_output_shape(m->rt, index, &run) != DLRT_OK)
      return fail(m, DLC_ERR_RUN, "dlcc: error: %s\n", dlrt_error(m->rt));
    type.dims[axis] = run.dims[axis];
  }
  if (!ir_tensor_alloc(t, &type)) return fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
  if (dlrt_get_output(m->rt, index, t->data, ir_tensor_nbytes(&t->type)) != DLRT_OK) {
    ir_tensor_free(t);
    return fail(m, DLC_ERR_RUN, "dlcc: error: %s\n", dlrt_error(m->rt));
  }
  return DLC_OK;
}

dlc_status dlc_get_output(dlc_model *m, int index, const void **data, size_t *nbytes) {
  if (!m || !data || !nbytes) return DLC_ERR_ARGUMENT;
  if (!m->g) return no_model(m);
  if (index < 0 || index >= m->g->n_outputs)
    return fail(m, DLC_ERR_ARGUMENT, "dlcc: error: the model has no output %d\n", index);
  if (!m->have_outputs) return fail(m, DLC_ERR_ARGUMENT, "dlcc: error: the model has not run yet\n");
  dlc_status st = fetch_output(m, index);
  if (st != DLC_OK) return st;
  *data = m->outputs[index].data;
  *nbytes = ir_tensor_nbytes(&m->outputs[index].type);
  return DLC_OK;
}

dlc_status dlc_output_shape(dlc_model *m, int index, dlc_tensor_info *out) {
  const void *data;
  size_t nbytes;
  dlc_status st = dlc_get_output(m, index, &data, &nbytes);
  if (st != DLC_OK || !out) return st != DLC_OK ? st : DLC_ERR_ARGUMENT;
  dlc_output_info(m, index, out);
  const TensorType *t = &m->outputs[index].type;
  for (int d = 0; d < t->rank; d++) out->dims[d] = t->dims[d];
  out->nbytes = nbytes;
  return DLC_OK;
}

/* dlc's input order (dlc_input_info) onto the runtime's. */
typedef struct BatchJob {
  dlc_feed_fn feed;
  void *user;
  int *order;
  void **ins;
} BatchJob;

static int feed_in_order(void *user, long batch, void *const *inputs) {
  BatchJob *job = user;
  for (int i = 0; job->order[i] >= 0; i++) job->ins[i] = inputs[job->order[i]];
  return job->feed(job->user, batch, job->ins);
}

dlc_status dlc_run_batches(dlc_model *m, dlc_feed_fn feed, dlc_drain_fn drain, void *user, long *n_batches) {
  if (n_batches) *n_batches = 0;
  if (!m || !feed || !drain) return DLC_ERR_ARGUMENT;
  if (!m->g) return no_model(m);
  if (!m->use_runtime)
    return fail(m, DLC_ERR_ARGUMENT, "dlcc: error: dlc_run_batches needs the cuda or emu backend, not ref\n");
  BatchJob job = {.feed = feed, .user = user};
  job.order = calloc((size_t)m->n_inputs + 1, sizeof *job.order);
  job.ins = calloc((size_t)m->n_inputs + 1, sizeof *job.ins);
  if (!job.order || !job.ins) {
    free(job.order), free(job.ins);
    return fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
  }
  for (int i = 0; i < m->n_inputs; i++) job.order[i] = dlrt_find_input(m->rt, ir_attr(m->inputs[i], "name")->s);
  job.order[m->n_inputs] = -1;
  DlrtStatus s = dlrt_run_batches(m->rt, feed_in_order, (DlrtDrainFn)drain, &job, n_batches);
  free(job.order), free(job.ins);
  if (s != DLRT_OK) return fail(m, DLC_ERR_RUN, "dlcc: error: %s\n", dlrt_error(m->rt));
  clear_error(m);
  return DLC_OK;
}

/* Pipeline-parallel inference, `mpirun -np S dlcc run MODEL --pipeline=S
 * [--micro-batches=M]` (docs/parallel.md): takes the model, its --input
 * files and the S ranks of the launch; cuts the inference graph into S
 * stages as the training pipeline does (passes/stages.c: at the model's
 * stage() marks, else balanced by the cost model), compiles and binds on
 * each rank only its own stage, streams the batch through the stages as
 * M micro-batches (GPipe's forward: stage s sends micro-batch m on while
 * it computes m + 1) and has the last rank gather, print and write the
 * outputs, which are a one-process run's.  Returns the exit status; a
 * rank that fails before the run ends every rank with its message. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/calibrate.h"
#include "api/model.h"
#include "api/weights.h"
#include "driver/comm.h"
#include "driver/pipeline.h"
#include "driver/run.h"
#include "driver/train_tp.h"
#include "frontend/ast.h"
#include "frontend/dims.h"
#include "frontend/onnx.h"
#include "ir/ir.h"
#include "passes/autodiff.h"
#include "passes/pass.h"
#include "passes/stages.h"
#ifdef HAVE_NCCL
#include "driver/comm_nccl.h"
#endif

/* How a model input or output of one micro-batch stands to the whole
 * batch's: cut along axis 0 (SPLIT), or the same tensor for every
 * micro-batch (WHOLE: an input that does not depend on the batch). */
typedef enum { PART_WHOLE, PART_SPLIT } Part;

typedef struct ModelInput {
  const char *name;
  TensorType whole, micro;
  Part part;
  const InputArg *given; /* NULL: drawn at random as one process draws it */
  Tensor drawn;
  const void *data;      /* the whole batch's */
} ModelInput;

typedef struct PipeRun {
  RunOptions *o;
  Dist *world; /* every rank: the status exchange, the outputs' gather */
  Dist *d;     /* this pipeline's ranks: rank s holds stage s */
  int s, S, M;
  int q, D;    /* this rank's pipeline of D (data parallel over pipelines) */
  int t, T;    /* this rank of its stage's T (--tensor-parallel inside the stages) */
  Dist *tensor; /* the stage's T ranks, NULL when T is 1 */
  DistComm comm; /* the stage plan's all-reduces, over tensor */
  Ctx ctx;
  Graph *whole; /* lowered at the whole batch: the types one process has */
  TensorMap onnx_params; /* an ONNX model's initializers, its weights (n 0 for .dl and .ir) */
  OnnxOwn onnx_own;      /* its own values a weights file need not give */
  Graph *g;     /* lowered at a micro-batch: the graph that is split */
  StageSplit sp;
  Graph *stage; /* this rank's stage */
  dlc_model *m;
  int n_inputs;
  ModelInput *inputs; /* by the whole graph's inputs */
  int n_in, n_out;    /* values of cut s and of cut s + 1 */
  size_t *in_bytes, *out_bytes;
  unsigned char **recv; /* [k]: stage_in.k of the micro-batch at hand */
  unsigned char **send; /* [m][k]: stage_out.k of micro-batch m, in flight */
  void **outputs;       /* the last stage's: each output of the whole batch */
  double busy;          /* seconds inside this rank's plan runs (--bench) */
  /* The stage draws (dropout, ONNX's random ops), and the samples of a
   * micro-batch: where micro-batch i's draws start is i * samples. */
  bool draws;
  int64_t samples;
  char err[2048];
} PipeRun;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static bool fail(PipeRun *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(PipeRun *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err, sizeof p->err, fmt, ap);
  va_end(ap);
  return false;
}

/* A compiler's message text as p's error, without the last newline.
 * Its lines begin "dlcc: error: " or "FILE:L:C: error: " and print as
 * they are (print_error); one line of the first kind loses the prefix,
 * which print_error and the other ranks' "rank R: " put back or replace. */
static bool fail_text(PipeRun *p, const char *text) {
  fail(p, "%s", text ? text : "out of memory");
  size_t n = strlen(p->err);
  while (n && p->err[n - 1] == '\n') p->err[--n] = 0;
  if (strncmp(p->err, "dlcc: error: ", 13) == 0 && !strchr(p->err, '\n'))
    memmove(p->err, p->err + 13, strlen(p->err + 13) + 1);
  return false;
}

static bool fail_diag(PipeRun *p, int rc) { return fail_text(p, rc < 0 ? NULL : diag_text(&p->ctx)); }

/* msg on stderr as one process prints it: the compiler's located
 * diagnostics as they are, other lines each after "dlcc: error: ". */
static void print_error(const char *msg) {
  if (strstr(msg, ": error: ")) {
    fprintf(stderr, "%s\n", msg);
    return;
  }
  for (const char *line = msg; *line;) {
    size_t n = strcspn(line, "\n");
    fprintf(stderr, "dlcc: error: %.*s\n", (int)n, line);
    line += n + (line[n] == '\n');
  }
}

/* ---- the graphs ---- */

typedef struct LowerJob {
  const RunOptions *o;
  int divide; /* each --input's axis 0 over this */
  Graph *g;
  TensorMap params; /* an ONNX model's */
  OnnxOwn own;
} LowerJob;

static int lower(Ctx *ctx, void *data) {
  LowerJob *job = data;
  const RunOptions *o = job->o;
  Graph *g;
  size_t n = strlen(o->model_path);
  Define *defs = ARENA_ARRAY(&ctx->arena, Define, o->api.n_defines + 1);
  for (int i = 0; i < o->api.n_defines; i++) defs[i] = (Define){o->api.defines[i].name, o->api.defines[i].value};
  /* The --input files' shapes, axis 0 divided: they bind free dims. */
  InputShape *shapes = ARENA_ARRAY(&ctx->arena, InputShape, o->n_inputs + 1);
  for (int i = 0; i < o->n_inputs; i++) {
    const RtTensor *t = &o->inputs[i].data;
    int64_t *dims = ARENA_ARRAY(&ctx->arena, int64_t, t->rank + 1);
    for (int k = 0; k < t->rank; k++) dims[k] = t->dims[k];
    if (t->rank) dims[0] /= job->divide;
    shapes[i] = (InputShape){o->inputs[i].name, t->rank, dims};
  }
  const SrcFile *f = NULL;
  if (driver_is_onnx(o->model_path)) {
    OnnxOptions oo = {.n_defines = o->api.n_defines, .defines = defs, .n_input_shapes = o->n_inputs,
                      .input_shapes = shapes, .own = &job->own, .loop_bound = o->api.loop_bound};
    g = fe_onnx_import(ctx, o->model_path, &oo, &job->params);
  } else if (!(f = ctx_load_file(ctx, o->model_path))) {
    return 1;
  } else if (n > 3 && strcmp(o->model_path + n - 3, ".ir") == 0) {
    g = ir_parse(ctx, f);
  } else {
    Program *prog = fe_parse(ctx, f);
    if (!prog) return 1;
    LowerOptions lo = {.model = o->api.model, .n_defines = o->api.n_defines, .defines = defs,
                       .n_input_shapes = o->n_inputs, .input_shapes = shapes, .stages = true};
    g = fe_lower(ctx, prog, &lo);
  }
  if (!g || !ir_verify(g)) return 1;
  /* --eval before the cut, so that no stage holds the dropouts and
   * their state params the whole run would not bind */
  if (o->api.eval_mode && (!pass_eval_mode(g) || !ir_verify(g))) return 1;
  job->g = g;
  return 0;
}

/* A micro-batch's type against the whole batch's: the same, or axis 0
 * divided by M, or neither (-1). */
static int part_of(const TensorType *whole, const TensorType *micro, int M) {
  if (whole->dtype != micro->dtype || whole->rank != micro->rank) return -1;
  bool same = true, split = whole->rank > 0 && whole->dims[0] == micro->dims[0] * M;
  for (int i = 0; i < whole->rank; i++) {
    same &= whole->dims[i] == micro->dims[i];
    if (i > 0) split &= whole->dims[i] == micro->dims[i];
  }
  return same ? PART_WHOLE : split ? PART_SPLIT : -1;
}

static const Node *input_named(Graph *g, const char *name) {
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_INPUT && strcmp(ir_attr_str(n, "name"), name) == 0) return n;
  return NULL;
}

/* ---- --quantize=int8 ---- */

/* The quantize pass's calibrator here: on a copy of the whole model's
 * graph it calibrates as one process does (the samples at the whole
 * batch) and keeps the ranges; on the micro-batch's graph, whose
 * activations come in the same order, it gives them back. */
typedef struct Ranges {
  ApiCalibration cal;
  int n;
  double *amax;
  bool replay;
} Ranges;

static bool ranges(void *ud, Graph *g, int n, const Value *const *values, double *amax) {
  Ranges *r = ud;
  if (!r->replay) {
    if (!api_calibrate(&r->cal, g, n, values, amax)) return false;
    r->n = n;
    r->amax = ARENA_ARRAY(&g->ctx->arena, double, n + 1);
    memcpy(r->amax, amax, sizeof *amax * (size_t)n);
    return true;
  }
  if (n != r->n) {
    diag_error(g->ctx, (SrcLoc){0}, "the micro-batch's graph has %d activations to quantize, the whole model's %d",
               n, r->n);
    return false;
  }
  memcpy(amax, r->amax, sizeof *amax * (size_t)n);
  return true;
}

static void free_map(void *map) { ir_tensor_map_free(map); }

/* The micro-batch's graph quantized before the cut with the ranges the
 * whole model calibrates to, so that every stage quantizes as one
 * process does (a stage's inputs are another's outputs: it has no
 * samples of its own), each rank alike. */
static int quantize_micro(Ctx *ctx, void *data) {
  PipeRun *p = data;
  const RunOptions *o = p->o;
  Graph *whole = ir_copy(p->whole, p->whole->name);
  if (!whole) return diag_error(ctx, (SrcLoc){0}, "out of memory copying the model to calibrate"), 1;
  TensorMap own = {0};
  bool owned = o->weights || !p->onnx_params.n;
  if (owned && !api_calib_params(ctx, whole, o->weights, &p->onnx_own.values, o->seed, &own)) return 1;
  ctx_hold_with(ctx, free_map, &own);
  Ranges r = {.cal = {.dir = o->quant.calibrate,
                      .method = o->quant.method ? o->quant.parsed : api_calib_default_method(),
                      .params = owned ? &own : &p->onnx_params,
                      .max_samples = o->quant.max_samples,
                      .backend = o->quant.backend ? o->quant.on : CALIB_ON_AUTO}};
  /* The -O2 int8 pipeline up to the quantize pass and its cleanups;
   * each stage's compile runs the rest. */
  PassOptions po = {.opt_level = 2, .stop_before = "nhwc", .quantize_int8 = true, .calibrate = ranges,
                    .calibrate_ud = &r};
  r.cal.passes = &po;
  bool ok = pass_run_pipeline(whole, &po, NULL) && ir_verify(whole);
  r.replay = true;
  ok = ok && pass_run_pipeline(p->g, &po, NULL) && ir_verify(p->g);
  ctx_release(ctx, &own);
  ir_tensor_map_free(&own);
  return ok ? 0 : 1;
}

/* Both graphs, their inputs and outputs matched, the --input files
 * checked against the whole batch's types as one process checks them. */
static bool graphs(PipeRun *p) {
  RunOptions *o = p->o;
  size_t n = strlen(o->model_path);
  if (n > 3 && strcmp(o->model_path + n - 3, ".so") == 0)
    return fail(p, "--pipeline compiles each stage: give the model's .dl or .ir, not a library");
  int parts = p->D * p->M; /* the batch's: each pipeline's share in M micro-batches */
  for (int i = 0; i < o->n_inputs && parts > 1; i++) {
    const RtTensor *t = &o->inputs[i].data;
    if ((!t->rank || t->dims[0] % parts) && p->D == 1)
      return fail(p, "--micro-batches=%d does not divide input '%s' (%s): its axis 0, the batch, is %" PRId64
                  "; give a batch that is a multiple of %d", p->M, o->inputs[i].name, o->inputs[i].path,
                  t->rank ? t->dims[0] : 0, parts);
    if (!t->rank || t->dims[0] % parts)
      return fail(p, "input '%s' (%s): its axis 0, the batch, is %" PRId64 ", which does not divide into %d "
                  "pipelines of %d micro-batch%s: give a batch that is a multiple of %d", o->inputs[i].name,
                  o->inputs[i].path, t->rank ? t->dims[0] : 0, p->D, p->M, p->M == 1 ? "" : "es", parts);
  }
  LowerJob whole = {.o = o, .divide = 1}, micro = {.o = o, .divide = parts};
  int rc = ctx_guard(&p->ctx, lower, &whole);
  if (rc || p->ctx.diag.errors) return fail_diag(p, rc);
  p->onnx_params = whole.params;
  p->onnx_own = whole.own;
  rc = ctx_guard(&p->ctx, lower, &micro);
  ir_tensor_map_free(&micro.params); /* the same initializers again */
  ir_tensor_map_free(&micro.own.values);
  if (rc || p->ctx.diag.errors) return fail_diag(p, rc);
  p->whole = whole.g, p->g = micro.g;
  for (int i = 0; i < o->n_inputs; i++)
    if (!input_named(p->whole, o->inputs[i].name))
      return fail(p, "--input %s=%s: the model has no input '%s'", o->inputs[i].name, o->inputs[i].path,
                  o->inputs[i].name);
  for (Node *m = p->whole->first; m; m = m->next) p->n_inputs += m->op == OP_INPUT;
  p->inputs = ARENA_ARRAY(&p->ctx.arena, ModelInput, p->n_inputs + 1);
  int k = 0;
  for (Node *m = p->whole->first; m; m = m->next) {
    if (m->op != OP_INPUT) continue;
    ModelInput *in = &p->inputs[k++];
    in->name = ir_attr_str(m, "name");
    in->whole = m->out[0].type;
    const Node *u = input_named(p->g, in->name);
    if (!u) return fail(p, "the model's input '%s' is missing at a micro-batch", in->name);
    in->micro = u->out[0].type;
    int part = part_of(&in->whole, &in->micro, parts);
    char tw[IR_TYPE_STR_MAX], tm[IR_TYPE_STR_MAX];
    if (part < 0)
      return fail(p, "input '%s' is %s for the whole batch but %s for a micro-batch: it cannot be cut along "
                  "axis 0 into %d", in->name, ir_type_str(&in->whole, tw, sizeof tw),
                  ir_type_str(&in->micro, tm, sizeof tm), parts);
    in->part = (Part)part;
    for (int i = 0; i < o->n_inputs; i++)
      if (strcmp(o->inputs[i].name, in->name) == 0) in->given = &o->inputs[i];
    dlc_tensor_info info;
    api_tensor_info(&info, in->name, &in->whole);
    if (in->given && !run_input_matches(in->given, &info, p->err, sizeof p->err)) return false;
    if (in->given) in->data = in->given->data.data;
  }
  if (p->g->n_outputs != p->whole->n_outputs) return fail(p, "the model's outputs differ at a micro-batch");
  if (o->quant.int8) {
    rc = ctx_guard(&p->ctx, quantize_micro, p);
    if (rc || p->ctx.diag.errors) return fail_diag(p, rc);
  }
  for (int i = 0; i < p->g->n_outputs; i++) {
    const TensorType *w = &p->whole->outputs[i]->type, *u = &p->g->outputs[i]->type;
    char tw[IR_TYPE_STR_MAX], tm[IR_TYPE_STR_MAX];
    if (part_of(w, u, parts) != (parts > 1 ? PART_SPLIT : PART_WHOLE))
      return fail(p, "output '%s' is %s for the whole batch and %s for a micro-batch: only outputs whose axis 0 "
                  "is the batch can be gathered from micro-batches (give --micro-batches=1, one pipeline)",
                  p->whole->output_names[i], ir_type_str(w, tw, sizeof tw), ir_type_str(u, tm, sizeof tm));
  }
  return true;
}

/* ---- this rank's stage ---- */

static int build_stage(Ctx *ctx, void *data) {
  (void)ctx;
  PipeRun *p = data;
  return (p->stage = pass_stage_graph(p->g, &p->sp, p->s, STAGE_FORWARD, 0)) ? 0 : 1;
}

static bool model_failed(PipeRun *p) { return fail_text(p, dlc_error(p->m)); }

/* The stage's IR through the ordinary compiler, with the user's backend,
 * precision and -O (the shapes and defines are in the IR). */
static bool compile_stage(PipeRun *p) {
  int rc = ctx_guard(&p->ctx, build_stage, p);
  if (rc || p->ctx.diag.errors) return fail_diag(p, rc);
  p->draws = pass_find_param(p->stage, "dlcc.first_sample") != NULL;
  for (Node *n = p->g->first; n; n = n->next)
    if (n->op == OP_INPUT) {
      p->samples = n->out[0].type.rank ? n->out[0].type.dims[0] : 1;
      break;
    }
  char *text = ir_print_text(p->stage), name[64];
  if (!text) return fail(p, "out of memory");
  snprintf(name, sizeof name, "stage%d.ir", p->s);
  dlc_options o = p->o->api;
  o.model = NULL;
  o.n_defines = 0;
  o.defines = NULL;
  o.n_input_shapes = 0;
  o.input_shapes = NULL;
  o.eval_mode = 0; /* lower() ran it on the whole model */
  o.quantize = NULL; /* quantize_micro did, before the cut */
  o.calibrate_dir = NULL, o.calib_method = NULL, o.calib_samples = 0, o.calib_backend = NULL;
  o.weights = NULL; /* bind_weights sets the stage's own */
  if (p->tensor) o.tensor_parallel = p->T, o.tensor_rank = p->t;
  dlc_status st = dlc_compile_string(name, text, &o, &p->m);
  free(text);
  if (st == DLC_OK && p->tensor) st = dlc_set_comm(p->m, dist_comm, &p->comm);
  /* what each stage split: said by its first rank in the first pipeline */
  for (int i = 0; st == DLC_OK && p->tensor && !p->t && !p->q && i < dlc_num_tensor_notes(p->m); i++) {
    printf("  stage %d: tensor parallel: %s\n", p->s, dlc_tensor_note(p->m, i));
    fflush(stdout);
  }
  if (st != DLC_OK) {
    model_failed(p);
    if (strchr(p->err, '\n')) return false; /* the compiler's lines, as they are */
    char msg[sizeof p->err];
    snprintf(msg, sizeof msg, "%s", p->err);
    return fail(p, "stage %d's plan: %s", p->s, msg);
  }
  return true;
}

/* Whether the stage (ctx, a PipeRun) reads param name. */
static bool in_stage(void *ctx, const char *name) {
  for (Node *n = ((PipeRun *)ctx)->stage->first; n; n = n->next)
    if (n->op == OP_PARAM && strcmp(ir_attr_str(n, "name"), name) == 0) return true;
  return false;
}

/* Each of map's tensors that the stage reads into its plan (a shard's
 * part of it under tensor parallelism). */
static bool bind_stage_weights(PipeRun *p, const TensorMap *map) {
  bool ok = true;
  for (int i = 0; ok && i < map->n; i++) {
    if (!in_stage(p, map->names[i])) continue;
    const Tensor *w = &map->tensors[i];
    size_t bytes = ir_tensor_nbytes(&w->type);
    if (!train_tp_sharded(p->m, map->names[i], NULL)) {
      if (dlc_set_weight(p->m, map->names[i], w->data, bytes) != DLC_OK) ok = model_failed(p);
      continue;
    }
    void *part = malloc(bytes / (size_t)p->T + 1);
    if (!part) return fail(p, "out of memory");
    ok = (dlc_weight_part(p->m, map->names[i], p->t, w->type.rank, w->type.dims, w->data, part, 0) == DLC_OK &&
          dlc_set_weight(p->m, map->names[i], part, bytes / (size_t)p->T) == DLC_OK) ||
         model_failed(p);
    free(part);
  }
  return ok;
}

/* The stage's parameters as one process binds the whole model's: an
 * ONNX model's initializers, or from
 * --weights, checked whole against the whole model (the same messages)
 * from the file's header, the stage's alone read and set into its plan; or random from --seed,
 * which draws each parameter from its name, so a stage draws what one
 * process draws. */
static bool bind_weights(PipeRun *p) {
  if (dlc_init_weights(p->m, p->o->seed) != DLC_OK) return model_failed(p);
  if (!p->o->weights && !p->onnx_params.n) return true;
  TensorMap map = {0}, *from = &map;
  ApiWeightFilter stage = {in_stage, p};
  if (!p->o->weights) { /* an ONNX model's own, unless --weights replaces them */
    from = &p->onnx_params;
  } else if (!api_bind_some_weights(p->whole, p->o->weights, &p->onnx_own.values, &stage, &map, p->err,
                                    sizeof p->err)) {
    size_t n = strlen(p->err);
    while (n && p->err[n - 1] == '\n') p->err[--n] = 0;
    return false;
  }
  bool ok = bind_stage_weights(p, from);
  ir_tensor_map_free(&map);
  return ok;
}


static void *alloc_or(size_t n, bool *ok) {
  void *q = calloc(1, n ? n : 1);
  if (!q) *ok = false;
  return q;
}

/* The inputs the stage reads (drawn when not given), and the buffers. */
static bool prepare(PipeRun *p) {
  for (int i = 0; i < p->n_inputs; i++) {
    ModelInput *in = &p->inputs[i];
    if (in->given || dlc_input_index(p->m, in->name) < 0) continue;
    dlc_tensor_info info;
    api_tensor_info(&info, in->name, &in->whole);
    info.index_bound = ir_index_bound(p->whole, &input_named(p->whole, in->name)->out[0]);
    if (!run_random_input(&info, p->o->seed, &in->drawn)) return fail(p, "drawing input '%s' failed", in->name);
    in->data = in->drawn.data;
  }
  bool ok = true;
  const StageCut *in = p->s > 0 ? &p->sp.cut[p->s] : NULL;
  const StageCut *out = p->s < p->S - 1 ? &p->sp.cut[p->s + 1] : NULL;
  p->n_in = in ? in->n : 0;
  p->n_out = out ? out->n : 0;
  p->in_bytes = alloc_or(sizeof(size_t) * (size_t)p->n_in, &ok);
  p->out_bytes = alloc_or(sizeof(size_t) * (size_t)p->n_out, &ok);
  p->recv = alloc_or(sizeof *p->recv * (size_t)p->n_in, &ok);
  p->send = alloc_or(sizeof *p->send * (size_t)p->n_out * (size_t)p->M, &ok);
  for (int k = 0; ok && k < p->n_in; k++) {
    p->in_bytes[k] = ir_tensor_nbytes(&in->values[k]->type);
    p->recv[k] = alloc_or(p->in_bytes[k], &ok);
  }
  for (int k = 0; ok && k < p->n_out; k++) {
    p->out_bytes[k] = ir_tensor_nbytes(&out->values[k]->type);
    for (int m = 0; ok && m < p->M; m++) p->send[m * p->n_out + k] = alloc_or(p->out_bytes[k], &ok);
  }
  if (p->s == p->S - 1) {
    p->outputs = alloc_or(sizeof *p->outputs * (size_t)p->whole->n_outputs, &ok);
    for (int i = 0; ok && i < p->whole->n_outputs; i++)
      p->outputs[i] = alloc_or(ir_tensor_nbytes(&p->whole->outputs[i]->type), &ok);
  }
  return ok || fail(p, "out of memory for stage %d's buffers", p->s);
}

static bool setup(PipeRun *p) {
  if (!graphs(p)) return false;
  if (!pass_stage_split_inference(p->g, p->S, &p->sp, p->err, sizeof p->err)) return false;
  if (p->world->rank == 0) {
    int64_t b = 0;
    for (int i = 0; i < p->n_inputs && !b; i++)
      if (p->inputs[i].part == PART_SPLIT || p->D * p->M == 1)
        b = p->inputs[i].micro.rank ? p->inputs[i].micro.dims[0] : 0;
    pipe_print_split(p->g, &p->sp, p->M, b, "GPipe forward", p->D, b * p->M, p->T);
  }
  return compile_stage(p) && bind_weights(p) && prepare(p);
}

/* ---- the run ---- */

/* Micro-batch m: the cut's values from the previous rank, the model's
 * inputs the stage reads (their part of the batch), the plan, and its
 * outputs on to the next rank, or into the whole batch's outputs. */
static bool micro_batch(PipeRun *p, int m, bool *comm) {
  char what[96];
  snprintf(what, sizeof what, "receiving activations from rank %d", p->world->rank - p->T);
  for (int k = 0; k < p->n_in; k++)
    if (dist_recv(p->d, p->s - 1, k % 4096, p->recv[k], p->in_bytes[k], what) != DIST_OK)
      return *comm = true, false;
  for (int k = 0; k < p->n_in; k++) {
    char name[32];
    snprintf(name, sizeof name, "stage_in.%d", k);
    if (dlc_input_index(p->m, name) >= 0 && dlc_set_input(p->m, name, p->recv[k], p->in_bytes[k]) != DLC_OK) return model_failed(p);
  }
  size_t part = (size_t)p->q * (size_t)p->M + (size_t)m; /* of the whole batch's D * M */
  for (int i = 0; i < p->n_inputs; i++) {
    const ModelInput *in = &p->inputs[i];
    if (dlc_input_index(p->m, in->name) < 0) continue; /* not read by this stage */
    size_t bytes = ir_tensor_nbytes(&in->micro);
    const unsigned char *data = (const unsigned char *)in->data + (in->part == PART_SPLIT ? part * bytes : 0);
    if (dlc_set_input(p->m, in->name, data, bytes) != DLC_OK) return model_failed(p);
  }
  /* a micro-batch draws as one process draws for its samples (ops.def) */
  int64_t first = (int64_t)part * p->samples;
  if (p->draws && dlc_set_weight(p->m, "dlcc.first_sample", &first, sizeof first) != DLC_OK) return model_failed(p);
  double t0 = now_s();
  if (dlc_run(p->m) != DLC_OK) return model_failed(p);
  p->busy += now_s() - t0;
  bool last = p->s == p->S - 1;
  for (int k = 0; k < (last ? p->whole->n_outputs : p->n_out); k++) {
    const void *y;
    size_t n;
    if (dlc_get_output(p->m, k, &y, &n) != DLC_OK) return model_failed(p);
    /* The plan's output must be the micro-batch's slice the buffers are
     * sized for (a precision that changed an output's type is not). */
    size_t want = last ? ir_tensor_nbytes(&p->g->outputs[k]->type) : p->out_bytes[k];
    if (n != want)
      return fail(p, "stage %d's output %d is %zu bytes, where the split expects %zu", p->s, k, n, want);
    if (last) {
      memcpy((unsigned char *)p->outputs[k] + part * n, y, n);
      continue;
    }
    unsigned char *buf = p->send[m * p->n_out + k];
    memcpy(buf, y, n);
    if (dist_isend(p->d, p->s + 1, k % 4096, buf, n) != DIST_OK) return *comm = true, false;
  }
  return true;
}

/* D pipelines: each last stage holds its pipeline's rows of every
 * output; they go to pipeline 0's last stage (world rank (S - 1) T, its
 * first rank: a stage's T ranks hold the same outputs), which writes
 * them all. */
static bool gather_outputs(PipeRun *p, bool *comm) {
  if (p->D == 1 || p->s != p->S - 1 || p->t) return true;
  Dist *w = p->world;
  int T = p->T;
  for (int i = 0; i < p->whole->n_outputs; i++) {
    size_t share = ir_tensor_nbytes(&p->whole->outputs[i]->type) / (size_t)p->D;
    unsigned char *out = p->outputs[i];
    if (p->q > 0) {
      if (dist_isend(w, (p->S - 1) * T, i % 4096, out + (size_t)p->q * share, share) != DIST_OK)
        return *comm = true, false;
      continue;
    }
    for (int q = 1; q < p->D; q++) {
      char what[96];
      int from = (q * p->S + p->S - 1) * T;
      snprintf(what, sizeof what, "receiving outputs from rank %d", from);
      if (dist_recv(w, from, i % 4096, out + (size_t)q * share, share, what) != DIST_OK)
        return *comm = true, false;
    }
  }
  return dist_wait_sends(w) == DIST_OK || (*comm = true, false);
}

static const char *whole_output_name(void *g, int i) { return ((Graph *)g)->output_names[i]; }

/* The last rank: each output's line and file. */
static bool write_outputs(PipeRun *p) {
  Graph *w = p->whole;
  OutputDir out = {.fd = -1};
  if (p->o->output_dir && !run_output_dir_open(&out, p->o->output_dir, w->n_outputs, whole_output_name, w))
    return fail(p, "cannot write the outputs (the message is above)");
  bool ok = true;
  for (int i = 0; i < w->n_outputs; i++) {
    dlc_tensor_info info;
    api_tensor_info(&info, w->output_names[i], &w->outputs[i]->type);
    run_print_summary(&info, p->outputs[i]);
    if (p->o->output_dir && !run_write_output(&out, i, &info, p->outputs[i], info.nbytes))
      ok = fail(p, "cannot write output '%s' (the message is above)", info.name);
  }
  fflush(stdout);
  run_output_dir_close(&out);
  return ok;
}

static void pipe_run_free(PipeRun *p) {
  for (int i = 0; p->inputs && i < p->n_inputs; i++) ir_tensor_free(&p->inputs[i].drawn);
  for (int k = 0; p->recv && k < p->n_in; k++) free(p->recv[k]);
  for (int i = 0; p->send && i < p->n_out * p->M; i++) free(p->send[i]);
  for (int i = 0; p->outputs && i < p->whole->n_outputs; i++) free(p->outputs[i]);
  free(p->recv), free(p->send), free(p->outputs), free(p->in_bytes), free(p->out_bytes);
  dlc_free(p->m);
  dist_comm_free(&p->comm);
  ir_tensor_map_free(&p->onnx_params);
  ir_tensor_map_free(&p->onnx_own.values);
  ctx_free(&p->ctx);
}

/* What --pipeline does not combine with, or NULL. */
static const char *refusal(const RunOptions *o) {
  if (!o->pipeline) return o->micro ? "--micro-batches is for pipeline parallel: give --pipeline=S too"
                                    : "--dist-timeout is for pipeline parallel: give --pipeline=S too";
  if (o->api.grad) return "--grad does not combine with --pipeline (dlcc train --pipeline trains)";
  return NULL;
}

/* A pipeline group's failed exchange ends the job from the world (its
 * peers wait in other groups' exchanges), after its message. */
static void end_group(Dist *world, Dist *group) {
  if (group == world) return;
  if ((group->broken || group->peer_failed) && !world->broken) {
    world->broken = true;
    snprintf(world->err, sizeof world->err, "%s", group->err);
  }
  dist_finish(group);
}

/* The whole batch through the stages: its micro-batches, then the
 * sends' ends. */
static bool one_batch(PipeRun *p, bool *comm) {
  for (int m = 0; m < p->M; m++)
    if (!micro_batch(p, m, comm)) return false;
  if (dist_wait_sends(p->d) != DIST_OK) return *comm = true, false;
  return true;
}

/* --bench=N: N more batches, back to back, after the first (which
 * compiled, loaded and warmed everything up): a stage starts batch i + 1
 * as soon as it has sent batch i on, so the batches overlap as a
 * pipeline's steady state does.  Each rank's wall time and the time its
 * plan ran go to rank 0, which prints the batches' rate (by the slowest
 * rank) and each stage's share of it busy (the rest is waiting for
 * activations: the bubble and the transfers). */
static bool bench_pipeline(PipeRun *p, bool *comm) {
  int n = p->o->bench;
  if (dist_check(p->world, true, NULL) != DIST_OK) return *comm = true, false;
  p->busy = 0;
  double start = now_s();
  for (int i = 0; i < n; i++)
    if (!one_batch(p, comm)) return false;
  double mine[2] = {now_s() - start, p->busy};
  double *all = calloc((size_t)p->world->size, sizeof mine);
  if (!all) return fail(p, "out of memory for the bench's times");
  if (dist_allgather(p->world, mine, all, sizeof mine) != DIST_OK) {
    free(all);
    return *comm = true, false;
  }
  if (p->world->rank == 0) {
    double wall = 0;
    for (int r = 0; r < p->world->size; r++) wall = all[2 * r] > wall ? all[2 * r] : wall;
    fprintf(stderr, "dlcc: bench: %d batches through %d stages of %d micro-batch%s on %s: %.3f ms a batch\n", n,
            p->S, p->M, p->M == 1 ? "" : "es", dlc_backend(p->m), wall * 1e3 / n);
    for (int r = 0; r < p->world->size; r++) {
      /* rank r holds stage r / T % S of its pipeline */
      int s = r / p->T % p->S;
      fprintf(stderr, "dlcc: bench: rank %d (stage %d): its plan ran %.3f ms a batch, %.0f%% of the time\n", r, s,
              all[2 * r + 1] * 1e3 / n, wall > 0 ? 100 * all[2 * r + 1] / wall : 0);
    }
  }
  free(all);
  return true;
}

int run_pipeline(RunOptions *o) {
  const char *no = refusal(o);
  if (no) {
    fprintf(stderr, "dlcc: error: %s\n", no);
    return 1;
  }
  Dist world;
  if (!dist_init(&world, o->dist_timeout ? o->dist_timeout : 120)) {
    fprintf(stderr, "dlcc: error: %s\n", world.err);
    return 1;
  }
  return run_pipeline_in(o, &world);
}

int run_pipeline_in(RunOptions *o, Dist *launch) {
  Dist world = *launch, group, tensor;
#ifdef HAVE_NCCL
  if (world.size > 1) nccl_pick_device(); /* one GPU a stage */
#endif
  /* As dlcc train's: world rank w = (q S + s) T + t is rank t of stage s
   * of pipeline q (T = 1: stage w % S of pipeline w / S); the ranks of
   * one t and q are that pipeline's row, which the messages follow. */
  int S = o->pipeline, T = o->tp > 1 ? o->tp : 1, w = world.rank;
  PipeRun p = {.o = o, .world = &world, .d = &world, .s = w / T % S, .S = S, .M = o->micro ? o->micro : 1,
               .q = w / (S * T), .D = world.size / (S * T), .t = w % T, .T = T};
  ctx_init(&p.ctx);
  bool ok = true;
  if (world.size % (S * T) && T == 1)
    ok = fail(&p, "--pipeline=%d does not divide the %d rank%s of the launch (mpirun -np %d for one pipeline, a "
              "multiple of %d for data parallel over pipelines of %d)", S, world.size, world.size == 1 ? "" : "s", S,
              S, S);
  else if (world.size % (S * T))
    ok = fail(&p, "--pipeline=%d with --tensor-parallel=%d does not divide the %d rank%s of the launch (mpirun -np %d "
              "for one pipeline, a multiple of %d for data parallel over pipelines)", S, T, world.size,
              world.size == 1 ? "" : "s", S * T, S * T);
  else if ((p.D > 1 || T > 1) && !dist_split(&world, p.q * T + p.t, p.s, &group))
    ok = fail(&p, "%s", world.err);
  else if (p.D > 1 || T > 1)
    p.d = &group;
  if (ok && T > 1) {
    if (!dist_split(&world, p.q * S + p.s, p.t, &tensor))
      ok = fail(&p, "%s", world.err);
    else
      p.tensor = &tensor, p.comm = (DistComm){&tensor, &tensor, NULL, NULL};
  }
  if (ok) ok = run_read_inputs(o) ? setup(&p) : fail(&p, "reading the inputs failed (the message is above)");
  bool comm = false;
  /* Every rank's status before the first message: one that failed ends
   * them all here, naming itself (dist_end sends its message). */
  if (ok && dist_check(&world, true, NULL) != DIST_OK) ok = false, comm = true;
  if (ok && (!o->backend || strcmp(o->backend, "auto") == 0) && world.rank == 0)
    fprintf(stderr, "dlcc: running on %s\n", dlc_backend(p.m));
  if (ok) ok = one_batch(&p, &comm);
  if (ok) ok = gather_outputs(&p, &comm);
  if (ok && o->bench) ok = bench_pipeline(&p, &comm);
  if (ok && p.s == S - 1 && p.q == 0 && p.t == 0) ok = write_outputs(&p);
  /* A local failure is printed here; a failed exchange, by dist_end. */
  if (!ok && !comm && !strstr(p.err, "(the message is above)")) print_error(p.err);
  pipe_run_free(&p);
  end_group(&world, p.d);
  if (p.tensor) end_group(&world, p.tensor);
  dist_end(&world, ok, ok || comm ? NULL : p.err);
  return ok ? 0 : 1;
}

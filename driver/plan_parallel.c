/* `dlcc train MODEL --plan-parallel --gpus=G --nodes=N --batch=B ...`:
 * compiles the training step at the batches each split of G x N GPUs
 * would run (never runs it), reads the cost report of every plan step,
 * the forward graph's stage costs and cut sizes, and the linears tensor
 * parallelism could split, and prints scaleout.c's estimate for every
 * data x tensor x pipeline split, fastest first.  An estimate from the
 * cost model and a bandwidth table, said so on its first line. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "driver/driver.h"
#include "driver/scaleout.h"
#include "driver/train.h"
#include "frontend/ast.h"
#include "frontend/dims.h"
#include "frontend/onnx.h"
#include "ir/diag.h"
#include "ir/ir.h"
#include "passes/autodiff.h"
#include "passes/loss.h"
#include "passes/optim.h"
#include "passes/pass.h"
#include "passes/tensor_par.h"

typedef struct PlanArgs {
  const char *model_path, *model, *data, *gpu, *optimizer, *precision;
  int gpus, nodes, batch, micro_batches;
  double momentum, bucket_mb;
  bool tf32;
  DriverLoss loss;
  LossSpec loss_spec;
  int n_defines;
  Define defines[DRIVER_MAX_DEFINES];
  int loop_bound; /* --loop-bound=N, as dlcc train's */
} PlanArgs;

/* One compiled batch size, kept for every split that runs it. */
typedef struct Measured {
  int64_t batch;
  bool failed;
  char why[240]; /* when failed: the first line of what compiling said */
  char *said;    /* and all of it */
  ScaleStep step;
  double *node_s, *cut_bytes;
  /* From the first compile only (they do not depend on the batch). */
  double param_bytes, grad_bytes;
  /* Per tensor-parallel degree (Planner.t_values): what
   * pass_tensor_parallel makes of this batch's step. */
  struct TpFacts *tp;
} Measured;

/* Tensor parallel at one degree T, from the pass itself on rank 0's
 * forward graph, so the estimate splits what training would. */
typedef struct TpFacts {
  int regions;      /* pairs and attention blocks split */
  double work;      /* rank 0's forward roofline time over the whole one's */
  double bytes;     /* all-reduced per step: forward sums and tp_copy's gradients */
  int count;
  char why[200];    /* no region: the pass's first "not split" line */
} TpFacts;

typedef struct Planner {
  const PlanArgs *a;
  const ScaleDevice *dev;
  DType precision;
  TrainData data; /* with --data: the sample shapes */
  int n, cap;
  Measured **m; /* each its own allocation: rows point into them */
  int n_t;
  int t_values[64]; /* the tensor-parallel degrees the splits try (> 1) */
} Planner;

static const char usage[] =
    "usage: dlcc train MODEL --plan-parallel --batch=B [--gpus=G] [--nodes=N] [options]\n"
    "Estimates, without running anything, the training step of every split of G x N\n"
    "GPUs into data x tensor x pipeline parallel groups (docs/parallel.md).\n"
    "  --gpus=G              GPUs per node (default 8)\n"
    "  --nodes=N             nodes (default 1)\n"
    "  --gpu=NAME            the device table's row: h200 (default), h100, a100\n"
    "  --batch=B             the global batch\n"
    "  --micro-batches=M     pipeline micro-batches (default: the least divisor of a\n"
    "                        rank's batch that is at least 4 x the stages)\n"
    "  --data DIR            take the inputs' per-sample shapes from DIR's .npy files;\n"
    "                        without it axis 0 of every input is the batch\n"
    "  --loss=L and its flags, --optimizer, --momentum, --precision, --tf32, --bucket-mb,\n"
    "  -D NAME=VALUE, --model=NAME, --loop-bound=N   as for dlcc train; its other flags are\n"
    "                        ignored\n";

/* Flags of dlcc train that change nothing here, so a training command
 * line takes --plan-parallel as it is. */
static bool ignored_flag(int argc, char **argv, int *i) {
  static const char *const with_value[] = {"--data", "--val", "--weights", "--save", "--log", "--resume",
                                           "--lr", "--epochs", "--seed", "--schedule", "--weight-decay",
                                           "--betas", "--eps", "--dampening", "--clip-grad-norm",
                                           "--dist-timeout", "--backend", "--pipeline", "--pipe-schedule",
                                           "--tensor-parallel"};
  static const char *const switches[] = {"--shuffle", "--drop-last", "--nesterov", "--sync-bn", "--recompute"};
  for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
    if (driver_flag_value(argc, argv, i, with_value[k])) return true;
  for (size_t k = 0; k < sizeof switches / sizeof switches[0]; k++)
    if (strcmp(argv[*i], switches[k]) == 0 || driver_eq_value(argv[*i], switches[k])) return true;
  return false;
}

static int parse_args(int argc, char **argv, PlanArgs *a) {
  *a = (PlanArgs){.gpus = 8, .nodes = 1, .gpu = "h200", .optimizer = "sgd", .bucket_mb = 25};
  for (int i = 0; i < argc; i++) {
    const char *v, *arg = argv[i];
    int taken;
    if (strcmp(arg, "--plan-parallel") == 0) continue;
    if (strcmp(arg, "--help") == 0) {
      fputs(usage, stdout);
      return 2;
    }
    if ((taken = driver_loss_option(arg, &a->loss)) != 0) {
      if (taken < 0) return 1;
    } else if ((v = driver_flag_value(argc, argv, &i, "--gpus"))) {
      if (!driver_int_value("--gpus", v, 1, 1024, "GPUs per node, 1 to 1024", &a->gpus)) return 1;
    } else if ((v = driver_flag_value(argc, argv, &i, "--nodes"))) {
      if (!driver_int_value("--nodes", v, 1, 65536, "a node count, 1 to 65536", &a->nodes)) return 1;
    } else if ((v = driver_flag_value(argc, argv, &i, "--batch"))) {
      if (!driver_int_value("--batch", v, 1, 1 << 30, "a batch of 1 or more", &a->batch)) return 1;
    } else if ((v = driver_flag_value(argc, argv, &i, "--micro-batches"))) {
      if (!driver_int_value("--micro-batches", v, 1, 1 << 20, "1 or more micro-batches", &a->micro_batches))
        return 1;
    } else if ((v = driver_flag_value(argc, argv, &i, "--momentum"))) {
      if (!driver_real_value("--momentum", v, 0, 1e9, "a momentum of 0 or more", &a->momentum)) return 1;
    } else if ((v = driver_flag_value(argc, argv, &i, "--bucket-mb"))) {
      if (!driver_real_value("--bucket-mb", v, 0, 1e6, "MiB from 0 to 1e6", &a->bucket_mb)) return 1;
    } else if ((v = driver_flag_value(argc, argv, &i, "--gpu"))) {
      a->gpu = v;
    } else if ((v = driver_flag_value(argc, argv, &i, "--optimizer"))) {
      a->optimizer = v;
    } else if ((v = driver_flag_value(argc, argv, &i, "--precision"))) {
      a->precision = v;
    } else if ((v = driver_flag_value(argc, argv, &i, "--model"))) {
      a->model = v;
    } else if (strcmp(arg, "--tf32") == 0) {
      a->tf32 = true;
    } else if ((v = driver_flag_value(argc, argv, &i, "--loop-bound"))) {
      if (!driver_loop_bound(v, &a->loop_bound)) return 1;
    } else if (strcmp(arg, "--data") == 0 || strncmp(arg, "--data=", 7) == 0) {
      if (!(a->data = driver_flag_value(argc, argv, &i, "--data"))) break;
    } else if (strncmp(arg, "-D", 2) == 0) {
      if (!driver_take_define(argc, argv, &i, a->defines, &a->n_defines, DRIVER_MAX_DEFINES)) return 1;
    } else if (arg[0] == '-' && arg[1] == 'O' && arg[2] && !arg[3]) {
      /* the estimate always compiles at -O2, as dlcc train runs */
    } else if (ignored_flag(argc, argv, &i)) {
    } else if (arg[0] == '-') {
      fprintf(stderr, "dlcc: error: unknown option '%s' for train --plan-parallel (see dlcc train "
              "--plan-parallel --help)\n", arg);
      return 1;
    } else if (a->model_path) {
      fprintf(stderr, "dlcc: error: more than one model ('%s' and '%s')\n", a->model_path, arg);
      return 1;
    } else {
      a->model_path = arg;
    }
  }
  const char *missing = !a->model_path ? "a model file" : !a->batch ? "--batch=B" : !a->loss.name ? "--loss" : NULL;
  if (missing) {
    fprintf(stderr, "dlcc: error: train --plan-parallel needs %s (see dlcc train --plan-parallel --help)\n", missing);
    return 1;
  }
  return driver_loss_check(&a->loss, &a->loss_spec) ? 0 : 1;
}

/* ---- what one compile measures ---- */

static double bytes_at(const Value *v, DType act) {
  int64_t n = ir_type_numel(&v->type);
  DType dt = v->type.dtype == TY_F32 ? act : v->type.dtype;
  return n < 0 ? 0 : (double)n * ir_dtype_size(dt);
}

static ScaleUnits units_for(const Planner *p, bool matrix) {
  if (!matrix) return SCALE_ON_F32;
  if (p->precision == TY_F16 || p->precision == TY_BF16) return SCALE_ON_HALF;
  return p->a->tf32 ? SCALE_ON_TF32 : SCALE_ON_F32;
}

/* A forward node's roofline time without the launch gap: fusion hides
 * most of those, and these times only weigh nodes against each other. */
static double node_time(const Planner *p, const Node *x) {
  IrCost c = ir_cost(x);
  bool matrix = ir_ops[x->op].cls == K_MATMUL || x->op == OP_ATTENTION;
  return scale_step_time(p->dev, c.flops, c.bytes, units_for(p, matrix)) - p->dev->launch_s;
}

/* The forward's roofline time, sources aside. */
static double forward_time(const Planner *p, const Graph *g) {
  double t = 0;
  for (const Node *x = g->first; x; x = x->next)
    if (ir_ops[x->op].cls != K_SOURCE) t += node_time(p, x);
  return t;
}

/* What tensor parallelism over T ranks makes of forward graph g: the
 * pass on a copy for rank 0 (its work, its sums), false on an error it
 * reported. */
static bool tp_facts(const Planner *p, Graph *g, int T, TpFacts *out) {
  *out = (TpFacts){.work = 1};
  Graph *r0 = ir_copy(g, "tensor parallel");
  TpResult tr;
  if (!r0 || !pass_tensor_parallel(r0, &(TpOptions){.ranks = T, .fuse_attention = true}, &tr) || !ir_verify(r0)) return false;
  out->regions = tr.n_regions;
  for (int i = 0; i < tr.n_lines && !out->regions && !out->why[0]; i++)
    if (strncmp(tr.lines[i], "not split: ", 11) == 0) snprintf(out->why, sizeof out->why, "%s", tr.lines[i] + 11);
  if (!out->regions) return true;
  double whole = forward_time(p, g);
  out->work = whole > 0 ? forward_time(p, r0) / whole : 1;
  for (const Node *x = r0->first; x; x = x->next)
    if (x->op == OP_ALLREDUCE_SUM || x->op == OP_TP_COPY) {
      out->bytes += bytes_at(&x->out[0], p->precision);
      out->count++;
    }
  return true;
}

/* The forward nodes' roofline times (no launch gaps: they are the shares
 * a stage split balances) and the bytes live across each boundary. */
static bool stage_costs(const Planner *p, Graph *g, Measured *out) {
  ir_number(g);
  int n = 0;
  for (Node *x = g->first; x; x = x->next)
    if (ir_ops[x->op].cls != K_SOURCE) x->id = n++;
    else x->id = -1;
  out->node_s = calloc((size_t)n + 1, sizeof *out->node_s);
  out->cut_bytes = calloc((size_t)n + 1, sizeof *out->cut_bytes);
  int *last_use = calloc((size_t)n + 1, sizeof *last_use);
  if (!out->node_s || !out->cut_bytes || !last_use) {
    free(last_use);
    return false;
  }
  for (Node *x = g->first; x; x = x->next) {
    if (x->id < 0) continue;
    out->node_s[x->id] = node_time(p, x);
    last_use[x->id] = x->id;
    for (int i = 0; i < x->n_in; i++)
      if (x->in[i]->def->id >= 0 && last_use[x->in[i]->def->id] < x->id) last_use[x->in[i]->def->id] = x->id;
  }
  /* a value lives across the boundaries after its node and before its last reader */
  double *delta = out->cut_bytes;
  for (Node *x = g->first; x; x = x->next) {
    if (x->id < 0 || last_use[x->id] == x->id) continue;
    double b = 0;
    for (int k = 0; k < x->n_out; k++) b += bytes_at(&x->out[k], p->precision);
    delta[x->id] += b;
    delta[last_use[x->id]] -= b;
  }
  for (int i = 1; i < n; i++) delta[i] += delta[i - 1];
  out->step.n_nodes = n;
  out->step.node_s = out->node_s;
  out->step.cut_bytes = out->cut_bytes;
  free(last_use);
  return true;
}

/* The plan's steps on the device: every step's roofline and launch gap;
 * GEMMs, implicit GEMMs and attention on the matrix units. */
static double plan_time(const Planner *p, const CgResult *cg) {
  const RtPlan *plan = cg->plan;
  double compute = 0;
  for (uint32_t i = 0; i < plan->n_steps; i++) {
    const RtStep *s = &plan->steps[i];
    IrCost c = cg->step_costs[plan->n_init_steps + i];
    bool matrix = s->kind == RT_STEP_GEMM ||
                  (s->kind == RT_STEP_LAUNCH && s->label && (strstr(s->label, "gemm") || strstr(s->label, "attention")));
    compute += scale_step_time(p->dev, c.flops, c.bytes, units_for(p, matrix));
  }
  return compute;
}

typedef struct Job {
  Planner *p;
  int64_t batch;
  bool optimizer;
  Measured *out;
  double weights_bytes; /* with optimizer: the plan's weights and derived */
} Job;

/* The defines that bind the batch: the user's, less any of the names
 * written as dim 0 of the model's inputs, which take `batch` (a `let N`
 * included: the batch is the planner's to vary).  False, naming the
 * input, when one has a number there. */
static bool batch_defines(Ctx *c, const PlanArgs *a, const Program *prog, int64_t batch, Define **out, int *n) {
  const Item *model = NULL;
  for (int i = 0; i < prog->n_items; i++)
    if (prog->items[i]->kind == IT_MODEL && (!a->model || strcmp(prog->items[i]->name, a->model) == 0))
      model = prog->items[i];
  *n = 0;
  *out = arena_alloc(&c->arena, (size_t)(a->n_defines + (model ? model->n_params : 0) + 1) * sizeof **out);
  if (!model) return true; /* fe_lower says what is missing */
  for (int i = 0; i < model->n_params; i++) {
    const Param *pm = &model->params[i];
    if (!pm->type || pm->type->dims.n == 0) continue;
    const Expr *d0 = pm->type->dims.v[0];
    if (d0->kind != EX_NAME) {
      diag_error(c, pm->loc, "dim 0 of input '%s' is not a name, so --plan-parallel cannot set the batch there "
                 "(write it as a name, as dlcc train needs)", pm->name);
      return false;
    }
    bool seen = false;
    for (int k = 0; k < *n && !seen; k++) seen = strcmp((*out)[k].name, d0->s) == 0;
    if (!seen) (*out)[(*n)++] = (Define){d0->s, batch};
  }
  for (int i = 0; i < a->n_defines; i++) {
    bool batch_name = false;
    for (int k = 0; k < *n && !batch_name; k++) batch_name = strcmp((*out)[k].name, a->defines[i].name) == 0;
    if (!batch_name) (*out)[(*n)++] = a->defines[i];
  }
  return true;
}

/* With --data: every model input's shape at `batch` from its samples
 * (target.npy is the loss's, not the model's). */
static void data_shapes(Ctx *c, const Planner *p, int64_t batch, InputShape **shapes, int *n) {
  *n = 0;
  *shapes = arena_alloc(&c->arena, (size_t)p->data.n * sizeof **shapes + 1);
  for (int i = 0; i < p->data.n; i++) {
    const TrainArray *arr = &p->data.a[i];
    if (strcmp(arr->name, TRAIN_TARGET) == 0) continue;
    int64_t *dims = arena_alloc(&c->arena, (size_t)arr->t.rank * sizeof *dims + 1);
    for (int k = 0; k < (int)arr->t.rank; k++) dims[k] = k ? arr->t.dims[k] : batch;
    (*shapes)[(*n)++] = (InputShape){arr->name, (int)arr->t.rank, dims};
  }
}

/* The model in the language at `batch` (a training forward: dropout
 * and batchnorm as they train), or NULL after reporting. */
static Graph *lower_at(Ctx *c, const PlanArgs *a, int64_t batch, InputShape *shapes, int n_shapes) {
  const SrcFile *f = ctx_load_file(c, a->model_path);
  Program *prog = f ? fe_parse(c, f) : NULL;
  int n_defines;
  Define *defines;
  if (!prog || !batch_defines(c, a, prog, batch, &defines, &n_defines)) return NULL;
  LowerOptions lo = {.model = a->model, .n_defines = n_defines, .defines = defines, .training = true,
                     .n_input_shapes = n_shapes, .input_shapes = shapes};
  return fe_lower(c, prog, &lo);
}

/* An ONNX model (exported in training mode, as dlcc train takes it)
 * with its inputs at the shapes of --data's samples at the batch (the
 * caller makes sure of --data): its batch dim must be free
 * (dynamic_axes), which the import checks. */
static Graph *onnx_at(Ctx *c, const PlanArgs *a, InputShape *shapes, int n_shapes) {
  OnnxOptions oo = {.n_defines = a->n_defines, .defines = a->defines, .n_input_shapes = n_shapes,
                    .input_shapes = shapes, .loop_bound = a->loop_bound};
  TensorMap weights = {0};
  Graph *g = fe_onnx_import(c, a->model_path, &oo, &weights);
  ir_tensor_map_free(&weights);
  return g;
}

static int compile_at(Ctx *c, void *data) {
  Job *job = data;
  Planner *p = job->p;
  const PlanArgs *a = p->a;
  InputShape *shapes = NULL;
  int n_shapes = 0;
  if (a->data) data_shapes(c, p, job->batch, &shapes, &n_shapes);
  Graph *g = driver_is_onnx(a->model_path) ? onnx_at(c, a, shapes, n_shapes) : lower_at(c, a, job->batch, shapes, n_shapes);
  if (!g || !ir_verify(g)) return 1;
  if (!pass_append_loss(g, &a->loss_spec, a->loss.output, TRAIN_TARGET, NULL) || !ir_verify(g)) return 1;
  Measured *m = job->out;
  if (!job->optimizer) {
    m->tp = calloc((size_t)p->n_t + 1, sizeof *m->tp);
    if (!m->tp) {
      diag_error(c, (SrcLoc){0}, "out of memory");
      return 1;
    }
    for (int i = 0; i < p->n_t; i++)
      if (!tp_facts(p, g, p->t_values[i], &m->tp[i])) return 1;
    if (!stage_costs(p, g, m)) {
      diag_error(c, (SrcLoc){0}, "out of memory");
      return 1;
    }
    m->param_bytes = 0;
    for (Node *x = g->first; x; x = x->next)
      if (x->op == OP_PARAM) m->param_bytes += bytes_at(&x->out[0], x->out[0].type.dtype);
  }
  if (!pass_autodiff(g, &(AutodiffOptions){.loss_scale = job->optimizer && p->precision == TY_F16,
                                           .fuse_attention = true /* the -O2 pipeline below */}) ||
      !ir_verify(g))
    return 1;
  if (!job->optimizer) {
    m->grad_bytes = 0;
    for (int i = 0; i < g->n_outputs; i++) {
      size_t len = strlen(g->output_names[i]);
      if (len > 5 && strcmp(g->output_names[i] + len - 5, ".grad") == 0)
        m->grad_bytes += 4.0 * (double)ir_type_numel(&g->outputs[i]->type);
    }
  } else {
    OptimKind kind;
    if (!optim_from_name(a->optimizer, &kind)) {
      diag_error(c, (SrcLoc){0}, "unknown optimizer '%s' (expected %s)", a->optimizer, optim_names().s);
      return 1;
    }
    OptimSpec spec = optim_spec_default(kind);
    if (kind == OPTIM_SGD || kind == OPTIM_RMSPROP) spec.momentum = a->momentum;
    spec.loss_scaling = p->precision == TY_F16;
    if (!pass_append_optimizer(g, &spec) || !ir_verify(g)) return 1;
  }
  PassOptions po = {.opt_level = 2, .precision = p->precision};
  if (!pass_run_pipeline(g, &po, stderr)) return 1;
  CgResult cg;
  CgOptions cgo = {.tf32 = a->tf32};
  if (!cg_compile_opts(g, &cgo, &cg)) return 1;
  double compute = plan_time(p, &cg);
  /* with the optimizer, the caller subtracts the step without it */
  m->step.compute_s = compute;
  if (job->optimizer) {
    job->weights_bytes = (double)cg.plan->weights_bytes + (double)cg.plan->derived_bytes;
  } else {
    m->step.arena_bytes = (double)cg.plan->arena_bytes;
  }
  return 0;
}

/* Compiles job's step; false with the first line of the messages in
 * job->out->why. */
static bool run_job(Job *job) {
  Ctx c;
  ctx_init(&c);
  int rc = ctx_guard(&c, compile_at, job);
  if (c.diag.errors && rc == 0) rc = 1;
  if (rc) {
    const char *text = diag_text(&c);
    free(job->out->said);
    job->out->said = strdup(text);
    size_t len = strcspn(text, "\n");
    if (len >= sizeof job->out->why) len = sizeof job->out->why - 1;
    memcpy(job->out->why, text, len);
    job->out->why[len] = 0;
  }
  ctx_free(&c);
  return rc == 0;
}

/* The step at `batch`, compiled once; NULL when out of memory. */
static const Measured *measure(Planner *p, int64_t batch) {
  for (int i = 0; i < p->n; i++)
    if (p->m[i]->batch == batch) return p->m[i];
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 8;
    Measured **m = realloc(p->m, (size_t)cap * sizeof *m);
    if (!m) return NULL;
    p->m = m;
    p->cap = cap;
  }
  Measured *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  p->m[p->n++] = m;
  m->batch = batch;
  Job job = {.p = p, .batch = batch, .out = m};
  m->failed = !run_job(&job);
  return m;
}

/* ---- the splits ---- */

typedef struct Row {
  ScaleSplit split;
  ScaleResult r;
  const char *why_not; /* NULL: it fits */
  int64_t failed_batch; /* > 0: why_not is what compiling at that batch said */
} Row;

static int by_step(const void *x, const void *y) {
  const Row *a = x, *b = y;
  if ((a->why_not == NULL) != (b->why_not == NULL)) return a->why_not ? 1 : -1;
  if (a->r.step_s != b->r.step_s) return a->r.step_s < b->r.step_s ? -1 : 1;
  /* ties: fewer pipeline stages, then fewer tensor ranks */
  if (a->split.stages != b->split.stages) return a->split.stages - b->split.stages;
  return a->split.tensor - b->split.tensor;
}

static int default_micro_batches(int64_t local, int stages) {
  for (int64_t m = 4 * (int64_t)stages; m <= local; m++)
    if (local % m == 0) return (int)m;
  return (int)local;
}

static void print_row(FILE *f, const Row *w, double single_s, int gpus) {
  char split[48], micro[16];
  snprintf(split, sizeof split, "%d x %d x %d", w->split.data, w->split.tensor, w->split.stages);
  if (w->split.stages > 1)
    snprintf(micro, sizeof micro, "%d", w->split.micro_batches);
  else
    snprintf(micro, sizeof micro, "-");
  const ScaleResult *r = &w->r;
  char efficiency[16] = "-";
  if (single_s > 0) snprintf(efficiency, sizeof efficiency, "%.0f%%", 100 * single_s / (gpus * r->step_s));
  fprintf(f, "  %-14s %5s %9.3f %9.3f %9.3f %9.3f %9.3f %10.3f %11.0f %7s %9.1f  %s\n", split, micro,
          r->compute_s * 1e3, r->dp_s * 1e3, r->tp_s * 1e3, r->p2p_s * 1e3, r->bubble_s * 1e3, r->step_s * 1e3,
          r->samples_per_s, efficiency, r->memory / 1e9, w->why_not ? w->why_not : "");
}

/* Where T is in p->t_values. */
static int t_index(const Planner *p, int t) {
  int i = 0;
  while (i < p->n_t - 1 && p->t_values[i] != t) i++;
  return i;
}

static int plan(Planner *p) {
  const PlanArgs *a = p->a;
  int gpus = a->gpus * a->nodes;
  for (int t = 2; t <= gpus && p->n_t < (int)(sizeof p->t_values / sizeof p->t_values[0]); t++)
    if (gpus % t == 0) p->t_values[p->n_t++] = t;
  /* What does not depend on the batch, from the step at batch 1, and
   * the optimizer's time: the step with it less the step without. */
  const Measured *base = measure(p, 1);
  if (!base) return 1;
  if (base->failed) {
    fprintf(stderr, "%sdlcc: error: the training step does not compile (at batch 1)\n",
            base->said ? base->said : "");
    return 1;
  }
  Measured with = {0};
  Job job = {.p = p, .batch = 1, .optimizer = true, .out = &with};
  if (!run_job(&job)) {
    fprintf(stderr, "%sdlcc: error: the training step with its optimizer does not compile (at batch 1)\n",
            with.said ? with.said : "");
    free(with.said);
    return 1;
  }
  ScaleModel model = {.batch = a->batch,
                      .weight_bytes = job.weights_bytes,
                      .grad_bytes = base->grad_bytes,
                      .optim_s = with.step.compute_s > base->step.compute_s ? with.step.compute_s - base->step.compute_s
                                                                             : 0,
                      .bucket_bytes = a->bucket_mb * 1048576.0};
  /* one GPU alone at the global batch, for the efficiency column; a
   * model too big to compile at that batch has none */
  const Measured *single = measure(p, a->batch);
  if (!single) return 1;
  ScaleSplit one = {.data = 1, .tensor = 1, .stages = 1, .gpus_per_node = 1};
  double single_s = single->failed ? 0 : scale_estimate(p->dev, &model, &one, &single->step).step_s;

  int cap = 0;
  for (int t = 1; t <= gpus; t++)
    for (int s = 1; gpus % t == 0 && s <= gpus / t; s++) cap += (gpus / t) % s == 0;
  Row *rows = calloc((size_t)cap, sizeof *rows);
  if (!rows) return 1;
  int n = 0;
  for (int t = 1; t <= gpus; t++) {
    if (gpus % t) continue;
    for (int s = 1; s <= gpus / t; s++) {
      if ((gpus / t) % s) continue;
      int d = gpus / t / s;
      Row *w = &rows[n++];
      w->split = (ScaleSplit){.data = d, .tensor = t, .stages = s, .gpus_per_node = a->gpus, .micro_batches = 1};
      if (a->batch % d) {
        w->why_not = "the batch does not divide among the data-parallel groups";
        continue;
      }
      int64_t local = a->batch / d;
      if (s > 1) {
        int m = a->micro_batches ? a->micro_batches : default_micro_batches(local, s);
        w->split.micro_batches = m;
        if (local % m) {
          w->why_not = "the micro-batches do not divide a group's batch";
          continue;
        }
        local /= m;
      }
      const Measured *at = measure(p, local);
      if (!at) {
        free(rows);
        return 1;
      }
      if (at->failed) {
        w->why_not = at->why;
        w->failed_batch = local;
        continue;
      }
      if (s > at->step.n_nodes) {
        w->why_not = "more stages than operations";
        continue;
      }
      ScaleStep step = at->step;
      if (t > 1) {
        const TpFacts *f = &at->tp[t_index(p, t)];
        if (!f->regions) {
          w->why_not = f->why[0] ? f->why : "no pair of linears to split";
          continue;
        }
        /* rank 0's share of the forward's work, as the part T divides */
        step.split_s = f->work < 1 ? step.compute_s * (1 - f->work) * t / (t - 1) : 0;
        if (step.split_s > step.compute_s) step.split_s = step.compute_s;
        step.tp_bytes = f->bytes, step.tp_count = f->count;
      }
      w->r = scale_estimate(p->dev, &model, &w->split, &step);
      if (w->r.memory > p->dev->memory) w->why_not = "does not fit in memory";
    }
  }
  qsort(rows, (size_t)n, sizeof *rows, by_step);
  printf("dlcc: scale-out estimate for %s, global batch %d, %d node%s x %d %s, %s, %s: from the cost model and a "
         "bandwidth table (docs/parallel.md), not measured\n",
         a->model_path, a->batch, a->nodes, a->nodes == 1 ? "" : "s", a->gpus, p->dev->name,
         ir_dtype_name(p->precision), a->optimizer);
  if (single->failed)
    printf("  one GPU: the step at batch %d does not compile: %s\n", a->batch, single->why);
  else
    printf("  one GPU: %.3f ms a step\n", single_s * 1e3);
  printf("  parameters %.1f MB, gradients all-reduced %.1f MB, weights and optimizer state %.1f MB\n",
         base->param_bytes / 1e6, base->grad_bytes / 1e6, model.weight_bytes / 1e6);
  if (p->n_t && base->tp[0].regions)
    printf("  tensor parallel over %d ranks splits %d region%s of linears (%d all-reduces a step)\n", p->t_values[0],
           base->tp[0].regions, base->tp[0].regions == 1 ? "" : "s", base->tp[0].count);
  else if (p->n_t)
    printf("  tensor parallel over %d ranks splits nothing: %s\n", p->t_values[0],
           base->tp[0].why[0] ? base->tp[0].why : "no pair of linears to split");
  printf("  split: data x tensor x pipeline groups; times in ms per step, exposed communication only\n");
  printf("  %-14s %5s %9s %9s %9s %9s %9s %10s %11s %7s %9s\n", "D x T x S", "micro", "compute", "dp comm", "tp comm",
         "p2p", "bubble", "step", "samples/s", "effic.", "GB/GPU");
  for (int i = 0; i < n; i++)
    if (rows[i].r.step_s > 0) print_row(stdout, &rows[i], single_s, gpus);
  for (int i = 0; i < n; i++)
    if (rows[i].r.step_s == 0)
      printf("  %d x %d x %d: not possible: %s%s\n", rows[i].split.data, rows[i].split.tensor,
             rows[i].split.stages, rows[i].failed_batch ? "the step at a group's batch does not compile: " : "",
             rows[i].why_not);
  if (n && !rows[0].why_not)
    printf("choose: %d x %d x %d (data x tensor x pipeline)\n", rows[0].split.data, rows[0].split.tensor,
           rows[0].split.stages);
  else
    printf("choose: none of the splits fits in %.0f GB a GPU\n", p->dev->memory / 1e9);
  free(rows);
  return 0;
}

int driver_plan_parallel(int argc, char **argv) {
  PlanArgs a;
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc == 2 ? 0 : 1;
  Planner p = {.a = &a, .precision = TY_F32};
  if (!(p.dev = scale_device(a.gpu))) {
    fprintf(stderr, "dlcc: error: --gpu=%s is not in the device table (%s)\n", a.gpu, scale_device_names());
    return 1;
  }
  if (a.precision && (!ir_dtype_from_name(a.precision, &p.precision) ||
                      (p.precision != TY_F32 && p.precision != TY_F16 && p.precision != TY_BF16))) {
    fprintf(stderr, "dlcc: error: unknown precision '%s' (expected f32, f16 or bf16)\n", a.precision);
    return 1;
  }
  size_t len = strlen(a.model_path);
  if (len > 3 && strcmp(a.model_path + len - 3, ".ir") == 0) {
    fprintf(stderr, "dlcc: error: --plan-parallel varies the batch, and IR text fixes its shapes: give the model in "
            "the language (a name as dim 0 of its inputs) or as ONNX (dim 0 free)\n");
    return 1;
  }
  if (driver_is_onnx(a.model_path) && !a.data) {
    fprintf(stderr, "dlcc: error: --plan-parallel of an ONNX model needs --data: its samples give the inputs' shapes "
            "at each batch\n");
    return 1;
  }
  char err[512];
  /* the shapes alone: nothing read but the headers */
  if (a.data && !train_data_read(a.data, true, TRAIN_HEADERS_ONLY, &p.data, err, sizeof err)) {
    fprintf(stderr, "dlcc: error: %s\n", err);
    return 1;
  }
  rc = plan(&p);
  for (int i = 0; i < p.n; i++) {
    free(p.m[i]->node_s);
    free(p.m[i]->cut_bytes);
    free(p.m[i]->said);
    free(p.m[i]->tp);
    free(p.m[i]);
  }
  free(p.m);
  if (a.data) train_data_free(&p.data);
  for (int i = 0; i < a.n_defines; i++) free((char *)a.defines[i].name);
  return rc;
}

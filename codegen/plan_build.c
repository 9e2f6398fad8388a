/* The plan builder: takes a verified graph, returns an RtPlan and the CUDA
 * source it launches.  It decides where every value lives (weights in
 * graph order, inputs and outputs in their own spaces, everything else in
 * the arena), lowers node after node through lower_kernels.c, and keeps
 * one kernel per distinct text. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "kernel.h"

enum { ALIGN = 256 };

struct CgBuild {
  Ctx *ctx;
  Graph *g;
  int n_values;
  RtRef *home;
  bool *has_home;
  uint64_t arena_top, weights_top;

  RtStep *steps;
  int n_steps, cap_steps;

  RtKernel *kernels;
  const char **keys; /* each kernel's text under a neutral name: the dedupe key */
  const char **texts;
  int n_kernels, cap_kernels;
  bool needs_fp16, needs_bf16;

  RtTensorDesc *weights, *inputs, *outputs;
  int n_weights, n_inputs;

  CgBuffer *buffers;
  int n_buffers, cap_buffers;
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

static RtRef place(CgBuild *b, uint64_t nbytes, const char *what) {
  RtRef r = {.space = RT_SPACE_ARENA, .offset = align_up(b->arena_top)};
  b->arena_top = r.offset + nbytes;
  if (b->n_buffers == b->cap_buffers) {
    int old = b->cap_buffers, cap = old ? 2 * old : 64;
    b->buffers = arena_realloc(&b->ctx->arena, b->buffers, sizeof(CgBuffer) * (size_t)old,
                               sizeof(CgBuffer) * (size_t)cap);
    b->cap_buffers = cap;
  }
  b->buffers[b->n_buffers++] = (CgBuffer){.what = what, .ref = r, .nbytes = nbytes};
  return r;
}

static const char *value_name(CgBuild *b, const Value *v) {
  return arena_printf(&b->ctx->arena, "%%%d", v->id);
}

static void set_home(CgBuild *b, const Value *v, RtRef r) {
  b->home[v->id] = r;
  b->has_home[v->id] = true;
}

/* The one place that decides where values live.  Naive: every value and
 * every scratch range its own arena bytes, nothing reused; the memory
 * planner replaces this (and place) later.  Consts and reshapes get
 * bytes while lowering: a const only when something needs it in memory,
 * a reshape the bytes of its operand. */
static bool plan_storage(CgBuild *b) {
  Graph *g = b->g;
  int n_in = 0, n_par = 0;
  for (Node *n = g->first; n; n = n->next) {
    n_in += n->op == OP_INPUT;
    n_par += n->op == OP_PARAM;
  }
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
      int w = 0;
      while (w < b->n_weights && strcmp(b->weights[w].name, name) != 0) w++;
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
  for (int i = 0; i < g->n_outputs; i++) {
    const Value *v = g->outputs[i];
    RtRef r = {.space = RT_SPACE_OUTPUT, .index = (uint32_t)i};
    b->outputs[i] = desc_of(g->output_names[i], v, r);
    /* Computed straight into the output, unless it already lives
     * elsewhere: then a copy at the end (emit_output_copies). */
    if (!b->has_home[v->id]) set_home(b, v, r);
  }
  for (Node *n = g->first; n; n = n->next) {
    if (n->op == OP_CONST || n->op == OP_RESHAPE) continue;
    for (int i = 0; i < n->n_out; i++)
      if (!b->has_home[n->out[i].id])
        set_home(b, &n->out[i], place(b, value_bytes(&n->out[i]), value_name(b, &n->out[i])));
  }
  return ok;
}

/* ---- what lowering asks for ---- */

Ctx *cg_build_ctx(CgBuild *b) { return b->ctx; }

bool cg_has_ref(CgBuild *b, const Value *v) { return b->has_home[v->id]; }

bool cg_const_of(CgBuild *b, const Value *v, double *value) {
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
    b->cap_steps = cap;
  }
  RtStep *s = &b->steps[b->n_steps++];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->label = cg_label(b->ctx, n, what);
  return s;
}

static bool name_taken(const CgBuild *b, const char *name) {
  for (int i = 0; i < b->n_kernels; i++)
    if (strcmp(b->kernels[i].name, name) == 0) return true;
  return false;
}

/* The kernel whose text k has, added when it is new. */
static uint32_t intern_kernel(CgBuild *b, const Kernel *k) {
  const char *key = cg_emit_kernel(b->ctx, k, "K", false);
  for (int i = 0; i < b->n_kernels; i++)
    if (strcmp(b->keys[i], key) == 0) return (uint32_t)i;
  if (b->n_kernels == b->cap_kernels) {
    int old = b->cap_kernels, cap = old ? 2 * old : 32;
    Arena *a = &b->ctx->arena;
    b->kernels = arena_realloc(a, b->kernels, sizeof(RtKernel) * (size_t)old,
                               sizeof(RtKernel) * (size_t)cap);
    b->keys = arena_realloc(a, b->keys, sizeof(char *) * (size_t)old, sizeof(char *) * (size_t)cap);
    b->texts =
        arena_realloc(a, b->texts, sizeof(char *) * (size_t)old, sizeof(char *) * (size_t)cap);
    b->cap_kernels = cap;
  }
  const char *name =
      arena_printf(&b->ctx->arena, "%s_%d", k->hint, k->node ? k->node->out[0].id : 0);
  for (int i = 2; name_taken(b, name); i++)
    name = arena_printf(&b->ctx->arena, "%s_%d_%d", k->hint, k->node ? k->node->out[0].id : 0, i);
  int i = b->n_kernels++;
  b->kernels[i] = (RtKernel){
      .name = name, .uses_barriers = k->uses_barriers, .static_shared_bytes = k->shared_bytes};
  b->keys[i] = key;
  b->texts[i] = cg_emit_kernel(b->ctx, k, name, true);
  for (int p = 0; p < k->n_params; p++)
    if (k->params[p].buf) {
      b->needs_fp16 |= k->params[p].buf->dtype == TY_F16;
      b->needs_bf16 |= k->params[p].buf->dtype == TY_BF16;
    }
  return (uint32_t)i;
}

void cg_launch(CgBuild *b, Kernel *k) {
  cg_kernel_finish(k);
  uint32_t idx = intern_kernel(b, k);
  RtStep *s = add_step(b, RT_STEP_LAUNCH, k->node, k->what);
  RtLaunch *l = &s->launch;
  l->kernel = idx;
  memcpy(l->grid, k->grid, sizeof l->grid);
  memcpy(l->block, k->block, sizeof l->block);
  l->n_args = (uint32_t)k->n_params;
  RtArg *args = ARENA_ARRAY(&b->ctx->arena, RtArg, k->n_params + 1);
  for (int i = 0; i < k->n_params; i++) args[i] = k->params[i].arg;
  l->args = args;
}

void cg_gemm(CgBuild *b, const Node *n, const char *what, const RtGemm *g) {
  RtStep *s = add_step(b, RT_STEP_GEMM, n, what);
  s->gemm = *g;
}

void cg_copy(CgBuild *b, const Node *n, const char *what, RtRef dst, RtRef src, uint64_t nbytes) {
  RtStep *s = add_step(b, RT_STEP_COPY, n, what);
  s->copy = (RtCopy){.dst = dst, .src = src, .nbytes = nbytes};
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
    if (src.space == dst.space && src.index == dst.index) continue;
    const char *what = arena_printf(&b->ctx->arena, "to output '%s'", g->output_names[i]);
    double c;
    if (cg_const_of(b, v, &c))
      cg_fill(b, v->def, what, dst, v->type.dtype, ir_type_numel(&v->type), c);
    else if (value_bytes(v))
      cg_copy(b, v->def, what, dst, src, value_bytes(v));
  }
}

static const char *join_source(CgBuild *b) {
  const char *prelude = cg_cuda_prelude(b->ctx, b->needs_fp16, b->needs_bf16);
  size_t len = strlen(prelude);
  for (int i = 0; i < b->n_kernels; i++) len += strlen(b->texts[i]) + 1;
  char *s = arena_alloc(&b->ctx->arena, len + 1), *p = s;
  p = stpcpy(p, prelude);
  for (int i = 0; i < b->n_kernels; i++) {
    *p++ = '\n';
    p = stpcpy(p, b->texts[i]);
  }
  *p = 0;
  return s;
}

bool cg_compile(Graph *g, CgResult *out) {
  Ctx *c = g->ctx;
  memset(out, 0, sizeof *out);
  int errors = c->diag.errors;
  ir_number(g);
  CgBuild *b = ARENA_NEW(&c->arena, CgBuild);
  b->ctx = c;
  b->g = g;
  for (Node *n = g->first; n; n = n->next) b->n_values += n->n_out;
  b->home = ARENA_ARRAY(&c->arena, RtRef, b->n_values + 1);
  b->has_home = ARENA_ARRAY(&c->arena, bool, b->n_values + 1);
  if (!plan_storage(b)) return false;
  for (Node *n = g->first; n && !diag_should_stop(c); n = n->next) cg_lower_node(b, n);
  if (c->diag.errors > errors) return false;
  emit_output_copies(b);

  RtPlan *p = ARENA_NEW(&c->arena, RtPlan);
  p->magic = RT_PLAN_MAGIC;
  p->version = RT_PLAN_VERSION;
  p->model_name = g->name ? g->name : "model";
  p->source = join_source(b);
  p->n_kernels = (uint32_t)b->n_kernels;
  p->kernels = b->kernels;
  p->n_steps = (uint32_t)b->n_steps;
  p->steps = b->steps;
  p->arena_bytes = align_up(b->arena_top);
  p->weights_bytes = align_up(b->weights_top);
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
  return true;
}

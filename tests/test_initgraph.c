/* Check suite for weight-only subgraphs computed once (codegen/
 * initgraph.c, RtPlan.init_steps): bn-fold at -O2 puts W' and b' in the
 * init steps and a run's convolution loads them; fusion keeps weight-only
 * nodes out of a run's kernels; on emu the outputs match ir_eval on the
 * -O0 graph before and after the weights are replaced (dlrt_set_weight,
 * dlrt_load_weights, dlc_load_weights twice) and the init steps run once
 * per change of the weights, not per run; plan validation refuses a run
 * writing the derived region and init steps touching the weights, inputs
 * or outputs; the memory checker refuses arena bytes carried from init
 * into a run; a model.so with init steps runs; the cuda device opens
 * cuBLAS for a GEMM that only an init step makes. */
#include "config.h"

#include "check_quiet.h"
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "dlcrt.h"
#include "frontend/ast.h"
#include "include/dlcc.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "runtime/runtime.h"
#include "runtime/tensorio.h"

static char tmp[64]; /* one folder for the whole run: emu's cache stays warm */
static char path_buf[1024];
static char err[2048];

static const char *at(const char *name) {
  snprintf(path_buf, sizeof path_buf, "%s/%s", tmp, name);
  return path_buf;
}

/* conv + batchnorm + relu: bn-fold's case, and a linear one. */
static const char *cbr_text =
    "model cbr(x: f32[1, 3, 6, 6]) -> f32[1, 4, 6, 6] {\n"
    "  return relu(batchnorm(conv2d(x, 4, kernel=3, pad=1) as conv) as bn)\n"
    "}\n";
static const char *lbn_text =
    "model lbn(x: f32[2, 5]) -> f32[2, 3] {\n"
    "  return batchnorm(linear(x, 3, bias=false) as fc) as bn\n"
    "}\n";

/* ---- compiling ---- */

typedef struct Job {
  const char *text;
  int level;
  const char *passes; /* instead of the level's pipeline when set */
  bool int8;          /* --quantize=int8, every activation's range 1 */
  Graph *g;
  CgResult cg;
  bool ok;
} Job;

static bool calibrate_unit(void *ud, Graph *g, int n, const Value *const *values, double *amax) {
  (void)ud, (void)g, (void)values;
  for (int i = 0; i < n; i++) amax[i] = 1;
  return true;
}

static int compile_job(Ctx *c, void *data) {
  Job *j = data;
  const SrcFile *f = ctx_add_file(c, "t.dl", j->text, strlen(j->text));
  Program *p = fe_parse(c, f);
  if (!p) return 0;
  LowerOptions lo = {0};
  j->g = fe_lower(c, p, &lo);
  if (!j->g || !ir_verify(j->g)) return 0;
  PassOptions po = {.opt_level = j->level,
                    .passes = j->passes,
                    .quantize_int8 = j->int8,
                    .calibrate = calibrate_unit};
  if (!pass_run_pipeline(j->g, &po, NULL) || !ir_verify(j->g)) return 0;
  j->ok = cg_compile(j->g, &j->cg);
  return 0;
}

/* Compiles text at level into c; the test fails on an error. */
static Job compile(Ctx *c, const char *text, int level) {
  Job j = {.text = text, .level = level};
  ck_assert_int_eq(ctx_guard(c, compile_job, &j), 0);
  ck_assert_msg(j.ok, "does not compile:\n%s", diag_text(c));
  return j;
}

static TensorMap params_of(Graph *g, uint64_t seed) {
  TensorMap map;
  char e[512];
  ck_assert_msg(ir_init_params(g, seed, IR_INIT_RANDOM, &map, e, sizeof e), "%s", e);
  return map;
}

static void fill(float *x, int n, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 11) * 0x1p-53 * 2 - 1);
  }
}

/* The -O0 graph of text on ir_eval: one output of n floats into want. */
static void reference(const char *text, const TensorMap *params, const char *in_name, float *x, int nx,
                      float *want, int n) {
  Ctx c;
  ctx_init(&c);
  Job j = {.text = text, .level = 0};
  ck_assert_int_eq(ctx_guard(&c, compile_job, &j), 0);
  ck_assert_msg(j.g != NULL, "%s", diag_text(&c));
  Graph *g = j.g;
  const Node *in = NULL;
  for (Node *node = g->first; node; node = node->next)
    if (node->op == OP_INPUT) in = node;
  ck_assert_int_eq((int)ir_type_numel(&in->out[0].type), nx);
  Tensor xt = {.type = in->out[0].type, .data = x};
  const char *names[1] = {in_name};
  TensorMap inputs = {.n = 1, .names = names, .tensors = &xt};
  Tensor out;
  char e[512];
  ck_assert_msg(ir_eval(g, &inputs, params, &out, e, sizeof e), "%s", e);
  ck_assert_int_eq((int)ir_type_numel(&out.type), n);
  memcpy(want, out.data, sizeof(float) * (size_t)n);
  ir_tensor_free(&out);
  ctx_free(&c);
}

static void assert_close(const float *got, const float *want, int n) {
  double scale = 0;
  for (int i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
  for (int i = 0; i < n; i++)
    ck_assert_msg(fabs(got[i] - want[i]) <= 1e-5 * fmax(scale, 1e-30), "element %d: %.9g, want %.9g", i,
                  (double)got[i], (double)want[i]);
}

static void set_weights(DlrtModel *m, const TensorMap *map) {
  for (int i = 0; i < map->n; i++) {
    if (dlrt_set_weight(m, map->names[i], NULL, 0) == DLRT_E_ARG && strstr(dlrt_error(m), "has no weight"))
      continue; /* a param the optimizer removed */
    const Tensor *t = &map->tensors[i];
    ck_assert_msg(dlrt_set_weight(m, map->names[i], t->data, ir_tensor_nbytes(&t->type)) == DLRT_OK, "%s",
                  dlrt_error(m));
  }
}

static void run_once(DlrtModel *m, const float *x, size_t nx, float *y, size_t ny) {
  ck_assert_msg(dlrt_set_input(m, 0, x, nx * sizeof *x) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_msg(dlrt_run(m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_msg(dlrt_get_output(m, 0, y, ny * sizeof *y) == DLRT_OK, "%s", dlrt_error(m));
}

static bool emu_ok(void) {
  char why[512];
  RtDevice *d = rt_device_open("emu", NULL, why, sizeof why);
  if (!d) return false;
  rt_device_close(d);
  return true;
}

/* ---- codegen ---- */

START_TEST(bn_fold_weights_are_init_steps) {
  Ctx c;
  ctx_init(&c);
  Job j = compile(&c, cbr_text, 2);
  const RtPlan *p = j.cg.plan;
  ck_assert_int_eq(p->version, RT_PLAN_VERSION);
  /* W' and b' once, each computing s = gamma * rsqrt(var + eps) where it
   * reads it (passes/remat.c); a run is the one convolution with bias and
   * relu. */
  ck_assert_uint_eq(p->n_init_steps, 2);
  ck_assert_uint_eq(p->n_steps, 1);
  ck_assert_uint_eq(p->steps[0].kind, RT_STEP_LAUNCH);
  /* W' (4*3*3*3 floats) and b' (4), each 256-aligned. */
  ck_assert_uint_eq(p->derived_bytes, 512 + 256);
  int in_derived = 0;
  for (uint32_t a = 0; a < p->steps[0].launch.n_args; a++) {
    RtRef r = p->steps[0].launch.args[a].ref;
    if (p->steps[0].launch.args[a].kind != RT_ARG_PTR) continue;
    ck_assert_uint_ne(r.space, RT_SPACE_ARENA);
    in_derived += r.space == RT_SPACE_WEIGHTS && r.offset >= p->weights_bytes;
    /* the conv reads no param: gamma, beta, mean and var went into b' */
    if (r.space == RT_SPACE_WEIGHTS) ck_assert_uint_ge(r.offset, p->weights_bytes);
  }
  ck_assert_int_eq(in_derived, 2);
  ck_assert_msg(rt_plan_validate(p, err, sizeof err) == 0, "%s", err);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cg_print_plan(f, p);
  fclose(f);
  ck_assert_msg(strstr(text, "derived 768 bytes at weights+") && strstr(text, "init steps 2 (") &&
                    strstr(text, "\n  init   0  launch ") && strstr(text, "\nsteps 1\n    0  launch conv2d"),
                "%s", text);
  free(text);
  /* -O0 has no weight-only node: nothing to do at init. */
  Job j0 = compile(&c, cbr_text, 0);
  ck_assert_uint_eq(j0.cg.plan->n_init_steps, 0);
  ck_assert_uint_eq(j0.cg.plan->derived_bytes, 0);
  ctx_free(&c);
}
END_TEST

static bool *weight_only_nodes(Graph *g) {
  ir_number(g);
  int n = 0;
  for (Node *node = g->first; node; node = node->next) n++;
  bool *w = calloc((size_t)n + 1, 1);
  for (Node *node = g->first; node; node = node->next) {
    bool wo = node->op == OP_PARAM || node->op == OP_CONST;
    if (node->op != OP_INPUT && node->n_in) {
      wo = true;
      for (int i = 0; i < node->n_in; i++) wo = wo && w[node->in[i]->def->id];
    }
    w[node->id] = wo;
  }
  return w;
}

START_TEST(fusion_keeps_weight_only_out_of_run_kernels) {
  Ctx c;
  ctx_init(&c);
  Job j = compile(&c, cbr_text, 2);
  bool *w = weight_only_nodes(j.g);
  int weight_groups = 0, run_groups = 0;
  for (Node *a = j.g->first; a; a = a->next) {
    if (a->group < 0) continue;
    for (Node *b = j.g->first; b; b = b->next)
      if (b->group == a->group) ck_assert_msg(w[a->id] == w[b->id], "group #k%d mixes weights and activations", a->group);
    bool root = true;
    for (Node *b = a->next; b; b = b->next) root = root && b->group != a->group;
    if (root) weight_groups += w[a->id], run_groups += !w[a->id];
  }
  ck_assert_int_eq(run_groups, 1);
  ck_assert_int_eq(weight_groups, 2);
  free(w);
  ctx_free(&c);
}
END_TEST

START_TEST(memory_check_refuses_arena_from_init_into_a_run) {
  Ctx c;
  ctx_init(&c);
  /* Without remat, s = gamma * rsqrt(var + eps) is stored for W' and b':
   * an arena buffer of the init steps alone. */
  Job j = {.text = cbr_text, .level = 2, .passes = "simplify,fold,cse,dce,bn-fold,fuse"};
  ck_assert_int_eq(ctx_guard(&c, compile_job, &j), 0);
  ck_assert_msg(j.ok, "does not compile:\n%s", diag_text(&c));
  ck_assert(cg_check_memory(&j.cg, err, sizeof err));
  CgResult r = j.cg;
  CgBuffer *bufs = malloc(sizeof *bufs * (size_t)r.n_buffers);
  memcpy(bufs, r.buffers, sizeof *bufs * (size_t)r.n_buffers);
  int k = 0;
  while (k < r.n_buffers && !(bufs[k].lower < bufs[k].upper && bufs[k].upper <= (int)r.plan->n_init_steps)) k++;
  ck_assert_int_lt(k, r.n_buffers); /* s = gamma * rsqrt(var + eps), read by W' and b' */
  bufs[k].upper = (int)r.plan->n_init_steps + 1;
  r.buffers = bufs;
  ck_assert(!cg_check_memory(&r, err, sizeof err));
  ck_assert_msg(strstr(err, "does not last between runs"), "%s", err);
  free(bufs);
  ctx_free(&c);
}
END_TEST

/* The largest arena buffer that only init steps use. */
static uint64_t init_scratch_bytes(const Job *j) {
  uint64_t most = 0;
  for (int k = 0; k < j->cg.n_buffers; k++) {
    const CgBuffer *b = &j->cg.buffers[k];
    if (b->lower < b->upper && b->upper <= (int)j->cg.plan->n_init_steps && b->nbytes > most) most = b->nbytes;
  }
  return most;
}

/* int8: the folded weight W' = W * s feeds its per-channel scale's
 * reduce_max and its quantize.  remat gives each its own W * s, so
 * neither stores W' (4*3*3*3 floats) in the arena; without remat one
 * buffer holds it while the init steps run. */
START_TEST(int8_folded_weight_is_not_stored) {
  Ctx c;
  ctx_init(&c);
  Job j = {.text = cbr_text, .level = 2, .int8 = true};
  ck_assert_int_eq(ctx_guard(&c, compile_job, &j), 0);
  ck_assert_msg(j.ok, "does not compile:\n%s", diag_text(&c));
  ck_assert_uint_lt(init_scratch_bytes(&j), 4 * 3 * 3 * 3 * 4);
  ck_assert(cg_check_memory(&j.cg, err, sizeof err));
  Job kept = {.text = cbr_text, .level = 2, .int8 = true,
              .passes = "simplify,fold,cse,dce,bn-fold,quantize,fold,cse,dce,fuse"};
  ck_assert_int_eq(ctx_guard(&c, compile_job, &kept), 0);
  ck_assert_msg(kept.ok, "does not compile:\n%s", diag_text(&c));
  ck_assert_uint_ge(init_scratch_bytes(&kept), 4 * 3 * 3 * 3 * 4);
  ctx_free(&c);
}
END_TEST

/* ---- running on emu ---- */

START_TEST(init_runs_once_per_weight_change) {
  if (!emu_ok()) return;
  Ctx c;
  ctx_init(&c);
  Job j = compile(&c, cbr_text, 2);
  TensorMap w1 = params_of(j.g, 1), w2 = params_of(j.g, 2);
  float x[108], y[144], want[144];
  fill(x, 108, 7);
  DlrtModel *m;
  ck_assert_msg(dlrt_open(j.cg.plan, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  set_weights(m, &w1);
  ck_assert_uint_eq(rt_model_init_runs(m), 0);
  reference(cbr_text, &w1, "x", x, 108, want, 144);
  for (int r = 0; r < 3; r++) {
    run_once(m, x, 108, y, 144);
    assert_close(y, want, 144);
  }
  ck_assert_uint_eq(rt_model_init_runs(m), 1);
  /* One weight replaced: the derived ones follow at the next run. */
  const Tensor *gamma = ir_tensor_map_find(&w2, "bn.weight");
  ck_assert_ptr_nonnull(gamma);
  ck_assert_int_eq(dlrt_set_weight(m, "bn.weight", gamma->data, ir_tensor_nbytes(&gamma->type)), DLRT_OK);
  for (int i = 0; i < w1.n; i++)
    if (!strcmp(w1.names[i], "bn.weight")) memcpy(w1.tensors[i].data, gamma->data, ir_tensor_nbytes(&gamma->type));
  float want2[144];
  reference(cbr_text, &w1, "x", x, 108, want2, 144);
  run_once(m, x, 108, y, 144);
  assert_close(y, want2, 144);
  ck_assert_msg(fabs(want2[5] - want[5]) > 1e-4 || fabs(want2[77] - want[77]) > 1e-4, "the new gamma changes nothing");
  run_once(m, x, 108, y, 144);
  ck_assert_uint_eq(rt_model_init_runs(m), 2);
  /* Every weight from a file. */
  RtTensorSet set = {.n = w2.n};
  set.names = calloc((size_t)w2.n, sizeof *set.names);
  set.tensors = calloc((size_t)w2.n, sizeof *set.tensors);
  for (int i = 0; i < w2.n; i++) {
    const Tensor *t = &w2.tensors[i];
    set.names[i] = (char *)w2.names[i];
    set.tensors[i] = (RtTensor){.dtype = (RtDType)t->type.dtype, .rank = t->type.rank, .data = t->data,
                                .nbytes = ir_tensor_nbytes(&t->type)};
    memcpy(set.tensors[i].dims, t->type.dims, sizeof(int64_t) * (size_t)t->type.rank);
  }
  char e[512];
  ck_assert_msg(rt_safetensors_write(at("w2.safetensors"), &set, e, sizeof e) == 0, "%s", e);
  free(set.names), free(set.tensors);
  ck_assert_msg(dlrt_load_weights(m, at("w2.safetensors")) == DLRT_OK, "%s", dlrt_error(m));
  reference(cbr_text, &w2, "x", x, 108, want, 144);
  run_once(m, x, 108, y, 144);
  assert_close(y, want, 144);
  run_once(m, x, 108, y, 144);
  ck_assert_uint_eq(rt_model_init_runs(m), 3);
  dlrt_close(m);
  ir_tensor_map_free(&w1), ir_tensor_map_free(&w2);
  ctx_free(&c);
}
END_TEST

START_TEST(linear_bn_and_weight_only_output) {
  if (!emu_ok()) return;
  Ctx c;
  ctx_init(&c);
  Job j = compile(&c, lbn_text, 2);
  ck_assert_uint_gt(j.cg.plan->n_init_steps, 0);
  TensorMap w = params_of(j.g, 3);
  float x[10], y[6], want[6];
  fill(x, 10, 3);
  DlrtModel *m;
  ck_assert_msg(dlrt_open(j.cg.plan, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  set_weights(m, &w);
  reference(lbn_text, &w, "x", x, 10, want, 6);
  run_once(m, x, 10, y, 6);
  assert_close(y, want, 6);
  dlrt_close(m);
  ir_tensor_map_free(&w);

  /* An output that is a function of the weights alone: computed by an
   * init step into the derived region, copied out by every run. */
  static const char *ir =
      "graph wo {\n"
      "  %0 = input {name=\"x\"} : f32[4]\n"
      "  %1 = param {name=\"w\"} : f32[4]\n"
      "  %2 = const {value=3} : f32[]\n"
      "  %3 = mul %1, %2 : f32[4]\n"
      "  %4 = add %0, %3 : f32[4]\n"
      "  return %4 as \"y\", %3 as \"w3\"\n"
      "}\n";
  const SrcFile *f = ctx_add_file(&c, "wo.ir", ir, strlen(ir));
  Graph *g = ir_parse(&c, f);
  ck_assert_msg(g && ir_verify(g), "%s", diag_text(&c));
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "%s", diag_text(&c));
  ck_assert_uint_eq(cg.plan->n_init_steps, 1);
  ck_assert_uint_eq(cg.plan->n_steps, 2); /* x + w3, and w3 copied out */
  ck_assert_uint_eq(cg.plan->steps[1].kind, RT_STEP_COPY);
  ck_assert_msg(dlrt_open(cg.plan, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  float wv[4] = {1, 2, 3, 4}, xv[4] = {10, 20, 30, 40}, out[4], w3[4];
  for (int round = 0; round < 2; round++) {
    ck_assert_int_eq(dlrt_set_weight(m, "w", wv, sizeof wv), DLRT_OK);
    run_once(m, xv, 4, out, 4);
    ck_assert_int_eq(dlrt_get_output(m, 1, w3, sizeof w3), DLRT_OK);
    for (int i = 0; i < 4; i++) {
      ck_assert_float_eq(w3[i], 3 * wv[i]);
      ck_assert_float_eq(out[i], xv[i] + 3 * wv[i]);
      wv[i] = -wv[i] * 0.5f;
    }
  }
  ck_assert_uint_eq(rt_model_init_runs(m), 2);
  dlrt_close(m);
  ctx_free(&c);
}
END_TEST

START_TEST(api_load_weights_twice) {
  if (!emu_ok()) return;
  /* Two weight files through the compiler API, emu against ref. */
  dlc_options emu = {.backend = "emu"}, ref = {.backend = "ref"};
  dlc_model *a = NULL, *r = NULL;
  ck_assert_msg(dlc_compile_string("cbr.dl", cbr_text, &emu, &a) == DLC_OK, "%s", dlc_error(a));
  ck_assert_msg(dlc_compile_string("cbr.dl", cbr_text, &ref, &r) == DLC_OK, "%s", dlc_error(r));
  Ctx c;
  ctx_init(&c);
  Job j = compile(&c, cbr_text, 0);
  float x[108];
  fill(x, 108, 11);
  float first[144];
  for (int seed = 4; seed <= 5; seed++) {
    TensorMap w = params_of(j.g, (uint64_t)seed);
    RtTensorSet set = {.n = w.n};
    set.names = calloc((size_t)w.n, sizeof *set.names);
    set.tensors = calloc((size_t)w.n, sizeof *set.tensors);
    for (int i = 0; i < w.n; i++) {
      const Tensor *t = &w.tensors[i];
      set.names[i] = (char *)w.names[i];
      set.tensors[i] = (RtTensor){.dtype = (RtDType)t->type.dtype, .rank = t->type.rank, .data = t->data,
                                  .nbytes = ir_tensor_nbytes(&t->type)};
      memcpy(set.tensors[i].dims, t->type.dims, sizeof(int64_t) * (size_t)t->type.rank);
    }
    char e[512], name[32];
    snprintf(name, sizeof name, "w%d.safetensors", seed);
    ck_assert_msg(rt_safetensors_write(at(name), &set, e, sizeof e) == 0, "%s", e);
    free(set.names), free(set.tensors);
    ir_tensor_map_free(&w);
    const void *got, *want;
    size_t ng, nw;
    dlc_model *ms[2] = {a, r};
    for (int k = 0; k < 2; k++) {
      ck_assert_msg(dlc_load_weights(ms[k], at(name)) == DLC_OK, "%s", dlc_error(ms[k]));
      ck_assert_msg(dlc_set_input(ms[k], "x", x, sizeof x) == DLC_OK, "%s", dlc_error(ms[k]));
      ck_assert_msg(dlc_run(ms[k]) == DLC_OK, "%s", dlc_error(ms[k]));
    }
    ck_assert_int_eq(dlc_get_output(a, 0, &got, &ng), DLC_OK);
    ck_assert_int_eq(dlc_get_output(r, 0, &want, &nw), DLC_OK);
    ck_assert_uint_eq(ng, sizeof first);
    ck_assert_uint_eq(nw, sizeof first);
    assert_close(got, want, 144);
    if (seed == 4) memcpy(first, got, sizeof first);
    else ck_assert_msg(memcmp(first, got, sizeof first) != 0, "the second file gives the first answer");
  }
  dlc_free(a);
  dlc_free(r);
  ctx_free(&c);
}
END_TEST

START_TEST(model_so_with_init_steps) {
  if (!emu_ok()) return;
  Ctx c;
  ctx_init(&c);
  Job j = compile(&c, cbr_text, 2);
  TensorMap w = params_of(j.g, 6);
  char so[1024];
  snprintf(so, sizeof so, "%s/cbr.so", tmp);
  CgAotOptions o = {.output = so, .source_name = "cbr.dl", .params = &w};
  ck_assert_msg(cg_aot_build(j.g, &j.cg, &o), "%s", diag_text(&c));
  DlrtModel *m;
  ck_assert_msg(dlrt_open_file(so, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  float x[108], y[144], want[144];
  fill(x, 108, 9);
  reference(cbr_text, &w, "x", x, 108, want, 144);
  run_once(m, x, 108, y, 144); /* the embedded weights: init at the first run */
  assert_close(y, want, 144);
  run_once(m, x, 108, y, 144);
  ck_assert_uint_eq(rt_model_init_runs(m), 1);
  TensorMap w2 = params_of(j.g, 8);
  const Tensor *mean = ir_tensor_map_find(&w2, "bn.running_mean");
  ck_assert_int_eq(dlrt_set_weight(m, "bn.running_mean", mean->data, ir_tensor_nbytes(&mean->type)), DLRT_OK);
  for (int i = 0; i < w.n; i++)
    if (!strcmp(w.names[i], "bn.running_mean")) memcpy(w.tensors[i].data, mean->data, ir_tensor_nbytes(&mean->type));
  reference(cbr_text, &w, "x", x, 108, want, 144);
  run_once(m, x, 108, y, 144);
  assert_close(y, want, 144);
  ck_assert_uint_eq(rt_model_init_runs(m), 2);
  dlrt_close(m);
  ir_tensor_map_free(&w), ir_tensor_map_free(&w2);
  ctx_free(&c);
}
END_TEST

/* ---- plan validation ---- */

static const RtTensorDesc vweights[] = {
    {.name = "w", .dtype = RT_DT_F32, .rank = 1, .dims = {4}, .nbytes = 16, .where = {RT_SPACE_WEIGHTS, 0, 0}},
};
static const RtTensorDesc vinputs[] = {
    {.name = "x", .dtype = RT_DT_F32, .rank = 1, .dims = {4}, .nbytes = 16, .where = {RT_SPACE_INPUT, 0, 0}},
};
static const RtTensorDesc voutputs[] = {
    {.name = "y", .dtype = RT_DT_F32, .rank = 1, .dims = {4}, .nbytes = 16, .where = {RT_SPACE_OUTPUT, 0, 0}},
};
static RtStep vinit[1], vsteps[1];
static RtPlan vplan;

/* Init: derived = w (a copy); a run: y = derived. */
static void make_vplan(void) {
  vinit[0] = (RtStep){.kind = RT_STEP_COPY,
                      .label = "derive",
                      .copy = {.dst = {RT_SPACE_WEIGHTS, 0, 256}, .src = {RT_SPACE_WEIGHTS, 0, 0}, .nbytes = 16}};
  vsteps[0] = (RtStep){.kind = RT_STEP_COPY,
                       .label = "out",
                       .copy = {.dst = {RT_SPACE_OUTPUT, 0, 0}, .src = {RT_SPACE_WEIGHTS, 0, 256}, .nbytes = 16}};
  vplan = (RtPlan){.magic = RT_PLAN_MAGIC, .version = RT_PLAN_VERSION, .model_name = "v", .source = "",
                   .n_steps = 1, .steps = vsteps, .n_init_steps = 1, .init_steps = vinit,
                   .weights_bytes = 256, .derived_bytes = 256, .n_weights = 1, .weights = vweights,
                   .n_inputs = 1, .inputs = vinputs, .n_outputs = 1, .outputs = voutputs};
}

START_TEST(validate_accepts_init_writing_derived) {
  make_vplan();
  ck_assert_msg(rt_plan_validate(&vplan, err, sizeof err) == 0, "%s", err);
}
END_TEST

START_TEST(validate_refuses_run_writing_derived) {
  make_vplan();
  vsteps[0].copy = (RtCopy){.dst = {RT_SPACE_WEIGHTS, 0, 272}, .src = {RT_SPACE_INPUT, 0, 0}, .nbytes = 16};
  ck_assert_int_eq(rt_plan_validate(&vplan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 0 (out): copy dst: writes the derived region of WEIGHTS (offset 272), which "
                        "only init steps compute");
  /* a GEMM's result likewise */
  vsteps[0] = (RtStep){.kind = RT_STEP_GEMM, .label = "mm",
                       .gemm = {.dtype = RT_DT_F32, .m = 2, .n = 2, .k = 2, .lda = 2, .ldb = 2, .ldc = 2, .batch = 1,
                                .alpha = 1, .a = {RT_SPACE_INPUT, 0, 0}, .b = {RT_SPACE_WEIGHTS, 0, 0},
                                .c = {RT_SPACE_WEIGHTS, 0, 256}}};
  ck_assert_int_eq(rt_plan_validate(&vplan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 0 (mm): gemm c: writes the derived region of WEIGHTS (offset 256), which only "
                        "init steps compute");
}
END_TEST

START_TEST(validate_refuses_init_beyond_derived) {
  make_vplan();
  vinit[0].copy.dst.offset = 240; /* into the weights' last 16 bytes */
  vinit[0].copy.src.offset = 0;
  ck_assert_int_eq(rt_plan_validate(&vplan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: init step 0 (derive): copy dst: writes WEIGHTS at offset 240, outside the derived "
                        "region at 256: init steps may not change the weights");
  make_vplan();
  vinit[0].copy.src = (RtRef){RT_SPACE_INPUT, 0, 0};
  ck_assert_int_eq(rt_plan_validate(&vplan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: init step 0 (derive): copy src: uses INPUT, but init steps run on the weights alone");
  make_vplan();
  vinit[0].copy.dst = (RtRef){RT_SPACE_OUTPUT, 0, 0};
  ck_assert_int_eq(rt_plan_validate(&vplan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: init step 0 (derive): copy dst: uses OUTPUT, but init steps run on the weights alone");
  make_vplan();
  vinit[0].copy.dst.offset = 500; /* 500 + 16 > 512 */
  ck_assert_int_eq(rt_plan_validate(&vplan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: init step 0 (derive): copy dst: offset 500 + 16 bytes is outside WEIGHTS (512 bytes)");
}
END_TEST

START_TEST(validate_refuses_weight_in_derived) {
  make_vplan();
  RtTensorDesc w = vweights[0];
  w.where.offset = 256;
  vplan.weights = &w;
  ck_assert_int_eq(rt_plan_validate(&vplan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: weight 0 'w': offset 256 + 16 bytes is outside the 256 bytes of weights");
}
END_TEST

START_TEST(hand_made_init_runs_on_emu) {
  if (!emu_ok()) return;
  make_vplan();
  DlrtModel *m;
  ck_assert_msg(dlrt_open(&vplan, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  float w[4] = {1, 2, 3, 4}, x[4] = {0}, y[4];
  ck_assert_int_eq(dlrt_set_weights(m, NULL, 0), DLRT_E_ARG);
  ck_assert_int_eq(dlrt_set_input(m, 0, x, sizeof x), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_E_STATE); /* no weights yet: no init either */
  ck_assert_uint_eq(rt_model_init_runs(m), 0);
  float blob[64] = {1, 2, 3, 4}; /* weights_bytes: the params, not the derived region */
  ck_assert_msg(dlrt_set_weights(m, blob, sizeof blob) == DLRT_OK, "%s", dlrt_error(m));
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(dlrt_run(m), DLRT_OK);
    ck_assert_int_eq(dlrt_get_output(m, 0, y, sizeof y), DLRT_OK);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(y[i], w[i]);
  }
  ck_assert_uint_eq(rt_model_init_runs(m), 1);
  ck_assert_int_eq(dlrt_set_weights(m, blob, sizeof blob + 1024), DLRT_E_ARG);
  float w2[4] = {-1, -2, -3, -4};
  ck_assert_int_eq(dlrt_set_weight(m, "w", w2, sizeof w2), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_OK);
  ck_assert_int_eq(dlrt_get_output(m, 0, y, sizeof y), DLRT_OK);
  for (int i = 0; i < 4; i++) ck_assert_float_eq(y[i], w2[i]);
  ck_assert_uint_eq(rt_model_init_runs(m), 2);
  dlrt_close(m);
}
END_TEST

#ifdef HAVE_CUDA
/* The cuda device decides at open whether it needs cuBLASLt and checks
 * every launch's grid: init steps count as much as a run's. */
START_TEST(cuda_sees_init_steps) {
  const char *b = getenv("top_builddir");
  char lib[4096];
  snprintf(lib, sizeof lib, "%s/tests/.libs/libfakecuda.so", b ? b : ".");
  if (access(lib, R_OK) != 0) return;
  void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (real) { /* cuBLAS would find the real driver */
    dlclose(real);
    return;
  }
  setenv("DLCC_LIBCUDA", lib, 1);
  make_vplan();
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(&vplan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  dlrt_close(m);
  vinit[0] = (RtStep){.kind = RT_STEP_GEMM, .label = "derive",
                      .gemm = {.dtype = RT_DT_F32, .m = 2, .n = 2, .k = 2, .lda = 2, .ldb = 2, .ldc = 2, .batch = 1,
                               .alpha = 1, .a = {RT_SPACE_WEIGHTS, 0, 0}, .b = {RT_SPACE_WEIGHTS, 0, 0},
                               .c = {RT_SPACE_WEIGHTS, 0, 256}}};
  ck_assert_int_eq(dlrt_open(&vplan, "cuda", &m), DLRT_E_COMPILE);
  ck_assert_msg(strstr(dlrt_error(m), "cublasLt: cublasLtCreate"), "%s", dlrt_error(m));
  dlrt_close(m);
  unsetenv("DLCC_LIBCUDA");
}
END_TEST
#endif

static Suite *initgraph_suite(void) {
  Suite *s = suite_create("initgraph");
  TCase *tc = tcase_create("codegen");
  tcase_add_test(tc, bn_fold_weights_are_init_steps);
  tcase_add_test(tc, fusion_keeps_weight_only_out_of_run_kernels);
  tcase_add_test(tc, memory_check_refuses_arena_from_init_into_a_run);
  tcase_add_test(tc, int8_folded_weight_is_not_stored);
  suite_add_tcase(s, tc);
  tc = tcase_create("validate");
  tcase_add_test(tc, validate_accepts_init_writing_derived);
  tcase_add_test(tc, validate_refuses_run_writing_derived);
  tcase_add_test(tc, validate_refuses_init_beyond_derived);
  tcase_add_test(tc, validate_refuses_weight_in_derived);
  suite_add_tcase(s, tc);
  tc = tcase_create("run");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, hand_made_init_runs_on_emu);
  tcase_add_test(tc, init_runs_once_per_weight_change);
  tcase_add_test(tc, linear_bn_and_weight_only_output);
  tcase_add_test(tc, api_load_weights_twice);
  tcase_add_test(tc, model_so_with_init_steps);
#ifdef HAVE_CUDA
  tcase_add_test(tc, cuda_sees_init_steps);
#endif
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  snprintf(tmp, sizeof tmp, "/tmp/dlcc-initgraph-XXXXXX");
  if (!mkdtemp(tmp)) return 1;
  char cache[128];
  snprintf(cache, sizeof cache, "%s/cache", tmp);
  setenv("DLCC_CACHE_DIR", cache, 1);
  unsetenv("DLCC_LIBCUDA");
  const char *top = getenv("top_srcdir");
  if (top && !getenv("DLCC_EMU_HEADER")) {
    char h[4096];
    snprintf(h, sizeof h, "%s/runtime/emu/dlcc_emu.h", top);
    setenv("DLCC_EMU_HEADER", h, 1);
  }
  SRunner *sr = srunner_create(initgraph_suite());
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd) != 0) failed++;
  return failed ? 1 : 0;
}

/* Check suite for the ahead-of-time path (codegen/aot.c): a model.so is
 * built with cg_aot_build, dlopen-ed through dlrt_open_file, run on emu
 * and compared with ir_eval (f32: 1e-5 relative); its plan is compared
 * with the in-memory one field by field; the second load compiles
 * nothing (emu and, over the fake libcuda, NVRTC); external weights; a
 * garbage, truncated or other-version model.so; bits and bytes flipped
 * across the plan and blobs of one; corrupted cache entries.  Every
 * test works in its own DLCC_CACHE_DIR. */
#include "check_quiet.h"
#include <dlfcn.h>
#include <elf.h>
#include <glob.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "config.h"
#include "dlcrt.h"
#include "frontend/ast.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/autodiff.h"
#include "passes/optim.h"
#include "passes/pass.h"
#include "runtime/device.h"
#include "runtime/runtime.h"
#include "runtime/tensorio.h"

static Ctx ctx;
static char tmp[64];
static char path_buf[1024];

/* A file in this test's folder. */
static const char *at(const char *name) {
  snprintf(path_buf, sizeof path_buf, "%s/%s", tmp, name);
  return path_buf;
}

static void setup(void) {
  ctx_init(&ctx);
  snprintf(tmp, sizeof tmp, "/tmp/dlcc-aot-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmp));
  char cache[128];
  snprintf(cache, sizeof cache, "%s/cache", tmp);
  setenv("DLCC_CACHE_DIR", cache, 1);
  unsetenv("DLCC_WEIGHTS");
  unsetenv("DLCC_LIBCUDA");
  const char *top = getenv("top_srcdir");
  if (top && !getenv("DLCC_EMU_HEADER")) {
    char h[4096];
    snprintf(h, sizeof h, "%s/runtime/emu/dlcc_emu.h", top);
    setenv("DLCC_EMU_HEADER", h, 1);
  }
  rt_nvrtc_reset();
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  ck_assert_int_eq(system(cmd), 0);
  ctx_free(&ctx);
}

static const char *example(const char *name) {
  static char p[4096];
  const char *top = getenv("top_srcdir");
  snprintf(p, sizeof p, "%s/examples/%s", top ? top : ".", name);
  return p;
}

/* ---- building a model.so ---- */

typedef struct Build {
  const char *path, *text; /* a file, or text */
  int opt_level;           /* the pass pipeline's, as dlcc -O; 0: no passes */
  CgAotOptions o;
  uint64_t seed;
  const OptimSpec *optim; /* non-NULL: the model is a loss, built as a training step */
  Graph *g;
  CgResult cg;
  TensorMap params;
  bool ok;
} Build;

static int build_job(Ctx *c, void *data) {
  Build *b = data;
  const SrcFile *f = b->path ? ctx_load_file(c, b->path) : ctx_add_file(c, "t.dl", b->text, strlen(b->text));
  if (!f) return 0;
  Program *p = fe_parse(c, f);
  if (!p) return 0;
  LowerOptions lo = {.training = b->optim != NULL};
  b->g = fe_lower(c, p, &lo);
  PassOptions po = {.opt_level = b->opt_level};
  if (b->g && b->optim &&
      !(ir_verify(b->g) && pass_autodiff(b->g, NULL) && pass_append_optimizer(b->g, b->optim) && ir_verify(b->g)))
    return 0;
  if (!b->g || !ir_verify(b->g) || (b->opt_level && !pass_run_pipeline(b->g, &po, NULL)) ||
      !cg_compile(b->g, &b->cg))
    return 0;
  char err[1024];
  if (!ir_init_params(b->g, b->seed, IR_INIT_RANDOM, &b->params, err, sizeof err)) {
    diag_error(c, (SrcLoc){0}, "%s", err);
    return 0;
  }
  b->o.params = &b->params;
  b->o.source_name = b->path ? b->path : "t.dl";
  b->ok = cg_aot_build(b->g, &b->cg, &b->o);
  return 0;
}

static const char *sm90[] = {"sm_90"};

/* Builds into tmp/so_name with default options (sm_90 where NVRTC is
 * there); fails the test on an error. */
static void build_ok(Build *b, const char *so_name) {
  static char so[1024];
  snprintf(so, sizeof so, "%s/%s", tmp, so_name);
  b->o.output = so;
#ifdef HAVE_CUDA
  if (!b->o.n_archs && !b->o.archs) {
    b->o.n_archs = 1;
    b->o.archs = sm90;
  }
#endif
  ck_assert_int_eq(ctx_guard(&ctx, build_job, b), 0);
  ck_assert_msg(b->ok, "build failed:\n%s", diag_text(&ctx));
}

static const char *tiny_text =
    "model tiny(tokens: i64[2, 3], x: f32[2, 3, 4]) -> f32[2, 3, 4] {\n"
    "  e = embedding(tokens, 7, 4) as embed\n"
    "  return relu(linear(e + x, 4) as fc)\n"
    "}\n";

/* ---- running and comparing ---- */

static uint64_t lcg = 1;
static double rnd(void) {
  lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(lcg >> 11) * 0x1.0p-53;
}

/* Random inputs for b's graph, in plan order: floats U(-1, 1), integers
 * below the model.so's own index bound. */
static void make_inputs(Build *b, int64_t (*bound)(int), TensorMap *in) {
  const RtPlan *p = b->cg.plan;
  in->n = (int)p->n_inputs;
  in->names = calloc(p->n_inputs + 1, sizeof *in->names);
  in->tensors = calloc(p->n_inputs + 1, sizeof *in->tensors);
  int i = 0;
  for (Node *n = b->g->first; n; n = n->next) {
    if (n->op != OP_INPUT) continue;
    ck_assert_str_eq(ir_attr_str(n, "name"), p->inputs[i].name);
    in->names[i] = p->inputs[i].name;
    Tensor *t = &in->tensors[i];
    ck_assert(ir_tensor_alloc(t, &n->out[0].type));
    int64_t lim = bound ? bound(i) : 0;
    for (int64_t k = 0; k < ir_type_numel(&t->type); k++)
      ir_tensor_set(t, k, ir_dtype_is_float(t->type.dtype) ? 2 * rnd() - 1 : floor(rnd() * (double)(lim ? lim : 5)));
    i++;
  }
}

static void free_map(TensorMap *m) {
  for (int i = 0; i < m->n; i++) ir_tensor_free(&m->tensors[i]);
  free(m->names);
  free(m->tensors);
}

/* Runs m on in, compares every output with ir_eval(b->g) at 1e-5 of
 * each element, or of floor times the output's largest. */
static void check_against_ref_at(Build *b, DlrtModel *m, const TensorMap *in, double floor) {
  for (int i = 0; i < in->n; i++)
    ck_assert_msg(dlrt_set_input(m, i, in->tensors[i].data, ir_tensor_nbytes(&in->tensors[i].type)) == DLRT_OK,
                  "%s", dlrt_error(m));
  ck_assert_msg(dlrt_run(m) == DLRT_OK, "%s", dlrt_error(m));
  Tensor *ref = calloc((size_t)b->g->n_outputs, sizeof *ref);
  char err[1024];
  ck_assert_msg(ir_eval(b->g, in, &b->params, ref, err, sizeof err), "%s", err);
  for (int o = 0; o < b->g->n_outputs; o++) {
    size_t n = ir_tensor_nbytes(&ref[o].type);
    float *got = malloc(n);
    ck_assert_int_eq(dlrt_get_output(m, o, got, n), DLRT_OK);
    const float *want = ref[o].data;
    double scale = 0;
    for (size_t k = 0; k < n / 4; k++) scale = fmax(scale, fabs(want[k]));
    ck_assert(scale > 0); /* a test on zeros proves nothing */
    for (size_t k = 0; k < n / 4; k++)
      ck_assert_msg(fabs(got[k] - want[k]) <= 1e-5 * fmax(fabs(want[k]), floor * scale),
                    "output %d [%zu]: %.9g, reference %.9g", o, k, got[k], want[k]);
    free(got);
    ir_tensor_free(&ref[o]);
  }
  free(ref);
}

static void check_against_ref(Build *b, DlrtModel *m, const TensorMap *in) { check_against_ref_at(b, m, in, 1e-3); }

static const RtPlan *plan_of(void *so) {
  DlrtPlanFn fn = (DlrtPlanFn)dlsym(so, DLRT_PLAN_SYMBOL);
  ck_assert_ptr_nonnull(fn);
  return fn();
}

/* ---- the library's contents ---- */

static void same_ref(RtRef a, RtRef b) {
  ck_assert_uint_eq(a.space, b.space);
  ck_assert_uint_eq(a.index, b.index);
  ck_assert_uint_eq(a.offset, b.offset);
}

static void same_desc(const RtTensorDesc *a, const RtTensorDesc *b) {
  ck_assert_str_eq(a->name, b->name);
  ck_assert_uint_eq(a->dtype, b->dtype);
  ck_assert_uint_eq(a->rank, b->rank);
  for (uint32_t d = 0; d < a->rank; d++) ck_assert_int_eq(a->dims[d], b->dims[d]);
  ck_assert_uint_eq(a->nbytes, b->nbytes);
  same_ref(a->where, b->where);
}

static void same_step(const RtStep *a, const RtStep *b) {
  ck_assert_uint_eq(a->kind, b->kind);
  ck_assert_str_eq(a->label, b->label);
  if (a->kind == RT_STEP_LAUNCH) {
    const RtLaunch *x = &a->launch, *y = &b->launch;
    ck_assert_uint_eq(x->kernel, y->kernel);
    for (int i = 0; i < 3; i++) {
      ck_assert_uint_eq(x->grid[i], y->grid[i]);
      ck_assert_uint_eq(x->block[i], y->block[i]);
    }
    ck_assert_uint_eq(x->dynamic_shared_bytes, y->dynamic_shared_bytes);
    ck_assert_uint_eq(x->n_args, y->n_args);
    for (uint32_t i = 0; i < x->n_args; i++) {
      ck_assert_uint_eq(x->args[i].kind, y->args[i].kind);
      same_ref(x->args[i].ref, y->args[i].ref);
      ck_assert_int_eq(x->args[i].i, y->args[i].i);
      ck_assert(memcmp(&x->args[i].f, &y->args[i].f, sizeof(float)) == 0); /* bit for bit */
    }
  } else if (a->kind == RT_STEP_GEMM) {
    const RtGemm *x = &a->gemm, *y = &b->gemm;
    ck_assert_uint_eq(x->dtype, y->dtype);
    ck_assert_uint_eq(x->trans_a, y->trans_a);
    ck_assert_uint_eq(x->trans_b, y->trans_b);
    const int64_t xi[] = {x->m, x->n, x->k, x->lda, x->ldb, x->ldc, x->batch, x->stride_a, x->stride_b, x->stride_c};
    const int64_t yi[] = {y->m, y->n, y->k, y->lda, y->ldb, y->ldc, y->batch, y->stride_a, y->stride_b, y->stride_c};
    for (int i = 0; i < 10; i++) ck_assert_int_eq(xi[i], yi[i]);
    ck_assert(x->alpha == y->alpha && x->beta == y->beta);
    same_ref(x->a, y->a);
    same_ref(x->b, y->b);
    same_ref(x->c, y->c);
    ck_assert_uint_eq(x->epilogue, y->epilogue);
    same_ref(x->bias, y->bias);
    ck_assert_int_eq(x->stride_bias, y->stride_bias);
  } else {
    same_ref(a->copy.dst, b->copy.dst);
    same_ref(a->copy.src, b->copy.src);
    ck_assert_uint_eq(a->copy.nbytes, b->copy.nbytes);
  }
}

/* The plan inside model.so is the plan codegen built, its weights are
 * the params at the plan's offsets, its source is the same text. */
START_TEST(plan_round_trips) {
  Build b = {.path = example("mlp.dl"), .seed = 7};
  build_ok(&b, "mlp.so");
  void *so = dlopen(at("mlp.so"), RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(so != NULL, "%s", dlerror());
  const RtPlan *p = plan_of(so), *q = b.cg.plan;
  char err[512];
  ck_assert_msg(rt_plan_validate(p, err, sizeof err) == 0, "%s", err);
  ck_assert_uint_eq(p->magic, RT_PLAN_MAGIC);
  ck_assert_uint_eq(p->version, RT_PLAN_VERSION);
  ck_assert_str_eq(p->model_name, "mlp");
  ck_assert_str_eq(p->source, q->source);
  ck_assert_uint_eq(p->n_kernels, q->n_kernels);
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    ck_assert_str_eq(p->kernels[i].name, q->kernels[i].name);
    ck_assert_uint_eq(p->kernels[i].uses_barriers, q->kernels[i].uses_barriers);
    ck_assert_uint_eq(p->kernels[i].static_shared_bytes, q->kernels[i].static_shared_bytes);
    ck_assert_uint_eq(p->kernels[i].cooperative, q->kernels[i].cooperative);
  }
  ck_assert_uint_eq(p->n_steps, q->n_steps);
  int epilogues = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) {
    same_step(&p->steps[i], &q->steps[i]);
    epilogues += p->steps[i].kind == RT_STEP_GEMM && p->steps[i].gemm.epilogue;
  }
  ck_assert_int_eq(epilogues, 3); /* unfused, each linear adds its bias in cuBLASLt's epilogue */
  ck_assert_uint_eq(p->arena_bytes, q->arena_bytes);
  ck_assert_uint_eq(p->weights_bytes, q->weights_bytes);
  ck_assert_uint_eq(p->n_weights, q->n_weights);
  ck_assert_uint_eq(p->n_inputs, q->n_inputs);
  ck_assert_uint_eq(p->n_outputs, q->n_outputs);
  for (uint32_t i = 0; i < p->n_weights; i++) same_desc(&p->weights[i], &q->weights[i]);
  for (uint32_t i = 0; i < p->n_inputs; i++) same_desc(&p->inputs[i], &q->inputs[i]);
  for (uint32_t i = 0; i < p->n_outputs; i++) same_desc(&p->outputs[i], &q->outputs[i]);
  ck_assert_ptr_nonnull(p->weights_data);
  ck_assert_uint_eq((uintptr_t)p->weights_data % 256, 0);
  for (uint32_t i = 0; i < p->n_weights; i++) {
    const Tensor *t = ir_tensor_map_find(&b.params, p->weights[i].name);
    ck_assert_ptr_nonnull(t);
    ck_assert_msg(!memcmp((const char *)p->weights_data + p->weights[i].where.offset, t->data, p->weights[i].nbytes),
                  "weight %s differs", p->weights[i].name);
  }
#ifdef HAVE_CUDA
  ck_assert_uint_eq(p->n_binaries, 2);
  ck_assert_str_eq(p->binaries[0].arch, "sm_90");
  ck_assert_int_eq(memcmp(p->binaries[0].data, "\x7f" "ELF", 4), 0);
  ck_assert_str_eq(p->binaries[1].arch, "compute_90");
  ck_assert_ptr_nonnull(strstr(p->binaries[1].data, ".version"));
  ck_assert_uint_eq(((const char *)p->binaries[1].data)[p->binaries[1].size - 1], 0);
#endif
  const char *(*wpath)(void) = (const char *(*)(void))dlsym(so, CG_AOT_WEIGHTS_PATH_SYMBOL);
  ck_assert_ptr_nonnull(wpath);
  ck_assert_ptr_null(wpath());
  dlclose(so);
  ir_tensor_map_free(&b.params);
}
END_TEST

/* model.h: the entry points and every tensor's name, dtype and shape. */
START_TEST(header_describes_model) {
  Build b = {.text = tiny_text};
  build_ok(&b, "tiny.so");
  FILE *f = fopen(at("tiny.h"), "r");
  ck_assert_ptr_nonnull(f);
  char text[16384];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  const char *want[] = {
      "#define TINY_MODEL_NAME \"tiny\"\n",
      "#define TINY_NUM_INPUTS 2\n",
      "#define TINY_INPUT0_NAME \"tokens\"\n",
      "#define TINY_INPUT0_DTYPE DLRT_I64\n",
      "#define TINY_INPUT0_DIMS {2, 3}\n",
      "#define TINY_INPUT0_INDEX_BOUND 7\n",
      "#define TINY_INPUT1_DIMS {2, 3, 4}\n",
      "#define TINY_INPUT1_NBYTES 96\n",
      "#define TINY_OUTPUT0_NAME \"output\"\n",
      "#define TINY_EXTERNAL_WEIGHTS 0\n",
      "static inline DlrtStatus tiny_open(const char *backend, DlrtModel **out) {\n",
      "static inline DlrtStatus tiny_run(DlrtModel *m, const int64_t *in_tokens, const float *in_x, float "
      "*out_output) {\n",
  };
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    ck_assert_msg(strstr(text, want[i]), "tiny.h lacks '%s':\n%s", want[i], text);
  ir_tensor_map_free(&b.params);
}
END_TEST

/* dlopen-ed, run on emu, compared with the reference interpreter; the
 * index bound the library exports keeps gather in range. */
START_TEST(runs_on_emu_like_reference) {
  const char *names[] = {"mlp.dl", NULL};
  for (int k = 0; k < 2; k++) {
    Build b = {.path = names[k] ? example(names[k]) : NULL, .text = names[k] ? NULL : tiny_text, .seed = 3};
    build_ok(&b, names[k] ? "mlp.so" : "tiny.so");
    DlrtModel *m = NULL;
    ck_assert_msg(dlrt_open_file(at(names[k] ? "mlp.so" : "tiny.so"), "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
    ck_assert_str_eq(dlrt_backend(m), "emu");
    void *so = dlopen(at(names[k] ? "mlp.so" : "tiny.so"), RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(so);
    int64_t (*bound)(int) = (int64_t(*)(int))dlsym(so, CG_AOT_INDEX_BOUND_SYMBOL);
    ck_assert_ptr_nonnull(bound);
    ck_assert_int_eq(bound(0), names[k] ? 0 : 7);
    ck_assert_int_eq(bound(1), 0);
    ck_assert_int_eq(bound(-1), 0);
    TensorMap in;
    make_inputs(&b, bound, &in);
    check_against_ref(&b, m, &in);
    free_map(&in);
    dlclose(so);
    dlrt_close(m);
    ir_tensor_map_free(&b.params);
  }
}
END_TEST

/* A training step's model.so: its updates, written in place over their
 * weights (outputs that live in WEIGHTS, no update step), leave there
 * after 3 runs what 3 interpreter steps leave in the params, read back
 * with dlrt_get_weight. */
START_TEST(training_step_updates_weights) {
  OptimSpec o = optim_spec_default(OPTIM_SGD);
  o.momentum = 0.9;
  Build b = {.text = "model step(x: f32[4, 6], t: f32[4, 3]) -> f32[] {\n"
                     "  h = relu(linear(x, 5) as fc1)\n"
                     "  return -mean(sum(log_softmax(linear(h, 3) as fc2, axis=-1) * t, axis=1))\n"
                     "}\n",
             .opt_level = 2, .seed = 3, .optim = &o};
  build_ok(&b, "step.so");
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open_file(at("step.so"), "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  const RtPlan *p = b.cg.plan;
  ck_assert_uint_eq(p->n_update_steps, 0);
  int in_place = 0;
  for (uint32_t i = 0; i < p->n_outputs; i++) in_place += p->outputs[i].where.space == RT_SPACE_WEIGHTS;
  ck_assert_int_eq(in_place, 2 * 4 + 1);
  TensorMap in;
  make_inputs(&b, NULL, &in);
  ir_tensor_set((Tensor *)ir_tensor_map_find(&in, OPTIM_LR_INPUT), 0, 0.1);
  Tensor *out = calloc((size_t)b.g->n_outputs, sizeof *out);
  char err[1024];
  for (int step = 0; step < 3; step++) {
    for (int i = 0; i < in.n; i++)
      ck_assert_int_eq(dlrt_set_input(m, i, in.tensors[i].data, ir_tensor_nbytes(&in.tensors[i].type)), DLRT_OK);
    ck_assert_msg(dlrt_run(m) == DLRT_OK, "%s", dlrt_error(m));
    ck_assert_msg(ir_eval(b.g, &in, &b.params, out, err, sizeof err) &&
                      ir_apply_updates(b.g, out, &b.params, err, sizeof err),
                  "%s", err);
    for (int i = 0; i < b.g->n_outputs; i++) ir_tensor_free(&out[i]);
  }
  for (uint32_t w = 0; w < p->n_weights; w++) {
    const Tensor *want = ir_tensor_map_find(&b.params, p->weights[w].name);
    size_t n = p->weights[w].nbytes;
    float *got = malloc(n);
    ck_assert_msg(dlrt_get_weight(m, p->weights[w].name, got, n) == DLRT_OK, "%s", dlrt_error(m));
    for (size_t k = 0; k < n / 4; k++)
      ck_assert_msg(fabs(got[k] - ((const float *)want->data)[k]) <= 1e-5 * (1 + fabs(((const float *)want->data)[k])),
                    "%s[%zu]: %.9g, reference %.9g", p->weights[w].name, k, got[k], ((const float *)want->data)[k]);
    free(got);
  }
  float three;
  ck_assert_int_eq(dlrt_get_weight(m, OPTIM_STEP_PARAM, &three, sizeof three), DLRT_OK);
  ck_assert(three == 3);
  ck_assert_int_eq(dlrt_get_weight(m, "fc1.weight", &three, sizeof three), DLRT_E_ARG);
  ck_assert_str_eq(dlrt_error(m), "get_weight 'fc1.weight': 4 bytes given, it is 120 bytes");
  free(out);
  free_map(&in);
  dlrt_close(m);
  ir_tensor_map_free(&b.params);
}
END_TEST

/* The second load of the same model.so compiles nothing on emu; a
 * corrupted entry in emu's cache is rebuilt and the model still runs. */
START_TEST(emu_cache_hit_and_corruption) {
  Build b = {.path = example("mlp.dl"), .seed = 1};
  build_ok(&b, "mlp.so");
  void *so = dlopen(at("mlp.so"), RTLD_NOW | RTLD_LOCAL);
  ck_assert_ptr_nonnull(so);
  const RtPlan *p = plan_of(so);
  /* Rounds: cold, warm, garbage over the cached kernels, the entry cut
   * in half (dlopen would map it and die of SIGBUS). */
  unsigned want_compiles[] = {1, 0, 1, 1};
  for (int round = 0; round < 4; round++) {
    if (round >= 2) {
      glob_t gl;
      char pat[256];
      snprintf(pat, sizeof pat, "%s/cache/emu/*.so", tmp);
      ck_assert_int_eq(glob(pat, 0, NULL, &gl), 0);
      ck_assert_uint_eq(gl.gl_pathc, 1);
      if (round == 2) {
        FILE *f = fopen(gl.gl_pathv[0], "wb");
        fputs("not a shared object", f);
        fclose(f);
      } else {
        struct stat st;
        ck_assert_int_eq(stat(gl.gl_pathv[0], &st), 0);
        ck_assert_int_eq(truncate(gl.gl_pathv[0], st.st_size / 2), 0);
      }
      globfree(&gl);
    }
    char err[1024];
    const char *chosen;
    RtDevice *dev = rt_device_open("emu", &chosen, err, sizeof err);
    ck_assert_msg(dev != NULL, "%s", err);
    DlrtModel *m = NULL;
    ck_assert_msg(rt_model_open_device(p, dev, &m) == DLRT_OK, "%s", dlrt_error(m));
    ck_assert_uint_eq(rt_emu_compile_count(dev), want_compiles[round]);
    TensorMap in;
    make_inputs(&b, NULL, &in);
    check_against_ref(&b, m, &in);
    free_map(&in);
    dlrt_close(m);
  }
  dlclose(so);
  ir_tensor_map_free(&b.params);
}
END_TEST

/* --external-weights: no blob inside, the recorded file (or
 * DLCC_WEIGHTS) is read at open by the host. */
START_TEST(external_weights) {
  Build b = {.path = example("mlp.dl"), .seed = 5, .o = {.external_weights = true}};
  build_ok(&b, "mlp.so");
  /* Without a weights file the library writes its own beside it. */
  ck_assert_int_eq(access(at("mlp.safetensors"), R_OK), 0);
  void *so = dlopen(at("mlp.so"), RTLD_NOW | RTLD_LOCAL);
  ck_assert_ptr_nonnull(so);
  const RtPlan *p = plan_of(so);
  ck_assert_ptr_null(p->weights_data);
  const char *(*wpath)(void) = (const char *(*)(void))dlsym(so, CG_AOT_WEIGHTS_PATH_SYMBOL);
  char real[4096];
  ck_assert_ptr_nonnull(realpath(at("mlp.safetensors"), real));
  ck_assert_str_eq(wpath(), real);
  setenv("DLCC_WEIGHTS", "/elsewhere/w.safetensors", 1);
  ck_assert_str_eq(wpath(), "/elsewhere/w.safetensors");
  unsetenv("DLCC_WEIGHTS");

  /* The library is small: the weights are not in it. */
  struct stat st;
  ck_assert_int_eq(stat(at("mlp.so"), &st), 0);
  ck_assert_int_lt(st.st_size, (off_t)p->weights_bytes);

  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open_file(at("mlp.so"), "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  float x[8 * 784] = {0};
  ck_assert_int_eq(dlrt_set_input(m, 0, x, sizeof x), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_E_STATE);
  ck_assert_str_eq(dlrt_error(m), "run: the weights were never loaded (dlrt_set_weights, dlrt_load_weights)");
  ck_assert_msg(dlrt_load_weights(m, wpath()) == DLRT_OK, "%s", dlrt_error(m));
  TensorMap in;
  make_inputs(&b, NULL, &in);
  check_against_ref(&b, m, &in);
  free_map(&in);
  dlrt_close(m);
  dlclose(so);
  ir_tensor_map_free(&b.params);
}
END_TEST

/* A given weights file is recorded by its absolute path, not copied. */
START_TEST(external_weights_given_file) {
  Build b = {.path = example("mlp.dl"), .seed = 5, .o = {.external_weights = true}};
  build_ok(&b, "first.so"); /* writes first.safetensors */
  char w[1024];
  snprintf(w, sizeof w, "%s", at("first.safetensors"));
  Build b2 = {.path = example("mlp.dl"), .seed = 5, .o = {.external_weights = true, .weights_path = w}};
  build_ok(&b2, "second.so");
  ck_assert_int_ne(access(at("second.safetensors"), F_OK), 0);
  void *so = dlopen(at("second.so"), RTLD_NOW | RTLD_LOCAL);
  const char *(*wpath)(void) = (const char *(*)(void))dlsym(so, CG_AOT_WEIGHTS_PATH_SYMBOL);
  char real[4096];
  ck_assert_ptr_nonnull(realpath(w, real));
  ck_assert_str_eq(wpath(), real);
  dlclose(so);
  ir_tensor_map_free(&b.params);
  ir_tensor_map_free(&b2.params);
}
END_TEST

/* ---- bad libraries ---- */

START_TEST(garbage_and_truncated_library) {
  FILE *f = fopen(at("garbage.so"), "wb");
  for (int i = 0; i < 4096; i++) fputc((i * 131) & 0xff, f);
  fclose(f);
  DlrtModel *m = NULL;
  ck_assert_int_eq(dlrt_open_file(at("garbage.so"), "emu", &m), DLRT_E_IO);
  char want[1200];
  snprintf(want, sizeof want, "cannot load %s: ", at("garbage.so"));
  ck_assert_msg(!strncmp(dlrt_error(m), want, strlen(want)), "%s", dlrt_error(m));
  dlrt_close(m);

  Build b = {.path = example("mlp.dl")};
  build_ok(&b, "mlp.so");
  struct stat st;
  ck_assert_int_eq(stat(at("mlp.so"), &st), 0);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "head -c %lld '%s/mlp.so' > '%s/cut.so'", (long long)st.st_size / 3, tmp, tmp);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_int_eq(dlrt_open_file(at("cut.so"), "emu", &m), DLRT_E_IO);
  snprintf(want, sizeof want, "cannot load %s: the file is truncated", at("cut.so"));
  ck_assert_msg(!strncmp(dlrt_error(m), want, strlen(want)), "%s", dlrt_error(m));
  dlrt_close(m);
  ir_tensor_map_free(&b.params);
}
END_TEST

/* ---- a corrupt model.so ---- */

/* Bytes [off, off + len) of the file, and what they are. */
typedef struct Span {
  char what[40];
  uint64_t off, len;
} Span;

static const Elf64_Shdr *section(const unsigned char *f, int i) {
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f;
  return (const Elf64_Shdr *)(f + eh->e_shoff + (uint64_t)i * eh->e_shentsize);
}

/* Where the plan lies in a model.so: each table of model.c (its static
 * symbols), each blob (its symbol, its size from plan, the library's
 * own plan) and the strings, which the linker puts in .rodata after
 * them. */
static int plan_spans(const unsigned char *f, const RtPlan *plan, Span *out, int max) {
  static const char *const tables[] = {"plan",   "kernels", "contracts", "params",  "args",    "init_steps",
                                       "steps",  "weights", "inputs",    "outputs", "binaries"};
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f;
  const char *names = (const char *)f + section(f, eh->e_shstrndx)->sh_offset;
  const Elf64_Shdr *rodata = NULL;
  for (int i = 0; i < eh->e_shnum; i++)
    if (!strcmp(names + section(f, i)->sh_name, ".rodata")) rodata = section(f, i);
  ck_assert_ptr_nonnull(rodata);
  int n = 0;
  for (int i = 0; i < eh->e_shnum; i++) {
    const Elf64_Shdr *sh = section(f, i);
    if (sh->sh_type != SHT_SYMTAB) continue;
    const char *str = (const char *)f + section(f, (int)sh->sh_link)->sh_offset;
    for (uint64_t k = 0; k < sh->sh_size / sizeof(Elf64_Sym); k++) {
      const Elf64_Sym *sym = (const Elf64_Sym *)(f + sh->sh_offset) + k;
      const char *name = str + sym->st_name;
      if (sym->st_shndx == SHN_UNDEF || sym->st_shndx >= eh->e_shnum || n == max) continue;
      const Elf64_Shdr *in = section(f, sym->st_shndx);
      bool table = false;
      for (size_t t = 0; t < sizeof tables / sizeof *tables; t++) table |= !strcmp(name, tables[t]);
      Span sp = {.off = in->sh_offset + (sym->st_value - in->sh_addr), .len = table ? sym->st_size : 0};
      if (!strcmp(name, "dlcc_aot_source")) sp.len = strlen(plan->source) + 1;
      if (!strcmp(name, "dlcc_aot_weights")) sp.len = plan->weights_bytes;
      if (!strncmp(name, "dlcc_aot_bin", 12)) sp.len = plan->binaries[atoi(name + 12)].size;
      if (!sp.len) continue;
      snprintf(sp.what, sizeof sp.what, "%s", name);
      out[n++] = sp;
    }
  }
  uint64_t strings = rodata->sh_offset, end = rodata->sh_offset + rodata->sh_size;
  for (int i = 0; i < n; i++)
    if (out[i].off >= rodata->sh_offset && out[i].off < end && out[i].off + out[i].len > strings)
      strings = out[i].off + out[i].len;
  ck_assert_uint_lt(strings, end);
  if (n < max) out[n++] = (Span){"strings", strings, end - strings};
  return n;
}

static unsigned char *read_all(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  rewind(f);
  unsigned char *data = malloc(*size);
  ck_assert_uint_eq(fread(data, 1, *size, f), *size);
  fclose(f);
  return data;
}

/* Every output of m, concatenated (malloc'd). */
static unsigned char *outputs_of(DlrtModel *m, size_t *total) {
  *total = 0;
  for (int o = 0; o < dlrt_num_outputs(m); o++) {
    DlrtTensorInfo ti;
    ck_assert_int_eq(dlrt_output_info(m, o, &ti), DLRT_OK);
    *total += ti.nbytes;
  }
  unsigned char *all = malloc(*total + 1), *at = all;
  for (int o = 0; o < dlrt_num_outputs(m); o++) {
    DlrtTensorInfo ti;
    dlrt_output_info(m, o, &ti);
    ck_assert_int_eq(dlrt_get_output(m, o, at, ti.nbytes), DLRT_OK);
    at += ti.nbytes;
  }
  return all;
}

static DlrtStatus run_with(DlrtModel *m, const TensorMap *in) {
  for (int i = 0; i < in->n; i++)
    ck_assert_int_eq(dlrt_set_input(m, i, in->tensors[i].data, ir_tensor_nbytes(&in->tensors[i].type)), DLRT_OK);
  return dlrt_run(m);
}

/* The review's attack: single bits and whole bytes flipped across a
 * model.so's plan (every table, the strings) and its blobs (weights,
 * source, cubin, PTX), at fixed positions.  Each copy is refused at open
 * with a plan error, or opens, runs and gives the very outputs of the
 * intact library (a flip in a pointer the loader relocates, or in
 * padding); none crashes.  Only those that open run. */
START_TEST(flipped_bits_are_refused_or_harmless) {
  Build b = {.text = "model flips(tokens: i64[2, 3], x: f32[1, 2, 6, 6]) -> (y: f32[2, 3, 4], z: f32[1, 4, 6, 6]) {\n"
                     "  e = embedding(tokens, 7, 4) as embed\n"
                     "  z = relu(batchnorm(conv2d(x, 4, 3, pad=1) as conv) as bn)\n"
                     "  return relu(linear(e, 4) as fc), z\n"
                     "}\n",
             .seed = 5,
             .opt_level = 2};
  build_ok(&b, "flips.so");
  ck_assert_uint_gt(b.cg.plan->n_init_steps, 0);
  ck_assert_uint_gt(b.cg.plan->status_bytes, 0);
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open_file(at("flips.so"), "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  TensorMap in;
  make_inputs(&b, NULL, &in);
  for (int64_t k = 0; k < 6; k++) ((int64_t *)in.tensors[0].data)[k] = k % 7;
  /* bn-fold's weights, folded on emu: 1e-5 of the output's scale. */
  check_against_ref_at(&b, m, &in, 1.0);
  size_t n_out;
  unsigned char *want = outputs_of(m, &n_out);
  dlrt_close(m);

  size_t size;
  unsigned char *file = read_all(at("flips.so"), &size);
  void *so = dlopen(at("flips.so"), RTLD_NOW | RTLD_LOCAL);
  ck_assert_ptr_nonnull(so);
  Span spans[32];
  int n_spans = plan_spans(file, plan_of(so), spans, 32);
  dlclose(so);
  ck_assert_int_ge(n_spans, 12);
  enum { PER_SPAN = 16 };
  int flips = 0, refused = 0;
  for (int s = 0; s < n_spans; s++) {
    int refused_here = 0;
    for (int k = 0; k < PER_SPAN; k++) {
      uint64_t pos = spans[s].off + (uint64_t)(rnd() * (double)spans[s].len);
      unsigned char old = file[pos];
      file[pos] ^= k % 4 == 3 ? 0xff : (unsigned char)(1u << (k * 3 % 8));
      char name[64];
      snprintf(name, sizeof name, "flip%d.so", flips++);
      FILE *f = fopen(at(name), "wb");
      ck_assert_uint_eq(fwrite(file, 1, size, f), size);
      fclose(f);
      file[pos] = old;
      DlrtStatus st = dlrt_open_file(at(name), "emu", &m);
      if (st != DLRT_OK) {
        ck_assert_msg(st == DLRT_E_PLAN && strstr(dlrt_error(m), ": plan: "), "%s byte %" PRIu64 ": %s: %s",
                      spans[s].what, pos - spans[s].off, dlrt_status_name(st), dlrt_error(m));
        refused++, refused_here++;
      } else {
        ck_assert_msg(run_with(m, &in) == DLRT_OK, "%s byte %" PRIu64 ": %s", spans[s].what, pos - spans[s].off,
                      dlrt_error(m));
        size_t n;
        unsigned char *got = outputs_of(m, &n);
        ck_assert_msg(n == n_out && !memcmp(got, want, n), "%s byte %" PRIu64 " opened and computed otherwise",
                      spans[s].what, pos - spans[s].off);
        free(got);
      }
      dlrt_close(m);
      unlink(at(name));
    }
    /* Every part of the plan is checked: some flips in each are caught. */
    ck_assert_msg(refused_here > 0, "no flip in %s was refused", spans[s].what);
  }
  ck_assert_int_ge(flips, 150);
  ck_assert_int_ge(refused, flips / 2);
  free(file);
  free(want);
  free_map(&in);
  ir_tensor_map_free(&b.params);
}
END_TEST

/* Compiles tmp/name.c into tmp/name.so against the source's plan.h. */
static void compile_so(const char *name) {
  const char *top = getenv("top_srcdir");
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "${CC:-cc} -shared -fPIC -o '%s/%s.so' '%s/%s.c' -I'%s/runtime'", tmp, name, tmp, name,
           top ? top : ".");
  ck_assert_int_eq(system(cmd), 0);
}

/* The generated C with the version bumped, as a model.so from another
 * dlcc would be; and a library whose plan has no magic. */
START_TEST(library_of_another_version) {
  Build b = {.path = example("mlp.dl"), .o = {.keep_temps = true}};
  build_ok(&b, "mlp.so");
  const char *note = strstr(diag_text(&ctx), "are in ");
  ck_assert_ptr_nonnull(note);
  char dir[1024];
  snprintf(dir, sizeof dir, "%.*s", (int)strcspn(note + 7, "\n"), note + 7);
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "sed -e 's/^  .version = %uu,$/  .version = %uu,/' '%s/model.c' > '%s/v2.c' && grep -q '.version = %uu,' "
           "'%s/v2.c'",
           RT_PLAN_VERSION, RT_PLAN_VERSION + 1, dir, tmp, RT_PLAN_VERSION + 1, tmp);
  ck_assert_int_eq(system(cmd), 0);
  compile_so("v2"); /* its .incbin lines name the kept blobs */
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
  DlrtModel *m = NULL;
  ck_assert_int_eq(dlrt_open_file(at("v2.so"), "emu", &m), DLRT_E_PLAN);
  char want[1400];
  snprintf(want, sizeof want, "%s: plan: version %u, this runtime reads version %u: rebuild the model", at("v2.so"),
           RT_PLAN_VERSION + 1, RT_PLAN_VERSION);
  ck_assert_msg(!strncmp(dlrt_error(m), want, strlen(want)), "%s", dlrt_error(m));
  dlrt_close(m);

  FILE *f = fopen(at("nomagic.c"), "w");
  fputs("#include \"plan.h\"\nstatic const RtPlan p = {.magic = 0x12345678u, .version = RT_PLAN_VERSION};\n"
        "const RtPlan *dlrt_model_plan(void);\nconst RtPlan *dlrt_model_plan(void) { return &p; }\n",
        f);
  fclose(f);
  compile_so("nomagic");
  ck_assert_int_eq(dlrt_open_file(at("nomagic.so"), "emu", &m), DLRT_E_PLAN);
  ck_assert_msg(strstr(dlrt_error(m), "bad magic 0x12345678") && strstr(dlrt_error(m), "not a dlcc model"), "%s",
                dlrt_error(m));
  dlrt_close(m);
  ir_tensor_map_free(&b.params);
}
END_TEST

/* Build errors: a bad --arch, a failing host compiler.  Nothing is left. */
START_TEST(build_errors) {
  static const char *bad[] = {"sm90"};
  Build b = {.path = example("mlp.dl"), .o = {.n_archs = 1, .archs = bad}};
  b.o.output = at("bad.so");
  ck_assert_int_eq(ctx_guard(&ctx, build_job, &b), 0);
  ck_assert(!b.ok);
  ck_assert_msg(strstr(diag_text(&ctx), "--arch: 'sm90' is not an architecture like sm_90"), "%s", diag_text(&ctx));
  ck_assert_int_ne(access(at("bad.so"), F_OK), 0);
  ir_tensor_map_free(&b.params);

  ctx_free(&ctx);
  ctx_init(&ctx);
  setenv("CC", "false", 1);
  Build c = {.path = example("mlp.dl"), .o = {.n_archs = 0, .archs = bad}};
  c.o.output = at("cc.so");
  ck_assert_int_eq(ctx_guard(&ctx, build_job, &c), 0);
  unsetenv("CC");
  ck_assert(!c.ok);
  ck_assert_msg(strstr(diag_text(&ctx), "the host C compiler failed building"), "%s", diag_text(&ctx));
  ck_assert_int_ne(access(at("cc.so"), F_OK), 0);
  ck_assert_int_ne(access(at("cc.h"), F_OK), 0);
  ir_tensor_map_free(&c.params);
}
END_TEST

#ifdef HAVE_CUDA
/* --arch=sm_90a: its cubin, and the portable compute_90 PTX beside it;
 * the cuda backend on a 9.0 GPU (tests/fake_cuda.c) loads that cubin
 * with no NVRTC work. */
START_TEST(arch_specific_cubin_portable_ptx) {
  static const char *sm90a[] = {"sm_90a"};
  const char *b_dir = getenv("top_builddir");
  char fake[4096];
  snprintf(fake, sizeof fake, "%s/tests/.libs/libfakecuda.so", b_dir ? b_dir : ".");
  Build b = {.text = "model ew(x: f32[4, 8]) -> f32[4, 8] {\n  return tanh(relu(x) * 0.75)\n}\n",
             .o = {.n_archs = 1, .archs = sm90a}};
  build_ok(&b, "ew90a.so");
  void *so = dlopen(at("ew90a.so"), RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(so != NULL, "%s", dlerror());
  const RtPlan *p = plan_of(so);
  ck_assert_uint_eq(p->n_binaries, 2);
  ck_assert_str_eq(p->binaries[0].arch, "sm_90a");
  ck_assert_str_eq(p->binaries[1].arch, "compute_90");
  dlclose(so);
  setenv("DLCC_LIBCUDA", fake, 1);
  rt_nvrtc_reset();
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open_file(at("ew90a.so"), "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  RtNvrtcStats st;
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.compiles, 0);
  dlrt_close(m);
  ir_tensor_map_free(&b.params);
}
END_TEST

/* The cuda backend (over tests/fake_cuda.c, a GPU of compute capability
 * 9.0) loads the embedded sm_90 cubin: no NVRTC work, no cache lookup. */
START_TEST(cuda_uses_embedded_cubin) {
  const char *b_dir = getenv("top_builddir");
  char fake[4096];
  snprintf(fake, sizeof fake, "%s/tests/.libs/libfakecuda.so", b_dir ? b_dir : ".");
  ck_assert_msg(access(fake, R_OK) == 0, "%s is missing", fake);
  /* No GEMM: cuBLAS needs a real driver. */
  Build b = {.text = "model ew(x: f32[4, 8]) -> f32[4, 8] {\n  return tanh(relu(x) * 0.5)\n}\n"};
  build_ok(&b, "ew.so");
  setenv("DLCC_LIBCUDA", fake, 1);
  rt_nvrtc_reset();
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open_file(at("ew.so"), "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_str_eq(dlrt_backend(m), "cuda");
  RtNvrtcStats st;
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.compiles, 0);
  ck_assert_int_eq(st.cache_hits, 0);
  ck_assert_int_eq(st.memo_hits, 0);
  dlrt_close(m);
  ir_tensor_map_free(&b.params);

  /* Without binaries (--arch=none): NVRTC on the first load only; the
   * second load (a "new process": memo forgotten) is a disk cache hit. */
  Build nb = {.text = "model ew(x: f32[4, 8]) -> f32[4, 8] {\n  return tanh(relu(x) * 0.25)\n}\n",
              .o = {.n_archs = 0, .archs = sm90 + 1}};
  build_ok(&nb, "none.so");
  for (int load = 0; load < 2; load++) {
    rt_nvrtc_reset();
    ck_assert_msg(dlrt_open_file(at("none.so"), "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
    rt_nvrtc_stats(&st);
    ck_assert_int_eq(st.compiles, load == 0 ? 1 : 0);
    ck_assert_int_eq(st.cache_hits, load == 0 ? 0 : 1);
    dlrt_close(m);
  }
  unsetenv("DLCC_LIBCUDA");
  ir_tensor_map_free(&nb.params);
}
END_TEST

/* Building twice: the second build's NVRTC work comes from the disk
 * cache; a corrupted cubin entry is refused, recompiled, and the library
 * gets the same bytes. */
START_TEST(nvrtc_cache_across_builds) {
  Build b = {.path = example("mlp.dl")};
  build_ok(&b, "one.so");
  RtNvrtcStats st;
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.compiles, 2); /* cubin and PTX */
  ck_assert_int_eq(st.cache_writes, 2);
  ir_tensor_map_free(&b.params);

  rt_nvrtc_reset();
  Build b2 = {.path = example("mlp.dl")};
  build_ok(&b2, "two.so");
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.compiles, 0);
  ck_assert_int_eq(st.cache_hits, 2);
  ir_tensor_map_free(&b2.params);

  glob_t gl;
  char pat[256];
  snprintf(pat, sizeof pat, "%s/cache/*.cubin", tmp);
  ck_assert_int_eq(glob(pat, 0, NULL, &gl), 0);
  ck_assert_uint_eq(gl.gl_pathc, 1);
  FILE *f = fopen(gl.gl_pathv[0], "r+b");
  fseek(f, 300, SEEK_SET);
  int c = fgetc(f);
  fseek(f, 300, SEEK_SET);
  fputc(c ^ 0x20, f);
  fclose(f);
  globfree(&gl);
  rt_nvrtc_reset();
  Build b3 = {.path = example("mlp.dl")};
  build_ok(&b3, "three.so");
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.cache_corrupt, 1);
  ck_assert_int_eq(st.compiles, 1);
  ck_assert_int_eq(st.cache_hits, 1); /* the PTX */
  ir_tensor_map_free(&b3.params);

  void *one = dlopen(at("one.so"), RTLD_NOW | RTLD_LOCAL), *three = dlopen(at("three.so"), RTLD_NOW | RTLD_LOCAL);
  ck_assert_ptr_nonnull(one);
  ck_assert_ptr_nonnull(three);
  const RtPlan *p1 = plan_of(one), *p3 = plan_of(three);
  ck_assert_uint_eq(p1->binaries[0].size, p3->binaries[0].size);
  ck_assert_int_eq(memcmp(p1->binaries[0].data, p3->binaries[0].data, p1->binaries[0].size), 0);
  dlclose(one);
  dlclose(three);
}
END_TEST
#endif

static Suite *aot_suite(void) {
  Suite *s = suite_create("aot");
  TCase *tc = tcase_create("library");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, plan_round_trips);
  tcase_add_test(tc, header_describes_model);
  tcase_add_test(tc, runs_on_emu_like_reference);
  tcase_add_test(tc, training_step_updates_weights);
  tcase_add_test(tc, emu_cache_hit_and_corruption);
  tcase_add_test(tc, external_weights);
  tcase_add_test(tc, external_weights_given_file);
  tcase_add_test(tc, garbage_and_truncated_library);
  tcase_add_test(tc, flipped_bits_are_refused_or_harmless);
  tcase_add_test(tc, library_of_another_version);
  tcase_add_test(tc, build_errors);
#ifdef HAVE_CUDA
  tcase_add_test(tc, cuda_uses_embedded_cubin);
  tcase_add_test(tc, arch_specific_cubin_portable_ptx);
  tcase_add_test(tc, nvrtc_cache_across_builds);
#endif
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(aot_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

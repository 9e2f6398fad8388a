/* Helpers several Check suites share (tests/testutil.h). */
#include "tests/testutil.h"

#include "check_quiet.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dlcrt.h"
#include "runtime/device.h"

#ifdef HAVE_CUDA
#include <nvrtc.h>
#endif

int test_run_emu_status(const RtPlan *p, const TensorMap *params, const TensorMap *inputs, Tensor **out, char *err,
                        size_t errlen) {
  DlrtModel *m;
  ck_assert_msg(dlrt_open(p, "emu", &m) == DLRT_OK, "dlrt_open: %s", dlrt_error(m));
  unsigned char *blob = calloc(p->weights_bytes + 1, 1);
  for (uint32_t i = 0; i < p->n_weights; i++) {
    const Tensor *t = ir_tensor_map_find(params, p->weights[i].name);
    ck_assert_msg(t != NULL, "no weight '%s'", p->weights[i].name);
    memcpy(blob + p->weights[i].where.offset, t->data, p->weights[i].nbytes);
  }
  ck_assert_msg(dlrt_set_weights(m, blob, p->weights_bytes) == DLRT_OK, "%s", dlrt_error(m));
  for (uint32_t i = 0; i < p->n_inputs; i++) {
    const Tensor *t = ir_tensor_map_find(inputs, p->inputs[i].name);
    ck_assert_msg(t != NULL, "no input '%s'", p->inputs[i].name);
    ck_assert_msg(dlrt_set_input(m, (int)i, t->data, p->inputs[i].nbytes) == DLRT_OK, "%s", dlrt_error(m));
  }
  *out = NULL;
  DlrtStatus s = dlrt_run(m);
  snprintf(err, errlen, "%s", dlrt_error(m));
  if (s == DLRT_OK) {
    *out = calloc(p->n_outputs + 1, sizeof **out);
    for (uint32_t o = 0; o < p->n_outputs; o++) {
      /* An output of run-time length as this run made it. */
      DlrtTensorInfo d;
      ck_assert_msg(dlrt_output_shape(m, (int)o, &d) == DLRT_OK, "%s", dlrt_error(m));
      TensorType t = ir_type_make((DType)d.dtype, d.rank, d.dims);
      ck_assert(ir_tensor_alloc(&(*out)[o], &t));
      ck_assert_msg(dlrt_get_output(m, (int)o, (*out)[o].data, d.nbytes) == DLRT_OK, "%s", dlrt_error(m));
    }
  }
  dlrt_close(m);
  free(blob);
  return (int)s;
}

Tensor *test_run_emu(const RtPlan *p, const TensorMap *params, const TensorMap *inputs) {
  Tensor *out;
  char err[1024];
  ck_assert_msg(test_run_emu_status(p, params, inputs, &out, err, sizeof err) == DLRT_OK, "dlrt_run: %s", err);
  return out;
}

void test_nvrtc(const char *source, const char *arch) {
#ifdef HAVE_CUDA
  nvrtcProgram prog;
  ck_assert_int_eq(nvrtcCreateProgram(&prog, source, "dlcc.cu", 0, NULL, NULL), NVRTC_SUCCESS);
  char a[64];
  snprintf(a, sizeof a, "--gpu-architecture=%s", arch);
  /* The cubin is never run, only proof that the source compiles and its
   * PTX (inline asm included) assembles: ptxas's fastest mode (NVRTC
   * 12.8 on) does that in a third of the time.  The SASS tests
   * (tests/sass_check.sh, tc_sass.sh) compile with dlcc's own options. */
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  const char *opts[] = {a, "-I" DLCC_CUDA_DIR "/include", "--Ofast-compile=max"};
  int n_opts = major > 12 || (major == 12 && minor >= 8) ? 3 : 2;
  nvrtcResult rc = nvrtcCompileProgram(prog, n_opts, opts);
  if (rc != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    char *log = calloc(n + 1, 1);
    nvrtcGetProgramLog(prog, log);
    /* A whole model's source is too long to be of use in a log. */
    if (strlen(source) < 20000) fprintf(stderr, "%s\n", source);
    fprintf(stderr, "--- NVRTC log (%s) ---\n%s\n", arch, log);
    free(log);
  }
  ck_assert_msg(rc == NVRTC_SUCCESS, "NVRTC %s: %s", arch, nvrtcGetErrorString(rc));
  size_t cubin = 0;
  ck_assert_int_eq(nvrtcGetCUBINSize(prog, &cubin), NVRTC_SUCCESS);
  ck_assert_uint_gt(cubin, 0);
  nvrtcDestroyProgram(&prog);
#else
  (void)source, (void)arch;
#endif
}

int test_lower_source(Ctx *c, void *data) {
  TestSource *s = data;
  Program *p = fe_parse(c, ctx_add_file(c, "t.dl", s->text, strlen(s->text)));
  LowerOptions lo = {0};
  if (p) s->g = fe_lower(c, p, &lo);
  return 0;
}

Graph *test_lower_example(Ctx *c, const char *file, int n_defines, const Define *defines) {
  const char *top = getenv("top_srcdir");
  char path[512];
  snprintf(path, sizeof path, "%s/examples/%s", top ? top : ".", file);
  const SrcFile *f = ctx_load_file(c, path);
  Program *p = f ? fe_parse(c, f) : NULL;
  if (!p) return NULL;
  LowerOptions lo = {.n_defines = n_defines, .defines = defines};
  Graph *g = fe_lower(c, p, &lo);
  return g && ir_verify(g) ? g : NULL;
}

/* U(lo, hi) from the seed's stream; hi itself never. */
static double draw(uint64_t *state, double lo, double hi) {
  return lo + (hi - lo) * (double)(test_splitmix64(state) >> 11) / 9007199254740992.0;
}

static void check_output(const RtTensorDesc *od, const Tensor *got, const Tensor *want, double tol) {
  int64_t count = ir_type_numel(&want->type);
  for (int64_t e = 0; e < count; e++) {
    double w = ir_tensor_get(want, e), v = ir_tensor_get(got, e);
    if ((isnan(w) && isnan(v)) || (isinf(w) && w == v)) continue;
    ck_assert_msg(fabs(v - w) <= tol * (fabs(w) + 0.1), "output '%s'[%" PRId64 "]: %.9g, eval says %.9g",
                  od->name, e, v, w);
  }
}

static double error_over(const Tensor *got, const Tensor *want, double floor);

/* by_scale: test_emu_near_eval's comparison, else test_emu_matches_eval's;
 * other: a plan of g too, whose outputs must be p's bit for bit. */
static bool emu_vs_eval(Graph *g, const RtPlan *p, const RtPlan *other, uint64_t seed, double lo, double hi,
                        double tol, bool by_scale) {
  char why[512];
  RtDevice *dev = rt_emu_open(why, sizeof why);
  if (!dev) return false;
  rt_device_close(dev);
  char err[512];
  TensorMap params, inputs = {.n = (int)p->n_inputs};
  ck_assert_msg(ir_init_params(g, seed, IR_INIT_RANDOM, &params, err, sizeof err), "%s", err);
  inputs.names = calloc(p->n_inputs + 1, sizeof(char *));
  inputs.tensors = calloc(p->n_inputs + 1, sizeof(Tensor));
  uint64_t state = seed;
  for (uint32_t i = 0; i < p->n_inputs; i++) {
    const RtTensorDesc *in = &p->inputs[i];
    TensorType t = ir_type_make((DType)in->dtype, (int)in->rank, in->dims);
    int64_t bound = (int64_t)hi;
    for (Node *n = g->first; n; n = n->next)
      if (n->op == OP_INPUT && strcmp(ir_attr_str(n, "name"), in->name) == 0 && ir_index_bound(g, &n->out[0]))
        bound = ir_index_bound(g, &n->out[0]);
    inputs.names[i] = in->name;
    ck_assert(ir_tensor_alloc(&inputs.tensors[i], &t));
    for (int64_t e = 0; e < ir_type_numel(&t); e++)
      ir_tensor_set(&inputs.tensors[i], e,
                    ir_dtype_is_float(t.dtype) ? draw(&state, lo, hi) : floor(draw(&state, 0, (double)bound)));
  }
  Tensor *want = calloc((size_t)g->n_outputs + 1, sizeof(Tensor));
  ck_assert_msg(ir_eval(g, &inputs, &params, want, err, sizeof err), "ir_eval: %s", err);
  Tensor *got = test_run_emu(p, &params, &inputs);
  Tensor *same = other ? test_run_emu(other, &params, &inputs) : NULL;
  for (uint32_t o = 0; same && o < p->n_outputs; o++) {
    size_t bytes = (size_t)ir_type_numel(&got[o].type) * ir_dtype_size(got[o].type.dtype);
    ck_assert_msg(ir_type_numel(&same[o].type) == ir_type_numel(&got[o].type) &&
                      memcmp(same[o].data, got[o].data, bytes) == 0,
                  "output '%s': the two plans differ", p->outputs[o].name);
    ir_tensor_free(&same[o]);
  }
  free(same);
  for (uint32_t o = 0; o < p->n_outputs; o++) {
    if (by_scale) {
      double e = error_over(&got[o], &want[o], 1);
      ck_assert_msg(e <= tol, "output '%s': %.3g of its largest magnitude (at least 1) off, tolerance %.3g",
                    p->outputs[o].name, e, tol);
    } else {
      check_output(&p->outputs[o], &got[o], &want[o], tol);
    }
    ir_tensor_free(&got[o]);
    ir_tensor_free(&want[o]);
  }
  free(got);
  free(want);
  for (uint32_t i = 0; i < p->n_inputs; i++) ir_tensor_free(&inputs.tensors[i]);
  free(inputs.names);
  free(inputs.tensors);
  ir_tensor_map_free(&params);
  return true;
}

bool test_emu_matches_eval(Graph *g, const RtPlan *p, uint64_t seed, double lo, double hi, double tol) {
  return emu_vs_eval(g, p, NULL, seed, lo, hi, tol, false);
}

bool test_emu_near_eval(Graph *g, const RtPlan *p, uint64_t seed, double lo, double hi, double tol) {
  return emu_vs_eval(g, p, NULL, seed, lo, hi, tol, true);
}

bool test_emu_plans_equal(Graph *g, const RtPlan *p, const RtPlan *other, uint64_t seed, double lo, double hi) {
  return emu_vs_eval(g, p, other, seed, lo, hi, 1e-5, false);
}

char *test_print_ir(Graph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_ptr_nonnull(f);
  ir_print(f, g);
  fclose(f);
  return buf;
}

/* The largest |got - want| over want's largest finite magnitude, or
 * floor when that is smaller; an infinity counts 0 where both are the
 * same one and the worst where not, NaN in got the worst. */
static double error_over(const Tensor *got, const Tensor *want, double floor) {
  int64_t count = ir_type_numel(&want->type);
  double scale = floor, worst = 0;
  for (int64_t i = 0; i < count; i++)
    if (!isinf(ir_tensor_get(want, i))) scale = fmax(scale, fabs(ir_tensor_get(want, i)));
  for (int64_t i = 0; i < count; i++) {
    double g = ir_tensor_get(got, i), w = ir_tensor_get(want, i);
    double e = isinf(w) || isinf(g) ? (g == w ? 0 : INFINITY) : fabs(g - w) / scale;
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

double test_rel_error(const Tensor *got, const Tensor *want) { return error_over(got, want, 1e-30); }

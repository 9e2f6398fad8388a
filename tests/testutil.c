/* Helpers several Check suites share (tests/testutil.h). */
#include "tests/testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dlcrt.h"

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
      const RtTensorDesc *d = &p->outputs[o];
      TensorType t = ir_type_make((DType)d->dtype, (int)d->rank, d->dims);
      ck_assert(ir_tensor_alloc(&(*out)[o], &t));
      ck_assert_msg(dlrt_get_output(m, (int)o, (*out)[o].data, d->nbytes) == DLRT_OK, "%s", dlrt_error(m));
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
  const char *opts[] = {a, "-I" DLCC_CUDA_DIR "/include"};
  nvrtcResult rc = nvrtcCompileProgram(prog, 2, opts);
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

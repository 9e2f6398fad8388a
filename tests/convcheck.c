/* The convolution suites' graphs and runs (convcheck.h): takes a Conv or
 * a compiled Job, returns IR text or the error against ir_eval. */
#include "tests/convcheck.h"

#include "check_quiet.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel.h"
#include "tests/testutil.h"

int64_t conv_out_dim(const Conv *p, int d) {
  int64_t span = p->dil[d] * (p->k[d] - 1);
  if (p->transpose)
    return (p->in[d] - 1) * p->stride[d] - p->pad[d] - p->pad[p->nsp + d] + span + p->opad[d] + 1;
  return (p->in[d] + p->pad[d] + p->pad[p->nsp + d] - span - 1) / p->stride[d] + 1;
}

static char *dims(char *buf, const char *dt, int64_t a, int64_t b, int nsp, const int64_t *sp) {
  char *s = buf + sprintf(buf, "%s[%" PRId64 ", %" PRId64, dt, a, b);
  for (int d = 0; d < nsp; d++) s += sprintf(s, ", %" PRId64, sp[d]);
  sprintf(s, "]");
  return buf;
}

static char *ints(char *buf, const int64_t *v, int n) {
  char *s = buf + sprintf(buf, "[");
  for (int i = 0; i < n; i++) s += sprintf(s, "%s%" PRId64, i ? ", " : "", v[i]);
  sprintf(s, "]");
  return buf;
}

char *conv_text(const Conv *p) {
  bool i8 = strcmp(p->dt, "i8") == 0;
  const char *ot = i8 ? "i32" : p->dt;
  char xs[96], ws[96], wf[96], ys[96], st[48], pd[64], dl[48], op[48];
  int64_t od[3];
  for (int d = 0; d < p->nsp; d++) od[d] = conv_out_dim(p, d);
  int64_t w0 = p->transpose ? p->c : p->co, w1 = p->transpose ? p->co / p->groups : p->c / p->groups;
  dims(xs, p->dt, p->n, p->c, p->nsp, p->in);
  dims(ws, p->dt, w0, w1, p->nsp, p->k);
  dims(wf, "f32", w0, w1, p->nsp, p->k);
  dims(ys, ot, p->n, p->co, p->nsp, od);
  char *text = malloc(8192);
  int len = sprintf(text, "graph conv {\n  %%x = input {name=\"x\"} : %s\n", xs);
  if (p->w_cast)
    len += sprintf(text + len, "  %%wf = input {name=\"w\"} : %s\n  %%w = cast %%wf {to=%s} : %s\n", wf, p->dt, ws);
  else
    len += sprintf(text + len, "  %%w = input {name=\"w\"} : %s\n", ws);
  if (p->bias) len += sprintf(text + len, "  %%b = input {name=\"b\"} : %s[%" PRId64 "]\n", ot, p->co);
  if (p->pro) len += sprintf(text + len, "  %%xp = %s %%x : %s\n", p->pro, xs);
  char extra[64] = "";
  if (p->zero_point) snprintf(extra, sizeof extra, ", zero_point=%d", p->zero_point);
  if (p->transpose) snprintf(extra, sizeof extra, ", output_pad=%s", ints(op, p->opad, p->nsp));
  len += sprintf(text + len, "  %%y = conv%s%dd %%%s, %%w%s {stride=%s, pad=%s, dilation=%s, groups=%" PRId64 "%s} : %s\n",
                 p->transpose ? "_transpose" : "", p->nsp, p->pro ? "xp" : "x", p->bias ? ", %b" : "",
                 ints(st, p->stride, p->nsp), ints(pd, p->pad, 2 * p->nsp), ints(dl, p->dil, p->nsp), p->groups,
                 extra, ys);
  const char *last = "y";
  if (p->bn) {
    static const char *const bn_in[] = {"g", "beta", "mu", "var"};
    for (int i = 0; i < 4; i++)
      len += sprintf(text + len, "  %%%s = input {name=\"%s\"} : %s[%" PRId64 "]\n", bn_in[i], bn_in[i], ot, p->co);
    len += sprintf(text + len, "  %%bn = batchnorm %%y, %%g, %%beta, %%mu, %%var : %s\n", ys);
    last = "bn";
  }
  if (p->relu) len += sprintf(text + len, "  %%a = relu %%%s : %s\n", last, ys), last = "a";
  if (p->relu6) len += sprintf(text + len, "  %%a6 = clip %%%s {min=0, max=6} : %s\n", last, ys), last = "a6";
  if (p->residual) {
    len += sprintf(text + len, "  %%r = input {name=\"r\"} : %s\n  %%s = add %%%s, %%r : %s\n", ys, last, ys);
    last = "s";
  }
  sprintf(text + len, "  return %%%s as \"y\"\n}\n", last);
  return text;
}

typedef struct Feeds {
  TensorMap inputs;
  const char *names[12];
  Tensor t[12];
} Feeds;

static void random_inputs(Graph *g, uint64_t seed, Feeds *d) {
  memset(d, 0, sizeof *d);
  uint64_t s = seed;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_INPUT) continue;
    Tensor *t = &d->t[d->inputs.n];
    ck_assert(ir_tensor_alloc(t, &n->out[0].type));
    bool fl = ir_dtype_is_float(t->type.dtype), var = strcmp(ir_attr_str(n, "name"), "var") == 0;
    for (int64_t i = 0, count = ir_type_numel(&t->type); i < count; i++) {
      double u = (double)(test_splitmix64(&s) >> 11) / 9007199254740992.0;
      ir_tensor_set(t, i, var ? 0.5 + u : fl ? 2 * u - 1 : floor(201 * u) - 100);
    }
    d->names[d->inputs.n++] = ir_attr_str(n, "name");
  }
  d->inputs.names = d->names;
  d->inputs.tensors = d->t;
}

const char *conv_step_with(const RtPlan *p, const char *s) {
  for (uint32_t i = 0; i < p->n_steps; i++)
    if (strstr(p->steps[i].label, s)) return p->steps[i].label;
  return NULL;
}

double conv_run_against_eval(Job *j, uint64_t seed) {
  Feeds d;
  random_inputs(j->g, seed, &d);
  Tensor *want = calloc(2, sizeof *want);
  char err[512];
  ck_assert_msg(ir_eval(j->g, &d.inputs, NULL, want, err, sizeof err), "ir_eval: %s", err);
  Tensor *got = test_run_emu(j->cg.plan, NULL, &d.inputs);
  ck_assert(ir_type_eq(&got[0].type, &want[0].type));
  double e = ir_dtype_is_float(want[0].type.dtype)
                 ? test_rel_error(&got[0], &want[0])
                 : memcmp(got[0].data, want[0].data, (size_t)ir_type_numel(&want->type) * ir_dtype_size(want->type.dtype)) != 0;
  free_outputs(want, 1);
  free_outputs(got, 1);
  for (int i = 0; i < d.inputs.n; i++) ir_tensor_free(&d.t[i]);
  return e;
}

bool conv_no_atomic_sums(const char *src) {
  const char *pre = cg_arrival_prelude(), *at = strstr(src, pre);
  for (const char *a = strstr(src, "atomic"); a; a = strstr(a + 1, "atomic"))
    if (!at || a < at || a >= at + strlen(pre)) return false;
  return true;
}

double conv_tolerance(const char *dt) {
  return strcmp(dt, "f16") == 0 ? 4 * 0x1p-11 : strcmp(dt, "bf16") == 0 ? 4 * 0x1p-8 : 0;
}

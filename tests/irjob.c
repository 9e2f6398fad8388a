/* Graphs from IR text for the single-op suites (tests/irjob.h). */
#include "tests/irjob.h"

#include "check_quiet.h"
#include <stdlib.h>
#include <string.h>

#include "passes/pass.h"

/* ---- graphs from IR text ---- */

int run_job(Ctx *c, void *data) {
  Job *j = data;
  const SrcFile *f = ctx_add_file(c, "test.ir", j->text, strlen(j->text));
  j->g = ir_parse(c, f);
  if (!j->g || !ir_verify(j->g)) return 0;
  if (j->level < 0) {
    j->ok = true;
    return 0;
  }
  PassOptions po = {.opt_level = j->level, .verify_each = true};
  if (!pass_run_pipeline(j->g, &po, NULL) || !ir_verify(j->g)) return 0;
  j->ok = cg_compile_opts(j->g, &j->opts, &j->cg);
  return 0;
}

Job compile_at(Ctx *c, const char *text, int level) { return compile_opts(c, text, level, (CgOptions){0}); }

Job compile_opts(Ctx *c, const char *text, int level, CgOptions opts) {
  Job j = {.text = text, .level = level, .opts = opts};
  int rc = ctx_guard(c, run_job, &j);
  ck_assert_msg(rc == 0 && j.ok, "-O%d: failed:\n%s\n%s", level, diag_text(c), text);
  return j;
}

/* ---- inputs: cycled values ---- */

void make_inputs(Graph *g, const Fill *fills, int shift, Data *d) {
  memset(d, 0, sizeof *d);
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_INPUT) continue;
    const char *name = ir_attr_str(n, "name");
    const Fill *f = NULL;
    for (const Fill *p = fills; p->name; p++)
      if (strcmp(p->name, name) == 0) f = p;
    ck_assert_msg(f != NULL, "no fill for input '%s'", name);
    ck_assert_int_lt(d->inputs.n, MAX_TENSORS);
    Tensor *t = &d->t[d->inputs.n];
    ck_assert(ir_tensor_alloc(t, &n->out[0].type));
    for (int64_t i = 0, count = ir_type_numel(&t->type); i < count; i++)
      ir_tensor_set(t, i, f->v[(i + 3 * shift) % f->n]);
    d->names[d->inputs.n++] = name;
  }
  d->inputs.names = d->names;
  d->inputs.tensors = d->t;
}

void free_inputs(Data *d) {
  for (int i = 0; i < d->inputs.n; i++) ir_tensor_free(&d->t[i]);
}

void free_outputs(Tensor *t, int n) {
  for (int i = 0; i < n; i++) ir_tensor_free(&t[i]);
  free(t);
}

Tensor *eval_all(Graph *g, const TensorMap *inputs) {
  Tensor *out = calloc((size_t)g->n_outputs + 1, sizeof *out);
  char err[512];
  ck_assert_msg(ir_eval(g, inputs, NULL, out, err, sizeof err), "ir_eval: %s", err);
  return out;
}

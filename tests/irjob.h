/* Graphs from IR text for the Check suites of single ops (test_bool,
 * test_ops2): parse, optimize at a level, compile; inputs filled by
 * cycling given values; the reference interpreter's outputs. */
#ifndef DLCC_TESTS_IRJOB_H
#define DLCC_TESTS_IRJOB_H

#include "codegen/codegen.h"
#include "ir/eval.h"
#include "ir/ir.h"

typedef struct Job {
  const char *text;
  int level; /* -1: parse only */
  CgOptions opts; /* codegen's (zero: the defaults) */
  Graph *g;
  CgResult cg;
  bool ok;
} Job;

/* text parsed, verified, through the -O`level` pipeline (none at -1) and
 * compiled (with opts), in c; fails the calling test on any error. */
Job compile_at(Ctx *c, const char *text, int level);
Job compile_opts(Ctx *c, const char *text, int level, CgOptions opts);
/* The same for ctx_guard(c, run_job, &job), by a test that expects an
 * error: job.ok says whether it got through. */
int run_job(Ctx *c, void *job);

/* An input's values, cycled over its elements. */
typedef struct Fill {
  const char *name;
  const double *v;
  int n;
} Fill;

#define FILL(name, ...) {name, (const double[]){__VA_ARGS__}, (int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double))}

enum { MAX_TENSORS = 12 };

typedef struct Data {
  TensorMap inputs;
  const char *names[MAX_TENSORS];
  Tensor t[MAX_TENSORS];
} Data;

/* Every input of g from its fill (a list ending in a NULL name), cycled
 * from element shift * 3. */
void make_inputs(Graph *g, const Fill *fills, int shift, Data *d);
void free_inputs(Data *d);
/* Frees n tensors and the array. */
void free_outputs(Tensor *t, int n);
/* g's outputs on ir_eval (malloc'd array). */
Tensor *eval_all(Graph *g, const TensorMap *inputs);

#endif

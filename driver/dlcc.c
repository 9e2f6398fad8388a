/* The dlcc command line: reads a model (.dl source or .ir text), builds
 * and checks its graph, and writes what was asked for.  The whole
 * pipeline is in compile(); everything else is option handling. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "driver/driver.h"
#include "frontend/ast.h"
#include "ir/ir.h"

typedef enum { EMIT_NONE, EMIT_AST, EMIT_IR, EMIT_DOT, EMIT_CUDA, EMIT_PLAN } Emit;

typedef struct Options {
  const char *input;
  const char *output; /* -o; NULL: stdout */
  Emit emit;
  const char *model;
  int n_defines;
  Define defines[64];
} Options;

static const char usage[] =
    "usage: dlcc [options] FILE\n"
    "       dlcc run FILE [options]     compile and run once (dlcc run --help)\n"
    "\n"
    "Compiles a network written in the dlcc language (FILE.dl) or in dlcc's IR\n"
    "text (FILE.ir).  Without --emit or -o it checks the model and prints a\n"
    "one-line summary.\n"
    "\n"
    "options:\n"
    "  --emit=ir          print the graph IR (docs/ir.md); it reads back with dlcc FILE.ir\n"
    "  --emit=dot         print the graph in Graphviz DOT (dlcc m.dl --emit=dot | dot -Tsvg)\n"
    "  --emit=cuda        print the generated CUDA C of every kernel\n"
    "  --emit=plan        print the launch plan: buffers, kernels, cuBLAS calls, offsets\n"
    "  --emit=ast         print the syntax tree (for debugging the frontend)\n"
    "  -o FILE            write the output to FILE instead of standard output\n"
    "  -D NAME=VALUE      set an integer constant: overrides 'let NAME' or binds a\n"
    "                     dimension the model leaves free\n"
    "  --model=NAME       which model of the file to compile (default: the last)\n"
    "  --help             show this text\n"
    "  --version          show the version\n";

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

bool driver_parse_define(const char *text, Define *d) {
  const char *eq = strchr(text, '=');
  if (!eq || eq == text) return false;
  char *end;
  errno = 0;
  long long v = strtoll(eq + 1, &end, 10);
  if (*end || end == eq + 1 || errno == ERANGE) return false;
  d->name = strndup(text, (size_t)(eq - text));
  d->value = v;
  return d->name != NULL;
}

/* Returns 0 to go on, 1 on a usage error, 2 for --help/--version. */
static int parse_args(int argc, char **argv, Options *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage, stdout);
      return 2;
    } else if (strcmp(a, "--version") == 0) {
      printf("dlcc %s\n", PACKAGE_VERSION);
      return 2;
    } else if (strncmp(a, "--emit=", 7) == 0) {
      const char *what = a + 7;
      if (strcmp(what, "ir") == 0) o->emit = EMIT_IR;
      else if (strcmp(what, "dot") == 0) o->emit = EMIT_DOT;
      else if (strcmp(what, "ast") == 0) o->emit = EMIT_AST;
      else if (strcmp(what, "cuda") == 0) o->emit = EMIT_CUDA;
      else if (strcmp(what, "plan") == 0) o->emit = EMIT_PLAN;
      else {
        fprintf(stderr, "dlcc: error: unknown --emit kind '%s' (expected ir, dot, cuda, plan or ast)\n", what);
        return 1;
      }
    } else if (strcmp(a, "-o") == 0) {
      if (++i == argc) {
        fputs("dlcc: error: -o needs a file name\n", stderr);
        return 1;
      }
      o->output = argv[i];
    } else if (strncmp(a, "-D", 2) == 0) {
      const char *def = a[2] ? a + 2 : (++i < argc ? argv[i] : NULL);
      if (!def || o->n_defines == (int)ARRAY_LEN(o->defines) ||
          !driver_parse_define(def, &o->defines[o->n_defines])) {
        fprintf(stderr, "dlcc: error: -D expects NAME=INTEGER, got '%s'\n", def ? def : "");
        return 1;
      }
      o->n_defines++;
    } else if (strncmp(a, "--model=", 8) == 0) {
      o->model = a + 8;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "dlcc: error: unknown option '%s' (see dlcc --help)\n", a);
      return 1;
    } else if (o->input) {
      fprintf(stderr, "dlcc: error: more than one input file ('%s' and '%s')\n", o->input, a);
      return 1;
    } else {
      o->input = a;
    }
  }
  if (!o->input) {
    fputs("dlcc: error: no input file (see dlcc --help)\n", stderr);
    return 1;
  }
  return 0;
}

static void print_summary(FILE *f, const char *path, Graph *g) {
  int ops = 0, params = 0, inputs = 0;
  int64_t weights = 0;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op == OP_PARAM) {
      params++;
      weights += ir_type_numel(&n->out[0].type);
    } else if (n->op == OP_INPUT) {
      inputs++;
    } else if (n->op != OP_CONST) {
      ops++;
    }
  }
  fprintf(f, "%s: model %s: %d ops, %d params (%" PRId64 " weights), %d input%s, %d output%s\n", path,
          g->name, ops, params, weights, inputs, inputs == 1 ? "" : "s", g->n_outputs,
          g->n_outputs == 1 ? "" : "s");
}

typedef struct Job {
  const Options *opt;
  FILE *out;
} Job;

static int compile(Ctx *c, void *data) {
  Job *job = data;
  const Options *o = job->opt;
  const SrcFile *file = ctx_load_file(c, o->input);
  if (!file) return 1;

  Graph *g;
  if (has_suffix(o->input, ".ir")) {
    g = ir_parse(c, file);
  } else {
    Program *p = fe_parse(c, file);
    if (!p) return 1;
    if (o->emit == EMIT_AST) {
      fe_dump_ast(job->out, p);
      return 0;
    }
    LowerOptions lo = {.model = o->model, .n_defines = o->n_defines, .defines = o->defines};
    g = fe_lower(c, p, &lo);
  }
  if (!g || !ir_verify(g)) return 1;

  switch (o->emit) {
    case EMIT_IR: ir_print(job->out, g); break;
    case EMIT_DOT: ir_print_dot(job->out, g); break;
    case EMIT_CUDA:
    case EMIT_PLAN: {
      CgResult cg;
      if (!cg_compile(g, &cg)) return 1;
      if (o->emit == EMIT_CUDA)
        fputs(cg.source, job->out);
      else
        cg_print_plan(job->out, cg.plan);
      break;
    }
    case EMIT_AST:
      diag_error(c, (SrcLoc){0}, "--emit=ast needs a .dl file");
      return 1;
    case EMIT_NONE: print_summary(stdout, o->input, g); break;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "run") == 0) return driver_run(argc - 2, argv + 2);
  Options opt = {0};
  int rc = parse_args(argc, argv, &opt);
  if (rc) return rc == 2 ? 0 : 1;
  if (opt.output && opt.emit == EMIT_NONE) {
    fputs("dlcc: error: -o needs an --emit kind for now: "
          "code generation to model.so is not built yet\n",
          stderr);
    return 1;
  }

  FILE *out = stdout;
  if (opt.output && !(out = fopen(opt.output, "w"))) {
    fprintf(stderr, "dlcc: error: cannot write '%s': %s\n", opt.output, strerror(errno));
    return 1;
  }
  Ctx c;
  ctx_init(&c);
  Job job = {&opt, out};
  rc = ctx_guard(&c, compile, &job);
  fputs(diag_text(&c), stderr);
  if (c.diag.errors && rc == 0) rc = 1;
  ctx_free(&c);
  for (int i = 0; i < opt.n_defines; i++) free((char *)opt.defines[i].name);
  if (out != stdout && fclose(out) != 0 && rc == 0) {
    fprintf(stderr, "dlcc: error: cannot write '%s': %s\n", opt.output, strerror(errno));
    rc = 1;
  }
  /* A failed run leaves no half-written output behind. */
  if (rc && opt.output) remove(opt.output);
  return rc ? 1 : 0;
}

/* Random parameter initialization: takes a graph and a seed, returns a
 * TensorMap with a deterministic value for every param.  Each param has
 * its own splitmix64 stream seeded from the seed and its name, so adding,
 * removing or reordering params leaves the others' values alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

/* [0, 1) with 53 random bits. */
static double uniform01(uint64_t *s) { return (double)(splitmix64(s) >> 11) * 0x1p-53; }

static double normal01(uint64_t *s) {
  double u1 = 1.0 - uniform01(s), u2 = uniform01(s); /* u1 in (0, 1] */
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

typedef enum { INIT_DEFAULT, INIT_UNIFORM, INIT_NORMAL, INIT_ONES, INIT_ZEROS, INIT_FILL } InitKind;

/* "name(number)" with optional spaces; false when text is anything else. */
static bool parse_call(const char *text, const char *name, double *arg) {
  size_t len = strlen(name);
  if (strncmp(text, name, len) != 0) return false;
  const char *p = text + len;
  while (*p == ' ') p++;
  if (*p++ != '(') return false;
  char *end;
  *arg = strtod(p, &end);
  if (end == p) return false;
  while (*end == ' ') end++;
  if (*end++ != ')') return false;
  while (*end == ' ') end++;
  return *end == 0 && isfinite(*arg);
}

static bool parse_init(const char *text, InitKind *kind, double *arg) {
  *arg = 0;
  if (!text) return *kind = INIT_DEFAULT, true;
  if (strcmp(text, "ones") == 0) return *kind = INIT_ONES, true;
  if (strcmp(text, "zeros") == 0) return *kind = INIT_ZEROS, true;
  if (parse_call(text, "uniform", arg)) return *kind = INIT_UNIFORM, *arg >= 0;
  if (parse_call(text, "normal", arg)) return *kind = INIT_NORMAL, *arg >= 0;
  if (parse_call(text, "fill", arg)) return *kind = INIT_FILL, true;
  return false;
}

static void fill_param(Tensor *t, InitKind kind, double arg, IrInitMode mode, uint64_t state) {
  const TensorType *ty = &t->type;
  int64_t n = ir_type_numel(ty);
  bool ints = !ir_dtype_is_float(ty->dtype);
  double bound = 1;
  if (kind == INIT_DEFAULT) {
    int64_t fan_in = 1;
    for (int i = 1; i < ty->rank; i++) fan_in *= ty->dims[i];
    bound = 1.0 / sqrt((double)(fan_in > 0 ? fan_in : 1));
  }
  for (int64_t i = 0; i < n; i++) {
    double v;
    if (kind == INIT_FILL)
      v = arg;
    else if (kind == INIT_ONES && (ints || mode == IR_INIT_EXACT))
      v = 1;
    else if (kind == INIT_ZEROS && (ints || mode == IR_INIT_EXACT))
      v = 0;
    else if (ints)
      v = (double)(splitmix64(&state) % 9) - 4;
    else if (kind == INIT_ONES)
      v = 0.75 + 0.5 * uniform01(&state);
    else if (kind == INIT_ZEROS)
      v = -0.1 + 0.2 * uniform01(&state);
    else if (kind == INIT_NORMAL)
      v = arg * normal01(&state);
    else if (kind == INIT_UNIFORM)
      v = arg * (2 * uniform01(&state) - 1);
    else
      v = bound * (2 * uniform01(&state) - 1);
    ir_tensor_set(t, i, v);
  }
}

double ir_state_start(const Node *param) {
  const Attr *init = ir_attr(param, "init");
  double v;
  if (init && init->kind == AK_STR && parse_call(init->s, "fill", &v)) return v;
  return 0;
}

bool ir_init_params(Graph *g, uint64_t seed, IrInitMode mode, TensorMap *out, char *err,
                    size_t errlen) {
  int cap = 0;
  for (Node *n = g->first; n; n = n->next) cap += n->op == OP_PARAM;
  out->n = 0;
  out->names = calloc((size_t)cap + 1, sizeof(char *));
  out->tensors = calloc((size_t)cap + 1, sizeof(Tensor));
  /* Params of one name are one weight (shared): each node's first of its
   * name, through a sorted index, so that many params take n log n. */
  const Node **nodes = calloc((size_t)cap + 1, sizeof *nodes);
  const char **names = calloc((size_t)cap + 1, sizeof *names);
  TensorMap by_node = {.n = cap, .names = names};
  TensorMapIndex ix = {0};
  bool ok = out->names && out->tensors && nodes && names;
  int k = 0;
  for (Node *n = g->first; ok && n; n = n->next) {
    if (n->op != OP_PARAM) continue;
    const Attr *name_attr = ir_attr(n, "name");
    if (!name_attr || name_attr->kind != AK_STR) {
      snprintf(err, errlen, "a param has no name");
      free(nodes), free(names);
      ir_tensor_map_free(out);
      return false;
    }
    nodes[k] = n;
    names[k++] = name_attr->s;
  }
  if (!ok || !ir_tensor_map_index(&ix, &by_node)) {
    snprintf(err, errlen, "out of memory");
    free(nodes), free(names);
    ir_tensor_map_free(out);
    return false;
  }
  for (k = 0; k < cap; k++) {
    const Node *n = nodes[k];
    const Attr *init_attr = ir_attr(n, "init");
    const char *name = names[k];
    const char *init = init_attr && init_attr->kind == AK_STR ? init_attr->s : NULL;
    const TensorType *ty = &n->out[0].type;
    char a[IR_TYPE_STR_MAX], b[IR_TYPE_STR_MAX];
    int first = ir_tensor_map_index_pos(&ix, name);
    if (first != k) {
      const TensorType *prev = &nodes[first]->out[0].type;
      if (ir_type_eq(prev, ty)) continue; /* shared weights */
      snprintf(err, errlen, "param '%s' is declared both %s and %s", name, ir_type_str(prev, a, sizeof a),
               ir_type_str(ty, b, sizeof b));
      ok = false;
      break;
    }
    InitKind kind;
    double arg;
    if (!parse_init(init, &kind, &arg)) {
      snprintf(err, errlen,
               "param '%s': unknown init \"%s\" (expected uniform(b), normal(s), ones, zeros or "
               "fill(v))",
               name, init);
      ok = false;
      break;
    }
    Tensor *t = &out->tensors[out->n];
    char *copy = strdup(name);
    if (!copy || !ir_tensor_alloc(t, ty)) {
      free(copy);
      snprintf(err, errlen, "out of memory for param '%s' (%s)", name, ir_type_str(ty, a, sizeof a));
      ok = false;
      break;
    }
    out->names[out->n++] = copy;
    uint64_t state = seed ^ fnv1a(name);
    splitmix64(&state); /* decorrelate nearby seeds before the first draw */
    /* Training state (dlcc.step, dlcc.optim.*: docs/training.md) starts
     * at 0 in every mode, or at its fill(v) (dlcc.amp.scale), as from a
     * weights file that lacks it. */
    if (strncmp(name, "dlcc.", 5) != 0 || kind == INIT_FILL) fill_param(t, kind, arg, mode, state);
  }
  ir_tensor_map_index_free(&ix);
  free(nodes), free(names);
  if (!ok) ir_tensor_map_free(out);
  return ok;
}

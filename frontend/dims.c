/* Binding a model's free input dims (frontend/dims.h): takes -D values
 * and the shapes of the given inputs, returns one value per free dim, or
 * a message that names the -D that would fix it. */
#include "frontend/dims.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef struct BoundSym {
  const char *sym, *input; /* the input whose shape bound it */
  int axis;
  int64_t value;
} BoundSym;

void fe_dims_init(DimBinder *b, Arena *a, int n_defines, const Define *defines, bool *define_used, int n_shapes,
                  const InputShape *shapes) {
  *b = (DimBinder){.n_defines = n_defines, .defines = defines, .define_used = define_used,
                   .n_shapes = n_shapes, .shapes = shapes, .arena = a};
  for (int i = 0; i < n_defines; i++) define_used[i] = false;
}

const InputShape *fe_dims_shape(const DimBinder *b, const char *input) {
  for (int i = 0; i < b->n_shapes; i++)
    if (strcmp(b->shapes[i].name, input) == 0) return &b->shapes[i];
  return NULL;
}

/* The -D named name, or -1. */
static int find_define(const DimBinder *b, const char *name) {
  int k = -1;
  for (int i = 0; i < b->n_defines; i++)
    if (strcmp(b->defines[i].name, name) == 0) k = i; /* the last one wins, as for let */
  return k;
}

/* "-D x:0=VALUE" or "-D N=VALUE": the -D that binds this dim. */
static void fix_text(const char *input, int axis, const char *sym, char *buf, size_t len) {
  if (sym)
    snprintf(buf, len, "-D %s=VALUE", sym);
  else
    snprintf(buf, len, "-D %s:%d=VALUE", input, axis);
}

bool fe_dims_bind(DimBinder *b, const char *input, int rank, int axis, const char *sym, int64_t *out, char *err,
                  size_t errlen) {
  char fix[256], by_axis[256];
  fix_text(input, axis, sym, fix, sizeof fix);
  snprintf(by_axis, sizeof by_axis, "%s:%d", input, axis);
  const InputShape *given = fe_dims_shape(b, input);
  if (given && given->rank != rank) {
    snprintf(err, errlen, "input '%s' is given with rank %d, the model declares rank %d", input, given->rank,
             rank);
    return false;
  }
  int k = find_define(b, by_axis);
  const char *how = by_axis;
  if (k < 0 && sym) k = find_define(b, sym), how = sym;
  if (k >= 0) {
    b->define_used[k] = true;
    *out = b->defines[k].value;
    if (given && given->dims[axis] != *out) {
      snprintf(err, errlen, "dim %d of input '%s' is %" PRId64 " by -D %s=%" PRId64 ", but the input given has %" PRId64,
               axis, input, *out, how, *out, given->dims[axis]);
      return false;
    }
    return true;
  }
  for (int i = 0; sym && i < b->n_bound; i++) {
    const BoundSym *s = &b->bound[i];
    if (strcmp(s->sym, sym) != 0) continue;
    if (given && given->dims[axis] != s->value) {
      snprintf(err, errlen,
               "dim %d of input '%s' is '%s', which input '%s' gives as %" PRId64 " (its dim %d), but '%s' is "
               "given with %" PRId64 ": the inputs disagree (%s sets it for both)",
               axis, input, sym, s->input, s->value, s->axis, input, given->dims[axis], fix);
      return false;
    }
    *out = s->value;
    return true;
  }
  if (!given) {
    if (sym)
      snprintf(err, errlen, "dim %d of input '%s' is the symbolic '%s': bind it with %s or give the input", axis,
               input, sym, fix);
    else
      snprintf(err, errlen, "dim %d of input '%s' is free: bind it with %s or give the input", axis, input, fix);
    return false;
  }
  *out = given->dims[axis];
  if (sym) {
    if (b->n_bound == b->cap_bound) {
      int cap = b->cap_bound ? 2 * b->cap_bound : 16;
      BoundSym *bigger = ARENA_ARRAY(b->arena, BoundSym, cap);
      if (b->n_bound) memcpy(bigger, b->bound, sizeof *bigger * (size_t)b->n_bound);
      b->bound = bigger, b->cap_bound = cap;
    }
    b->bound[b->n_bound++] = (BoundSym){sym, input, axis, *out};
  }
  return true;
}

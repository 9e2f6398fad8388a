/* Free dims of a model's inputs: takes the -D bindings and the shapes of
 * the inputs the caller will give (dlcc run's --input files), returns the
 * value of each dim the model leaves free.  The ONNX importer uses it for
 * an input's symbolic, -1, "?" or unnamed dims; the language's free shape
 * names can use the same binder (one per compilation). */
#ifndef DLCC_FRONTEND_DIMS_H
#define DLCC_FRONTEND_DIMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/ast.h"

/* The shape of an input the caller will give. */
typedef struct InputShape {
  const char *name;
  int rank;
  const int64_t *dims;
} InputShape;

typedef struct DimBinder {
  int n_defines;
  const Define *defines;
  bool *define_used; /* n_defines entries, set as each -D binds a dim */
  int n_shapes;
  const InputShape *shapes;
  /* Symbols bound so far from input shapes: the first input that has one
   * decides, and every later one must agree. */
  int n_bound, cap_bound;
  struct BoundSym *bound;
  Arena *arena;
} DimBinder;

/* A binder over defines and shapes (either may be empty); define_used
 * (n_defines entries) is cleared. */
void fe_dims_init(DimBinder *b, Arena *a, int n_defines, const Define *defines, bool *define_used, int n_shapes,
                  const InputShape *shapes);

/* Dim `axis` of input `input` (declared rank `rank`), named `sym`, or NULL
 * when the model gives no name (ONNX's -1, "?" or an unset dim): a -D of
 * the form input:axis=V first, then -D sym=V, then the input's given
 * shape.  True with *out set; false with a message in err that says
 * which -D fixes it: nothing binds the dim, the given shape has another
 * rank, or it disagrees with a -D or with another input of the same
 * symbol. */
bool fe_dims_bind(DimBinder *b, const char *input, int rank, int axis, const char *sym, int64_t *out, char *err,
                  size_t errlen);

/* The given shape of input, or NULL. */
const InputShape *fe_dims_shape(const DimBinder *b, const char *input);

#endif

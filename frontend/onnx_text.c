/* ONNX's TfIdfVectorizer over integer tokens: takes X [C] or [B, C] of
 * INT32 or INT64, returns the counts (TF), the weights of the n-grams
 * present (IDF) or both multiplied (TFIDF) of the pool's n-grams, each
 * in its output column, as ONNX's reference counts them: an n-gram of n
 * >= 2 at every start and every skip distance d in [1, max_skip_count +
 * 1] (its items d apart), a unigram once at each position.  Written
 * with the IR's ops: per n-gram size and distance, the rows' windows
 * compared with every pool n-gram of that size at once ([B, starts, G]
 * of equal, their items and-ed), summed over the starts; the counts of
 * all sizes and distances go to their columns by one matmul with a
 * known 0/1 table.  The pool of strings is not supported (dlcc has no
 * strings). */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_internal.h"

enum { MAX_POOL = 1 << 16, MAX_OUT = 1 << 20 };

/* An INTS or FLOATS attribute's values (NULL, 0 when absent), at most
 * max of them. */
static bool long_attr(Imp *im, const char *name, Onnx__AttributeProto__AttributeType type, size_t max,
                      size_t *n, const void **v) {
  const Onnx__AttributeProto *a = ox_find_attr(im, name);
  *n = 0, *v = NULL;
  if (!a) return true;
  bool ints = type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  if (a->type != type) return ox_bad(im, "attribute '%s' must be a list of %s", name, ints ? "integers" : "floats");
  *n = ints ? a->n_ints : a->n_floats;
  if (*n > max) return ox_bad(im, "attribute '%s' has %zu values, more than dlcc takes (%zu)", name, *n, max);
  *v = ints ? (const void *)a->ints : (const void *)a->floats;
  return true;
}

/* The pool's n-grams of size n in [lo, hi] with their ids, as the
 * reference numbers them (every n-gram of the pool takes the next id,
 * those of sizes outside [lo, hi] too; a repeated n-gram keeps its last). */
typedef struct Gram {
  int n;
  const int64_t *items;
  int64_t id; /* from 1 */
} Gram;

/* By size, then items, then id: equal n-grams next to each other, the
 * last of them (the one the reference keeps) last. */
static int gram_order(const void *pa, const void *pb) {
  const Gram *a = pa, *b = pb;
  if (a->n != b->n) return a->n < b->n ? -1 : 1;
  for (int i = 0; i < a->n; i++)
    if (a->items[i] != b->items[i]) return a->items[i] < b->items[i] ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

bool ox_op_tfidf(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int64_t lo, hi, skip;
  const char *mode;
  size_t n_pool, n_counts, n_idx, n_w, n_strings;
  const int64_t *pool, *counts, *idx;
  const float *w;
  const void *pv, *cv, *iv, *wv;
  if (!x || !ox_attr_int(im, "min_gram_length", 0, &lo) || !ox_attr_int(im, "max_gram_length", 0, &hi) ||
      !ox_attr_int(im, "max_skip_count", 0, &skip) || !ox_attr_str(im, "mode", "TF", &mode) ||
      !long_attr(im, "pool_int64s", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, MAX_POOL, &n_pool, &pv) ||
      !long_attr(im, "ngram_counts", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, MAX_POOL, &n_counts, &cv) ||
      !long_attr(im, "ngram_indexes", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, MAX_POOL, &n_idx, &iv) ||
      !long_attr(im, "weights", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS, MAX_POOL, &n_w, &wv))
    return false;
  const Onnx__AttributeProto *strs = ox_find_attr(im, "pool_strings");
  n_strings = strs ? strs->n_strings : 0;
  pool = pv, counts = cv, idx = iv, w = wv;
  bool tf = strcmp(mode, "TF") == 0, idf = strcmp(mode, "IDF") == 0, tfidf = strcmp(mode, "TFIDF") == 0;
  if (!tf && !idf && !tfidf) return ox_bad(im, "mode '%s' is not supported (TF, IDF, TFIDF)", mode);
  if (n_strings) return ox_bad(im, "pool_strings is not supported (dlcc has no strings; pool_int64s is)");
  DType xt = x->type.dtype;
  if ((xt != TY_I32 && xt != TY_I64) || x->type.rank < 1 || x->type.rank > 2)
    return ox_bad(im, "X must be INT32 or INT64 [C] or [B, C]");
  if (lo < 1 || hi < lo || hi > 16 || skip < 0 || skip > 64)
    return ox_bad(im, "gram lengths %" PRId64 " to %" PRId64 " and max_skip_count %" PRId64
                  " are not supported (1 <= min <= max <= 16, 0 <= skip <= 64)", lo, hi, skip);
  if (n_idx == 0) return ox_bad(im, "ngram_indexes is empty");
  /* the n-grams and their ids */
  Gram *grams = ARENA_ARRAY(&im->c->arena, Gram, n_pool + 1);
  int n_grams = 0;
  int64_t id = 1;
  for (size_t i = 0; i < n_counts; i++) {
    int64_t start = counts[i], end = i + 1 < n_counts ? counts[i + 1] : (int64_t)n_pool, size = (int64_t)i + 1;
    if (start < 0 || end < start || end > (int64_t)n_pool)
      return ox_bad(im, "ngram_counts does not split the pool of %zu items", n_pool);
    for (int64_t at = start; at + size <= end; at += size, id++)
      if (size >= lo && size <= hi) grams[n_grams++] = (Gram){(int)size, pool + at, id};
  }
  /* a repeated n-gram counts under its last id only */
  qsort(grams, (size_t)n_grams, sizeof *grams, gram_order);
  int kept = 0;
  for (int k = 0; k < n_grams; k++) {
    if (k + 1 < n_grams && grams[k].n == grams[k + 1].n &&
        memcmp(grams[k].items, grams[k + 1].items, sizeof(int64_t) * (size_t)grams[k].n) == 0)
      continue;
    grams[kept++] = grams[k];
  }
  n_grams = kept;
  int64_t out_size = 0;
  for (size_t i = 0; i < n_idx; i++) {
    if (idx[i] < 0 || idx[i] >= MAX_OUT) return ox_bad(im, "ngram_indexes[%zu] = %" PRId64 " is out of range", i, idx[i]);
    if (idx[i] + 1 > out_size) out_size = idx[i] + 1;
  }
  for (int k = 0; k < n_grams; k++)
    if (grams[k].id > (int64_t)n_idx)
      return ox_bad(im, "the pool has more n-grams than ngram_indexes has entries (%zu)", n_idx);
  if (n_w && (int64_t)n_w < out_size)
    return ox_bad(im, "%zu weights for %" PRId64 " output columns", n_w, out_size);
  /* each size's table [its n-grams, out_size] is a constant */
  if ((int64_t)n_grams * out_size > (int64_t)1 << 24)
    return ox_bad(im, "%d n-grams into %" PRId64 " columns is too large a table", n_grams, out_size);
  bool flat = x->type.rank == 1;
  int64_t B = flat ? 1 : x->type.dims[0], C = x->type.dims[flat ? 0 : 1];
  Val *x2 = flat ? ox_reshape(im, x, 2, (int64_t[]){1, C}) : x;
  /* counts [B, out_size], the sum of each (size, distance)'s per gram
   * counts times its 0/1 table */
  Val *total = NULL;
  for (int size = (int)lo; size <= hi; size++) {
    int g = 0;
    for (int k = 0; k < n_grams; k++) g += grams[k].n == size;
    if (!g) continue;
    TensorType pt = ir_type_make(xt, 1, &(int64_t){g}), mt = ir_type_make(TY_F32, 2, (int64_t[]){g, out_size});
    Val *table = ox_known_new(im, &mt);
    Val **item = ARENA_ARRAY(&im->c->arena, Val *, size);
    for (int i = 0; i < size; i++) item[i] = ox_known_new(im, &pt);
    for (int k = 0, j = 0; k < n_grams; k++) {
      if (grams[k].n != size) continue;
      for (int i = 0; i < size; i++) ir_tensor_set(item[i]->k, j, (double)grams[k].items[i]);
      ir_tensor_set(table->k, j * out_size + idx[grams[k].id - 1], 1);
      j++;
    }
    /* a unigram at distance 1 alone; longer n-grams at every distance */
    int64_t max_d = size == 1 ? 1 : skip + 1;
    for (int64_t d = 1; d <= max_d && (size - 1) * d < C; d++) {
      int64_t starts = C - (size - 1) * d;
      Val *match = NULL;
      for (int i = 0; i < size; i++) {
        Val *col = ox_reshape(im, ox_slice_axis(im, x2, 1, i * d, i * d + starts, 1), 3, (int64_t[]){B, starts, 1});
        Val *eq = ox_op2(im, OP_EQUAL, col, item[i]);
        match = match ? ox_op2(im, OP_LOGICAL_AND, match, eq) : eq;
      }
      int64_t over = 1;
      Val *c = ox_reduce(im, OP_REDUCE_SUM, ox_cast(im, match, TY_F32), 1, &over, false);
      Val *placed = ox_op2(im, OP_MATMUL, c, table);
      total = total ? ox_op2(im, OP_ADD, total, placed) : placed;
    }
  }
  if (!total) {
    TensorType zt = ir_type_make(TY_F32, 2, (int64_t[]){B, out_size});
    total = ox_known_new(im, &zt);
  }
  Val *y = total;
  TensorType wt = ir_type_make(TY_F32, 1, &out_size);
  Val *wk = NULL;
  if (n_w && !tf) {
    wk = ox_known_new(im, &wt);
    for (int64_t i = 0; i < out_size; i++) ir_tensor_set(wk->k, i, w[i]);
  }
  if (idf) {
    Val *present = ox_op2(im, OP_GREATER, total, ox_scalar(im, 0, TY_F32));
    y = ox_where(im, present, wk ? wk : ox_scalar(im, 1, TY_F32), ox_scalar(im, 0, TY_F32));
  } else if (tfidf && wk) {
    y = ox_op2(im, OP_MUL, total, wk);
  }
  return (n->out[0] = flat ? ox_reshape(im, y, 1, &out_size) : y);
}

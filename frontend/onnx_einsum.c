/* ONNX Einsum: takes the equation and one or two operands, returns the
 * result written with the IR's ops: a letter repeated in one operand
 * takes its diagonal (a gather of the flattened pair), a letter that no
 * other term has is summed at once (reduce_sum), and two operands meet
 * in one batched matmul [batch, left, k] x [batch, k, right] after
 * transposes and reshapes, the result transposed into the output's
 * order.  "..." stands for the same leading dims in every term. */
#include "config.h"

#include <ctype.h>
#include <inttypes.h>
#include <string.h>

#include "frontend/onnx_internal.h"

enum { MAX_LETTERS = DL_MAX_RANK };

/* One term's letters, one per dim of its operand (ellipsis dims as
 * digits '0'.. of their own, which an equation cannot use). */
typedef struct Term {
  int n;
  char l[MAX_LETTERS];
} Term;

typedef struct Op {
  Val *v;
  Term t;
} Op;

/* The term at *p up to stop (',' or '-' or NUL): letters and one "...".
 * ell: the ellipsis's dims (-1 until known: taken from rank). */
static bool parse_term(Imp *im, const char **p, int rank, int *ell, Term *t) {
  int letters = 0;
  bool dots = false;
  const char *s = *p;
  for (const char *q = s; *q && *q != ',' && *q != '-'; q++) {
    if (isalpha((unsigned char)*q)) letters++;
    else if (*q == '.') dots = true;
  }
  int e = dots ? rank - letters : 0;
  if (rank >= 0 && (e < 0 || (!dots && letters != rank)))
    return ox_bad(im, "the equation's term '%.*s' does not fit an operand of rank %d", (int)strcspn(s, ",-"), s, rank);
  if (dots && rank < 0) e = *ell < 0 ? 0 : *ell;
  if (dots && *ell >= 0 && e != *ell) return ox_bad(im, "'...' stands for %d dims in one term, %d in another", *ell, e);
  if (dots) *ell = e;
  t->n = 0;
  while (*s && *s != ',' && *s != '-') {
    if (*s == '.') {
      if (strncmp(s, "...", 3) != 0) return ox_bad(im, "a '.' in the equation that is not '...'");
      for (int i = 0; i < e; i++) t->l[t->n++] = (char)('0' + i);
      s += 3;
    } else if (isalpha((unsigned char)*s)) { /* a-z and A-Z, as numpy's */
      if (t->n >= MAX_LETTERS) return ox_bad(im, "a term of more than %d dims", MAX_LETTERS);
      t->l[t->n++] = *s++;
    } else if (*s == ' ') {
      s++;
    } else {
      return ox_bad(im, "'%c' in the equation is not supported (letters and '...')", *s);
    }
  }
  *p = s;
  return true;
}

static int find(const Term *t, char c) {
  for (int i = 0; i < t->n; i++)
    if (t->l[i] == c) return i;
  return -1;
}

/* o with letter position `at` moved to the end, then its diagonal with
 * the other position of the same letter: o's dims [.., n, n] flattened
 * to [.., n*n] and gathered at 0, n+1, 2(n+1), .. */
static bool diagonal(Imp *im, Op *o, int a, int b) {
  int r = o->t.n;
  int64_t perm[DL_MAX_RANK], dims[DL_MAX_RANK];
  Term nt = {0};
  for (int i = 0; i < r; i++)
    if (i != a && i != b) perm[nt.n] = i, nt.l[nt.n++] = o->t.l[i];
  perm[r - 2] = a, perm[r - 1] = b;
  int64_t n = o->v->type.dims[a];
  if (o->v->type.dims[b] != n)
    return ox_bad(im, "letter '%c' has dims %" PRId64 " and %" PRId64, o->t.l[a], n, o->v->type.dims[b]);
  Val *x = ox_transpose(im, o->v, perm);
  if (!x) return false;
  for (int i = 0; i < r - 2; i++) dims[i] = x->type.dims[i];
  dims[r - 2] = n * n;
  x = ox_reshape(im, x, r - 1, dims);
  int64_t *idx = ARENA_ARRAY(&im->c->arena, int64_t, n > 0 ? n : 1);
  for (int64_t i = 0; i < n; i++) idx[i] = i * (n + 1);
  if (!(o->v = ox_gather(im, x, ox_ints_val(im, (int)n, idx), r - 2))) return false;
  nt.l[nt.n++] = o->t.l[a];
  o->t = nt;
  return true;
}

/* Sums o over the letters that neither `keep` term has. */
static bool sum_unused(Imp *im, Op *o, const Term *k1, const Term *k2) {
  int64_t axes[DL_MAX_RANK];
  int n = 0;
  Term nt = {0};
  for (int i = 0; i < o->t.n; i++) {
    char c = o->t.l[i];
    if (find(k1, c) < 0 && (!k2 || find(k2, c) < 0))
      axes[n++] = i;
    else
      nt.l[nt.n++] = c;
  }
  if (!n) return true;
  o->v = ox_reduce(im, OP_REDUCE_SUM, o->v, n, axes, false);
  o->t = nt;
  return o->v != NULL;
}

/* x (whose letters are `have`) transposed into the order `want`. */
static Val *to_order(Imp *im, Val *x, const Term *have, const Term *want) {
  int64_t perm[DL_MAX_RANK];
  for (int i = 0; i < want->n; i++) perm[i] = find(have, want->l[i]);
  return ox_transpose(im, x, perm);
}

static int64_t dim_of(const Op *o, char c) { return o->v->type.dims[find(&o->t, c)]; }

/* A and B into one batched matmul: batch letters (in both and the
 * output), left (A and output), k (both, not the output), right; *res
 * the result's letters. */
static Val *contract(Imp *im, Op *a, Op *b, const Term *out, Term *res) {
  Term bt = {0}, lt = {0}, kt = {0}, rt = {0};
  int64_t B = 1, L = 1, K = 1, R = 1;
  for (int i = 0; i < a->t.n; i++) {
    char c = a->t.l[i];
    bool in_b = find(&b->t, c) >= 0, in_out = find(out, c) >= 0;
    if (in_b && dim_of(a, c) != dim_of(b, c)) {
      ox_bad(im, "letter '%c' has dims %" PRId64 " and %" PRId64, c, dim_of(a, c), dim_of(b, c));
      return NULL;
    }
    if (in_b && in_out) bt.l[bt.n++] = c, B *= dim_of(a, c);
    else if (in_b) kt.l[kt.n++] = c, K *= dim_of(a, c);
    else lt.l[lt.n++] = c, L *= dim_of(a, c);
  }
  for (int i = 0; i < b->t.n; i++)
    if (find(&a->t, b->t.l[i]) < 0) rt.l[rt.n++] = b->t.l[i], R *= dim_of(b, b->t.l[i]);
  Term ao = bt, bo = bt;
  memcpy(ao.l + ao.n, lt.l, (size_t)lt.n), ao.n += lt.n;
  memcpy(ao.l + ao.n, kt.l, (size_t)kt.n), ao.n += kt.n;
  memcpy(bo.l + bo.n, kt.l, (size_t)kt.n), bo.n += kt.n;
  memcpy(bo.l + bo.n, rt.l, (size_t)rt.n), bo.n += rt.n;
  int64_t ad[3] = {B, L, K}, bd[3] = {B, K, R};
  Val *x = ox_reshape(im, to_order(im, a->v, &a->t, &ao), 3, ad);
  Val *y = ox_reshape(im, to_order(im, b->v, &b->t, &bo), 3, bd);
  Val *p = ox_op2(im, OP_MATMUL, x, y);
  if (!p) return NULL;
  /* [B, L, R] back to its letters' dims */
  Term pt = bt;
  memcpy(pt.l + pt.n, lt.l, (size_t)lt.n), pt.n += lt.n;
  memcpy(pt.l + pt.n, rt.l, (size_t)rt.n), pt.n += rt.n;
  int64_t dims[DL_MAX_RANK];
  for (int i = 0; i < pt.n; i++) dims[i] = find(&a->t, pt.l[i]) >= 0 ? dim_of(a, pt.l[i]) : dim_of(b, pt.l[i]);
  *res = pt;
  return ox_reshape(im, p, pt.n, dims);
}

bool ox_op_einsum(Imp *im, ONode *n) {
  const char *eq;
  if (!ox_attr_str(im, "equation", NULL, &eq)) return false;
  if (n->n_in < 1 || n->n_in > 2) return ox_bad(im, "Einsum of %d operands is not supported (1 or 2)", n->n_in);
  Op ops[2];
  int ell = -1;
  const char *p = eq;
  for (int i = 0; i < n->n_in; i++) {
    if (!(ops[i].v = ox_in_req(im, n, i))) return false;
    if (!parse_term(im, &p, ops[i].v->type.rank, &ell, &ops[i].t)) return false;
    if (*p == ',') p++;
  }
  while (*p == ' ') p++;
  if (*p == ',') return ox_bad(im, "the equation has more terms than the node has operands");
  Term out = {0};
  if (strncmp(p, "->", 2) == 0) {
    p += 2;
    if (!parse_term(im, &p, -1, &ell, &out)) return false;
    if (*p) return ox_bad(im, "unexpected '%c' after the equation's output", *p);
  } else if (*p) {
    return ox_bad(im, "unexpected '%c' in the equation", *p);
  } else { /* implicit: the ellipsis, then the letters seen once, in
             * numpy's order (character codes: A-Z before a-z) */
    for (int c = '0'; c < '0' + (ell > 0 ? ell : 0); c++) out.l[out.n++] = (char)c;
    for (int c = 'A'; c <= 'z'; c++) {
      if (!isalpha(c)) continue;
      int seen = 0;
      for (int i = 0; i < n->n_in; i++)
        for (int j = 0; j < ops[i].t.n; j++) seen += ops[i].t.l[j] == c;
      if (seen == 1) out.l[out.n++] = (char)c;
    }
  }
  for (int i = 0; i < out.n; i++)
    if (find(&out, out.l[i]) != i) return ox_bad(im, "letter '%c' is twice in the output", out.l[i]);
  for (int i = 0; i < n->n_in; i++) {
    for (int a = 0; a < ops[i].t.n; a++)
      for (int b = a + 1; b < ops[i].t.n; b++)
        if (ops[i].t.l[a] == ops[i].t.l[b]) {
          if (!diagonal(im, &ops[i], a, b)) return false;
          a = -1; /* the letters moved: look again */
          break;
        }
    if (!sum_unused(im, &ops[i], &out, n->n_in == 2 ? &ops[1 - i].t : NULL)) return false;
  }
  for (int i = 0; i < out.n; i++) {
    bool found = false;
    for (int k = 0; k < n->n_in; k++) found |= find(&ops[k].t, out.l[i]) >= 0;
    if (!found) return ox_bad(im, "output letter '%c' is in no operand", out.l[i]);
  }
  Term res = ops[0].t;
  Val *r = ops[0].v;
  if (n->n_in == 2) {
    if (ops[0].v->type.dtype != ops[1].v->type.dtype) return ox_bad(im, "the operands' dtypes differ");
    r = contract(im, &ops[0], &ops[1], &out, &res);
  }
  return r && (n->out[0] = to_order(im, r, &res, &out));
}

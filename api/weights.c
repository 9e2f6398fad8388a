/* Binds a safetensors file to a graph's params: takes the graph and the
 * path, returns a TensorMap (the file's buffers, each read when bound
 * and moved, not copied; a tensor nothing binds is never read) or
 * every mismatch found: one a line into a buffer, or as diagnostics at
 * the location that declared each parameter.  Names are matched through
 * hash indexes, so the time grows linearly with the file's table. */
#include "api/weights.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tensorio.h"

enum { MAX_ERRORS = 20 };

typedef struct Report {
  char *buf;
  size_t len, cap;
  int count;
} Report;

/* Where problems go: c's diagnostics at the parameter's location, or
 * with c NULL the report, one a line. */
typedef struct Sink {
  Ctx *c;
  Report r;
  /* Which params' data to read and bind (NULL: all); the others are
   * checked against the file's header alone. */
  const ApiWeightFilter *only;
} Sink;

static void report(Sink *s, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(Sink *s, SrcLoc loc, const char *fmt, ...) {
  Report *r = &s->r;
  if (r->count++ >= MAX_ERRORS) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (s->c) {
    diag_error(s->c, loc, "%s", msg);
    return;
  }
  if (r->len >= r->cap) return;
  if (r->len) {
    r->buf[r->len++] = '\n';
    r->buf[r->len] = 0;
    if (r->len >= r->cap) return;
  }
  int n = snprintf(r->buf + r->len, r->cap - r->len, "%s", msg);
  if (n > 0) r->len += (size_t)n < r->cap - r->len ? (size_t)n : r->cap - r->len - 1;
}

static bool dtype_of(RtDType rt, DType *out) {
  static const DType map[] = {[RT_F32] = TY_F32, [RT_F16] = TY_F16, [RT_BF16] = TY_BF16, [RT_I8] = TY_I8,
                              [RT_I32] = TY_I32, [RT_I64] = TY_I64, [RT_BOOL] = TY_BOOL, [RT_U8] = TY_U8,
                              [RT_F64] = TY_F64, [RT_I16] = TY_I16, [RT_U16] = TY_U16, [RT_U32] = TY_U32,
                              [RT_U64] = TY_U64};
  if ((unsigned)rt >= RT_DTYPE_COUNT) return false;
  *out = map[rt];
  return true;
}

static void dims_str(int rank, const int64_t *dims, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i ? ", " : "", dims[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
}

/* The graph's params by name: a file's table of any size is matched
 * against them in linear time. */
typedef struct Params {
  const char **names;
  int n;
  RtNames index;
} Params;

static bool params_of(Graph *g, Params *p) {
  int cap = 0;
  for (Node *n = g->first; n; n = n->next) cap += n->op == OP_PARAM;
  *p = (Params){.names = calloc((size_t)cap + 1, sizeof *p->names)};
  if (!p->names || rt_names_init(&p->index, cap) < 0) return false;
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_PARAM) {
      p->names[p->n] = ir_attr_str(n, "name");
      if (rt_names_add(&p->index, p->names, p->n) < 0) p->n++; /* shared weights: once */
    }
  return true;
}

static void params_free(Params *p) {
  free(p->names);
  rt_names_free(&p->index);
}

static bool is_param(const Params *p, const char *name) {
  return rt_names_find(&p->index, p->names, name) >= 0;
}

/* A state_dict saved from a wrapper names every tensor with its prefix:
 * nn.DataParallel's and DistributedDataParallel's "module.", or
 * torch.compile's "_orig_mod." (both, nested).  When no param of the
 * model is in the file by its own name but some are under one such
 * prefix, the file's names lose it, as PyTorch users strip it before
 * load_state_dict; false only when memory ran out. */
static bool strip_wrapper_prefix(RtTensorSet *set, const Params *params) {
  static const char *const prefixes[] = {"module._orig_mod.", "_orig_mod.module.", "module.", "_orig_mod."};
  for (int i = 0; i < params->n; i++)
    if (rt_tensor_set_find(set, params->names[i])) return true; /* names as they are */
  for (size_t k = 0; k < sizeof prefixes / sizeof prefixes[0]; k++) {
    size_t len = strlen(prefixes[k]);
    bool any = false;
    char probe[1024];
    for (int i = 0; i < params->n && !any; i++)
      any = snprintf(probe, sizeof probe, "%s%s", prefixes[k], params->names[i]) < (int)sizeof probe &&
            rt_tensor_set_find(set, probe);
    if (!any) continue;
    /* the names without it, checked to stay distinct before any changes */
    const char **view = malloc(((size_t)set->n + 1) * sizeof *view);
    RtNames index;
    if (!view || rt_names_init(&index, set->n) < 0) {
      free(view);
      return false;
    }
    bool distinct = true;
    for (int i = 0; i < set->n && distinct; i++) {
      view[i] = set->names[i] + (strncmp(set->names[i], prefixes[k], len) == 0 ? len : 0);
      distinct = rt_names_add(&index, view, i) < 0; /* "module.x" beside "x": the names stay the file's */
    }
    if (distinct) {
      for (int i = 0; i < set->n; i++)
        if (view[i] != set->names[i]) memmove(set->names[i], view[i], strlen(view[i]) + 1);
      rt_names_free(&set->index);
      set->index = index; /* it hashed the same strings */
    } else {
      rt_names_free(&index);
    }
    free(view);
    return true;
  }
  return true;
}

/* The file's tensor named like a param with a prefix more or less
 * (nn.DataParallel saves "module.fc.weight"; a backbone saved alone lacks
 * the model's "backbone." prefix), or NULL. */
static const char *near_miss(const RtTensorSet *set, const char *name) {
  size_t nl = strlen(name);
  for (int i = 0; i < set->n; i++) {
    size_t sl = strlen(set->names[i]);
    if (sl > nl + 1 && strcmp(set->names[i] + sl - nl, name) == 0 && set->names[i][sl - nl - 1] == '.')
      return set->names[i];
    if (nl > sl + 1 && strcmp(name + nl - sl, set->names[i]) == 0 && name[nl - sl - 1] == '.')
      return set->names[i];
  }
  return NULL;
}

/* PyTorch batch-norm buffers the inference graph has no use for: beside
 * a running_mean that is a param, or a weight of the model (own) that
 * the graph compiled no longer reads. */
static bool is_ignorable(const Params *p, const TensorMapIndex *own, const char *name) {
  static const char suffix[] = "num_batches_tracked";
  size_t len = strlen(name), sl = sizeof suffix - 1;
  if (len < sl || strcmp(name + len - sl, suffix) != 0) return false;
  if (len > sl && name[len - sl - 1] != '.') return false;
  char *mean = malloc(len + 16);
  if (!mean) return false;
  memcpy(mean, name, len - sl);
  strcpy(mean + len - sl, "running_mean");
  bool ok = is_param(p, mean) || ir_tensor_map_index_find(own, mean);
  free(mean);
  return ok;
}

/* The params of the file's name missing from it, nearest to name: a
 * typo in a key ("fc1.weights") or a renamed layer. */
static const char *missing_like(const Params *p, const bool *found, const char *name) {
  const char **cand = calloc((size_t)p->n + 1, sizeof *cand);
  if (!cand) return NULL;
  int n = 0;
  for (int i = 0; i < p->n; i++)
    if (!found[i]) cand[n++] = p->names[i];
  const char *s = diag_suggest(name, cand, n);
  free(cand);
  return s;
}

/* A copy of t into out as name's, or false when memory ran out. */
static bool add_copy(TensorMap *out, const char *name, const Tensor *t) {
  char *copy = strdup(name);
  Tensor *z = &out->tensors[out->n];
  if (!copy || !ir_tensor_alloc(z, &t->type)) return free(copy), false;
  memcpy(z->data, t->data, ir_tensor_nbytes(&t->type));
  out->names[out->n++] = copy;
  return true;
}

static bool same_type(const RtTensor *t, const TensorType *ty) {
  DType dt;
  if (!dtype_of(t->dtype, &dt) || dt != ty->dtype || t->rank != ty->rank) return false;
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] != ty->dims[i]) return false;
  return true;
}

/* Whether the file's tensor t equals the model's own value of it. */
static bool same_as_own(const RtTensor *t, const Tensor *mine) {
  return same_type(t, &mine->type) && t->nbytes == ir_tensor_nbytes(&mine->type) &&
         memcmp(t->data, mine->data, t->nbytes) == 0;
}

static bool bind(Graph *g, const char *path, const TensorMap *own_map, TensorMap *out, Sink *sink) {
  memset(out, 0, sizeof *out);
  RtTensorSet set;
  char err[1024];
  if (rt_safetensors_open(path, &set, err, sizeof err) < 0) {
    report(sink, (SrcLoc){0}, "%s", err);
    return false;
  }
  Params params;
  bool have_params = params_of(g, &params) && strip_wrapper_prefix(&set, &params);
  out->names = calloc((size_t)params.n + 1, sizeof(char *));
  out->tensors = calloc((size_t)params.n + 1, sizeof(Tensor));
  bool *used = calloc((size_t)set.n + 1, sizeof(bool));
  bool *seen = calloc((size_t)params.n + 1, sizeof(bool));
  bool *found = calloc((size_t)params.n + 1, sizeof(bool));
  /* own by name in log time: an ONNX model names every weight there */
  TensorMapIndex own_index, *own = &own_index;
  bool indexed = ir_tensor_map_index(own, own_map);
  Report *r = &sink->r;
  if (!have_params || !out->names || !out->tensors || !used || !seen || !found || !indexed) {
    report(sink, (SrcLoc){0}, "%s: out of memory", path);
    goto done;
  }
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_PARAM) continue;
    const char *name = ir_attr_str(n, "name");
    const TensorType *want = &n->out[0].type;
    int p = rt_names_find(&params.index, params.names, name);
    if (seen[p]) continue; /* shared weights: bound once */
    seen[p] = true;
    char wt[IR_TYPE_STR_MAX], ws[IR_TYPE_STR_MAX], gs[IR_TYPE_STR_MAX];
    ir_type_str(want, wt, sizeof wt);
    dims_str(want->rank, want->dims, ws, sizeof ws);
    const RtTensor *in_file = rt_tensor_set_find(&set, name);
    if (!in_file && strncmp(name, "dlcc.", 5) == 0) {
      /* Training state (dropout's dlcc.seed, dlcc.step: docs/training.md)
       * that a PyTorch state_dict never holds: it starts at 0 (the loss
       * scale at its fill). */
      found[p] = true;
      char *copy = strdup(name);
      Tensor *z = &out->tensors[out->n];
      if (!copy || !ir_tensor_alloc(z, want)) {
        free(copy);
        report(sink, (SrcLoc){0}, "%s: out of memory", path);
        continue;
      }
      out->names[out->n++] = copy;
      double start = ir_state_start(n);
      for (int64_t i = 0, count = ir_type_numel(want); start != 0 && i < count; i++) ir_tensor_set(z, i, start);
      continue;
    }
    const Tensor *mine = !in_file ? ir_tensor_map_index_find(own, name) : NULL;
    if (mine && mine->data && ir_type_eq(&mine->type, want)) {
      /* A constant of the model, not a weight: a value the importer
       * computed, which PyTorch's state_dict has no key for, or one the
       * file need not repeat. */
      found[p] = true;
      if (!add_copy(out, name, mine)) report(sink, (SrcLoc){0}, "%s: out of memory", path);
      continue;
    }
    if (!in_file) {
      /* Beyond the reported errors only the count matters: no search. */
      const char *near = r->count < MAX_ERRORS ? near_miss(&set, name) : NULL;
      if (near)
        report(sink, n->loc, "missing tensor '%s' (expected %s) in %s; it has '%s': are the names prefixed "
               "differently?", name, wt, path, near);
      else
        report(sink, n->loc, "missing tensor '%s' (expected %s) in %s", name, wt, path);
      continue;
    }
    found[p] = true;
    int k = (int)(in_file - set.tensors);
    used[k] = true;
    RtTensor *t = &set.tensors[k];
    DType dt;
    bool dt_ok = dtype_of(t->dtype, &dt) && dt == want->dtype;
    bool shape_ok = t->rank == want->rank;
    for (int i = 0; shape_ok && i < t->rank; i++) shape_ok = t->dims[i] == want->dims[i];
    dims_str(t->rank, t->dims, gs, sizeof gs);
    if (!dt_ok && !shape_ok)
      report(sink, n->loc, "tensor '%s' is %s%s in %s, the model expects %s", name, rt_dtype_name(t->dtype),
             gs, path, wt);
    else if (!dt_ok)
      report(sink, n->loc, "tensor '%s' is %s in %s, the model expects %s", name, rt_dtype_name(t->dtype),
             path, ir_dtype_name(want->dtype));
    else if (!shape_ok)
      report(sink, n->loc, "tensor '%s' is %s in %s, the model expects %s", name, gs, path, ws);
    if (!dt_ok || !shape_ok || r->count) continue;
    if (sink->only && !sink->only->want(sink->only->ctx, name)) continue;
    if (rt_safetensors_load(&set, k, err, sizeof err) < 0) {
      report(sink, (SrcLoc){0}, "%s", err);
      continue;
    }
    char *copy = strdup(name);
    if (!copy) {
      report(sink, (SrcLoc){0}, "%s: out of memory", path);
      continue;
    }
    out->names[out->n] = copy;
    out->tensors[out->n].type = *want;
    out->tensors[out->n].data = t->data; /* moved */
    t->data = NULL;
    out->n++;
  }
  for (int i = 0; i < set.n; i++) {
    if (used[i] || is_ignorable(&params, own, set.names[i])) continue;
    /* A weight of the model that the graph compiled no longer reads
     * (own's without data) is left alone; a buffer the model folded at
     * import (own's with data) binds as long as it holds what the model
     * was compiled with. */
    const Tensor *mine = !is_param(&params, set.names[i]) ? ir_tensor_map_index_find(own, set.names[i]) : NULL;
    if (mine && !mine->data && same_type(&set.tensors[i], &mine->type)) continue;
    if (mine && mine->data && rt_safetensors_load(&set, i, err, sizeof err) < 0) {
      report(sink, (SrcLoc){0}, "%s", err);
      continue;
    }
    if (mine && mine->data && same_as_own(&set.tensors[i], mine)) continue;
    if (mine && mine->data) {
      char ms[IR_TYPE_STR_MAX];
      report(sink, (SrcLoc){0},
             "%s: tensor '%s' differs from the model's own %s, which the model holds as a constant (folded "
             "when it was imported): export the model again with these values",
             path, set.names[i], ir_type_str(&mine->type, ms, sizeof ms));
      continue;
    }
    const char *like = r->count < MAX_ERRORS ? missing_like(&params, found, set.names[i]) : NULL;
    if (like)
      report(sink, (SrcLoc){0},
             "%s: unexpected tensor '%s' (the model has no such parameter; did you mean '%s'?)", path,
             set.names[i], like);
    else
      report(sink, (SrcLoc){0}, "%s: unexpected tensor '%s' (the model has no such parameter)", path,
             set.names[i]);
  }
  if (!sink->c && r->count > MAX_ERRORS && r->len + 1 < r->cap)
    snprintf(r->buf + r->len, r->cap - r->len, "\n(%d more not shown)", r->count - MAX_ERRORS);
  if (sink->c && r->count > MAX_ERRORS)
    diag_note(sink->c, (SrcLoc){0}, "%d more problems with %s not shown", r->count - MAX_ERRORS, path);
done:
  if (indexed) ir_tensor_map_index_free(own);
  free(used);
  free(seen);
  free(found);
  params_free(&params);
  rt_tensor_set_free(&set);
  if (r->count) {
    ir_tensor_map_free(out);
    return false;
  }
  return true;
}

bool api_bind_weights(Graph *g, const char *path, const TensorMap *own, TensorMap *out, char *err, size_t errlen) {
  return api_bind_some_weights(g, path, own, NULL, out, err, errlen);
}

bool api_bind_some_weights(Graph *g, const char *path, const TensorMap *own, const ApiWeightFilter *only,
                           TensorMap *out, char *err, size_t errlen) {
  if (errlen) err[0] = 0;
  Sink sink = {.r = {err, 0, errlen, 0}, .only = only};
  return bind(g, path, own, out, &sink);
}

bool api_check_weights(Ctx *c, Graph *g, const char *path, const TensorMap *own, TensorMap *out) {
  Sink sink = {.c = c};
  return bind(g, path, own, out, &sink);
}

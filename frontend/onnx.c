/* ONNX import: takes a serialized ModelProto (decoded by protobuf-c from
 * the onnx.proto of the installed onnx package) and returns a verified
 * graph plus the data of its params.  Each ONNX node is mapped onto the
 * op table, decomposed where ONNX has no single equivalent (Gemm with
 * alpha/beta, Elu, Split, Tile, ...).  Every value whose contents are
 * known at import (initializers, Constant, Shape of a static shape and
 * everything computed from those) is carried as host data and each IR node
 * whose operands are all known is evaluated at once by the reference
 * interpreter, so Shape -> Gather -> Concat -> Reshape chains and gate
 * reordering of constant LSTM weights leave no trace in the graph.  Known
 * values that reach a runtime op become params named after the ONNX value
 * (or splat consts). */
#include "config.h"

#include "frontend/onnx.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#if HAVE_ONNX

#include "frontend/onnx.pb-c.h"

/* Folding evaluates nodes on the host: past this many elements a node
 * stays in the graph (OnnxOptions.max_fold_elems overrides it). */
#define FOLD_MAX_ELEMS ((int64_t)1 << 26)
/* A model file larger than this is refused before reading (protobuf
 * itself stops at 2 GiB). */
#define MAX_MODEL_BYTES ((size_t)1 << 31)

/* ---- ONNX dtypes ---- */

static const char *const onnx_type_names[] = {
    "UNDEFINED", "FLOAT",  "UINT8",  "INT8",   "UINT16",    "INT16",      "INT32",   "INT64", "STRING",
    "BOOL",      "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
};

static const char *onnx_type_name(int32_t t) {
  return t >= 0 && t < (int32_t)ARRAY_LEN(onnx_type_names) ? onnx_type_names[t] : "an unknown dtype";
}

static bool dtype_from_onnx(int32_t t, DType *out) {
  switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: *out = TY_F32; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: *out = TY_F16; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: *out = TY_BF16; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: *out = TY_I8; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: *out = TY_I32; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: *out = TY_I64; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: *out = TY_BOOL; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8: *out = TY_U8; return true;
    default: return false;
  }
}

static const char dtypes_we_have[] = "dlcc has FLOAT, FLOAT16, BFLOAT16, INT8, UINT8, INT32, INT64 and BOOL";

__attribute__((format(printf, 3, 4))) static bool efail(char *err, size_t errlen, const char *fmt,
                                                         ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return false;
}

/* ---- files ---- */

/* Whole file into malloc'd memory. */
static void *read_whole(const char *path, size_t *len, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    efail(err, errlen, "cannot read '%s': %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  unsigned char *buf = malloc(cap);
  while (buf) {
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
    if (n == cap) {
      unsigned char *bigger = cap >= MAX_MODEL_BYTES ? NULL : realloc(buf, cap * 2);
      if (!bigger) {
        free(buf);
        buf = NULL;
        fclose(f);
        efail(err, errlen, "cannot read '%s': larger than %zu bytes", path, MAX_MODEL_BYTES);
        return NULL;
      }
      buf = bigger;
      cap *= 2;
    }
  }
  bool failed = ferror(f);
  fclose(f);
  if (!buf || failed) {
    free(buf);
    efail(err, errlen, "cannot read '%s': %s", path, buf ? strerror(errno) : "out of memory");
    return NULL;
  }
  *len = n;
  return buf;
}

static char *dir_of(Arena *a, const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? arena_strndup(a, path, (size_t)(slash - path)) : arena_strdup(a, ".");
}

/* The raw bytes of a tensor stored outside the model (external_data:
 * location, offset, length), read into dst. */
static bool read_external(const Onnx__TensorProto *t, const char *dir, void *dst, size_t nbytes,
                          char *err, size_t errlen) {
  const char *location = NULL;
  long long offset = 0, length = -1;
  for (size_t i = 0; i < t->n_external_data; i++) {
    const Onnx__StringStringEntryProto *kv = t->external_data[i];
    if (!kv->key || !kv->value) continue;
    char *end;
    if (strcmp(kv->key, "location") == 0) {
      location = kv->value;
    } else if (strcmp(kv->key, "offset") == 0 || strcmp(kv->key, "length") == 0) {
      errno = 0;
      long long v = strtoll(kv->value, &end, 10);
      if (*end || end == kv->value || errno || v < 0)
        return efail(err, errlen, "external data %s '%s' is not a byte count", kv->key, kv->value);
      if (kv->key[0] == 'o')
        offset = v;
      else
        length = v;
    }
  }
  if (!location || !*location)
    return efail(err, errlen, "external data without a 'location'");
  /* Only files next to the model: a model from elsewhere must not read
   * arbitrary paths. */
  if (location[0] == '/' || strstr(location, "..") != NULL)
    return efail(err, errlen, "external data location '%s' must be a relative path below the model's directory",
                 location);
  if (length >= 0 && (unsigned long long)length != (unsigned long long)nbytes)
    return efail(err, errlen, "external data '%s' has length %lld, the tensor needs %zu bytes",
                 location, length, nbytes);
  char *path = NULL;
  if (asprintf(&path, "%s/%s", dir, location) < 0) return efail(err, errlen, "out of memory");
  FILE *f = fopen(path, "rb");
  if (!f) {
    efail(err, errlen, "cannot read external data '%s': %s", path, strerror(errno));
    free(path);
    return false;
  }
  bool ok = fseeko(f, (off_t)offset, SEEK_SET) == 0 && fread(dst, 1, nbytes, f) == nbytes;
  fclose(f);
  if (!ok)
    efail(err, errlen, "external data '%s' is too short: %zu bytes at offset %lld", path, nbytes,
          offset);
  free(path);
  return ok;
}

/* A TensorProto's contents as a host tensor (malloc'd data). */
static bool tensor_from_proto(const Onnx__TensorProto *t, const char *dir, Tensor *out, char *err,
                              size_t errlen) {
  *out = (Tensor){0};
  DType dt;
  if (!t->has_data_type || !dtype_from_onnx(t->data_type, &dt))
    return efail(err, errlen, "dtype %s is not supported (%s)", onnx_type_name(t->data_type),
                 dtypes_we_have);
  if (t->n_dims > DL_MAX_RANK)
    return efail(err, errlen, "rank %zu is not supported (at most %d)", t->n_dims, (int)DL_MAX_RANK);
  TensorType type = {.dtype = dt, .rank = (int)t->n_dims};
  for (size_t i = 0; i < t->n_dims; i++) {
    if (t->dims[i] < 0) return efail(err, errlen, "dim %zu is negative (%" PRId64 ")", i, t->dims[i]);
    if (t->dims[i] == 0) return efail(err, errlen, "dim %zu is 0: empty tensors are not supported", i);
    if (t->dims[i] > DL_MAX_ELEMS)
      return efail(err, errlen, "dim %zu (%" PRId64 ") is too large", i, t->dims[i]);
    type.dims[i] = t->dims[i];
  }
  int64_t n = ir_type_numel(&type);
  char ts[IR_TYPE_STR_MAX];
  ir_type_str(&type, ts, sizeof ts);
  if (n < 0) return efail(err, errlen, "shape %s is larger than %" PRId64 " elements", ts, DL_MAX_ELEMS);
  if (t->segment) return efail(err, errlen, "segmented tensors are not supported");
  size_t nbytes = ir_tensor_nbytes(&type);
  bool external = (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
                  t->n_external_data > 0;
  size_t given;
  const char *field;
  if (external) {
    given = nbytes, field = "external";
  } else if (t->has_raw_data) {
    given = t->raw_data.len, field = "raw_data bytes";
  } else if (dt == TY_F32) {
    given = t->n_float_data, field = "float_data values";
  } else if (dt == TY_I64) {
    given = t->n_int64_data, field = "int64_data values";
  } else {
    given = t->n_int32_data, field = "int32_data values";
  }
  size_t want = external || t->has_raw_data ? nbytes : (size_t)n;
  if (given != want)
    return efail(err, errlen, "%s %s needs %zu %s, the file has %zu", ts,
                 onnx_type_name(t->data_type), want, field, given);
  if (!ir_tensor_alloc(out, &type)) return efail(err, errlen, "out of memory for %s", ts);
  if (external) {
    if (!read_external(t, dir, out->data, nbytes, err, errlen)) {
      ir_tensor_free(out);
      return false;
    }
  } else if (t->has_raw_data) {
    memcpy(out->data, t->raw_data.data, nbytes); /* little-endian, as the host */
  } else if (dt == TY_F32) {
    memcpy(out->data, t->float_data, nbytes);
  } else if (dt == TY_I64) {
    memcpy(out->data, t->int64_data, nbytes);
  } else {
    for (int64_t i = 0; i < n; i++) {
      int32_t v = t->int32_data[i];
      switch (dt) {
        case TY_F16:
        case TY_BF16: ((uint16_t *)out->data)[i] = (uint16_t)v; break;
        case TY_I8: ((int8_t *)out->data)[i] = (int8_t)v; break;
        case TY_U8: ((uint8_t *)out->data)[i] = (uint8_t)v; break;
        case TY_BOOL: ((uint8_t *)out->data)[i] = v != 0; break;
        default: ((int32_t *)out->data)[i] = v; break;
      }
    }
  }
  return true;
}

bool fe_onnx_read_tensor(const char *path, Tensor *out, char **name, char *err, size_t errlen) {
  *out = (Tensor){0};
  if (name) *name = NULL;
  size_t len;
  void *buf = read_whole(path, &len, err, errlen);
  if (!buf) return false;
  Onnx__TensorProto *t = onnx__tensor_proto__unpack(NULL, len, buf);
  free(buf);
  if (!t) return efail(err, errlen, "'%s' is not a serialized ONNX TensorProto", path);
  char msg[512];
  Arena a;
  arena_init(&a);
  bool ok = tensor_from_proto(t, dir_of(&a, path), out, msg, sizeof msg);
  arena_free(&a);
  if (ok && name && !(*name = strdup(t->name ? t->name : ""))) {
    ir_tensor_free(out);
    ok = false;
    snprintf(msg, sizeof msg, "out of memory");
  }
  onnx__tensor_proto__free_unpacked(t, NULL);
  if (!ok) efail(err, errlen, "'%s': %s", path, msg);
  return ok;
}

/* ---- the importer ---- */

/* What the importer knows about one ONNX value. */
typedef struct Val {
  const char *name; /* ONNX name; NULL for temporaries */
  TensorType type;
  Value *v;           /* in the graph; NULL until a runtime op needs it */
  Tensor *k;          /* contents known at import, or NULL */
  const Tensor *hint; /* OnnxOptions.known's value for a graph input */
  /* DequantizeLinear's codes and scales when it made this value, or the
   * accumulator of an int8 product this value dequantizes (QDQ). */
  const struct Quant *dq;
  /* An empty tensor (a dim of 0): ONNX's way, besides an empty name, to
   * leave out an optional operand (Resize's roi and scales).  dlcc has no
   * empty tensors; only the ops that read one as not given take it. */
  bool empty;
} Val;

typedef struct Entry {
  const char *name;
  Val *val;
  int producer; /* node index; -1 for graph inputs and initializers */
  struct Entry *next;
} Entry;

enum { N_BUCKETS = 4096 };

typedef struct Imp {
  Ctx *c;
  Graph *g;
  const char *file; /* for messages */
  const char *dir;  /* external data */
  const SrcFile *src;
  const OnnxOptions *opt;
  bool *define_used;
  int64_t opset;
  Entry **buckets;
  /* Every known tensor (malloc'd), freed at the end unless a param took it. */
  Tensor **owned;
  int n_owned, cap_owned;
  /* Params in graph order; each is a Val whose k is its data. */
  Val **params;
  int n_params, cap_params;
  int n_temps;
  /* The node being imported. */
  const Onnx__NodeProto *np;
  int node_index;
  bool *attr_used;
  SrcLoc loc;
  int64_t fold_max;
} Imp;

static uint32_t hash_str(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static Entry *find_entry(Imp *im, const char *name) {
  for (Entry *e = im->buckets[hash_str(name) % N_BUCKETS]; e; e = e->next)
    if (strcmp(e->name, name) == 0) return e;
  return NULL;
}

static Entry *add_entry(Imp *im, const char *name, int producer) {
  Entry *e = ARENA_NEW(&im->c->arena, Entry);
  e->name = arena_strdup(&im->c->arena, name);
  e->producer = producer;
  uint32_t b = hash_str(name) % N_BUCKETS;
  e->next = im->buckets[b];
  im->buckets[b] = e;
  return e;
}

__attribute__((format(printf, 2, 3))) static bool bad(Imp *im, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const Onnx__NodeProto *np = im->np;
  if (np) {
    const char *name = np->name && *np->name ? np->name : NULL;
    diag_error(im->c, (SrcLoc){0}, "%s: node %d%s%s%s (%s): %s", im->file, im->node_index,
               name ? " '" : "", name ? name : "", name ? "'" : "", np->op_type ? np->op_type : "?",
               msg);
  } else {
    diag_error(im->c, (SrcLoc){0}, "%s: %s", im->file, msg);
  }
  return false;
}

static void *grow(Imp *im, void *p, int *cap, size_t elem) {
  int n = *cap ? *cap * 2 : 64;
  void *q = realloc(p, (size_t)n * elem);
  if (!q) dl_internal(im->c, "out of memory");
  *cap = n;
  return q;
}

/* Takes ownership of t's data. */
static Tensor *own(Imp *im, Tensor t) {
  Tensor *k = malloc(sizeof *k);
  if (!k) {
    ir_tensor_free(&t);
    dl_internal(im->c, "out of memory");
  }
  *k = t;
  if (im->n_owned == im->cap_owned)
    im->owned = grow(im, im->owned, &im->cap_owned, sizeof *im->owned);
  im->owned[im->n_owned++] = k;
  return k;
}

static Val *new_val(Imp *im, const TensorType *t) {
  Val *v = ARENA_NEW(&im->c->arena, Val);
  v->type = *t;
  return v;
}

static Val *known(Imp *im, Tensor t) {
  Tensor *k = own(im, t);
  Val *v = new_val(im, &k->type);
  v->k = k;
  return v;
}

/* A fresh known tensor of type t for the caller to fill. */
static Val *known_new(Imp *im, const TensorType *t) {
  Tensor d;
  if (!ir_tensor_alloc(&d, t)) dl_internal(im->c, "out of memory");
  return known(im, d);
}

static bool proto_is_empty(const Onnx__TensorProto *t) {
  for (size_t i = 0; i < t->n_dims; i++)
    if (t->dims[i] == 0) return true;
  return false;
}

static Val *empty_val(Imp *im) {
  TensorType t = {.dtype = TY_F32, .rank = 1};
  Val *v = new_val(im, &t);
  v->empty = true;
  return v;
}

static Val *scalar(Imp *im, double x, DType dt) {
  TensorType t = {.dtype = dt, .rank = 0};
  Val *v = known_new(im, &t);
  ir_tensor_set(v->k, 0, x);
  return v;
}

static Val *ints_val(Imp *im, int n, const int64_t *x) {
  int64_t dim = n;
  TensorType t = ir_type_make(TY_I64, 1, &dim);
  Val *v = known_new(im, &t);
  memcpy(v->k->data, x, sizeof(int64_t) * (size_t)n);
  return v;
}

static bool is_splat(const Tensor *t, double *value) {
  int64_t n = ir_type_numel(&t->type);
  double first = ir_tensor_get(t, 0);
  if (isnan(first) || (!ir_dtype_is_float(t->type.dtype) && fabs(first) > 9007199254740992.0))
    return false;
  for (int64_t i = 1; i < n; i++)
    if (ir_tensor_get(t, i) != first) return false;
  *value = first;
  return true;
}

/* The value in the graph, made on first use: a known value becomes a
 * splat const or a param holding its data. */
static Value *use(Imp *im, Val *v) {
  if (v->v) return v->v;
  if (!v->k) dl_internal(im->c, "ONNX value without a definition");
  double splat;
  if (is_splat(v->k, &splat)) {
    Node *n = ir_node_new(im->g, OP_CONST, 0, NULL, im->loc);
    ir_set_float(im->g, n, "value", splat);
    ir_declare(n, &v->type);
    ir_append(im->g, n);
    return v->v = &n->out[0];
  }
  const char *name = v->name;
  if (!name) {
    const char *base = im->np && im->np->n_output && im->np->output[0] && *im->np->output[0]
                           ? im->np->output[0]
                           : "const";
    name = arena_printf(&im->c->arena, "%s.%d", base, im->n_temps++);
  }
  /* Param names are one namespace: a temporary may not take an ONNX name. */
  while (find_entry(im, name) && find_entry(im, name)->val != v)
    name = arena_printf(&im->c->arena, "%s.%d", name, im->n_temps++);
  if (!v->name) add_entry(im, name, -1)->val = v;
  Node *n = ir_source(im->g, OP_PARAM, &v->type, name, im->loc);
  if (im->n_params == im->cap_params)
    im->params = grow(im, im->params, &im->cap_params, sizeof *im->params);
  im->params[im->n_params++] = v;
  v->name = name;
  return v->v = &n->out[0];
}

static Val *val_of(Imp *im, Value *x) {
  Val *v = new_val(im, &x->type);
  v->v = x;
  return v;
}

/* ---- building nodes, folded when every operand is known ---- */

typedef struct Emit {
  Node *n;
  Graph *fold; /* non-NULL: evaluated at once */
  int n_in;
  Val **in;
} Emit;

static Node *begin_in(Imp *im, Emit *e, OpKind op, int n_in, Val *const *in, bool may_fold) {
  bool all_known = may_fold && n_in > 0;
  int64_t total = 0;
  for (int i = 0; i < n_in; i++) {
    if (!in[i]->k) all_known = false;
    else total += ir_type_numel(&in[i]->type);
  }
  e->fold = all_known && total <= im->fold_max ? ir_graph_new(im->c, "fold") : NULL;
  e->n_in = n_in;
  e->in = ARENA_ARRAY(&im->c->arena, Val *, n_in > 0 ? n_in : 1);
  Value **ops = ARENA_ARRAY(&im->c->arena, Value *, n_in > 0 ? n_in : 1);
  for (int i = 0; i < n_in; i++) {
    e->in[i] = in[i];
    if (e->fold) {
      const char *name = arena_printf(&im->c->arena, "k%d", i);
      ops[i] = &ir_source(e->fold, OP_PARAM, &in[i]->type, name, im->loc)->out[0];
    } else {
      ops[i] = use(im, in[i]);
    }
  }
  e->n = ir_node_new(e->fold ? e->fold : im->g, op, n_in, ops, im->loc);
  return e->n;
}

static Node *begin(Imp *im, Emit *e, OpKind op, int n_in, Val *const *in) {
  return begin_in(im, e, op, n_in, in, true);
}

/* Results into out[0..n_out). */
static bool finish(Imp *im, Emit *e, Val **out) {
  char err[1024];
  Node *n = e->n;
  if (!ir_fill_defaults(im->g, n, err, sizeof err) || !ir_infer(n, err, sizeof err))
    return bad(im, "%s", err);
  if (!e->fold) {
    ir_append(im->g, n);
    for (int i = 0; i < n->n_out; i++) out[i] = val_of(im, &n->out[i]);
    return true;
  }
  for (int i = 0; i < n->n_out; i++)
    if (ir_type_numel(&n->out[i].type) > im->fold_max) {
      /* Too large to fold after all: rebuild it in the graph. */
      Emit e2;
      begin_in(im, &e2, n->op, e->n_in, e->in, false);
      for (int a = 0; a < n->n_attrs; a++) {
        const Attr *at = &n->attrs[a];
        switch (at->kind) {
          case AK_INT: ir_set_int(im->g, e2.n, at->name, at->i); break;
          case AK_FLOAT: ir_set_float(im->g, e2.n, at->name, at->f); break;
          case AK_INTS: ir_set_ints(im->g, e2.n, at->name, at->ints.n, at->ints.v); break;
          case AK_STR: ir_set_str(im->g, e2.n, at->name, at->s); break;
          case AK_DTYPE: ir_set_dtype(im->g, e2.n, at->name, at->dt); break;
        }
      }
      return finish(im, &e2, out);
    }
  ir_append(e->fold, n);
  Value *outs[8];
  const char *names[8];
  const char **pnames = ARENA_ARRAY(&im->c->arena, const char *, e->n_in);
  Tensor *pt = ARENA_ARRAY(&im->c->arena, Tensor, e->n_in);
  if (n->n_out > 8) dl_internal(im->c, "too many results to fold");
  for (int i = 0; i < n->n_out; i++) outs[i] = &n->out[i], names[i] = "r";
  ir_set_outputs(e->fold, n->n_out, outs, names);
  for (int i = 0; i < e->n_in; i++) {
    pnames[i] = ir_attr_str(n->in[i]->def, "name");
    pt[i] = *e->in[i]->k;
  }
  TensorMap pm = {e->n_in, pnames, pt};
  Tensor res[8];
  if (!ir_eval(e->fold, NULL, &pm, res, err, sizeof err))
    return bad(im, "evaluating %s on constant operands: %s", ir_ops[n->op].name, err);
  for (int i = 0; i < n->n_out; i++) out[i] = known(im, res[i]);
  return true;
}

static Val *emit1(Imp *im, Emit *e) {
  Val *out[8];
  return finish(im, e, out) ? out[0] : NULL;
}

static Val *op1(Imp *im, OpKind op, Val *x) {
  if (!x) return NULL;
  Emit e;
  begin(im, &e, op, 1, &x);
  return emit1(im, &e);
}

static Val *op2(Imp *im, OpKind op, Val *a, Val *b) {
  if (!a || !b) return NULL;
  Val *in[2] = {a, b};
  Emit e;
  begin(im, &e, op, 2, in);
  return emit1(im, &e);
}

static Val *op2s(Imp *im, OpKind op, Val *a, double s) {
  return a ? op2(im, op, a, scalar(im, s, a->type.dtype)) : NULL;
}

static Val *op1f(Imp *im, OpKind op, Val *x, const char *attr, double v) {
  if (!x) return NULL;
  Emit e;
  Node *n = begin(im, &e, op, 1, &x);
  ir_set_float(im->g, n, attr, v);
  return emit1(im, &e);
}

static bool same_dims(const TensorType *t, int rank, const int64_t *dims) {
  if (t->rank != rank) return false;
  for (int i = 0; i < rank; i++)
    if (t->dims[i] != dims[i]) return false;
  return true;
}

static Val *reshape(Imp *im, Val *x, int rank, const int64_t *dims) {
  if (!x) return NULL;
  if (same_dims(&x->type, rank, dims)) return x;
  Emit e;
  Node *n = begin(im, &e, OP_RESHAPE, 1, &x);
  ir_set_ints(im->g, n, "shape", rank, dims);
  return emit1(im, &e);
}

static Val *transpose(Imp *im, Val *x, const int64_t *perm) {
  if (!x) return NULL;
  bool identity = true;
  for (int i = 0; i < x->type.rank; i++) identity &= perm[i] == i;
  if (identity) return x;
  Emit e;
  Node *n = begin(im, &e, OP_TRANSPOSE, 1, &x);
  ir_set_ints(im->g, n, "perm", x->type.rank, perm);
  return emit1(im, &e);
}

static Val *cast(Imp *im, Val *x, DType dt) {
  if (!x || x->type.dtype == dt) return x;
  Emit e;
  Node *n = begin(im, &e, OP_CAST, 1, &x);
  ir_set_dtype(im->g, n, "to", dt);
  return emit1(im, &e);
}

/* x[start:end:step] along one axis (0 <= start < end <= dim, step >= 1). */
static Val *slice_axis(Imp *im, Val *x, int axis, int64_t start, int64_t end, int64_t step) {
  if (!x) return NULL;
  int r = x->type.rank;
  if (start == 0 && end == x->type.dims[axis] && step == 1) return x;
  int64_t s[DL_MAX_RANK], en[DL_MAX_RANK], st[DL_MAX_RANK];
  for (int d = 0; d < r; d++) s[d] = 0, en[d] = x->type.dims[d], st[d] = 1;
  s[axis] = start, en[axis] = end, st[axis] = step;
  Emit e;
  Node *n = begin(im, &e, OP_SLICE, 1, &x);
  ir_set_ints(im->g, n, "starts", r, s);
  ir_set_ints(im->g, n, "ends", r, en);
  ir_set_ints(im->g, n, "steps", r, st);
  return emit1(im, &e);
}

static Val *concat(Imp *im, int n_in, Val **in, int axis) {
  for (int i = 0; i < n_in; i++)
    if (!in[i]) return NULL;
  if (n_in == 1) return in[0];
  Emit e;
  Node *n = begin(im, &e, OP_CONCAT, n_in, in);
  ir_set_int(im->g, n, "axis", axis);
  return emit1(im, &e);
}

static Val *reduce(Imp *im, OpKind op, Val *x, int n_axes, const int64_t *axes, bool keep) {
  if (!x) return NULL;
  Emit e;
  Node *n = begin(im, &e, op, 1, &x);
  ir_set_ints(im->g, n, "axes", n_axes, axes);
  ir_set_int(im->g, n, "keepdims", keep);
  return emit1(im, &e);
}

static Val *gather(Imp *im, Val *data, Val *idx, int axis) {
  if (!data || !idx) return NULL;
  Val *in[2] = {data, idx};
  Emit e;
  Node *n = begin(im, &e, OP_GATHER, 2, in);
  ir_set_int(im->g, n, "axis", axis);
  return emit1(im, &e);
}

/* x reversed along axis: a gather of dim-1 .. 0. */
static Val *reverse_axis(Imp *im, Val *x, int axis) {
  if (!x) return NULL;
  int64_t T = x->type.dims[axis];
  if (T > im->fold_max) {
    bad(im, "reversing an axis of %" PRId64 " elements is not supported", T);
    return NULL;
  }
  TensorType it = ir_type_make(TY_I64, 1, &T);
  Val *idx = known_new(im, &it);
  for (int64_t i = 0; i < T; i++) ((int64_t *)idx->k->data)[i] = T - 1 - i;
  return gather(im, x, idx, axis);
}

/* 0, 1, .., len-1 along axis of a rank-r i64 tensor (1 in the other dims). */
static Val *iota_along(Imp *im, int r, int axis, int64_t len) {
  int64_t dims[DL_MAX_RANK];
  for (int d = 0; d < r; d++) dims[d] = d == axis ? len : 1;
  TensorType t = ir_type_make(TY_I64, r, dims);
  Val *v = known_new(im, &t);
  for (int64_t i = 0; i < len; i++) ((int64_t *)v->k->data)[i] = i;
  return v;
}

/* ---- attributes ---- */

static const Onnx__AttributeProto *find_attr(Imp *im, const char *name) {
  const Onnx__NodeProto *np = im->np;
  for (size_t i = 0; i < np->n_attribute; i++)
    if (np->attribute[i]->name && strcmp(np->attribute[i]->name, name) == 0) {
      im->attr_used[i] = true;
      return np->attribute[i];
    }
  return NULL;
}

static bool attr_kind(Imp *im, const Onnx__AttributeProto *a, Onnx__AttributeProto__AttributeType want,
                      const char *what) {
  /* Old exporters leave type unset; then the filled field decides. */
  if (a->has_type && a->type != want)
    return bad(im, "attribute '%s' must be %s", a->name, what);
  return true;
}

static bool attr_int(Imp *im, const char *name, int64_t def, int64_t *out) {
  const Onnx__AttributeProto *a = find_attr(im, name);
  *out = def;
  if (!a) return true;
  if (!attr_kind(im, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, "an integer")) return false;
  *out = a->i;
  return true;
}

static bool attr_float(Imp *im, const char *name, double def, double *out) {
  const Onnx__AttributeProto *a = find_attr(im, name);
  *out = def;
  if (!a) return true;
  if (!attr_kind(im, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, "a float")) return false;
  *out = a->f;
  return true;
}

/* *out NULL when absent. */
static bool attr_str(Imp *im, const char *name, const char *def, const char **out) {
  const Onnx__AttributeProto *a = find_attr(im, name);
  *out = def;
  if (!a) return true;
  if (!attr_kind(im, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string")) return false;
  *out = arena_strndup(&im->c->arena, (const char *)a->s.data, a->s.len);
  return true;
}

/* *n = -1 when absent. */
static bool attr_ints(Imp *im, const char *name, int *n, const int64_t **v) {
  const Onnx__AttributeProto *a = find_attr(im, name);
  *n = -1;
  *v = NULL;
  if (!a) return true;
  if (!attr_kind(im, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, "a list of integers")) return false;
  if (a->n_ints > 64) return bad(im, "attribute '%s' has %zu values, more than dlcc takes", name, a->n_ints);
  *n = (int)a->n_ints;
  *v = a->ints;
  return true;
}

/* A flag attribute that dlcc supports only at one value. */
static bool attr_only(Imp *im, const char *name, int64_t def, int64_t allowed) {
  int64_t v;
  if (!attr_int(im, name, def, &v)) return false;
  if (v != allowed)
    return bad(im, "attribute %s=%" PRId64 " is not supported (only %" PRId64 ")", name, v, allowed);
  return true;
}

/* ---- operands ---- */

typedef struct ONode {
  int n_in;
  Val **in; /* NULL where the name is empty */
  int n_out;
  Val **out;
  const bool *want; /* output named (used) */
} ONode;

static Val *in_opt(const ONode *n, int i) { return i < n->n_in ? n->in[i] : NULL; }

static Val *in_req(Imp *im, const ONode *n, int i) {
  Val *v = in_opt(n, i);
  if (!v) bad(im, "input %d is missing", i + 1);
  return v;
}

static const Tensor *need_const(Imp *im, Val *v, const char *what) {
  if (v->k) return v->k;
  if (v->hint) return v->hint;
  bad(im, "%s computed at run time is not supported: it must be an initializer, a Constant or "
          "follow from static shapes",
      what);
  return NULL;
}

/* Up to 64 integers from a known 0-d or 1-d integer tensor. */
static bool const_ints(Imp *im, Val *v, const char *what, int *n, int64_t *out) {
  const Tensor *t = need_const(im, v, what);
  if (!t) return false;
  if (ir_dtype_is_float(t->type.dtype) || t->type.rank > 1)
    return bad(im, "%s must be a 0-d or 1-d integer tensor", what);
  int64_t count = ir_type_numel(&t->type);
  if (count > 64) return bad(im, "%s has %" PRId64 " values, more than dlcc takes", what, count);
  for (int64_t i = 0; i < count; i++) out[i] = (int64_t)ir_tensor_get(t, i);
  if (t->type.dtype == TY_I64)
    for (int64_t i = 0; i < count; i++) out[i] = ((const int64_t *)t->data)[i];
  *n = (int)count;
  return true;
}

static bool const_scalar(Imp *im, Val *v, const char *what, double *out) {
  const Tensor *t = need_const(im, v, what);
  if (!t) return false;
  if (ir_type_numel(&t->type) != 1) return bad(im, "%s must hold one value", what);
  *out = ir_tensor_get(t, 0);
  return true;
}

static bool norm_axis(Imp *im, int64_t a, int rank, int *out) {
  *out = 0;
  if (a < -rank || a >= rank)
    return bad(im, "axis %" PRId64 " is out of range for rank %d", a, rank);
  *out = (int)(a < 0 ? a + rank : a);
  return true;
}

/* Axes normalized, sorted, without duplicates. */
static bool norm_axes(Imp *im, int n, const int64_t *in, int rank, int *n_out, int64_t *out) {
  bool seen[DL_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) {
    int a;
    if (!norm_axis(im, in[i], rank, &a)) return false;
    seen[a] = true;
  }
  *n_out = 0;
  for (int d = 0; d < rank; d++)
    if (seen[d]) out[(*n_out)++] = d;
  return true;
}

static bool need_float_in(Imp *im, Val *x) {
  if (!ir_dtype_is_float(x->type.dtype))
    return bad(im, "input of dtype %s is not supported (a float type is needed)",
               ir_dtype_name(x->type.dtype));
  return true;
}

/* ---- elementwise ---- */

typedef struct UnaryMap {
  const char *onnx;
  OpKind op;
} UnaryMap;

static const UnaryMap unary_ops[] = {
    {"Abs", OP_ABS},   {"Neg", OP_NEG},   {"Relu", OP_RELU},       {"Sigmoid", OP_SIGMOID},
    {"Tanh", OP_TANH}, {"Exp", OP_EXP},   {"Log", OP_LOG},         {"Sqrt", OP_SQRT},
    {"Erf", OP_ERF},   {"Sin", OP_SIN},   {"Cos", OP_COS},         {"Reciprocal", OP_RECIPROCAL},
    {"HardSwish", OP_HARDSWISH},
    {"Round", OP_ROUND}, {"Floor", OP_FLOOR}, {"Ceil", OP_CEIL},   {"Sign", OP_SIGN},
    {"Tan", OP_TAN},     {"Asin", OP_ASIN},   {"Acos", OP_ACOS},   {"Atan", OP_ATAN},
    {"Sinh", OP_SINH},   {"Cosh", OP_COSH},   {"Asinh", OP_ASINH}, {"Acosh", OP_ACOSH},
    {"Atanh", OP_ATANH},
};

static bool op_unary(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  if (!x) return false;
  for (size_t i = 0; i < ARRAY_LEN(unary_ops); i++)
    if (strcmp(im->np->op_type, unary_ops[i].onnx) == 0) return (n->out[0] = op1(im, unary_ops[i].op, x));
  dl_unreachable(im->c);
}

static bool op_leaky_relu(Imp *im, ONode *n) {
  double alpha;
  Val *x = in_req(im, n, 0);
  if (!x || !attr_float(im, "alpha", 0.01, &alpha)) return false;
  return (n->out[0] = op1f(im, OP_LEAKY_RELU, x, "alpha", alpha));
}

static bool op_gelu(Imp *im, ONode *n) {
  const char *approx;
  Val *x = in_req(im, n, 0);
  if (!x || !attr_str(im, "approximate", "none", &approx)) return false;
  if (strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0)
    return bad(im, "approximate='%s' is not supported (none or tanh)", approx);
  Emit e;
  Node *g = begin(im, &e, OP_GELU, 1, &x);
  ir_set_str(im->g, g, "approximate", approx);
  return (n->out[0] = emit1(im, &e));
}

/* alpha * (exp(min(x, 0) / scale) - 1): the negative side of Elu and Celu. */
static Val *neg_exp_side(Imp *im, Val *x, double alpha, double scale) {
  Val *m = op2s(im, OP_MINIMUM, x, 0.0);
  if (scale != 1.0) m = op2s(im, OP_DIV, m, scale);
  return op2s(im, OP_MUL, op2s(im, OP_SUB, op1(im, OP_EXP, m), 1.0), alpha);
}

static bool op_elu_family(Imp *im, ONode *n) {
  const char *t = im->np->op_type;
  Val *x = in_req(im, n, 0);
  if (!x || !need_float_in(im, x)) return false;
  double alpha, gamma = 1.0;
  bool selu = strcmp(t, "Selu") == 0, celu = strcmp(t, "Celu") == 0;
  if (!attr_float(im, "alpha", selu ? 1.67326319217681884765625 : 1.0, &alpha)) return false;
  if (selu && !attr_float(im, "gamma", 1.05070102214813232421875, &gamma)) return false;
  Val *y = op2(im, OP_ADD, op1(im, OP_RELU, x), neg_exp_side(im, x, alpha, celu ? alpha : 1.0));
  if (selu) y = op2s(im, OP_MUL, y, gamma);
  return (n->out[0] = y);
}

static Val *hardsigmoid_of(Imp *im, Val *x, double alpha, double beta) {
  if (fabs(alpha - 1.0 / 6.0) < 1e-7 && beta == 0.5) return op1(im, OP_HARDSIGMOID, x);
  Val *y = op2s(im, OP_ADD, op2s(im, OP_MUL, x, alpha), beta);
  if (!y) return NULL;
  Emit e;
  Node *c = begin(im, &e, OP_CLIP, 1, &y);
  ir_set_float(im->g, c, "min", 0.0);
  ir_set_float(im->g, c, "max", 1.0);
  return emit1(im, &e);
}

static Val *softplus_of(Imp *im, Val *x) { return op1(im, OP_LOG, op2s(im, OP_ADD, op1(im, OP_EXP, x), 1.0)); }

static Val *softsign_of(Imp *im, Val *x) { return op2(im, OP_DIV, x, op2s(im, OP_ADD, op1(im, OP_ABS, x), 1.0)); }

static bool op_hardsigmoid(Imp *im, ONode *n) {
  double alpha, beta;
  Val *x = in_req(im, n, 0);
  if (!x || !attr_float(im, "alpha", 0.2, &alpha) || !attr_float(im, "beta", 0.5, &beta)) return false;
  return (n->out[0] = hardsigmoid_of(im, x, alpha, beta));
}

static bool op_softplus(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  return x && (n->out[0] = softplus_of(im, x));
}

static bool op_softsign(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  return x && (n->out[0] = softsign_of(im, x));
}

/* Before opset 7 a binary op broadcasts only with broadcast=1, and then B
 * lines up with A's dims from `axis` on (default: A's last dims): B is
 * given 1s around it so that NumPy broadcasting means the same.  From
 * opset 7 the attributes are gone and NumPy's rules hold. */
static Val *legacy_broadcast(Imp *im, Val *a, Val *b) {
  if (im->opset >= 7) return b;
  int64_t on, axis;
  int ra = a->type.rank, rb = b->type.rank;
  if (!attr_int(im, "broadcast", 0, &on) || !attr_int(im, "axis", ra - rb, &axis)) return NULL;
  if (!on || rb == ra) return b;
  if (axis < 0) axis += ra;
  if (axis < 0 || axis + rb > ra) {
    bad(im, "broadcast axis %" PRId64 " does not fit B's %d dims in A's %d", axis, rb, ra);
    return NULL;
  }
  int64_t dims[DL_MAX_RANK];
  for (int i = 0; i < ra; i++) dims[i] = i >= axis && i < axis + rb ? b->type.dims[i - axis] : 1;
  for (int i = 0; i < rb; i++)
    if (b->type.dims[i] != 1 && b->type.dims[i] != a->type.dims[axis + i]) {
      bad(im, "broadcast axis %" PRId64 ": B's dim %d is %" PRId64 ", A's dim %d is %" PRId64, axis, i,
          b->type.dims[i], (int)axis + i, a->type.dims[axis + i]);
      return NULL;
    }
  return reshape(im, b, ra, dims);
}

static bool op_prelu(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0), *slope = in_req(im, n, 1);
  if (!x || !slope) return false;
  /* PRelu-6's slope is one per channel (dim 1), not NumPy-aligned. */
  int r = x->type.rank;
  if (im->opset < 7 && slope->type.rank == 1 && r >= 2 && slope->type.dims[0] == x->type.dims[1] &&
      slope->type.dims[0] != 1) {
    int64_t dims[DL_MAX_RANK];
    for (int i = 0; i < r - 1; i++) dims[i] = i == 0 ? slope->type.dims[0] : 1;
    slope = reshape(im, slope, r - 1, dims);
  }
  return (n->out[0] = op2(im, OP_ADD, op1(im, OP_RELU, x),
                          op2(im, OP_MUL, slope, op2s(im, OP_MINIMUM, x, 0.0))));
}

static bool op_clip(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  if (!x) return false;
  double lo = -INFINITY, hi = INFINITY;
  if (im->opset < 11) {
    if (!attr_float(im, "min", -INFINITY, &lo) || !attr_float(im, "max", INFINITY, &hi)) return false;
  } else {
    if (in_opt(n, 1) && !const_scalar(im, n->in[1], "Clip's min", &lo)) return false;
    if (in_opt(n, 2) && !const_scalar(im, n->in[2], "Clip's max", &hi)) return false;
  }
  Val *y = x;
  if (isfinite(lo) && isfinite(hi)) {
    Emit e;
    Node *c = begin(im, &e, OP_CLIP, 1, &x);
    ir_set_float(im->g, c, "min", lo);
    ir_set_float(im->g, c, "max", hi);
    y = emit1(im, &e);
  } else {
    if (isfinite(lo)) y = op2s(im, OP_MAXIMUM, y, lo);
    if (isfinite(hi)) y = op2s(im, OP_MINIMUM, y, hi);
  }
  return (n->out[0] = y);
}

static bool op_binary(Imp *im, ONode *n) {
  const char *t = im->np->op_type;
  Val *a = in_req(im, n, 0), *b = in_req(im, n, 1);
  if (!a || !b) return false;
  OpKind op = strcmp(t, "Add") == 0   ? OP_ADD
              : strcmp(t, "Sub") == 0 ? OP_SUB
              : strcmp(t, "Mul") == 0 ? OP_MUL
              : strcmp(t, "Div") == 0 ? OP_DIV
                                      : OP_POW;
  if (!(b = legacy_broadcast(im, a, b))) return false;
  /* Pow alone lets the exponent have its own dtype. */
  if (op == OP_POW) b = cast(im, b, a->type.dtype);
  return (n->out[0] = op2(im, op, a, b));
}

/* fmod=0 is the sign of the divisor (ONNX asks fmod=1 of floats; dlcc
 * gives them Python's % instead of refusing), fmod=1 C's fmod. */
static bool op_mod(Imp *im, ONode *n) {
  Val *a = in_req(im, n, 0), *b = in_req(im, n, 1);
  int64_t fmod_attr;
  if (!a || !b || !attr_int(im, "fmod", 0, &fmod_attr)) return false;
  if (fmod_attr != 0 && fmod_attr != 1) return bad(im, "fmod must be 0 or 1, got %" PRId64, fmod_attr);
  Emit e;
  Node *m = begin(im, &e, OP_MOD, 2, (Val *[]){a, b});
  ir_set_int(im->g, m, "fmod", fmod_attr);
  return (n->out[0] = emit1(im, &e));
}

/* Max, Min, Sum, Mean: any number of operands, broadcast together. */
static bool op_variadic(Imp *im, ONode *n) {
  const char *t = im->np->op_type;
  OpKind op = strcmp(t, "Max") == 0 ? OP_MAXIMUM : strcmp(t, "Min") == 0 ? OP_MINIMUM : OP_ADD;
  if (n->n_in < 1) return bad(im, "needs at least one input");
  Val *y = in_req(im, n, 0);
  for (int i = 1; y && i < n->n_in; i++) {
    Val *b = in_req(im, n, i);
    y = b ? op2(im, op, y, b) : NULL;
  }
  if (y && strcmp(t, "Mean") == 0 && n->n_in > 1) y = op2s(im, OP_DIV, y, n->n_in);
  return (n->out[0] = y);
}

/* ---- comparisons, logic, where ---- */

typedef struct OpMap {
  const char *onnx;
  OpKind op;
} OpMap;

static const OpMap logic_ops[] = {
    {"Equal", OP_EQUAL},       {"Less", OP_LESS},  {"LessOrEqual", OP_LESS_EQUAL},
    {"Greater", OP_GREATER},   {"GreaterOrEqual", OP_GREATER_EQUAL},
    {"And", OP_LOGICAL_AND},   {"Or", OP_LOGICAL_OR}, {"Xor", OP_LOGICAL_XOR},
    {"Not", OP_LOGICAL_NOT},   {"IsNaN", OP_ISNAN},
};

static bool op_logic(Imp *im, ONode *n) {
  OpKind op = OP_COUNT;
  for (size_t i = 0; i < ARRAY_LEN(logic_ops); i++)
    if (strcmp(im->np->op_type, logic_ops[i].onnx) == 0) op = logic_ops[i].op;
  if (op == OP_COUNT) dl_unreachable(im->c);
  Val *a = in_req(im, n, 0);
  if (!a) return false;
  if (ir_ops[op].min_in == 1) return (n->out[0] = op1(im, op, a));
  Val *b = in_req(im, n, 1);
  return b && (n->out[0] = op2(im, op, a, b));
}

/* A bool tensor of t's shape, every element v. */
static Val *bool_splat(Imp *im, const TensorType *t, bool v) {
  TensorType bt = *t;
  bt.dtype = TY_BOOL;
  Val *r = known_new(im, &bt);
  if (v) memset(r->k->data, 1, ir_tensor_nbytes(&bt));
  return r;
}

static bool op_isinf(Imp *im, ONode *n) {
  int64_t neg, pos;
  Val *x = in_req(im, n, 0);
  if (!x || !attr_int(im, "detect_negative", 1, &neg) || !attr_int(im, "detect_positive", 1, &pos))
    return false;
  if (!neg && !pos) return (n->out[0] = bool_splat(im, &x->type, false));
  Val *y = op1(im, OP_ISINF, x);
  if (!neg || !pos) y = op2(im, OP_LOGICAL_AND, y, op2s(im, pos ? OP_GREATER : OP_LESS, x, 0.0));
  return (n->out[0] = y);
}

static Val *where(Imp *im, Val *cond, Val *a, Val *b) {
  if (!cond || !a || !b) return NULL;
  Val *in[3] = {cond, a, b};
  Emit e;
  begin(im, &e, OP_WHERE, 3, in);
  return emit1(im, &e);
}

static bool op_where(Imp *im, ONode *n) {
  Val *c = in_req(im, n, 0), *a = in_req(im, n, 1), *b = in_req(im, n, 2);
  return c && a && b && (n->out[0] = where(im, c, a, b));
}

/* x where x > alpha, else 0. */
static bool op_thresholded_relu(Imp *im, ONode *n) {
  double alpha;
  Val *x = in_req(im, n, 0);
  if (!x || !attr_float(im, "alpha", 1.0, &alpha)) return false;
  return (n->out[0] = where(im, op2s(im, OP_GREATER, x, alpha), x, scalar(im, 0, x->type.dtype)));
}

/* x + bias below -lambd, x - bias above lambd, 0 between. */
static bool op_shrink(Imp *im, ONode *n) {
  double lambd, bias;
  Val *x = in_req(im, n, 0);
  if (!x || !attr_float(im, "lambd", 0.5, &lambd) || !attr_float(im, "bias", 0.0, &bias)) return false;
  Val *zero = scalar(im, 0, x->type.dtype);
  Val *above = where(im, op2s(im, OP_GREATER, x, lambd), op2s(im, OP_SUB, x, bias), zero);
  return (n->out[0] = where(im, op2s(im, OP_LESS, x, -lambd), op2s(im, OP_ADD, x, bias), above));
}

/* The upper (j - i >= k) or lower (j - i <= k) triangle of the last two
 * dims: a constant mask of those two dims, broadcast by where. */
static bool op_trilu(Imp *im, ONode *n) {
  int64_t upper, k = 0;
  Val *x = in_req(im, n, 0);
  if (!x || !attr_int(im, "upper", 1, &upper)) return false;
  if (x->type.rank < 2) return bad(im, "the input must have at least 2 dims, got rank %d", x->type.rank);
  double kv;
  if (in_opt(n, 1)) {
    if (!const_scalar(im, n->in[1], "Trilu's k", &kv)) return false;
    k = (int64_t)kv;
  }
  const int64_t *d = x->type.dims + x->type.rank - 2;
  TensorType mt = ir_type_make(TY_BOOL, 2, d);
  Val *mask = known_new(im, &mt);
  uint8_t *m = mask->k->data;
  for (int64_t i = 0; i < d[0]; i++)
    for (int64_t j = 0; j < d[1]; j++) m[i * d[1] + j] = upper ? j - i >= k : j - i <= k;
  return (n->out[0] = where(im, mask, x, scalar(im, 0, x->type.dtype)));
}

static bool op_identity(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  return (n->out[0] = x);
}

static bool op_dropout(Imp *im, ONode *n) {
  double ratio;
  int64_t seed;
  Val *x = in_req(im, n, 0);
  if (!x || !attr_float(im, "ratio", 0.5, &ratio) || !attr_int(im, "seed", 0, &seed) ||
      !attr_only(im, "is_test", 1, 1))
    return false;
  if (in_opt(n, 2)) {
    double training;
    if (!const_scalar(im, n->in[2], "Dropout's training_mode", &training)) return false;
    if (training != 0) return bad(im, "training_mode=true is not supported (inference only)");
  }
  if (n->n_out > 1 && n->want[1]) return bad(im, "the mask output is not supported");
  return (n->out[0] = x);
}

static bool op_cast(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  if (!x) return false;
  DType to;
  if (strcmp(im->np->op_type, "CastLike") == 0) {
    Val *like = in_req(im, n, 1);
    if (!like) return false;
    to = like->type.dtype;
  } else {
    int64_t code, sat;
    if (!attr_int(im, "to", 0, &code) || !attr_int(im, "saturate", 1, &sat)) return false;
    if (!dtype_from_onnx((int32_t)code, &to))
      return bad(im, "cast to %s is not supported (%s)", onnx_type_name((int32_t)code), dtypes_we_have);
  }
  return (n->out[0] = cast(im, x, to));
}

/* ---- matrix products ---- */

static bool op_matmul(Imp *im, ONode *n) {
  Val *a = in_req(im, n, 0), *b = in_req(im, n, 1);
  if (!a || !b) return false;
  return (n->out[0] = op2(im, OP_MATMUL, a, b));
}

static bool op_gemm(Imp *im, ONode *n) {
  Val *a = in_req(im, n, 0), *b = in_req(im, n, 1), *c = in_opt(n, 2);
  int64_t ta, tb;
  double alpha, beta;
  if (!a || !b || !attr_int(im, "transA", 0, &ta) || !attr_int(im, "transB", 0, &tb) ||
      !attr_float(im, "alpha", 1.0, &alpha) || !attr_float(im, "beta", 1.0, &beta))
    return false;
  if (a->type.rank != 2 || b->type.rank != 2)
    return bad(im, "A and B must be 2-d, got ranks %d and %d", a->type.rank, b->type.rank);
  if (beta == 0) c = NULL;
  /* Gemm before opset 7: broadcast=1 lets C broadcast, as it always may now. */
  int64_t legacy;
  if (im->opset < 7 && !attr_int(im, "broadcast", 0, &legacy)) return false;
  static const int64_t swap[2] = {1, 0};
  /* PyTorch's nn.Linear exports as Gemm(transB=1): keep it one op. */
  if (!ta && tb && alpha == 1 &&
      (!c || (beta == 1 && c->type.rank == 1 && c->type.dims[0] == b->type.dims[0]))) {
    Val *in[3] = {a, b, c};
    Emit e;
    begin(im, &e, OP_LINEAR, c ? 3 : 2, in);
    return (n->out[0] = emit1(im, &e));
  }
  if (ta) a = transpose(im, a, swap);
  if (tb) b = transpose(im, b, swap);
  Val *y = op2(im, OP_MATMUL, a, b);
  if (alpha != 1) y = op2s(im, OP_MUL, y, alpha);
  if (c) y = op2(im, OP_ADD, y, beta != 1 ? op2s(im, OP_MUL, c, beta) : c);
  return (n->out[0] = y);
}

/* ---- convolution and pooling ---- */

typedef struct Window {
  int spatial;                      /* 1, 2 or 3: the ONNX node's */
  int nsp;                          /* 2 or 3: the IR op's (1-d is 2-d of height 1) */
  int64_t kernel[3], stride[3], dil[3];
  int64_t pad[6];                   /* the nsp starts, then the ends: 2-d [top, left, bottom, right] */
} Window;

/* kernel_shape, strides, dilations, pads and auto_pad for a window over
 * x's trailing dims (kernel from the weight when kernel_shape is absent),
 * for up to max_spatial dims. */
static bool spatial_window(Imp *im, const Val *x, const int64_t *wkernel, int max_spatial, Window *w) {
  int r = x->type.rank;
  if (r < 3 || r > 2 + max_spatial)
    return bad(im, "%d spatial dims are not supported (%s are)", r - 2 > 0 ? r - 2 : 0,
               max_spatial == 3 ? "1-d, 2-d and 3-d" : "1-d and 2-d");
  int s = r - 2;
  w->spatial = s;
  int nk, ns, nd, np;
  const int64_t *k, *st, *dl, *pd;
  const char *auto_pad;
  if (!attr_ints(im, "kernel_shape", &nk, &k) || !attr_ints(im, "strides", &ns, &st) ||
      !attr_ints(im, "dilations", &nd, &dl) || !attr_ints(im, "pads", &np, &pd) ||
      !attr_str(im, "auto_pad", "NOTSET", &auto_pad))
    return false;
  if (nk < 0 && !wkernel) return bad(im, "attribute 'kernel_shape' is missing");
  if ((nk >= 0 && nk != s) || (ns >= 0 && ns != s) || (nd >= 0 && nd != s) || (np >= 0 && np != 2 * s))
    return bad(im, "kernel_shape, strides and dilations need %d values and pads %d", s, 2 * s);
  int64_t lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0}, kk[3], ss[3], dd[3];
  for (int i = 0; i < s; i++) {
    kk[i] = nk >= 0 ? k[i] : wkernel[i];
    if (wkernel && kk[i] != wkernel[i])
      return bad(im, "kernel_shape %" PRId64 " differs from the weight's %" PRId64, kk[i], wkernel[i]);
    ss[i] = ns >= 0 ? st[i] : 1;
    dd[i] = nd >= 0 ? dl[i] : 1;
    if (kk[i] < 1 || ss[i] < 1 || dd[i] < 1)
      return bad(im, "kernel, strides and dilations must be >= 1");
    int64_t in = x->type.dims[2 + i];
    if (strcmp(auto_pad, "NOTSET") == 0) {
      lo[i] = np >= 0 ? pd[i] : 0;
      hi[i] = np >= 0 ? pd[s + i] : 0;
      if (lo[i] < 0 || hi[i] < 0) return bad(im, "negative pads are not supported");
    } else if (strcmp(auto_pad, "SAME_UPPER") == 0 || strcmp(auto_pad, "SAME_LOWER") == 0) {
      int64_t out = (in + ss[i] - 1) / ss[i];
      int64_t total = (out - 1) * ss[i] + (kk[i] - 1) * dd[i] + 1 - in;
      if (total < 0) total = 0;
      bool upper = auto_pad[5] == 'U';
      lo[i] = upper ? total / 2 : total - total / 2;
      hi[i] = total - lo[i];
    } else if (strcmp(auto_pad, "VALID") != 0) {
      return bad(im, "auto_pad='%s' is not supported", auto_pad);
    }
  }
  /* A 1-d window is a 2-d one of height 1: its dims go last, after a
   * leading one of kernel 1 and no padding. */
  int m = s == 1 ? 2 : s, o = m - s;
  w->nsp = m;
  w->kernel[0] = 1, w->stride[0] = 1, w->dil[0] = 1;
  w->pad[0] = w->pad[m] = 0;
  for (int i = 0; i < s; i++) {
    w->kernel[o + i] = kk[i], w->stride[o + i] = ss[i], w->dil[o + i] = dd[i];
    w->pad[o + i] = lo[i], w->pad[m + o + i] = hi[i];
  }
  return true;
}

/* The windows of the int8 convolutions, which stay 2-d. */
static bool window_attrs(Imp *im, const Val *x, const int64_t *wkernel, Window *w) {
  return spatial_window(im, x, wkernel, 2, w);
}

/* The window's attributes on an IR conv or pool node. */
static void set_window(Imp *im, Node *node, const Window *win, bool with_kernel) {
  int m = win->nsp;
  if (with_kernel) ir_set_ints(im->g, node, "kernel", m, win->kernel);
  ir_set_ints(im->g, node, "stride", m, win->stride);
  ir_set_ints(im->g, node, "pad", 2 * m, win->pad);
  ir_set_ints(im->g, node, "dilation", m, win->dil);
}

/* [N, C, L] -> [N, C, 1, L] for 1-d windows. */
static Val *to_2d(Imp *im, Val *x) {
  if (!x || x->type.rank != 3) return x;
  int64_t d[4] = {x->type.dims[0], x->type.dims[1], 1, x->type.dims[2]};
  return reshape(im, x, 4, d);
}

static Val *from_2d(Imp *im, Val *y, int spatial) {
  if (!y || spatial != 1) return y;
  int64_t d[3] = {y->type.dims[0], y->type.dims[1], y->type.dims[3]};
  return reshape(im, y, 3, d);
}

static bool op_conv(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0), *w = in_req(im, n, 1), *b = in_opt(n, 2);
  int64_t group;
  if (!x || !w || !attr_int(im, "group", 1, &group)) return false;
  if (w->type.rank != x->type.rank)
    return bad(im, "weight rank %d differs from input rank %d", w->type.rank, x->type.rank);
  Window win;
  if (!spatial_window(im, x, w->type.dims + 2, 3, &win)) return false;
  Val *in[3] = {to_2d(im, x), to_2d(im, w), b};
  if (!in[0] || !in[1]) return false;
  Emit e;
  Node *c = begin(im, &e, win.nsp == 3 ? OP_CONV3D : OP_CONV2D, b ? 3 : 2, in);
  set_window(im, c, &win, false);
  ir_set_int(im->g, c, "groups", group);
  return (n->out[0] = from_2d(im, emit1(im, &e), win.spatial));
}

/* The window attributes read as Conv's.  SAME auto_pad and output_shape
 * ask for an output size instead: the pads follow from it as ONNX says
 * (the odd unit at the end for SAME_UPPER, else at the start), and an
 * output larger than the full one becomes output padding. */
static bool op_conv_transpose(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0), *w = in_req(im, n, 1), *b = in_opt(n, 2);
  int64_t group;
  const char *auto_pad;
  int nos, nop;
  const int64_t *os, *op;
  if (!x || !w || !attr_int(im, "group", 1, &group) ||
      !attr_str(im, "auto_pad", "NOTSET", &auto_pad) || !attr_ints(im, "output_shape", &nos, &os) ||
      !attr_ints(im, "output_padding", &nop, &op))
    return false;
  bool same = strncmp(auto_pad, "SAME_", 5) == 0;
  if (w->type.rank != x->type.rank)
    return bad(im, "weight rank %d differs from input rank %d", w->type.rank, x->type.rank);
  Window win;
  if (!spatial_window(im, x, w->type.dims + 2, 3, &win)) return false;
  int sp = win.spatial, m = win.nsp, o = m - sp;
  if (nop >= 0 && nop != sp) return bad(im, "output_padding needs %d values", sp);
  if (nos >= 0 && nos != sp) return bad(im, "output_shape needs %d values", sp);
  int64_t opad[3] = {0, 0, 0};
  for (int i = 0; i < nop; i++) opad[o + i] = op[i];
  if (same || nos >= 0) {
    bool upper = strcmp(auto_pad, "SAME_UPPER") == 0;
    for (int i = 0; i < sp; i++) {
      int64_t in = x->type.dims[2 + i], want = nos >= 0 ? os[i] : in * win.stride[o + i];
      int64_t full = win.stride[o + i] * (in - 1) + opad[o + i] +
                     (win.kernel[o + i] - 1) * win.dil[o + i] + 1;
      int64_t total = full - want, lo = 0, hi = 0;
      if (want < 1) return bad(im, "output_shape %" PRId64 " is not positive", want);
      if (total >= 0) {
        lo = upper ? total / 2 : total - total / 2;
        hi = total - lo;
      } else {
        opad[o + i] -= total; /* the shape rule checks it stays below the stride */
      }
      win.pad[o + i] = lo, win.pad[m + o + i] = hi;
    }
  }
  Val *in[3] = {to_2d(im, x), to_2d(im, w), b};
  if (!in[0] || !in[1]) return false;
  Emit e;
  Node *c = begin(im, &e, m == 3 ? OP_CONV_TRANSPOSE3D : OP_CONV_TRANSPOSE2D, b ? 3 : 2, in);
  set_window(im, c, &win, false);
  ir_set_ints(im->g, c, "output_pad", m, opad);
  ir_set_int(im->g, c, "groups", group);
  return (n->out[0] = from_2d(im, emit1(im, &e), win.spatial));
}

/* ---- Resize and Upsample: separable, by tables known at import ----
 *
 * Shapes are static, so where every output element reads from along an
 * axis is known here: each resized axis becomes a gather of source
 * indices and, where an output blends several of them, a weighted sum of
 * its k taps (the gather seen as [.., out, k, ..], times the weights,
 * reduce_sum over k).  The tables follow ONNX's formulas in double
 * precision, as its reference computes them, so every
 * mode, coordinate transformation, nearest_mode, cubic_coeff_a,
 * exclude_outside and antialias is the same few ops. */

typedef enum { RZ_NEAREST, RZ_LINEAR, RZ_CUBIC } ResizeMode;

typedef struct Resize {
  ResizeMode mode;
  const char *coord;   /* coordinate_transformation_mode */
  const char *nearest; /* nearest_mode; NULL: Resize-10's and Upsample's rule */
  double cubic_a, extrapolation;
  bool exclude_outside, antialias;
} Resize;

/* One axis: its lengths, the scale ONNX's formulas divide by as num /
 * den (the given one over 1, or a size over its input length, so that
 * dividing by it rounds once), the resized length as those formulas see
 * it (scale * in: a fraction when the scale gives one, as in ONNX's
 * reference) and tf_crop_and_resize's region of interest. */
typedef struct ResizeAxis {
  int64_t in, out;
  double num, den, scale, len, roi_lo, roi_hi;
} ResizeAxis;

/* Output o of an axis reads idx[o * k + t] with weight w[o * k + t]
 * (t < k), or is the extrapolation value where outside[o]. */
typedef struct ResizeTable {
  int k;
  int64_t *idx;
  double *w;
  bool *outside;
  bool any_outside;
} ResizeTable;

static const char *const resize_coords[] = {
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
    "tf_half_pixel_for_nn", "tf_crop_and_resize"};
static const char *const resize_nearest_modes[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                                   "ceil"};

static bool one_of(const char *s, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0) return true;
  return false;
}

/* Where output coordinate o lands in the input; *outside when
 * tf_crop_and_resize puts it beyond the input's ends. */
static double resize_source(const Resize *r, const ResizeAxis *a, int64_t o, bool *outside) {
  double x = (double)o, in = (double)a->in, len = a->len;
  double centre = (x + 0.5) * a->den / a->num; /* (x + 0.5) / scale */
  const char *m = r->coord;
  *outside = false;
  if (strcmp(m, "asymmetric") == 0) return x * a->den / a->num;
  if (strcmp(m, "align_corners") == 0) return len == 1 ? 0 : x * (in - 1) / (len - 1);
  /* length_resized > 1 as ONNX's text and onnxruntime say (the reference
   * takes -0.5 for one output, the same pixels but for cubic). */
  if (strcmp(m, "pytorch_half_pixel") == 0) return a->out > 1 ? centre - 0.5 : 0;
  if (strcmp(m, "tf_half_pixel_for_nn") == 0) return centre;
  if (strcmp(m, "half_pixel_symmetric") == 0) return in / 2 * (1 - (double)a->out / len) + centre - 0.5;
  if (strcmp(m, "tf_crop_and_resize") == 0) {
    double span = a->roi_hi - a->roi_lo;
    double src = a->roi_lo * (in - 1) + (len == 1 ? span * (in - 1) / 2 : x * span * (in - 1) / (len - 1));
    *outside = src < 0 || src > in - 1;
    return src;
  }
  return centre - 0.5; /* half_pixel */
}

/* The source nearest_mode picks for x: rounding with ties as the mode
 * says, or floor / ceil.  Resize-10 and Upsample have no nearest_mode;
 * onnxruntime floors upscaling axes and takes the ceiling downscaling. */
static int64_t resize_nearest(const Resize *r, const ResizeAxis *a, double x) {
  const char *m = r->nearest ? r->nearest : a->scale < 1 ? "ceil" : "floor";
  double f = floor(x);
  if (strcmp(m, "floor") == 0) return (int64_t)f;
  if (strcmp(m, "ceil") == 0) return (int64_t)ceil(x);
  if (x - f == 0.5) return (int64_t)(strcmp(m, "round_prefer_ceil") == 0 ? f + 1 : f);
  return (int64_t)(x - f < 0.5 ? f : f + 1);
}

/* The interpolation kernel at distance t in input pixels: a tent, or
 * Keys' cubic convolution with a = cubic_coeff_a. */
static double resize_weight(const Resize *r, double t) {
  t = fabs(t);
  if (r->mode == RZ_LINEAR) return t < 1 ? 1 - t : 0;
  double A = r->cubic_a;
  if (t <= 1) return ((A + 2) * t - (A + 3)) * t * t + 1;
  if (t < 2) return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A;
  return 0;
}

/* How wide the kernel is when antialias stretches it to 1 / scale. */
static double resize_stretch(const Resize *r, const ResizeAxis *a) {
  return r->antialias && a->scale < 1 ? a->scale : 1;
}

static double resize_taps(const Resize *r, const ResizeAxis *a) {
  if (r->mode == RZ_NEAREST) return 1;
  double half = r->mode == RZ_LINEAR ? 1 : 2, s = resize_stretch(r, a);
  return s < 1 ? 2 - 2 * (floor(-half / s) + 1) : 2 * half;
}

static int64_t clamp_index(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* Row o of the table: ONNX takes the k taps nearest to x, the left ones
 * first, so that x lies in (0, 1] past tap k/2 - 1; out-of-range taps read
 * the edge (or, with exclude_outside, weigh nothing, the rest scaled back
 * to a sum of 1, as antialias does always). */
static void resize_row(const Resize *r, const ResizeAxis *a, double x, int k, int64_t *idx, double *w) {
  if (r->mode == RZ_NEAREST) {
    idx[0] = clamp_index(resize_nearest(r, a, x), a->in);
    w[0] = 1;
    return;
  }
  double base = floor(x), frac = x - base, s = resize_stretch(r, a), sum = 0;
  if (frac == 0) base -= 1, frac = 1;
  for (int t = 0; t < k; t++) {
    int offset = 1 - k / 2 + t;
    int64_t at = (int64_t)base + offset;
    w[t] = resize_weight(r, s * ((double)offset - frac));
    if (r->exclude_outside && (at < 0 || at >= a->in)) w[t] = 0;
    idx[t] = clamp_index(at, a->in);
    sum += w[t];
  }
  if ((r->antialias || r->exclude_outside) && sum != 0)
    for (int t = 0; t < k; t++) w[t] /= sum;
}

/* Taps that weigh nothing are dropped where that leaves one of weight 1
 * in every row: the axis is then a plain gather. */
static void resize_compact(ResizeTable *t, int64_t out) {
  int k = t->k;
  int64_t *one = malloc(sizeof *one * (size_t)out);
  if (!one) return;
  for (int64_t o = 0; o < out; o++) {
    int found = -1;
    for (int j = 0; j < k; j++) {
      double w = t->w[o * k + j];
      if (w == 0) continue;
      if (w != 1 || found >= 0) {
        free(one);
        return;
      }
      found = j;
    }
    if (found < 0) {
      free(one);
      return;
    }
    one[o] = t->idx[o * k + found];
  }
  for (int64_t o = 0; o < out; o++) t->idx[o] = one[o], t->w[o] = 1;
  t->k = 1;
  free(one);
}

static bool resize_table(Imp *im, const Resize *r, const ResizeAxis *a, ResizeTable *t) {
  double taps = resize_taps(r, a);
  if (taps * (double)a->out > (double)im->fold_max)
    return bad(im, "a table of %" PRId64 " x %.0f taps is larger than dlcc takes", a->out, taps);
  t->k = (int)taps;
  size_t n = (size_t)a->out * (size_t)t->k;
  t->idx = malloc(sizeof *t->idx * n);
  t->w = malloc(sizeof *t->w * n);
  t->outside = malloc(sizeof *t->outside * (size_t)a->out);
  t->any_outside = false;
  if (!t->idx || !t->w || !t->outside) return bad(im, "out of memory for a resize table");
  for (int64_t o = 0; o < a->out; o++) {
    double x = resize_source(r, a, o, &t->outside[o]);
    if (!(fabs(x) < 1e15)) x = 0; /* a wild roi: outside anyway, and no overflow */
    t->any_outside |= t->outside[o];
    resize_row(r, a, x, t->k, t->idx + o * t->k, t->w + o * t->k);
  }
  if (t->k > 1) resize_compact(t, a->out);
  return true;
}

static void resize_table_free(ResizeTable *t) {
  free(t->idx);
  free(t->w);
  free(t->outside);
}

static bool resize_is_identity(const ResizeTable *t, const ResizeAxis *a) {
  if (t->k != 1 || a->out != a->in || t->any_outside) return false;
  for (int64_t o = 0; o < a->out; o++)
    if (t->idx[o] != o) return false;
  return true;
}

/* Axis d of y through table t: a gather of its sources; for k > 1 the
 * gather seen as [before, out, k, after], times the weights [1, out, k,
 * 1], summed over k; then the extrapolation value where outside. */
static Val *resize_apply(Imp *im, Val *y, int d, const ResizeTable *t, int64_t out, double extrapolation) {
  int r = y->type.rank;
  int64_t before = 1, after = 1, n = out * t->k;
  for (int i = 0; i < r; i++) {
    if (i < d) before *= y->type.dims[i];
    if (i > d) after *= y->type.dims[i];
  }
  TensorType it = ir_type_make(TY_I64, 1, &n);
  Val *idx = known_new(im, &it);
  memcpy(idx->k->data, t->idx, sizeof *t->idx * (size_t)n);
  Val *g = gather(im, y, idx, d);
  if (g && t->k > 1) {
    int64_t view[4] = {before, out, t->k, after}, wd[4] = {1, out, t->k, 1}, sum_axis = 2;
    TensorType wt = ir_type_make(y->type.dtype, 4, wd);
    Val *w = known_new(im, &wt);
    for (int64_t i = 0; i < n; i++) ir_tensor_set(w->k, i, t->w[i]);
    int64_t dims[DL_MAX_RANK];
    memcpy(dims, y->type.dims, sizeof dims);
    dims[d] = out;
    Val *blend = reduce(im, OP_REDUCE_SUM, op2(im, OP_MUL, reshape(im, g, 4, view), w), 1, &sum_axis, false);
    g = reshape(im, blend, r, dims);
  }
  if (g && t->any_outside) {
    int64_t md[DL_MAX_RANK];
    for (int i = 0; i < r; i++) md[i] = i == d ? out : 1;
    TensorType mt = ir_type_make(TY_BOOL, r, md);
    Val *mask = known_new(im, &mt);
    for (int64_t o = 0; o < out; o++) ir_tensor_set(mask->k, o, t->outside[o]);
    g = where(im, mask, scalar(im, extrapolation, y->type.dtype), g);
  }
  return g;
}

/* A Val the importer may treat as not given: absent, or empty. */
static Val *given(Val *v) { return v && !v->empty ? v : NULL; }

static bool resize_attrs(Imp *im, bool v10, Resize *r) {
  const char *mode, *nearest;
  int64_t exclude, antialias;
  if (!attr_str(im, "mode", "nearest", &mode) ||
      !attr_str(im, "coordinate_transformation_mode", v10 ? "asymmetric" : "half_pixel", &r->coord) ||
      !attr_str(im, "nearest_mode", NULL, &nearest) || !attr_float(im, "cubic_coeff_a", -0.75, &r->cubic_a) ||
      !attr_int(im, "exclude_outside", 0, &exclude) ||
      !attr_float(im, "extrapolation_value", 0, &r->extrapolation) ||
      !attr_int(im, "antialias", 0, &antialias))
    return false;
  if (strcmp(mode, "nearest") == 0)
    r->mode = RZ_NEAREST;
  else if (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0) /* Upsample-1's name */
    r->mode = RZ_LINEAR;
  else if (strcmp(mode, "cubic") == 0)
    r->mode = RZ_CUBIC;
  else
    return bad(im, "mode='%s' is not one of ONNX's (nearest, linear, cubic)", mode);
  if (!one_of(r->coord, resize_coords, ARRAY_LEN(resize_coords)))
    return bad(im, "coordinate_transformation_mode='%s' is not one of ONNX's (half_pixel, "
                   "half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric, "
                   "tf_half_pixel_for_nn, tf_crop_and_resize)",
               r->coord);
  if (nearest && !one_of(nearest, resize_nearest_modes, ARRAY_LEN(resize_nearest_modes)))
    return bad(im, "nearest_mode='%s' is not one of ONNX's (round_prefer_floor, round_prefer_ceil, "
                   "floor, ceil)",
               nearest);
  r->nearest = nearest ? nearest : v10 ? NULL : "round_prefer_floor";
  r->exclude_outside = exclude != 0;
  /* Nearest has no kernel to widen: antialias changes nothing there. */
  r->antialias = antialias != 0 && r->mode != RZ_NEAREST;
  return true;
}

/* Which axes the scales, sizes and roi name (opset 18's axes). */
static bool resize_axis_list(Imp *im, int rank, int *k, int *axes) {
  int n;
  const int64_t *v;
  if (!attr_ints(im, "axes", &n, &v)) return false;
  if (n < 0) {
    for (int i = 0; i < rank; i++) axes[i] = i;
    *k = rank;
    return true;
  }
  bool seen[DL_MAX_RANK] = {false};
  if (n > rank) return bad(im, "'axes' names %d axes of a rank-%d input", n, rank);
  for (int i = 0; i < n; i++) {
    if (!norm_axis(im, v[i], rank, &axes[i])) return false;
    if (seen[axes[i]]) return bad(im, "axis %" PRId64 " is named twice in 'axes'", v[i]);
    seen[axes[i]] = true;
  }
  *k = n;
  return true;
}

static bool resize_by_scales(Imp *im, const double *scale, int k, const int *axes, ResizeAxis *ax) {
  for (int i = 0; i < k; i++) {
    ResizeAxis *a = &ax[axes[i]];
    double s = scale[i], len = s * (double)a->in;
    if (!(s > 0) || !isfinite(s)) return bad(im, "scale %g on dim %d is not a positive number", s, axes[i]);
    if (!(len < (double)DL_MAX_ELEMS))
      return bad(im, "scale %g on dim %d gives too large an output", s, axes[i]);
    a->num = s, a->den = 1, a->scale = s, a->len = len, a->out = (int64_t)floor(len);
    if (a->out < 1)
      return bad(im, "scale %g on dim %d of %" PRId64 " gives an empty output (dlcc has no empty tensors)", s,
                 axes[i], a->in);
  }
  return true;
}

/* Sizes, stretched or (keep_aspect_ratio_policy) scaled alike on all the
 * axes by the smallest or largest ratio, rounded half up. */
static bool resize_by_sizes(Imp *im, const int64_t *size, int k, const int *axes, const char *policy,
                            ResizeAxis *ax) {
  bool stretch = strcmp(policy, "stretch") == 0, larger = strcmp(policy, "not_smaller") == 0;
  if (!stretch && !larger && strcmp(policy, "not_larger") != 0)
    return bad(im, "keep_aspect_ratio_policy='%s' is not one of ONNX's (stretch, not_larger, not_smaller)",
               policy);
  int pick = 0;
  for (int i = 0; i < k; i++) {
    if (size[i] < 1 || size[i] > DL_MAX_ELEMS)
      return bad(im, "size %" PRId64 " on dim %d is not supported (dlcc has no empty tensors)", size[i],
                 axes[i]);
    /* size[i] / in[i] against size[pick] / in[pick], exactly */
    double here = (double)size[i] * (double)ax[axes[pick]].in;
    double there = (double)size[pick] * (double)ax[axes[i]].in;
    if (larger ? here > there : here < there) pick = i;
  }
  for (int i = 0; i < k; i++) {
    ResizeAxis *a = &ax[axes[i]];
    int by = stretch ? i : pick;
    a->num = (double)size[by], a->den = (double)ax[axes[by]].in, a->scale = a->num / a->den;
    if (stretch) {
      a->out = size[i], a->len = (double)size[i];
      continue;
    }
    a->len = a->num * (double)a->in / a->den;
    if (!(a->len < (double)DL_MAX_ELEMS))
      return bad(im, "keep_aspect_ratio_policy gives dim %d too large an output", axes[i]);
    a->out = (int64_t)(a->len + 0.5);
    if (a->out < 1) return bad(im, "keep_aspect_ratio_policy gives dim %d an empty output", axes[i]);
  }
  return true;
}

/* Each axis's lengths, scale and roi from the scales or the sizes (an
 * attribute for Upsample-7, input 1 for Upsample-9 and Resize-10, inputs
 * 2 and 3 from Resize-11 on; an empty one counts as not given). */
static bool resize_geometry(Imp *im, ONode *n, bool upsample, bool v10, const Resize *r, ResizeAxis *ax) {
  const Val *x = n->in[0];
  int rank = x->type.rank, k = 0, axes[DL_MAX_RANK];
  const char *policy;
  if (!resize_axis_list(im, rank, &k, axes) || !attr_str(im, "keep_aspect_ratio_policy", "stretch", &policy))
    return false;
  for (int d = 0; d < rank; d++)
    ax[d] = (ResizeAxis){x->type.dims[d], x->type.dims[d], 1, 1, 1, (double)x->type.dims[d], 0, 1};
  Val *roi = v10 ? NULL : given(in_opt(n, 1)), *sv = given(in_opt(n, v10 ? 1 : 2));
  Val *zv = v10 ? NULL : given(in_opt(n, 3));
  double scale[DL_MAX_RANK];
  if (sv && zv) return bad(im, "both scales and sizes are given (ONNX allows one)");
  if (sv) {
    const Tensor *t = need_const(im, sv, "the scales");
    if (!t) return false;
    if (ir_type_numel(&t->type) != k) return bad(im, "the scales need %d values, one per axis", k);
    for (int i = 0; i < k; i++) scale[i] = ir_tensor_get(t, i);
  } else if (upsample && in_opt(n, 1) == NULL) {
    const Onnx__AttributeProto *a = find_attr(im, "scales");
    if (!a || (int)a->n_floats != k) return bad(im, "the scales need %d values, one per axis", k);
    for (int i = 0; i < k; i++) scale[i] = a->floats[i];
  } else if (zv) {
    int64_t size[64];
    int got;
    if (!const_ints(im, zv, "the sizes", &got, size)) return false;
    if (got != k) return bad(im, "the sizes need %d values, one per axis", k);
    if (!resize_by_sizes(im, size, k, axes, policy, ax)) return false;
  } else {
    return bad(im, "neither scales nor sizes are given");
  }
  if (!zv && !resize_by_scales(im, scale, k, axes, ax)) return false;
  if (roi && strcmp(r->coord, "tf_crop_and_resize") == 0) {
    const Tensor *t = need_const(im, roi, "the roi");
    if (!t) return false;
    if (ir_type_numel(&t->type) != 2 * k) return bad(im, "the roi needs %d values, starts then ends", 2 * k);
    for (int i = 0; i < k; i++) {
      ax[axes[i]].roi_lo = ir_tensor_get(t, i);
      ax[axes[i]].roi_hi = ir_tensor_get(t, k + i);
    }
  }
  return true;
}

/* Linear and cubic blend in f32 for integer inputs, then saturate and
 * truncate back (onnxruntime truncates). */
static Val *resize_to_dtype(Imp *im, Val *y, DType dt) {
  if (!y || y->type.dtype == dt) return y;
  double lo = dt == TY_U8 ? 0 : dt == TY_I8 ? -128 : dt == TY_I32 ? -2147483648.0 : -9.2e18;
  double hi = dt == TY_U8 ? 255 : dt == TY_I8 ? 127 : dt == TY_I32 ? 2147483647.0 : 9.2e18;
  Emit e;
  Node *c = begin(im, &e, OP_CLIP, 1, &y);
  ir_set_float(im->g, c, "min", lo);
  ir_set_float(im->g, c, "max", hi);
  return cast(im, emit1(im, &e), dt);
}

static bool op_resize(Imp *im, ONode *n) {
  bool upsample = strcmp(im->np->op_type, "Upsample") == 0, v10 = upsample || im->opset < 11;
  Val *x = in_req(im, n, 0);
  Resize r;
  ResizeAxis ax[DL_MAX_RANK];
  if (!x || !resize_attrs(im, v10, &r) || !resize_geometry(im, n, upsample, v10, &r, ax)) return false;
  DType dt = x->type.dtype;
  bool blend = r.mode != RZ_NEAREST;
  if (blend && dt == TY_BOOL) return bad(im, "mode linear and cubic take no bool tensor (nearest does)");
  Val *y = blend && !ir_dtype_is_float(dt) ? cast(im, x, TY_F32) : x;
  for (int d = 0; d < x->type.rank && y; d++) {
    ResizeTable t = {0};
    bool ok = resize_table(im, &r, &ax[d], &t);
    if (ok && !resize_is_identity(&t, &ax[d])) y = resize_apply(im, y, d, &t, ax[d].out, r.extrapolation);
    resize_table_free(&t);
    if (!ok) return false;
  }
  return (n->out[0] = resize_to_dtype(im, y, dt));
}

/* GridSample (opset 16; opset 20's names linear and cubic for 4-d) onto
 * grid_sample. */
static bool op_grid_sample(Imp *im, ONode *n) {
  Val *in[2] = {in_req(im, n, 0), in_req(im, n, 1)};
  const char *mode, *pad;
  int64_t align;
  if (!in[0] || !in[1] || !attr_str(im, "mode", im->opset >= 20 ? "linear" : "bilinear", &mode) ||
      !attr_str(im, "padding_mode", "zeros", &pad) || !attr_int(im, "align_corners", 0, &align))
    return false;
  if (strcmp(mode, "linear") == 0) mode = "bilinear";
  if (strcmp(mode, "cubic") == 0) mode = "bicubic";
  if (in[0]->type.rank != 4) return bad(im, "only 4-d [N, C, H, W] inputs are supported");
  if (!need_float_in(im, in[0]) || !need_float_in(im, in[1])) return false;
  Emit e;
  Node *g = begin(im, &e, OP_GRID_SAMPLE, 2, in);
  ir_set_str(im->g, g, "mode", mode);
  ir_set_str(im->g, g, "padding_mode", pad);
  ir_set_int(im->g, g, "align_corners", align);
  return (n->out[0] = emit1(im, &e));
}

static bool op_pool(Imp *im, ONode *n) {
  bool is_max = strcmp(im->np->op_type, "MaxPool") == 0;
  Val *x = in_req(im, n, 0);
  int64_t ceil_mode, include_pad = 0;
  if (!x || !attr_int(im, "ceil_mode", 0, &ceil_mode)) return false;
  if (is_max && !attr_only(im, "storage_order", 0, 0)) return false;
  if (!is_max && !attr_int(im, "count_include_pad", 0, &include_pad)) return false;
  if (is_max && n->n_out > 1 && n->want[1]) return bad(im, "the Indices output is not supported");
  Window win;
  if (!spatial_window(im, x, NULL, 3, &win)) return false;
  int m = win.nsp;
  for (int i = 0; i < m; i++)
    if (win.pad[i] > win.kernel[i] / 2 || win.pad[m + i] > win.kernel[i] / 2)
      return bad(im, "padding larger than half the kernel is not supported");
  Val *x2 = to_2d(im, x);
  if (!x2) return false;
  Emit e;
  OpKind op = is_max ? (m == 3 ? OP_MAXPOOL3D : OP_MAXPOOL2D) : (m == 3 ? OP_AVGPOOL3D : OP_AVGPOOL2D);
  Node *p = begin(im, &e, op, 1, &x2);
  set_window(im, p, &win, true);
  ir_set_int(im->g, p, "ceil_mode", ceil_mode != 0);
  if (!is_max) ir_set_int(im->g, p, "count_include_pad", include_pad != 0);
  return (n->out[0] = from_2d(im, emit1(im, &e), win.spatial));
}

static bool op_global_pool(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  if (!x) return false;
  if (x->type.rank < 3) return bad(im, "needs an input [N, C, ...] of rank >= 3");
  bool is_max = strcmp(im->np->op_type, "GlobalMaxPool") == 0;
  if (!is_max && x->type.rank == 4) return (n->out[0] = op1(im, OP_GLOBAL_AVGPOOL, x));
  int64_t axes[DL_MAX_RANK];
  int k = 0;
  for (int d = 2; d < x->type.rank; d++) axes[k++] = d;
  return (n->out[0] = reduce(im, is_max ? OP_REDUCE_MAX : OP_REDUCE_MEAN, x, k, axes, true));
}

/* ---- normalizations ---- */

static bool op_batchnorm(Imp *im, ONode *n) {
  double eps, momentum;
  if (!attr_float(im, "epsilon", 1e-5, &eps) || !attr_float(im, "momentum", 0.9, &momentum) ||
      !attr_only(im, "training_mode", 0, 0) || !attr_only(im, "spatial", 1, 1) ||
      !attr_only(im, "is_test", 1, 1))
    return false;
  for (int i = 1; i < n->n_out; i++)
    if (n->want[i]) return bad(im, "output %d (training statistics) is not supported", i + 1);
  Val *in[5];
  for (int i = 0; i < 5; i++)
    if (!(in[i] = in_req(im, n, i))) return false;
  Emit e;
  Node *b = begin(im, &e, OP_BATCHNORM, 5, in);
  ir_set_float(im->g, b, "eps", eps);
  return (n->out[0] = emit1(im, &e));
}

/* mean and 1/sqrt(var + eps) over axes, kept as size-1 dims. */
static void moments(Imp *im, Val *x, int k, const int64_t *axes, double eps, Val **mean, Val **inv) {
  *mean = reduce(im, OP_REDUCE_MEAN, x, k, axes, true);
  Val *d = op2(im, OP_SUB, x, *mean);
  Val *var = reduce(im, OP_REDUCE_MEAN, op2(im, OP_MUL, d, d), k, axes, true);
  *inv = op1(im, OP_RSQRT, op2s(im, OP_ADD, var, eps));
}

static bool op_layernorm(Imp *im, ONode *n) {
  int64_t axis_attr;
  double eps;
  Val *x = in_req(im, n, 0), *scale = in_opt(n, 1), *bias = in_opt(n, 2);
  if (!x || !attr_int(im, "axis", -1, &axis_attr) || !attr_float(im, "epsilon", 1e-5, &eps) ||
      !attr_only(im, "stash_type", 1, 1) || !need_float_in(im, x))
    return false;
  int axis;
  if (!norm_axis(im, axis_attr, x->type.rank, &axis)) return false;
  int r = x->type.rank;
  const int64_t *tail = x->type.dims + axis;
  bool exact_scale = !scale || same_dims(&scale->type, r - axis, tail);
  bool exact_bias = !bias || same_dims(&bias->type, r - axis, tail);
  Val *in[3] = {x, NULL, NULL};
  int k = 1;
  if (exact_scale && exact_bias && scale) in[k++] = scale;
  if (exact_scale && exact_bias && scale && bias) in[k++] = bias;
  Emit e;
  Node *ln = begin(im, &e, OP_LAYERNORM, k, in);
  ir_set_int(im->g, ln, "axis", axis);
  ir_set_float(im->g, ln, "eps", eps);
  Val *y = emit1(im, &e);
  if (scale && !(exact_scale && exact_bias)) y = op2(im, OP_MUL, y, scale);
  if (bias && (!exact_scale || !exact_bias || !scale)) y = op2(im, OP_ADD, y, bias);
  n->out[0] = y;
  if ((n->n_out > 1 && n->want[1]) || (n->n_out > 2 && n->want[2])) {
    int64_t axes[DL_MAX_RANK];
    for (int d = axis; d < r; d++) axes[d - axis] = d;
    moments(im, x, r - axis, axes, eps, &n->out[1], &n->out[2]);
  }
  return y != NULL;
}

/* x / (bias + alpha / size * sum of x^2 over the size channels around
 * each one)^beta: the window sum is an avgpool2d (which divides by size)
 * over [N, 1, C, H*W...] with a size x 1 kernel, zero-padded. */
static bool op_lrn(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  double alpha, beta, bias;
  int64_t size;
  if (!x || !attr_float(im, "alpha", 1e-4, &alpha) || !attr_float(im, "beta", 0.75, &beta) ||
      !attr_float(im, "bias", 1.0, &bias) || !attr_int(im, "size", 0, &size) || !need_float_in(im, x))
    return false;
  int r = x->type.rank;
  if (r < 2) return bad(im, "the input must be [N, C, ...], got rank %d", r);
  /* Past 2C+1 the window only adds padding. */
  if (size < 1 || size > 2 * x->type.dims[1] + 1)
    return bad(im, "size %" PRId64 " must be between 1 and 2C+1 = %" PRId64 " (the attribute is required)", size,
               2 * x->type.dims[1] + 1);
  int64_t rest = 1;
  for (int d = 2; d < r; d++) rest *= x->type.dims[d];
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  Val *sq = reshape(im, op2(im, OP_MUL, x, x), 4, (int64_t[]){x->type.dims[0], 1, x->type.dims[1], rest});
  if (!sq) return false;
  Emit e;
  Node *p = begin(im, &e, OP_AVGPOOL2D, 1, &sq);
  ir_set_ints(im->g, p, "kernel", 2, (int64_t[]){size, 1});
  ir_set_ints(im->g, p, "stride", 2, (int64_t[]){1, 1});
  ir_set_ints(im->g, p, "pad", 4, (int64_t[]){lo, 0, hi, 0});
  ir_set_int(im->g, p, "count_include_pad", 1);
  Val *avg = reshape(im, emit1(im, &e), r, x->type.dims);
  Val *den = op2s(im, OP_POW, op2s(im, OP_ADD, op2s(im, OP_MUL, avg, alpha), bias), beta);
  return (n->out[0] = op2(im, OP_DIV, x, den));
}

static bool op_instancenorm(Imp *im, ONode *n) {
  double eps;
  Val *x = in_req(im, n, 0), *scale = in_req(im, n, 1), *bias = in_req(im, n, 2);
  if (!x || !scale || !bias || !attr_float(im, "epsilon", 1e-5, &eps) || !need_float_in(im, x))
    return false;
  int r = x->type.rank;
  if (r < 3) return bad(im, "needs an input [N, C, ...] of rank >= 3");
  int64_t axes[DL_MAX_RANK], cshape[DL_MAX_RANK];
  for (int d = 2; d < r; d++) axes[d - 2] = d;
  for (int d = 0; d < r; d++) cshape[d] = d == 1 ? x->type.dims[1] : 1;
  Val *mean, *inv;
  moments(im, x, r - 2, axes, eps, &mean, &inv);
  Val *y = op2(im, OP_MUL, op2(im, OP_SUB, x, mean), inv);
  y = op2(im, OP_MUL, y, reshape(im, scale, r, cshape));
  return (n->out[0] = op2(im, OP_ADD, y, reshape(im, bias, r, cshape)));
}

static bool op_softmax(Imp *im, ONode *n) {
  bool log_sm = strcmp(im->np->op_type, "LogSoftmax") == 0;
  int64_t axis_attr;
  Val *x = in_req(im, n, 0);
  if (!x || !attr_int(im, "axis", im->opset >= 13 ? -1 : 1, &axis_attr)) return false;
  int r = x->type.rank, axis;
  if (r == 0) return bad(im, "a 0-d input is not supported");
  if (!norm_axis(im, axis_attr, r, &axis)) return false;
  Val *x2 = x;
  /* Before opset 13 the input is seen as 2-d [outer, inner] around axis. */
  if (im->opset < 13 && axis != r - 1) {
    int64_t d[2] = {1, 1};
    for (int i = 0; i < r; i++) d[i >= axis] *= x->type.dims[i];
    x2 = reshape(im, x, 2, d);
    axis = 1;
  }
  if (!x2) return false;
  Emit e;
  Node *s = begin(im, &e, log_sm ? OP_LOG_SOFTMAX : OP_SOFTMAX, 1, &x2);
  ir_set_int(im->g, s, "axis", axis);
  return (n->out[0] = reshape(im, emit1(im, &e), r, x->type.dims));
}

/* ---- losses ---- */

/* NegativeLogLikelihoodLoss of logp [N, C, d...] at target [N, d...]:
 * -logp[n, target, d...] (a gather_elements along C), 0 where the
 * target is ignore_index, times weight[target]; reduction "none", "sum"
 * or "mean" (the sum over the weights' sum when there are weights or an
 * ignore_index, else over the count), as ONNX's reference computes it. */
static Val *nll_loss(Imp *im, Val *logp, Val *target, Val *weight, const char *reduction, bool has_ignore,
                     int64_t ignore) {
  int r = logp->type.rank;
  if (r < 2) {
    bad(im, "the input must be [N, C, ...], got rank %d", r);
    return NULL;
  }
  bool dims_ok = target->type.rank == r - 1;
  for (int d = 0; dims_ok && d < r - 1; d++) dims_ok = target->type.dims[d] == logp->type.dims[d ? d + 1 : 0];
  if (!dims_ok || ir_dtype_is_float(target->type.dtype) || target->type.dtype == TY_BOOL) {
    char ts[IR_TYPE_STR_MAX], xs[IR_TYPE_STR_MAX];
    bad(im, "the target must be integer [N, d...] for an input [N, C, d...]: got %s for %s",
        ir_type_str(&target->type, ts, sizeof ts), ir_type_str(&logp->type, xs, sizeof xs));
    return NULL;
  }
  if (strcmp(reduction, "none") != 0 && strcmp(reduction, "sum") != 0 && strcmp(reduction, "mean") != 0) {
    bad(im, "reduction='%s' is not supported (none, sum, mean)", reduction);
    return NULL;
  }
  DType dt = logp->type.dtype;
  Val *t = cast(im, target, TY_I64), *ignored = NULL;
  if (has_ignore) {
    ignored = op2s(im, OP_EQUAL, t, (double)ignore);
    t = where(im, ignored, scalar(im, 0, TY_I64), t);
  }
  int64_t dims[DL_MAX_RANK];
  for (int d = 0; d < r; d++) dims[d] = d == 1 ? 1 : logp->type.dims[d];
  Emit e;
  Node *g = begin(im, &e, OP_GATHER_ELEMENTS, 2, (Val *[]){logp, reshape(im, t, r, dims)});
  ir_set_int(im->g, g, "axis", 1);
  Val *loss = op1(im, OP_NEG, reshape(im, emit1(im, &e), r - 1, target->type.dims));
  Val *w = NULL;
  if (weight) w = gather(im, weight, t, 0);
  if (ignored) {
    Val *zero = scalar(im, 0, dt);
    loss = where(im, ignored, zero, loss);
    w = where(im, ignored, zero, w ? w : scalar(im, 1, dt));
  }
  if (w) loss = op2(im, OP_MUL, loss, w);
  if (strcmp(reduction, "none") == 0 || !loss) return loss;
  int64_t all[DL_MAX_RANK];
  for (int d = 0; d < r - 1; d++) all[d] = d;
  Val *sum = reduce(im, OP_REDUCE_SUM, loss, r - 1, all, false);
  if (strcmp(reduction, "sum") == 0) return sum;
  if (!w) return reduce(im, OP_REDUCE_MEAN, loss, r - 1, all, false);
  return op2(im, OP_DIV, sum, reduce(im, OP_REDUCE_SUM, w, r - 1, all, false));
}

static bool loss_attrs(Imp *im, const char **reduction, bool *has_ignore, int64_t *ignore) {
  if (!attr_str(im, "reduction", "mean", reduction)) return false;
  *has_ignore = find_attr(im, "ignore_index") != NULL;
  return attr_int(im, "ignore_index", 0, ignore);
}

static bool op_nll_loss(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0), *t = in_req(im, n, 1), *w = in_opt(n, 2);
  const char *red;
  bool has_ignore;
  int64_t ignore;
  if (!x || !t || !loss_attrs(im, &red, &has_ignore, &ignore) || !need_float_in(im, x)) return false;
  return (n->out[0] = nll_loss(im, x, t, w, red, has_ignore, ignore));
}

/* log_softmax over the classes, then NegativeLogLikelihoodLoss; the
 * second output is the log_softmax. */
static bool op_softmax_ce_loss(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0), *t = in_req(im, n, 1), *w = in_opt(n, 2);
  const char *red;
  bool has_ignore;
  int64_t ignore;
  if (!x || !t || !loss_attrs(im, &red, &has_ignore, &ignore) || !need_float_in(im, x)) return false;
  if (x->type.rank < 2) return bad(im, "the scores must be [N, C, ...], got rank %d", x->type.rank);
  Emit e;
  Node *sm = begin(im, &e, OP_LOG_SOFTMAX, 1, &x);
  ir_set_int(im->g, sm, "axis", 1);
  Val *logp = emit1(im, &e);
  if (!logp) return false;
  if (n->n_out > 1) n->out[1] = logp;
  return (n->out[0] = nll_loss(im, logp, t, w, red, has_ignore, ignore));
}

/* ---- reductions ---- */

static bool op_reduce(Imp *im, ONode *n) {
  const char *t = im->np->op_type + strlen("Reduce");
  Val *x = in_req(im, n, 0);
  int64_t keep, noop;
  if (!x || !attr_int(im, "keepdims", 1, &keep) || !attr_int(im, "noop_with_empty_axes", 0, &noop))
    return false;
  /* Axes moved from an attribute to an input: ReduceSum at 13, the rest at 18. */
  bool from_input = im->opset >= (strcmp(t, "Sum") == 0 ? 13 : 18);
  int64_t given[64];
  int n_given = 0;
  bool have_axes = false;
  if (from_input) {
    if (in_opt(n, 1)) {
      if (!const_ints(im, n->in[1], "the axes", &n_given, given)) return false;
      have_axes = true;
    }
  } else {
    int na;
    const int64_t *a;
    if (!attr_ints(im, "axes", &na, &a)) return false;
    if (na >= 0) {
      if (na > 64) return bad(im, "too many axes");
      memcpy(given, a, sizeof(int64_t) * (size_t)na);
      n_given = na;
      have_axes = true;
    }
  }
  int r = x->type.rank, k = 0;
  int64_t axes[DL_MAX_RANK];
  if (have_axes && n_given > 0) {
    if (!norm_axes(im, n_given, given, r, &k, axes)) return false;
  } else if (!noop) {
    for (int d = 0; d < r; d++) axes[k++] = d;
  }
  Val *y = x;
  bool sumsq = strcmp(t, "SumSquare") == 0, l1 = strcmp(t, "L1") == 0, l2 = strcmp(t, "L2") == 0;
  bool logsum = strcmp(t, "LogSum") == 0, lse = strcmp(t, "LogSumExp") == 0;
  if (sumsq || l2) y = op2(im, OP_MUL, x, x);
  if (l1) y = op1(im, OP_ABS, x);
  OpKind op = strcmp(t, "Mean") == 0   ? OP_REDUCE_MEAN
              : strcmp(t, "Max") == 0  ? OP_REDUCE_MAX
              : strcmp(t, "Min") == 0  ? OP_REDUCE_MIN
              : strcmp(t, "Prod") == 0 ? OP_REDUCE_PROD
                                       : OP_REDUCE_SUM;
  if (k == 0) {
    /* Nothing to reduce: the input (after the elementwise part). */
    if (l2) y = op1(im, OP_SQRT, y);
    if (logsum) y = op1(im, OP_LOG, y);
    return (n->out[0] = y);
  }
  if (lse) {
    /* log(sum(exp(x - max))) + max: no overflow for large x. */
    Val *m = reduce(im, OP_REDUCE_MAX, x, k, axes, true);
    Val *s = reduce(im, OP_REDUCE_SUM, op1(im, OP_EXP, op2(im, OP_SUB, x, m)), k, axes, keep);
    Val *mk = keep ? m : reduce(im, OP_REDUCE_MAX, x, k, axes, false);
    return (n->out[0] = op2(im, OP_ADD, op1(im, OP_LOG, s), mk));
  }
  y = reduce(im, op, y, k, axes, keep);
  if (l2) y = op1(im, OP_SQRT, y);
  if (logsum) y = op1(im, OP_LOG, y);
  return (n->out[0] = y);
}

static bool op_argmax(Imp *im, ONode *n) {
  bool is_min = strcmp(im->np->op_type, "ArgMin") == 0;
  int64_t axis_attr, keep;
  Val *x = in_req(im, n, 0);
  int64_t last;
  if (!x || !attr_int(im, "axis", 0, &axis_attr) || !attr_int(im, "keepdims", 1, &keep) ||
      !attr_int(im, "select_last_index", 0, &last))
    return false;
  int axis;
  if (!norm_axis(im, axis_attr, x->type.rank, &axis)) return false;
  Val *src = is_min ? op1(im, OP_NEG, x) : x;
  /* The last maximum is the first one of the reversed axis. */
  if (last) src = reverse_axis(im, src, axis);
  if (!src) return false;
  Emit e;
  Node *a = begin(im, &e, OP_ARGMAX, 1, &src);
  ir_set_int(im->g, a, "axis", axis);
  ir_set_int(im->g, a, "keepdims", keep != 0);
  Val *y = emit1(im, &e);
  if (last && y) y = op2(im, OP_SUB, scalar(im, (double)(x->type.dims[axis] - 1), TY_I64), y);
  return (n->out[0] = y);
}

/* 1 where the row's first maximum is, 0 elsewhere: argmax, then equal
 * to an iota along the axis.  Before opset 13 the input is seen as 2-d
 * around axis (default 1), as Softmax. */
static bool op_hardmax(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  int64_t axis_attr;
  if (!x || !attr_int(im, "axis", im->opset >= 13 ? -1 : 1, &axis_attr)) return false;
  int r = x->type.rank, axis;
  if (r == 0) return bad(im, "a 0-d input is not supported");
  if (!norm_axis(im, axis_attr, r, &axis)) return false;
  Val *x2 = x;
  if (im->opset < 13) {
    int64_t d[2] = {1, 1};
    for (int i = 0; i < r; i++) d[i >= axis] *= x->type.dims[i];
    x2 = reshape(im, x, 2, d);
    axis = 1;
  }
  if (!x2) return false;
  Emit e;
  Node *a = begin(im, &e, OP_ARGMAX, 1, &x2);
  ir_set_int(im->g, a, "axis", axis);
  ir_set_int(im->g, a, "keepdims", 1);
  Val *hot = op2(im, OP_EQUAL, emit1(im, &e), iota_along(im, x2->type.rank, axis, x2->type.dims[axis]));
  return (n->out[0] = reshape(im, cast(im, hot, x->type.dtype), r, x->type.dims));
}

/* ---- shapes and data movement ---- */

static bool op_reshape(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0), *s = in_req(im, n, 1);
  int64_t allowzero;
  int64_t shape[64];
  int k;
  if (!x || !s || !attr_int(im, "allowzero", 0, &allowzero)) return false;
  if (!const_ints(im, s, "the target shape", &k, shape)) return false;
  if (k > DL_MAX_RANK) return bad(im, "rank %d is not supported (at most %d)", k, (int)DL_MAX_RANK);
  int infer = -1;
  int64_t have = ir_type_numel(&x->type), prod = 1;
  for (int i = 0; i < k; i++) {
    if (shape[i] == 0 && !allowzero) {
      if (i >= x->type.rank) return bad(im, "shape entry %d is 0 but the input has rank %d", i, x->type.rank);
      shape[i] = x->type.dims[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0) return bad(im, "the shape has more than one -1");
      infer = i;
      continue;
    }
    if (shape[i] == 0) return bad(im, "a 0 dim (allowzero=1): empty tensors are not supported");
    if (shape[i] < 0) return bad(im, "shape entry %" PRId64 " is invalid", shape[i]);
    if (shape[i] > DL_MAX_ELEMS || prod > DL_MAX_ELEMS / shape[i])
      return bad(im, "the target shape is too large");
    prod *= shape[i];
  }
  if (infer >= 0) {
    if (have % prod != 0)
      return bad(im, "cannot reshape %" PRId64 " elements with a -1 next to %" PRId64, have, prod);
    shape[infer] = have / prod;
  }
  return (n->out[0] = reshape(im, x, k, shape));
}

static bool op_flatten(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  int64_t axis;
  if (!x || !attr_int(im, "axis", 1, &axis)) return false;
  int r = x->type.rank;
  if (axis < -r || axis > r) return bad(im, "axis %" PRId64 " is out of range for rank %d", axis, r);
  if (axis < 0) axis += r;
  int64_t d[2] = {1, 1};
  for (int i = 0; i < r; i++) d[i >= axis] *= x->type.dims[i];
  return (n->out[0] = reshape(im, x, 2, d));
}

/* Axes of Squeeze/Unsqueeze: an attribute before opset 13, an input after. */
static bool squeeze_axes(Imp *im, ONode *n, int *k, int64_t *axes, bool *given) {
  *given = false;
  *k = 0;
  if (im->opset < 13) {
    int na;
    const int64_t *a;
    if (!attr_ints(im, "axes", &na, &a)) return false;
    if (na >= 0) {
      memcpy(axes, a, sizeof(int64_t) * (size_t)na);
      *k = na, *given = true;
    }
    return true;
  }
  if (!in_opt(n, 1)) return true;
  *given = true;
  return const_ints(im, n->in[1], "the axes", k, axes);
}

static bool op_squeeze(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  int k;
  int64_t axes[64];
  bool given;
  if (!x || !squeeze_axes(im, n, &k, axes, &given)) return false;
  int r = x->type.rank;
  bool drop[DL_MAX_RANK] = {false};
  for (int i = 0; i < k; i++) {
    int a;
    if (!norm_axis(im, axes[i], r, &a)) return false;
    if (x->type.dims[a] != 1)
      return bad(im, "cannot squeeze axis %d of size %" PRId64, a, x->type.dims[a]);
    drop[a] = true;
  }
  int64_t d[DL_MAX_RANK];
  int m = 0;
  for (int i = 0; i < r; i++)
    if (!(given ? drop[i] : x->type.dims[i] == 1)) d[m++] = x->type.dims[i];
  return (n->out[0] = reshape(im, x, m, d));
}

static bool op_unsqueeze(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  int k;
  int64_t axes[64];
  bool given;
  if (!x || !squeeze_axes(im, n, &k, axes, &given)) return false;
  if (!given) return bad(im, "the axes are missing");
  int r = x->type.rank + k;
  if (r > DL_MAX_RANK) return bad(im, "rank %d is not supported (at most %d)", r, (int)DL_MAX_RANK);
  bool ins[DL_MAX_RANK] = {false};
  for (int i = 0; i < k; i++) {
    int a;
    if (!norm_axis(im, axes[i], r, &a)) return false;
    if (ins[a]) return bad(im, "axis %d is given twice", a);
    ins[a] = true;
  }
  int64_t d[DL_MAX_RANK];
  for (int i = 0, j = 0; i < r; i++) d[i] = ins[i] ? 1 : x->type.dims[j++];
  return (n->out[0] = reshape(im, x, r, d));
}

static bool op_transpose(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  int np;
  const int64_t *p;
  if (!x || !attr_ints(im, "perm", &np, &p)) return false;
  int r = x->type.rank;
  int64_t perm[DL_MAX_RANK];
  if (np >= 0 && np != r) return bad(im, "perm has %d entries for rank %d", np, r);
  for (int i = 0; i < r; i++) perm[i] = np >= 0 ? p[i] : r - 1 - i;
  if (r == 0) return (n->out[0] = x);
  Emit e;
  Node *t = begin(im, &e, OP_TRANSPOSE, 1, &x);
  ir_set_ints(im->g, t, "perm", r, perm);
  return (n->out[0] = emit1(im, &e));
}

static bool op_concat(Imp *im, ONode *n) {
  int64_t axis_attr;
  if (n->n_in < 1) return bad(im, "needs at least one input");
  if (!attr_int(im, "axis", INT64_MIN, &axis_attr)) return false;
  if (axis_attr == INT64_MIN) return bad(im, "attribute 'axis' is missing");
  for (int i = 0; i < n->n_in; i++)
    if (!in_req(im, n, i)) return false;
  int axis;
  if (!norm_axis(im, axis_attr, n->in[0]->type.rank, &axis)) return false;
  return (n->out[0] = concat(im, n->n_in, n->in, axis));
}

static bool op_split(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  int64_t axis_attr, num;
  if (!x || !attr_int(im, "axis", 0, &axis_attr) || !attr_int(im, "num_outputs", 0, &num)) return false;
  int axis;
  if (!norm_axis(im, axis_attr, x->type.rank, &axis)) return false;
  int64_t sizes[64];
  int k = -1;
  if (im->opset < 13) {
    const int64_t *s;
    if (!attr_ints(im, "split", &k, &s)) return false;
    if (k > 0) memcpy(sizes, s, sizeof(int64_t) * (size_t)k);
  } else if (in_opt(n, 1)) {
    if (!const_ints(im, n->in[1], "the split sizes", &k, sizes)) return false;
  }
  int64_t dim = x->type.dims[axis];
  if (k < 0) {
    k = n->n_out;
    if (k < 1 || k > 64) return bad(im, "cannot split into %d outputs", k);
    int64_t part = (dim + k - 1) / k;
    if (im->opset < 18 && dim % k != 0)
      return bad(im, "dim %" PRId64 " does not split into %d equal parts", dim, k);
    for (int i = 0; i < k; i++) sizes[i] = i < k - 1 ? part : dim - part * (k - 1);
  }
  if (k != n->n_out) return bad(im, "%d split sizes for %d outputs", k, n->n_out);
  int64_t at = 0;
  for (int i = 0; i < k; i++) {
    if (sizes[i] < 1) return bad(im, "split size %" PRId64 ": empty tensors are not supported", sizes[i]);
    if (at + sizes[i] > dim) return bad(im, "the split sizes exceed dim %" PRId64, dim);
    if (n->want[i] && !(n->out[i] = slice_axis(im, x, axis, at, at + sizes[i], 1))) return false;
    at += sizes[i];
  }
  if (at != dim) return bad(im, "the split sizes add up to %" PRId64 ", not %" PRId64, at, dim);
  return true;
}

static bool op_slice(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  if (!x) return false;
  int64_t starts[64], ends[64], axes[64], steps[64];
  int ks, ke, ka = -1, kt = -1;
  if (im->opset < 10) {
    const int64_t *s, *e, *a;
    if (!attr_ints(im, "starts", &ks, &s) || !attr_ints(im, "ends", &ke, &e) ||
        !attr_ints(im, "axes", &ka, &a))
      return false;
    if (ks < 0 || ke < 0) return bad(im, "attributes 'starts' and 'ends' are required");
    memcpy(starts, s, sizeof(int64_t) * (size_t)ks);
    memcpy(ends, e, sizeof(int64_t) * (size_t)ke);
    if (ka > 0) memcpy(axes, a, sizeof(int64_t) * (size_t)ka);
  } else {
    Val *vs = in_req(im, n, 1), *ve = in_req(im, n, 2);
    if (!vs || !ve || !const_ints(im, vs, "the starts", &ks, starts) ||
        !const_ints(im, ve, "the ends", &ke, ends))
      return false;
    if (in_opt(n, 3) && !const_ints(im, n->in[3], "the axes", &ka, axes)) return false;
    if (in_opt(n, 4) && !const_ints(im, n->in[4], "the steps", &kt, steps)) return false;
  }
  int r = x->type.rank;
  if (ke != ks || (ka >= 0 && ka != ks) || (kt >= 0 && kt != ks))
    return bad(im, "starts, ends, axes and steps differ in length");
  int64_t s[DL_MAX_RANK], e[DL_MAX_RANK], st[DL_MAX_RANK];
  bool seen[DL_MAX_RANK] = {false};
  for (int d = 0; d < r; d++) s[d] = 0, e[d] = x->type.dims[d], st[d] = 1;
  for (int i = 0; i < ks; i++) {
    int a;
    if (!norm_axis(im, ka >= 0 ? axes[i] : i, r, &a)) return false;
    if (seen[a]) return bad(im, "axis %d is sliced twice", a);
    seen[a] = true;
    int64_t dim = x->type.dims[a], step = kt >= 0 ? steps[i] : 1;
    if (step == 0) return bad(im, "a step of 0 is invalid");
    int64_t b = starts[i], en = ends[i];
    if (b < 0) b += dim;
    if (en < 0) en += dim;
    int64_t hi = step > 0 ? dim : dim - 1, en_lo = step > 0 ? 0 : -1;
    b = b < 0 ? 0 : b > hi ? hi : b;
    en = en < en_lo ? en_lo : en > hi ? hi : en;
    s[a] = b, e[a] = en, st[a] = step;
    if ((step > 0 && b >= en) || (step < 0 && b <= en))
      return bad(im, "the slice of axis %d is empty: empty tensors are not supported", a);
  }
  /* Negative steps: a gather of the chosen indices. */
  Val *y = x;
  bool any_pos = false;
  for (int d = 0; d < r; d++) {
    if (st[d] > 0) {
      any_pos |= s[d] != 0 || e[d] != x->type.dims[d] || st[d] != 1;
      continue;
    }
    int64_t count = (s[d] - e[d] - 1) / -st[d] + 1;
    int64_t dim = count;
    if (count > im->fold_max) return bad(im, "a negative-step slice of %" PRId64 " elements is not supported", count);
    TensorType it = ir_type_make(TY_I64, 1, &dim);
    Val *idx = known_new(im, &it);
    for (int64_t i = 0; i < count; i++) ((int64_t *)idx->k->data)[i] = s[d] + i * st[d];
    y = gather(im, y, idx, d);
    s[d] = 0, e[d] = count, st[d] = 1;
  }
  if (any_pos && y) {
    Emit em;
    Node *sl = begin(im, &em, OP_SLICE, 1, &y);
    ir_set_ints(im->g, sl, "starts", r, s);
    ir_set_ints(im->g, sl, "ends", r, e);
    ir_set_ints(im->g, sl, "steps", r, st);
    y = emit1(im, &em);
  }
  return (n->out[0] = y);
}

static bool op_gather(Imp *im, ONode *n) {
  Val *data = in_req(im, n, 0), *idx = in_req(im, n, 1);
  int64_t axis_attr;
  if (!data || !idx || !attr_int(im, "axis", 0, &axis_attr)) return false;
  int axis;
  if (!norm_axis(im, axis_attr, data->type.rank, &axis)) return false;
  if (idx->k) {
    int64_t dim = data->type.dims[axis], count = ir_type_numel(&idx->type);
    for (int64_t i = 0; i < count; i++) {
      double v = ir_tensor_get(idx->k, i);
      if (v < (double)-dim || v >= (double)dim)
        return bad(im, "index %.0f is out of range for axis %d of size %" PRId64, v, axis, dim);
    }
  }
  return (n->out[0] = gather(im, data, idx, axis));
}

/* ---- indexing by data, top-k, one-hot ---- */

/* Indices known at import must be in range: the kernels would clamp or
 * skip them where eval.c stops.  Index i of idx goes into data's dim
 * dims[i % q] (q 1: every index into dims[0]). */
static bool known_indices_ok(Imp *im, const Val *idx, const int64_t *dims, int q, int first_axis) {
  if (!idx->k) return true;
  for (int64_t i = 0, count = ir_type_numel(&idx->type); i < count; i++) {
    double v = ir_tensor_get(idx->k, i), dim = (double)dims[i % q];
    if (v < -dim || v >= dim)
      return bad(im, "index %.0f is out of range for axis %d of size %.0f", v, first_axis + (int)(i % q), dim);
  }
  return true;
}

static bool op_gather_elements(Imp *im, ONode *n) {
  Val *data = in_req(im, n, 0), *idx = in_req(im, n, 1);
  int64_t axis_attr;
  int axis;
  if (!data || !idx || !attr_int(im, "axis", 0, &axis_attr) || !norm_axis(im, axis_attr, data->type.rank, &axis))
    return false;
  if (!known_indices_ok(im, idx, data->type.dims + axis, 1, axis)) return false;
  Emit e;
  Node *g = begin(im, &e, OP_GATHER_ELEMENTS, 2, (Val *[]){data, idx});
  ir_set_int(im->g, g, "axis", axis);
  return (n->out[0] = emit1(im, &e));
}

static bool op_gather_nd(Imp *im, ONode *n) {
  Val *data = in_req(im, n, 0), *idx = in_req(im, n, 1);
  int64_t batch;
  if (!data || !idx || !attr_int(im, "batch_dims", 0, &batch)) return false;
  if (batch < 0 || batch >= data->type.rank || idx->type.rank < 1)
    return bad(im, "batch_dims %" PRId64 " does not fit data of rank %d", batch, data->type.rank);
  int q = (int)idx->type.dims[idx->type.rank - 1];
  if (q > data->type.rank - batch) return bad(im, "index rows of %d values are longer than data's dims", q);
  if (!known_indices_ok(im, idx, data->type.dims + batch, q, (int)batch)) return false;
  Emit e;
  Node *g = begin(im, &e, OP_GATHER_ND, 2, (Val *[]){data, idx});
  ir_set_int(im->g, g, "batch_dims", batch);
  return (n->out[0] = emit1(im, &e));
}

/* reduction: "none" before opset 16; add and mul from 16, max and min
 * from 18. */
static bool scatter_reduction(Imp *im, const char **out) {
  if (!attr_str(im, "reduction", "none", out)) return false;
  static const char *const known[] = {"none", "add", "mul", "max", "min"};
  for (size_t i = 0; i < ARRAY_LEN(known); i++)
    if (strcmp(*out, known[i]) == 0) return true;
  return bad(im, "reduction='%s' is not supported (none, add, mul, max, min)", *out);
}

/* ScatterElements, and Scatter (opset 9-10) which is the same without
 * a reduction. */
static bool op_scatter_elements(Imp *im, ONode *n) {
  Val *data = in_req(im, n, 0), *idx = in_req(im, n, 1), *upd = in_req(im, n, 2);
  int64_t axis_attr;
  int axis;
  const char *red = "none";
  if (!data || !idx || !upd || !attr_int(im, "axis", 0, &axis_attr) || !norm_axis(im, axis_attr, data->type.rank, &axis))
    return false;
  if (strcmp(im->np->op_type, "Scatter") != 0 && !scatter_reduction(im, &red)) return false;
  if (!known_indices_ok(im, idx, data->type.dims + axis, 1, axis)) return false;
  Emit e;
  Node *sc = begin(im, &e, OP_SCATTER_ELEMENTS, 3, (Val *[]){data, idx, upd});
  ir_set_int(im->g, sc, "axis", axis);
  ir_set_str(im->g, sc, "reduction", red);
  return (n->out[0] = emit1(im, &e));
}

static bool op_scatter_nd(Imp *im, ONode *n) {
  Val *data = in_req(im, n, 0), *idx = in_req(im, n, 1), *upd = in_req(im, n, 2);
  const char *red;
  if (!data || !idx || !upd || !scatter_reduction(im, &red)) return false;
  if (idx->type.rank < 1) return bad(im, "the indices must have rank >= 1");
  int q = (int)idx->type.dims[idx->type.rank - 1];
  if (q > data->type.rank) return bad(im, "index rows of %d values are longer than data's %d dims", q, data->type.rank);
  if (!known_indices_ok(im, idx, data->type.dims, q, 0)) return false;
  Emit e;
  Node *sc = begin(im, &e, OP_SCATTER_ND, 3, (Val *[]){data, idx, upd});
  ir_set_str(im->g, sc, "reduction", red);
  return (n->out[0] = emit1(im, &e));
}

/* k an attribute before opset 10, a constant input after.  sorted=0
 * leaves the order to the implementation: dlcc's is sorted anyway. */
static bool op_topk(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  int64_t axis_attr, largest, sorted, k = 0;
  if (!x || !attr_int(im, "axis", -1, &axis_attr) || !attr_int(im, "largest", 1, &largest) ||
      !attr_int(im, "sorted", 1, &sorted))
    return false;
  if (im->opset < 10) {
    if (!attr_int(im, "k", 0, &k)) return false;
  } else {
    Val *kv = in_req(im, n, 1);
    double d;
    if (!kv || !const_scalar(im, kv, "TopK's K", &d)) return false;
    k = (int64_t)d;
  }
  int axis;
  if (!norm_axis(im, axis_attr, x->type.rank, &axis)) return false;
  if (k < 1) return bad(im, "K=%" PRId64 ": empty tensors are not supported", k);
  Emit e;
  Node *t = begin(im, &e, OP_TOPK, 1, &x);
  ir_set_int(im->g, t, "k", k);
  ir_set_int(im->g, t, "axis", axis);
  ir_set_int(im->g, t, "largest", largest != 0);
  Val *out[8];
  if (!finish(im, &e, out)) return false;
  n->out[0] = out[0];
  if (n->n_out > 1) n->out[1] = out[1];
  return true;
}

/* indices (any number type, truncated), depth and values [off, on]:
 * equal(unsqueezed indices counted from the end, iota) picks on or off;
 * an index outside [-depth, depth) matches nothing. */
static bool op_one_hot(Imp *im, ONode *n) {
  Val *idx = in_req(im, n, 0), *vd = in_req(im, n, 1), *vals = in_req(im, n, 2);
  int64_t axis_attr;
  double depth_d;
  if (!idx || !vd || !vals || !attr_int(im, "axis", -1, &axis_attr) || !const_scalar(im, vd, "OneHot's depth", &depth_d))
    return false;
  int r = idx->type.rank;
  if (r + 1 > DL_MAX_RANK) return bad(im, "the result would have rank %d (at most %d)", r + 1, (int)DL_MAX_RANK);
  if (axis_attr < -(r + 1) || axis_attr > r) return bad(im, "axis %" PRId64 " is out of range for rank %d", axis_attr, r + 1);
  int axis = (int)(axis_attr < 0 ? axis_attr + r + 1 : axis_attr);
  int64_t depth = (int64_t)depth_d;
  if (depth < 1 || depth > im->fold_max) return bad(im, "depth %.0f is not supported", depth_d);
  if (ir_type_numel(&vals->type) != 2) return bad(im, "values must hold 2 elements [off, on]");
  int64_t dims[DL_MAX_RANK];
  for (int d = 0, j = 0; d <= r; d++) dims[d] = d == axis ? 1 : idx->type.dims[j++];
  Val *i64 = cast(im, idx, TY_I64);
  Val *wrapped = where(im, op2s(im, OP_LESS, i64, 0), op2s(im, OP_ADD, i64, (double)depth), i64);
  Val *hot = op2(im, OP_EQUAL, reshape(im, wrapped, r + 1, dims), iota_along(im, r + 1, axis, depth));
  Val *flat2 = reshape(im, vals, 1, (int64_t[]){2});
  Val *off = reshape(im, slice_axis(im, flat2, 0, 0, 1, 1), 0, NULL);
  Val *on = reshape(im, slice_axis(im, flat2, 0, 1, 2, 1), 0, NULL);
  return (n->out[0] = where(im, hot, on, off));
}

/* Ones where column - row == k: a constant of the input's shape. */
static bool op_eye_like(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  int64_t code, k;
  if (!x || !attr_int(im, "dtype", -1, &code) || !attr_int(im, "k", 0, &k)) return false;
  if (x->type.rank != 2) return bad(im, "the input must be 2-d, got rank %d", x->type.rank);
  DType dt = x->type.dtype;
  if (code >= 0 && !dtype_from_onnx((int32_t)code, &dt))
    return bad(im, "dtype %s is not supported (%s)", onnx_type_name((int32_t)code), dtypes_we_have);
  TensorType t = x->type;
  t.dtype = dt;
  Val *y = known_new(im, &t);
  for (int64_t i = 0; i < t.dims[0]; i++)
    for (int64_t j = 0; j < t.dims[1]; j++) ir_tensor_set(y->k, i * t.dims[1] + j, j - i == k);
  return (n->out[0] = y);
}

/* Broadcast of two shapes, right-aligned (Expand's rule). */
static bool broadcast_dims(const int64_t *a, int ra, const int64_t *b, int rb, int64_t *out, int *r) {
  *r = ra > rb ? ra : rb;
  for (int i = 0; i < *r; i++) {
    int64_t da = i < ra ? a[ra - 1 - i] : 1, db = i < rb ? b[rb - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out[*r - 1 - i] = da == 1 ? db : da;
  }
  return true;
}

static bool op_expand(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0), *s = in_req(im, n, 1);
  int64_t shape[64], out[DL_MAX_RANK];
  int k, r;
  if (!x || !s || !const_ints(im, s, "the shape", &k, shape)) return false;
  if (k > DL_MAX_RANK) return bad(im, "rank %d is not supported (at most %d)", k, (int)DL_MAX_RANK);
  for (int i = 0; i < k; i++)
    if (shape[i] < 1) return bad(im, "shape entry %" PRId64 " is not supported (dims must be >= 1)", shape[i]);
  if (!broadcast_dims(x->type.dims, x->type.rank, shape, k, out, &r))
    return bad(im, "the input does not broadcast to the shape");
  if (same_dims(&x->type, r, out)) return (n->out[0] = x);
  Emit e;
  Node *ex = begin(im, &e, OP_EXPAND, 1, &x);
  ir_set_ints(im->g, ex, "shape", r, out);
  return (n->out[0] = emit1(im, &e));
}

static bool op_tile(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0), *rv = in_req(im, n, 1);
  int64_t reps[64];
  int k;
  if (!x || !rv || !const_ints(im, rv, "the repeats", &k, reps)) return false;
  int r = x->type.rank;
  if (k != r) return bad(im, "%d repeats for rank %d", k, r);
  Val *y = x;
  for (int a = 0; a < r && y; a++) {
    if (reps[a] < 1) return bad(im, "repeat %" PRId64 " is not supported (empty tensors)", reps[a]);
    if (reps[a] == 1) continue;
    if (r + 1 > DL_MAX_RANK) return bad(im, "rank %d is too large to tile", r);
    /* [.., d, ..] -> [.., 1, d, ..] -> expand [.., reps, d, ..] -> [.., reps*d, ..] */
    int64_t d1[DL_MAX_RANK], d2[DL_MAX_RANK], d3[DL_MAX_RANK];
    for (int i = 0, j = 0; i < r + 1; i++) {
      d1[i] = i == a ? 1 : y->type.dims[j];
      d2[i] = i == a ? reps[a] : y->type.dims[j];
      if (i != a) j++;
    }
    for (int i = 0; i < r; i++) d3[i] = i == a ? reps[a] * y->type.dims[a] : y->type.dims[i];
    Val *u = reshape(im, y, r + 1, d1);
    if (!u) return false;
    Emit e;
    Node *ex = begin(im, &e, OP_EXPAND, 1, &u);
    ir_set_ints(im->g, ex, "shape", r + 1, d2);
    y = reshape(im, emit1(im, &e), r, d3);
  }
  return (n->out[0] = y);
}

/* Where element i of an axis of n padded by mode reads from, for i in
 * [-lo, n + hi): reflect mirrors about the first and last element (as
 * often as the pads need), edge repeats them, wrap goes around. */
static int64_t pad_source(const char *mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  if (strcmp(mode, "edge") == 0) return i < 0 ? 0 : n - 1;
  if (strcmp(mode, "wrap") == 0) return ((i % n) + n) % n;
  if (n == 1) return 0;
  int64_t period = 2 * (n - 1), m = ((i % period) + period) % period;
  return m < n ? m : period - m;
}

/* The non-constant pads: one gather per padded axis, of indices known at
 * import. */
static Val *pad_by_gather(Imp *im, Val *x, const char *mode, const int64_t *full) {
  int r = x->type.rank;
  Val *y = x;
  for (int d = 0; d < r && y; d++) {
    int64_t lo = full[d], hi = full[r + d], n = y->type.dims[d], count = n + lo + hi;
    if (!lo && !hi) continue;
    if (count > im->fold_max) {
      bad(im, "a %s pad to %" PRId64 " elements is not supported", mode, count);
      return NULL;
    }
    TensorType it = ir_type_make(TY_I64, 1, &count);
    Val *idx = known_new(im, &it);
    for (int64_t i = 0; i < count; i++) ((int64_t *)idx->k->data)[i] = pad_source(mode, i - lo, n);
    y = gather(im, y, idx, d);
  }
  return y;
}

static bool op_pad(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  const char *mode;
  if (!x || !attr_str(im, "mode", "constant", &mode)) return false;
  bool constant = strcmp(mode, "constant") == 0;
  if (!constant && strcmp(mode, "reflect") != 0 && strcmp(mode, "edge") != 0 &&
      (strcmp(mode, "wrap") != 0 || im->opset < 19))
    return bad(im, "mode='%s' is not supported (constant, reflect, edge%s are)", mode,
               im->opset >= 19 ? " and wrap" : "");
  int r = x->type.rank, k;
  int64_t pads[64], axes[64];
  double value = 0;
  int ka = -1;
  if (im->opset < 11) {
    const int64_t *p;
    if (!attr_ints(im, "pads", &k, &p) || !attr_float(im, "value", 0.0, &value)) return false;
    if (k < 0) return bad(im, "attribute 'pads' is missing");
    memcpy(pads, p, sizeof(int64_t) * (size_t)k);
  } else {
    Val *pv = in_req(im, n, 1);
    if (!pv || !const_ints(im, pv, "the pads", &k, pads)) return false;
    if (in_opt(n, 2) && !const_scalar(im, n->in[2], "the constant value", &value)) return false;
    if (in_opt(n, 3) && !const_ints(im, n->in[3], "the axes", &ka, axes)) return false;
  }
  int na = ka >= 0 ? ka : r;
  if (k != 2 * na) return bad(im, "%d pads for %d axes", k, na);
  int64_t full[2 * DL_MAX_RANK] = {0};
  for (int i = 0; i < na; i++) {
    int a;
    if (!norm_axis(im, ka >= 0 ? axes[i] : i, r, &a)) return false;
    full[a] = pads[i];
    full[r + a] = pads[na + i];
  }
  /* Negative pads crop. */
  Val *y = x;
  bool any = false;
  for (int d = 0; d < r && y; d++) {
    int64_t lo = full[d] < 0 ? -full[d] : 0, hi = full[r + d] < 0 ? -full[r + d] : 0;
    if (lo + hi >= y->type.dims[d]) return bad(im, "the pads crop axis %d to nothing", d);
    if (lo || hi) y = slice_axis(im, y, d, lo, y->type.dims[d] - hi, 1);
    if (full[d] < 0) full[d] = 0;
    if (full[r + d] < 0) full[r + d] = 0;
    any |= full[d] || full[r + d];
  }
  if (!y || !any) return (n->out[0] = y);
  if (!constant) return (n->out[0] = pad_by_gather(im, y, mode, full));
  Emit e;
  Node *p = begin(im, &e, OP_PAD, 1, &y);
  ir_set_ints(im->g, p, "pads", 2 * r, full);
  ir_set_float(im->g, p, "value", value);
  return (n->out[0] = emit1(im, &e));
}

static bool op_depth_space(Imp *im, ONode *n) {
  bool to_space = strcmp(im->np->op_type, "DepthToSpace") == 0;
  Val *x = in_req(im, n, 0);
  int64_t b;
  const char *mode = "DCR";
  if (!x || !attr_int(im, "blocksize", 0, &b)) return false;
  if (to_space && !attr_str(im, "mode", "DCR", &mode)) return false;
  if (x->type.rank != 4) return bad(im, "needs a 4-d input [N, C, H, W]");
  if (b < 1) return bad(im, "blocksize must be >= 1");
  int64_t N = x->type.dims[0], C = x->type.dims[1], H = x->type.dims[2], W = x->type.dims[3];
  if (to_space) {
    if (C % (b * b)) return bad(im, "channels %" PRId64 " are not a multiple of blocksize^2", C);
    bool dcr = strcmp(mode, "DCR") == 0;
    if (!dcr && strcmp(mode, "CRD") != 0) return bad(im, "mode='%s' is not supported", mode);
    int64_t c = C / (b * b);
    int64_t d6[6] = {N, b, b, c, H, W}, c6[6] = {N, c, b, b, H, W};
    static const int64_t pd[6] = {0, 3, 4, 1, 5, 2}, pc[6] = {0, 1, 4, 2, 5, 3};
    int64_t out[4] = {N, c, H * b, W * b};
    return (n->out[0] = reshape(im, transpose(im, reshape(im, x, 6, dcr ? d6 : c6), dcr ? pd : pc), 4, out));
  }
  if (H % b || W % b) return bad(im, "H and W must be multiples of the blocksize");
  int64_t d6[6] = {N, C, H / b, b, W / b, b}, out[4] = {N, C * b * b, H / b, W / b};
  static const int64_t p[6] = {0, 3, 5, 1, 2, 4};
  return (n->out[0] = reshape(im, transpose(im, reshape(im, x, 6, d6), p), 4, out));
}

/* ---- values known at import ---- */

static bool op_constant(Imp *im, ONode *n) {
  const Onnx__NodeProto *np = im->np;
  if (np->n_attribute != 1) return bad(im, "needs exactly one value attribute");
  const Onnx__AttributeProto *a = np->attribute[0];
  im->attr_used[0] = true;
  const char *name = a->name ? a->name : "";
  if (strcmp(name, "value") == 0 && a->t && proto_is_empty(a->t)) return (n->out[0] = empty_val(im));
  if (strcmp(name, "value") == 0 && a->t) {
    Tensor t;
    char err[512];
    if (!tensor_from_proto(a->t, im->dir, &t, err, sizeof err)) return bad(im, "value: %s", err);
    return (n->out[0] = known(im, t));
  }
  if (strcmp(name, "value_float") == 0) return (n->out[0] = scalar(im, a->f, TY_F32));
  if (strcmp(name, "value_int") == 0) return (n->out[0] = reshape(im, ints_val(im, 1, &a->i), 0, NULL));
  if (strcmp(name, "value_ints") == 0) {
    if (a->n_ints < 1 || a->n_ints > 1 << 20) return bad(im, "value_ints: empty tensors are not supported");
    return (n->out[0] = ints_val(im, (int)a->n_ints, a->ints));
  }
  if (strcmp(name, "value_floats") == 0) {
    if (a->n_floats < 1 || a->n_floats > 1 << 20) return bad(im, "value_floats: empty tensors are not supported");
    int64_t dim = (int64_t)a->n_floats;
    TensorType t = ir_type_make(TY_F32, 1, &dim);
    Val *v = known_new(im, &t);
    memcpy(v->k->data, a->floats, sizeof(float) * a->n_floats);
    return (n->out[0] = v);
  }
  return bad(im, "a Constant given by '%s' is not supported", name);
}

static bool op_constant_of_shape(Imp *im, ONode *n) {
  Val *s = in_req(im, n, 0);
  int64_t shape[64];
  int k;
  if (!s || !const_ints(im, s, "the shape", &k, shape)) return false;
  if (k > DL_MAX_RANK) return bad(im, "rank %d is not supported", k);
  double value = 0;
  DType dt = TY_F32;
  const Onnx__AttributeProto *a = find_attr(im, "value");
  if (a) {
    Tensor t;
    char err[512];
    if (!a->t) return bad(im, "attribute 'value' must be a tensor");
    if (!tensor_from_proto(a->t, im->dir, &t, err, sizeof err)) return bad(im, "value: %s", err);
    if (ir_type_numel(&t.type) != 1) {
      ir_tensor_free(&t);
      return bad(im, "value must hold one element");
    }
    value = ir_tensor_get(&t, 0);
    dt = t.type.dtype;
    ir_tensor_free(&t);
  }
  for (int i = 0; i < k; i++)
    if (shape[i] < 1) return bad(im, "shape entry %" PRId64 ": empty tensors are not supported", shape[i]);
  TensorType t = ir_type_make(dt, k, shape);
  if (ir_type_numel(&t) < 0 || ir_type_numel(&t) > im->fold_max) return bad(im, "the shape is too large");
  Val *v = known_new(im, &t);
  for (int64_t i = 0, c = ir_type_numel(&t); i < c; i++) ir_tensor_set(v->k, i, value);
  return (n->out[0] = v);
}

static bool op_shape(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  int64_t start, end;
  if (!x || !attr_int(im, "start", 0, &start) || !attr_int(im, "end", INT64_MAX, &end)) return false;
  int r = x->type.rank;
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < 0 ? 0 : end > r ? r : end;
  if (end <= start) return bad(im, "the shape is empty: empty tensors are not supported");
  return (n->out[0] = ints_val(im, (int)(end - start), x->type.dims + start));
}

static bool op_size(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0);
  if (!x) return false;
  int64_t count = ir_type_numel(&x->type);
  return (n->out[0] = reshape(im, ints_val(im, 1, &count), 0, NULL));
}

static bool op_range(Imp *im, ONode *n) {
  Val *vs = in_req(im, n, 0), *vl = in_req(im, n, 1), *vd = in_req(im, n, 2);
  double s, l, d;
  if (!vs || !vl || !vd || !const_scalar(im, vs, "start", &s) || !const_scalar(im, vl, "limit", &l) ||
      !const_scalar(im, vd, "delta", &d))
    return false;
  if (d == 0) return bad(im, "delta is 0");
  double count = ceil((l - s) / d);
  if (!(count >= 1)) return bad(im, "the range is empty: empty tensors are not supported");
  if (count > (double)im->fold_max) return bad(im, "the range is too long");
  int64_t c = (int64_t)count;
  TensorType t = ir_type_make(vs->type.dtype, 1, &c);
  Val *v = known_new(im, &t);
  for (int64_t i = 0; i < c; i++) ir_tensor_set(v->k, i, s + (double)i * d);
  return (n->out[0] = v);
}

/* ---- recurrent layers ---- */

/* Rows [g*H, (g+1)*H) of w (axis 0) in the order given: ONNX's gate order
 * to PyTorch's. */
static Val *reorder_gates(Imp *im, Val *w, int64_t H, int n_gates, const int *order) {
  Val *parts[4];
  for (int i = 0; i < n_gates; i++) parts[i] = slice_axis(im, w, 0, order[i] * H, (order[i] + 1) * H, 1);
  return concat(im, n_gates, parts, 0);
}


/* True when v is known to be all zeros: the state our fused recurrent
 * ops start from. */
static bool known_zero(const Val *v) {
  const Tensor *t = v->k ? v->k : v->hint;
  if (!t) return false;
  for (int64_t i = 0, c = ir_type_numel(&t->type); i < c; i++)
    if (ir_tensor_get(t, i) != 0) return false;
  return true;
}

/* The activation functions of ONNX's RNN, GRU and LSTM. */
typedef enum {
  ACT_SIGMOID, ACT_TANH, ACT_RELU, ACT_AFFINE, ACT_LEAKY_RELU, ACT_SCALED_TANH,
  ACT_HARD_SIGMOID, ACT_ELU, ACT_SOFTSIGN, ACT_SOFTPLUS, ACT_THRESHOLDED_RELU,
} ActKind;

typedef struct Act {
  ActKind kind;
  double alpha, beta;
} Act;

static const struct {
  const char *name;
  ActKind kind;
  int n_params; /* 1: alpha, 2: alpha and beta */
  double alpha, beta;
} act_table[] = {
    {"Sigmoid", ACT_SIGMOID, 0, 0, 0},          {"Tanh", ACT_TANH, 0, 0, 0},
    {"Relu", ACT_RELU, 0, 0, 0},                {"Affine", ACT_AFFINE, 2, 1.0, 0.0},
    {"LeakyRelu", ACT_LEAKY_RELU, 1, 0.01, 0},  {"ScaledTanh", ACT_SCALED_TANH, 2, 1.0, 1.0},
    {"HardSigmoid", ACT_HARD_SIGMOID, 2, 0.2, 0.5}, {"Elu", ACT_ELU, 1, 1.0, 0},
    {"Softsign", ACT_SOFTSIGN, 0, 0, 0},        {"Softplus", ACT_SOFTPLUS, 0, 0, 0},
    {"ThresholdedRelu", ACT_THRESHOLDED_RELU, 1, 1.0, 0},
};

static Val *apply_act(Imp *im, const Act *a, Val *x) {
  switch (a->kind) {
    case ACT_SIGMOID: return op1(im, OP_SIGMOID, x);
    case ACT_TANH: return op1(im, OP_TANH, x);
    case ACT_RELU: return op1(im, OP_RELU, x);
    case ACT_AFFINE: return op2s(im, OP_ADD, op2s(im, OP_MUL, x, a->alpha), a->beta);
    case ACT_LEAKY_RELU: return op1f(im, OP_LEAKY_RELU, x, "alpha", a->alpha);
    case ACT_SCALED_TANH: return op2s(im, OP_MUL, op1(im, OP_TANH, op2s(im, OP_MUL, x, a->beta)), a->alpha);
    case ACT_HARD_SIGMOID: return hardsigmoid_of(im, x, a->alpha, a->beta);
    case ACT_ELU: return op2(im, OP_ADD, op1(im, OP_RELU, x), neg_exp_side(im, x, a->alpha, 1.0));
    case ACT_SOFTSIGN: return softsign_of(im, x);
    case ACT_SOFTPLUS: return softplus_of(im, x);
    case ACT_THRESHOLDED_RELU:
      return x ? where(im, op2s(im, OP_GREATER, x, a->alpha), x, scalar(im, 0, x->type.dtype)) : NULL;
  }
  dl_unreachable(im->c);
}

/* The `activations` of a recurrent node (per direction per_dir of them,
 * the defaults where absent), with `activation_alpha`/`activation_beta`
 * taken in order by the functions that have such a parameter. */
static bool rnn_acts(Imp *im, int per_dir, int dirs, const ActKind *defaults, Act *out, bool *custom) {
  const Onnx__AttributeProto *names = find_attr(im, "activations");
  const Onnx__AttributeProto *alphas = find_attr(im, "activation_alpha");
  const Onnx__AttributeProto *betas = find_attr(im, "activation_beta");
  size_t n = names ? names->n_strings : 0, ka = 0, kb = 0;
  *custom = names || alphas || betas;
  if (names && n != (size_t)per_dir && n != (size_t)(per_dir * dirs))
    return bad(im, "%zu activations for %d directions (expected %d per direction)", n, dirs, per_dir);
  for (int i = 0; i < per_dir * dirs; i++) {
    Act *a = &out[i];
    int at = -1;
    if (!names) {
      for (size_t t = 0; t < ARRAY_LEN(act_table); t++)
        if (act_table[t].kind == defaults[i % per_dir]) at = (int)t;
    } else {
      const ProtobufCBinaryData *sn = &names->strings[(size_t)i % n];
      for (size_t t = 0; t < ARRAY_LEN(act_table); t++)
        if (sn->len == strlen(act_table[t].name) &&
            strncasecmp((const char *)sn->data, act_table[t].name, sn->len) == 0)
          at = (int)t;
      if (at < 0)
        return bad(im, "activation '%.*s' is not supported (Sigmoid, Tanh, Relu, Affine, LeakyRelu, ScaledTanh, "
                       "HardSigmoid, Elu, Softsign, Softplus and ThresholdedRelu are)",
                   (int)sn->len, (const char *)sn->data);
    }
    a->kind = act_table[at].kind;
    a->alpha = act_table[at].alpha;
    a->beta = act_table[at].beta;
    if (act_table[at].n_params >= 1 && alphas && ka < alphas->n_floats) a->alpha = alphas->floats[ka++];
    if (act_table[at].n_params >= 2 && betas && kb < betas->n_floats) a->beta = betas->floats[kb++];
  }
  return true;
}

enum {
  RNN_PLAIN, RNN_GRU, RNN_LSTM,
  /* Steps (time x directions) an unrolled recurrent node may have. */
  RNN_UNROLL_MAX = 1024,
};

/* A recurrent node as ONNX gives it, for unrolling. */
typedef struct Rnn {
  int kind, G, dirs;
  bool reverse; /* direction "reverse" (bidirectional: direction 1 is) */
  int64_t T, N, I, H;
  Val *x;                  /* [T, N, I] */
  Val *W, *R, *B, *P;      /* ONNX's, gates in ONNX's order */
  Val *h0, *c0;            /* [dirs, N, H] or NULL */
  const Tensor *lens;      /* sequence_lens, or NULL for all T */
  Act act[6];              /* per direction: f, g[, h] */
  int acts_per_dir;
  double clip;             /* 0: none */
  bool linear_before_reset, input_forget;
} Rnn;

static Val *rnn_clip(Imp *im, const Rnn *r, Val *x) {
  if (!x || r->clip <= 0) return x;
  Emit e;
  Node *c = begin(im, &e, OP_CLIP, 1, &x);
  ir_set_float(im->g, c, "min", -r->clip);
  ir_set_float(im->g, c, "max", r->clip);
  return emit1(im, &e);
}

static Val *gate(Imp *im, const Rnn *r, Val *v, int g) {
  return slice_axis(im, v, v ? v->type.rank - 1 : 0, g * r->H, (g + 1) * r->H, 1);
}

/* x @ w^T (+ b): w [M, K] */
static Val *linear_of(Imp *im, Val *x, Val *w, Val *b) {
  if (!x || !w) return NULL;
  Val *in[3] = {x, w, b};
  Emit e;
  begin(im, &e, OP_LINEAR, b ? 3 : 2, in);
  return emit1(im, &e);
}

/* Rows [lo, hi) of direction d of a [dirs, rows, cols] weight, as 2-d. */
static Val *dir_rows(Imp *im, Val *w, int d, int64_t lo, int64_t hi) {
  if (!w) return NULL;
  int64_t dims[2] = {hi - lo, w->type.dims[2]};
  return reshape(im, slice_axis(im, slice_axis(im, w, 0, d, d + 1, 1), 1, lo, hi, 1), 2, dims);
}

/* Elements [lo, hi) of direction d of a [dirs, len] bias. */
static Val *dir_vec(Imp *im, Val *b, int d, int64_t lo, int64_t hi) {
  if (!b) return NULL;
  int64_t dim = hi - lo;
  return reshape(im, slice_axis(im, slice_axis(im, b, 0, d, d + 1, 1), 1, lo, hi, 1), 1, &dim);
}

/* State s of direction d, [N, H]: the given one or zeros. */
static Val *dir_state(Imp *im, const Rnn *r, Val *s, int d) {
  int64_t dims[2] = {r->N, r->H};
  if (s) return reshape(im, slice_axis(im, s, 0, d, d + 1, 1), 2, dims);
  TensorType t = ir_type_make(r->x->type.dtype, 2, dims);
  return known_new(im, &t);
}

/* One direction, step by step.  ys[t] gets the output at time t (zeros
 * past a sequence's length), *h and *c the last states. */
static bool unroll_dir(Imp *im, const Rnn *r, int d, Val **ys, Val **h_out, Val **c_out) {
  const Act *act = &r->act[d * r->acts_per_dir];
  int64_t G = r->G, H = r->H, N = r->N, T = r->T;
  bool backward = r->reverse || d == 1;
  Val *Rb = r->B ? dir_vec(im, r->B, d, G * H, 2 * G * H) : NULL;
  int64_t x2[2] = {T * N, r->I};
  /* The inputs' share of every step at once: one GEMM. */
  Val *xw = linear_of(im, reshape(im, r->x, 2, x2), dir_rows(im, r->W, d, 0, G * H),
                      r->B ? dir_vec(im, r->B, d, 0, G * H) : NULL);
  /* GRU without linear_before_reset: the h gate's R multiplies r * h. */
  bool split_r = r->kind == RNN_GRU && !r->linear_before_reset;
  Val *Rd = dir_rows(im, r->R, d, 0, split_r ? 2 * H : G * H);
  Val *Rbd = split_r ? (Rb ? slice_axis(im, Rb, 0, 0, 2 * H, 1) : NULL) : Rb;
  Val *Rn = split_r ? dir_rows(im, r->R, d, 2 * H, 3 * H) : NULL;
  Val *Rbn = split_r && Rb ? slice_axis(im, Rb, 0, 2 * H, 3 * H, 1) : NULL;
  Val *Pi = NULL, *Po = NULL, *Pf = NULL;
  if (r->P) {
    Pi = dir_vec(im, r->P, d, 0, H), Po = dir_vec(im, r->P, d, H, 2 * H), Pf = dir_vec(im, r->P, d, 2 * H, 3 * H);
  }
  Val *h = dir_state(im, r, r->h0, d), *c = r->kind == RNN_LSTM ? dir_state(im, r, r->c0, d) : NULL;
  for (int64_t s = 0; s < T; s++) {
    int64_t t = backward ? T - 1 - s : s;
    Val *xt = slice_axis(im, xw, 0, t * N, (t + 1) * N, 1);
    Val *hr = linear_of(im, h, Rd, Rbd);
    Val *h_new = NULL, *c_new = NULL;
    if (r->kind == RNN_PLAIN) {
      h_new = apply_act(im, &act[0], rnn_clip(im, r, op2(im, OP_ADD, xt, hr)));
    } else if (r->kind == RNN_GRU) { /* ONNX's gates: z, r, h */
      Val *z = apply_act(im, &act[0], rnn_clip(im, r, op2(im, OP_ADD, gate(im, r, xt, 0), gate(im, r, hr, 0))));
      Val *rg = apply_act(im, &act[0], rnn_clip(im, r, op2(im, OP_ADD, gate(im, r, xt, 1), gate(im, r, hr, 1))));
      Val *hn = split_r ? linear_of(im, op2(im, OP_MUL, rg, h), Rn, Rbn) : op2(im, OP_MUL, rg, gate(im, r, hr, 2));
      Val *nn = apply_act(im, &act[1], rnn_clip(im, r, op2(im, OP_ADD, gate(im, r, xt, 2), hn)));
      h_new = op2(im, OP_ADD, nn, op2(im, OP_MUL, z, op2(im, OP_SUB, h, nn)));
    } else { /* ONNX's gates: i, o, f, c */
      Val *pre = op2(im, OP_ADD, xt, hr);
      Val *ip = gate(im, r, pre, 0), *fp = gate(im, r, pre, 2);
      if (Pi) ip = op2(im, OP_ADD, ip, op2(im, OP_MUL, Pi, c));
      if (Pf) fp = op2(im, OP_ADD, fp, op2(im, OP_MUL, Pf, c));
      Val *ig = apply_act(im, &act[0], rnn_clip(im, r, ip));
      Val *fg = r->input_forget ? op2(im, OP_SUB, scalar(im, 1.0, ig ? ig->type.dtype : TY_F32), ig)
                                : apply_act(im, &act[0], rnn_clip(im, r, fp));
      Val *cg = apply_act(im, &act[1], rnn_clip(im, r, gate(im, r, pre, 3)));
      c_new = op2(im, OP_ADD, op2(im, OP_MUL, fg, c), op2(im, OP_MUL, ig, cg));
      Val *op = gate(im, r, pre, 1);
      if (Po) op = op2(im, OP_ADD, op, op2(im, OP_MUL, Po, c_new));
      Val *og = apply_act(im, &act[0], rnn_clip(im, r, op));
      h_new = op2(im, OP_MUL, og, apply_act(im, &act[2], c_new));
    }
    if (!h_new) return false;
    bool all_live = true;
    if (r->lens)
      for (int64_t b = 0; b < N; b++) all_live &= t < (int64_t)ir_tensor_get(r->lens, b);
    if (all_live) {
      ys[t] = h = h_new;
      if (c_new) c = c_new;
      continue;
    }
    /* Past a sequence's end its state stays and its output is 0: a
     * backward pass thus starts at each sequence's own last element. */
    int64_t md[2] = {N, 1};
    TensorType mt = ir_type_make(h_new->type.dtype, 2, md);
    Val *m = known_new(im, &mt);
    for (int64_t b = 0; b < N; b++) ir_tensor_set(m->k, b, t < (int64_t)ir_tensor_get(r->lens, b));
    ys[t] = op2(im, OP_MUL, m, h_new);
    h = op2(im, OP_ADD, h, op2(im, OP_MUL, m, op2(im, OP_SUB, h_new, h)));
    if (c_new) c = op2(im, OP_ADD, c, op2(im, OP_MUL, m, op2(im, OP_SUB, c_new, c)));
  }
  *h_out = h;
  *c_out = c;
  return h != NULL;
}

/* What the fused lstm/gru ops do not do, step by step: RNN, GRU with
 * linear_before_reset=0, peepholes, clip, other activations, initial
 * states, sequence lengths, input_forget. */
static bool unroll_rnn(Imp *im, ONode *n, const Rnn *r, bool layout1) {
  if (r->T * r->dirs > RNN_UNROLL_MAX)
    return bad(im, "unrolled, this is %" PRId64 " steps, more than dlcc unrolls (%d)", r->T * r->dirs,
               (int)RNN_UNROLL_MAX);
  int64_t T = r->T, N = r->N, H = r->H;
  Val **ys = ARENA_ARRAY(&im->c->arena, Val *, (size_t)(T * r->dirs));
  Val *hs[2], *cs[2];
  for (int d = 0; d < r->dirs; d++)
    if (!unroll_dir(im, r, d, ys + d * T, &hs[d], &cs[d])) return false;
  int64_t one[4] = {1, 1, N, H}, st[3] = {1, N, H};
  if (n->want[0]) {
    /* ONNX's Y: [T, dirs, N, H], or [N, T, dirs, H] with layout 1. */
    Val **steps = ARENA_ARRAY(&im->c->arena, Val *, (size_t)T);
    for (int64_t t = 0; t < T; t++) {
      Val *per_dir[2];
      for (int d = 0; d < r->dirs; d++) per_dir[d] = reshape(im, ys[d * T + t], 4, one);
      steps[t] = concat(im, r->dirs, per_dir, 1);
    }
    Val *y = concat(im, (int)T, steps, 0);
    static const int64_t to_layout1[4] = {2, 0, 1, 3};
    if (!(n->out[0] = layout1 ? transpose(im, y, to_layout1) : y)) return false;
  }
  static const int64_t swap01[3] = {1, 0, 2};
  Val **last[2] = {hs, cs};
  for (int k = 0; k < 2 && 1 + k < n->n_out; k++) {
    if (!n->want[1 + k]) continue;
    Val *per_dir[2];
    for (int d = 0; d < r->dirs; d++) per_dir[d] = reshape(im, last[k][d], 3, st);
    Val *v = concat(im, r->dirs, per_dir, 0);
    if (!(n->out[1 + k] = layout1 ? transpose(im, v, swap01) : v)) return false;
  }
  return true;
}

static bool op_rnn(Imp *im, ONode *n) {
  const char *t = im->np->op_type;
  int kind = strcmp(t, "LSTM") == 0 ? RNN_LSTM : strcmp(t, "GRU") == 0 ? RNN_GRU : RNN_PLAIN;
  bool lstm = kind == RNN_LSTM;
  int G = lstm ? 4 : kind == RNN_GRU ? 3 : 1;
  Val *x = in_req(im, n, 0), *W = in_req(im, n, 1), *R = in_req(im, n, 2), *B = in_opt(n, 3);
  Val *seq = in_opt(n, 4), *h0 = in_opt(n, 5), *c0 = lstm ? in_opt(n, 6) : NULL, *P = lstm ? in_opt(n, 7) : NULL;
  if (!x || !W || !R) return false;
  const char *direction;
  int64_t hidden, layout, lbr = 0, input_forget = 0;
  double clip;
  if (!attr_str(im, "direction", "forward", &direction) || !attr_int(im, "hidden_size", 0, &hidden) ||
      !attr_int(im, "layout", 0, &layout) || !attr_float(im, "clip", 0, &clip))
    return false;
  if (lstm && !attr_int(im, "input_forget", 0, &input_forget)) return false;
  if (kind == RNN_GRU && !attr_int(im, "linear_before_reset", 0, &lbr)) return false;
  bool bidir = strcmp(direction, "bidirectional") == 0, reverse = strcmp(direction, "reverse") == 0;
  if (!bidir && !reverse && strcmp(direction, "forward") != 0)
    return bad(im, "direction='%s' is not supported", direction);
  if (layout != 0 && layout != 1) return bad(im, "layout=%" PRId64 " is invalid", layout);
  int dirs = bidir ? 2 : 1;
  static const ActKind plain_acts[1] = {ACT_TANH}, gru_acts[2] = {ACT_SIGMOID, ACT_TANH},
                       lstm_acts[3] = {ACT_SIGMOID, ACT_TANH, ACT_TANH};
  Rnn r = {.kind = kind, .G = G, .dirs = dirs, .reverse = reverse, .W = W, .R = R, .B = B, .P = P,
           .acts_per_dir = lstm ? 3 : kind == RNN_GRU ? 2 : 1, .clip = clip,
           .linear_before_reset = lbr != 0, .input_forget = input_forget != 0};
  bool custom_acts;
  if (!rnn_acts(im, r.acts_per_dir, dirs, lstm ? lstm_acts : kind == RNN_GRU ? gru_acts : plain_acts, r.act,
                &custom_acts))
    return false;
  if (x->type.rank != 3 || W->type.rank != 3 || R->type.rank != 3)
    return bad(im, "X, W and R must be 3-d");
  int64_t H = R->type.dims[2];
  if (hidden && hidden != H) return bad(im, "hidden_size %" PRId64 " differs from R's %" PRId64, hidden, H);
  if (W->type.dims[0] != dirs || R->type.dims[0] != dirs || W->type.dims[1] != G * H ||
      R->type.dims[1] != G * H)
    return bad(im, "W and R must be [%d, %" PRId64 ", ...] for %s with hidden size %" PRId64, dirs,
               G * H, direction, H);
  if (B && (B->type.rank != 2 || B->type.dims[0] != dirs || B->type.dims[1] != 2 * G * H))
    return bad(im, "B must be [%d, %" PRId64 "]", dirs, 2 * G * H);
  if (P && (P->type.rank != 2 || P->type.dims[0] != dirs || P->type.dims[1] != 3 * H))
    return bad(im, "P must be [%d, %" PRId64 "]", dirs, 3 * H);
  int time_axis = layout ? 1 : 0;
  int64_t T = x->type.dims[time_axis], N = x->type.dims[layout ? 0 : 1];
  /* Initial states: ONNX's [dirs, N, H], or [N, dirs, H] with layout 1. */
  static const int64_t swap01[3] = {1, 0, 2};
  Val *states[2] = {h0, c0};
  for (int i = 0; i < 2; i++) {
    Val *v = states[i];
    if (!v) continue;
    int64_t want[3] = {layout ? N : dirs, layout ? dirs : N, H};
    if (!same_dims(&v->type, 3, want))
      return bad(im, "%s must be [%" PRId64 ", %" PRId64 ", %" PRId64 "]", i ? "initial_c" : "initial_h", want[0],
                 want[1], want[2]);
  }
  bool all_full = true;
  if (seq) {
    r.lens = seq->k ? seq->k : seq->hint;
    if (!r.lens) return bad(im, "sequence_lens from a runtime value is not supported");
    if (ir_type_numel(&r.lens->type) != N) return bad(im, "sequence_lens must have %" PRId64 " entries", N);
    for (int64_t i = 0; i < N; i++) {
      int64_t len = (int64_t)ir_tensor_get(r.lens, i);
      if (len < 1 || len > T) return bad(im, "sequence_lens entry %" PRId64 " is %" PRId64 ", not in [1, %" PRId64 "]", i, len, T);
      all_full &= len == T;
    }
    if (all_full) r.lens = NULL;
  }
  bool fused = kind != RNN_PLAIN && (kind != RNN_GRU || lbr) && !P && clip == 0 && !custom_acts && !input_forget &&
               all_full && (!h0 || known_zero(h0)) && (!c0 || known_zero(c0));
  if (!fused) {
    r.x = layout ? transpose(im, x, swap01) : x;
    r.h0 = h0 && layout ? transpose(im, h0, swap01) : h0;
    r.c0 = c0 && layout ? transpose(im, c0, swap01) : c0;
    r.T = T, r.N = N, r.I = x->type.dims[2], r.H = H;
    return r.x && unroll_rnn(im, n, &r, layout == 1);
  }
  /* ONNX gate order i, o, f, c -> PyTorch i, f, g, o; GRU z, r, h -> r, z, n. */
  static const int lstm_order[4] = {0, 2, 3, 1}, gru_order[3] = {1, 0, 2};
  const int *order = lstm ? lstm_order : gru_order;
  Val *ops[1 + 8];
  int k = 0;
  ops[k++] = reverse ? reverse_axis(im, x, time_axis) : x;
  for (int d = 0; d < dirs; d++) {
    Val *w = slice_axis(im, W, 0, d, d + 1, 1), *rr = slice_axis(im, R, 0, d, d + 1, 1);
    int64_t wd[2] = {G * H, W->type.dims[2]}, rd[2] = {G * H, H};
    ops[k++] = reorder_gates(im, reshape(im, w, 2, wd), H, G, order);
    ops[k++] = reorder_gates(im, reshape(im, rr, 2, rd), H, G, order);
    if (B) {
      int64_t bd[1] = {2 * G * H};
      Val *b = reshape(im, slice_axis(im, B, 0, d, d + 1, 1), 1, bd);
      ops[k++] = reorder_gates(im, slice_axis(im, b, 0, 0, G * H, 1), H, G, order);
      ops[k++] = reorder_gates(im, slice_axis(im, b, 0, G * H, 2 * G * H, 1), H, G, order);
    }
  }
  for (int i = 0; i < k; i++)
    if (!ops[i]) return false;
  Emit e;
  Node *rn = begin(im, &e, lstm ? OP_LSTM : OP_GRU, k, ops);
  ir_set_int(im->g, rn, "hidden", H);
  ir_set_int(im->g, rn, "layers", 1);
  ir_set_int(im->g, rn, "bidirectional", bidir);
  ir_set_int(im->g, rn, "batch_first", layout == 1);
  ir_set_int(im->g, rn, "bias", B != NULL);
  Val *res[3];
  if (!finish(im, &e, res)) return false;
  Val *y = res[0];
  if (reverse) y = reverse_axis(im, y, time_axis);
  /* Ours: y [T, N, dirs*H] (or [N, T, dirs*H]); ONNX: [T, dirs, N, H] (or [N, T, dirs, H]). */
  if (n->want[0]) {
    if (layout) {
      int64_t d4[4] = {N, T, dirs, H};
      n->out[0] = reshape(im, y, 4, d4);
    } else {
      int64_t d4[4] = {T, N, dirs, H};
      static const int64_t p[4] = {0, 2, 1, 3};
      n->out[0] = transpose(im, reshape(im, y, 4, d4), p);
    }
    if (!n->out[0]) return false;
  }
  for (int i = 1; i < (lstm ? 3 : 2) && i < n->n_out; i++)
    if (n->want[i] && !(n->out[i] = layout ? transpose(im, res[i], swap01) : res[i])) return false;
  return true;
}

/* ---- quantized models: QDQ and QOperator ---- */

/* ONNX's two int8 formats (docs/quantization.md, "Importing quantized
 * ONNX models"):
 *  - QuantizeLinear and DequantizeLinear are the IR's quantize (to=u8 for
 *    UINT8) and dequantize, per tensor or per axis;
 *  - ConvInteger, MatMulInteger, QLinearConv and QLinearMatMul are int8
 *    products.  A u8 operand with zero point z is the i8 operand c - 128
 *    with zero point z - 128, which leaves every difference c - z as it
 *    was; zero points that do not vanish are corrected with sums of the
 *    operands; QLinear* requantize the i32 accumulator as onnxruntime
 *    does, sat(rint(acc * m) + z_y) with m = s_a * s_b / s_y in f32;
 *  - Conv, MatMul and Gemm whose operands come from DequantizeLinear (the
 *    QDQ format) are the same int8 products, and a QuantizeLinear of such
 *    a product's result requantizes the accumulator directly: what
 *    onnxruntime runs for DQ -> Conv -> Q (its QLinearConv). */

/* A tensor's quantization: the codes q (i8 or u8; for a product's
 * result, its i32 accumulator), one scale and zero point per tensor
 * (axis -1) or per slice of q along axis. */
typedef struct Quant {
  Val *q;
  bool acc; /* q is an int8 product's accumulator */
  int axis;
  int64_t n;
  float *scale;
  int32_t *zp;
} Quant;

static bool zp_uniform(const Quant *p) {
  for (int64_t c = 1; c < p->n; c++)
    if (p->zp[c] != p->zp[0]) return false;
  return true;
}

static bool zp_zero(const Quant *p) { return zp_uniform(p) && p->zp[0] == 0; }

/* n values as a known tensor of dtype dt that broadcasts along axis of a
 * rank-r tensor ([n, 1, ..., 1]); a scalar when n is 1. */
static Val *along_axis(Imp *im, DType dt, int64_t n, const double *v, int axis, int r) {
  int64_t dims[DL_MAX_RANK] = {0};
  int rank = n == 1 ? 0 : r - axis;
  for (int d = 0; d < rank; d++) dims[d] = d == 0 ? n : 1;
  TensorType tt = ir_type_make(dt, rank, dims);
  Val *t = known_new(im, &tt);
  for (int64_t i = 0; i < n; i++) ir_tensor_set(t->k, i, v[i]);
  return t;
}

static Val *scales_along(Imp *im, const Quant *p, int r) {
  double *v = ARENA_ARRAY(&im->c->arena, double, p->n);
  for (int64_t i = 0; i < p->n; i++) v[i] = p->scale[i];
  return along_axis(im, TY_F32, p->n, v, p->axis, r);
}

static Val *zps_along(Imp *im, const Quant *p, int r) {
  double *v = ARENA_ARRAY(&im->c->arena, double, p->n);
  for (int64_t i = 0; i < p->n; i++) v[i] = p->zp[i];
  return along_axis(im, TY_I32, p->n, v, p->axis, r);
}

/* The scale and zero point operands of a quantized tensor x of a
 * (De)QuantizeLinear or a QLinear op: known, one value, or one per slice
 * of x along axis (axis -1: one value only).  scale NULL: all 1 (the
 * Integer ops); zp NULL: 0.  *zdt: the zero point's dtype (TY_COUNT when
 * there is none). */
static bool quant_params(Imp *im, const TensorType *x, Val *scale, Val *zp, int64_t axis,
                         const char *what, Quant *out, DType *zdt) {
  const Tensor *s = scale ? need_const(im, scale, arena_printf(&im->c->arena, "%s's scale", what)) : NULL;
  const Tensor *z = zp ? need_const(im, zp, arena_printf(&im->c->arena, "%s's zero point", what)) : NULL;
  if ((scale && !s) || (zp && !z)) return false;
  const Tensor *shape = s ? s : z;
  int64_t n = shape ? ir_type_numel(&shape->type) : 1;
  *out = (Quant){.axis = -1, .n = n};
  if (n > 1 || (shape && shape->type.rank > 1)) {
    char ts[IR_TYPE_STR_MAX];
    if (axis < 0 || shape->type.rank != 1)
      return bad(im, "%s: a %s scale or zero point is not supported (one value%s)", what,
                 ir_type_str(&shape->type, ts, sizeof ts),
                 axis < 0 ? "" : ", or one per slice along an axis");
    int a;
    if (!norm_axis(im, axis, x->rank, &a)) return false;
    if (x->dims[a] != n)
      return bad(im, "%s: %" PRId64 " scales or zero points, but %" PRId64 " slices along axis %d", what,
                 n, x->dims[a], a);
    out->axis = a;
  }
  if (s && z && ir_type_numel(&z->type) != n)
    return bad(im, "%s: %" PRId64 " scales but %" PRId64 " zero points", what, n, ir_type_numel(&z->type));
  if (s && !ir_dtype_is_float(s->type.dtype)) return bad(im, "%s: the scale must be a float", what);
  out->scale = ARENA_ARRAY(&im->c->arena, float, n);
  out->zp = ARENA_ARRAY(&im->c->arena, int32_t, n);
  for (int64_t i = 0; i < n; i++) {
    out->scale[i] = s ? (float)ir_tensor_get(s, i) : 1.0f;
    if (!(out->scale[i] > 0) || isinf(out->scale[i]))
      return bad(im, "%s: scale %g is not a positive finite f32", what, (double)out->scale[i]);
    out->zp[i] = z ? (int32_t)ir_tensor_get(z, i) : 0;
  }
  *zdt = z ? z->type.dtype : TY_COUNT;
  if (z && z->type.dtype != TY_I8 && z->type.dtype != TY_U8 && z->type.dtype != TY_I32)
    return bad(im, "%s: a zero point of dtype %s is not supported (INT8, UINT8, INT32)", what,
               ir_dtype_name(z->type.dtype));
  return true;
}

/* quantize x by p's scales and zero points into dtype `to`.  The zero
 * point is always given, so that the codes saturate to the dtype's whole
 * range as ONNX says (the IR's quantize without one stays symmetric).
 * Zero points that differ along the axis: one quantize per slice. */
static Val *emit_quantize(Imp *im, Val *x, const Quant *p, DType to) {
  if (!zp_uniform(p)) {
    Val **parts = ARENA_ARRAY(&im->c->arena, Val *, p->n);
    for (int64_t c = 0; c < p->n; c++) {
      Quant one = {.axis = -1, .n = 1, .scale = &p->scale[c], .zp = &p->zp[c]};
      parts[c] = emit_quantize(im, slice_axis(im, x, p->axis, c, c + 1, 1), &one, to);
    }
    return concat(im, (int)p->n, parts, p->axis);
  }
  Val *in[2] = {x, p->axis >= 0 ? scales_along(im, p, x->type.rank) : NULL};
  Emit e;
  Node *n = begin(im, &e, OP_QUANTIZE, in[1] ? 2 : 1, in);
  if (!in[1]) ir_set_float(im->g, n, "scale", p->scale[0]);
  ir_set_int(im->g, n, "zero_point", p->zp[0]);
  if (to == TY_U8) ir_set_dtype(im->g, n, "to", TY_U8);
  return emit1(im, &e);
}

/* (q - zp) * scale in f32.  Zero points that differ along the axis are
 * subtracted in i32 first, which is exact. */
static Val *emit_dequantize(Imp *im, Val *q, const Quant *p) {
  int32_t zp = p->zp[0];
  if (!zp_uniform(p)) {
    q = op2(im, OP_SUB, cast(im, q, TY_I32), zps_along(im, p, q->type.rank));
    zp = 0;
  }
  if (!q) return NULL;
  Val *in[2] = {q, p->axis >= 0 ? scales_along(im, p, q->type.rank) : NULL};
  Emit e;
  Node *n = begin(im, &e, OP_DEQUANTIZE, in[1] ? 2 : 1, in);
  if (!in[1]) ir_set_float(im->g, n, "scale", p->scale[0]);
  if (zp) ir_set_int(im->g, n, "zero_point", zp);
  return emit1(im, &e);
}

/* sat(rint(acc * m) + zy) into `to`: onnxruntime's requantization of an
 * int8 product, as one f32 product (dequantize by m) and a quantize by 1,
 * which is exact.  m: one value or one per slice of acc along an axis. */
static Val *requantize(Imp *im, Val *acc, const Quant *m, int32_t zy, DType to) {
  Quant mq = *m;
  mq.zp = ARENA_ARRAY(&im->c->arena, int32_t, m->n); /* zeros */
  float one = 1.0f;
  Quant out = {.axis = -1, .n = 1, .scale = &one, .zp = &zy};
  return emit_quantize(im, emit_dequantize(im, acc, &mq), &out, to);
}

/* ---- int8 products ---- */

/* An operand of an integer product in i8, with its zero points in i8's
 * terms (one, or one per slice along axis); `zero`: all of them 0, so
 * the product needs no correction for them. */
typedef struct Int8 {
  Val *v;
  int axis;
  int64_t n;
  int32_t *zp;
  bool zero;
} Int8;

/* A u8 code c as the i8 code c - 128: dequantize by 1 around 128, then
 * quantize by 1 (both exact), so that it fuses with its neighbours. */
static Val *u8_to_i8(Imp *im, Val *q) {
  float one = 1.0f;
  int32_t mid = 128, zero = 0;
  Quant around = {.axis = -1, .n = 1, .scale = &one, .zp = &mid};
  Quant id = {.axis = -1, .n = 1, .scale = &one, .zp = &zero};
  Val *f = emit_dequantize(im, q, &around);
  return f ? emit_quantize(im, f, &id, TY_I8) : NULL;
}

/* Which slice along axis element i of t falls in. */
static int64_t slice_of(const TensorType *t, int axis, int64_t i) {
  if (axis < 0) return 0;
  int64_t inner = 1;
  for (int d = axis + 1; d < t->rank; d++) inner *= t->dims[d];
  return (i / inner) % t->dims[axis];
}

/* A known q whose every q - zp fits i8, as those differences. */
static Val *known_differences(Imp *im, const Val *q, const Quant *p) {
  int64_t count = ir_type_numel(&q->type);
  for (int64_t i = 0; i < count; i++) {
    double d = ir_tensor_get(q->k, i) - p->zp[slice_of(&q->type, p->axis, i)];
    if (d < -128 || d > 127) return NULL;
  }
  TensorType t = q->type;
  t.dtype = TY_I8;
  Val *v = known_new(im, &t);
  for (int64_t i = 0; i < count; i++)
    ((int8_t *)v->k->data)[i] = (int8_t)(ir_tensor_get(q->k, i) - p->zp[slice_of(&q->type, p->axis, i)]);
  return v;
}

static bool to_int8(Imp *im, Val *q, const Quant *p, const char *what, Int8 *out) {
  DType dt = q->type.dtype;
  if (dt != TY_I8 && dt != TY_U8)
    return bad(im, "%s of dtype %s is not supported (INT8 or UINT8)", what, ir_dtype_name(dt));
  *out = (Int8){.v = q, .axis = p->axis, .n = p->n, .zp = ARENA_ARRAY(&im->c->arena, int32_t, p->n)};
  if (q->k && !(dt == TY_I8 && zp_zero(p)) && (out->v = known_differences(im, q, p))) {
    out->zero = true;
    return true;
  }
  out->v = dt == TY_U8 ? u8_to_i8(im, q) : q;
  bool zero = true;
  for (int64_t c = 0; c < p->n; c++) {
    out->zp[c] = p->zp[c] - (dt == TY_U8 ? 128 : 0);
    zero &= out->zp[c] == 0;
  }
  out->zero = zero;
  return out->v != NULL;
}

static Val *zp8_along(Imp *im, const Int8 *x, int axis, int r) {
  double *v = ARENA_ARRAY(&im->c->arena, double, x->n);
  for (int64_t i = 0; i < x->n; i++) v[i] = x->zp[i];
  return along_axis(im, TY_I32, x->n, v, axis, r);
}

/* Sums of i8 codes in i32, as int8 products with ones (which codegen
 * runs as its int8 GEMMs): each row of v [..., K] as [..., 1], each
 * column of v [..., K, N] as [..., 1, N]. */
static Val *ones_i8(Imp *im, int64_t rows, int64_t cols) {
  int64_t dims[2] = {rows, cols};
  TensorType t = ir_type_make(TY_I8, 2, dims);
  Val *v = known_new(im, &t);
  memset(v->k->data, 1, (size_t)(rows * cols));
  return v;
}

static Val *row_sums(Imp *im, Val *v) {
  return v ? op2(im, OP_MATMUL, v, ones_i8(im, v->type.dims[v->type.rank - 1], 1)) : NULL;
}

static Val *col_sums(Imp *im, Val *v) {
  return v ? op2(im, OP_MATMUL, ones_i8(im, 1, v->type.dims[v->type.rank - 2]), v) : NULL;
}

/* Each output channel's sum of w [C, ...] as [C]. */
static Val *channel_sums(Imp *im, Val *w) {
  int64_t c = w->type.dims[0], flat[2] = {c, ir_type_numel(&w->type) / c};
  return reshape(im, row_sums(im, reshape(im, w, 2, flat)), 1, &c);
}

/* a - b * c, with c a scalar or an axis-shaped tensor. */
static Val *minus_product(Imp *im, Val *a, Val *b, Val *c) {
  return op2(im, OP_SUB, a, op2(im, OP_MUL, b, c));
}

static Val *conv_node(Imp *im, Val *x, Val *w, Val *b, const Window *win, int64_t group, int32_t zp) {
  if (!x || !w) return NULL;
  Val *in[3] = {x, w, b};
  Emit e;
  Node *c = begin(im, &e, OP_CONV2D, b ? 3 : 2, in);
  ir_set_ints(im->g, c, "stride", 2, win->stride);
  ir_set_ints(im->g, c, "pad", 4, win->pad);
  ir_set_ints(im->g, c, "dilation", 2, win->dil);
  ir_set_int(im->g, c, "groups", group);
  if (zp) ir_set_int(im->g, c, "zero_point", zp);
  return emit1(im, &e);
}

/* sum (x - zx)(w - zw) of a 2-d convolution, in i32.  The conv2d of the
 * i8 codes reads zx where it pads, so padding adds nothing; then
 *   sum (x - zx)(w - zw) = sum x w - zx sum w - zw sum x + K zx zw
 * over each window's K taps: the zx terms are per output channel and go
 * into the i32 bias, the zw term needs the windows' sums of x (a conv2d
 * with ones) and is there only when a weight zero point is not 0. */
static Val *int_conv(Imp *im, const Int8 *x, const Int8 *w, Val *bias, const Window *win, int64_t group) {
  const TensorType *wt = &w->v->type;
  int64_t K = wt->dims[1] * wt->dims[2] * wt->dims[3];
  int32_t zx = x->zp[0];
  Val *b = bias;
  if (zx) {
    Val *t = op2s(im, OP_MUL, channel_sums(im, w->v), -zx);
    if (!w->zero) t = op2(im, OP_ADD, t, op2s(im, OP_MUL, zp8_along(im, w, 0, 1), (double)K * zx));
    b = b ? op2(im, OP_ADD, b, t) : t;
  }
  Val *acc = conv_node(im, x->v, w->v, b, win, group, zx);
  if (w->zero || !acc) return acc;
  Val *ones = known_new(im, wt);
  for (int64_t i = 0; i < ir_type_numel(wt); i++) ((int8_t *)ones->k->data)[i] = 1;
  Val *sums = conv_node(im, x->v, ones, NULL, win, group, zx);
  return minus_product(im, acc, sums, zp8_along(im, w, 0, 3));
}

/* sum_k (a - za)(b - zb) of a matmul, in i32: the matmul of the i8 codes,
 * less za times b's column sums and zb times a's row sums, plus K za zb.
 * za: one, or one per row of a; zb: one, or one per column of b. */
static Val *int_matmul(Imp *im, const Int8 *a, const Int8 *b) {
  int64_t K = a->v->type.dims[a->v->type.rank - 1];
  Val *acc = op2(im, OP_MATMUL, a->v, b->v);
  Val *za = a->zero ? NULL : zp8_along(im, a, 0, 2), *zb = b->zero ? NULL : zp8_along(im, b, 0, 1);
  if (za) acc = minus_product(im, acc, col_sums(im, b->v), za);
  if (zb) acc = minus_product(im, acc, row_sums(im, a->v), zb);
  if (za && zb) acc = op2(im, OP_ADD, acc, op2s(im, OP_MUL, op2(im, OP_MUL, za, zb), (double)K));
  return acc;
}

/* The same for x [..., K] times a known w [N, K] as a linear layer: the
 * za term folds into the i32 bias, so that it costs nothing at run time.
 * x's zero point is one value. */
static Val *int_linear(Imp *im, const Int8 *x, const Int8 *w, Val *bias) {
  int64_t K = w->v->type.dims[1];
  int32_t zx = x->zp[0];
  Val *b = bias;
  if (zx) {
    Val *t = op2s(im, OP_MUL, channel_sums(im, w->v), -zx);
    if (!w->zero) t = op2(im, OP_ADD, t, op2s(im, OP_MUL, zp8_along(im, w, 0, 1), (double)K * zx));
    b = b ? op2(im, OP_ADD, b, t) : t;
  }
  Val *in[3] = {x->v, w->v, b};
  Emit e;
  begin(im, &e, OP_LINEAR, b ? 3 : 2, in);
  Val *acc = emit1(im, &e);
  if (w->zero || !acc) return acc;
  return minus_product(im, acc, row_sums(im, x->v), zp8_along(im, w, 0, 1));
}

/* b [K, N] per column as w [N, K] per row. */
static Int8 transposed(Imp *im, Int8 b) {
  static const int64_t swap[2] = {1, 0};
  b.v = transpose(im, b.v, swap);
  if (b.axis >= 0) b.axis = 1 - b.axis;
  return b;
}

/* a @ b: the linear form when b is a known matrix and a's zero point one
 * value (weights), else the matmul form. */
static Val *int_product(Imp *im, const Int8 *a, const Int8 *b) {
  if (b->v->k && b->v->type.rank == 2 && a->n == 1 && (b->axis < 0 || b->axis == 1)) {
    Int8 w = transposed(im, *b);
    return int_linear(im, a, &w, NULL);
  }
  return int_matmul(im, a, b);
}

/* The scales of a product of per-tensor a and b (per output channel),
 * s_a * s_b in f32, as onnxruntime computes them; divided by s_y when
 * given (> 0). */
static Quant product_scales(Imp *im, const Quant *a, const Quant *b, int axis, float sy) {
  Quant s = {.axis = b->n > 1 ? axis : -1, .n = b->n};
  s.scale = ARENA_ARRAY(&im->c->arena, float, b->n);
  s.zp = ARENA_ARRAY(&im->c->arena, int32_t, b->n);
  for (int64_t c = 0; c < b->n; c++) {
    float p = a->scale[0] * b->scale[c]; /* rounded to f32 before the division */
    s.scale[c] = sy > 0 ? p / sy : p;
  }
  return s;
}

static DType quantized_dtype_of(DType zdt) { return zdt == TY_I8 ? TY_I8 : TY_U8; }

/* ---- the ops ---- */

static bool op_quantize_linear(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0), *s = in_req(im, n, 1), *z = in_opt(n, 2);
  int64_t axis, sat, block, out_dt;
  if (!x || !s || !attr_int(im, "axis", 1, &axis) || !attr_int(im, "saturate", 1, &sat) ||
      !attr_int(im, "block_size", 0, &block) || !attr_int(im, "output_dtype", 0, &out_dt))
    return false;
  if (block) return bad(im, "blocked quantization (block_size=%" PRId64 ") is not supported", block);
  Quant p;
  DType zdt, to = TY_U8;
  if (!quant_params(im, &x->type, s, z, axis, "y", &p, &zdt)) return false;
  if (zdt != TY_COUNT) {
    to = zdt;
  } else if (out_dt && !dtype_from_onnx((int32_t)out_dt, &to)) {
    return bad(im, "output_dtype %s is not supported", onnx_type_name((int32_t)out_dt));
  }
  if (to != TY_U8 && to != TY_I8)
    return bad(im, "quantizing to %s is not supported (INT8 or UINT8)", ir_dtype_name(to));
  /* The result of an int8 product: requantize its accumulator. */
  const Quant *d = x->dq;
  if (d && d->acc && p.axis < 0) {
    Quant m = *d;
    m.scale = ARENA_ARRAY(&im->c->arena, float, d->n);
    for (int64_t c = 0; c < d->n; c++) m.scale[c] = d->scale[c] / p.scale[0];
    return (n->out[0] = requantize(im, d->q, &m, p.zp[0], to));
  }
  if (x->type.dtype == TY_I32) x = cast(im, x, TY_F32);
  if (!need_float_in(im, x)) return false;
  return (n->out[0] = emit_quantize(im, x, &p, to));
}

static bool op_dequantize_linear(Imp *im, ONode *n) {
  Val *x = in_req(im, n, 0), *s = in_req(im, n, 1), *z = in_opt(n, 2);
  int64_t axis, block;
  if (!x || !s || !attr_int(im, "axis", 1, &axis) || !attr_int(im, "block_size", 0, &block))
    return false;
  if (block) return bad(im, "blocked quantization (block_size=%" PRId64 ") is not supported", block);
  DType qt = x->type.dtype, zdt;
  if (qt != TY_I8 && qt != TY_U8 && qt != TY_I32)
    return bad(im, "x of dtype %s is not supported (INT8, UINT8 or INT32)", ir_dtype_name(qt));
  Quant *p = ARENA_NEW(&im->c->arena, Quant);
  if (!quant_params(im, &x->type, s, z, axis, "x", p, &zdt)) return false;
  if (zdt != TY_COUNT && zdt != qt)
    return bad(im, "x_zero_point is %s but x is %s", ir_dtype_name(zdt), ir_dtype_name(qt));
  p->q = x;
  Val *y = emit_dequantize(im, x, p);
  if (!y) return false;
  y->dq = p;
  DType sdt = s->k ? s->k->type.dtype : s->hint ? s->hint->type.dtype : TY_F32;
  return (n->out[0] = sdt == TY_F32 ? y : cast(im, y, sdt)); /* opset 19: y has the scale's dtype */
}

/* x, w and their zero points (ConvInteger) or all of QLinearConv's. */
static bool conv_operands(Imp *im, ONode *n, bool qlinear, Int8 *xi, Int8 *wi, Quant *xq, Quant *wq,
                          Window *win, int64_t *group) {
  Val *x = in_req(im, n, 0), *w = in_req(im, n, qlinear ? 3 : 1);
  if (!x || !w || !attr_int(im, "group", 1, group)) return false;
  if (w->type.rank != x->type.rank)
    return bad(im, "weight rank %d differs from input rank %d", w->type.rank, x->type.rank);
  if (!window_attrs(im, x, w->type.dims + 2, win)) return false;
  DType zdt;
  Val *xs = qlinear ? in_req(im, n, 1) : NULL, *ws = qlinear ? in_req(im, n, 4) : NULL;
  if (qlinear && (!xs || !ws)) return false;
  if (!quant_params(im, &x->type, xs, in_opt(n, 2), -1, "x", xq, &zdt) ||
      !quant_params(im, &w->type, ws, in_opt(n, qlinear ? 5 : 3), 0, "w", wq, &zdt))
    return false;
  return to_int8(im, to_2d(im, x), xq, "x", xi) && to_int8(im, to_2d(im, w), wq, "w", wi);
}

static bool op_conv_integer(Imp *im, ONode *n) {
  Int8 x, w;
  Quant xq, wq;
  Window win;
  int64_t group;
  if (!conv_operands(im, n, false, &x, &w, &xq, &wq, &win, &group)) return false;
  return (n->out[0] = from_2d(im, int_conv(im, &x, &w, NULL, &win, group), win.spatial));
}

/* An i32 bias [C]: QLinearConv's B, or a QDQ bias whose scale is the
 * product's (so its codes add to the accumulator as they are). */
static Val *i32_bias(Imp *im, Val *b, int64_t channels) {
  if (!b) return NULL;
  if (b->type.dtype != TY_I32 || b->type.rank != 1 || b->type.dims[0] != channels) {
    bad(im, "the bias must be INT32 [%" PRId64 "]", channels);
    return NULL;
  }
  return b;
}

static bool op_qlinear_conv(Imp *im, ONode *n) {
  Int8 x, w;
  Quant xq, wq, yq;
  Window win;
  int64_t group;
  DType zdt;
  Val *ys = in_req(im, n, 6), *b = in_opt(n, 8);
  if (!ys || !conv_operands(im, n, true, &x, &w, &xq, &wq, &win, &group) ||
      !quant_params(im, &x.v->type, ys, in_opt(n, 7), -1, "y", &yq, &zdt))
    return false;
  int64_t cout = w.v->type.dims[0];
  if (b && !(b = i32_bias(im, b, cout))) return false;
  Val *acc = int_conv(im, &x, &w, b, &win, group);
  Quant m = product_scales(im, &xq, &wq, 1, yq.scale[0]);
  DType to = quantized_dtype_of(zdt != TY_COUNT ? zdt : in_req(im, n, 0)->type.dtype);
  return (n->out[0] = from_2d(im, acc ? requantize(im, acc, &m, yq.zp[0], to) : NULL, win.spatial));
}

/* a, b and their zero points (MatMulInteger: per row of a, per column
 * of b) or all of QLinearMatMul's (a per tensor, b per column). */
static bool matmul_operands(Imp *im, ONode *n, bool qlinear, Int8 *ai, Int8 *bi, Quant *aq, Quant *bq) {
  Val *a = in_req(im, n, 0), *b = in_req(im, n, qlinear ? 3 : 1);
  if (!a || !b) return false;
  if (a->type.rank < 2 || b->type.rank < 2)
    return bad(im, "A and B must have at least 2 dims, got ranks %d and %d", a->type.rank, b->type.rank);
  Val *as = qlinear ? in_req(im, n, 1) : NULL, *bs = qlinear ? in_req(im, n, 4) : NULL;
  if (qlinear && (!as || !bs)) return false;
  DType zdt;
  if (!quant_params(im, &a->type, as, in_opt(n, 2), qlinear ? -1 : a->type.rank - 2, "a", aq, &zdt) ||
      !quant_params(im, &b->type, bs, in_opt(n, qlinear ? 5 : 3), b->type.rank - 1, "b", bq, &zdt))
    return false;
  return to_int8(im, a, aq, "A", ai) && to_int8(im, b, bq, "B", bi);
}

static bool op_matmul_integer(Imp *im, ONode *n) {
  Int8 a, b;
  Quant aq, bq;
  if (!matmul_operands(im, n, false, &a, &b, &aq, &bq)) return false;
  return (n->out[0] = int_product(im, &a, &b));
}

static bool op_qlinear_matmul(Imp *im, ONode *n) {
  Int8 a, b;
  Quant aq, bq, yq;
  DType zdt;
  Val *ys = in_req(im, n, 6);
  if (!ys || !matmul_operands(im, n, true, &a, &b, &aq, &bq)) return false;
  Val *acc = int_product(im, &a, &b);
  if (!acc || !quant_params(im, &acc->type, ys, in_opt(n, 7), -1, "y", &yq, &zdt)) return false;
  Quant m = product_scales(im, &aq, &bq, acc->type.rank - 1, yq.scale[0]);
  DType to = quantized_dtype_of(zdt != TY_COUNT ? zdt : a.v->type.dtype);
  return (n->out[0] = requantize(im, acc, &m, yq.zp[0], to));
}

/* ---- QDQ: products of dequantized operands ---- */

/* x's quantization when it is DequantizeLinear's result of i8 or u8
 * codes, one value per tensor (per slice along `axis` allowed when axis
 * >= 0). */
static const Quant *dq_of(const Val *x, int axis) {
  const Quant *d = x ? x->dq : NULL;
  if (!d || d->acc || (d->q->type.dtype != TY_I8 && d->q->type.dtype != TY_U8)) return NULL;
  if (d->axis >= 0 && (axis < 0 || d->axis != axis)) return NULL;
  return d;
}

/* A QDQ bias: INT32 codes dequantized by exactly the product's scales
 * with zero point 0, as onnxruntime's quantizer writes it. */
static Val *qdq_bias(Val *b, const Quant *s) {
  const Quant *d = b ? b->dq : NULL;
  if (!d || d->q->type.dtype != TY_I32 || !zp_zero(d) || d->q->type.rank != 1) return NULL;
  int64_t c = d->q->type.dims[0];
  if (c != s->n && !(s->n == 1 && d->n == 1)) return NULL;
  for (int64_t i = 0; i < c; i++)
    if (d->scale[d->n == 1 ? 0 : i] != s->scale[s->n == 1 ? 0 : i]) return NULL;
  return d->q;
}

/* y = dequantize(acc) by the product's scales (+ a float bias), noting
 * acc so that a following QuantizeLinear requantizes it. */
static Val *qdq_result(Imp *im, Val *acc, const Quant *s, Val *float_bias, int64_t bias_axis_rank) {
  Quant *p = ARENA_NEW(&im->c->arena, Quant);
  *p = *s;
  p->q = acc;
  p->acc = true;
  Val *y = acc ? emit_dequantize(im, acc, p) : NULL;
  if (!y) return NULL;
  if (!float_bias) {
    y->dq = p;
    return y;
  }
  int64_t dims[DL_MAX_RANK];
  for (int d = 0; d < bias_axis_rank; d++) dims[d] = d == 0 ? float_bias->type.dims[0] : 1;
  return op2(im, OP_ADD, y, reshape(im, float_bias, (int)bias_axis_rank, dims));
}

/* Conv of DequantizeLinear's x (per tensor) and w (per tensor or per
 * output channel): an int8 conv2d, else Conv as it is. */
static bool op_conv_qdq(Imp *im, ONode *n) {
  Val *x = in_opt(n, 0), *w = in_opt(n, 1), *b = in_opt(n, 2);
  const Quant *xq = dq_of(x, -1), *wq = dq_of(w, 0);
  /* int8 convolutions are 2-d: a 3-d one computes in f32 on the dequantized operands */
  if (!xq || !wq || x->type.rank != w->type.rank || x->type.rank > 4) return op_conv(im, n);
  int64_t group;
  Window win;
  Int8 xi, wi;
  if (!attr_int(im, "group", 1, &group) || !window_attrs(im, x, w->type.dims + 2, &win) ||
      !to_int8(im, to_2d(im, xq->q), xq, "x", &xi) || !to_int8(im, to_2d(im, wq->q), wq, "w", &wi))
    return false;
  Quant s = product_scales(im, xq, wq, 1, 0);
  Val *bq = qdq_bias(b, &s);
  Val *acc = int_conv(im, &xi, &wi, bq, &win, group);
  return (n->out[0] = from_2d(im, qdq_result(im, acc, &s, bq ? NULL : b, 3), win.spatial));
}

/* MatMul of DequantizeLinear's a (per tensor) and b (per tensor or per
 * column). */
static bool op_matmul_qdq(Imp *im, ONode *n) {
  Val *a = in_opt(n, 0), *b = in_opt(n, 1);
  const Quant *aq = dq_of(a, -1), *bq = b ? dq_of(b, b->type.rank - 1) : NULL;
  if (!aq || !bq || a->type.rank < 2 || b->type.rank < 2) return op_matmul(im, n);
  Int8 ai, bi;
  if (!to_int8(im, aq->q, aq, "A", &ai) || !to_int8(im, bq->q, bq, "B", &bi)) return false;
  Val *acc = int_product(im, &ai, &bi);
  if (!acc) return false;
  Quant s = product_scales(im, aq, bq, acc->type.rank - 1, 0);
  return (n->out[0] = qdq_result(im, acc, &s, NULL, 1));
}

/* Gemm (transA 0, alpha and beta 1) of DequantizeLinear's A and B: an
 * int8 linear layer with the bias C in i32 when it is the QDQ bias. */
static bool op_gemm_qdq(Imp *im, ONode *n) {
  Val *a = in_opt(n, 0), *b = in_opt(n, 1), *c = in_opt(n, 2);
  int64_t ta, tb;
  double alpha, beta;
  if (!attr_int(im, "transA", 0, &ta) || !attr_int(im, "transB", 0, &tb) ||
      !attr_float(im, "alpha", 1.0, &alpha) || !attr_float(im, "beta", 1.0, &beta))
    return false;
  const Quant *aq = dq_of(a, -1), *bq = b ? dq_of(b, tb ? 0 : 1) : NULL;
  if (!aq || !bq || ta || alpha != 1 || beta != 1 || a->type.rank != 2 || b->type.rank != 2 ||
      (c && (c->type.rank != 1 || c->type.dims[0] != b->type.dims[tb ? 0 : 1])) || im->opset < 7)
    return op_gemm(im, n);
  Int8 ai, bi;
  if (!to_int8(im, aq->q, aq, "A", &ai) || !to_int8(im, bq->q, bq, "B", &bi)) return false;
  if (!tb) bi = transposed(im, bi);
  Quant s = product_scales(im, aq, bq, 1, 0);
  Val *cq = qdq_bias(c, &s);
  return (n->out[0] = qdq_result(im, int_linear(im, &ai, &bi, cq), &s, cq ? NULL : c, 1));
}

/* ---- the op table ---- */

typedef bool (*OpFn)(Imp *im, ONode *n);

typedef struct OpEntry {
  const char *name;
  OpFn fn;
  const char *note; /* limits, for --onnx-support */
} OpEntry;

static const OpEntry onnx_ops[] = {
    {"Abs", op_unary, NULL},
    {"Acos", op_unary, NULL},
    {"Acosh", op_unary, NULL},
    {"Add", op_binary, "NumPy broadcasting"},
    {"And", op_logic, NULL},
    {"ArgMax", op_argmax, NULL},
    {"ArgMin", op_argmax, NULL},
    {"Asin", op_unary, NULL},
    {"Asinh", op_unary, NULL},
    {"Atan", op_unary, NULL},
    {"Atanh", op_unary, NULL},
    {"AveragePool", op_pool, "1-d and 2-d; pads at most half the kernel"},
    {"BatchNormalization", op_batchnorm, "inference (training_mode=0, one output)"},
    {"Cast", op_cast, "to FLOAT, FLOAT16, BFLOAT16, INT8, UINT8, INT32, INT64, BOOL (nonzero is true; "
                      "a float to UINT8 truncates and wraps, as onnxruntime)"},
    {"CastLike", op_cast, NULL},
    {"Ceil", op_unary, NULL},
    {"Celu", op_elu_family, NULL},
    {"Clip", op_clip, "min and max constant"},
    {"Concat", op_concat, NULL},
    {"Constant", op_constant, "value, value_float(s), value_int(s)"},
    {"ConstantOfShape", op_constant_of_shape, "constant shape"},
    {"Conv", op_conv_qdq, "1-d and 2-d, any auto_pad, pads, strides, dilations, group; of "
                          "DequantizeLinear's x and w: an int8 convolution"},
    {"ConvInteger", op_conv_integer, "UINT8/INT8, zero points per tensor (w: or per channel)"},
    {"ConvTranspose", op_conv_transpose,
     "1-d and 2-d, any auto_pad, pads or output_shape, strides, dilations, group, "
     "output_padding"},
    {"Cos", op_unary, NULL},
    {"Cosh", op_unary, NULL},
    {"DepthToSpace", op_depth_space, "DCR and CRD"},
    {"DequantizeLinear", op_dequantize_linear, "UINT8, INT8, INT32; per tensor or per axis"},
    {"Div", op_binary, NULL},
    {"Dropout", op_dropout, "inference: the identity; no mask output"},
    {"Elu", op_elu_family, NULL},
    {"Equal", op_logic, NULL},
    {"Erf", op_unary, NULL},
    {"Exp", op_unary, NULL},
    {"Expand", op_expand, "constant shape"},
    {"EyeLike", op_eye_like, "folded at import"},
    {"Flatten", op_flatten, NULL},
    {"Floor", op_unary, NULL},
    {"Gather", op_gather, "constant or runtime indices"},
    {"GatherElements", op_gather_elements, "constant or runtime indices"},
    {"GatherND", op_gather_nd, "batch_dims"},
    {"Gelu", op_gelu, "approximate none or tanh"},
    {"Gemm", op_gemm_qdq, "transA, transB, alpha, beta; of DequantizeLinear's A and B: an int8 "
                          "linear layer"},
    {"GlobalAveragePool", op_global_pool, NULL},
    {"GlobalMaxPool", op_global_pool, NULL},
    {"Greater", op_logic, NULL},
    {"GreaterOrEqual", op_logic, NULL},
    {"GridSample", op_grid_sample, "4-d; bilinear, nearest, bicubic; zeros, border, reflection padding"},
    {"GRU", op_rnn, "forward/reverse/bidirectional, layout 0/1; unrolled (up to 1024 steps) for "
                    "linear_before_reset=0, clip, other activations, initial state, sequence_lens"},
    {"Hardmax", op_hardmax, "argmax and an equal to an iota"},
    {"HardSigmoid", op_hardsigmoid, NULL},
    {"HardSwish", op_unary, NULL},
    {"Identity", op_identity, NULL},
    {"InstanceNormalization", op_instancenorm, NULL},
    {"IsInf", op_isinf, "detect_negative, detect_positive"},
    {"IsNaN", op_logic, NULL},
    {"LayerNormalization", op_layernorm, "stash_type=1; Mean and InvStdDev outputs too"},
    {"LeakyRelu", op_leaky_relu, NULL},
    {"Less", op_logic, NULL},
    {"LessOrEqual", op_logic, NULL},
    {"Log", op_unary, NULL},
    {"LogSoftmax", op_softmax, NULL},
    {"LRN", op_lrn, "as x^2, an avgpool2d over channels, pow and div"},
    {"LSTM", op_rnn, "forward/reverse/bidirectional, layout 0/1; unrolled (up to 1024 steps) for "
                     "peepholes, clip, input_forget, other activations, initial state, sequence_lens"},
    {"MatMul", op_matmul_qdq, "of DequantizeLinear's A and B: an int8 matmul"},
    {"MatMulInteger", op_matmul_integer, "UINT8/INT8, zero points per tensor, per row of A, per column of B"},
    {"Max", op_variadic, NULL},
    {"MaxPool", op_pool, "1-d and 2-d; no Indices output; pads at most half the kernel"},
    {"Mean", op_variadic, NULL},
    {"Min", op_variadic, NULL},
    {"Mod", op_mod, "fmod 0 and 1, integers and floats"},
    {"Mul", op_binary, NULL},
    {"Neg", op_unary, NULL},
    {"NegativeLogLikelihoodLoss", op_nll_loss, "reduction none/sum/mean, weight, ignore_index"},
    {"Not", op_logic, NULL},
    {"OneHot", op_one_hot, "constant depth; equal to an iota and a where"},
    {"Or", op_logic, NULL},
    {"Pad", op_pad, "modes constant, reflect, edge (and wrap from opset 19); constant pads"},
    {"Pow", op_binary, NULL},
    {"PRelu", op_prelu, NULL},
    {"QLinearConv", op_qlinear_conv, "UINT8/INT8; w scales and zero points per tensor or per channel"},
    {"QLinearMatMul", op_qlinear_matmul, "UINT8/INT8; a per tensor, b per tensor or per column"},
    {"QuantizeLinear", op_quantize_linear, "to UINT8 or INT8, per tensor or per axis (saturating, "
                                           "round half to even)"},
    {"Range", op_range, "constant inputs"},
    {"Reciprocal", op_unary, NULL},
    {"ReduceL1", op_reduce, NULL},
    {"ReduceL2", op_reduce, NULL},
    {"ReduceLogSum", op_reduce, NULL},
    {"ReduceLogSumExp", op_reduce, NULL},
    {"ReduceMax", op_reduce, "axes as attribute or constant input, per opset"},
    {"ReduceMean", op_reduce, "axes as attribute or constant input, per opset"},
    {"ReduceMin", op_reduce, NULL},
    {"ReduceProd", op_reduce, NULL},
    {"ReduceSum", op_reduce, "axes as attribute or constant input, per opset"},
    {"ReduceSumSquare", op_reduce, NULL},
    {"RNN", op_rnn, "unrolled (up to 1024 steps); the activations, clip, initial state, sequence_lens"},
    {"Relu", op_unary, NULL},
    {"Round", op_unary, "half to even"},
    {"Scatter", op_scatter_elements, "opset 9-10: ScatterElements without reduction"},
    {"ScatterElements", op_scatter_elements, "reduction none, add, mul, max, min"},
    {"ScatterND", op_scatter_nd, "reduction none, add, mul, max, min"},
    {"Reshape", op_reshape, "constant shape (0 and -1 rules)"},
    {"Resize", op_resize,
     "constant scales or sizes (and roi); every mode, coordinate transformation and nearest_mode, "
     "cubic_coeff_a, exclude_outside, extrapolation_value, antialias, axes, "
     "keep_aspect_ratio_policy"},
    {"Selu", op_elu_family, NULL},
    {"Shrink", op_shrink, NULL},
    {"Shape", op_shape, "folded at import"},
    {"Sigmoid", op_unary, NULL},
    {"Sign", op_unary, NULL},
    {"Sin", op_unary, NULL},
    {"Sinh", op_unary, NULL},
    {"Size", op_size, "folded at import"},
    {"Slice", op_slice, "constant starts/ends/axes/steps, negative steps too"},
    {"Softmax", op_softmax, "per-axis from opset 13, 2-d coercion before"},
    {"SoftmaxCrossEntropyLoss", op_softmax_ce_loss, "as log_softmax and NegativeLogLikelihoodLoss"},
    {"Softplus", op_softplus, NULL},
    {"Softsign", op_softsign, NULL},
    {"SpaceToDepth", op_depth_space, NULL},
    {"Split", op_split, NULL},
    {"Sqrt", op_unary, NULL},
    {"Squeeze", op_squeeze, NULL},
    {"Sub", op_binary, NULL},
    {"Sum", op_variadic, NULL},
    {"Tan", op_unary, NULL},
    {"Tanh", op_unary, NULL},
    {"ThresholdedRelu", op_thresholded_relu, NULL},
    {"Tile", op_tile, "constant repeats"},
    {"TopK", op_topk, "constant K; sorted results"},
    {"Transpose", op_transpose, NULL},
    {"Trilu", op_trilu, "constant k"},
    {"Unsqueeze", op_unsqueeze, NULL},
    {"Upsample", op_resize, "as Resize-10 (asymmetric)"},
    {"Where", op_where, "NumPy broadcasting of all three"},
    {"Xor", op_logic, NULL},
};

/* The newest opset whose changes to these ops are handled. */
enum { ONNX_OPSET_KNOWN = 21 };

static const OpEntry *find_op(const char *name) {
  for (size_t i = 0; i < ARRAY_LEN(onnx_ops); i++)
    if (strcmp(onnx_ops[i].name, name) == 0) return &onnx_ops[i];
  return NULL;
}

bool fe_onnx_enabled(void) { return true; }

void fe_onnx_print_support(FILE *f) {
  fprintf(f,
          "ONNX import (opsets up to %d; 13 and later are the target, older ones where an op's\n"
          "meaning is handled).  Data types: FLOAT, "
          "FLOAT16, BFLOAT16, INT8, UINT8, INT32, INT64, BOOL; static shapes, a symbolic dim bound with "
          "-D NAME=VALUE; initializers (also external data) become params.\n\nops:\n",
          ONNX_OPSET_KNOWN);
  for (size_t i = 0; i < ARRAY_LEN(onnx_ops); i++)
    fprintf(f, "  %-22s%s\n", onnx_ops[i].name, onnx_ops[i].note ? onnx_ops[i].note : "");
}

/* ---- graphs ---- */

static bool type_of_info(Imp *im, const Onnx__ValueInfoProto *vi, const char *what, TensorType *out) {
  const char *name = vi->name ? vi->name : "";
  const Onnx__TypeProto *tp = vi->type;
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
    return bad(im, "%s '%s' is not a tensor (sequences, maps and optionals are not supported)", what, name);
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  DType dt;
  if (!dtype_from_onnx(tt->elem_type, &dt))
    return bad(im, "%s '%s' has dtype %s, which is not supported (%s)", what, name,
               onnx_type_name(tt->elem_type), dtypes_we_have);
  if (!tt->shape) return bad(im, "%s '%s' has no shape: dlcc needs static shapes", what, name);
  if (tt->shape->n_dim > DL_MAX_RANK)
    return bad(im, "%s '%s' has rank %zu, more than the supported %d", what, name, tt->shape->n_dim,
               (int)DL_MAX_RANK);
  *out = (TensorType){.dtype = dt, .rank = (int)tt->shape->n_dim};
  for (size_t i = 0; i < tt->shape->n_dim; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    int64_t v;
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      v = d->dim_value;
    } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param &&
               *d->dim_param) {
      int k = -1;
      for (int j = 0; im->opt && j < im->opt->n_defines; j++)
        if (strcmp(im->opt->defines[j].name, d->dim_param) == 0) k = j;
      if (k < 0)
        return bad(im, "dim %zu of %s '%s' is the symbolic '%s': bind it with -D %s=VALUE", i, what,
                   name, d->dim_param, d->dim_param);
      im->define_used[k] = true;
      v = im->opt->defines[k].value;
    } else {
      return bad(im, "dim %zu of %s '%s' is unknown: dlcc needs static shapes", i, what, name);
    }
    if (v == 0) return bad(im, "dim %zu of %s '%s' is 0: empty tensors are not supported", i, what, name);
    if (v < 0 || v > DL_MAX_ELEMS)
      return bad(im, "dim %zu of %s '%s' is %" PRId64 ", out of range (1 to %" PRId64 ")", i, what,
                 name, v, DL_MAX_ELEMS);
    out->dims[i] = v;
  }
  if (ir_type_numel(out) < 0)
    return bad(im, "%s '%s' is larger than %" PRId64 " elements", what, name, DL_MAX_ELEMS);
  return true;
}

/* Kahn's algorithm over the nodes; order[] gets them so that every value
 * is produced before it is used. */
static bool topo_order(Imp *im, const Onnx__GraphProto *gp, int *order) {
  int n = (int)gp->n_node;
  Arena *a = &im->c->arena;
  int *indeg = ARENA_ARRAY(a, int, n + 1), *start = ARENA_ARRAY(a, int, n + 2);
  int total = 0;
  for (int i = 0; i < n; i++) total += (int)gp->node[i]->n_input;
  int *edges = ARENA_ARRAY(a, int, total + 1), *fill = ARENA_ARRAY(a, int, n + 1);
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < gp->node[i]->n_input; j++) {
      const char *in = gp->node[i]->input[j];
      Entry *e = in && *in ? find_entry(im, in) : NULL;
      if (e && e->producer >= 0) start[e->producer + 1]++, indeg[i]++;
    }
  for (int i = 0; i < n; i++) start[i + 1] += start[i];
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < gp->node[i]->n_input; j++) {
      const char *in = gp->node[i]->input[j];
      Entry *e = in && *in ? find_entry(im, in) : NULL;
      if (e && e->producer >= 0) edges[start[e->producer] + fill[e->producer]++] = i;
    }
  int head = 0, tail = 0;
  for (int i = 0; i < n; i++)
    if (indeg[i] == 0) order[tail++] = i;
  while (head < tail) {
    int i = order[head++];
    for (int k = start[i]; k < start[i + 1]; k++)
      if (--indeg[edges[k]] == 0) order[tail++] = edges[k];
  }
  if (tail == n) return true;
  for (int i = 0; i < n; i++)
    if (indeg[i] > 0) {
      im->np = gp->node[i];
      im->node_index = i;
      return bad(im, "the graph has a cycle through this node");
    }
  return bad(im, "the graph has a cycle");
}

static bool import_node(Imp *im, const Onnx__GraphProto *gp, int idx) {
  const Onnx__NodeProto *np = gp->node[idx];
  im->np = np;
  im->node_index = idx;
  im->loc = (SrcLoc){im->src, idx + 1, 1};
  im->attr_used = ARENA_ARRAY(&im->c->arena, bool, np->n_attribute + 1);
  if (!np->op_type || !*np->op_type) return bad(im, "the node has no op_type");
  if (np->domain && *np->domain && strcmp(np->domain, "ai.onnx") != 0)
    return bad(im, "ops of domain '%s' are not supported", np->domain);
  const OpEntry *op = find_op(np->op_type);
  if (!op) return bad(im, "op %s is not supported (dlcc --onnx-support lists the ones that are)", np->op_type);
  for (size_t i = 0; i < np->n_attribute; i++)
    if (!np->attribute[i]->name) return bad(im, "an attribute has no name");
  ONode on = {.n_in = (int)np->n_input, .n_out = (int)np->n_output};
  on.in = ARENA_ARRAY(&im->c->arena, Val *, on.n_in + 1);
  on.out = ARENA_ARRAY(&im->c->arena, Val *, on.n_out + 1);
  bool *want = ARENA_ARRAY(&im->c->arena, bool, on.n_out + 1);
  on.want = want;
  for (int i = 0; i < on.n_in; i++) {
    const char *in = np->input[i];
    if (in && *in) on.in[i] = find_entry(im, in)->val;
  }
  for (int i = 0; i < on.n_out; i++) want[i] = np->output[i] && *np->output[i];
  for (int i = 0; i < on.n_in; i++)
    if (on.in[i] && on.in[i]->empty && (op->fn != op_resize || i == 0)) /* roi, scales, sizes */
      return bad(im, "input %d ('%s') is an empty tensor: dlcc has no empty tensors", i + 1, np->input[i]);
  int errors = im->c->diag.errors;
  if (!op->fn(im, &on)) {
    if (im->c->diag.errors == errors) bad(im, "cannot import this node");
    return false;
  }
  for (size_t i = 0; i < np->n_attribute; i++)
    if (!im->attr_used[i]) return bad(im, "attribute '%s' is not supported", np->attribute[i]->name);
  for (int i = 0; i < on.n_out; i++) {
    if (!want[i]) continue;
    if (!on.out[i]) return bad(im, "output %d is not supported", i + 1);
    Entry *e = find_entry(im, np->output[i]);
    e->val = on.out[i];
    if (!on.out[i]->name) on.out[i]->name = e->name;
  }
  return true;
}

static bool import_graph(Imp *im, const Onnx__ModelProto *m) {
  Arena *a = &im->c->arena;
  if (!m->has_ir_version) return bad(im, "not an ONNX model: no ir_version");
  im->opset = -1;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = m->opset_import[i];
    if (!o->domain || !*o->domain || strcmp(o->domain, "ai.onnx") == 0) im->opset = o->version;
  }
  if (im->opset < 0) {
    const char *other = m->n_opset_import && m->opset_import[0]->domain ? m->opset_import[0]->domain : NULL;
    if (other) return bad(im, "opset domain '%s' is not supported (only the ONNX opset)", other);
    return bad(im, "the model imports no ONNX opset");
  }
  if (im->opset < 1) return bad(im, "opset %" PRId64 " is invalid", im->opset);
  if (im->opset > ONNX_OPSET_KNOWN)
    diag_warning(im->c, (SrcLoc){0}, "%s: opset %" PRId64 " is newer than dlcc knows (%d)", im->file,
                 im->opset, (int)ONNX_OPSET_KNOWN);
  const Onnx__GraphProto *gp = m->graph;
  if (!gp) return bad(im, "the model has no graph");
  im->g = ir_graph_new(im->c, gp->name && *gp->name ? gp->name : "onnx");
  im->loc = (SrcLoc){0};
  if (gp->n_sparse_initializer) return bad(im, "sparse initializers are not supported");
  for (size_t i = 0; i < gp->n_initializer; i++) {
    const Onnx__TensorProto *t = gp->initializer[i];
    if (!t->name || !*t->name) return bad(im, "initializer %zu has no name", i);
    if (find_entry(im, t->name)) return bad(im, "initializer '%s' is defined twice", t->name);
    Tensor data;
    char err[512];
    Entry *e;
    if (proto_is_empty(t)) {
      e = add_entry(im, t->name, -1);
      e->val = empty_val(im);
      e->val->name = e->name;
      continue;
    }
    if (!tensor_from_proto(t, im->dir, &data, err, sizeof err))
      return bad(im, "initializer '%s': %s", t->name, err);
    e = add_entry(im, t->name, -1);
    e->val = known(im, data);
    e->val->name = e->name;
  }
  for (size_t i = 0; i < gp->n_input; i++) {
    const Onnx__ValueInfoProto *vi = gp->input[i];
    if (!vi->name || !*vi->name) return bad(im, "graph input %zu has no name", i);
    Entry *e = find_entry(im, vi->name);
    if (e && (e->val->k || e->val->empty)) continue; /* an initializer's default: a param */
    if (e) return bad(im, "graph input '%s' is declared twice", vi->name);
    TensorType t;
    if (!type_of_info(im, vi, "graph input", &t)) return false;
    e = add_entry(im, vi->name, -1);
    e->val = val_of(im, &ir_source(im->g, OP_INPUT, &t, vi->name, im->loc)->out[0]);
    e->val->name = e->name;
    const Tensor *hint = im->opt && im->opt->known ? ir_tensor_map_find(im->opt->known, vi->name) : NULL;
    if (hint && ir_type_eq(&hint->type, &t)) e->val->hint = hint;
  }
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    for (size_t j = 0; j < np->n_output; j++) {
      const char *out = np->output[j];
      if (!out || !*out) continue;
      Entry *e = find_entry(im, out);
      if (e) {
        im->np = np;
        im->node_index = (int)i;
        return bad(im, "value '%s' is defined twice (also %s)", out,
                   e->producer < 0 ? "as a graph input or initializer" : "by an earlier node");
      }
      add_entry(im, out, (int)i);
    }
  }
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    for (size_t j = 0; j < np->n_input; j++) {
      const char *in = np->input[j];
      if (in && *in && !find_entry(im, in)) {
        im->np = np;
        im->node_index = (int)i;
        return bad(im, "input '%s' is not defined: no graph input, initializer or node produces it", in);
      }
    }
  }
  int *order = ARENA_ARRAY(a, int, gp->n_node + 1);
  if (!topo_order(im, gp, order)) return false;
  for (size_t i = 0; i < gp->n_node; i++) {
    if (!import_node(im, gp, order[i])) return false;
    if (diag_should_stop(im->c)) return false;
  }
  im->np = NULL;
  im->loc = (SrcLoc){0};
  if (gp->n_output == 0) return bad(im, "the graph has no outputs");
  int n_out = (int)gp->n_output;
  Value **outs = ARENA_ARRAY(a, Value *, n_out);
  const char **names = ARENA_ARRAY(a, const char *, n_out);
  for (int i = 0; i < n_out; i++) {
    const Onnx__ValueInfoProto *vi = gp->output[i];
    Entry *e = vi->name && *vi->name ? find_entry(im, vi->name) : NULL;
    if (!e || !e->val) return bad(im, "graph output '%s' is not computed by any node", vi->name ? vi->name : "");
    if (e->val->empty)
      return bad(im, "graph output '%s' is an empty tensor: dlcc has no empty tensors", e->name);
    outs[i] = use(im, e->val);
    names[i] = e->name;
    /* A declared output type must agree with what the graph computes. */
    const Onnx__TypeProto *tp = vi->type;
    if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type) {
      const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
      DType dt;
      bool mismatch = tt->has_elem_type && tt->elem_type && (!dtype_from_onnx(tt->elem_type, &dt) || dt != outs[i]->type.dtype);
      if (tt->shape) {
        mismatch |= (int)tt->shape->n_dim != outs[i]->type.rank;
        for (size_t d = 0; !mismatch && d < tt->shape->n_dim; d++)
          if (tt->shape->dim[d]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            mismatch |= tt->shape->dim[d]->dim_value != outs[i]->type.dims[d];
      }
      if (mismatch) {
        char buf[IR_TYPE_STR_MAX];
        return bad(im, "graph output '%s' computes %s, which differs from its declared type", e->name,
                   ir_type_str(&outs[i]->type, buf, sizeof buf));
      }
    }
  }
  ir_set_outputs(im->g, n_out, outs, names);
  for (int j = 0; im->opt && j < im->opt->n_defines; j++)
    if (!im->define_used[j])
      diag_warning(im->c, (SrcLoc){0}, "-D %s: the model has no symbolic dim of that name",
                   im->opt->defines[j].name);
  return true;
}

/* Moves each param's data into out (the params map). */
static void take_params(Imp *im, TensorMap *out) {
  out->n = im->n_params;
  out->names = calloc((size_t)(im->n_params + 1), sizeof *out->names);
  out->tensors = calloc((size_t)(im->n_params + 1), sizeof *out->tensors);
  if (!out->names || !out->tensors) dl_internal(im->c, "out of memory");
  for (int i = 0; i < im->n_params; i++) {
    Val *v = im->params[i];
    out->names[i] = strdup(v->name);
    if (!out->names[i]) dl_internal(im->c, "out of memory");
    out->tensors[i] = *v->k;
    v->k->data = NULL; /* now the map's */
  }
}

static void free_owned(Imp *im) {
  for (int i = 0; i < im->n_owned; i++) {
    ir_tensor_free(im->owned[i]);
    free(im->owned[i]);
  }
  free(im->owned);
  free(im->params);
  im->owned = NULL;
  im->params = NULL;
  im->n_owned = im->n_params = 0;
}

Graph *fe_onnx_import_bytes(Ctx *c, const char *name, const void *data, size_t len,
                            const OnnxOptions *opt, TensorMap *params) {
  *params = (TensorMap){0};
  Imp im = {.c = c, .file = name, .opt = opt, .fold_max = FOLD_MAX_ELEMS};
  if (opt && opt->max_fold_elems > 0) im.fold_max = opt->max_fold_elems;
  im.dir = dir_of(&c->arena, name);
  im.src = ctx_add_file(c, name, NULL, 0);
  im.buckets = ARENA_ARRAY(&c->arena, Entry *, N_BUCKETS);
  im.define_used = ARENA_ARRAY(&c->arena, bool, (opt ? opt->n_defines : 0) + 1);
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, data);
  if (!m) {
    bad(&im, "not an ONNX model: the file does not decode as a ModelProto (truncated, or not "
             "protobuf)");
    return NULL;
  }
  bool ok = import_graph(&im, m);
  onnx__model_proto__free_unpacked(m, NULL);
  if (ok) ok = ir_verify(im.g);
  if (ok) take_params(&im, params);
  free_owned(&im);
  return ok ? im.g : NULL;
}

Graph *fe_onnx_import(Ctx *c, const char *path, const OnnxOptions *opt, TensorMap *params) {
  *params = (TensorMap){0};
  char err[512];
  size_t len;
  void *buf = read_whole(path, &len, err, sizeof err);
  if (!buf) {
    diag_error(c, (SrcLoc){0}, "%s", err);
    return NULL;
  }
  Graph *g = fe_onnx_import_bytes(c, path, buf, len, opt, params);
  free(buf);
  return g;
}

#else /* !HAVE_ONNX */

static const char no_onnx[] =
    "this dlcc was built without ONNX support (it needs libprotobuf-c: install "
    "libprotobuf-c-dev and reconfigure)";

bool fe_onnx_enabled(void) { return false; }

Graph *fe_onnx_import_bytes(Ctx *c, const char *name, const void *data, size_t len,
                            const OnnxOptions *opt, TensorMap *params) {
  *params = (TensorMap){0};
  diag_error(c, (SrcLoc){0}, "%s: %s", name, no_onnx);
  return NULL;
}

Graph *fe_onnx_import(Ctx *c, const char *path, const OnnxOptions *opt, TensorMap *params) {
  return fe_onnx_import_bytes(c, path, NULL, 0, opt, params);
}

bool fe_onnx_read_tensor(const char *path, Tensor *out, char **name, char *err, size_t errlen) {
  *out = (Tensor){0};
  if (name) *name = NULL;
  snprintf(err, errlen, "%s", no_onnx);
  return false;
}

void fe_onnx_print_support(FILE *f) { fprintf(f, "%s\n", no_onnx); }

#endif

/* ONNX tensors and files: takes a TensorProto (inline data or external
 * data next to the model) or a path, returns host tensors (malloc'd data)
 * and whole files in memory; maps ONNX dtypes onto dlcc's.  Files come
 * from the model's author: only regular files are read (never a FIFO or
 * a device), external data only from inside the model's folder, and
 * every size the model states is checked against the file before
 * anything is allocated for it. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/onnx_internal.h"
#include "runtime/tensorio.h"

/* A model file larger than this is refused before reading (protobuf
 * itself stops at 2 GiB). */
#define MAX_MODEL_BYTES ((size_t)1 << 31)

/* ---- ONNX dtypes ---- */

static const char *const onnx_type_names[] = {
    "UNDEFINED", "FLOAT",  "UINT8",  "INT8",   "UINT16",    "INT16",      "INT32",   "INT64", "STRING",
    "BOOL",      "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
    "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1",
    "FLOAT8E8M0", "UINT2", "INT2",
};

const char *ox_onnx_type_name(int32_t t) {
  return t >= 0 && t < (int32_t)ARRAY_LEN(onnx_type_names) ? onnx_type_names[t] : "an unknown dtype";
}

bool ox_dtype_from_onnx(int32_t t, DType *out) {
  switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: *out = TY_F32; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: *out = TY_F16; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: *out = TY_BF16; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: *out = TY_I8; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: *out = TY_I32; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: *out = TY_I64; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: *out = TY_BOOL; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8: *out = TY_U8; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: *out = TY_F64; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: *out = TY_I16; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: *out = TY_U16; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: *out = TY_U32; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: *out = TY_U64; return true;
    default: return false;
  }
}

/* The narrow types dlcc holds in a wider dtype (ir/narrow.c): their
 * values only, for Cast (docs/onnx.md). */
const IrNarrow *ox_held_format(int32_t t, DType *storage) {
  static const char *const names[] = {"e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz", "u4", "i4", "e2m1", "e8m0", "u2", "i2"};
  if (t < 17 || t > 26 || !names[t - 17]) return NULL;
  const IrNarrow *f = ir_narrow_find(names[t - 17]);
  /* e8m0's 2^-127 .. 2^127 need f32's exponent */
  *storage = f->kind == IR_NARROW_E8M0 ? TY_F32 : f->kind == IR_NARROW_FLOAT ? TY_F16 : f->emin < 0 ? TY_I8 : TY_U8;
  return f;
}

const char ox_dtypes_we_have[] =
    "dlcc has FLOAT, DOUBLE, FLOAT16, BFLOAT16, INT8, UINT8, INT16, UINT16, INT32, UINT32, INT64, UINT64 and "
    "BOOL; FLOAT8* (FLOAT8E8M0 too), FLOAT4E2M1, INT4, UINT4, INT2 and UINT2 through Cast and (De)QuantizeLinear";

__attribute__((format(printf, 3, 4))) static bool efail(char *err, size_t errlen, const char *fmt,
                                                         ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return false;
}

/* ---- files ---- */

/* Whole file into malloc'd memory, sized by the file before reading. */
void *ox_read_whole(const char *path, size_t *len, char *err, size_t errlen) {
  char why[256];
  int64_t size;
  int fd = rt_open_regular(path, 0, &size, why, sizeof why);
  if (fd < 0) {
    efail(err, errlen, "cannot read '%s': %s", path, why);
    return NULL;
  }
  unsigned char *buf = NULL;
  if ((uint64_t)size > MAX_MODEL_BYTES)
    efail(err, errlen, "cannot read '%s': larger than %zu bytes", path, MAX_MODEL_BYTES);
  else if (!(buf = malloc(size ? (size_t)size : 1)))
    efail(err, errlen, "cannot read '%s': out of memory for %" PRId64 " bytes", path, size);
  else if (rt_read_at(fd, buf, (size_t)size, 0) != 0) {
    efail(err, errlen, "cannot read '%s': %s", path, errno ? strerror(errno) : "it shrank while read");
    free(buf);
    buf = NULL;
  }
  close(fd);
  *len = buf ? (size_t)size : 0;
  return buf;
}

static char *dir_dup(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
}

char *ox_dir_of(Arena *a, const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? arena_strndup(a, path, (size_t)(slash - path)) : arena_strdup(a, ".");
}

/* External data: location, offset and length, checked. */
typedef struct External {
  const char *location;
  long long offset, length; /* length -1: not given */
} External;

static bool external_fields(const Onnx__TensorProto *t, External *x, char *err, size_t errlen) {
  *x = (External){NULL, 0, -1};
  for (size_t i = 0; i < t->n_external_data; i++) {
    const Onnx__StringStringEntryProto *kv = t->external_data[i];
    if (!kv->key || !kv->value) continue;
    char *end;
    if (strcmp(kv->key, "location") == 0) {
      x->location = kv->value;
    } else if (strcmp(kv->key, "offset") == 0 || strcmp(kv->key, "length") == 0) {
      errno = 0;
      long long v = strtoll(kv->value, &end, 10);
      if (*end || end == kv->value || errno || v < 0)
        return efail(err, errlen, "external data %s '%s' is not a byte count", kv->key, kv->value);
      if (kv->key[0] == 'o')
        x->offset = v;
      else
        x->length = v;
    }
  }
  if (!x->location || !*x->location) return efail(err, errlen, "external data without a 'location'");
  /* Only files next to the model: a model from elsewhere must not read
   * arbitrary paths. */
  if (x->location[0] == '/' || strstr(x->location, "..") != NULL)
    return efail(err, errlen,
                 "external data location '%s' must be a relative path below the model's directory",
                 x->location);
  return true;
}

/* True when the resolved path lies below the resolved folder. */
static bool is_below(const char *rpath, const char *rdir) {
  size_t n = strlen(rdir);
  if (n == 1 && rdir[0] == '/') return true;
  return strncmp(rpath, rdir, n) == 0 && rpath[n] == '/';
}

/* Opens dir/location for nbytes at x->offset: a regular file that is
 * really inside the model's folder (no symlink as its last component, and
 * no symlinked folder on the way that leads out), long enough.  -1 with a
 * message. */
static int open_external(const char *dir, const External *x, size_t nbytes, char *err, size_t errlen) {
  char *path = NULL, *rdir = NULL, *rpath = NULL;
  int fd = -1;
  if (asprintf(&path, "%s/%s", dir, x->location) < 0) {
    path = NULL;
    efail(err, errlen, "out of memory");
    goto done;
  }
  rdir = realpath(dir, NULL);
  rpath = rdir ? realpath(path, NULL) : NULL;
  if (!rpath) {
    efail(err, errlen, "external data '%s': %s", path, strerror(errno));
    goto done;
  }
  if (!is_below(rpath, rdir)) {
    efail(err, errlen, "external data '%s' resolves to '%s', outside the model's folder '%s'", path, rpath,
          rdir);
    goto done;
  }
  char why[256];
  int64_t size;
  if ((fd = rt_open_regular(path, RT_NOFOLLOW, &size, why, sizeof why)) < 0) {
    efail(err, errlen, "external data '%s': %s", path, why);
    goto done;
  }
  /* What was opened must be the file resolved above, not one that a
   * folder swapped in since then leads to. */
  struct stat st, seen;
  if (fstat(fd, &st) != 0 || stat(rpath, &seen) != 0 || seen.st_dev != st.st_dev ||
      seen.st_ino != st.st_ino) {
    efail(err, errlen, "external data '%s' changed while it was opened", path);
    goto fail;
  }
  if (x->offset > size || (uint64_t)(size - x->offset) < (uint64_t)nbytes) {
    efail(err, errlen, "external data '%s' is too short: %zu bytes at offset %lld, the file has %" PRId64,
          path, nbytes, x->offset, size);
    goto fail;
  }
  goto done;
fail:
  close(fd);
  fd = -1;
done:
  free(path);
  free(rdir);
  free(rpath);
  return fd;
}

/* A narrow type's codes come as bytes of raw_data or one byte per
 * int32_data value, 4- and 2-bit codes packed from the lowest bits up.
 * Their count is checked against the shape before anything is allocated:
 * the shape comes from the file. */
static bool held_codes_fit(const Onnx__TensorProto *t, const IrNarrow *f, int64_t n, char *err, size_t errlen) {
  size_t per = (size_t)(8 / f->bits), want = ((size_t)n + per - 1) / per;
  if (n == 0) return true; /* its fields may be empty */
  size_t given = t->has_raw_data ? t->raw_data.len : t->n_int32_data;
  if (given != want)
    return efail(err, errlen, "%s needs %zu bytes of codes, the tensor has %zu", ox_onnx_type_name(t->data_type),
                 want, given);
  return true;
}

/* The codes, counted by held_codes_fit, decoded into out. */
static void read_held(const Onnx__TensorProto *t, const IrNarrow *f, Tensor *out) {
  int64_t n = ir_type_numel(&out->type);
  size_t per = (size_t)(8 / f->bits);
  for (int64_t i = 0; i < n; i++) {
    size_t j = (size_t)i / per;
    unsigned byte = t->has_raw_data ? t->raw_data.data[j] : (unsigned)t->int32_data[j] & 0xffu;
    unsigned code = byte >> ((size_t)i % per * (size_t)f->bits);
    ir_tensor_set(out, i, ir_narrow_decode(f, code & ((1u << f->bits) - 1)));
  }
}

static bool tensor_from_proto(const Onnx__TensorProto *t, const char *dir, bool held, Tensor *out, char *err,
                              size_t errlen);

/* A TensorProto's contents as a host tensor (malloc'd data). */
bool ox_tensor_from_proto(const Onnx__TensorProto *t, const char *dir, Tensor *out, char *err,
                          size_t errlen) {
  return tensor_from_proto(t, dir, false, out, err, errlen);
}

/* held: a narrow type is read into the dtype that holds it. */
static bool tensor_from_proto(const Onnx__TensorProto *t, const char *dir, bool held, Tensor *out, char *err,
                              size_t errlen) {
  *out = (Tensor){0};
  DType dt;
  const IrNarrow *f = NULL;
  if (!t->has_data_type || (!ox_dtype_from_onnx(t->data_type, &dt) &&
                            !(held && (f = ox_held_format(t->data_type, &dt)))))
    return efail(err, errlen, "dtype %s is not supported (%s)", ox_onnx_type_name(t->data_type),
                 ox_dtypes_we_have);
  if (t->n_dims > DL_MAX_RANK)
    return efail(err, errlen, "rank %zu is not supported (at most %d)", t->n_dims, (int)DL_MAX_RANK);
  TensorType type = {.dtype = dt, .rank = (int)t->n_dims};
  for (size_t i = 0; i < t->n_dims; i++) {
    if (t->dims[i] < 0) return efail(err, errlen, "dim %zu is negative (%" PRId64 ")", i, t->dims[i]);
    if (t->dims[i] > DL_MAX_ELEMS)
      return efail(err, errlen, "dim %zu (%" PRId64 ") is too large", i, t->dims[i]);
    type.dims[i] = t->dims[i];
  }
  int64_t n = ir_type_numel(&type);
  char ts[IR_TYPE_STR_MAX];
  ir_type_str(&type, ts, sizeof ts);
  if (n < 0) return efail(err, errlen, "shape %s is larger than %" PRId64 " elements", ts, DL_MAX_ELEMS);
  if (t->segment) return efail(err, errlen, "segmented tensors are not supported");
  if (f) {
    bool external = (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
                    t->n_external_data > 0;
    if (external) return efail(err, errlen, "%s as external data is not supported", ox_onnx_type_name(t->data_type));
    if (!held_codes_fit(t, f, n, err, errlen)) return false;
    if (!ir_tensor_alloc(out, &type)) return efail(err, errlen, "out of memory for %s", ts);
    read_held(t, f, out);
    return true;
  }
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
  } else if (dt == TY_F64) {
    given = t->n_double_data, field = "double_data values";
  } else if (dt == TY_U32 || dt == TY_U64) {
    given = t->n_uint64_data, field = "uint64_data values";
  } else {
    given = t->n_int32_data, field = "int32_data values";
  }
  size_t want = external || t->has_raw_data ? nbytes : (size_t)n;
  if (given != want)
    return efail(err, errlen, "%s %s needs %zu %s, the file has %zu", ts,
                 ox_onnx_type_name(t->data_type), want, field, given);
  /* External data is checked against its file before anything is
   * allocated for it: the sizes come from the model. */
  External x;
  int fd = -1;
  if (external) {
    if (!external_fields(t, &x, err, errlen)) return false;
    if (x.length >= 0 && (unsigned long long)x.length != (unsigned long long)nbytes)
      return efail(err, errlen, "external data '%s' has length %lld, the tensor needs %zu bytes", x.location,
                   x.length, nbytes);
    if ((fd = open_external(dir, &x, nbytes, err, errlen)) < 0) return false;
  }
  if (!ir_tensor_alloc(out, &type)) {
    if (fd >= 0) close(fd);
    return efail(err, errlen, "out of memory for %s (%zu bytes)", ts, nbytes);
  }
  if (external) {
    bool ok = rt_read_at(fd, out->data, nbytes, x.offset) == 0;
    close(fd);
    if (!ok) {
      ir_tensor_free(out);
      return efail(err, errlen, "cannot read external data '%s/%s': %s", dir, x.location,
                   errno ? strerror(errno) : "it shrank while read");
    }
  } else if (nbytes == 0) {
    /* an empty tensor: its fields may be NULL */
  } else if (t->has_raw_data) {
    memcpy(out->data, t->raw_data.data, nbytes); /* little-endian, as the host */
  } else if (dt == TY_F32) {
    memcpy(out->data, t->float_data, nbytes);
  } else if (dt == TY_I64) {
    memcpy(out->data, t->int64_data, nbytes);
  } else if (dt == TY_F64) {
    memcpy(out->data, t->double_data, nbytes);
  } else if (dt == TY_U64) {
    memcpy(out->data, t->uint64_data, nbytes);
  } else if (dt == TY_U32) {
    for (int64_t i = 0; i < n; i++) ((uint32_t *)out->data)[i] = (uint32_t)t->uint64_data[i];
  } else {
    for (int64_t i = 0; i < n; i++) {
      int32_t v = t->int32_data[i];
      switch (dt) {
        case TY_F16:
        case TY_BF16: ((uint16_t *)out->data)[i] = (uint16_t)v; break;
        case TY_I8: ((int8_t *)out->data)[i] = (int8_t)v; break;
        case TY_U8: ((uint8_t *)out->data)[i] = (uint8_t)v; break;
        case TY_I16: ((int16_t *)out->data)[i] = (int16_t)v; break;
        case TY_U16: ((uint16_t *)out->data)[i] = (uint16_t)v; break;
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
  void *buf = ox_read_whole(path, &len, err, errlen);
  if (!buf) return false;
  Onnx__TensorProto *t = onnx__tensor_proto__unpack(NULL, len, buf);
  free(buf);
  if (!t) return efail(err, errlen, "'%s' is not a serialized ONNX TensorProto", path);
  char msg[512];
  char *dir = dir_dup(path);
  bool ok = dir && tensor_from_proto(t, dir, true, out, msg, sizeof msg);
  if (!dir) snprintf(msg, sizeof msg, "out of memory");
  free(dir);
  if (ok && name && !(*name = strdup(t->name ? t->name : ""))) {
    ir_tensor_free(out);
    ok = false;
    snprintf(msg, sizeof msg, "out of memory");
  }
  onnx__tensor_proto__free_unpacked(t, NULL);
  if (!ok) efail(err, errlen, "'%s': %s", path, msg);
  return ok;
}

/* ---- SequenceProto and OptionalProto (onnx-data.proto, which the
 * build does not compile): read by hand.  Both number their fields
 * alike: 1 name, 2 elem_type, 3 tensor(s), 5 sequence(s), 7 optional(s);
 * 4 and 6 (sparse tensors, maps) are refused. */

typedef struct Wire {
  const uint8_t *p, *end;
} Wire;

static bool wire_varint(Wire *w, uint64_t *out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && w->p < w->end; shift += 7) {
    uint8_t b = *w->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return true;
    }
  }
  return false;
}

/* The next field: its number, wire type, and for length-delimited ones
 * the bytes; false at the end or on malformed input (*bad set). */
static bool wire_next(Wire *w, uint32_t *field, int *type, Wire *bytes, bool *bad) {
  uint64_t tag, len;
  *bad = false;
  if (w->p >= w->end) return false;
  if (!wire_varint(w, &tag)) return !(*bad = true);
  *field = (uint32_t)(tag >> 3), *type = (int)(tag & 7);
  switch (*type) {
    case 0: return wire_varint(w, &len) || !(*bad = true);
    case 1: if (w->end - w->p < 8) return !(*bad = true); w->p += 8; return true;
    case 5: if (w->end - w->p < 4) return !(*bad = true); w->p += 4; return true;
    case 2:
      if (!wire_varint(w, &len) || len > (uint64_t)(w->end - w->p)) return !(*bad = true);
      *bytes = (Wire){w->p, w->p + len};
      w->p += len;
      return true;
    default: return !(*bad = true);
  }
}

typedef struct Flat {
  const char *dir;
  int max, n;
  Tensor *out;
  char **names;
  int tensors_here; /* tensors directly in the outermost message */
} Flat;

static bool flat_value(Flat *f, Wire w, const char *name, int depth, char *err, size_t errlen) {
  if (depth > 2) return efail(err, errlen, "sequences nested deeper than an optional of a sequence");
  uint32_t field;
  int type;
  Wire bytes;
  bool bad;
  while (wire_next(&w, &field, &type, &bytes, &bad)) {
    if (type != 2) continue;
    if (field == 4 || field == 6 || field == 7)
      return efail(err, errlen, "a %s is not supported", field == 4 ? "sparse tensor" : field == 6 ? "map" : "nested optional");
    if (field == 5 && !flat_value(f, bytes, name, depth + 1, err, errlen)) return false;
    if (field != 3) continue;
    if (f->n == f->max) return efail(err, errlen, "more than %d tensors", f->max);
    Onnx__TensorProto *t = onnx__tensor_proto__unpack(NULL, (size_t)(bytes.end - bytes.p), bytes.p);
    if (!t) return efail(err, errlen, "element %d is not a TensorProto", f->n);
    char msg[512];
    bool ok = tensor_from_proto(t, f->dir, true, &f->out[f->n], msg, sizeof msg);
    onnx__tensor_proto__free_unpacked(t, NULL);
    if (!ok) return efail(err, errlen, "element %d: %s", f->n, msg);
    size_t len = strlen(name) + 24;
    if (!(f->names[f->n] = malloc(len))) {
      ir_tensor_free(&f->out[f->n]);
      return efail(err, errlen, "out of memory");
    }
    snprintf(f->names[f->n], len, "%s.%d", name, f->n);
    f->n++;
    if (depth == 0) f->tensors_here++;
  }
  return bad ? efail(err, errlen, "malformed protobuf") : true;
}

bool fe_onnx_read_value(const char *path, int max, int *n, Tensor *out, char **names, bool *one_tensor, char *err,
                        size_t errlen) {
  *n = 0;
  *one_tensor = false;
  if (max < 1) return efail(err, errlen, "no room for a tensor");
  if (fe_onnx_read_tensor(path, &out[0], &names[0], err, errlen)) {
    *n = 1;
    return true;
  }
  size_t len;
  uint8_t *buf = ox_read_whole(path, &len, err, errlen);
  if (!buf) return false;
  /* the name first: the elements are called after it */
  Wire w = {buf, buf + len}, bytes = {0};
  uint32_t field;
  int type;
  bool bad;
  char name[256] = "";
  while (wire_next(&w, &field, &type, &bytes, &bad))
    if (field == 1 && type == 2) {
      size_t k = (size_t)(bytes.end - bytes.p) < sizeof name - 1 ? (size_t)(bytes.end - bytes.p) : sizeof name - 1;
      memcpy(name, bytes.p, k);
      name[k] = 0;
    }
  char *dir = dir_dup(path);
  Flat f = {.dir = dir ? dir : ".", .max = max, .out = out, .names = names};
  char msg[512] = "";
  bool ok = !bad && flat_value(&f, (Wire){buf, buf + len}, name, 0, msg, sizeof msg);
  free(dir);
  free(buf);
  if (!ok) {
    for (int i = 0; i < f.n; i++) ir_tensor_free(&out[i]), free(names[i]);
    return efail(err, errlen, "'%s' is neither a TensorProto nor a SequenceProto or OptionalProto%s%s", path,
                 msg[0] ? ": " : "", msg);
  }
  *n = f.n;
  *one_tensor = f.tensors_here == 1;
  return true;
}

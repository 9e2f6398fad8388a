/* ONNX tensors and files: takes a TensorProto (inline data or external
 * data next to the model) or a path, returns host tensors (malloc'd data)
 * and whole files in memory; maps ONNX dtypes onto dlcc's. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* A model file larger than this is refused before reading (protobuf
 * itself stops at 2 GiB). */
#define MAX_MODEL_BYTES ((size_t)1 << 31)

/* ---- ONNX dtypes ---- */

static const char *const onnx_type_names[] = {
    "UNDEFINED", "FLOAT",  "UINT8",  "INT8",   "UINT16",    "INT16",      "INT32",   "INT64", "STRING",
    "BOOL",      "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
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
    default: return false;
  }
}

const char ox_dtypes_we_have[] = "dlcc has FLOAT, FLOAT16, BFLOAT16, INT8, UINT8, INT32, INT64 and BOOL";

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
void *ox_read_whole(const char *path, size_t *len, char *err, size_t errlen) {
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

char *ox_dir_of(Arena *a, const char *path) {
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
    return efail(err, errlen,
                 "external data location '%s' must be a relative path below the model's directory", location);
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
bool ox_tensor_from_proto(const Onnx__TensorProto *t, const char *dir, Tensor *out, char *err,
                          size_t errlen) {
  *out = (Tensor){0};
  DType dt;
  if (!t->has_data_type || !ox_dtype_from_onnx(t->data_type, &dt))
    return efail(err, errlen, "dtype %s is not supported (%s)", ox_onnx_type_name(t->data_type),
                 ox_dtypes_we_have);
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
                 ox_onnx_type_name(t->data_type), want, field, given);
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
  void *buf = ox_read_whole(path, &len, err, errlen);
  if (!buf) return false;
  Onnx__TensorProto *t = onnx__tensor_proto__unpack(NULL, len, buf);
  free(buf);
  if (!t) return efail(err, errlen, "'%s' is not a serialized ONNX TensorProto", path);
  char msg[512];
  Arena a;
  arena_init(&a);
  bool ok = ox_tensor_from_proto(t, ox_dir_of(&a, path), out, msg, sizeof msg);
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

/* NumPy .npy files: takes a path, returns one tensor (or writes one).
 * The header is a Python dict literal, parsed as such: any key order,
 * spaces, a trailing comma, () and (n,) shapes.  Only a regular file is
 * read, and the shape it states must match its size before the data is
 * allocated.  Also the dtype table the tensor readers share. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensorio.h"

static const struct {
  const char *name;
  int size;
} dtype_info[RT_DTYPE_COUNT] = {
    [RT_F32] = {"f32", 4}, [RT_F16] = {"f16", 2}, [RT_BF16] = {"bf16", 2},
    [RT_I8] = {"i8", 1},   [RT_I32] = {"i32", 4}, [RT_I64] = {"i64", 8},
    [RT_F64] = {"f64", 8}, [RT_U8] = {"u8", 1},   [RT_BOOL] = {"bool", 1},
    [RT_I16] = {"i16", 2}, [RT_U16] = {"u16", 2}, [RT_U32] = {"u32", 4}, [RT_U64] = {"u64", 8},
};

int rt_dtype_size(RtDType t) { return (unsigned)t < RT_DTYPE_COUNT ? dtype_info[t].size : 0; }
const char *rt_dtype_name(RtDType t) {
  return (unsigned)t < RT_DTYPE_COUNT ? dtype_info[t].name : "?";
}

/* Far beyond any real tensor, far below where byte counts overflow. */
#define MAX_ELEMS ((int64_t)1 << 40)

int64_t rt_numel(const RtTensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) return -1;
    if (t->dims[i] != 0 && n > MAX_ELEMS / t->dims[i]) return -1;
    n *= t->dims[i];
  }
  return n;
}

void rt_tensor_free(RtTensor *t) {
  free(t->data);
  t->data = NULL;
  t->nbytes = 0;
}

/* ---- the header: a Python literal ---- */

typedef enum { PV_STR, PV_BOOL, PV_INT, PV_NONE, PV_TUPLE, PV_LIST, PV_DICT } PyKind;

typedef struct PyVal {
  PyKind kind;
  char s[64];   /* PV_STR, truncated */
  bool b;       /* PV_BOOL */
  int64_t i;    /* PV_INT */
  int n;        /* PV_TUPLE/PV_LIST: items */
  bool all_int; /* every item an int that fits */
  bool too_big; /* some item an int beyond int64 */
  int64_t items[RT_MAX_RANK + 1];
} PyVal;

typedef struct Parser {
  const char *p, *end;
  const char *why; /* first syntax error */
} Parser;

static void skip_ws(Parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static bool syntax(Parser *ps, const char *why) {
  if (!ps->why) ps->why = why;
  return false;
}

static bool parse_value(Parser *ps, PyVal *v, int depth);

static bool parse_str(Parser *ps, PyVal *v) {
  char q = *ps->p++;
  size_t n = 0;
  while (ps->p < ps->end && *ps->p != q) {
    char c = *ps->p++;
    if (c == '\n') return syntax(ps, "unterminated string");
    if (c == '\\') {
      if (ps->p >= ps->end) break;
      c = *ps->p++;
    }
    if (n + 1 < sizeof v->s) v->s[n++] = c;
  }
  if (ps->p >= ps->end) return syntax(ps, "unterminated string");
  ps->p++;
  v->s[n] = 0;
  v->kind = PV_STR;
  return true;
}

static bool parse_int(Parser *ps, PyVal *v) {
  const char *s = ps->p;
  bool neg = false;
  if (*s == '+' || *s == '-') neg = *s++ == '-';
  if (s >= ps->end || *s < '0' || *s > '9') return syntax(ps, "unexpected character");
  uint64_t x = 0;
  bool big = false;
  while (s < ps->end && *s >= '0' && *s <= '9') {
    if (x > (UINT64_MAX - 9) / 10) big = true;
    x = x * 10 + (uint64_t)(*s++ - '0');
  }
  if (s < ps->end && (*s == 'L' || *s == 'l')) s++; /* Python 2 longs */
  if (s < ps->end && (*s == '.' || *s == 'e' || *s == 'E')) return syntax(ps, "unexpected number");
  ps->p = s;
  v->kind = PV_INT;
  if (big || x > (uint64_t)INT64_MAX) {
    v->i = neg ? INT64_MIN : INT64_MAX; /* flagged as absurd by the shape check */
    v->all_int = false;
  } else {
    v->i = neg ? -(int64_t)x : (int64_t)x;
    v->all_int = true;
  }
  return true;
}

/* ( ), (a,), (a, b), [a, b]: a parenthesized value without a comma is
 * just that value, as in Python. */
static bool parse_seq(Parser *ps, PyVal *v, int depth) {
  char close = *ps->p == '(' ? ')' : ']';
  bool tuple = close == ')';
  ps->p++;
  v->n = 0;
  v->all_int = true;
  bool comma = false;
  PyVal first;
  memset(&first, 0, sizeof first);
  for (;;) {
    skip_ws(ps);
    if (ps->p >= ps->end) return syntax(ps, "unterminated tuple");
    if (*ps->p == close) {
      ps->p++;
      break;
    }
    PyVal item;
    memset(&item, 0, sizeof item);
    if (!parse_value(ps, &item, depth + 1)) return false;
    if (v->n == 0) first = item;
    if (item.kind == PV_INT && !item.all_int) v->too_big = true;
    if (item.kind != PV_INT || !item.all_int)
      v->all_int = false;
    else if (v->n < RT_MAX_RANK + 1)
      v->items[v->n] = item.i;
    v->n++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
      comma = true;
      continue;
    }
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) continue;
    return syntax(ps, "expected ',' in a tuple");
  }
  if (tuple && v->n == 1 && !comma) {
    *v = first;
    return true;
  }
  v->kind = tuple ? PV_TUPLE : PV_LIST;
  return true;
}

/* A nested dict is skipped over (only the top level matters). */
static bool parse_dict_body(Parser *ps, int depth,
                            bool (*on_entry)(void *ctx, const char *key, const PyVal *v),
                            void *ctx);

static bool parse_value(Parser *ps, PyVal *v, int depth) {
  if (depth > 16) return syntax(ps, "nested too deeply");
  skip_ws(ps);
  if (ps->p >= ps->end) return syntax(ps, "unexpected end");
  char c = *ps->p;
  if (c == '\'' || c == '"') return parse_str(ps, v);
  if (c == '(' || c == '[') return parse_seq(ps, v, depth);
  if (c == '{') {
    v->kind = PV_DICT;
    return parse_dict_body(ps, depth + 1, NULL, NULL);
  }
  static const struct {
    const char *word;
    PyKind kind;
    bool b;
  } words[] = {{"True", PV_BOOL, true}, {"False", PV_BOOL, false}, {"None", PV_NONE, false}};
  for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
    size_t len = strlen(words[k].word);
    if ((size_t)(ps->end - ps->p) >= len && memcmp(ps->p, words[k].word, len) == 0) {
      const char *after = ps->p + len;
      if (after < ps->end && ((*after >= 'a' && *after <= 'z') || (*after >= 'A' && *after <= 'Z') ||
                              (*after >= '0' && *after <= '9') || *after == '_'))
        break;
      ps->p = after;
      v->kind = words[k].kind;
      v->b = words[k].b;
      return true;
    }
  }
  return parse_int(ps, v);
}

static bool parse_dict_body(Parser *ps, int depth,
                            bool (*on_entry)(void *ctx, const char *key, const PyVal *v),
                            void *ctx) {
  ps->p++; /* '{' */
  for (;;) {
    skip_ws(ps);
    if (ps->p >= ps->end) return syntax(ps, "unterminated dict");
    if (*ps->p == '}') {
      ps->p++;
      return true;
    }
    PyVal key, val;
    memset(&key, 0, sizeof key);
    memset(&val, 0, sizeof val);
    if (*ps->p != '\'' && *ps->p != '"') return syntax(ps, "dict keys must be strings");
    if (!parse_str(ps, &key)) return false;
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != ':') return syntax(ps, "expected ':' after a key");
    ps->p++;
    if (!parse_value(ps, &val, depth)) return false;
    if (on_entry && !on_entry(ctx, key.s, &val)) return false;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
      continue;
    }
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') continue;
    return syntax(ps, "expected ',' or '}' in the dict");
  }
}

typedef struct Header {
  bool has_descr, has_order, has_shape;
  PyVal descr, order, shape;
  char extra[64]; /* first unknown key */
  char dup[64];   /* first repeated key */
} Header;

static bool on_header_entry(void *ctx, const char *key, const PyVal *v) {
  Header *h = ctx;
  bool *has = NULL;
  PyVal *slot = NULL;
  if (strcmp(key, "descr") == 0) has = &h->has_descr, slot = &h->descr;
  if (strcmp(key, "fortran_order") == 0) has = &h->has_order, slot = &h->order;
  if (strcmp(key, "shape") == 0) has = &h->has_shape, slot = &h->shape;
  if (!has) {
    if (!h->extra[0]) snprintf(h->extra, sizeof h->extra, "%s", key);
    return true;
  }
  if (*has && !h->dup[0]) snprintf(h->dup, sizeof h->dup, "%s", key);
  *has = true;
  *slot = *v;
  return true;
}

static const struct {
  const char *descr; /* without the byte-order character */
  RtDType dt;
} npy_types[] = {
    {"f4", RT_F32}, {"f2", RT_F16}, {"i1", RT_I8}, {"i4", RT_I32},
    {"i8", RT_I64}, {"f8", RT_F64}, {"u1", RT_U8}, {"b1", RT_BOOL},
    {"i2", RT_I16}, {"u2", RT_U16}, {"u4", RT_U32}, {"u8", RT_U64},
};

/* Checks the header's dict and fills out's dtype and shape. */
static int parse_header(const char *path, const char *text, size_t len, RtTensor *out, bool *fortran, char *err,
                        size_t errlen) {
  Parser ps = {text, text + len, NULL};
  Header h;
  memset(&h, 0, sizeof h);
  skip_ws(&ps);
  if (ps.p >= ps.end || *ps.p != '{') return rt_fail(err, errlen, "%s: malformed header: not a dict", path);
  if (!parse_dict_body(&ps, 0, on_header_entry, &h))
    return rt_fail(err, errlen, "%s: malformed header: %s", path, ps.why ? ps.why : "syntax error");
  /* After the dict only the padding: spaces, a newline, maybe NULs. */
  for (; ps.p < ps.end; ps.p++)
    if (*ps.p != ' ' && *ps.p != '\n' && *ps.p != '\t' && *ps.p != '\r' && *ps.p != 0)
      return rt_fail(err, errlen, "%s: malformed header: text after the dict", path);
  if (!h.has_descr || !h.has_order || !h.has_shape)
    return rt_fail(err, errlen, "%s: malformed header: missing key '%s'", path,
                !h.has_descr ? "descr" : !h.has_order ? "fortran_order" : "shape");
  if (h.extra[0]) return rt_fail(err, errlen, "%s: malformed header: unexpected key '%s'", path, h.extra);
  if (h.dup[0]) return rt_fail(err, errlen, "%s: malformed header: key '%s' given twice", path, h.dup);
  if (h.descr.kind == PV_LIST)
    return rt_fail(err, errlen, "%s: unsupported dtype (a structured array)", path);
  if (h.descr.kind != PV_STR) return rt_fail(err, errlen, "%s: malformed header: 'descr' is not a string", path);
  if (h.order.kind != PV_BOOL)
    return rt_fail(err, errlen, "%s: malformed header: 'fortran_order' is not True or False", path);
  if (h.shape.kind != PV_TUPLE)
    return rt_fail(err, errlen, "%s: malformed header: 'shape' is not a tuple", path);
  const char *d = h.descr.s;
  char order = d[0];
  const char *code = (order == '<' || order == '>' || order == '|' || order == '=') ? d + 1 : d;
  int found = -1;
  for (size_t k = 0; k < sizeof npy_types / sizeof npy_types[0]; k++)
    if (strcmp(code, npy_types[k].descr) == 0) found = (int)k;
  if (found < 0) return rt_fail(err, errlen, "%s: unsupported dtype '%s'", path, d);
  RtDType dt = npy_types[found].dt;
  if (order == '>' && rt_dtype_size(dt) > 1)
    return rt_fail(err, errlen, "%s: big-endian data ('%s') is not supported", path, d);
  *fortran = h.order.b;
  if (h.shape.n > RT_MAX_RANK)
    return rt_fail(err, errlen, "%s: rank %d is more than %d", path, h.shape.n, RT_MAX_RANK);
  if (h.shape.too_big)
    return rt_fail(err, errlen, "%s: shape is too large (more than 2^40 elements)", path);
  if (!h.shape.all_int) return rt_fail(err, errlen, "%s: malformed header: 'shape' must hold integers", path);
  out->dtype = dt;
  out->rank = h.shape.n;
  for (int i = 0; i < out->rank; i++) {
    if (h.shape.items[i] < 0)
      return rt_fail(err, errlen, "%s: negative dim %" PRId64 " in the shape", path, h.shape.items[i]);
    out->dims[i] = h.shape.items[i];
  }
  if (rt_numel(out) < 0)
    return rt_fail(err, errlen, "%s: shape is too large (more than 2^40 elements)", path);
  return 0;
}

/* Reorders a Fortran-order array's data into C order, in a new buffer. */
static bool to_c_order(RtTensor *t) {
  size_t es = (size_t)rt_dtype_size(t->dtype), n = (size_t)rt_numel(t);
  unsigned char *c = malloc(t->nbytes ? t->nbytes : 1);
  if (!c) return false;
  int64_t idx[RT_MAX_RANK] = {0}, stride[RT_MAX_RANK];
  for (int k = 0; k < t->rank; k++) stride[k] = k ? stride[k - 1] * t->dims[k - 1] : 1;
  const unsigned char *f = t->data;
  for (size_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (int k = 0; k < t->rank; k++) off += idx[k] * stride[k];
    memcpy(c + i * es, f + (size_t)off * es, es);
    for (int k = t->rank - 1; k >= 0 && ++idx[k] == t->dims[k]; k--) idx[k] = 0;
  }
  free(t->data);
  t->data = c;
  return true;
}

int rt_npy_open(const char *path, RtTensor *out, int64_t *data_start, bool *fortran, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  *fortran = false;
  char why[256];
  int64_t size;
  int fd = rt_open_regular(path, 0, &size, why, sizeof why);
  if (fd < 0) return rt_fail(err, errlen, "%s: %s", path, why);
  unsigned char pre[12];
  int rc = -1;
  char *header = NULL;
  if (size < 8 || rt_read_at(fd, pre, 8, 0) != 0 || memcmp(pre, "\x93NUMPY", 6) != 0) {
    rt_fail(err, errlen, "%s: not a .npy file (bad magic)", path);
    goto done;
  }
  int major = pre[6], minor = pre[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    rt_fail(err, errlen, "%s: unsupported .npy version %d.%d", path, major, minor);
    goto done;
  }
  size_t lenbytes = major == 1 ? 2 : 4, hlen = 0;
  if (size < 8 + (int64_t)lenbytes || rt_read_at(fd, pre + 8, lenbytes, 8) != 0) {
    rt_fail(err, errlen, "%s: truncated header", path);
    goto done;
  }
  for (size_t i = 0; i < lenbytes; i++) hlen |= (size_t)pre[8 + i] << (8 * i);
  if (hlen > (1u << 20)) {
    rt_fail(err, errlen, "%s: malformed header: %zu bytes long", path, hlen);
    goto done;
  }
  *data_start = 8 + (int64_t)lenbytes + (int64_t)hlen;
  if (size < *data_start) {
    rt_fail(err, errlen, "%s: truncated header", path);
    goto done;
  }
  header = malloc(hlen + 1);
  if (!header) {
    rt_fail(err, errlen, "%s: out of memory", path);
    goto done;
  }
  if (rt_read_at(fd, header, hlen, 8 + (int64_t)lenbytes) != 0) {
    rt_fail(err, errlen, "%s: truncated header", path);
    goto done;
  }
  header[hlen] = 0;
  if (parse_header(path, header, hlen, out, fortran, err, errlen) < 0) goto done;
  /* The shape is the file's word only: the data must be there, exactly,
   * before anything is allocated for it (at most 2^40 elements of 8
   * bytes, so the product does not overflow). */
  out->nbytes = (size_t)rt_numel(out) * (size_t)rt_dtype_size(out->dtype);
  uint64_t have = (uint64_t)(size - *data_start);
  if (have < out->nbytes) {
    rt_fail(err, errlen, "%s: truncated data: the header promises %zu bytes, the file has %" PRIu64, path,
         out->nbytes, have);
    goto done;
  }
  if (have > out->nbytes) {
    rt_fail(err, errlen, "%s: extra data after the array's %zu bytes", path, out->nbytes);
    goto done;
  }
  rc = 0;
done:
  free(header);
  if (rc < 0) {
    close(fd);
    rt_tensor_free(out);
    return -1;
  }
  return fd;
}

int rt_npy_read_open(int fd, const char *path, RtTensor *out, int64_t data_start, bool fortran, char *err,
                     size_t errlen) {
  int rc = -1;
  out->data = malloc(out->nbytes ? out->nbytes : 1);
  if (!out->data) {
    rt_fail(err, errlen, "%s: out of memory for %zu bytes", path, out->nbytes);
    goto done;
  }
  if (rt_read_at(fd, out->data, out->nbytes, data_start) != 0) {
    rt_fail(err, errlen, "%s: cannot read the data: %s", path, errno ? strerror(errno) : "the file shrank");
    goto done;
  }
  /* np.save(x.T) writes Fortran order: the first index varies fastest. */
  if (fortran && out->rank > 1 && !to_c_order(out)) {
    rt_fail(err, errlen, "%s: out of memory for %zu bytes", path, out->nbytes);
    goto done;
  }
  rc = 0;
done:
  close(fd);
  if (rc < 0) rt_tensor_free(out);
  return rc;
}

int rt_npy_read(const char *path, RtTensor *out, char *err, size_t errlen) {
  int64_t data_start;
  bool fortran;
  int fd = rt_npy_open(path, out, &data_start, &fortran, err, errlen);
  return fd < 0 ? -1 : rt_npy_read_open(fd, path, out, data_start, fortran, err, errlen);
}

static const char *const write_descr[RT_DTYPE_COUNT] = {
    [RT_F32] = "<f4", [RT_F16] = "<f2", [RT_I8] = "|i1", [RT_I32] = "<i4",
    [RT_I64] = "<i8", [RT_F64] = "<f8", [RT_U8] = "|u1", [RT_BOOL] = "|b1",
    [RT_I16] = "<i2", [RT_U16] = "<u2", [RT_U32] = "<u4", [RT_U64] = "<u8",
};

/* Writes t (check_writable passed) to f, which it closes; path names the
 * file in messages. */
static int write_npy(FILE *f, const char *path, const RtTensor *t, char *err, size_t errlen) {
  size_t nbytes = t->nbytes;
  char h[512];
  int len = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (", write_descr[t->dtype]);
  for (int i = 0; i < t->rank; i++)
    len += snprintf(h + len, sizeof h - (size_t)len, "%s%" PRId64, i ? ", " : "", t->dims[i]);
  len += snprintf(h + len, sizeof h - (size_t)len, "%s), }", t->rank == 1 ? "," : "");
  /* Pad with spaces so that magic + version + length + header, ending in
   * a newline, is a multiple of 64 bytes. */
  size_t total = 10 + (size_t)len + 1;
  size_t padded = (total + 63) / 64 * 64;
  while (10 + (size_t)len + 1 < padded) h[len++] = ' ';
  h[len++] = '\n';
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(len & 0xff),
                           (unsigned char)(len >> 8)};
  bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(h, 1, (size_t)len, f) == (size_t)len &&
            (nbytes == 0 || fwrite(t->data, 1, nbytes, f) == nbytes);
  if (fclose(f) != 0) ok = false;
  if (!ok) return rt_fail(err, errlen, "%s: write failed: %s", path, strerror(errno));
  return 0;
}

/* Whether .npy can hold t, before any file is touched. */
static int check_writable(const char *path, const RtTensor *t, char *err, size_t errlen) {
  if ((unsigned)t->dtype >= RT_DTYPE_COUNT || !write_descr[t->dtype])
    return rt_fail(err, errlen, "%s: .npy has no dtype for %s", path, rt_dtype_name(t->dtype));
  if (t->rank < 0 || t->rank > RT_MAX_RANK) return rt_fail(err, errlen, "%s: bad rank %d", path, t->rank);
  int64_t n = rt_numel(t);
  if (n < 0) return rt_fail(err, errlen, "%s: bad shape", path);
  size_t nbytes = (size_t)n * (size_t)rt_dtype_size(t->dtype);
  if (t->nbytes != nbytes)
    return rt_fail(err, errlen, "%s: tensor has %zu bytes, its shape needs %zu", path, t->nbytes, nbytes);
  return 0;
}

int rt_npy_write(const char *path, const RtTensor *t, char *err, size_t errlen) {
  if (check_writable(path, t, err, errlen)) return -1;
  FILE *f = fopen(path, "wb");
  if (!f) return rt_fail(err, errlen, "%s: %s", path, strerror(errno));
  return write_npy(f, path, t, err, errlen);
}

int rt_npy_write_at(int dirfd, const char *name, const char *path, const RtTensor *t, char *err, size_t errlen) {
  if (check_writable(path, t, err, errlen)) return -1;
  if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
    return rt_fail(err, errlen, "%s: not a plain file name", path);
  /* A new file, never one written through: a symbolic link or a hard
   * link planted at the name would send the data elsewhere. */
  if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
    return rt_fail(err, errlen, "%s: cannot replace it: %s", path, strerror(errno));
  int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return rt_fail(err, errlen, "%s: %s", path, strerror(errno));
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    int e = errno;
    close(fd);
    return rt_fail(err, errlen, "%s: %s", path, strerror(e));
  }
  return write_npy(f, path, t, err, errlen);
}

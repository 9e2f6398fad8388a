/* PyTorch's torch.save files (the zip format of torch >= 1.6) holding a
 * state_dict: takes a path, returns its tensors as a set, as
 * safetensors.c's readers do (they hand such a file here).  The file is
 * untrusted: its pickle (data.pkl) is never run.  A small stack machine
 * reads the opcodes a state_dict uses and builds plain values; the only
 * calls it knows are the ones torch.save writes for a dict of tensors
 * (collections.OrderedDict, torch._utils._rebuild_tensor_v2 and
 * _rebuild_parameter), and any other global becomes an inert value that
 * is never a tensor.  Every size is checked before it is allocated,
 * every storage against its zip entry (stored, CRC-checked), every view
 * against its storage. */
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensorio.h"

enum {
  MAX_PICKLE = 256 * 1024 * 1024, /* data.pkl: a state_dict's is a few hundred bytes a tensor */
  MAX_ENTRIES = 1 << 22,          /* zip entries (a storage each) */
  MAX_VALUES = 1 << 26,           /* values the pickle may build */
  MAX_STACK = 1 << 20,
};

/* ---- the zip archive: stored entries only, as torch.save writes ---- */

typedef struct ZipEntry {
  char *name;
  int64_t data_at, size; /* the stored bytes' offset and length */
  uint32_t crc;
} ZipEntry;

typedef struct Zip {
  int fd;
  int64_t file_size;
  int n;
  ZipEntry *e;
  char **names; /* the entries' names, hashed in index */
  RtNames index;
} Zip;

static uint32_t le16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const unsigned char *p) { return le16(p) | (uint32_t)le16(p + 2) << 16; }
static uint64_t le64(const unsigned char *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

static uint32_t crc32_of(const unsigned char *p, size_t n) {
  uint32_t table[256]; /* per call: no shared state, and 2,048 steps beside an entry's bytes */
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

/* The end of central directory: where the directory is and how many
 * entries it has (zip64's when the classic fields are full). */
static int zip_directory(Zip *z, const char *path, int64_t *dir_at, int64_t *dir_size, int64_t *count, char *err,
                         size_t errlen) {
  int64_t tail = z->file_size < 65557 ? z->file_size : 65557;
  unsigned char *buf = malloc((size_t)tail);
  if (!buf) return rt_fail(err, errlen, "%s: out of memory", path);
  if (rt_read_at(z->fd, buf, (size_t)tail, z->file_size - tail) != 0) {
    free(buf);
    return rt_fail(err, errlen, "%s: could not read the zip directory", path);
  }
  int64_t at = -1;
  for (int64_t i = tail - 22; i >= 0 && at < 0; i--)
    if (le32(buf + i) == 0x06054b50u && i + 22 + le16(buf + i + 20) == tail) at = i;
  if (at < 0) {
    free(buf);
    return rt_fail(err, errlen, "%s: a zip file without its end of central directory (truncated?)", path);
  }
  const unsigned char *eocd = buf + at;
  *count = le16(eocd + 10);
  *dir_size = le32(eocd + 12);
  *dir_at = le32(eocd + 16);
  bool zip64 = *count == 0xFFFF || *dir_size == 0xFFFFFFFFu || *dir_at == 0xFFFFFFFFu;
  int64_t eocd_file_at = z->file_size - tail + at;
  free(buf);
  if (!zip64) return 0;
  unsigned char loc[20], rec[56];
  if (eocd_file_at < 20 || rt_read_at(z->fd, loc, 20, eocd_file_at - 20) != 0 || le32(loc) != 0x07064b50u)
    return rt_fail(err, errlen, "%s: a zip64 file without its zip64 locator", path);
  uint64_t rec_at = le64(loc + 8);
  if (rec_at > (uint64_t)z->file_size - 56 || rt_read_at(z->fd, rec, 56, (int64_t)rec_at) != 0 ||
      le32(rec) != 0x06064b50u)
    return rt_fail(err, errlen, "%s: a zip64 locator that points at no zip64 directory record", path);
  uint64_t n = le64(rec + 32), size = le64(rec + 40), dir = le64(rec + 48);
  if (n > INT64_MAX || size > INT64_MAX || dir > INT64_MAX)
    return rt_fail(err, errlen, "%s: zip64 directory sizes out of range", path);
  *count = (int64_t)n, *dir_size = (int64_t)size, *dir_at = (int64_t)dir;
  return 0;
}

/* Reads the central directory and each entry's local header. */
static int zip_open(Zip *z, const char *path, char *err, size_t errlen) {
  int64_t dir_at = 0, dir_size = 0, count = 0;
  if (zip_directory(z, path, &dir_at, &dir_size, &count, err, errlen) < 0) return -1;
  if (dir_at < 0 || dir_size < 0 || dir_at > z->file_size || dir_size > z->file_size - dir_at)
    return rt_fail(err, errlen, "%s: the zip directory lies outside the file", path);
  if (count > MAX_ENTRIES || count > dir_size / 46)
    return rt_fail(err, errlen, "%s: %" PRId64 " zip entries do not fit a directory of %" PRId64 " bytes", path, count,
                dir_size);
  unsigned char *dir = malloc((size_t)dir_size + 1);
  z->e = calloc((size_t)count + 1, sizeof *z->e);
  if (!dir || !z->e) {
    free(dir);
    return rt_fail(err, errlen, "%s: out of memory", path);
  }
  if (rt_read_at(z->fd, dir, (size_t)dir_size, dir_at) != 0) {
    free(dir);
    return rt_fail(err, errlen, "%s: could not read the zip directory", path);
  }
  int64_t p = 0;
  int rc = 0;
  for (int64_t i = 0; i < count && rc == 0; i++) {
    const unsigned char *h = dir + p;
    if (dir_size - p < 46 || le32(h) != 0x02014b50u) {
      rc = rt_fail(err, errlen, "%s: zip directory entry %" PRId64 " is damaged", path, i);
      break;
    }
    uint32_t method = le16(h + 10), name_len = le16(h + 28), extra_len = le16(h + 30), comment_len = le16(h + 32);
    uint64_t csize = le32(h + 20), usize = le32(h + 24), local = le32(h + 42);
    if (46 + (int64_t)name_len + extra_len + comment_len > dir_size - p) {
      rc = rt_fail(err, errlen, "%s: zip directory entry %" PRId64 " runs past the directory", path, i);
      break;
    }
    /* zip64's sizes and offset, in that order, for the fields that are full */
    const unsigned char *x = h + 46 + name_len, *x_end = x + extra_len;
    while (x_end - x >= 4) {
      uint32_t id = le16(x), len = le16(x + 2);
      if (len > x_end - x - 4) break;
      if (id == 1) {
        const unsigned char *v = x + 4, *v_end = v + len;
        if (usize == 0xFFFFFFFFu && v_end - v >= 8) usize = le64(v), v += 8;
        if (csize == 0xFFFFFFFFu && v_end - v >= 8) csize = le64(v), v += 8;
        if (local == 0xFFFFFFFFu && v_end - v >= 8) local = le64(v);
      }
      x += 4 + len;
    }
    ZipEntry *e = &z->e[z->n];
    e->name = malloc(name_len + 1);
    if (!e->name) {
      rc = rt_fail(err, errlen, "%s: out of memory", path);
      break;
    }
    memcpy(e->name, h + 46, name_len);
    e->name[name_len] = 0;
    z->n++;
    if (method != 0 || csize != usize)
      rc = rt_fail(err, errlen, "%s: zip entry '%s' is compressed (method %u): torch.save stores its entries", path,
                e->name, method);
    unsigned char lh[30];
    if (rc == 0 && (local > (uint64_t)z->file_size - 30 || rt_read_at(z->fd, lh, 30, (int64_t)local) != 0 ||
                    le32(lh) != 0x04034b50u))
      rc = rt_fail(err, errlen, "%s: zip entry '%s' has no local header where the directory says", path, e->name);
    if (rc == 0) {
      uint64_t data_at = local + 30 + le16(lh + 26) + le16(lh + 28);
      if (data_at > (uint64_t)z->file_size || usize > (uint64_t)z->file_size - data_at)
        rc = rt_fail(err, errlen, "%s: zip entry '%s' runs past the end of the file", path, e->name);
      e->data_at = (int64_t)data_at, e->size = (int64_t)usize, e->crc = le32(h + 16);
    }
    p += 46 + name_len + extra_len + comment_len;
  }
  free(dir);
  return rc;
}

static void zip_close(Zip *z) {
  for (int i = 0; i < z->n; i++) free(z->e[i].name);
  free(z->e);
  free(z->names);
  rt_names_free(&z->index);
}

/* The entries' names hashed (the first of a name that repeats wins). */
static int zip_index(Zip *z, const char *path, char *err, size_t errlen) {
  z->names = calloc((size_t)z->n + 1, sizeof *z->names);
  if (!z->names || rt_names_init(&z->index, z->n) < 0) return rt_fail(err, errlen, "%s: out of memory", path);
  for (int i = 0; i < z->n; i++) {
    z->names[i] = z->e[i].name;
    rt_names_add(&z->index, (const char *const *)z->names, i);
  }
  return 0;
}

static const ZipEntry *zip_find(const Zip *z, const char *name) {
  int i = rt_names_find(&z->index, (const char *const *)z->names, name);
  return i >= 0 ? &z->e[i] : NULL;
}

/* An entry's bytes, CRC-checked (malloc'd; one byte more, 0). */
static unsigned char *zip_read(const Zip *z, const ZipEntry *e, const char *path, char *err, size_t errlen) {
  unsigned char *b = e->size < INT64_MAX ? malloc((size_t)e->size + 1) : NULL;
  if (!b) {
    rt_fail(err, errlen, "%s: out of memory for zip entry '%s' (%" PRId64 " bytes)", path, e->name, e->size);
    return NULL;
  }
  if (rt_read_at(z->fd, b, (size_t)e->size, e->data_at) != 0) {
    rt_fail(err, errlen, "%s: could not read zip entry '%s'", path, e->name);
    free(b);
    return NULL;
  }
  if (crc32_of(b, (size_t)e->size) != e->crc) {
    rt_fail(err, errlen, "%s: zip entry '%s' is damaged (its CRC does not match)", path, e->name);
    free(b);
    return NULL;
  }
  b[e->size] = 0;
  return b;
}

/* ---- the pickle: values, and the machine that builds them ---- */

typedef enum { PV_NONE, PV_BOOL, PV_INT, PV_FLOAT, PV_STR, PV_TUPLE, PV_LIST, PV_DICT, PV_GLOBAL, PV_STORAGE,
               PV_TENSOR, PV_OTHER, PV_MARK } PvKind;

typedef struct Pv Pv;
struct Pv {
  PvKind kind;
  int64_t i;           /* int, bool; tensor: its storage offset */
  double f;
  char *s;             /* str; global: "module.name"; storage: its key; other: what built it */
  int n, cap;
  Pv **items;          /* tuple, list; dict: keys and values alternating; tensor: storage, size, stride */
  RtDType dtype;       /* storage */
  int64_t numel;       /* storage */
};

typedef struct Machine {
  const char *path;
  char *err;
  size_t errlen;
  Pv **all; /* every value made, to free */
  int64_t n_all, cap_all;
  Pv **stack;
  int64_t sp, cap_stack;
  Pv **memo;
  int64_t n_memo;   /* the memo array's length */
  int64_t memo_keys; /* the indices stored, where MEMOIZE stores next (Python's len(memo)) */
  int64_t bytes, budget; /* what the values built hold, and its bound from the pickle's size */
} Machine;

/* Counts n bytes against the budget: false past it. */
static bool spend(Machine *m, size_t n) {
  if (n > (size_t)(m->budget - m->bytes)) return false;
  m->bytes += (int64_t)n;
  return true;
}

static Pv *make(Machine *m, PvKind kind) {
  /* the value, its pointer in all and malloc's own few words */
  if (m->n_all >= MAX_VALUES || !spend(m, sizeof(Pv) + sizeof(Pv *) + 32)) return NULL;
  if (m->n_all == m->cap_all) {
    int64_t cap = m->cap_all ? 2 * m->cap_all : 256;
    Pv **all = realloc(m->all, (size_t)cap * sizeof *all);
    if (!all) return NULL;
    m->all = all, m->cap_all = cap;
  }
  Pv *v = calloc(1, sizeof *v);
  if (!v) return NULL;
  v->kind = kind;
  m->all[m->n_all++] = v;
  return v;
}

static bool add_item(Machine *m, Pv *c, Pv *item) {
  if (c->n == c->cap) {
    if (c->cap >= INT_MAX / 2) return false;
    int cap = c->cap ? 2 * c->cap : 4;
    if (!spend(m, (size_t)(cap - c->cap) * sizeof *c->items)) return false;
    Pv **items = realloc(c->items, (size_t)cap * sizeof *items);
    if (!items) return false;
    c->items = items, c->cap = cap;
  }
  c->items[c->n++] = item;
  return true;
}

static bool push(Machine *m, Pv *v) {
  if (!v || m->sp >= MAX_STACK) return false;
  if (m->sp == m->cap_stack) {
    int64_t cap = m->cap_stack ? 2 * m->cap_stack : 64;
    Pv **s = realloc(m->stack, (size_t)cap * sizeof *s);
    if (!s) return false;
    m->stack = s, m->cap_stack = cap;
  }
  m->stack[m->sp++] = v;
  return true;
}

static Pv *pop(Machine *m) { return m->sp > 0 && m->stack[m->sp - 1]->kind != PV_MARK ? m->stack[--m->sp] : NULL; }

/* The value on top (NULL when none), left there. */
static Pv *top_of(const Machine *m) { return m->sp > 0 ? m->stack[m->sp - 1] : NULL; }

/* The top of kind, or NULL. */
static Pv *top_kind(const Machine *m, PvKind kind) {
  Pv *t = top_of(m);
  return t && t->kind == kind ? t : NULL;
}

/* The values after the topmost mark, which is removed: their count, or -1. */
static int64_t pop_mark(Machine *m, Pv ***items) {
  int64_t k = m->sp - 1;
  while (k >= 0 && m->stack[k]->kind != PV_MARK) k--;
  if (k < 0) return -1;
  *items = m->stack + k + 1;
  int64_t n = m->sp - k - 1;
  m->sp = k;
  return n;
}

static Pv *str_value(Machine *m, PvKind kind, const char *s, size_t n) {
  Pv *v = make(m, kind);
  if (!v || !spend(m, n + 1) || !(v->s = malloc(n + 1))) return NULL;
  memcpy(v->s, s, n);
  v->s[n] = 0;
  v->i = (int64_t)n;
  return v;
}

static bool is_int(const Pv *v) { return v && (v->kind == PV_INT || v->kind == PV_BOOL); }

/* The storage types torch.save names in a persistent id. */
static bool storage_dtype(const char *global, RtDType *dt) {
  static const struct {
    const char *name;
    RtDType dt;
  } types[] = {{"torch.FloatStorage", RT_F32},  {"torch.DoubleStorage", RT_F64}, {"torch.HalfStorage", RT_F16},
               {"torch.BFloat16Storage", RT_BF16}, {"torch.LongStorage", RT_I64}, {"torch.IntStorage", RT_I32},
               {"torch.ShortStorage", RT_I16},  {"torch.CharStorage", RT_I8},    {"torch.ByteStorage", RT_U8},
               {"torch.BoolStorage", RT_BOOL}};
  for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
    if (strcmp(global, types[k].name) == 0) return *dt = types[k].dt, true;
  return false;
}

/* BINPERSID's ('storage', torch.XStorage, key, location, numel). */
static Pv *persistent(Machine *m, const Pv *id) {
  if (!id || id->kind != PV_TUPLE || id->n != 5 || id->items[0]->kind != PV_STR ||
      strcmp(id->items[0]->s, "storage") != 0 || id->items[1]->kind != PV_GLOBAL || id->items[2]->kind != PV_STR ||
      !is_int(id->items[4]) || id->items[4]->i < 0)
    return NULL;
  RtDType dt;
  if (!storage_dtype(id->items[1]->s, &dt)) /* a storage type dlcc does not read: its name, no tensor */
    return str_value(m, PV_OTHER, id->items[1]->s, strlen(id->items[1]->s));
  Pv *v = str_value(m, PV_STORAGE, id->items[2]->s, strlen(id->items[2]->s));
  if (!v) return NULL;
  v->dtype = dt;
  v->numel = id->items[4]->i;
  return v;
}

/* REDUCE of f on args: the calls a state_dict's pickle makes; any other
 * becomes an inert value naming f (never called). */
static Pv *reduce(Machine *m, const Pv *f, const Pv *args) {
  if (!f || f->kind != PV_GLOBAL || !args || args->kind != PV_TUPLE) return NULL;
  if (strcmp(f->s, "collections.OrderedDict") == 0 && args->n == 0) return make(m, PV_DICT);
  if (strcmp(f->s, "torch._utils._rebuild_tensor_v2") == 0 && args->n >= 4 && args->items[0]->kind == PV_STORAGE &&
      is_int(args->items[1]) && args->items[2]->kind == PV_TUPLE && args->items[3]->kind == PV_TUPLE) {
    Pv *t = make(m, PV_TENSOR);
    if (!t || !add_item(m, t, args->items[0]) || !add_item(m, t, args->items[2]) || !add_item(m, t, args->items[3]))
      return NULL;
    t->i = args->items[1]->i;
    return t;
  }
  if ((strcmp(f->s, "torch._utils._rebuild_parameter") == 0 ||
       strcmp(f->s, "torch._utils._rebuild_parameter_with_state") == 0) &&
      args->n >= 1 && args->items[0]->kind == PV_TENSOR)
    return args->items[0];
  /* A tensor rebuilt from what dlcc does not read (another storage type,
   * a quantized or sparse tensor) names that, for the message. */
  if (strncmp(f->s, "torch._utils._rebuild", 21) == 0 && args->n >= 1 && args->items[0]->kind == PV_OTHER &&
      args->items[0]->s &&
      strncmp(args->items[0]->s, "torch.", 6) == 0) {
    Pv *v = str_value(m, PV_OTHER, args->items[0]->s, strlen(args->items[0]->s));
    if (v) v->i = 1; /* a tensor dlcc cannot take */
    return v;
  }
  Pv *v = str_value(m, PV_OTHER, f->s, strlen(f->s));
  /* a tensor of a kind dlcc does not read (sparse, quantized, a subclass) */
  if (v) v->i = strncmp(f->s, "torch._utils._rebuild", 21) == 0 || strncmp(f->s, "torch._tensor._rebuild", 22) == 0;
  return v;
}

/* A dict's new item; an inert value (a defaultdict, an object) takes
 * and keeps nothing. */
static bool set_item(Machine *m, Pv *d, Pv *k, Pv *v) {
  return d->kind == PV_OTHER || (d->kind == PV_DICT && add_item(m, d, k) && add_item(m, d, v));
}

static Pv *memo_get(Machine *m, uint64_t i) { return i < (uint64_t)m->n_memo ? m->memo[i] : NULL; }

/* A memo index is no larger than the values made so far (a pickle's
 * are sequential), so a forged one cannot make the memo huge. */
static bool memo_put(Machine *m, uint64_t i, Pv *v, int64_t limit) {
  if (!v || i >= (uint64_t)limit) return false;
  if (i >= (uint64_t)m->n_memo) {
    int64_t n = (int64_t)i + 1 > 2 * m->n_memo ? (int64_t)i + 1 : 2 * m->n_memo;
    Pv **memo = realloc(m->memo, (size_t)n * sizeof *memo);
    if (!memo) return false;
    memset(memo + m->n_memo, 0, (size_t)(n - m->n_memo) * sizeof *memo);
    m->memo = memo, m->n_memo = n;
  }
  m->memo_keys += !m->memo[i];
  m->memo[i] = v;
  return true;
}

/* Runs the pickle p[0..n); its result in *out, or -1 with a message. */
static int unpickle(Machine *m, const unsigned char *p, int64_t n, Pv **out) {
  int64_t at = 0;
#define NEED(k) \
  if (n - at < (int64_t)(k)) goto truncated
#define BAD(what) \
  do { \
    rt_fail(m->err, m->errlen, "%s: data.pkl: %s at byte %" PRId64, m->path, what, start); \
    return -1; \
  } while (0)
  while (at < n) {
    int64_t start = at;
    unsigned char op = p[at++];
    Pv *v = NULL, *a = NULL, *b = NULL, **items = NULL;
    int64_t k;
    switch (op) {
      case 0x80: NEED(1); at++; continue;            /* PROTO */
      case 0x95: NEED(8); at += 8; continue;         /* FRAME */
      case '.':                                      /* STOP */
        if (!(*out = pop(m))) BAD("STOP with nothing to return");
        return 0;
      case '(': v = make(m, PV_MARK); break;         /* MARK */
      case '0': if (!pop(m)) BAD("POP of nothing"); continue;
      case '1': if (pop_mark(m, &items) < 0) BAD("POP_MARK without a mark"); continue;
      case '2': if (!(v = top_of(m))) BAD("DUP of nothing"); break;
      case 'N': v = make(m, PV_NONE); break;
      case 0x88: case 0x89:                          /* NEWTRUE, NEWFALSE */
        if ((v = make(m, PV_BOOL))) v->i = op == 0x88;
        break;
      case 'J': NEED(4); if ((v = make(m, PV_INT))) v->i = (int32_t)le32(p + at); at += 4; break;
      case 'K': NEED(1); if ((v = make(m, PV_INT))) v->i = p[at]; at += 1; break;
      case 'M': NEED(2); if ((v = make(m, PV_INT))) v->i = le16(p + at); at += 2; break;
      case 0x8a: case 0x8b: {                        /* LONG1, LONG4 */
        int width = op == 0x8a ? 1 : 4;
        NEED(width);
        uint64_t len = width == 1 ? p[at] : le32(p + at);
        at += width;
        if (len > (uint64_t)(n - at)) goto truncated;
        if (len > 8) { /* wider than 64 bits (a checkpoint's seed, say): a number nothing here reads */
          at += (int64_t)len;
          v = make(m, PV_OTHER);
          break;
        }
        uint64_t u = 0;
        for (int q = 0; q < (int)len; q++) u |= (uint64_t)p[at + q] << (8 * q);
        if (len > 0 && len < 8 && (p[at + len - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * len);
        at += (int64_t)len;
        if ((v = make(m, PV_INT))) v->i = (int64_t)u;
        break;
      }
      case 'G': {                                    /* BINFLOAT, big-endian */
        NEED(8);
        uint64_t u = 0;
        for (int q = 0; q < 8; q++) u = u << 8 | p[at + q];
        at += 8;
        if ((v = make(m, PV_FLOAT))) memcpy(&v->f, &u, sizeof v->f);
        break;
      }
      case 'X': case 0x8c: case 0x8d: case 'T': case 'U': case 'B': case 'C': case 0x8e: {
        /* BINUNICODE, SHORT_BINUNICODE, BINUNICODE8, BINSTRING, SHORT_BINSTRING, BINBYTES, SHORT_BINBYTES, BINBYTES8 */
        int width = op == 0x8c || op == 'U' || op == 'C' ? 1 : op == 0x8d || op == 0x8e ? 8 : 4;
        NEED(width);
        uint64_t len = width == 1 ? p[at] : width == 4 ? le32(p + at) : le64(p + at);
        at += width;
        if (len > (uint64_t)(n - at)) goto truncated;
        v = str_value(m, PV_STR, (const char *)p + at, (size_t)len);
        at += (int64_t)len;
        break;
      }
      case ')': v = make(m, PV_TUPLE); break;
      case ']': v = make(m, PV_LIST); break;
      case '}': v = make(m, PV_DICT); break;
      case 0x85: case 0x86: case 0x87: case 't': case 'l': case 'd': { /* TUPLE1-3, TUPLE, LIST, DICT */
        Pv *tmp[3];
        if (op == 't' || op == 'l' || op == 'd') {
          if ((k = pop_mark(m, &items)) < 0) BAD("a tuple, list or dict without its mark");
        } else {
          k = op - 0x84;
          for (int64_t q = k - 1; q >= 0; q--)
            if (!(tmp[q] = pop(m))) BAD("a tuple of fewer values than it takes");
          items = tmp;
        }
        if (!(v = make(m, op == 'l' ? PV_LIST : op == 'd' ? PV_DICT : PV_TUPLE))) break;
        if (op == 'd' && k % 2) BAD("a dict of an odd count of keys and values");
        for (int64_t q = 0; q < k; q++)
          if (!add_item(m, v, items[q])) v = NULL;
        break;
      }
      /* Items appended or set on an inert value (a defaultdict, an
       * object) are taken and dropped. */
      case 'a':                                      /* APPEND */
        if (!(b = pop(m)) || !((a = top_kind(m, PV_LIST)) || top_kind(m, PV_OTHER))) BAD("APPEND not to a list");
        if (a && !add_item(m, a, b)) goto oom;
        continue;
      case 'e':                                      /* APPENDS */
        if ((k = pop_mark(m, &items)) < 0 || !((a = top_kind(m, PV_LIST)) || top_kind(m, PV_OTHER)))
          BAD("APPENDS not to a list");
        for (int64_t q = 0; a && q < k; q++)
          if (!add_item(m, a, items[q])) goto oom;
        continue;
      case 's':                                      /* SETITEM */
        if (!(b = pop(m)) || !(a = pop(m)) || !(top_kind(m, PV_DICT) || top_kind(m, PV_OTHER)))
          BAD("SETITEM not on a dict");
        if (!set_item(m, top_of(m), a, b)) goto oom;
        continue;
      case 'u':                                      /* SETITEMS */
        if ((k = pop_mark(m, &items)) < 0 || k % 2 || !(top_kind(m, PV_DICT) || top_kind(m, PV_OTHER)))
          BAD("SETITEMS not on a dict");
        for (int64_t q = 0; q < k; q += 2)
          if (!set_item(m, top_of(m), items[q], items[q + 1])) goto oom;
        continue;
      case 'q': case 'r': case 0x94: {               /* BINPUT, LONG_BINPUT, MEMOIZE */
        int width = op == 'q' ? 1 : op == 'r' ? 4 : 0;
        NEED(width);
        uint64_t i = op == 'q' ? p[at] : op == 'r' ? le32(p + at) : (uint64_t)m->memo_keys;
        if (!memo_put(m, i, top_of(m), m->n_all + 1)) BAD("a memo store of nothing, or at an index no value reached");
        at += width;
        continue;
      }
      case 'h': case 'j': {                          /* BINGET, LONG_BINGET */
        int width = op == 'h' ? 1 : 4;
        NEED(width);
        if (!(v = memo_get(m, width == 1 ? p[at] : le32(p + at)))) BAD("a memo read of nothing stored");
        at += width;
        break;
      }
      case 'c': {                                    /* GLOBAL "module\nname\n" */
        const unsigned char *nl1 = memchr(p + at, '\n', (size_t)(n - at));
        const unsigned char *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(n - (nl1 + 1 - p))) : NULL;
        if (!nl2) goto truncated;
        size_t mod = (size_t)(nl1 - (p + at)), name = (size_t)(nl2 - nl1 - 1);
        char *s = malloc(mod + name + 2);
        if (!s) goto oom;
        memcpy(s, p + at, mod);
        s[mod] = '.';
        memcpy(s + mod + 1, nl1 + 1, name);
        s[mod + 1 + name] = 0;
        v = str_value(m, PV_GLOBAL, s, mod + 1 + name);
        free(s);
        at = nl2 + 1 - p;
        break;
      }
      case 0x93:                                     /* STACK_GLOBAL */
        if (!(b = pop(m)) || !(a = pop(m)) || a->kind != PV_STR || b->kind != PV_STR)
          BAD("STACK_GLOBAL of non-strings");
        if ((v = make(m, PV_GLOBAL)) && spend(m, strlen(a->s) + strlen(b->s) + 2) &&
            (v->s = malloc(strlen(a->s) + strlen(b->s) + 2)))
          sprintf(v->s, "%s.%s", a->s, b->s);
        else
          v = NULL;
        break;
      case 'Q':                                      /* BINPERSID */
        if (!(a = pop(m)) || !(v = persistent(m, a))) BAD("a persistent id that is not torch.save's storage");
        break;
      case 'R':                                      /* REDUCE */
        if (!(b = pop(m)) || !(a = pop(m)) || !(v = reduce(m, a, b))) BAD("a call dlcc does not read");
        break;
      case 0x81:                                     /* NEWOBJ: cls, args -> an object */
        if (!(b = pop(m)) || !(a = pop(m)) || a->kind != PV_GLOBAL) BAD("NEWOBJ of no class");
        v = str_value(m, PV_OTHER, a->s, strlen(a->s));
        break;
      case 'b':                                      /* BUILD: a dict's attributes (_metadata), an object's state */
        if (!pop(m) || !m->sp) BAD("BUILD of nothing");
        continue;
      default: {
        char what[80];
        snprintf(what, sizeof what, "opcode 0x%02x, which a state_dict does not use,", op);
        BAD(what);
      }
    }
    if (!push(m, v)) goto oom;
  }
truncated:
  return rt_fail(m->err, m->errlen, "%s: data.pkl ends before its STOP (truncated)", m->path);
oom:
  return rt_fail(m->err, m->errlen, "%s: data.pkl: out of memory, or more values than a pickle of its size makes",
              m->path);
#undef NEED
#undef BAD
}

static void machine_free(Machine *m) {
  for (int64_t i = 0; i < m->n_all; i++) {
    free(m->all[i]->s);
    free(m->all[i]->items);
    free(m->all[i]);
  }
  free(m->all);
  free(m->stack);
  free(m->memo);
}

/* ---- tensors out of storages ---- */

typedef struct Storage {
  unsigned char *bytes;
  int64_t numel;
  RtDType dtype;
} Storage;

/* The storages read so far (at most one a zip entry), by key; and the
 * bytes the tensors copied out of them take, bounded by the file's size
 * (views that repeat a storage, as expand()'s stride 0 does, would
 * otherwise make a small file hold terabytes). */
typedef struct Stores {
  Storage *s;
  char **keys;
  int n;
  RtNames index;
  int64_t out_bytes, out_limit;
} Stores;

/* tensor v (a view of a storage) copied into t, its storages read from
 * the archive under prefix once each. */
static int copy_tensor(const Zip *z, const char *prefix, const char *path, const char *name, const Pv *v,
                       Stores *ss, RtTensor *t, char *err, size_t errlen) {
  const Pv *st = v->items[0], *size = v->items[1], *stride = v->items[2];
  if (size->n > RT_MAX_RANK || stride->n != size->n)
    return rt_fail(err, errlen, "%s: tensor '%s': rank %d (strides %d): at most %d", path, name, size->n, stride->n,
                RT_MAX_RANK);
  int found = rt_names_find(&ss->index, (const char *const *)ss->keys, st->s);
  Storage *s = found >= 0 ? &ss->s[found] : NULL;
  if (!s) {
    char entry[1024];
    if (snprintf(entry, sizeof entry, "%s/data/%s", prefix, st->s) >= (int)sizeof entry)
      return rt_fail(err, errlen, "%s: tensor '%s': a storage key of %zu bytes", path, name, strlen(st->s));
    const ZipEntry *e = zip_find(z, entry);
    if (!e) return rt_fail(err, errlen, "%s: tensor '%s': its storage %s is not in the file", path, name, entry);
    int64_t es = rt_dtype_size(st->dtype);
    if (st->numel > e->size / es || e->size != st->numel * es)
      return rt_fail(err, errlen, "%s: tensor '%s': storage %s holds %" PRId64 " bytes, not %" PRId64 " %s values",
                  path, name, entry, e->size, st->numel, rt_dtype_name(st->dtype));
    if (ss->n >= z->n) return rt_fail(err, errlen, "%s: more storages than zip entries", path); /* distinct entries */
    s = &ss->s[ss->n];
    *s = (Storage){.numel = st->numel, .dtype = st->dtype};
    ss->keys[ss->n] = st->s;
    rt_names_add(&ss->index, (const char *const *)ss->keys, ss->n++);
    if (!(s->bytes = zip_read(z, e, path, err, errlen))) return -1;
  }
  if (s->dtype != st->dtype)
    return rt_fail(err, errlen, "%s: tensor '%s': storage %s read as %s and as %s", path, name, st->s,
                rt_dtype_name(s->dtype), rt_dtype_name(st->dtype));
  t->dtype = s->dtype;
  t->rank = size->n;
  if (v->i < 0) return rt_fail(err, errlen, "%s: tensor '%s': a negative storage offset", path, name);
  int64_t last = v->i; /* the view's largest element index */
  for (int d = 0; d < size->n; d++) {
    const Pv *sz = size->items[d], *sd = stride->items[d];
    if (!is_int(sz) || !is_int(sd) || sz->i < 0 || sd->i < 0)
      return rt_fail(err, errlen, "%s: tensor '%s': a size or stride that is not a whole number", path, name);
    t->dims[d] = sz->i;
    if (sz->i > 0 && sd->i > 0 && (sz->i - 1 > (INT64_MAX - last) / sd->i))
      return rt_fail(err, errlen, "%s: tensor '%s': its view overflows", path, name);
    if (sz->i > 0) last += (sz->i - 1) * sd->i;
  }
  int64_t count = rt_numel(t), es = rt_dtype_size(t->dtype);
  if (count < 0 || v->i < 0 || (count > 0 && last >= s->numel))
    return rt_fail(err, errlen, "%s: tensor '%s': its view [offset %" PRId64 "] reads past its storage of %" PRId64
                " values", path, name, v->i, s->numel);
  t->nbytes = (size_t)count * (size_t)es;
  if ((int64_t)t->nbytes > ss->out_limit - ss->out_bytes)
    return rt_fail(err, errlen, "%s: tensor '%s': the tensors would take more than %" PRId64 " bytes (4 times the "
                "file's size and 64 MiB): views that repeat their storage (expand()'s stride 0) are not read; save "
                "contiguous tensors", path, name, ss->out_limit);
  ss->out_bytes += (int64_t)t->nbytes;
  if (!(t->data = malloc(t->nbytes ? t->nbytes : 1))) return rt_fail(err, errlen, "%s: out of memory", path);
  bool dense = true; /* C order: one copy */
  int64_t want = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    dense &= t->dims[d] == 1 || stride->items[d]->i == want;
    want *= t->dims[d]; /* at most count, which fit */
  }
  if (dense) {
    if (count) memcpy(t->data, s->bytes + v->i * es, t->nbytes);
    return 0;
  }
  /* element by element in C order from the view's strides */
  int64_t idx[RT_MAX_RANK] = {0};
  for (int64_t i = 0; i < count; i++) {
    int64_t at = v->i;
    for (int d = 0; d < t->rank; d++) at += idx[d] * stride->items[d]->i;
    memcpy((unsigned char *)t->data + i * es, s->bytes + at * es, (size_t)es);
    for (int d = t->rank - 1; d >= 0 && ++idx[d] == t->dims[d]; d--) idx[d] = 0;
  }
  return 0;
}

/* The dict of tensors: the top level, or a checkpoint's state_dict under
 * one of the keys training scripts use. */
static const Pv *state_dict_of(const Pv *top) {
  static const char *const keys[] = {"state_dict", "model_state_dict", "model", "module", "net"};
  if (!top || top->kind != PV_DICT) return NULL;
  for (int i = 1; i < top->n; i += 2)
    if (top->items[i]->kind == PV_TENSOR) return top;
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
    for (int i = 0; i < top->n; i += 2)
      if (top->items[i]->kind == PV_STR && strcmp(top->items[i]->s, keys[k]) == 0 &&
          top->items[i + 1]->kind == PV_DICT)
        return top->items[i + 1];
  return top;
}

/* What the file holds when it is no state_dict, for the message. */
static void describe(const Pv *v, char *buf, size_t n) {
  if (v->kind == PV_OTHER) {
    snprintf(buf, n, "a pickled %s object (a whole model?)", v->s ? v->s : "value");
    return;
  }
  if (v->kind != PV_DICT) {
    snprintf(buf, n, "no dict");
    return;
  }
  size_t at = (size_t)snprintf(buf, n, "a dict of keys");
  for (int i = 0; i < v->n && i < 16 && at < n; i += 2)
    at += (size_t)snprintf(buf + at, n - at, "%s %s", i ? "," : "",
                           v->items[i]->kind == PV_STR ? v->items[i]->s : "(not a string)");
}

int rt_torch_read(const char *path, int flags, RtTensorSet *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  char why[256];
  Zip z = {0};
  z.fd = rt_open_regular(path, flags, &z.file_size, why, sizeof why);
  if (z.fd < 0) return rt_fail(err, errlen, "%s: %s", path, why);
  Machine m = {.path = path, .err = err, .errlen = errlen};
  unsigned char *pkl = NULL;
  Stores ss = {.out_limit = 4 * z.file_size + (64 << 20)};
  int rc = -1;
  if (zip_open(&z, path, err, errlen) < 0 || zip_index(&z, path, err, errlen) < 0) goto done;
  ss.s = calloc((size_t)z.n + 1, sizeof *ss.s);
  ss.keys = calloc((size_t)z.n + 1, sizeof *ss.keys);
  if (!ss.s || !ss.keys || rt_names_init(&ss.index, z.n) < 0) {
    rt_fail(err, errlen, "%s: out of memory", path);
    goto done;
  }
  /* the archive's folder: "archive/" or the saved file's stem */
  const ZipEntry *data = NULL;
  for (int i = 0; i < z.n && !data; i++) {
    const char *slash = strchr(z.e[i].name, '/');
    if (slash && strcmp(slash, "/data.pkl") == 0) data = &z.e[i];
  }
  if (!data) {
    rt_fail(err, errlen, "%s: a zip file without data.pkl: not a torch.save file", path);
    goto done;
  }
  char prefix[512];
  int prefix_len = (int)(strchr(data->name, '/') - data->name);
  if (prefix_len >= (int)sizeof prefix) {
    rt_fail(err, errlen, "%s: an archive folder name of %d bytes", path, prefix_len);
    goto done;
  }
  snprintf(prefix, sizeof prefix, "%.*s", prefix_len, data->name);
  char order_name[600];
  snprintf(order_name, sizeof order_name, "%s/byteorder", prefix);
  const ZipEntry *order = zip_find(&z, order_name);
  if (order) {
    unsigned char *o = order->size <= 16 ? zip_read(&z, order, path, err, errlen) : NULL;
    if (!o && order->size <= 16) goto done;
    bool little = o && strcmp((const char *)o, "little") == 0;
    free(o);
    if (!little) {
      rt_fail(err, errlen, "%s: the byteorder entry does not say little: dlcc reads little-endian tensors", path);
      goto done;
    }
  }
  if (data->size > MAX_PICKLE) {
    rt_fail(err, errlen, "%s: data.pkl is %" PRId64 " bytes: more than a state_dict's", path, data->size);
    goto done;
  }
  if (!(pkl = zip_read(&z, data, path, err, errlen))) goto done;
  m.budget = 32 * data->size + (64 << 20); /* a value of a few dozen bytes an opcode byte, at most */
  Pv *top = NULL;
  if (unpickle(&m, pkl, data->size, &top) < 0) goto done;
  const Pv *sd = state_dict_of(top);
  int n = 0;
  for (int i = 1; sd && i < sd->n; i += 2)
    n += (sd->items[i]->kind == PV_TENSOR || (sd->items[i]->kind == PV_OTHER && sd->items[i]->i)) &&
         sd->items[i - 1]->kind == PV_STR;
  if (n == 0) {
    char what[600];
    describe(top, what, sizeof what);
    rt_fail(err, errlen, "%s: no tensors to read: the file holds %s; dlcc reads a state_dict "
         "(torch.save(model.state_dict(), PATH))", path, what);
    goto done;
  }
  out->names = calloc((size_t)n + 1, sizeof *out->names);
  out->tensors = calloc((size_t)n + 1, sizeof *out->tensors);
  if (!out->names || !out->tensors || rt_names_init(&out->index, n) < 0) {
    rt_fail(err, errlen, "%s: out of memory", path);
    goto done;
  }
  for (int i = 1; i < sd->n; i += 2) {
    const Pv *key = sd->items[i - 1], *v = sd->items[i];
    if (v->kind == PV_OTHER && v->i && key->kind == PV_STR) {
      rt_fail(err, errlen, "%s: tensor '%s' is a kind dlcc does not read (%s)", path, key->s, v->s);
      goto done;
    }
    if (v->kind != PV_TENSOR || key->kind != PV_STR) continue; /* a checkpoint's other entries */
    if (strlen(key->s) != (size_t)key->i) {
      rt_fail(err, errlen, "%s: a tensor's name holds a NUL byte", path);
      goto done;
    }
    if (!(out->names[out->n] = strdup(key->s))) {
      rt_fail(err, errlen, "%s: out of memory", path);
      goto done;
    }
    if (rt_names_add(&out->index, (const char *const *)out->names, out->n) >= 0) {
      rt_fail(err, errlen, "%s: tensor '%s' appears twice", path, key->s);
      free(out->names[out->n]);
      out->names[out->n] = NULL;
      goto done;
    }
    out->n++;
    if (copy_tensor(&z, prefix, path, key->s, v, &ss, &out->tensors[out->n - 1], err, errlen) < 0)
      goto done;
  }
  rc = 0;
done:
  for (int i = 0; i < ss.n; i++) free(ss.s[i].bytes);
  free(ss.s);
  free(ss.keys);
  rt_names_free(&ss.index);
  free(pkl);
  machine_free(&m);
  zip_close(&z);
  close(z.fd);
  if (rc < 0) rt_tensor_set_free(out);
  return rc;
}

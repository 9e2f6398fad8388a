/* safetensors files: takes a path, returns every tensor in it, or its
 * header with each tensor read when asked (or writes a set).  Layout:
 * 8-byte little-endian header size N, N bytes of JSON
 * {"name": {"dtype", "shape", "data_offsets": [b, e]}, "__metadata__"},
 * then the data, offsets counted from its start.  The header is checked
 * in full before any data is read (names found by a hash index, so its
 * cost grows linearly with its size); each tensor's bytes are then read
 * once, straight into their own buffer. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensorio.h"

enum { MAX_HEADER = 100 * 1000 * 1000 };

static const char *const st_names[RT_DTYPE_COUNT] = {
    [RT_F32] = "F32", [RT_F16] = "F16", [RT_BF16] = "BF16", [RT_I8] = "I8",    [RT_I32] = "I32",
    [RT_I64] = "I64", [RT_F64] = "F64", [RT_U8] = "U8",     [RT_BOOL] = "BOOL", [RT_I16] = "I16",
    [RT_U16] = "U16", [RT_U32] = "U32", [RT_U64] = "U64",
};

/* ---- the index of names: open addressing, linear probing ---- */

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

int rt_names_init(RtNames *ix, int n) {
  size_t cap = 16;
  while (cap < 2 * (size_t)(n > 0 ? n : 0) + 2) cap *= 2;
  ix->slots = cap <= INT_MAX ? calloc(cap, sizeof(int)) : NULL;
  ix->n_slots = ix->slots ? (int)cap : 0;
  return ix->slots ? 0 : -1;
}

/* The slot where name is, or the empty one where it would go. */
static int *slot_of(const RtNames *ix, const char *const *names, const char *name) {
  size_t mask = (size_t)ix->n_slots - 1;
  for (size_t i = hash_name(name) & mask;; i = (i + 1) & mask)
    if (!ix->slots[i] || strcmp(names[ix->slots[i] - 1], name) == 0) return &ix->slots[i];
}

int rt_names_add(RtNames *ix, const char *const *names, int i) {
  int *slot = slot_of(ix, names, names[i]);
  if (*slot) return *slot - 1;
  *slot = i + 1;
  return -1;
}

int rt_names_find(const RtNames *ix, const char *const *names, const char *name) {
  return ix->n_slots ? *slot_of(ix, names, name) - 1 : -1;
}

void rt_names_free(RtNames *ix) {
  free(ix->slots);
  ix->slots = NULL;
  ix->n_slots = 0;
}

const RtTensor *rt_tensor_set_find(const RtTensorSet *s, const char *name) {
  if (s->index.n_slots) {
    int k = rt_names_find(&s->index, (const char *const *)s->names, name);
    return k >= 0 ? &s->tensors[k] : NULL;
  }
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->names[i], name) == 0) return &s->tensors[i];
  return NULL;
}

void rt_tensor_set_free(RtTensorSet *s) {
  for (int i = 0; i < s->n; i++) {
    free(s->names[i]);
    rt_tensor_free(&s->tensors[i]);
  }
  for (int i = 0; i < s->n_meta; i++) {
    free(s->meta_keys[i]);
    free(s->meta_values[i]);
  }
  free(s->names);
  free(s->tensors);
  free(s->meta_keys);
  free(s->meta_values);
  rt_names_free(&s->index);
  if (s->lazy && !s->fds) close(s->fd);
  for (int k = 0; s->fds && k < s->n_files; k++)
    if (s->fds[k] >= 0) close(s->fds[k]);
  free(s->fds);
  free(s->file_of);
  free(s->path);
  free(s->begins);
  memset(s, 0, sizeof *s);
}

/* A JSON number that is a whole number in [0, 2^53). */
static bool json_uint(const cJSON *j, int64_t *out) {
  if (!cJSON_IsNumber(j)) return false;
  double d = j->valuedouble;
  if (!(d >= 0 && d < 9007199254740992.0) || d != floor(d)) return false;
  *out = (int64_t)d;
  return true;
}

typedef struct Entry {
  const char *name;
  int64_t begin, end;
  int index; /* into the set */
} Entry;

static int by_begin(const void *a, const void *b) {
  const Entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

static void shape_str(const RtTensor *t, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "%s[", st_names[t->dtype]);
  for (int i = 0; i < t->rank && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i ? ", " : "", t->dims[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
}

/* One tensor's entry: dtype, shape and offsets, checked against each
 * other and against the data's size. */
static int parse_entry(const char *path, const cJSON *j, int64_t data_size, RtTensor *t, Entry *e,
                       char *err, size_t errlen) {
  const char *name = e->name;
  if (!cJSON_IsObject(j))
    return rt_fail(err, errlen, "%s: tensor '%s': the entry is not a JSON object", path, name);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
  if (!dt || !shape || !offs)
    return rt_fail(err, errlen, "%s: tensor '%s': missing \"%s\"", path, name,
                !dt ? "dtype" : !shape ? "shape" : "data_offsets");
  if (!cJSON_IsString(dt))
    return rt_fail(err, errlen, "%s: tensor '%s': \"dtype\" is not a string", path, name);
  int found = -1;
  for (int k = 0; k < RT_DTYPE_COUNT; k++)
    if (strcmp(dt->valuestring, st_names[k]) == 0) found = k;
  if (found < 0)
    return rt_fail(err, errlen, "%s: tensor '%s': unsupported dtype \"%s\"", path, name, dt->valuestring);
  t->dtype = (RtDType)found;
  if (!cJSON_IsArray(shape))
    return rt_fail(err, errlen, "%s: tensor '%s': \"shape\" is not an array", path, name);
  int rank = cJSON_GetArraySize(shape);
  if (rank > RT_MAX_RANK)
    return rt_fail(err, errlen, "%s: tensor '%s': rank %d is more than %d", path, name, rank, RT_MAX_RANK);
  t->rank = rank;
  int i = 0;
  for (const cJSON *d = shape->child; d; d = d->next, i++)
    if (!json_uint(d, &t->dims[i]))
      return rt_fail(err, errlen, "%s: tensor '%s': \"shape\" must hold integers >= 0", path, name);
  int64_t n = rt_numel(t);
  if (n < 0) return rt_fail(err, errlen, "%s: tensor '%s': shape is too large", path, name);
  if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(offs->child, &e->begin) ||
      !json_uint(offs->child->next, &e->end) || e->begin > e->end)
    return rt_fail(err, errlen, "%s: tensor '%s': \"data_offsets\" must be [begin, end] with 0 <= begin <= end",
                path, name);
  int64_t want = n * rt_dtype_size(t->dtype);
  char ty[200];
  shape_str(t, ty, sizeof ty);
  if (e->end - e->begin != want)
    return rt_fail(err, errlen,
                "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64 "] hold %" PRId64
                " bytes, %s needs %" PRId64,
                path, name, e->begin, e->end, e->end - e->begin, ty, want);
  if (e->end > data_size)
    return rt_fail(err, errlen,
                "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64
                "] run past the end of the data (%" PRId64 " bytes)",
                path, name, e->begin, e->end, data_size);
  t->nbytes = (size_t)want;
  return 0;
}

static int parse_metadata(const char *path, const cJSON *j, RtTensorSet *out, char *err, size_t errlen) {
  if (!cJSON_IsObject(j)) return rt_fail(err, errlen, "%s: \"__metadata__\" is not a JSON object", path);
  int n = cJSON_GetArraySize(j);
  out->meta_keys = calloc((size_t)n + 1, sizeof(char *));
  out->meta_values = calloc((size_t)n + 1, sizeof(char *));
  if (!out->meta_keys || !out->meta_values) return rt_fail(err, errlen, "%s: out of memory", path);
  for (const cJSON *m = j->child; m; m = m->next) {
    if (!cJSON_IsString(m))
      return rt_fail(err, errlen, "%s: \"__metadata__\" entry '%s' is not a string", path, m->string);
    out->meta_keys[out->n_meta] = strdup(m->string);
    out->meta_values[out->n_meta] = strdup(m->valuestring);
    out->n_meta++;
    if (!out->meta_keys[out->n_meta - 1] || !out->meta_values[out->n_meta - 1])
      return rt_fail(err, errlen, "%s: out of memory", path);
  }
  return 0;
}

/* Checks the parsed header and fills out (names, dtypes, shapes); entries
 * get each tensor's offsets. */
static int parse_header(const char *path, const cJSON *root, int64_t data_size, RtTensorSet *out,
                        Entry **entries, char *err, size_t errlen) {
  if (!cJSON_IsObject(root)) return rt_fail(err, errlen, "%s: the header is not a JSON object", path);
  int total = cJSON_GetArraySize(root);
  out->names = calloc((size_t)total + 1, sizeof(char *));
  out->tensors = calloc((size_t)total + 1, sizeof(RtTensor));
  Entry *es = *entries = calloc((size_t)total + 1, sizeof(Entry));
  if (!out->names || !out->tensors || !es || rt_names_init(&out->index, total) < 0)
    return rt_fail(err, errlen, "%s: out of memory", path);
  bool seen_meta = false;
  for (const cJSON *j = root->child; j; j = j->next) {
    const char *name = j->string;
    if (strcmp(name, "__metadata__") == 0) {
      if (seen_meta) return rt_fail(err, errlen, "%s: \"__metadata__\" appears twice", path);
      seen_meta = true;
      if (parse_metadata(path, j, out, err, errlen) < 0) return -1;
      continue;
    }
    if (rt_names_find(&out->index, (const char *const *)out->names, name) >= 0)
      return rt_fail(err, errlen, "%s: tensor '%s' appears twice in the header", path, name);
    Entry *e = &es[out->n];
    e->name = name;
    e->index = out->n;
    if (parse_entry(path, j, data_size, &out->tensors[out->n], e, err, errlen) < 0) return -1;
    out->names[out->n] = strdup(name);
    if (!out->names[out->n]) return rt_fail(err, errlen, "%s: out of memory", path);
    rt_names_add(&out->index, (const char *const *)out->names, out->n++);
  }
  qsort(es, (size_t)out->n, sizeof *es, by_begin);
  /* Empty tensors occupy nothing and overlap nothing. */
  int prev = -1;
  for (int i = 0; i < out->n; i++) {
    if (es[i].begin == es[i].end) continue;
    if (prev >= 0 && es[prev].end > es[i].begin)
      return rt_fail(err, errlen, "%s: tensors '%s' and '%s' overlap in the data", path, es[prev].name,
                  es[i].name);
    prev = i;
  }
  return 0;
}

/* Header only: out is lazy, its file open, each tensor's begin kept;
 * with entries, they are handed back (sorted by begin) for the caller
 * to free. */
static int open_set(const char *path, int flags, RtTensorSet *out, Entry **entries_out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  char why[256];
  int64_t size;
  int fd = rt_open_regular(path, flags, &size, why, sizeof why);
  if (fd < 0) return rt_fail(err, errlen, "%s: %s", path, why);
  int rc = -1;
  char *text = NULL;
  cJSON *root = NULL;
  Entry *entries = NULL;
  unsigned char pre[8];
  if (size < 8 || rt_read_at(fd, pre, 8, 0) != 0) {
    rt_fail(err, errlen, "%s: too short for a safetensors file (%" PRId64 " bytes)", path, size);
    goto done;
  }
  uint64_t hsize = 0;
  for (int i = 0; i < 8; i++) hsize |= (uint64_t)pre[i] << (8 * i);
  /* Other formats only where these bytes cannot be a safetensors header
   * size, so no safetensors file is ever taken for one: a zip's local
   * header (torch.save's, torchfile.c), or the pickled magic number of
   * torch.save's format before 1.6. */
  if (hsize > (uint64_t)(size - 8) && memcmp(pre, "PK\3\4", 4) == 0) {
    close(fd);
    return rt_torch_read(path, flags, out, err, errlen);
  }
  if (hsize > (uint64_t)(size - 8) && memcmp(pre, "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46", 8) == 0) {
    rt_fail(err, errlen, "%s: a torch.save file in the format before PyTorch 1.6 (a bare pickle): save it again with "
         "torch.save(torch.load(PATH), PATH) under a current PyTorch, or as safetensors", path);
    goto done;
  }
  if (hsize > (uint64_t)(size - 8)) {
    rt_fail(err, errlen, "%s: header size %" PRIu64 " is larger than the file (%" PRId64 " bytes)", path,
         hsize, size);
    goto done;
  }
  if (hsize > MAX_HEADER) {
    rt_fail(err, errlen, "%s: header size %" PRIu64 " is more than 100 MB", path, hsize);
    goto done;
  }
  text = malloc((size_t)hsize + 1);
  if (!text || rt_read_at(fd, text, (size_t)hsize, 8) != 0) {
    rt_fail(err, errlen, "%s: %s", path, text ? "could not read the header" : "out of memory");
    goto done;
  }
  text[hsize] = 0;
  const char *end = NULL;
  root = cJSON_ParseWithLengthOpts(text, (size_t)hsize, &end, 0);
  /* Writers pad the header with spaces; anything else after it is junk. */
  while (root && end < text + hsize && (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r'))
    end++;
  if (!root || end != text + hsize) {
    rt_fail(err, errlen, "%s: the header is not valid JSON", path);
    goto done;
  }
  int64_t data_start = 8 + (int64_t)hsize, data_size = size - data_start;
  if (parse_header(path, root, data_size, out, &entries, err, errlen) < 0) goto done;
  out->begins = calloc((size_t)out->n + 1, sizeof *out->begins);
  out->path = strdup(path);
  if (!out->begins || !out->path) {
    rt_fail(err, errlen, "%s: out of memory", path);
    goto done;
  }
  for (int k = 0; k < out->n; k++) out->begins[entries[k].index] = data_start + entries[k].begin;
  out->lazy = true;
  out->fd = fd;
  rc = 0;
done:
  if (rc < 0) close(fd);
  free(text);
  cJSON_Delete(root);
  if (rc < 0) rt_tensor_set_free(out);
  if (rc == 0 && entries_out) *entries_out = entries;
  else free(entries);
  return rc;
}

/* ---- a sharded checkpoint's index ---- */

static bool is_index(const char *path) {
  size_t n = strlen(path);
  return n >= 5 && strcmp(path + n - 5, ".json") == 0;
}

/* A shard's name from an index: a bare file name, so the shard is in the
 * index's folder and nowhere else. */
static bool bare_name(const char *s) {
  return *s && strlen(s) < 256 && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* The index's JSON root (cJSON_Delete it), or NULL after a message. */
static cJSON *read_index(const char *path, char *err, size_t errlen) {
  char why[256];
  int64_t size;
  int fd = rt_open_regular(path, 0, &size, why, sizeof why);
  if (fd < 0) return rt_fail(err, errlen, "%s: %s", path, why), NULL;
  char *text = size <= MAX_HEADER ? malloc((size_t)size + 1) : NULL;
  cJSON *root = NULL;
  if (!text)
    rt_fail(err, errlen, "%s: %s", path, size > MAX_HEADER ? "an index of more than 100 MB" : "out of memory");
  else if (rt_read_at(fd, text, (size_t)size, 0) != 0)
    rt_fail(err, errlen, "%s: could not read the index", path);
  else if (!(root = cJSON_ParseWithLength(text, (size_t)size)))
    rt_fail(err, errlen, "%s: the index is not valid JSON", path);
  close(fd);
  free(text);
  return root;
}

/* Moves part's tensors (shard k's) to the end of out, and its file. */
static void take_shard(RtTensorSet *out, RtTensorSet *part, int k) {
  for (int i = 0; i < part->n; i++, out->n++) {
    out->names[out->n] = part->names[i];
    out->tensors[out->n] = part->tensors[i];
    out->begins[out->n] = part->lazy ? part->begins[i] : 0;
    out->file_of[out->n] = part->lazy ? k : -1;
    part->names[i] = NULL;
    part->tensors[i].data = NULL;
  }
  if (part->lazy) out->fds[k] = part->fd, out->lazy = true;
  part->lazy = false; /* its file is out's now */
  rt_tensor_set_free(part);
}

static int open_index(const char *path, RtTensorSet *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  out->fd = -1;
  cJSON *root = read_index(path, err, errlen);
  if (!root) return -1;
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  RtTensorSet *parts = NULL;
  const char **shards = NULL;
  RtNames shard_index = {0};
  int n_shards = 0, rc = -1;
  if (!cJSON_IsObject(map)) {
    rt_fail(err, errlen, "%s: no \"weight_map\" object: not a sharded checkpoint's index", path);
    goto done;
  }
  int n_map = cJSON_GetArraySize(map);
  shards = calloc((size_t)n_map + 1, sizeof *shards);
  parts = calloc((size_t)n_map + 1, sizeof *parts);
  if (!shards || !parts || rt_names_init(&shard_index, n_map) < 0) {
    rt_fail(err, errlen, "%s: out of memory", path);
    goto done;
  }
  /* the shards in order of first mention */
  for (const cJSON *e = map->child; e; e = e->next) {
    if (!cJSON_IsString(e) || !bare_name(e->valuestring)) {
      rt_fail(err, errlen, "%s: tensor '%s': its shard must be a file name in the index's folder", path, e->string);
      goto done;
    }
    shards[n_shards] = e->valuestring;
    if (rt_names_add(&shard_index, shards, n_shards) < 0) n_shards++;
  }
  const char *slash = strrchr(path, '/');
  int dir_len = slash ? (int)(slash - path) + 1 : 0;
  int64_t total = 0;
  for (int k = 0; k < n_shards; k++) {
    char shard[4096];
    if (snprintf(shard, sizeof shard, "%.*s%s", dir_len, path, shards[k]) >= (int)sizeof shard) {
      rt_fail(err, errlen, "%s: shard %s: the path is too long", path, shards[k]);
      goto done;
    }
    if (open_set(shard, RT_NOFOLLOW, &parts[k], NULL, err, errlen) < 0) goto done;
    total += parts[k].n;
  }
  out->names = calloc((size_t)total + 1, sizeof *out->names);
  out->tensors = calloc((size_t)total + 1, sizeof *out->tensors);
  out->begins = calloc((size_t)total + 1, sizeof *out->begins);
  out->file_of = calloc((size_t)total + 1, sizeof *out->file_of);
  out->fds = malloc(((size_t)n_shards + 1) * sizeof *out->fds);
  out->path = strdup(path);
  if (total > INT_MAX || !out->names || !out->tensors || !out->begins || !out->file_of || !out->fds || !out->path ||
      rt_names_init(&out->index, (int)total) < 0) {
    rt_fail(err, errlen, "%s: out of memory", path);
    goto done;
  }
  out->n_files = n_shards;
  for (int k = 0; k < n_shards; k++) out->fds[k] = -1;
  int *shard_of = calloc((size_t)total + 1, sizeof *shard_of);
  if (!shard_of) {
    rt_fail(err, errlen, "%s: out of memory", path);
    goto done;
  }
  bool bad = false;
  for (int k = 0; k < n_shards && !bad; k++) {
    int first = out->n;
    take_shard(out, &parts[k], k);
    for (int i = first; i < out->n && !bad; i++) {
      shard_of[i] = k;
      if ((bad = rt_names_add(&out->index, (const char *const *)out->names, i) >= 0))
        rt_fail(err, errlen, "%s: tensor '%s' is in two shards (one is %s)", path, out->names[i], shards[k]);
    }
  }
  /* every tensor the map names, in the shard it names */
  for (const cJSON *e = map->child; e && !bad; e = e->next) {
    int i = rt_names_find(&out->index, (const char *const *)out->names, e->string);
    if ((bad = i < 0 || shard_of[i] != rt_names_find(&shard_index, shards, e->valuestring)))
      rt_fail(err, errlen, "%s: the index puts tensor '%s' in %s, which lacks it", path, e->string, e->valuestring);
  }
  free(shard_of);
  rc = bad ? -1 : 0;
done:
  for (int k = 0; k < n_shards; k++) rt_tensor_set_free(&parts[k]);
  free(parts);
  free(shards);
  rt_names_free(&shard_index);
  cJSON_Delete(root);
  if (rc < 0) rt_tensor_set_free(out);
  return rc;
}

int rt_safetensors_open(const char *path, RtTensorSet *out, char *err, size_t errlen) {
  if (is_index(path)) return open_index(path, out, err, errlen);
  return open_set(path, 0, out, NULL, err, errlen);
}

int rt_safetensors_load(RtTensorSet *s, int i, char *err, size_t errlen) {
  RtTensor *t = &s->tensors[i];
  if (t->data || !s->lazy) return 0;
  /* Every entry lies inside the data (parse_entry), so nothing is
   * allocated beyond the file's size. */
  t->data = malloc(t->nbytes ? t->nbytes : 1);
  if (!t->data)
    return rt_fail(err, errlen, "%s: tensor '%s': out of memory for %zu bytes", s->path, s->names[i], t->nbytes);
  int fd = !s->file_of ? s->fd : s->file_of[i] >= 0 ? s->fds[s->file_of[i]] : -1; /* -1: a shard read whole */
  if (t->nbytes && (fd < 0 || rt_read_at(fd, t->data, t->nbytes, s->begins[i]) != 0)) {
    free(t->data);
    t->data = NULL;
    return rt_fail(err, errlen, "%s: tensor '%s': could not read its data", s->path, s->names[i]);
  }
  return 0;
}

int rt_safetensors_read(const char *path, RtTensorSet *out, char *err, size_t errlen) {
  if (is_index(path)) { /* shard by shard, each in its order */
    if (open_index(path, out, err, errlen) < 0) return -1;
    for (int i = 0; i < out->n; i++)
      if (rt_safetensors_load(out, i, err, errlen) < 0) {
        rt_tensor_set_free(out);
        return -1;
      }
    for (int k = 0; k < out->n_files; k++)
      if (out->fds[k] >= 0) close(out->fds[k]), out->fds[k] = -1;
    out->lazy = false;
    return 0;
  }
  Entry *entries = NULL;
  if (open_set(path, 0, out, &entries, err, errlen) < 0) return -1;
  if (!out->lazy) return 0; /* a torch.save file, read whole */
  /* In file order, so the reads run forward. */
  int rc = 0;
  for (int k = 0; rc == 0 && k < out->n; k++) rc = rt_safetensors_load(out, entries[k].index, err, errlen);
  free(entries);
  close(out->fd);
  out->lazy = false;
  if (rc < 0) rt_tensor_set_free(out);
  return rc;
}

int rt_safetensors_write(const char *path, const RtTensorSet *set, char *err, size_t errlen) {
  cJSON *root = cJSON_CreateObject();
  char *json = NULL, *tmp = NULL;
  FILE *f = NULL;
  int rc = -1;
  RtNames seen;
  if (!root || rt_names_init(&seen, set->n) < 0) {
    cJSON_Delete(root);
    return rt_fail(err, errlen, "%s: out of memory", path);
  }
  if (set->n_meta > 0) {
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    for (int i = 0; meta && i < set->n_meta; i++)
      if (!cJSON_AddStringToObject(meta, set->meta_keys[i], set->meta_values[i])) meta = NULL;
    if (!meta) {
      rt_fail(err, errlen, "%s: out of memory", path);
      goto done;
    }
  }
  int64_t offset = 0;
  for (int i = 0; i < set->n; i++) {
    const RtTensor *t = &set->tensors[i];
    const char *name = set->names[i];
    if (strcmp(name, "__metadata__") == 0) {
      rt_fail(err, errlen, "%s: a tensor cannot be named '__metadata__'", path);
      goto done;
    }
    if (rt_names_add(&seen, (const char *const *)set->names, i) >= 0) {
      rt_fail(err, errlen, "%s: tensor '%s' is given twice", path, name);
      goto done;
    }
    int64_t n = (unsigned)t->dtype < RT_DTYPE_COUNT && t->rank >= 0 && t->rank <= RT_MAX_RANK
                    ? rt_numel(t)
                    : -1;
    if (n < 0 || (size_t)n * (size_t)rt_dtype_size(t->dtype) != t->nbytes) {
      rt_fail(err, errlen, "%s: tensor '%s': its dtype, shape and byte count do not agree", path, name);
      goto done;
    }
    cJSON *e = cJSON_AddObjectToObject(root, name);
    cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
    cJSON *offs = shape ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
    bool ok = offs && cJSON_AddStringToObject(e, "dtype", st_names[t->dtype]);
    for (int d = 0; ok && d < t->rank; d++) {
      cJSON *v = cJSON_CreateNumber((double)t->dims[d]);
      ok = v && cJSON_AddItemToArray(shape, v);
    }
    cJSON *b = ok ? cJSON_CreateNumber((double)offset) : NULL;
    ok = b && cJSON_AddItemToArray(offs, b);
    offset += (int64_t)t->nbytes;
    cJSON *en = ok ? cJSON_CreateNumber((double)offset) : NULL;
    ok = en && cJSON_AddItemToArray(offs, en);
    if (!ok) {
      rt_fail(err, errlen, "%s: out of memory", path);
      goto done;
    }
  }
  json = cJSON_PrintUnformatted(root);
  if (!json) {
    rt_fail(err, errlen, "%s: out of memory", path);
    goto done;
  }
  size_t len = strlen(json), padded = (len + 7) / 8 * 8;
  /* A regular file is written beside the target and renamed over it once
   * complete, so a crash or a full disk mid-write never leaves a torn
   * checkpoint where the last good one was.  A link is written through
   * (renaming would replace the link, not what it names), as is anything
   * not a regular file (a pipe, a device). */
  struct stat st;
  bool in_place = lstat(path, &st) == 0 && !S_ISREG(st.st_mode);
  if (!in_place) {
    size_t tlen = strlen(path) + 32;
    if (!(tmp = malloc(tlen))) {
      rt_fail(err, errlen, "%s: out of memory", path);
      goto done;
    }
    snprintf(tmp, tlen, "%s.tmp-%ld", path, (long)getpid());
  }
  f = fopen(in_place ? path : tmp, "wb");
  if (!f) {
    rt_fail(err, errlen, "%s: %s", in_place ? path : tmp, strerror(errno));
    free(tmp);
    tmp = NULL;
    goto done;
  }
  unsigned char pre[8];
  for (int i = 0; i < 8; i++) pre[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  bool ok = fwrite(pre, 1, 8, f) == 8 && fwrite(json, 1, len, f) == len;
  for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
  for (int i = 0; ok && i < set->n; i++)
    ok = set->tensors[i].nbytes == 0 ||
         fwrite(set->tensors[i].data, 1, set->tensors[i].nbytes, f) == set->tensors[i].nbytes;
  ok = ok && fflush(f) == 0 && (in_place || fsync(fileno(f)) == 0);
  int closed = fclose(f);
  f = NULL;
  if (!ok || closed != 0) {
    rt_fail(err, errlen, "%s: write failed: %s", path, strerror(errno));
    goto done;
  }
  if (tmp && rename(tmp, path) != 0) {
    rt_fail(err, errlen, "%s: cannot replace it: %s", path, strerror(errno));
    goto done;
  }
  free(tmp);
  tmp = NULL;
  rc = 0;
done:
  if (f) fclose(f);
  if (tmp) {
    unlink(tmp);
    free(tmp);
  }
  cJSON_free(json);
  cJSON_Delete(root);
  rt_names_free(&seen);
  return rc;
}

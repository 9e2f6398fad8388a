/* dlcc train's data (train.h): a folder of .npy arrays, one per model
 * input and target.npy, samples stacked on axis 0, read whole (runtime's
 * checked reader: the files are untrusted) or, when larger than a bound,
 * streamed (the header checked the same way, each batch's rows read from
 * the file), checked against the compiled step, ordered per epoch and
 * gathered into batches. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/train.h"
#include "ir/loss.h"
#include "passes/optim.h"

static bool fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return false;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const TrainArray *)a)->name, ((const TrainArray *)b)->name);
}

static char *join(const char *dir, const char *file) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  char *p = malloc(n + strlen(file) + 2);
  if (p) sprintf(p, "%.*s/%s", (int)n, dir, file);
  return p;
}

/* The .npy names of dir into d->a (name and path only). */
static bool list_arrays(const char *dir, TrainData *d, char *err, size_t errlen) {
  DIR *dp = opendir(dir);
  if (!dp) return fail(err, errlen, "%s: %s", dir, strerror(errno));
  int cap = 0;
  bool ok = true;
  for (struct dirent *e; ok && (e = readdir(dp));) {
    size_t n = strlen(e->d_name);
    if (n <= 4 || strcmp(e->d_name + n - 4, ".npy") != 0) continue;
    if (d->n == cap) {
      cap = cap ? cap * 2 : 8;
      TrainArray *a = realloc(d->a, sizeof *a * (size_t)cap);
      if (!a) {
        ok = fail(err, errlen, "%s: out of memory", dir);
        break;
      }
      d->a = a;
    }
    TrainArray *a = &d->a[d->n];
    memset(a, 0, sizeof *a);
    a->fd = -1;
    a->name = strndup(e->d_name, n - 4);
    a->path = join(dir, e->d_name);
    if (a->name) d->n++;
    if (!a->name || !a->path) {
      free(a->path);
      ok = fail(err, errlen, "%s: out of memory", dir);
    }
  }
  closedir(dp);
  if (ok && d->n) qsort(d->a, (size_t)d->n, sizeof *d->a, by_name);
  return ok;
}

bool train_data_read(const char *dir, bool need_target, int64_t resident_max, TrainData *d, char *err,
                     size_t errlen) {
  memset(d, 0, sizeof *d);
  if (!(d->dir = strdup(dir))) return fail(err, errlen, "%s: out of memory", dir);
  if (!list_arrays(dir, d, err, errlen)) return false;
  const TrainArray *target = train_data_find(d, TRAIN_TARGET);
  if (!target && !need_target && d->n) target = &d->a[0];
  if (!target && !need_target) return fail(err, errlen, "%s: no .npy files", dir);
  if (!target) {
    char *p = join(dir, TRAIN_TARGET ".npy");
    fail(err, errlen, "%s: missing: the data folder needs the loss's target there", p ? p : dir);
    free(p);
    return false;
  }
  for (int i = 0; i < d->n; i++) {
    TrainArray *a = &d->a[i];
    bool fortran;
    int fd = rt_npy_open(a->path, &a->t, &a->data_start, &fortran, err, errlen);
    if (fd < 0) return false;
    if (resident_max == TRAIN_HEADERS_ONLY) {
      close(fd);
    } else if (resident_max >= 0 && a->t.nbytes > (uint64_t)resident_max && !(fortran && a->t.rank > 1)) {
      a->fd = fd;
    } else if (rt_npy_read_open(fd, a->path, &a->t, a->data_start, fortran, err, errlen) != 0) {
      return false; /* from the descriptor the header came from: the file checked is the file read */
    }
    if (a->t.rank < 1) return fail(err, errlen, "%s: a scalar; samples are stacked on axis 0", a->path);
    a->sample_bytes = (size_t)rt_dtype_size(a->t.dtype);
    for (int k = 1; k < a->t.rank; k++) a->sample_bytes *= (size_t)a->t.dims[k];
  }
  d->count = target->t.dims[0];
  for (int i = 0; i < d->n; i++)
    if (d->a[i].t.dims[0] != d->count)
      return fail(err, errlen, "%s has %" PRId64 " samples but %s has %" PRId64 ": the arrays disagree in length",
                  d->a[i].path, d->a[i].t.dims[0], target->path, d->count);
  if (d->count == 0) return fail(err, errlen, "%s: no samples (axis 0 is empty)", target->path);
  return true;
}

void train_data_free(TrainData *d) {
  for (int i = 0; i < d->n; i++) {
    free(d->a[i].name);
    free(d->a[i].path);
    rt_tensor_free(&d->a[i].t);
    if (d->a[i].fd >= 0) close(d->a[i].fd);
  }
  free(d->a);
  free(d->dir);
  memset(d, 0, sizeof *d);
}

const TrainArray *train_data_find(const TrainData *d, const char *name) {
  for (int i = 0; i < d->n; i++)
    if (strcmp(d->a[i].name, name) == 0) return &d->a[i];
  return NULL;
}

void train_data_shapes(const TrainData *d, int64_t batch, dlc_input_shape *shapes, int64_t *storage) {
  for (int i = 0; i < d->n; i++) {
    const RtTensor *t = &d->a[i].t;
    int64_t *dims = storage + (size_t)i * RT_MAX_RANK;
    dims[0] = batch;
    for (int k = 1; k < t->rank; k++) dims[k] = t->dims[k];
    shapes[i] = (dlc_input_shape){d->a[i].name, t->rank, dims};
  }
}

static void shape_str(const int64_t *dims, int from, int rank, char *buf, size_t n) {
  size_t len = (size_t)snprintf(buf, n, "[");
  for (int k = from; k < rank && len < n; k++)
    len += (size_t)snprintf(buf + len, n - len, "%s%" PRId64, k > from ? ", " : "", dims[k]);
  if (len < n) snprintf(buf + len, n - len, "]");
}

bool train_data_check(const TrainData *d, dlc_model *m, char *err, size_t errlen) {
  for (int i = 0; i < dlc_num_inputs(m); i++) {
    dlc_tensor_info in;
    dlc_input_info(m, i, &in);
    /* the step's own inputs: the rate, the momentum and the loss's weights */
    if (strcmp(in.name, OPTIM_LR_INPUT) == 0 || strcmp(in.name, OPTIM_MOMENTUM_INPUT) == 0 ||
        strcmp(in.name, LOSS_WEIGHT_INPUT) == 0 || strcmp(in.name, LOSS_POS_WEIGHT_INPUT) == 0)
      continue;
    const TrainArray *a = train_data_find(d, in.name);
    if (!a) {
      char file[512];
      snprintf(file, sizeof file, "%s.npy", in.name);
      char *p = join(d->dir, file);
      fail(err, errlen, "%s: missing: the model's input '%s' reads it", p ? p : file, in.name);
      free(p);
      return false;
    }
    bool fits = (int)a->t.dtype == (int)in.dtype && a->t.rank == in.rank;
    for (int k = 1; fits && k < in.rank; k++) fits = a->t.dims[k] == in.dims[k];
    if (!fits) {
      char want[160], got[160];
      shape_str(in.dims, 1, in.rank, want, sizeof want);
      shape_str(a->t.dims, 1, a->t.rank, got, sizeof got);
      return fail(err, errlen, "%s: samples of %s %s, but the model's input '%s' takes %s %s per sample", a->path,
                  rt_dtype_name(a->t.dtype), got, in.name, dlc_dtype_name(in.dtype), want);
    }
  }
  for (int i = 0; i < d->n; i++)
    if (dlc_input_index(m, d->a[i].name) < 0)
      return fail(err, errlen, "%s: the model has no input '%s'", d->a[i].path, d->a[i].name);
  return true;
}

bool train_data_check_classes(const TrainData *d, int64_t classes, int64_t ignore_index, char *err,
                              size_t errlen) {
  const TrainArray *a = train_data_find(d, TRAIN_TARGET);
  if (!a || (a->t.dtype != RT_I64 && a->t.dtype != RT_I32)) return true; /* probabilities */
  size_t size = (size_t)rt_dtype_size(a->t.dtype);
  int64_t per = (int64_t)(a->sample_bytes / size), total = d->count * per;
  /* a streamed target in pieces: memory stays bounded when the target
   * is larger than it */
  enum { CHUNK = 1 << 17 };
  int64_t *chunk = a->fd >= 0 ? malloc(CHUNK * sizeof *chunk) : NULL;
  if (a->fd >= 0 && !chunk) return fail(err, errlen, "%s: out of memory", a->path);
  bool ok = true;
  for (int64_t at = 0; ok && at < total; at += CHUNK) {
    int64_t n = total - at < CHUNK ? total - at : CHUNK;
    if (chunk && rt_read_at(a->fd, chunk, (size_t)n * size, a->data_start + at * (int64_t)size) != 0) {
      ok = fail(err, errlen, "%s: cannot read the data: %s", a->path, errno ? strerror(errno) : "the file shrank");
      break;
    }
    const unsigned char *src = chunk ? (const unsigned char *)chunk : (const unsigned char *)a->t.data + (size_t)at * size;
    for (int64_t i = 0; ok && i < n; i++) {
      int64_t v = a->t.dtype == RT_I64 ? ((const int64_t *)src)[i] : ((const int32_t *)src)[i];
      if ((v < 0 || v >= classes) && v != ignore_index)
        ok = fail(err, errlen,
                  "%s: sample %" PRId64 " has class %" PRId64 ", outside [0, %" PRId64 ") of the model's %" PRId64
                  " classes (and not the ignore_index %" PRId64 ")",
                  a->path, (at + i) / per, v, classes, classes, ignore_index);
    }
  }
  free(chunk);
  return ok;
}

/* splitmix64 (Steele, Lea and Flood, 2014): the shuffle's generator. */
static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

void train_data_order(int64_t count, bool shuffle, uint64_t seed, int64_t epoch, int64_t *order) {
  for (int64_t i = 0; i < count; i++) order[i] = i;
  if (!shuffle) return;
  uint64_t s = seed + (uint64_t)epoch;
  for (int64_t i = count - 1; i > 0; i--) {
    int64_t j = (int64_t)(splitmix64(&s) % (uint64_t)(i + 1));
    int64_t tmp = order[i];
    order[i] = order[j];
    order[j] = tmp;
  }
}

bool train_data_gather(const TrainArray *a, const int64_t *order, int64_t n, int64_t pad, void *dst, char *err,
                       size_t errlen) {
  char *out = dst;
  const char *src = a->t.data;
  int64_t rows = n > pad ? n : pad;
  for (int64_t i = 0; i < rows;) {
    int64_t first = order[i < n ? i : 0], run = 1;
    /* consecutive samples (an unshuffled epoch) in one read */
    while (a->fd >= 0 && i + run < n && order[i + run] == first + run) run++;
    size_t bytes = (size_t)run * a->sample_bytes;
    if (a->fd < 0)
      memcpy(out, src + (size_t)first * a->sample_bytes, bytes);
    else if (rt_read_at(a->fd, out, bytes, a->data_start + first * (int64_t)a->sample_bytes) != 0)
      return fail(err, errlen, "%s: cannot read samples %" PRId64 "..%" PRId64 ": %s", a->path, first,
                  first + run - 1, errno ? strerror(errno) : "the file shrank");
    out += bytes, i += run;
  }
  return true;
}

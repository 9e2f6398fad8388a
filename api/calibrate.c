/* int8 calibration (calibrate.h): lists the sample folder, checks every
 * sample against its input, evaluates the graph on each (the reference
 * interpreter, or the compiled copy of calib_device.h) with an observer
 * that feeds one |x| histogram per requested value, then lets the method
 * pick each value's range from its histogram.  Samples are read one at a
 * time, so a folder may hold more than fits in memory at once.  A folder
 * may come from anyone: each *.npy in it must be a regular file (or a
 * symlink to one), else listing it is an error that names it. */
#include "api/calibrate.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/calib_device.h"
#include "api/weights.h"
#include "ir/ir.h"
#include "ir/names.h"
#include "runtime/tensorio.h"

/* ---- methods ---- */

CalibMethod api_calib_default_method(void) {
  return (CalibMethod){CALIB_PERCENTILE, CALIB_DEFAULT_PERCENTILE};
}

bool api_calib_parse_method(const char *text, CalibMethod *out, char *err, size_t errlen) {
  if (strcmp(text, "minmax") == 0) {
    *out = (CalibMethod){CALIB_MINMAX, 0};
    return true;
  }
  if (strcmp(text, "entropy") == 0) {
    *out = (CalibMethod){CALIB_ENTROPY, 0};
    return true;
  }
  if (strcmp(text, "percentile") == 0) {
    *out = (CalibMethod){CALIB_PERCENTILE, CALIB_DEFAULT_PERCENTILE};
    return true;
  }
  if (strncmp(text, "percentile=", 11) == 0) {
    const char *p = text + 11;
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (*end || end == p || errno || !(v > 0 && v <= 100)) {
      snprintf(err, errlen, "percentile=P needs P above 0 and at most 100, got '%s'", p);
      return false;
    }
    *out = (CalibMethod){CALIB_PERCENTILE, v};
    return true;
  }
  snprintf(err, errlen,
           "unknown calibration method '%s' (expected minmax, percentile, percentile=P or entropy)", text);
  return false;
}

bool api_calib_parse_backend(const char *text, CalibBackend *out, char *err, size_t errlen) {
  static const struct {
    const char *name;
    CalibBackend backend;
  } names[] = {{"ref", CALIB_ON_REF}, {"auto", CALIB_ON_AUTO}, {"emu", CALIB_ON_EMU}, {"cuda", CALIB_ON_CUDA}};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (strcmp(text, names[i].name) == 0) {
      *out = names[i].backend;
      return true;
    }
  snprintf(err, errlen, "unknown calibration backend '%s' (expected auto, cuda, emu or ref)", text);
  return false;
}

/* ---- the histogram ---- */

void api_calib_hist_init(CalibHist *h) { memset(h, 0, sizeof *h); }

/* Half the resolution, twice the range: bins 2k and 2k+1 become bin k. */
static void hist_double(CalibHist *h) {
  for (int i = 0; i < CALIB_BINS / 2; i++) h->counts[i] = h->counts[2 * i] + h->counts[2 * i + 1];
  memset(h->counts + CALIB_BINS / 2, 0, sizeof h->counts / 2);
  h->width *= 2;
}

/* Makes the range hold m: the first nonzero m sets it exactly, later
 * ones double it as often as needed. */
static void hist_grow(CalibHist *h, double m) {
  if (m == 0) return;
  if (h->width == 0) {
    h->width = m / CALIB_BINS;
    return;
  }
  while (m > h->width * CALIB_BINS) hist_double(h);
}

/* The largest |x| of t, or -1 - i for the first non-finite element i. */
static double tensor_absmax(const Tensor *t, int64_t n) {
  double m = 0;
  if (t->type.dtype == TY_F32) {
    const float *x = t->data;
    for (int64_t i = 0; i < n; i++) {
      float a = fabsf(x[i]);
      if (!isfinite(a)) return -1.0 - (double)i;
      if (a > m) m = a;
    }
    return m;
  }
  for (int64_t i = 0; i < n; i++) {
    double a = fabs(ir_tensor_get(t, i));
    if (!isfinite(a)) return -1.0 - (double)i;
    if (a > m) m = a;
  }
  return m;
}

static void hist_count(CalibHist *h, double a) {
  double b = h->width > 0 ? a / h->width : 0;
  h->counts[b >= CALIB_BINS - 1 ? CALIB_BINS - 1 : (int)b]++;
}

int64_t api_calib_hist_add(CalibHist *h, const Tensor *t) {
  int64_t n = ir_type_numel(&t->type);
  double m = tensor_absmax(t, n);
  if (m < 0) return (int64_t)(-1.0 - m);
  hist_grow(h, m);
  if (m > h->max) h->max = m;
  if (t->type.dtype == TY_F32) {
    const float *x = t->data;
    for (int64_t i = 0; i < n; i++) hist_count(h, fabsf(x[i]));
  } else {
    for (int64_t i = 0; i < n; i++) hist_count(h, fabs(ir_tensor_get(t, i)));
  }
  h->total += n;
  return -1;
}

/* The upper edge of the first bin where the cumulative count reaches p%
 * of all values. */
static double percentile_amax(const CalibHist *h, double p) {
  double target = p / 100.0 * (double)h->total;
  int64_t cum = 0;
  for (int i = 0; i < CALIB_BINS; i++) {
    cum += h->counts[i];
    if ((double)cum >= target) return fmin((i + 1) * h->width, h->max);
  }
  return h->max;
}

/* KL(P || Q) for clipping at the edge of bin i, as TensorRT's
 * calibrator computes it (Migacz 2017; pytorch-quantization's
 * _compute_amax_entropy).  P is bins [0, i) with every count beyond
 * folded into bin i-1, as clipping puts them there.  Q is bins [0, i)
 * without those outliers, merged into CALIB_LEVELS levels of i/LEVELS
 * bins each (bin j in level j*LEVELS/i) and expanded back, each level's
 * count spread evenly over its nonzero bins.  Both are normalized.
 * Infinite where P has mass and Q none: a threshold at an empty bin with
 * outliers beyond it. */
static double clip_divergence(const int64_t *c, int i, int64_t outliers, int64_t total) {
  double level_sum[CALIB_LEVELS] = {0};
  int level_bins[CALIB_LEVELS] = {0};
  double q_total = 0;
  for (int j = 0; j < i; j++)
    if (c[j]) {
      int level = (int)((int64_t)j * CALIB_LEVELS / i);
      level_sum[level] += (double)c[j];
      level_bins[level]++;
      q_total += (double)c[j];
    }
  double kl = 0;
  for (int j = 0; j < i; j++) {
    double p = (double)c[j] + (j == i - 1 ? (double)outliers : 0);
    if (p == 0) continue;
    if (!c[j]) return INFINITY;
    int level = (int)((int64_t)j * CALIB_LEVELS / i);
    double q = level_sum[level] / level_bins[level] / q_total;
    p /= (double)total;
    kl += p * log(p / q);
  }
  return kl;
}

/* The threshold of least divergence over every bin edge from
 * CALIB_LEVELS to CALIB_BINS; among equals the largest, which clips
 * least.  As TensorRT does, bin 0 counts as bin 1 does: the exact zeros
 * a relu makes would otherwise outweigh everything else. */
static double entropy_amax(const CalibHist *h) {
  int64_t c[CALIB_BINS], total = 0;
  memcpy(c, h->counts, sizeof c);
  c[0] = c[1];
  for (int j = 0; j < CALIB_BINS; j++) total += c[j];
  int64_t outliers = 0;
  int best_i = CALIB_BINS;
  double best = INFINITY;
  for (int i = CALIB_BINS; i >= CALIB_LEVELS; i--) {
    if (i < CALIB_BINS) outliers += c[i];
    double d = clip_divergence(c, i, outliers, total);
    if (d < best) {
      best = d;
      best_i = i;
    }
  }
  return fmin(best_i * h->width, h->max);
}

double api_calib_hist_amax(const CalibHist *h, const CalibMethod *m) {
  if (h->max == 0) return 0;
  switch (m->kind) {
    case CALIB_MINMAX: return h->max;
    case CALIB_PERCENTILE: return percentile_amax(h, m->percentile);
    case CALIB_ENTROPY: return entropy_amax(h);
  }
  return h->max;
}

/* ---- the folder ---- */

/* One input's samples: full paths in name order, in the arena. */
typedef struct SampleSet {
  const char *input;
  const TensorType *type;
  const char *folder;
  int n;
  char **files;
} SampleSet;

typedef enum { PATH_MISSING, PATH_FILE, PATH_FOLDER, PATH_UNREADABLE } PathKind;

static PathKind path_kind(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return errno == ENOENT || errno == ENOTDIR ? PATH_MISSING : PATH_UNREADABLE;
  return S_ISDIR(st.st_mode) ? PATH_FOLDER : PATH_FILE;
}

static bool has_npy_suffix(const char *name) {
  size_t n = strlen(name);
  return n >= 5 && strcmp(name + n - 4, ".npy") == 0;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether the entry path, named *.npy, is a sample: a regular file, or a
 * symlink to one (a warning when it leads out of the folder, whose
 * resolved path is real; NULL when unknown).  Anything else is an error
 * naming it: a FIFO would block the reader, a dangling link or a folder
 * is no sample, and none of them may pass in silence. */
static bool is_sample(Ctx *c, const char *path, const char *real) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    diag_error(c, (SrcLoc){0}, "cannot read calibration sample %s: %s", path, strerror(errno));
    return false;
  }
  if (S_ISREG(st.st_mode)) return true;
  if (!S_ISLNK(st.st_mode)) {
    diag_error(c, (SrcLoc){0}, "calibration sample %s is %s, not a regular file", path,
               rt_file_kind(st.st_mode));
    return false;
  }
  char to[4096];
  ssize_t n = readlink(path, to, sizeof to - 1);
  to[n > 0 ? n : 0] = 0;
  if (stat(path, &st) != 0) {
    diag_error(c, (SrcLoc){0}, "calibration sample %s is a dangling symbolic link (to '%s')", path, to);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    diag_error(c, (SrcLoc){0}, "calibration sample %s is a symbolic link to %s, not a regular file", path,
               rt_file_kind(st.st_mode));
    return false;
  }
  char *target = realpath(path, NULL);
  size_t k = real ? strlen(real) : 0;
  if (target && real && !(strncmp(target, real, k) == 0 && target[k] == '/'))
    diag_warning(c, (SrcLoc){0}, "calibration sample %s is a symbolic link to %s, outside the folder", path,
                 target);
  free(target);
  return true;
}

/* folder's .npy files, sorted by name.  False when it cannot be read
 * (errno says why, errors stays 0) or after reporting each entry that is
 * not a sample (*errors of them). */
static void close_dir(void *d) { closedir(d); }

static bool list_npy(Ctx *c, const char *folder, SampleSet *s, int *errors) {
  Arena *a = &c->arena;
  *errors = 0;
  DIR *d = opendir(folder);
  if (!d) return false;
  /* The arena allocates while these are open: a failure unwinds past them. */
  ctx_hold_with(c, close_dir, d);
  char *real = realpath(folder, NULL);
  if (real) ctx_hold(c, real);
  int cap = 16;
  s->n = 0;
  s->files = ARENA_ARRAY(a, char *, cap);
  for (struct dirent *e; (e = readdir(d));) {
    if (!has_npy_suffix(e->d_name)) continue;
    if (!is_sample(c, arena_printf(a, "%s/%s", folder, e->d_name), real)) {
      ++*errors;
      continue;
    }
    if (s->n == cap) {
      s->files = arena_realloc(a, s->files, sizeof(char *) * (size_t)cap, sizeof(char *) * (size_t)cap * 2);
      cap *= 2;
    }
    s->files[s->n++] = arena_strdup(a, e->d_name);
  }
  ctx_release(c, d);
  closedir(d);
  if (real) ctx_release(c, real);
  free(real);
  if (*errors) return false;
  qsort(s->files, (size_t)s->n, sizeof *s->files, compare_names);
  for (int i = 0; i < s->n; i++) s->files[i] = arena_printf(a, "%s/%s", folder, s->files[i]);
  s->folder = folder;
  return true;
}

/* dir without trailing slashes, so that joined paths read cleanly. */
static const char *trim_slashes(Arena *a, const char *dir) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  return arena_strndup(a, dir, n);
}

static bool check_folder(Ctx *c, const char *dir) {
  switch (path_kind(dir)) {
    case PATH_FOLDER: return true;
    case PATH_MISSING: diag_error(c, (SrcLoc){0}, "calibration folder %s does not exist", dir); break;
    case PATH_FILE: diag_error(c, (SrcLoc){0}, "calibration folder %s is not a folder", dir); break;
    case PATH_UNREADABLE:
      diag_error(c, (SrcLoc){0}, "cannot read calibration folder %s: %s", dir, strerror(errno));
      break;
  }
  return false;
}

static bool list_or_report(Ctx *c, const char *folder, SampleSet *s) {
  int errors;
  if (list_npy(c, folder, s, &errors)) return true;
  if (!errors) diag_error(c, (SrcLoc){0}, "cannot read calibration folder %s: %s", folder, strerror(errno));
  return false;
}

/* dir/<input>: the input's name as a file name (docs/names.md), so that
 * a model's name cannot lead outside dir. */
static const char *input_folder(Ctx *c, const char *dir, const char *input) {
  SafeName n;
  ir_name_file(input, &n);
  return arena_printf(&c->arena, "%s/%s", dir, n.s);
}

/* One input: dir's .npy files, or those of dir/<input> when dir has none. */
static bool find_single(Ctx *c, const char *dir, SampleSet *s) {
  if (!list_or_report(c, dir, s)) return false;
  if (s->n) return true;
  const char *sub = input_folder(c, dir, s->input);
  if (path_kind(sub) == PATH_FOLDER) {
    if (!list_or_report(c, sub, s)) return false;
    if (s->n) return true;
  }
  diag_error(c, (SrcLoc){0}, "calibration folder %s has no .npy files", dir);
  return false;
}

/* Several inputs: dir/<input>'s .npy files for each, as many in each. */
static bool find_several(Ctx *c, const char *dir, int n, SampleSet *sets) {
  for (int i = 0; i < n; i++) {
    const char *sub = input_folder(c, dir, sets[i].input);
    if (path_kind(sub) != PATH_FOLDER) {
      diag_error(c, (SrcLoc){0},
                 "calibration folder %s has no folder '%s' for input '%s' (a model with several "
                 "inputs reads DIR/<input name>/*.npy)",
                 dir, strrchr(sub, '/') + 1, sets[i].input);
      return false;
    }
    if (!list_or_report(c, sub, &sets[i])) return false;
    if (!sets[i].n) {
      diag_error(c, (SrcLoc){0}, "calibration folder %s has no .npy files", sub);
      return false;
    }
  }
  for (int i = 1; i < n; i++)
    if (sets[i].n != sets[0].n) {
      diag_error(c, (SrcLoc){0},
                 "calibration folder %s: %s has %d samples but %s has %d: each input needs one file "
                 "per sample",
                 dir, sets[0].folder, sets[0].n, sets[i].folder, sets[i].n);
      return false;
    }
  return true;
}

/* The model's inputs, each with its samples; NULL after reporting. */
static SampleSet *find_samples(Ctx *c, Graph *g, const char *dir, int *n_sets) {
  int n = 0;
  for (Node *node = g->first; node; node = node->next) n += node->op == OP_INPUT;
  SampleSet *sets = ARENA_ARRAY(&c->arena, SampleSet, n > 0 ? n : 1);
  n = 0;
  for (Node *node = g->first; node; node = node->next)
    if (node->op == OP_INPUT)
      sets[n++] = (SampleSet){.input = ir_attr_str(node, "name"), .type = &node->out[0].type};
  *n_sets = n;
  if (!check_folder(c, dir)) return NULL;
  if (n == 0) return sets;
  bool ok = n == 1 ? find_single(c, dir, &sets[0]) : find_several(c, dir, n, sets);
  return ok ? sets : NULL;
}

/* ---- one sample ---- */

/* The samples of a folder, one loaded at a time. */
struct ApiSamples {
  Ctx *c;
  int n_sets, n;
  SampleSet *sets;
  const char **names;
  Tensor *tensors;
  RtTensor *raw;
};

static void rt_type_text(const RtTensor *t, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "%s[", rt_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i ? ", " : "", t->dims[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
}

static bool same_type(const RtTensor *t, const TensorType *want) {
  if ((int)t->dtype != (int)want->dtype || t->rank != want->rank) return false;
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] != want->dims[i]) return false;
  return true;
}

/* NaN or an infinity in a float sample: reported by element. */
static bool check_finite(Ctx *c, const char *path, const Tensor *t) {
  if (!ir_dtype_is_float(t->type.dtype)) return true;
  int64_t n = ir_type_numel(&t->type);
  for (int64_t i = 0; i < n; i++) {
    double v = ir_tensor_get(t, i);
    if (isfinite(v)) continue;
    diag_error(c, (SrcLoc){0}, "%s: element %" PRId64 " is %s: calibration needs finite inputs", path, i,
               isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf");
    return false;
  }
  return true;
}

/* Reads path into t as the input set describes it. */
static bool load_sample(Ctx *c, const char *path, const SampleSet *s, RtTensor *rt, Tensor *t) {
  char err[1024];
  if (rt_npy_read(path, rt, err, sizeof err) != 0) {
    diag_error(c, (SrcLoc){0}, "%s", err);
    return false;
  }
  if (!same_type(rt, s->type)) {
    char got[IR_TYPE_STR_MAX], want[IR_TYPE_STR_MAX];
    rt_type_text(rt, got, sizeof got);
    ir_type_str(s->type, want, sizeof want);
    bool f64 = rt->dtype == RT_F64 && s->type->dtype == TY_F32;
    diag_error(c, (SrcLoc){0}, "%s: %s does not match input '%s' %s%s", path, got, s->input, want,
               f64 ? " (save it with x.astype(np.float32))" : "");
    return false;
  }
  *t = (Tensor){*s->type, rt->data};
  return check_finite(c, path, t);
}

/* Where the observer files each value: by Value.id, the index of the
 * requested value, or -1. */
typedef struct Observer {
  const Value *const *values;
  int n_ids;
  int *slot_of;
  CalibHist *hists;
  const Value *bad; /* the first activation with a NaN or infinity */
  int64_t bad_elem;
  double bad_x;
} Observer;

static void observe(void *ud, const Value *v, const Tensor *t) {
  Observer *o = ud;
  if (o->bad || v->id < 0 || v->id >= o->n_ids) return;
  int k = o->slot_of[v->id];
  if (k < 0 || o->values[k] != v) return;
  int64_t e = api_calib_hist_add(&o->hists[k], t);
  if (e >= 0) {
    o->bad = v;
    o->bad_elem = e;
    o->bad_x = ir_tensor_get(t, e);
  }
}

/* The sample's files, for messages about it as a whole. */
static const char *sample_name(Arena *a, const SampleSet *sets, int n_sets, int k) {
  if (n_sets == 0) return "the model (it has no inputs)";
  const char *s = sets[0].files[k];
  for (int i = 1; i < n_sets; i++) s = arena_printf(a, "%s, %s", s, sets[i].files[k]);
  return s;
}

/* The interpreter on one sample, its observer feeding the histograms. */
static bool eval_sample(Graph *g, const ApiCalibration *cal, const TensorMap *inputs, Observer *o, char *err,
                        size_t errlen) {
  Tensor *outputs = ARENA_ARRAY(&g->ctx->arena, Tensor, g->n_outputs + 1);
  if (!ir_eval_observe(g, inputs, cal->params, outputs, observe, o, err, errlen)) return false;
  for (int i = 0; i < g->n_outputs; i++) ir_tensor_free(&outputs[i]);
  return true;
}

/* The compiled copy on one sample; its outputs go through the observer
 * in graph order, as the interpreter would show them. */
static bool device_sample(CalibDevice *d, const TensorMap *inputs, Observer *o, char *err, size_t errlen) {
  if (!api_calib_device_run(d, inputs, err, errlen)) return false;
  for (int j = 0; j < api_calib_device_count(d) && !o->bad; j++) {
    Tensor t;
    const Value *v = api_calib_device_result(d, j, &t);
    observe(o, v, &t);
  }
  return true;
}

/* Runs sample k on the device, or the interpreter when d is NULL. */
static bool run_sample(Graph *g, const ApiCalibration *cal, ApiSamples *s, int k, CalibDevice *d, Observer *o) {
  Ctx *c = g->ctx;
  TensorMap inputs;
  if (!api_samples_load(s, k, &inputs)) return false;
  char err[4096];
  bool ok = d ? device_sample(d, &inputs, o, err, sizeof err) : eval_sample(g, cal, &inputs, o, err, sizeof err);
  api_samples_release(s);
  if (!ok)
    diag_error(c, (SrcLoc){0}, "calibration on %s: %s", sample_name(&c->arena, s->sets, s->n_sets, k), err);
  if (ok && o->bad) {
    const Value *v = o->bad;
    diag_error(c, v->def->loc,
               "calibration on %s: %%%d (%s) computes %s at element %" PRId64
               ": calibration needs finite activations",
               sample_name(&c->arena, s->sets, s->n_sets, k), v->id, ir_ops[v->def->op].name, isnan(o->bad_x) ? "NaN" : o->bad_x > 0 ? "Inf" : "-Inf",
               o->bad_elem);
    ok = false;
  }
  return ok;
}

static Observer new_observer(Ctx *c, Graph *g, int n, const Value *const *values) {
  ir_number(g);
  Observer o = {.values = values};
  for (Node *node = g->first; node; node = node->next) o.n_ids += node->n_out;
  o.slot_of = ARENA_ARRAY(&c->arena, int, o.n_ids + 1);
  for (int i = 0; i < o.n_ids; i++) o.slot_of[i] = -1;
  for (int k = n - 1; k >= 0; k--) o.slot_of[values[k]->id] = k; /* the first of duplicates */
  o.hists = ARENA_ARRAY(&c->arena, CalibHist, n > 0 ? n : 1);
  return o;
}

static void release_samples(void *s) { api_samples_release(s); }
static void close_calib_device(void *d) { api_calib_device_close(d); }

bool api_calibrate(void *ud, Graph *g, int n, const Value *const *values, double *amax) {
  ApiCalibration *cal = ud;
  Ctx *c = g->ctx;
  double t0 = ctx_now();
  ApiSamples *s = api_samples_open(g, cal->dir);
  if (!s) return false;
  int n_samples = s->n;
  if (cal->max_samples > 0 && n_samples > cal->max_samples) n_samples = cal->max_samples;
  Observer o = new_observer(c, g, n, values);
  CalibDevice *d = NULL;
  if (cal->backend != CALIB_ON_REF && !api_calib_device_open(g, n, values, cal, &d)) return false;
  cal->ran_on = d ? api_calib_device_name(d) : "ref";
  /* A sample's data and the device outlive arena allocations that may
   * fail and unwind. */
  ctx_hold_with(c, release_samples, s);
  if (d) ctx_hold_with(c, close_calib_device, d);
  bool ok = true;
  for (int k = 0; k < n_samples && ok; k++) ok = run_sample(g, cal, s, k, d, &o);
  if (d) ctx_release(c, d);
  ctx_release(c, s);
  api_calib_device_close(d);
  if (!ok) return false;
  for (int k = 0; k < n; k++) {
    int first = o.slot_of[values[k]->id];
    if (o.hists[first].total == 0 && ir_type_numel(&values[k]->type) > 0)
      dl_internal(c, "calibration: %%%d was never computed", values[k]->id);
    amax[k] = api_calib_hist_amax(&o.hists[first], &cal->method);
  }
  cal->n_samples = n_samples;
  cal->seconds = ctx_now() - t0;
  ctx_stage(c, "calibrate", t0);
  return true;
}

/* ---- samples for other readers (dlcc quant-report's test folder) ---- */

ApiSamples *api_samples_open(Graph *g, const char *dir) {
  Ctx *c = g->ctx;
  int n_sets;
  SampleSet *sets = find_samples(c, g, trim_slashes(&c->arena, dir), &n_sets);
  if (!sets) return NULL;
  ApiSamples *s = ARENA_NEW(&c->arena, ApiSamples);
  *s = (ApiSamples){.c = c, .n_sets = n_sets, .n = n_sets ? sets[0].n : 1, .sets = sets};
  s->names = ARENA_ARRAY(&c->arena, const char *, n_sets + 1);
  s->tensors = ARENA_ARRAY(&c->arena, Tensor, n_sets + 1);
  s->raw = ARENA_ARRAY(&c->arena, RtTensor, n_sets + 1);
  for (int i = 0; i < n_sets; i++) s->names[i] = sets[i].input;
  return s;
}

int api_samples_count(const ApiSamples *s) { return s->n; }

bool api_samples_load(ApiSamples *s, int k, TensorMap *inputs) {
  api_samples_release(s);
  for (int i = 0; i < s->n_sets; i++)
    if (!load_sample(s->c, s->sets[i].files[k], &s->sets[i], &s->raw[i], &s->tensors[i])) {
      api_samples_release(s);
      return false;
    }
  *inputs = (TensorMap){s->n_sets, s->names, s->tensors};
  return true;
}

void api_samples_release(ApiSamples *s) {
  for (int i = 0; i < s->n_sets; i++) {
    rt_tensor_free(&s->raw[i]);
    s->tensors[i] = (Tensor){0};
  }
}

bool api_calib_params(Ctx *c, Graph *g, const char *path, const TensorMap *own, uint64_t seed, TensorMap *out) {
  if (path) return api_check_weights(c, g, path, own, out);
  char err[1024];
  if (ir_init_params(g, seed, IR_INIT_RANDOM, out, err, sizeof err)) return true;
  diag_error(c, (SrcLoc){0}, "%s", err);
  return false;
}

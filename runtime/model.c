/* The plan executor behind include/dlcrt.h: takes a validated plan and
 * an opened device, allocates the model's memory once (weights, the
 * activation arena, one buffer per input and output), uploads the
 * weights, loads the kernels, resolves every argument to a device
 * address, then runs the steps through RtDeviceOps on each dlrt_run,
 * preceded by the init steps (the derived weights) when the weights
 * changed since they last ran, and after each run reads the STATUS space
 * where kernels report an index out of range, turning a report into the
 * reference interpreter's message.  It knows nothing of the device
 * behind the ops table. */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlcrt.h"
#include "runtime.h"
#include "tensorio.h"

/* One launch argument's value, as cuLaunchKernel reads it: every member
 * starts at the union's address. */
typedef union ArgValue {
  RtDevPtr ptr;
  int32_t i32;
  int64_t i64;
  float f32;
} ArgValue;

/* The launch arguments of one step list, resolved at open. */
typedef struct StepArgs {
  ArgValue *argv;      /* every launch's arguments, step after step */
  const void **argp;   /* argp[i] == &argv[i] */
  uint32_t *start;     /* per step: its first argument in argv */
} StepArgs;

struct DlrtModel {
  const RtPlan *plan; /* NULL until validated */
  RtDevice *dev;
  RtModule *mod;
  void *so; /* from dlrt_open_file */
  bool ready;
  RtDevPtr weights, arena, status;
  unsigned char *status_host; /* the STATUS space, read back after a run */
  RtDevPtr *inputs, *outputs;
  bool *input_set, *weight_set;
  bool all_weights;
  /* The derived weights are stale: the init steps run before the next
   * run's steps.  Set at open and by every weight upload. */
  bool init_dirty;
  uint64_t init_runs; /* times the init steps ran (rt_model_init_runs) */
  StepArgs args, init_args;
  char error[1024];
};

static DlrtStatus set_error(DlrtModel *m, DlrtStatus s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static DlrtStatus set_error(DlrtModel *m, DlrtStatus s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->error, sizeof m->error, fmt, ap);
  va_end(ap);
  return s;
}

/* A failed device call: "<context>: <device's message>". */
static DlrtStatus device_error(DlrtModel *m, const char *context) {
  return set_error(m, m->dev->broken ? DLRT_E_BROKEN : DLRT_E_DEVICE, "%s: %s", context,
                   rt_device_error(m->dev));
}

/* Usable for a call: opened, device alive. */
static DlrtStatus usable(DlrtModel *m) {
  if (!m) return DLRT_E_ARG;
  if (!m->ready) {
    if (!m->error[0]) set_error(m, DLRT_E_STATE, "the model is not open");
    return DLRT_E_STATE;
  }
  if (m->dev->broken) return set_error(m, DLRT_E_BROKEN, "%s", rt_device_error(m->dev));
  m->error[0] = 0;
  return DLRT_OK;
}

static RtDevPtr resolve(const DlrtModel *m, RtRef r) {
  switch (r.space) {
  case RT_SPACE_WEIGHTS: return m->weights + r.offset;
  case RT_SPACE_ARENA: return m->arena + r.offset;
  case RT_SPACE_INPUT: return m->inputs[r.index] + r.offset;
  case RT_SPACE_STATUS: return m->status + r.offset;
  default: return m->outputs[r.index] + r.offset;
  }
}

/* Gives back every device resource; the model keeps its message. */
static void release(DlrtModel *m) {
  if (m->dev) {
    RtDevice *d = m->dev;
    const RtPlan *p = m->plan;
    if (m->mod) d->ops->unload(d, m->mod);
    if (m->weights) d->ops->free(d, m->weights);
    if (m->arena) d->ops->free(d, m->arena);
    if (m->status) d->ops->free(d, m->status);
    for (uint32_t i = 0; p && m->inputs && i < p->n_inputs; i++)
      if (m->inputs[i]) d->ops->free(d, m->inputs[i]);
    for (uint32_t i = 0; p && m->outputs && i < p->n_outputs; i++)
      if (m->outputs[i]) d->ops->free(d, m->outputs[i]);
    rt_device_close(d);
  }
  m->dev = NULL;
  m->mod = NULL;
  m->weights = m->arena = m->status = 0;
  free(m->inputs), free(m->outputs), free(m->input_set), free(m->weight_set), free(m->status_host);
  m->status_host = NULL;
  StepArgs *lists[2] = {&m->args, &m->init_args};
  for (int l = 0; l < 2; l++) {
    free(lists[l]->argv), free(lists[l]->argp), free(lists[l]->start);
    *lists[l] = (StepArgs){0};
  }
  m->inputs = m->outputs = NULL;
  m->input_set = m->weight_set = NULL;
  m->ready = false;
}

static DlrtStatus alloc_space(DlrtModel *m, uint64_t nbytes, RtDevPtr *out, const char *what) {
  if (!nbytes) return DLRT_OK; /* nothing can point into it (validated) */
  RtDevice *d = m->dev;
  char ctx[160];
  snprintf(ctx, sizeof ctx, "open: allocating %s (%" PRIu64 " bytes)", what, nbytes);
  if (d->ops->alloc(d, nbytes, out)) return device_error(m, ctx);
  /* Zeroed, so a missing write shows up the same on every device. */
  if (d->ops->memset0(d, *out, nbytes)) return device_error(m, ctx);
  return DLRT_OK;
}

static DlrtStatus build_args(DlrtModel *m, const RtStep *steps, uint32_t n, StepArgs *out) {
  uint32_t total = 0;
  for (uint32_t i = 0; i < n; i++)
    if (steps[i].kind == RT_STEP_LAUNCH) total += steps[i].launch.n_args;
  out->start = calloc(n ? n : 1, sizeof *out->start);
  out->argv = calloc(total ? total : 1, sizeof *out->argv);
  out->argp = calloc(total ? total : 1, sizeof *out->argp);
  if (!out->start || !out->argv || !out->argp)
    return set_error(m, DLRT_E_NOMEM, "open: out of host memory");
  uint32_t at = 0;
  for (uint32_t i = 0; i < n; i++) {
    out->start[i] = at;
    if (steps[i].kind != RT_STEP_LAUNCH) continue;
    const RtLaunch *l = &steps[i].launch;
    for (uint32_t j = 0; j < l->n_args; j++, at++) {
      const RtArg *a = &l->args[j];
      ArgValue *v = &out->argv[at];
      switch (a->kind) {
      case RT_ARG_PTR: v->ptr = resolve(m, a->ref); break;
      case RT_ARG_I32: v->i32 = (int32_t)a->i; break;
      case RT_ARG_I64: v->i64 = a->i; break;
      default: v->f32 = a->f; break;
      }
      out->argp[at] = v;
    }
  }
  return DLRT_OK;
}

/* validated: dlrt_open checked the plan already (a sealed plan's walk
 * hashes every blob, the weights too: once is enough). */
static DlrtStatus open_on_device(DlrtModel *m, const RtPlan *plan, RtDevice *dev, bool validated) {
  m->dev = dev;
  if (!validated && rt_plan_validate(plan, m->error, sizeof m->error)) {
    release(m);
    return DLRT_E_PLAN;
  }
  m->plan = plan;
  DlrtStatus s = DLRT_OK;
  m->inputs = calloc(plan->n_inputs + 1, sizeof *m->inputs);
  m->outputs = calloc(plan->n_outputs + 1, sizeof *m->outputs);
  m->input_set = calloc(plan->n_inputs + 1, sizeof *m->input_set);
  m->weight_set = calloc(plan->n_weights + 1, sizeof *m->weight_set);
  if (!m->inputs || !m->outputs || !m->input_set || !m->weight_set) {
    s = set_error(m, DLRT_E_NOMEM, "open: out of host memory");
    goto fail;
  }
  /* The derived region follows the weights in the same allocation. */
  if ((s = alloc_space(m, plan->weights_bytes + plan->derived_bytes, &m->weights, "the weights")) ||
      (s = alloc_space(m, plan->arena_bytes, &m->arena, "the activation arena")) ||
      (s = alloc_space(m, plan->status_bytes, &m->status, "the index reports")))
    goto fail;
  if (plan->status_bytes && !(m->status_host = malloc(plan->status_bytes))) {
    s = set_error(m, DLRT_E_NOMEM, "open: out of host memory");
    goto fail;
  }
  for (uint32_t i = 0; i < plan->n_inputs; i++) {
    char what[128];
    snprintf(what, sizeof what, "input '%.80s'", plan->inputs[i].name);
    if ((s = alloc_space(m, plan->inputs[i].nbytes, &m->inputs[i], what))) goto fail;
    m->input_set[i] = plan->inputs[i].nbytes == 0;
  }
  for (uint32_t i = 0; i < plan->n_outputs; i++) {
    char what[128];
    snprintf(what, sizeof what, "output '%.80s'", plan->outputs[i].name);
    if ((s = alloc_space(m, plan->outputs[i].nbytes, &m->outputs[i], what))) goto fail;
  }
  m->all_weights = plan->weights_bytes == 0;
  if (plan->weights_data && plan->weights_bytes) {
    if (dev->ops->upload(dev, m->weights, plan->weights_data, plan->weights_bytes)) {
      s = device_error(m, "open: uploading the weights");
      goto fail;
    }
    m->all_weights = true;
  }
  if (dev->ops->load(dev, plan, &m->mod)) {
    s = set_error(m, dev->broken ? DLRT_E_BROKEN : DLRT_E_COMPILE, "open: loading the kernels of '%s': %s",
                  plan->model_name ? plan->model_name : "model", rt_device_error(dev));
    goto fail;
  }
  if ((s = build_args(m, plan->steps, plan->n_steps, &m->args)) ||
      (s = build_args(m, plan->init_steps, plan->n_init_steps, &m->init_args)))
    goto fail;
  m->init_dirty = true;
  m->ready = true;
  return DLRT_OK;
fail:
  release(m);
  return s;
}

int rt_model_open_device(const RtPlan *plan, RtDevice *dev, DlrtModel **out) {
  DlrtModel *m = *out = calloc(1, sizeof *m);
  if (!m) {
    rt_device_close(dev);
    return DLRT_E_NOMEM;
  }
  return open_on_device(m, plan, dev, false);
}

DlrtStatus dlrt_open(const RtPlan *plan, const char *backend, DlrtModel **out) {
  if (!out) return DLRT_E_ARG;
  DlrtModel *m = *out = calloc(1, sizeof *m);
  if (!m) return DLRT_E_NOMEM;
  /* A foreign model is refused before any device is touched. */
  if (rt_plan_validate(plan, m->error, sizeof m->error)) return DLRT_E_PLAN;
  const char *chosen;
  RtDevice *dev = rt_device_open(backend, &chosen, m->error, sizeof m->error);
  if (!dev) return DLRT_E_NO_DEVICE;
  return open_on_device(m, plan, dev, true);
}

DlrtStatus dlrt_open_file(const char *so_path, const char *backend, DlrtModel **out) {
  if (!out) return DLRT_E_ARG;
  *out = NULL;
  if (!so_path) {
    DlrtModel *m = *out = calloc(1, sizeof *m);
    return m ? set_error(m, DLRT_E_ARG, "dlrt_open_file: no path") : DLRT_E_NOMEM;
  }
  char why_not[256];
  if (strchr(so_path, '/') && rt_elf_check(so_path, why_not, sizeof why_not)) {
    DlrtModel *m = *out = calloc(1, sizeof *m);
    return m ? set_error(m, DLRT_E_IO, "cannot load %s: %s", so_path, why_not) : DLRT_E_NOMEM;
  }
  void *so = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
  if (!so) {
    DlrtModel *m = *out = calloc(1, sizeof *m);
    const char *why = dlerror();
    return m ? set_error(m, DLRT_E_IO, "cannot load %s: %s", so_path, why ? why : "?") : DLRT_E_NOMEM;
  }
  DlrtPlanFn fn = (DlrtPlanFn)dlsym(so, DLRT_PLAN_SYMBOL);
  if (!fn) {
    dlclose(so);
    DlrtModel *m = *out = calloc(1, sizeof *m);
    return m ? set_error(m, DLRT_E_PLAN, "%s is not a dlcc model (it has no %s function)", so_path,
                         DLRT_PLAN_SYMBOL)
             : DLRT_E_NOMEM;
  }
  DlrtStatus s = dlrt_open(fn(), backend, out);
  if (*out) {
    (*out)->so = so;
    if (s == DLRT_E_PLAN) {
      char why[sizeof (*out)->error];
      snprintf(why, sizeof why, "%s", (*out)->error);
      set_error(*out, s, "%s: %s", so_path, why);
    }
  } else {
    dlclose(so);
  }
  return s;
}

void dlrt_close(DlrtModel *m) {
  if (!m) return;
  release(m);
  if (m->so) dlclose(m->so);
  free(m);
}

const char *dlrt_error(const DlrtModel *m) { return m ? m->error : "out of host memory (no model)"; }

const char *dlrt_backend(const DlrtModel *m) {
  return m && m->ready ? m->dev->ops->name : "";
}

const char *dlrt_status_name(DlrtStatus s) {
  static const char *const names[] = {
      [DLRT_OK] = "DLRT_OK",           [DLRT_E_ARG] = "DLRT_E_ARG",         [DLRT_E_PLAN] = "DLRT_E_PLAN",
      [DLRT_E_NO_DEVICE] = "DLRT_E_NO_DEVICE", [DLRT_E_COMPILE] = "DLRT_E_COMPILE",
      [DLRT_E_DEVICE] = "DLRT_E_DEVICE",     [DLRT_E_BROKEN] = "DLRT_E_BROKEN",   [DLRT_E_STATE] = "DLRT_E_STATE",
      [DLRT_E_IO] = "DLRT_E_IO",         [DLRT_E_NOMEM] = "DLRT_E_NOMEM",     [DLRT_E_INDEX] = "DLRT_E_INDEX"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "DLRT_E_?";
}

/* ---- weights ---- */

DlrtStatus dlrt_set_weights(DlrtModel *m, const void *data, size_t nbytes) {
  DlrtStatus s = usable(m);
  if (s) return s;
  if (!data || nbytes != m->plan->weights_bytes)
    return set_error(m, DLRT_E_ARG, "set_weights: %zu bytes given, the model's weights are %" PRIu64 " bytes",
                     nbytes, m->plan->weights_bytes);
  if (nbytes && m->dev->ops->upload(m->dev, m->weights, data, nbytes))
    return device_error(m, "set_weights");
  for (uint32_t i = 0; i < m->plan->n_weights; i++) m->weight_set[i] = true;
  m->all_weights = true;
  m->init_dirty = true;
  return DLRT_OK;
}

static int find_desc(const RtTensorDesc *t, uint32_t n, const char *name) {
  if (!name) return -1;
  for (uint32_t i = 0; i < n; i++)
    if (!strcmp(t[i].name, name)) return (int)i;
  return -1;
}

static void note_weight_set(DlrtModel *m, uint32_t i) {
  m->weight_set[i] = true;
  m->init_dirty = true;
  if (m->all_weights) return;
  bool all = true;
  for (uint32_t j = 0; j < m->plan->n_weights && all; j++) all = m->weight_set[j];
  /* Unnamed bytes of WEIGHTS (padding) need no value. */
  m->all_weights = all;
}

DlrtStatus dlrt_set_weight(DlrtModel *m, const char *name, const void *data, size_t nbytes) {
  DlrtStatus s = usable(m);
  if (s) return s;
  int i = find_desc(m->plan->weights, m->plan->n_weights, name);
  if (i < 0) return set_error(m, DLRT_E_ARG, "set_weight: the model has no weight '%s'", name ? name : "(null)");
  const RtTensorDesc *t = &m->plan->weights[i];
  if (!data || nbytes != t->nbytes)
    return set_error(m, DLRT_E_ARG, "set_weight '%s': %zu bytes given, it is %" PRIu64 " bytes", name, nbytes,
                     t->nbytes);
  if (nbytes && m->dev->ops->upload(m->dev, m->weights + t->where.offset, data, nbytes))
    return device_error(m, "set_weight");
  note_weight_set(m, (uint32_t)i);
  return DLRT_OK;
}

static void shape_text(char *buf, size_t len, const char *dtype, int rank, const int64_t *dims) {
  int n = snprintf(buf, len, "%s[", dtype);
  for (int i = 0; i < rank && n > 0 && (size_t)n < len; i++)
    n += snprintf(buf + n, len - n, "%s%" PRId64, i ? "," : "", dims[i]);
  if (n > 0 && (size_t)n < len) snprintf(buf + n, len - n, "]");
}

DlrtStatus dlrt_load_weights(DlrtModel *m, const char *path) {
  DlrtStatus s = usable(m);
  if (s) return s;
  RtTensorSet set;
  char err[512];
  if (rt_safetensors_read(path, &set, err, sizeof err)) return set_error(m, DLRT_E_IO, "%s", err);
  const RtPlan *p = m->plan;
  for (uint32_t i = 0; i < p->n_weights && !s; i++) {
    const RtTensorDesc *w = &p->weights[i];
    const RtTensor *t = rt_tensor_set_find(&set, w->name);
    if (!t) {
      s = set_error(m, DLRT_E_ARG, "%s: no tensor '%s', which the model needs", path, w->name);
      break;
    }
    bool same = (uint32_t)t->dtype == w->dtype && (uint32_t)t->rank == w->rank;
    for (uint32_t d = 0; same && d < w->rank; d++) same = t->dims[d] == w->dims[d];
    if (!same) {
      char have[160], want[160];
      shape_text(have, sizeof have, rt_dtype_name(t->dtype), t->rank, t->dims);
      shape_text(want, sizeof want, rt_dtype_name((RtDType)w->dtype), (int)w->rank, w->dims);
      s = set_error(m, DLRT_E_ARG, "%s: tensor '%s' is %s, the model needs %s", path, w->name, have, want);
      break;
    }
    if (w->nbytes && m->dev->ops->upload(m->dev, m->weights + w->where.offset, t->data, w->nbytes))
      s = device_error(m, "load_weights");
    else
      note_weight_set(m, i);
  }
  rt_tensor_set_free(&set);
  return s;
}

/* ---- inputs, outputs, run ---- */

int dlrt_num_inputs(const DlrtModel *m) { return m && m->plan ? (int)m->plan->n_inputs : 0; }
int dlrt_num_outputs(const DlrtModel *m) { return m && m->plan ? (int)m->plan->n_outputs : 0; }

int dlrt_find_input(const DlrtModel *m, const char *name) {
  return m && m->plan ? find_desc(m->plan->inputs, m->plan->n_inputs, name) : -1;
}
int dlrt_find_output(const DlrtModel *m, const char *name) {
  return m && m->plan ? find_desc(m->plan->outputs, m->plan->n_outputs, name) : -1;
}

static DlrtStatus info(const RtTensorDesc *t, uint32_t n, int index, DlrtTensorInfo *out) {
  if (!out || index < 0 || (uint32_t)index >= n) return DLRT_E_ARG;
  t += index;
  out->name = t->name;
  out->dtype = (DlrtDType)t->dtype;
  out->rank = (int)t->rank;
  memset(out->dims, 0, sizeof out->dims);
  memcpy(out->dims, t->dims, t->rank * sizeof t->dims[0]);
  out->nbytes = (size_t)t->nbytes;
  return DLRT_OK;
}

DlrtStatus dlrt_input_info(const DlrtModel *m, int index, DlrtTensorInfo *out) {
  return m && m->plan ? info(m->plan->inputs, m->plan->n_inputs, index, out) : DLRT_E_ARG;
}
DlrtStatus dlrt_output_info(const DlrtModel *m, int index, DlrtTensorInfo *out) {
  return m && m->plan ? info(m->plan->outputs, m->plan->n_outputs, index, out) : DLRT_E_ARG;
}

DlrtStatus dlrt_set_input(DlrtModel *m, int index, const void *data, size_t nbytes) {
  DlrtStatus s = usable(m);
  if (s) return s;
  const RtPlan *p = m->plan;
  if (index < 0 || (uint32_t)index >= p->n_inputs)
    return set_error(m, DLRT_E_ARG, "set_input: no input %d (the model has %" PRIu32 ")", index, p->n_inputs);
  const RtTensorDesc *t = &p->inputs[index];
  if (!data || nbytes != t->nbytes)
    return set_error(m, DLRT_E_ARG, "set_input '%s': %zu bytes given, it is %" PRIu64 " bytes", t->name,
                     nbytes, t->nbytes);
  if (nbytes && m->dev->ops->upload(m->dev, m->inputs[index], data, nbytes))
    return device_error(m, "set_input");
  m->input_set[index] = true;
  return DLRT_OK;
}

DlrtStatus dlrt_set_input_by_name(DlrtModel *m, const char *name, const void *data, size_t nbytes) {
  DlrtStatus s = usable(m);
  if (s) return s;
  int i = dlrt_find_input(m, name);
  if (i < 0) return set_error(m, DLRT_E_ARG, "set_input: the model has no input '%s'", name ? name : "(null)");
  return dlrt_set_input(m, i, data, nbytes);
}

static DlrtStatus run_steps(DlrtModel *m, const RtStep *steps, uint32_t n, const StepArgs *args,
                            const char *what) {
  RtDevice *d = m->dev;
  for (uint32_t i = 0; i < n; i++) {
    const RtStep *st = &steps[i];
    int rc;
    switch (st->kind) {
    case RT_STEP_LAUNCH:
      rc = d->ops->launch(d, m->mod, &st->launch, args->argp + args->start[i]);
      break;
    case RT_STEP_GEMM:
      rc = d->ops->gemm(d, &st->gemm, resolve(m, st->gemm.a), resolve(m, st->gemm.b), resolve(m, st->gemm.c),
                        st->gemm.epilogue ? resolve(m, st->gemm.bias) : 0);
      break;
    default:
      rc = st->copy.nbytes ? d->ops->copy(d, resolve(m, st->copy.dst), resolve(m, st->copy.src), st->copy.nbytes)
                           : 0;
      break;
    }
    if (rc) {
      char ctx[200];
      snprintf(ctx, sizeof ctx, "%s %" PRIu32 " (%.120s)", what, i, st->label ? st->label : "unlabelled");
      return device_error(m, ctx);
    }
  }
  return DLRT_OK;
}

/* The first report of the launch's STATUS argument a, -1 when none:
 * the lowest position, then the lowest axis, as the interpreter meets
 * them.  Every offset was validated against status_bytes. */
static int64_t first_report(const DlrtModel *m, const RtArg *a, const RtParam *q, int64_t words[RT_STATUS_WORDS]) {
  int64_t best = -1;
  for (uint64_t at = a->ref.offset; at < a->ref.offset + q->nbytes; at += RT_STATUS_WORDS * 8) {
    int64_t w[RT_STATUS_WORDS];
    memcpy(w, m->status_host + at, sizeof w);
    if (w[0] > 0 && (best < 0 || w[0] < best)) best = w[0], memcpy(words, w, sizeof w);
  }
  return best;
}

/* The message of the first launch, in the order they ran, whose kernel
 * reported an index out of range; DLRT_OK when none did. */
static DlrtStatus index_reports(DlrtModel *m, bool with_init) {
  const RtPlan *p = m->plan;
  if (!p->status_bytes) return DLRT_OK;
  RtDevice *d = m->dev;
  if (d->ops->download(d, m->status_host, m->status, p->status_bytes)) return device_error(m, "run: the index reports");
  bool any = false;
  for (uint64_t i = 0; i < p->status_bytes && !any; i++) any = m->status_host[i] != 0;
  if (!any) return DLRT_OK;
  if (d->ops->memset0(d, m->status, p->status_bytes)) return device_error(m, "run: the index reports");
  for (int init = with_init ? 1 : 0; init >= 0; init--) {
    const RtStep *steps = init ? p->init_steps : p->steps;
    uint32_t n = init ? p->n_init_steps : p->n_steps;
    for (uint32_t i = 0; i < n; i++) {
      const RtLaunch *l = &steps[i].launch;
      if (steps[i].kind != RT_STEP_LAUNCH) continue;
      for (uint32_t j = 0; j < l->n_args; j++) {
        int64_t w[RT_STATUS_WORDS] = {0};
        if (l->args[j].kind != RT_ARG_PTR || l->args[j].ref.space != RT_SPACE_STATUS ||
            first_report(m, &l->args[j], &p->contracts[l->contract].params[j], w) < 0)
          continue;
        if (init) m->init_dirty = true;
        if (steps[i].origin)
          return set_error(m, DLRT_E_INDEX, "%s: index %" PRId64 " is out of range for axis %" PRId64
                           " of size %" PRId64, steps[i].origin, w[1], w[2], w[3]);
        return set_error(m, DLRT_E_INDEX, "run: %sstep %" PRIu32 " (%s): index %" PRId64
                         " is out of range for axis %" PRId64 " of size %" PRId64, init ? "init " : "", i,
                         steps[i].label ? steps[i].label : "unlabelled", w[1], w[2], w[3]);
      }
    }
  }
  return set_error(m, DLRT_E_INDEX, "run: an index was out of range, but no step says where");
}

DlrtStatus dlrt_run(DlrtModel *m) {
  DlrtStatus s = usable(m);
  if (s) return s;
  const RtPlan *p = m->plan;
  RtDevice *d = m->dev;
  if (!m->all_weights)
    return set_error(m, DLRT_E_STATE, "run: the weights were never loaded (dlrt_set_weights, dlrt_load_weights)");
  for (uint32_t i = 0; i < p->n_inputs; i++)
    if (!m->input_set[i])
      return set_error(m, DLRT_E_STATE, "run: input '%s' was never set", p->inputs[i].name);
  bool with_init = m->init_dirty && p->n_init_steps;
  if (with_init) {
    /* Stays dirty when a step fails: the next run tries again. */
    if ((s = run_steps(m, p->init_steps, p->n_init_steps, &m->init_args, "run: init step"))) return s;
    m->init_runs++;
  }
  m->init_dirty = false;
  if ((s = run_steps(m, p->steps, p->n_steps, &m->args, "run: step"))) return s;
  if (d->ops->synchronize(d)) return device_error(m, "run");
  return index_reports(m, with_init);
}

uint64_t rt_model_init_runs(const DlrtModel *m) { return m ? m->init_runs : 0; }

int rt_model_enqueue(DlrtModel *m) {
  DlrtStatus s = usable(m);
  if (s) return s;
  if (m->init_dirty && m->plan->n_init_steps)
    return set_error(m, DLRT_E_STATE, "enqueue: the init steps have not run (dlrt_run once first)");
  return run_steps(m, m->plan->steps, m->plan->n_steps, &m->args, "enqueue: step");
}

DlrtStatus dlrt_get_output(DlrtModel *m, int index, void *data, size_t nbytes) {
  DlrtStatus s = usable(m);
  if (s) return s;
  const RtPlan *p = m->plan;
  if (index < 0 || (uint32_t)index >= p->n_outputs)
    return set_error(m, DLRT_E_ARG, "get_output: no output %d (the model has %" PRIu32 ")", index,
                     p->n_outputs);
  const RtTensorDesc *t = &p->outputs[index];
  if (!data || nbytes != t->nbytes)
    return set_error(m, DLRT_E_ARG, "get_output '%s': room for %zu bytes given, it is %" PRIu64 " bytes",
                     t->name, nbytes, t->nbytes);
  if (nbytes && m->dev->ops->download(m->dev, data, m->outputs[index], nbytes))
    return device_error(m, "get_output");
  return DLRT_OK;
}

DlrtStatus dlrt_get_output_by_name(DlrtModel *m, const char *name, void *data, size_t nbytes) {
  DlrtStatus s = usable(m);
  if (s) return s;
  int i = dlrt_find_output(m, name);
  if (i < 0) return set_error(m, DLRT_E_ARG, "get_output: the model has no output '%s'", name ? name : "(null)");
  return dlrt_get_output(m, i, data, nbytes);
}

/* The plan executor behind include/dlcrt.h: takes a validated plan and
 * an opened device, allocates the model's memory once (weights, the
 * activation arena, one buffer per input and output, host staging for
 * them), uploads the weights, loads the kernels, resolves every argument
 * to a device address, then on each run queues on the device's stream:
 * the init steps (the derived weights) when the weights changed since
 * they last ran, the inputs set since the last run (async, from
 * staging), the steps (after a first warm-up run, as captured graphs:
 * below), the outputs and the STATUS space (async, into staging);
 * one synchronization, then a report in STATUS (an index out of range)
 * becomes the reference interpreter's message.  It knows nothing of the
 * device behind the ops table. */
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

_Static_assert((int)DLRT_U8 == (int)RT_DT_U8 && (int)DLRT_F64 == (int)RT_DT_F64 &&
                   (int)DLRT_U64 + 1 == (int)RT_DT_COUNT,
               "DlrtDType follows the plan's dtype codes");

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

/* The most inputs or outputs dlrt_run_batches hands its functions. */
#define RT_MAX_BATCH_IO 256

/* Host memory the device copies from and to: pinned when it could be. */
typedef struct Staging {
  void *p;
  bool pinned;
} Staging;

/* Steps [first, first + count) of a run: replayed as graph, or, with
 * graph NULL, launched one by one (a step that cannot be captured). */
typedef struct Piece {
  uint32_t first, count;
  RtGraph *graph;
} Piece;

struct DlrtModel {
  const RtPlan *plan; /* NULL until validated */
  RtDevice *dev;
  RtModule *mod;
  void *so; /* from dlrt_open_file */
  bool ready;
  RtDevPtr weights, arena, status, sync;
  Staging status_host; /* the STATUS space, read back by every run */
  /* What the steps use: the model's own buffers, or the caller's
   * (dlrt_bind_input/output). */
  RtDevPtr *inputs, *outputs;
  RtDevPtr *own_inputs, *own_outputs;
  bool *input_bound, *output_bound;
  /* By output: state a training step updates (its param's new value, in
   * place in WEIGHTS or copied there by an update step), which a run
   * leaves on the device: dlrt_get_output reads it there. */
  bool *output_state;
  bool stage_state;   /* run_batches: state comes down with the rest */
  bool updates;       /* a run writes WEIGHTS (update steps or state in place) */
  Staging *in_stage, *out_stage;
  bool *input_dirty; /* staged since the last run: copied up at the next */
  char staging_note[256]; /* why staging is pageable, or "" */
  bool *input_set, *weight_set;
  bool all_weights;
  /* The derived weights are stale: the init steps run before the next
   * run's steps.  Set at open and by every weight upload. */
  bool init_dirty;
  uint64_t init_runs; /* times the init steps ran (rt_model_init_runs) */
  StepArgs args, init_args;
  /* CUDA graphs. */
  bool graphs;        /* wanted: DLCC_NO_GRAPHS unset, dlrt_set_graphs */
  bool side_streams;  /* independent steps on side streams in a graph: DLCC_NO_SIDE_STREAMS unset */
  uint32_t most_lanes; /* the most streams a captured graph uses */
  bool warm;          /* a run's steps completed since the arguments last changed */
  Piece *pieces;      /* once captured */
  uint32_t n_pieces;
  char graph_note[512];
  bool in_flight;     /* a run queued and not waited for (dlrt_run_async) */
  bool in_flight_init;
  char report[1024]; /* dlrt_engine_report's */
  struct Slots *slots; /* dlrt_run_batches's, made at its first call */
  DlrtCommFn comm;     /* dlrt_set_comm's, or NULL */
  void *comm_ctx;
  bool comm_pending; /* all-reduces started and not yet waited for */
  /* dlrt_profile's run: the step each clock point after the first ends
   * (NULL outside a profile), and the points recorded. */
  uint32_t *clock_step;
  uint32_t clock_points;
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
  if (m->in_flight)
    return set_error(m, DLRT_E_STATE, "a run is in flight: dlrt_wait for it before using the model again");
  m->error[0] = 0;
  return DLRT_OK;
}

static RtDevPtr resolve(const DlrtModel *m, RtRef r) {
  switch (r.space) {
  case RT_SPACE_WEIGHTS: return m->weights + r.offset;
  case RT_SPACE_ARENA: return m->arena + r.offset;
  case RT_SPACE_INPUT: return m->inputs[r.index] + r.offset;
  case RT_SPACE_STATUS: return m->status + r.offset;
  case RT_SPACE_SYNC: return m->sync + r.offset;
  default: return m->outputs[r.index] + r.offset;
  }
}

static void free_staging(RtDevice *d, Staging *st) {
  if (!st->p) return;
  if (d->ops->host_free) d->ops->host_free(d, st->p, st->pinned);
  else free(st->p);
  st->p = NULL;
}

static void drop_graphs(DlrtModel *m) {
  for (uint32_t i = 0; i < m->n_pieces; i++)
    if (m->pieces[i].graph) m->dev->ops->graph_destroy(m->dev, m->pieces[i].graph);
  free(m->pieces);
  m->pieces = NULL;
  m->n_pieces = 0;
}

static void free_slots(DlrtModel *m);

/* Gives back every device resource; the model keeps its message. */
static void release(DlrtModel *m) {
  if (m->dev) {
    RtDevice *d = m->dev;
    const RtPlan *p = m->plan;
    free_slots(m);
    drop_graphs(m);
    if (m->mod) d->ops->unload(d, m->mod);
    if (m->weights) d->ops->free(d, m->weights);
    if (m->arena) d->ops->free(d, m->arena);
    if (m->status) d->ops->free(d, m->status);
    if (m->sync) d->ops->free(d, m->sync);
    free_staging(d, &m->status_host);
    for (uint32_t i = 0; p && m->own_inputs && i < p->n_inputs; i++) {
      if (m->own_inputs[i]) d->ops->free(d, m->own_inputs[i]);
      if (m->in_stage) free_staging(d, &m->in_stage[i]);
    }
    for (uint32_t i = 0; p && m->own_outputs && i < p->n_outputs; i++) {
      if (m->own_outputs[i]) d->ops->free(d, m->own_outputs[i]);
      if (m->out_stage) free_staging(d, &m->out_stage[i]);
    }
    rt_device_close(d);
  }
  m->dev = NULL;
  m->mod = NULL;
  m->weights = m->arena = m->status = m->sync = 0;
  free(m->inputs), free(m->outputs), free(m->input_set), free(m->weight_set);
  free(m->own_inputs), free(m->own_outputs), free(m->input_bound), free(m->output_bound);
  free(m->in_stage), free(m->out_stage), free(m->input_dirty), free(m->output_state);
  m->own_inputs = m->own_outputs = NULL;
  m->input_bound = m->output_bound = m->input_dirty = m->output_state = NULL;
  m->in_stage = m->out_stage = NULL;
  StepArgs *lists[2] = {&m->args, &m->init_args};
  for (int l = 0; l < 2; l++) {
    free(lists[l]->argv), free(lists[l]->argp), free(lists[l]->start);
    *lists[l] = (StepArgs){0};
  }
  m->inputs = m->outputs = NULL;
  m->input_set = m->weight_set = NULL;
  m->ready = false;
}

/* Zeroed host staging of nbytes; pageable when pinning failed, with the
 * first reason kept for dlrt_engine_report. */
static DlrtStatus alloc_staging(DlrtModel *m, uint64_t nbytes, Staging *st) {
  RtDevice *d = m->dev;
  if (!d->ops->host_alloc) {
    st->p = calloc(1, nbytes ? nbytes : 1);
    return st->p ? DLRT_OK : set_error(m, DLRT_E_NOMEM, "open: out of host memory");
  }
  char why[200] = "";
  int rc = d->ops->host_alloc(d, nbytes, &st->p, why, sizeof why);
  if (rc < 0) return device_error(m, "open: allocating host staging");
  st->pinned = rc == 0;
  if (rc > 0 && !m->staging_note[0])
    snprintf(m->staging_note, sizeof m->staging_note, "in pageable memory (pinning failed: %.200s)", why);
  memset(st->p, 0, nbytes);
  return DLRT_OK;
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
  uint32_t ni = plan->n_inputs + 1, no = plan->n_outputs + 1;
  m->inputs = calloc(ni, sizeof *m->inputs);
  m->outputs = calloc(no, sizeof *m->outputs);
  m->own_inputs = calloc(ni, sizeof *m->own_inputs);
  m->own_outputs = calloc(no, sizeof *m->own_outputs);
  m->input_bound = calloc(ni, sizeof *m->input_bound);
  m->output_bound = calloc(no, sizeof *m->output_bound);
  m->output_state = calloc(no, sizeof *m->output_state);
  m->input_dirty = calloc(ni, sizeof *m->input_dirty);
  m->in_stage = calloc(ni, sizeof *m->in_stage);
  m->out_stage = calloc(no, sizeof *m->out_stage);
  m->input_set = calloc(ni, sizeof *m->input_set);
  m->weight_set = calloc(plan->n_weights + 1, sizeof *m->weight_set);
  if (!m->inputs || !m->outputs || !m->own_inputs || !m->own_outputs || !m->input_bound || !m->output_bound ||
      !m->output_state || !m->input_dirty || !m->in_stage || !m->out_stage || !m->input_set || !m->weight_set) {
    s = set_error(m, DLRT_E_NOMEM, "open: out of host memory");
    goto fail;
  }
  /* The derived region follows the weights in the same allocation. */
  if ((s = alloc_space(m, plan->weights_bytes + plan->derived_bytes, &m->weights, "the weights")) ||
      (s = alloc_space(m, plan->arena_bytes, &m->arena, "the activation arena")) ||
      (s = alloc_space(m, plan->status_bytes, &m->status, "the index reports")) ||
      (s = alloc_space(m, plan->sync_bytes, &m->sync, "the kernels' counters")))
    goto fail;
  for (uint32_t i = 0; i < plan->n_outputs; i++)
    if (plan->outputs[i].where.space == RT_SPACE_WEIGHTS) m->outputs[i] = m->weights + plan->outputs[i].where.offset;
  if (plan->status_bytes && (s = alloc_staging(m, plan->status_bytes, &m->status_host))) goto fail;
  for (uint32_t i = 0; i < plan->n_inputs; i++) {
    char what[128];
    snprintf(what, sizeof what, "input '%.80s'", plan->inputs[i].name);
    if ((s = alloc_space(m, plan->inputs[i].nbytes, &m->own_inputs[i], what)) ||
        (s = alloc_staging(m, plan->inputs[i].nbytes, &m->in_stage[i])))
      goto fail;
    m->inputs[i] = m->own_inputs[i];
    m->input_set[i] = plan->inputs[i].nbytes == 0;
  }
  m->updates = plan->n_update_steps != 0;
  for (uint32_t i = plan->n_steps - plan->n_update_steps; i < plan->n_steps; i++)
    m->output_state[plan->steps[i].copy.src.index] = true; /* validated: a whole OUTPUT */
  for (uint32_t i = 0; i < plan->n_outputs; i++) {
    char what[128];
    snprintf(what, sizeof what, "output '%.80s'", plan->outputs[i].name);
    if ((s = alloc_staging(m, plan->outputs[i].nbytes, &m->out_stage[i]))) goto fail;
    /* In place: the weight's own bytes, allocated with the weights below. */
    if (plan->outputs[i].where.space == RT_SPACE_WEIGHTS) {
      m->output_state[i] = m->updates = true;
      continue;
    }
    if ((s = alloc_space(m, plan->outputs[i].nbytes, &m->own_outputs[i], what))) goto fail;
    m->outputs[i] = m->own_outputs[i];
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
  const char *off = getenv("DLCC_NO_GRAPHS");
  m->graphs = dev->ops->capture_begin && !rt_env_on("DLCC_NO_GRAPHS");
  m->side_streams = !rt_env_on("DLCC_NO_SIDE_STREAMS");
  if (!dev->ops->capture_begin)
    snprintf(m->graph_note, sizeof m->graph_note, "the %s device cannot capture graphs", dev->ops->name);
  else if (!m->graphs)
    snprintf(m->graph_note, sizeof m->graph_note, "off (DLCC_NO_GRAPHS=%.20s)", off);
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
  /* Nothing of a run still in flight may touch what release frees. */
  if (m->in_flight && m->dev) m->dev->ops->synchronize(m->dev);
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
      [DLRT_E_IO] = "DLRT_E_IO",         [DLRT_E_NOMEM] = "DLRT_E_NOMEM",     [DLRT_E_INDEX] = "DLRT_E_INDEX",
      [DLRT_E_CHECK] = "DLRT_E_CHECK"};
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

DlrtStatus dlrt_get_weight(DlrtModel *m, const char *name, void *data, size_t nbytes) {
  DlrtStatus s = usable(m);
  if (s) return s;
  int i = find_desc(m->plan->weights, m->plan->n_weights, name);
  if (i < 0) return set_error(m, DLRT_E_ARG, "get_weight: the model has no weight '%s'", name ? name : "(null)");
  const RtTensorDesc *t = &m->plan->weights[i];
  if (!data || nbytes != t->nbytes)
    return set_error(m, DLRT_E_ARG, "get_weight '%s': %zu bytes given, it is %" PRIu64 " bytes", name, nbytes,
                     t->nbytes);
  if (!m->all_weights && !m->weight_set[i])
    return set_error(m, DLRT_E_STATE, "get_weight '%s': the weight was never set", name);
  if (nbytes && m->dev->ops->download(m->dev, data, m->weights + t->where.offset, nbytes))
    return device_error(m, "get_weight");
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
/* The outputs before the first length (plan.c checks they are last). */
static uint32_t visible_outputs(const RtPlan *p) {
  uint32_t n = p->n_outputs;
  for (uint32_t i = 0; i < p->n_outputs; i++)
    if (p->outputs[i].length_output && p->outputs[i].length_output - 1 < n) n = p->outputs[i].length_output - 1;
  return n;
}

int dlrt_num_outputs(const DlrtModel *m) { return m && m->plan ? (int)visible_outputs(m->plan) : 0; }

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
  out->run_time_axis = t->length_output ? (int)t->length_axis : -1;
  return DLRT_OK;
}

DlrtStatus dlrt_input_info(const DlrtModel *m, int index, DlrtTensorInfo *out) {
  return m && m->plan ? info(m->plan->inputs, m->plan->n_inputs, index, out) : DLRT_E_ARG;
}
DlrtStatus dlrt_output_info(const DlrtModel *m, int index, DlrtTensorInfo *out) {
  return m && m->plan ? info(m->plan->outputs, m->plan->n_outputs, index, out) : DLRT_E_ARG;
}

/* The bytes go to host staging now, to the device with the next run. */
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
  if (m->input_bound[index])
    return set_error(m, DLRT_E_STATE, "set_input '%s': the input is bound to device memory (dlrt_bind_input)",
                     t->name);
  if (nbytes) memcpy(m->in_stage[index].p, data, nbytes);
  m->input_dirty[index] = nbytes != 0;
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

static bool same_ref(RtRef a, RtRef b) {
  return a.space == b.space && a.index == b.index && a.offset == b.offset;
}

/* An all-reduce step's bytes handed to the communicator once every step
 * before it has completed on the device. */
static DlrtStatus all_reduce(DlrtModel *m, const RtStep *st, uint32_t i, const char *what) {
  if (m->dev->ops->synchronize(m->dev)) return device_error(m, "run: before an all-reduce");
  char err[512] = "";
  int bucket = 0;
  for (const RtStep *s = m->plan->steps; s < st; s++) bucket += s->kind == RT_STEP_ALLREDUCE && s->copy.nbytes;
  bool wait = !st->copy.nbytes;
  m->comm_pending = !wait;
  if (m->comm(m->comm_ctx, m->dev->ops->name, wait ? 0 : resolve(m, st->copy.dst), st->copy.nbytes / 4,
              wait ? DLRT_COMM_WAIT : bucket, st->copy.reduce == RT_REDUCE_SUM ? DLRT_COMM_SUM : DLRT_COMM_MEAN, err,
              sizeof err))
    return set_error(m, DLRT_E_DEVICE, "%s %" PRIu32 " (%.120s): all-reduce: %s", what, i,
                     st->label ? st->label : "unlabelled", err[0] ? err : "the communicator failed");
  return DLRT_OK;
}

/* Steps [first, first + n) of steps, each handed to the device. */
static DlrtStatus run_steps(DlrtModel *m, const RtStep *steps, uint32_t first, uint32_t n, const StepArgs *args,
                            const char *what) {
  RtDevice *d = m->dev;
  for (uint32_t i = first; i < first + n; i++) {
    const RtStep *st = &steps[i];
    int rc;
    switch (st->kind) {
    case RT_STEP_LAUNCH:
      rc = d->ops->launch(d, m->mod, &st->launch, args->argp + args->start[i]);
      break;
    case RT_STEP_GEMM:
      rc = d->ops->gemm(d, &st->gemm, resolve(m, st->gemm.a), resolve(m, st->gemm.b), resolve(m, st->gemm.c),
                        st->gemm.beta != 0.0f ? resolve(m, st->gemm.c_in) : 0,
                        st->gemm.epilogue ? resolve(m, st->gemm.bias) : 0);
      break;
    case RT_STEP_BRANCH: { /* the condition on the host, once the steps before it are done */
      unsigned char c = 0;
      rc = d->ops->synchronize(d) || d->ops->download(d, &c, resolve(m, st->branch.cond), 1);
      if (!rc && (c != 0) != (st->branch.when != 0)) i += st->branch.skip;
      break;
    }
    case RT_STEP_REPEAT: { /* a loop's next step, once this one is done */
      unsigned char c = 0;
      rc = d->ops->synchronize(d) || d->ops->download(d, &c, resolve(m, st->branch.cond), 1);
      if (!rc && (c != 0) == (st->branch.when != 0)) {
        if (st->branch.skip > i - first) /* the plan check holds it inside; a range cut it */
          return set_error(m, DLRT_E_PLAN, "%s %" PRIu32 ": a loop's repeat goes back before the steps run", what, i);
        i -= st->branch.skip + 1; /* the loop's first step next */
      }
      break;
    }
    default:
      rc = st->copy.nbytes && !same_ref(st->copy.dst, st->copy.src)
               ? d->ops->copy(d, resolve(m, st->copy.dst), resolve(m, st->copy.src), st->copy.nbytes)
               : 0;
      if (!rc && st->kind == RT_STEP_ALLREDUCE && m->comm) {
        DlrtStatus s = all_reduce(m, st, i, what);
        if (s) return s;
      }
      break;
    }
    if (!rc && m->comm_pending && st->kind != RT_STEP_ALLREDUCE) {
      char err[512] = "";
      if (m->comm(m->comm_ctx, d->ops->name, 0, 0, DLRT_COMM_PROGRESS, DLRT_COMM_MEAN, err, sizeof err))
        return set_error(m, DLRT_E_DEVICE, "%s %" PRIu32 ": all-reduce: %s", what, i,
                         err[0] ? err : "the communicator failed");
    }
    if (!rc && m->clock_step && steps == m->plan->steps) {
      m->clock_step[m->clock_points] = i;
      rc = d->ops->clock_mark(d, ++m->clock_points);
    }
    if (rc) {
      char ctx[200];
      snprintf(ctx, sizeof ctx, "%s %" PRIu32 " (%.120s)", what, i, st->label ? st->label : "unlabelled");
      return device_error(m, ctx);
    }
  }
  return DLRT_OK;
}

/* ---- CUDA graphs ----
 * The first run after open (or after the arguments changed) launches
 * each step: it warms up what a capture must not do (cuBLASLt's
 * heuristic, lazy module loading).  The next run captures the steps into
 * graphs, one per stretch of steps the device can capture, and every run
 * after replays them.  A capture that fails turns graphs off for the
 * model, with the reason in the report; that run's steps are then
 * launched one by one. */

/* NULL when step s can be captured, else why not: the device's reasons,
 * and the communicator, which runs on the host between steps. */
static const char *outside_graphs(DlrtModel *m, const RtStep *s) {
  if (s->kind == RT_STEP_ALLREDUCE && m->comm) return "an all-reduce calls the communicator on the host";
  return m->dev->ops->uncapturable ? m->dev->ops->uncapturable(m->dev, s) : NULL;
}

/* The side-stream schedule of steps [first, first + n), made before their
 * capture (the device prepares its streams and events outside it): one
 * lane when side streams are off or the device has none. */
static DlrtStatus plan_streams(DlrtModel *m, uint32_t first, uint32_t n, RtStreamPlan *b) {
  RtDevice *d = m->dev;
  memset(b, 0, sizeof *b);
  b->lanes = 1;
  if (!m->side_streams || !d->ops->use_stream) return DLRT_OK;
  if (rt_stream_plan(m->plan, first, n, RT_SIDE_STREAMS, b))
    return set_error(m, DLRT_E_NOMEM, "run: out of host memory for the side streams");
  if (b->lanes > 1 && b->n_events <= RT_STREAM_EVENTS && !d->ops->prepare_streams(d, (int)b->lanes, (int)b->n_events))
    return DLRT_OK;
  rt_stream_plan_free(b); /* too many events, or no streams: in order */
  b->lanes = 1;
  m->error[0] = 0;
  if (d->broken) return device_error(m, "run: making side streams");
  return DLRT_OK;
}

/* Steps [first, first + n) into the capture: on their streams, with the
 * events that order them, or with one lane in order on the device's
 * stream. */
static DlrtStatus capture_steps(DlrtModel *m, uint32_t first, uint32_t n, const RtStreamPlan *b) {
  RtDevice *d = m->dev;
  const char *what = "run: capturing step";
  if (b->lanes <= 1) return run_steps(m, m->plan->steps, first, n, &m->args, what);
  bool started[RT_SIDE_STREAMS] = {false};
  DlrtStatus s = DLRT_OK;
  int rc = d->ops->stream_mark(d, b->fork, 0);
  for (uint32_t j = 0; !rc && !s && j < n; j++) {
    const RtStreamStep *bs = &b->step[j];
    int lane = (int)bs->lane;
    rc = d->ops->use_stream(d, lane);
    if (!rc && lane && !started[lane]) rc = d->ops->stream_wait(d, b->fork, lane);
    started[lane] = true;
    for (uint32_t w = 0; !rc && w < bs->n_waits; w++) rc = d->ops->stream_wait(d, b->waits[bs->wait_first + w], lane);
    if (!rc) s = run_steps(m, m->plan->steps, first + j, 1, &m->args, what);
    if (!rc && !s && bs->mark >= 0) rc = d->ops->stream_mark(d, bs->mark, lane);
  }
  if (!rc && !s) rc = d->ops->use_stream(d, 0);
  for (uint32_t w = 0; !rc && !s && w < b->n_joins; w++) rc = d->ops->stream_wait(d, b->waits[b->join_first + w], 0);
  if (!rc && !s && b->lanes > m->most_lanes) m->most_lanes = b->lanes;
  if (rc && !s) s = device_error(m, "run: capturing side streams");
  /* back on the device's stream whatever failed: every later call goes
   * where the capture ended, and where the host waits */
  if (s) d->ops->use_stream(d, 0);
  return s;
}

static DlrtStatus capture(DlrtModel *m) {
  const RtPlan *p = m->plan;
  RtDevice *d = m->dev;
  Piece *pieces = calloc(p->n_steps ? p->n_steps : 1, sizeof *pieces);
  if (!pieces) return set_error(m, DLRT_E_NOMEM, "run: out of host memory for the graphs");
  uint32_t n = 0, outside = 0;
  char note[sizeof m->graph_note] = "", step_error[400] = "";
  for (uint32_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].kind == RT_STEP_BRANCH || p->steps[i].kind == RT_STEP_REPEAT) {
      /* A graph would keep the branch taken when it was captured. */
      free(pieces);
      snprintf(m->graph_note, sizeof m->graph_note,
               "off: step %" PRIu32 " branches on a value computed at run time (read on the host)", i);
      m->graphs = false;
      return DLRT_OK;
    }
  m->most_lanes = 0;
  for (uint32_t i = 0; i < p->n_steps;) {
    const char *why = outside_graphs(m, &p->steps[i]);
    if (why) {
      if (!outside++)
        snprintf(note, sizeof note, "; step %" PRIu32 " (%.80s) runs outside: %.200s", i,
                 p->steps[i].label ? p->steps[i].label : "unlabelled", why);
      pieces[n++] = (Piece){i, 1, NULL};
      i++;
      continue;
    }
    uint32_t j = i;
    while (j < p->n_steps && !outside_graphs(m, &p->steps[j])) j++;
    Piece *pc = &pieces[n++];
    *pc = (Piece){i, j - i, NULL};
    RtStreamPlan br;
    DlrtStatus s = plan_streams(m, i, j - i, &br);
    if (s) {
      m->pieces = pieces, m->n_pieces = n;
      drop_graphs(m);
      return s;
    }
    if (d->ops->capture_begin(d)) {
      rt_stream_plan_free(&br);
      goto failed;
    }
    s = capture_steps(m, i, j - i, &br);
    rt_stream_plan_free(&br);
    /* the step's own message, which ending the broken capture overwrites */
    if (s) snprintf(step_error, sizeof step_error, "%.399s", m->error);
    RtGraph *g = NULL;
    if (d->ops->capture_end(d, &g) || s) goto failed;
    pc->graph = g;
    i = j;
  }
  m->pieces = pieces;
  m->n_pieces = n;
  uint32_t graphs = n - outside;
  char lanes[64] = "";
  if (m->most_lanes > 1) snprintf(lanes, sizeof lanes, ", independent steps on up to %" PRIu32 " streams", m->most_lanes);
  snprintf(m->graph_note, sizeof m->graph_note, "on: %" PRIu32 " graph%s over %" PRIu32 " steps%s%s%s", graphs,
           graphs == 1 ? "" : "s", p->n_steps - outside, outside ? "" : ", every step captured", lanes, note);
  return DLRT_OK;
failed:
  m->pieces = pieces;
  m->n_pieces = n;
  drop_graphs(m);
  m->error[0] = 0;
  if (d->broken) return device_error(m, "run: capturing a graph");
  snprintf(m->graph_note, sizeof m->graph_note, "off: capture failed: %.400s", step_error[0] ? step_error : rt_device_error(d));
  m->graphs = false;
  return DLRT_OK;
}

/* A run's steps on the stream: graphs once warm, else one by one. */
static DlrtStatus queue_steps(DlrtModel *m) {
  const RtPlan *p = m->plan;
  DlrtStatus s;
  if (m->clock_step) {
    m->clock_points = 0;
    if (m->dev->ops->clock_mark(m->dev, 0)) return device_error(m, "profile: the step clock");
    return run_steps(m, p->steps, 0, p->n_steps, &m->args, "profile: step");
  }
  if (m->graphs && m->warm && !m->pieces && (s = capture(m))) return s;
  if (!m->graphs || !m->pieces) return run_steps(m, p->steps, 0, p->n_steps, &m->args, "run: step");
  for (uint32_t i = 0; i < m->n_pieces; i++) {
    const Piece *pc = &m->pieces[i];
    if (!pc->graph) {
      if ((s = run_steps(m, p->steps, pc->first, pc->count, &m->args, "run: step"))) return s;
    } else if (m->dev->ops->graph_launch(m->dev, pc->graph)) {
      char ctx[160];
      snprintf(ctx, sizeof ctx, "run: the graph of steps %" PRIu32 " to %" PRIu32, pc->first,
               pc->first + pc->count - 1);
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
    memcpy(w, (const unsigned char *)m->status_host.p + at, sizeof w);
    if (w[0] > 0 && (best < 0 || w[0] < best)) best = w[0], memcpy(words, w, sizeof w);
  }
  return best;
}

/* The message of the first launch, in the order they ran, whose kernel
 * reported an index out of range; DLRT_OK when none did.  The run copied
 * STATUS into its staging. */
static DlrtStatus index_reports(DlrtModel *m, bool with_init) {
  const RtPlan *p = m->plan;
  if (!p->status_bytes) return DLRT_OK;
  RtDevice *d = m->dev;
  const unsigned char *status = m->status_host.p;
  bool any = false;
  for (uint64_t i = 0; i < p->status_bytes && !any; i++) any = status[i] != 0;
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
        if (w[2] == RT_STATUS_CHECK)
          return steps[i].origin ? set_error(m, DLRT_E_CHECK, "%s", steps[i].origin)
                                 : set_error(m, DLRT_E_CHECK, "run: %sstep %" PRIu32 " (%s): its check failed",
                                             init ? "init " : "", i, steps[i].label ? steps[i].label : "unlabelled");
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

/* Everything of one run queued on the device's stream, nothing waited
 * for: init steps when due, the inputs staged since the last run, the
 * steps, the outputs and STATUS into staging. */
static DlrtStatus queue_run(DlrtModel *m) {
  const RtPlan *p = m->plan;
  RtDevice *d = m->dev;
  DlrtStatus s;
  if (!m->all_weights)
    return set_error(m, DLRT_E_STATE, "run: the weights were never loaded (dlrt_set_weights, dlrt_load_weights)");
  for (uint32_t i = 0; i < p->n_inputs; i++)
    if (!m->input_set[i])
      return set_error(m, DLRT_E_STATE, "run: input '%s' was never set", p->inputs[i].name);
  m->in_flight_init = m->init_dirty && p->n_init_steps;
  if (m->in_flight_init) {
    /* Stays dirty when a step fails: the next run tries again. */
    if ((s = run_steps(m, p->init_steps, 0, p->n_init_steps, &m->init_args, "run: init step"))) return s;
    m->init_runs++;
  }
  m->init_dirty = false;
  int (*up)(RtDevice *, RtDevPtr, const void *, uint64_t) = d->ops->upload_async ? d->ops->upload_async : d->ops->upload;
  for (uint32_t i = 0; i < p->n_inputs; i++) {
    if (!m->input_dirty[i]) continue;
    if (up(d, m->inputs[i], m->in_stage[i].p, p->inputs[i].nbytes)) {
      char ctx[160];
      snprintf(ctx, sizeof ctx, "run: copying input '%.80s' to the device", p->inputs[i].name);
      return device_error(m, ctx);
    }
    m->input_dirty[i] = false;
  }
  if ((s = queue_steps(m))) return s;
  /* The run wrote WEIGHTS: what derives from them is stale. */
  if (m->updates) m->init_dirty = true;
  int (*down)(RtDevice *, void *, RtDevPtr, uint64_t) =
      d->ops->download_async ? d->ops->download_async : d->ops->download;
  for (uint32_t i = 0; i < p->n_outputs; i++) {
    if (m->output_bound[i] || !p->outputs[i].nbytes || (m->output_state[i] && !m->stage_state)) continue;
    if (down(d, m->out_stage[i].p, m->outputs[i], p->outputs[i].nbytes)) {
      char ctx[160];
      snprintf(ctx, sizeof ctx, "run: copying output '%.80s' from the device", p->outputs[i].name);
      return device_error(m, ctx);
    }
  }
  if (p->status_bytes && down(d, m->status_host.p, m->status, p->status_bytes))
    return device_error(m, "run: the index reports");
  return DLRT_OK;
}

/* The one synchronization of a run, then what it reported. */
static DlrtStatus finish_run(DlrtModel *m) {
  m->in_flight = false;
  if (m->dev->ops->synchronize(m->dev)) return device_error(m, "run");
  m->warm = true;
  return index_reports(m, m->in_flight_init);
}

DlrtStatus dlrt_run(DlrtModel *m) {
  DlrtStatus s = usable(m);
  if (s || (s = queue_run(m))) return s;
  return finish_run(m);
}

int dlrt_num_steps(const DlrtModel *m) { return m && m->plan ? (int)m->plan->n_steps : 0; }

const char *dlrt_step_label(const DlrtModel *m, int i) {
  if (!m || !m->plan || i < 0 || (uint32_t)i >= m->plan->n_steps) return "";
  const char *l = m->plan->steps[i].label;
  return l ? l : "";
}

DlrtStatus dlrt_profile(DlrtModel *m, double *step_us, int n) {
  DlrtStatus s = usable(m);
  if (s) return s;
  const RtPlan *p = m->plan;
  if (!step_us || n != (int)p->n_steps)
    return set_error(m, DLRT_E_ARG, "profile: room for %d step times, the plan has %" PRIu32, n, p->n_steps);
  if (!m->dev->ops->clock_mark || !m->dev->ops->clock_read)
    return set_error(m, DLRT_E_STATE, "profile: the %s device has no step clock", m->dev->ops->name);
  uint32_t *steps = malloc(((size_t)p->n_steps + 1) * sizeof *steps);
  double *us = malloc(((size_t)p->n_steps + 1) * sizeof *us);
  if (!steps || !us) {
    free(steps), free(us);
    return set_error(m, DLRT_E_NOMEM, "profile: out of host memory");
  }
  m->clock_step = steps;
  s = queue_run(m);
  if (!s) s = finish_run(m);
  m->clock_step = NULL;
  if (!s && m->dev->ops->clock_read(m->dev, m->clock_points, us)) s = device_error(m, "profile: reading the step clock");
  if (!s) {
    for (int i = 0; i < n; i++) step_us[i] = 0;
    for (uint32_t k = 0; k < m->clock_points; k++) step_us[steps[k]] += us[k];
  }
  free(steps), free(us);
  return s;
}

DlrtStatus dlrt_run_async(DlrtModel *m, void *stream) {
  DlrtStatus s = usable(m);
  if (s) return s;
  RtDevice *d = m->dev;
  if (stream && !d->ops->wait_on)
    return set_error(m, DLRT_E_ARG, "run_async: the %s device has no streams (pass NULL)", d->ops->name);
  if (stream && d->ops->wait_on(d, stream)) return device_error(m, "run_async: waiting for the caller's stream");
  if ((s = queue_run(m))) return s;
  if (stream && d->ops->signal(d, stream)) return device_error(m, "run_async: ordering the caller's stream after the run");
  m->in_flight = true;
  return DLRT_OK;
}

DlrtStatus dlrt_wait(DlrtModel *m) {
  if (!m) return DLRT_E_ARG;
  if (!m->in_flight) return usable(m);
  m->error[0] = 0;
  return finish_run(m);
}

uint64_t rt_model_init_runs(const DlrtModel *m) { return m ? m->init_runs : 0; }

int rt_model_enqueue(DlrtModel *m, void *stream) {
  DlrtStatus s = usable(m);
  if (s) return s;
  RtDevice *d = m->dev;
  if (m->init_dirty && m->plan->n_init_steps)
    return set_error(m, DLRT_E_STATE, "enqueue: the init steps have not run (dlrt_run once first)");
  if (stream && (!d->ops->wait_on || d->ops->wait_on(d, stream)))
    return d->ops->wait_on ? device_error(m, "enqueue") : set_error(m, DLRT_E_ARG, "enqueue: no streams here");
  if ((s = queue_steps(m))) return s;
  if (m->updates) m->init_dirty = true;
  if (stream && d->ops->signal(d, stream)) return device_error(m, "enqueue");
  return DLRT_OK;
}

/* Output index's bytes from the last run: staging, or the device for a
 * bound output or state. */
static DlrtStatus read_output(DlrtModel *m, int index, void *data, size_t nbytes) {
  if (!nbytes) return DLRT_OK;
  if (m->output_bound[index] || m->output_state[index]) {
    if (m->dev->ops->download(m->dev, data, m->outputs[index], nbytes)) return device_error(m, "get_output");
    return DLRT_OK;
  }
  memcpy(data, m->out_stage[index].p, nbytes);
  return DLRT_OK;
}

/* The run-time length of output index (which has one), checked against
 * its bound: a kernel's count is data like any other. */
static DlrtStatus run_time_length(DlrtModel *m, int index, int64_t *len) {
  const RtTensorDesc *t = &m->plan->outputs[index];
  DlrtStatus s = read_output(m, (int)t->length_output - 1, len, sizeof *len);
  if (s) return s;
  if (*len < 0 || *len > t->dims[t->length_axis])
    return set_error(m, DLRT_E_DEVICE, "output '%s': the run gave axis %" PRIu32 " a length of %" PRId64
                     ", outside its bound %" PRId64, t->name, t->length_axis, *len, t->dims[t->length_axis]);
  return DLRT_OK;
}

DlrtStatus dlrt_output_shape(DlrtModel *m, int index, DlrtTensorInfo *out) {
  DlrtStatus s = usable(m);
  if (s) return s;
  if (!out || index < 0 || (uint32_t)index >= m->plan->n_outputs)
    return set_error(m, DLRT_E_ARG, "output_shape: no output %d", index);
  info(m->plan->outputs, m->plan->n_outputs, index, out);
  if (out->run_time_axis < 0) return DLRT_OK;
  int64_t len;
  if ((s = run_time_length(m, index, &len))) return s;
  int64_t bound = out->dims[out->run_time_axis];
  out->nbytes = bound ? out->nbytes / (size_t)bound * (size_t)len : 0;
  out->dims[out->run_time_axis] = len;
  return DLRT_OK;
}

/* An output of run-time length: the first len rows of its axis out of
 * every outer slice, packed. */
static DlrtStatus get_packed(DlrtModel *m, int index, void *data, size_t nbytes) {
  const RtTensorDesc *t = &m->plan->outputs[index];
  DlrtTensorInfo run;
  DlrtStatus s = dlrt_output_shape(m, index, &run);
  if (s) return s;
  if (!data || nbytes != run.nbytes)
    return set_error(m, DLRT_E_ARG, "get_output '%s': room for %zu bytes given, this run's is %zu bytes", t->name,
                     nbytes, run.nbytes);
  if (!nbytes) return DLRT_OK;
  uint64_t outer = 1, inner = (uint64_t)rt_dtype_bytes(t->dtype);
  for (uint32_t d = 0; d < t->length_axis; d++) outer *= (uint64_t)t->dims[d];
  for (uint32_t d = t->length_axis + 1; d < t->rank; d++) inner *= (uint64_t)t->dims[d];
  uint64_t bound = (uint64_t)t->dims[t->length_axis], len = (uint64_t)run.dims[t->length_axis];
  const char *from = m->out_stage[index].p;
  for (uint64_t o = 0; o < outer; o++)
    memcpy((char *)data + o * len * inner, from + o * bound * inner, (size_t)(len * inner));
  return DLRT_OK;
}

DlrtStatus dlrt_get_output(DlrtModel *m, int index, void *data, size_t nbytes) {
  DlrtStatus s = usable(m);
  if (s) return s;
  const RtPlan *p = m->plan;
  if (index < 0 || (uint32_t)index >= p->n_outputs)
    return set_error(m, DLRT_E_ARG, "get_output: no output %d (the model has %" PRIu32 ")", index,
                     p->n_outputs);
  const RtTensorDesc *t = &p->outputs[index];
  if (t->length_output) return get_packed(m, index, data, nbytes);
  if (!data || nbytes != t->nbytes)
    return set_error(m, DLRT_E_ARG, "get_output '%s': room for %zu bytes given, it is %" PRIu64 " bytes",
                     t->name, nbytes, t->nbytes);
  /* A bound output was never staged, nor was state: read the device. */
  return read_output(m, index, data, nbytes);
}

DlrtStatus dlrt_get_output_by_name(DlrtModel *m, const char *name, void *data, size_t nbytes) {
  DlrtStatus s = usable(m);
  if (s) return s;
  int i = dlrt_find_output(m, name);
  if (i < 0) return set_error(m, DLRT_E_ARG, "get_output: the model has no output '%s'", name ? name : "(null)");
  return dlrt_get_output(m, i, data, nbytes);
}

/* ---- device-resident inputs and outputs, graphs on and off ---- */

/* The run's arguments resolved again for what is bound now; graphs
 * captured with the old addresses go (the next run captures anew). */
static DlrtStatus rebind(DlrtModel *m) {
  StepArgs fresh = {0};
  DlrtStatus s = build_args(m, m->plan->steps, m->plan->n_steps, &fresh);
  StepArgs *drop = s ? &fresh : &m->args;
  free(drop->argv), free(drop->argp), free(drop->start);
  if (s) return s;
  m->args = fresh;
  drop_graphs(m);
  return DLRT_OK;
}

/* Whether [a, a + an) and [b, b + bn) share a byte. */
static bool ranges_meet(uint64_t a, uint64_t an, uint64_t b, uint64_t bn) {
  return an && bn && a < b + bn && b < a + an;
}

/* A bound output must share no byte with any other bound input or output:
 * the plan writes it while it may still read the others, and its side
 * streams order steps only by the buffers the plan knows apart.  Inputs
 * may share memory with each other: both are only read. */
static DlrtStatus check_overlap(DlrtModel *m, bool input, int index, uint64_t ptr) {
  const RtPlan *p = m->plan;
  const RtTensorDesc *t = input ? &p->inputs[index] : &p->outputs[index];
  for (int side = 0; side < 2; side++) {
    bool other_input = side == 0;
    if (input && other_input) continue;
    uint32_t n = other_input ? p->n_inputs : p->n_outputs;
    for (uint32_t i = 0; i < n; i++) {
      if (other_input == input && (int)i == index) continue;
      bool bound = other_input ? m->input_bound[i] : m->output_bound[i];
      const RtTensorDesc *o = other_input ? &p->inputs[i] : &p->outputs[i];
      uint64_t optr = other_input ? m->inputs[i] : m->outputs[i];
      if (bound && ranges_meet(ptr, t->nbytes, optr, o->nbytes))
        return set_error(m, DLRT_E_ARG,
                         "bind_%s '%s': its %" PRIu64 " bytes at 0x%" PRIx64 " overlap %s '%s' bound at 0x%" PRIx64
                         " (%" PRIu64 " bytes): an output must not share memory with another bound input or output",
                         input ? "input" : "output", t->name, t->nbytes, ptr, other_input ? "input" : "output",
                         o->name, optr, o->nbytes);
    }
  }
  return DLRT_OK;
}

static DlrtStatus bind(DlrtModel *m, bool input, int index, uint64_t device_ptr) {
  DlrtStatus s = usable(m);
  if (s) return s;
  const RtPlan *p = m->plan;
  uint32_t n = input ? p->n_inputs : p->n_outputs;
  const char *what = input ? "input" : "output";
  if (index < 0 || (uint32_t)index >= n)
    return set_error(m, DLRT_E_ARG, "bind_%s: no %s %d (the model has %" PRIu32 ")", what, what, index, n);
  if (device_ptr && (s = check_overlap(m, input, index, device_ptr))) return s;
  if (!input && device_ptr && (p->outputs[index].length_output || (uint32_t)index >= visible_outputs(p)))
    return set_error(m, DLRT_E_ARG,
                     "bind_output '%s': it %s a run-time length, which the host reads after the run (dlrt_get_output)",
                     p->outputs[index].name, p->outputs[index].length_output ? "has" : "is");
  if (!input && p->outputs[index].where.space == RT_SPACE_WEIGHTS)
    return set_error(m, DLRT_E_ARG, "bind_output '%s': it is a weight the run updates in place, so it cannot be bound",
                     p->outputs[index].name);
  RtDevPtr *cur = input ? &m->inputs[index] : &m->outputs[index];
  RtDevPtr want = device_ptr ? device_ptr : input ? m->own_inputs[index] : m->own_outputs[index];
  if (input) {
    m->input_bound[index] = device_ptr != 0;
    m->input_dirty[index] = false;
    /* The caller's memory holds the value; the model's own must be set again. */
    m->input_set[index] = device_ptr != 0 || p->inputs[index].nbytes == 0;
  } else {
    m->output_bound[index] = device_ptr != 0;
  }
  if (*cur == want) return DLRT_OK;
  *cur = want;
  return rebind(m);
}

DlrtStatus dlrt_bind_input(DlrtModel *m, int index, uint64_t device_ptr) { return bind(m, true, index, device_ptr); }
DlrtStatus dlrt_bind_output(DlrtModel *m, int index, uint64_t device_ptr) {
  return bind(m, false, index, device_ptr);
}

DlrtStatus dlrt_set_comm(DlrtModel *m, DlrtCommFn fn, void *ctx) {
  DlrtStatus s = usable(m);
  if (s) return s;
  drop_graphs(m);
  m->comm = fn;
  m->comm_ctx = ctx;
  return DLRT_OK;
}

DlrtStatus dlrt_set_graphs(DlrtModel *m, int on) {
  DlrtStatus s = usable(m);
  if (s) return s;
  drop_graphs(m);
  m->graphs = on && m->dev->ops->capture_begin;
  if (!m->dev->ops->capture_begin)
    snprintf(m->graph_note, sizeof m->graph_note, "the %s device cannot capture graphs", m->dev->ops->name);
  else
    snprintf(m->graph_note, sizeof m->graph_note, "%s", on ? "" : "off (dlrt_set_graphs)");
  return DLRT_OK;
}

const char *dlrt_engine_report(DlrtModel *m) {
  if (!m || !m->ready) return "";
  const char *graphs = m->graph_note[0] ? m->graph_note : "on: captured at the run after the first";
  const char *staging = m->staging_note[0] ? m->staging_note : m->dev->ops->host_alloc ? "pinned" : "in host memory";
  snprintf(m->report, sizeof m->report, "graphs %s; staging %s", graphs, staging);
  return m->report;
}

/* ---- a stream of batches, copies overlapped with the steps ----
 * Two slots, each with host staging and device buffers for every input
 * and output.  Batch i uses slot i % 2: its inputs go up on lane 1 (the
 * copy stream) while lane 0 still computes batch i - 1; lane 0 waits for
 * them, copies them into the model's inputs (device to device), runs
 * the steps (the graph) and copies the outputs into the slot; lane 1
 * then brings them down, after the next batch's inputs went up.  The
 * host waits only for the download of batch i - 2 before it reuses its
 * slot for batch i.  The device-to-device hop keeps one graph for every
 * batch (its addresses fixed); it costs little next to the host copies
 * it lets overlap. */

enum { IN_READY = 0, COMPUTED = 2, OUT_DONE = 4, QUIET = 6 };

typedef struct Slots {
  Staging *host[2];  /* inputs, then outputs */
  RtDevPtr *dev[2];
  uint32_t n;        /* n_inputs + n_outputs */
} Slots;

static void free_slots(DlrtModel *m) {
  Slots *sl = m->slots;
  if (!sl) return;
  for (int s = 0; s < 2; s++) {
    for (uint32_t i = 0; i < sl->n; i++) {
      if (sl->host[s]) free_staging(m->dev, &sl->host[s][i]);
      if (sl->dev[s] && sl->dev[s][i]) m->dev->ops->free(m->dev, sl->dev[s][i]);
    }
    free(sl->host[s]), free(sl->dev[s]);
  }
  free(sl);
  m->slots = NULL;
}

static uint64_t slot_bytes(const RtPlan *p, uint32_t i) {
  return i < p->n_inputs ? p->inputs[i].nbytes : p->outputs[i - p->n_inputs].nbytes;
}

static DlrtStatus make_slots(DlrtModel *m) {
  const RtPlan *p = m->plan;
  Slots *sl = m->slots = calloc(1, sizeof *sl);
  if (!sl) return set_error(m, DLRT_E_NOMEM, "run_batches: out of host memory");
  sl->n = p->n_inputs + p->n_outputs;
  DlrtStatus s = DLRT_OK;
  for (int k = 0; k < 2 && !s; k++) {
    sl->host[k] = calloc(sl->n + 1, sizeof *sl->host[k]);
    sl->dev[k] = calloc(sl->n + 1, sizeof *sl->dev[k]);
    if (!sl->host[k] || !sl->dev[k]) s = set_error(m, DLRT_E_NOMEM, "run_batches: out of host memory");
    for (uint32_t i = 0; i < sl->n && !s; i++)
      if (!(s = alloc_staging(m, slot_bytes(p, i), &sl->host[k][i])))
        s = alloc_space(m, slot_bytes(p, i), &sl->dev[k][i], "a batch slot");
  }
  if (s) free_slots(m);
  return s;
}

/* Lane 1 after lane 0's batch j: its outputs down into its slot. */
static int queue_download(DlrtModel *m, long j) {
  RtDevice *d = m->dev;
  const RtPlan *p = m->plan;
  Slots *sl = m->slots;
  int k = (int)(j & 1);
  if (d->ops->wait_mark(d, COMPUTED + k, 1)) return -1;
  for (uint32_t i = p->n_inputs; i < sl->n; i++)
    if (slot_bytes(p, i) && d->ops->lane_copy(d, false, sl->host[k][i].p, sl->dev[k][i], slot_bytes(p, i))) return -1;
  return d->ops->mark(d, OUT_DONE + k, 1);
}

/* Lane 0: batch j's inputs from its slot, the steps, its outputs into
 * the slot. */
static DlrtStatus queue_batch(DlrtModel *m, long j) {
  RtDevice *d = m->dev;
  const RtPlan *p = m->plan;
  Slots *sl = m->slots;
  int k = (int)(j & 1);
  for (uint32_t i = 0; i < p->n_inputs; i++)
    if (slot_bytes(p, i) && d->ops->lane_copy(d, true, sl->host[k][i].p, sl->dev[k][i], slot_bytes(p, i)))
      return device_error(m, "run_batches: copying inputs up");
  if (d->ops->mark(d, IN_READY + k, 1) || d->ops->wait_mark(d, IN_READY + k, 0))
    return device_error(m, "run_batches: ordering the copy stream");
  for (uint32_t i = 0; i < p->n_inputs; i++)
    if (slot_bytes(p, i) && d->ops->copy(d, m->inputs[i], sl->dev[k][i], slot_bytes(p, i)))
      return device_error(m, "run_batches: the inputs from their slot");
  DlrtStatus s = queue_steps(m);
  if (s) return s;
  for (uint32_t i = p->n_inputs; i < sl->n; i++)
    if (slot_bytes(p, i) && d->ops->copy(d, sl->dev[k][i], m->outputs[i - p->n_inputs], slot_bytes(p, i)))
      return device_error(m, "run_batches: the outputs into their slot");
  if (d->ops->mark(d, COMPUTED + k, 0)) return device_error(m, "run_batches: ordering the copy stream");
  return DLRT_OK;
}

/* Batch j's outputs, once lane 1 brought them down, to the caller. */
static DlrtStatus hand_over(DlrtModel *m, long j, DlrtDrainFn drain, void *user) {
  Slots *sl = m->slots;
  int k = (int)(j & 1);
  if (m->dev->ops->sync_mark(m->dev, OUT_DONE + k)) return device_error(m, "run_batches");
  m->warm = true;
  const void *outs[RT_MAX_BATCH_IO];
  for (uint32_t i = m->plan->n_inputs; i < sl->n; i++) outs[i - m->plan->n_inputs] = sl->host[k][i].p;
  if (drain(user, j, outs))
    return set_error(m, DLRT_E_STATE, "run_batches: the drain stopped at batch %ld", j);
  return DLRT_OK;
}

static DlrtStatus pipelined(DlrtModel *m, DlrtFeedFn feed, DlrtDrainFn drain, void *user, long *done) {
  const RtPlan *p = m->plan;
  RtDevice *d = m->dev;
  DlrtStatus s = DLRT_OK;
  if (!m->slots && (s = make_slots(m))) return s;
  Slots *sl = m->slots;
  bool with_init = m->init_dirty && p->n_init_steps;
  if (with_init) {
    if ((s = run_steps(m, p->init_steps, 0, p->n_init_steps, &m->init_args, "run_batches: init step"))) return s;
    m->init_runs++;
  }
  m->init_dirty = false;
  long i = 0;
  for (;; i++) {
    int k = (int)(i & 1);
    if (i >= 2 && (s = hand_over(m, i - 2, drain, user))) break;
    void *ins[RT_MAX_BATCH_IO];
    for (uint32_t j = 0; j < p->n_inputs; j++) ins[j] = sl->host[k][j].p;
    int r = feed(user, i, ins);
    if (r == 1) break;
    if (r) {
      s = set_error(m, DLRT_E_STATE, "run_batches: the feed stopped at batch %ld", i);
      break;
    }
    if ((s = queue_batch(m, i))) break;
    if (i >= 1 && queue_download(m, i - 1)) {
      s = device_error(m, "run_batches: copying outputs down");
      break;
    }
  }
  /* The loop's last pass handed over batch i - 2 before feed said no. */
  if (!s && i >= 1 && queue_download(m, i - 1)) s = device_error(m, "run_batches: copying outputs down");
  if (!s && i >= 1) s = hand_over(m, i - 1, drain, user);
  *done = s ? 0 : i;
  if (s) {
    /* Nothing of ours left running: both lanes drained. */
    d->ops->mark(d, QUIET, 1);
    d->ops->sync_mark(d, QUIET);
    d->ops->synchronize(d);
    return s;
  }
  if (p->status_bytes && d->ops->download(d, m->status_host.p, m->status, p->status_bytes))
    return device_error(m, "run_batches: the index reports");
  return index_reports(m, with_init);
}

/* Without a second lane: one run after another. */
static DlrtStatus one_by_one(DlrtModel *m, DlrtFeedFn feed, DlrtDrainFn drain, void *user, long *done) {
  const RtPlan *p = m->plan;
  void *ins[RT_MAX_BATCH_IO];
  const void *outs[RT_MAX_BATCH_IO];
  for (uint32_t j = 0; j < p->n_inputs; j++) ins[j] = m->in_stage[j].p;
  for (uint32_t j = 0; j < p->n_outputs; j++) outs[j] = m->out_stage[j].p;
  for (long i = 0;; i++) {
    int r = feed(user, i, ins);
    if (r == 1) return DLRT_OK;
    if (r) return set_error(m, DLRT_E_STATE, "run_batches: the feed stopped at batch %ld", i);
    for (uint32_t j = 0; j < p->n_inputs; j++) {
      m->input_dirty[j] = p->inputs[j].nbytes != 0;
      m->input_set[j] = true;
    }
    DlrtStatus s = queue_run(m);
    if (s || (s = finish_run(m))) return s;
    if (drain(user, i, outs)) return set_error(m, DLRT_E_STATE, "run_batches: the drain stopped at batch %ld", i);
    *done = i + 1;
  }
}

DlrtStatus dlrt_run_batches(DlrtModel *m, DlrtFeedFn feed, DlrtDrainFn drain, void *user, long *n_batches) {
  long done = 0;
  DlrtStatus s = usable(m);
  if (n_batches) *n_batches = 0;
  if (s) return s;
  const RtPlan *p = m->plan;
  if (!feed || !drain) return set_error(m, DLRT_E_ARG, "run_batches: no feed or drain function");
  if (p->n_inputs > RT_MAX_BATCH_IO || p->n_outputs > RT_MAX_BATCH_IO)
    return set_error(m, DLRT_E_ARG, "run_batches: more than %d inputs or outputs", RT_MAX_BATCH_IO);
  if (!m->all_weights)
    return set_error(m, DLRT_E_STATE, "run_batches: the weights were never loaded (dlrt_set_weights, dlrt_load_weights)");
  for (uint32_t i = 0; i < p->n_inputs; i++)
    if (m->input_bound[i])
      return set_error(m, DLRT_E_STATE, "run_batches: input '%s' is bound to device memory (unbind it)", p->inputs[i].name);
  for (uint32_t i = 0; i < p->n_outputs; i++)
    if (m->output_bound[i])
      return set_error(m, DLRT_E_STATE, "run_batches: output '%s' is bound to device memory (unbind it)",
                       p->outputs[i].name);
  for (uint32_t i = 0; i < p->n_outputs; i++)
    if (p->outputs[i].length_output)
      return set_error(m, DLRT_E_ARG, "run_batches: output '%s' has a length known only at run time; run it with dlrt_run",
                       p->outputs[i].name);
  RtDevice *d = m->dev;
  /* A training step's updates make the init steps due before each next
   * batch, which only one run after another does. */
  bool lanes = d->ops->lane_copy && d->ops->mark && d->ops->wait_mark && d->ops->sync_mark &&
               !(m->updates && p->n_init_steps);
  /* Every batch's outputs are drained, state among them. */
  m->stage_state = true;
  s = lanes ? pipelined(m, feed, drain, user, &done) : one_by_one(m, feed, drain, user, &done);
  m->stage_state = false;
  if (n_batches) *n_batches = done;
  return s;
}

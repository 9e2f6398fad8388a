/* Calibration on the compiled model (calib_device.h): a copy of the f32
 * graph with the requested values as its only outputs, compiled as the
 * model is and run by libdlcrt on cuda or emu. */
#include "api/calib_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "dlcrt.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "runtime/device.h"
#include "runtime/runtime.h"

struct CalibDevice {
  const char *name; /* "cuda" or "emu" */
  DlrtModel *rt;
  const RtPlan *plan;
  int n;
  const Value **values; /* in g, graph order, each once */
  Tensor *data;         /* their host copies after a run */
};

/* What to do instead when the device cannot serve. */
#define REF_HINT "the ref backend (--calib-backend=ref) calibrates on the reference interpreter"

/* ---- the copy ---- */

static int compare_ids(const void *a, const void *b) {
  int x = (*(const Value *const *)a)->id, y = (*(const Value *const *)b)->id;
  return (x > y) - (x < y);
}

/* values[0..n) sorted by id with duplicates dropped, into d. */
static void distinct_values(Arena *a, int n, const Value *const *values, CalibDevice *d) {
  d->values = ARENA_ARRAY(a, const Value *, n > 0 ? n : 1);
  memcpy(d->values, values, sizeof *values * (size_t)n);
  qsort(d->values, (size_t)n, sizeof *d->values, compare_ids);
  d->n = 0;
  for (int i = 0; i < n; i++)
    if (d->n == 0 || d->values[d->n - 1] != d->values[i]) d->values[d->n++] = d->values[i];
}

/* The copy's outputs become d's values, by id. */
static void set_outputs(Graph *copy, const CalibDevice *d) {
  Ctx *c = copy->ctx;
  ir_number(copy);
  int n_ids = 0;
  for (Node *node = copy->first; node; node = node->next) n_ids += node->n_out;
  Value **by_id = ARENA_ARRAY(&c->arena, Value *, n_ids + 1);
  for (Node *node = copy->first; node; node = node->next)
    for (int i = 0; i < node->n_out; i++) by_id[node->out[i].id] = &node->out[i];
  Value **outs = ARENA_ARRAY(&c->arena, Value *, d->n);
  const char **names = ARENA_ARRAY(&c->arena, const char *, d->n);
  for (int j = 0; j < d->n; j++) {
    const Value *v = d->values[j];
    if (v->id < 0 || v->id >= n_ids || !ir_type_eq(&by_id[v->id]->type, &v->type))
      dl_internal(c, "calibration copy: %%%d differs from the graph it was printed from", v->id);
    outs[j] = by_id[v->id];
    names[j] = arena_printf(&c->arena, "calib_%d", v->id);
  }
  ir_set_outputs(copy, d->n, outs, names);
}

/* --passes=LIST without quantize: the copy stays f32.  NULL when nothing
 * is left. */
static const char *without_quantize(Arena *a, const char *list) {
  char *out = arena_strdup(a, list), *o = out;
  for (const char *p = list; p;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (!(len == 8 && strncmp(p, "quantize", 8) == 0)) {
      if (o != out) *o++ = ',';
      memcpy(o, p, len);
      o += len;
    }
    p = comma ? comma + 1 : NULL;
  }
  *o = 0;
  return *out ? out : NULL;
}

/* The model's pipeline, quietly: its level or pass list, and the kernel
 * passes' switches, without dumps, timings or statistics. */
static bool compile_copy(Graph *copy, const ApiCalibration *cal, CgResult *cg) {
  const PassOptions *model = cal->passes;
  PassOptions po = {0};
  if (model) {
    po.opt_level = model->opt_level;
    po.passes = model->passes ? without_quantize(&copy->ctx->arena, model->passes) : NULL;
    if (model->passes && !po.passes) po.opt_level = 0;
    po.unroll = model->unroll;
    po.no_unroll = model->no_unroll;
    po.no_vectorize = model->no_vectorize;
    po.verify_each = model->verify_each;
  }
  if (!pass_run_pipeline(copy, &po, NULL)) return false;
  CgOptions cgo = {.unroll = po.unroll, .no_unroll = po.no_unroll, .no_vectorize = po.no_vectorize};
  return cg_compile_opts(copy, &cgo, cg);
}

/* ---- the device ---- */

/* The device cal->backend names; NULL (nothing reported) when AUTO finds
 * no GPU, or NULL after reporting. */
static RtDevice *open_device(Ctx *c, CalibBackend backend, bool *failed) {
  char err[1024];
  const char *name = backend == CALIB_ON_EMU ? "emu" : "cuda";
  RtDevice *dev = backend == CALIB_ON_EMU ? rt_emu_open(err, sizeof err) : rt_cuda_open(err, sizeof err);
  *failed = !dev && backend != CALIB_ON_AUTO;
  if (*failed) {
    /* The runtime's message starts with the device's name; ours names it already. */
    size_t n = strlen(name);
    const char *why = strncmp(err, name, n) == 0 && strncmp(err + n, ": ", 2) == 0 ? err + n + 2 : err;
    diag_error(c, (SrcLoc){0}, "calibration cannot run on %s: %s; %s", name, why, REF_HINT);
  }
  return dev;
}

static bool bind_weights(Ctx *c, CalibDevice *d, const TensorMap *params) {
  TensorMapIndex ix;
  if (!ir_tensor_map_index(&ix, params)) ctx_out_of_memory(c);
  bool ok = true;
  for (uint32_t i = 0; ok && i < d->plan->n_weights; i++) {
    const char *name = d->plan->weights[i].name;
    const Tensor *t = ir_tensor_map_index_find(&ix, name);
    if (!t) {
      diag_error(c, (SrcLoc){0}, "calibration on %s: no weights for '%s'", d->name, name);
      ok = false;
    } else if (dlrt_set_weight(d->rt, name, t->data, ir_tensor_nbytes(&t->type)) != DLRT_OK) {
      diag_error(c, (SrcLoc){0}, "calibration on %s: %s", d->name, dlrt_error(d->rt));
      ok = false;
    }
  }
  ir_tensor_map_index_free(&ix);
  return ok;
}

static bool alloc_results(Ctx *c, CalibDevice *d) {
  d->data = calloc((size_t)d->n + 1, sizeof *d->data);
  bool ok = d->data != NULL;
  for (int j = 0; ok && j < d->n; j++) ok = ir_tensor_alloc(&d->data[j], &d->values[j]->type);
  if (!ok) diag_error(c, (SrcLoc){0}, "calibration on %s: out of memory for the activations", d->name);
  return ok;
}

static void close_device(void *dev) { rt_device_close(dev); }

bool api_calib_device_open(Graph *g, int n, const Value *const *values, const ApiCalibration *cal,
                           CalibDevice **out) {
  Ctx *c = g->ctx;
  *out = NULL;
  bool failed;
  RtDevice *dev = open_device(c, cal->backend, &failed);
  if (!dev) return !failed;
  CalibDevice *d = calloc(1, sizeof *d);
  if (!d) {
    rt_device_close(dev);
    diag_error(c, (SrcLoc){0}, "calibration: out of memory");
    return false;
  }
  /* Copying and compiling allocate from the arena: a failure there
   * unwinds past both. */
  ctx_hold_with(c, close_device, dev);
  ctx_hold(c, d);
  d->name = dev->ops->name;
  distinct_values(&c->arena, n, values, d);
  Graph *copy = ir_copy(g, "<calibration copy>");
  CgResult cg;
  bool compiled = false;
  if (copy) {
    set_outputs(copy, d);
    compiled = compile_copy(copy, cal, &cg);
  }
  ctx_release(c, d);
  ctx_release(c, dev);
  if (!compiled) {
    rt_device_close(dev);
    if (!copy)
      diag_error(c, (SrcLoc){0}, "calibration on %s: could not copy the f32 graph", d->name);
    else
      diag_error(c, (SrcLoc){0},
                 "calibration on %s: the f32 graph with its activations as outputs did not compile; %s",
                 d->name, REF_HINT);
    free(d);
    return false;
  }
  d->plan = cg.plan;
  /* The model owns dev from here on, even when opening fails. */
  if (rt_model_open_device(d->plan, dev, &d->rt) != DLRT_OK) {
    diag_error(c, (SrcLoc){0}, "calibration on %s: %s", d->name, d->rt ? dlrt_error(d->rt) : "out of memory");
    api_calib_device_close(d);
    return false;
  }
  if (!bind_weights(c, d, cal->params) || !alloc_results(c, d)) {
    api_calib_device_close(d);
    return false;
  }
  *out = d;
  return true;
}

const char *api_calib_device_name(const CalibDevice *d) { return d->name; }

bool api_calib_device_run(CalibDevice *d, const TensorMap *inputs, char *err, size_t errlen) {
  for (uint32_t i = 0; i < d->plan->n_inputs; i++) {
    const char *name = d->plan->inputs[i].name;
    const Tensor *t = ir_tensor_map_find(inputs, name);
    if (!t) {
      snprintf(err, errlen, "no sample for input '%s'", name);
      return false;
    }
    if (dlrt_set_input(d->rt, (int)i, t->data, ir_tensor_nbytes(&t->type)) != DLRT_OK) {
      snprintf(err, errlen, "%s", dlrt_error(d->rt));
      return false;
    }
  }
  if (dlrt_run(d->rt) != DLRT_OK) {
    snprintf(err, errlen, "%s", dlrt_error(d->rt));
    return false;
  }
  for (int j = 0; j < d->n; j++)
    if (dlrt_get_output(d->rt, j, d->data[j].data, ir_tensor_nbytes(&d->data[j].type)) != DLRT_OK) {
      snprintf(err, errlen, "%s", dlrt_error(d->rt));
      return false;
    }
  return true;
}

int api_calib_device_count(const CalibDevice *d) { return d->n; }

const Value *api_calib_device_result(const CalibDevice *d, int j, Tensor *data) {
  *data = d->data[j];
  return d->values[j];
}

void api_calib_device_close(CalibDevice *d) {
  if (!d) return;
  for (int j = 0; d->data && j < d->n; j++) ir_tensor_free(&d->data[j]);
  free(d->data);
  dlrt_close(d->rt);
  free(d);
}

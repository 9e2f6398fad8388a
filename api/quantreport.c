/* Error tables for int8 graphs: see quantreport.h. */
#include "api/quantreport.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The graph through the text format: the same values in the same order. */

bool api_quant_copy_calibrate(void *ud, Graph *g, int n, const Value *const *values, double *amax) {
  QuantCopyCalibrator *q = ud;
  if (!(q->f32 = ir_copy(g, "<f32 copy>"))) {
    diag_error(g->ctx, (SrcLoc){0}, "could not copy the f32 graph for the report");
    return false;
  }
  return q->inner(q->inner_ud, g, n, values, amax);
}

void api_quant_report_init(QuantReport *r, const Graph *q, const QuantSummary *s) {
  memset(r, 0, sizeof *r);
  r->summary = s;
  r->layers = calloc((size_t)s->n_layers + 1, sizeof *r->layers);
  r->n_outputs = q->n_outputs;
  r->outputs = calloc((size_t)q->n_outputs + 1, sizeof *r->outputs);
  for (int i = 0; i < q->n_outputs; i++) r->outputs[i].name = q->output_names[i];
}

void api_quant_report_free(QuantReport *r) {
  free(r->layers);
  free(r->outputs);
  memset(r, 0, sizeof *r);
}

double api_quant_rel_rms(const QuantErr *e) { return e->ref_sq > 0 ? sqrt(e->err_sq / e->ref_sq) : 0; }

/* got may be ref's [N, C, H, W] channels last (the nhwc pass). */
static void add_err(QuantErr *e, const Tensor *ref, const Tensor *got, bool channels_last) {
  int64_t count = ir_type_numel(&ref->type);
  const int64_t *dims = ref->type.dims;
  channels_last = channels_last && ref->type.rank == 4;
  int64_t hw = channels_last ? dims[2] * dims[3] : 1, c = channels_last ? dims[1] : 1;
  for (int64_t i = 0; i < count; i++) {
    /* element (n, ch, p) of ref is (n, p, ch) of got */
    int64_t at = channels_last ? (i / (c * hw) * hw + i % hw) * c + i / hw % c : i;
    double r = ir_tensor_get(ref, i), d = ir_tensor_get(got, at) - r;
    e->ref_sq += r * r;
    e->err_sq += d * d;
    e->max_err = fmax(e->max_err, fabs(d));
    e->max_ref = fmax(e->max_ref, fabs(r));
  }
  e->count += count;
}

static int64_t argmax_row(const Tensor *t, int64_t row, int64_t cols) {
  int64_t best = 0;
  for (int64_t j = 1; j < cols; j++)
    if (ir_tensor_get(t, row * cols + j) > ir_tensor_get(t, row * cols + best)) best = j;
  return best;
}

/* Observing both runs: the f32 values by the id the pass saw, then the
 * int8 graph's stand-ins by pointer. */
typedef struct Watch {
  QuantReport *r;
  bool quantized;
  Tensor *saved; /* per layer: the f32 value of this batch */
  bool failed;
} Watch;

static void watch(void *ud, const Value *v, const Tensor *t) {
  Watch *w = ud;
  const QuantSummary *s = w->r->summary;
  for (int i = 0; i < s->n_layers; i++) {
    const QuantLayer *l = &s->layers[i];
    if (!w->quantized && v->id == l->orig_value_id && !w->saved[i].data) {
      if (!ir_tensor_alloc(&w->saved[i], &t->type)) {
        w->failed = true;
        return;
      }
      memcpy(w->saved[i].data, t->data, ir_tensor_nbytes(&t->type));
    } else if (w->quantized && v == l->result && w->saved[i].data &&
               ir_type_numel(&w->saved[i].type) == ir_type_numel(&t->type)) {
      add_err(&w->r->layers[i], &w->saved[i], t, l->channels_last);
    }
  }
}

static void free_outputs(Tensor *t, int n) {
  for (int i = 0; i < n; i++) ir_tensor_free(&t[i]);
  free(t);
}

bool api_quant_report_add(QuantReport *r, Graph *ref, Graph *q, const TensorMap *inputs,
                          const TensorMap *params, char *err, size_t errlen) {
  if (ref->n_outputs != q->n_outputs) {
    snprintf(err, errlen, "the f32 and int8 graphs have different outputs");
    return false;
  }
  int n_layers = r->summary->n_layers;
  Watch w = {.r = r, .saved = calloc((size_t)n_layers + 1, sizeof(Tensor))};
  Tensor *out_ref = calloc((size_t)ref->n_outputs + 1, sizeof(Tensor));
  Tensor *out_q = calloc((size_t)q->n_outputs + 1, sizeof(Tensor));
  bool ok = w.saved && out_ref && out_q;
  if (!ok) snprintf(err, errlen, "out of memory");
  ok = ok && ir_eval_observe(ref, inputs, params, out_ref, watch, &w, err, errlen);
  w.quantized = true;
  ok = ok && ir_eval_observe(q, inputs, params, out_q, watch, &w, err, errlen);
  if (ok && w.failed) {
    snprintf(err, errlen, "out of memory for the f32 values");
    ok = false;
  }
  for (int i = 0; ok && i < r->n_outputs; i++) {
    QuantOutputErr *o = &r->outputs[i];
    const Tensor *a = &out_ref[i], *b = &out_q[i];
    if (!ir_type_eq(&a->type, &b->type)) {
      snprintf(err, errlen, "output '%s' has different types in the f32 and int8 graphs", o->name);
      ok = false;
      break;
    }
    add_err(&o->err, a, b, false);
    int rank = a->type.rank;
    int64_t cols = rank >= 2 ? a->type.dims[rank - 1] : 0;
    o->classifier = rank >= 2 && cols > 1 && ir_dtype_is_float(a->type.dtype);
    if (!o->classifier) continue;
    int64_t rows = ir_type_numel(&a->type) / cols;
    for (int64_t row = 0; row < rows; row++) o->agree += argmax_row(a, row, cols) == argmax_row(b, row, cols);
    o->rows += rows;
  }
  if (ok) r->batches++;
  for (int i = 0; w.saved && i < n_layers; i++) ir_tensor_free(&w.saved[i]);
  free(w.saved);
  free_outputs(out_ref, ref->n_outputs);
  free_outputs(out_q, q->n_outputs);
  return ok;
}

void api_quant_report_print(FILE *f, const QuantReport *r) {
  const QuantSummary *s = r->summary;
  fprintf(f, "%-44s %11s %5s %11s %11s %11s\n", "int8 product (its weight)", "act scale", "zp",
          "act range", "rel rms err", "max abs err");
  for (int i = 0; i < s->n_layers; i++) {
    const QuantLayer *l = &s->layers[i];
    const QuantErr *e = &r->layers[i];
    fprintf(f, "%-44s %11.4e %5d %11.4g %11.3e %11.3e\n", l->label, l->scale, l->zero_point, l->amax,
            api_quant_rel_rms(e), e->max_err);
  }
  if (s->n_kept_f32)
    fprintf(f, "(%d product%s left in f32: #f32, two activations or no f32 operands)\n", s->n_kept_f32,
            s->n_kept_f32 == 1 ? "" : "s");
  fprintf(f, "\n%-20s %11s %11s %11s %11s  %s\n", "output", "max abs err", "max |f32|", "rel err",
          "rel rms err", "top-1 agreement");
  for (int i = 0; i < r->n_outputs; i++) {
    const QuantOutputErr *o = &r->outputs[i];
    double rel = o->err.max_ref > 0 ? o->err.max_err / o->err.max_ref : o->err.max_err;
    fprintf(f, "%-20s %11.3e %11.3e %11.3e %11.3e  ", o->name, o->err.max_err, o->err.max_ref, rel,
            api_quant_rel_rms(&o->err));
    if (o->classifier)
      fprintf(f, "%.2f%% (%" PRId64 " of %" PRId64 ")\n", 100.0 * (double)o->agree / (double)o->rows,
              o->agree, o->rows);
    else
      fprintf(f, "-\n");
  }
}

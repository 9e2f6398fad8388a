/* The training API (include/dlcc.h's dlc_train_*): compiles a model, its
 * loss (api_compile_train) and optimizer (dlc_options.optimizer) into one
 * training-step model, runs steps at the learning rate the host gives
 * (the step applies its own updates), and writes the weights as
 * safetensors: a state_dict, or a checkpoint with the dlcc.* state and
 * metadata. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/model.h"
#include "dlcc.h"
#include "dlcrt.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/optim.h"
#include "runtime/tensorio.h"

struct dlc_train {
  dlc_model *m;
  int lr_input; /* the step's "dlcc.lr"; -1 in an eval model */
};

dlc_status dlc_train_options_init(dlc_train_options *o, const char *optimizer) {
  if (!o) return DLC_ERR_ARGUMENT;
  memset(o, 0, sizeof *o);
  o->ignore_index = -100;
  o->beta = 1.0;
  o->delta = 1.0;
  return dlc_optimizer_defaults(optimizer, &o->optimizer);
}

/* The loss the options ask for, or a message in err. */
static bool make_spec(const dlc_train_options *o, ApiTrainSpec *s, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  s->output = o->loss_output;
  if (o->model.grad || o->model.optimizer || o->model.quantize || o->model.weights) {
    snprintf(err, errlen, "a training step takes no grad, optimizer, quantize or weights in its model options "
                          "(the optimizer is dlc_train_options' own; load weights with dlc_load_weights on "
                          "dlc_train_model)");
    return false;
  }
  if (o->loss) {
    LossKind k;
    if (!loss_from_name(o->loss, &k)) {
      snprintf(err, errlen, "unknown loss '%s' (expected %s)", o->loss, loss_names().s);
      return false;
    }
    s->has_loss = true;
    s->loss = loss_spec_default(k);
    s->loss.ignore_index = o->ignore_index;
    s->loss.label_smoothing = o->label_smoothing;
    s->loss.beta = o->beta;
    s->loss.delta = o->delta;
    if (o->reduction_sum) s->loss.reduction = LOSS_SUM;
    if (o->reduction_batchmean) s->loss.reduction = LOSS_BATCHMEAN;
    s->loss.log_target = o->log_target != 0;
    if (o->eval) s->loss.reduction = LOSS_NONE;
    bool classes = k == LOSS_CROSS_ENTROPY || k == LOSS_NLL;
    const char *bad = o->class_weight && !classes                       ? "class_weight is for cross_entropy and nll"
                      : o->pos_weight && k != LOSS_BCE_WITH_LOGITS        ? "pos_weight is for bce_with_logits"
                      : o->reduction_batchmean && k != LOSS_KL_DIV         ? "reduction_batchmean is for kl_div"
                      : o->reduction_batchmean && o->reduction_sum         ? "reduction_sum and reduction_batchmean both set"
                      : o->log_target && k != LOSS_KL_DIV                  ? "log_target is for kl_div"
                      : o->class_weight && !(o->class_weight_count > 0 && o->class_weight_count <= DL_MAX_ELEMS)
                          ? "class_weight_count must be the number of classes"
                      : o->pos_weight && !(o->pos_weight_count > 0 && o->pos_weight_count <= DL_MAX_ELEMS)
                          ? "pos_weight_count must be 1 or the size of the prediction's last axis"
                          : NULL;
    if (bad) {
      snprintf(err, errlen, "%s", bad);
      return false;
    }
    if (o->class_weight) s->loss.weight_input = o->class_weight_count;
    if (o->pos_weight) s->loss.pos_weight_input = o->pos_weight_count;
    if (o->target_rank > DLC_MAX_RANK) {
      snprintf(err, errlen, "target_rank is %d; at most %d", o->target_rank, (int)DLC_MAX_RANK);
      return false;
    }
    if (o->target_rank > 0) {
      s->has_target_type = true;
      s->target_type.dtype = (DType)o->target_dtype;
      s->target_type.rank = o->target_rank;
      for (int i = 0; i < o->target_rank; i++) s->target_type.dims[i] = o->target_dims[i];
    }
  } else if (o->eval) {
    snprintf(err, errlen, "an eval model needs a loss");
    return false;
  }
  return true;
}

/* A step from a file (path) or from text in memory (name, text). */
static dlc_status train_compile(const char *path, const char *name, const char *text, const dlc_train_options *o,
                                dlc_train **out) {
  if (!out) return DLC_ERR_ARGUMENT;
  *out = NULL;
  dlc_train *t = calloc(1, sizeof *t);
  if (!t) return DLC_ERR_NOMEM;
  t->lr_input = -1;
  ApiTrainSpec spec;
  char err[512] = "";
  dlc_status st;
  if ((!path && !text) || !o || !make_spec(o, &spec, err, sizeof err)) {
    /* A model that did not compile, to carry the message. */
    st = dlc_compile_string("", "", NULL, &t->m);
    if (!t->m) {
      free(t);
      return DLC_ERR_NOMEM;
    }
    *out = t;
    return api_fail(t->m, DLC_ERR_ARGUMENT, "dlcc: error: %s\n", err[0] ? err : "no model or options given");
  }
  dlc_options mo = o->model;
  mo.eval_mode = o->eval != 0;
  if (!o->eval) {
    mo.grad = 1;
    mo.optimizer = &o->optimizer;
  }
  st = path ? api_compile_train(path, &mo, &spec, &t->m) : api_compile_train_text(name, text, &mo, &spec, &t->m);
  if (!t->m) {
    free(t);
    return st;
  }
  *out = t;
  if (st == DLC_OK && !o->eval) t->lr_input = dlc_input_index(t->m, OPTIM_LR_INPUT);
  return st == DLC_OK ? api_set_loss_weights(t->m, o) : st;
}

dlc_status api_set_loss_weights(dlc_model *m, const dlc_train_options *o) {
  dlc_status st = DLC_OK;
  if (o->class_weight && dlc_input_index(m, LOSS_WEIGHT_INPUT) >= 0)
    st = dlc_set_input(m, LOSS_WEIGHT_INPUT, o->class_weight, (size_t)o->class_weight_count * sizeof(float));
  if (st == DLC_OK && o->pos_weight && dlc_input_index(m, LOSS_POS_WEIGHT_INPUT) >= 0)
    st = dlc_set_input(m, LOSS_POS_WEIGHT_INPUT, o->pos_weight, (size_t)o->pos_weight_count * sizeof(float));
  return st;
}

dlc_status dlc_train_compile(const char *path, const dlc_train_options *o, dlc_train **out) {
  return train_compile(path, NULL, NULL, o, out);
}

dlc_status dlc_train_compile_string(const char *name, const char *text, const dlc_train_options *o,
                                    dlc_train **out) {
  return train_compile(NULL, name ? name : "<string>", text, o, out);
}

void dlc_train_free(dlc_train *t) {
  if (!t) return;
  dlc_free(t->m);
  free(t);
}

const char *dlc_train_error(const dlc_train *t) { return dlc_error(t ? t->m : NULL); }

dlc_model *dlc_train_model(dlc_train *t) { return t ? t->m : NULL; }

dlc_status dlc_train_set_comm(dlc_train *t, dlc_comm_fn fn, void *ctx) {
  return t ? dlc_set_comm(t->m, fn, ctx) : DLC_ERR_ARGUMENT;
}

dlc_status dlc_train_set_momentum(dlc_train *t, float momentum) {
  if (!t || !t->m) return DLC_ERR_ARGUMENT;
  return dlc_set_input(t->m, OPTIM_MOMENTUM_INPUT, &momentum, sizeof momentum);
}

dlc_status dlc_train_step(dlc_train *t, float lr, float *loss) {
  if (!t || !t->m) return DLC_ERR_ARGUMENT;
  dlc_model *m = t->m;
  if (!m->g) return dlc_run(m);
  if (t->lr_input < 0)
    return api_fail(m, DLC_ERR_ARGUMENT, "dlcc: error: an eval model takes no step: dlc_run it\n");
  dlc_status st = dlc_set_input(m, OPTIM_LR_INPUT, &lr, sizeof lr);
  if (st == DLC_OK) st = dlc_run(m);
  if (st != DLC_OK || !loss) return st;
  const void *l;
  size_t n;
  if ((st = dlc_get_output(m, 0, &l, &n)) != DLC_OK) return st;
  *loss = *(const float *)l;
  return DLC_OK;
}

int dlc_train_num_params(const dlc_train *t) {
  return t && t->m && t->m->g && t->m->have_params ? t->m->params.n : 0;
}

dlc_status dlc_train_param_info(const dlc_train *t, int index, dlc_tensor_info *out) {
  if (!out || index < 0 || index >= dlc_train_num_params(t)) return DLC_ERR_ARGUMENT;
  api_tensor_info(out, t->m->params.names[index], &t->m->params.tensors[index].type);
  return DLC_OK;
}

static dlc_status no_weights(dlc_model *m) {
  return api_fail(m, DLC_ERR_ARGUMENT, "dlcc: error: the training step has no weights bound yet\n");
}

dlc_status dlc_train_copy_state(dlc_train *dst, const dlc_train *src) {
  if (!dst || !dst->m || !src || !src->m) return DLC_ERR_ARGUMENT;
  dlc_model *m = dst->m;
  if (!src->m->have_params) return no_weights(m);
  /* Bind the destination first (any values: each is copied below) unless
   * it holds every tensor the source does: an ONNX model's own weights
   * alone lack the optimizer's state. */
  bool complete = m->have_params;
  for (int i = 0; complete && i < src->m->params.n; i++)
    complete = ir_tensor_map_find(&m->params, src->m->params.names[i]) != NULL;
  if (!complete) {
    dlc_status st = dlc_init_weights(m, 0);
    if (st != DLC_OK) return st;
  }
  void *buf = NULL;
  dlc_status st = DLC_OK;
  for (int i = 0; st == DLC_OK && i < m->params.n; i++) {
    const char *name = m->params.names[i];
    const Tensor *from = ir_tensor_map_find(&src->m->params, name);
    size_t n = ir_tensor_nbytes(&m->params.tensors[i].type);
    if (!from || !ir_type_eq(&from->type, &m->params.tensors[i].type))
      st = api_fail(m, DLC_ERR_ARGUMENT,
                    "dlcc: error: the source training step has no parameter '%s' of its type\n", name);
    else if (!(buf = realloc(buf, n ? n : 1)))
      st = api_fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
    else if ((st = dlc_get_weight(src->m, name, buf, n)) != DLC_OK)
      st = api_fail(m, st, "%s", dlc_error(src->m));
    else
      st = dlc_set_weight(m, name, buf, n);
  }
  free(buf);
  return st;
}

static bool is_state_name(const char *name) { return strncmp(name, "dlcc.", 5) == 0; }

/* The steps taken: dlcc.optim.step, or 0 without an optimizer. */
static int64_t steps_taken(dlc_model *m) {
  float step = 0;
  const Tensor *t = ir_tensor_map_find(&m->params, OPTIM_STEP_PARAM);
  if (t && t->type.dtype == TY_F32 && ir_tensor_nbytes(&t->type) == sizeof step)
    dlc_get_weight(m, OPTIM_STEP_PARAM, &step, sizeof step);
  return (int64_t)step;
}

/* PyTorch's batchnorm buffer "SCOPE.num_batches_tracked" (i64, the
 * training-mode forwards: the steps) beside SCOPE.running_mean, which
 * dlcc's model has no param for. */
static dlc_status add_batches_tracked(dlc_model *m, const char *running_mean, RtTensorSet *set, char **names) {
  size_t n = strlen(running_mean) - strlen("running_mean");
  RtTensor *r = &set->tensors[set->n];
  memset(r, 0, sizeof *r);
  r->dtype = RT_I64;
  r->nbytes = sizeof(int64_t);
  char *name = malloc(n + sizeof "num_batches_tracked");
  if (!name || !(r->data = malloc(sizeof(int64_t)))) {
    free(name);
    return api_fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
  }
  sprintf(name, "%.*snum_batches_tracked", (int)n, running_mean);
  *(int64_t *)r->data = steps_taken(m);
  names[set->n] = name;
  set->names[set->n++] = name;
  return DLC_OK;
}

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n > k && s[n - k - 1] == '.' && strcmp(s + n - k, suffix) == 0;
}

/* own's value in set, copied (malloc'd data). */
static dlc_status add_own(dlc_model *m, int i, RtTensorSet *set) {
  const Tensor *t = &m->own.values.tensors[i];
  RtTensor *r = &set->tensors[set->n];
  *r = (RtTensor){.dtype = (RtDType)t->type.dtype, .rank = t->type.rank, .nbytes = ir_tensor_nbytes(&t->type)};
  for (int d = 0; d < r->rank; d++) r->dims[d] = t->type.dims[d];
  if (!(r->data = malloc(r->nbytes ? r->nbytes : 1))) return api_fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
  memcpy(r->data, t->data, r->nbytes);
  set->names[set->n++] = (char *)m->own.values.names[i];
  return DLC_OK;
}

/* The current values of the weights into set (malloc'd data; the names
 * it makes in owned[]): PyTorch's state_dict, so an ONNX model's derived
 * params stay out and the buffers it folded at import go in (m->own). */
static dlc_status gather_weights(dlc_model *m, bool with_state, RtTensorSet *set, char **owned) {
  const TensorMap *own = &m->own.values;
  for (int i = m->own.n_derived; i < own->n; i++)
    if (own->tensors[i].data && !ir_tensor_map_find(&m->params, own->names[i])) {
      dlc_status st = add_own(m, i, set);
      if (st != DLC_OK) return st;
    }
  for (int i = 0; i < m->params.n; i++) {
    const char *name = m->params.names[i];
    if (!with_state && is_state_name(name)) continue;
    bool derived = false;
    for (int k = 0; k < m->own.n_derived && !derived; k++) derived = strcmp(own->names[k], name) == 0;
    if (derived) continue;
    const TensorType *ty = &m->params.tensors[i].type;
    RtTensor *r = &set->tensors[set->n];
    r->dtype = (RtDType)ty->dtype;
    r->rank = ty->rank;
    for (int d = 0; d < r->rank; d++) r->dims[d] = ty->dims[d];
    r->nbytes = ir_tensor_nbytes(ty);
    if (!(r->data = malloc(r->nbytes ? r->nbytes : 1))) return api_fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
    set->names[set->n++] = (char *)name;
    dlc_status st = dlc_get_weight(m, name, r->data, r->nbytes);
    if (st == DLC_OK && has_suffix(name, "running_mean")) st = add_batches_tracked(m, name, set, owned);
    if (st != DLC_OK) return st;
  }
  return DLC_OK;
}

dlc_status dlc_train_save(dlc_train *t, const char *path, int with_state, int n_meta,
                          const char *const *meta_keys, const char *const *meta_values) {
  if (!t || !t->m || !path || n_meta < 0 || (n_meta && (!meta_keys || !meta_values))) return DLC_ERR_ARGUMENT;
  dlc_model *m = t->m;
  if (!m->g || !m->have_params) return no_weights(m);
  int n = m->params.n, nm = with_state ? n_meta + 1 : 0;
  RtTensorSet set = {0};
  /* Room for a num_batches_tracked per param, and the buffers. */
  set.names = calloc((size_t)(n * 2 + m->own.values.n) + 1, sizeof *set.names);
  set.tensors = calloc((size_t)(n * 2 + m->own.values.n) + 1, sizeof *set.tensors);
  char **owned = calloc((size_t)(n * 2 + m->own.values.n) + 1, sizeof *owned);
  set.meta_keys = calloc((size_t)nm + 1, sizeof *set.meta_keys);
  set.meta_values = calloc((size_t)nm + 1, sizeof *set.meta_values);
  dlc_status st = DLC_OK;
  if (!set.names || !set.tensors || !set.meta_keys || !set.meta_values || !owned)
    st = api_fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
  else
    st = gather_weights(m, with_state, &set, owned);
  if (st == DLC_OK && with_state) {
    set.meta_keys[0] = "dlcc.checkpoint";
    set.meta_values[0] = "1";
    for (int i = 0; i < n_meta; i++) {
      set.meta_keys[i + 1] = (char *)meta_keys[i];
      set.meta_values[i + 1] = (char *)meta_values[i];
    }
    set.n_meta = nm;
  }
  char err[1024];
  if (st == DLC_OK && rt_safetensors_write(path, &set, err, sizeof err) != 0)
    st = api_fail(m, DLC_ERR_WEIGHTS, "dlcc: error: %s\n", err);
  for (int i = 0; set.tensors && i < set.n; i++) free(set.tensors[i].data), free(owned[i]);
  free(owned);
  free(set.names);
  free(set.tensors);
  free(set.meta_keys);
  free(set.meta_values);
  return st;
}
dlc_status dlc_train_checkpoint_meta(dlc_train *t, const char *path, const char *key, char **value) {
  if (!t || !t->m || !path || !key || !value) return DLC_ERR_ARGUMENT;
  *value = NULL;
  RtTensorSet set;
  char err[1024];
  if (rt_safetensors_read(path, &set, err, sizeof err) != 0)
    return api_fail(t->m, DLC_ERR_WEIGHTS, "dlcc: error: %s\n", err);
  const char *found = NULL;
  bool checkpoint = false;
  for (int i = 0; i < set.n_meta; i++) {
    checkpoint |= strcmp(set.meta_keys[i], "dlcc.checkpoint") == 0;
    if (strcmp(set.meta_keys[i], key) == 0) found = set.meta_values[i];
  }
  dlc_status st = DLC_OK;
  if (!checkpoint)
    st = api_fail(t->m, DLC_ERR_WEIGHTS,
                  "dlcc: error: %s: not a dlcc training checkpoint (no \"dlcc.checkpoint\" in its metadata)\n", path);
  else if (!found)
    st = api_fail(t->m, DLC_ERR_WEIGHTS, "dlcc: error: %s: the checkpoint's metadata has no \"%s\"\n", path, key);
  else if (!(*value = strdup(found)))
    st = api_fail(t->m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
  rt_tensor_set_free(&set);
  return st;
}

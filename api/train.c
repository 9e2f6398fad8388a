/* The training API (include/dlcc.h's dlc_train_*): compiles a model, its
 * loss and optimizer into one training-step model (api_compile_train),
 * runs steps at the learning rate the host gives, keeps every parameter
 * and the optimizer's state on the host as the step updates them, and
 * writes them as safetensors (a state_dict, or a checkpoint with the
 * dlcc.* state and metadata). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/model.h"
#include "dlcc.h"
#include "dlcrt.h"
#include "ir/eval.h"
#include "ir/ir.h"
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
  o->optimizer = optimizer;
  OptimKind k;
  if (!optimizer || !optim_from_name(optimizer, &k)) return DLC_ERR_ARGUMENT;
  OptimSpec d = optim_spec_default(k);
  o->momentum = d.momentum;
  o->dampening = d.dampening;
  o->nesterov = d.nesterov;
  o->weight_decay = d.weight_decay;
  o->beta1 = d.beta1;
  o->beta2 = d.beta2;
  o->eps = d.eps;
  return DLC_OK;
}

/* The options as the passes take them, or a message in err. */
static bool make_spec(const dlc_train_options *o, ApiTrainSpec *s, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  s->eval = o->eval;
  s->output = o->loss_output;
  if (o->model.grad || o->model.quantize || o->model.weights) {
    snprintf(err, errlen, "a training step takes no grad, quantize or weights option (load weights with "
                          "dlc_load_weights on dlc_train_model)");
    return false;
  }
  if (o->loss) {
    LossKind k;
    if (!loss_from_name(o->loss, &k)) {
      snprintf(err, errlen,
               "unknown loss '%s' (expected cross_entropy, nll, mse, l1, smooth_l1 or bce_with_logits)", o->loss);
      return false;
    }
    s->has_loss = true;
    s->loss = loss_spec_default(k);
    s->loss.ignore_index = o->ignore_index;
    s->loss.label_smoothing = o->label_smoothing;
    s->loss.beta = o->beta;
    if (o->eval) s->loss.reduction = LOSS_NONE;
  } else if (o->eval) {
    snprintf(err, errlen, "an eval model needs a loss");
    return false;
  }
  if (o->eval) return true;
  if (!o->optimizer || !optim_from_name(o->optimizer, &s->optim.kind)) {
    snprintf(err, errlen, "unknown optimizer '%s' (expected sgd, adam or adamw)",
             o->optimizer ? o->optimizer : "(null)");
    return false;
  }
  s->optim.momentum = o->momentum;
  s->optim.dampening = o->dampening;
  s->optim.nesterov = o->nesterov;
  s->optim.weight_decay = o->weight_decay;
  s->optim.beta1 = o->beta1;
  s->optim.beta2 = o->beta2;
  s->optim.eps = o->eps;
  s->optim.clip_grad_norm = o->clip_grad_norm;
  return true;
}

dlc_status dlc_train_compile(const char *path, const dlc_train_options *o, dlc_train **out) {
  if (!out) return DLC_ERR_ARGUMENT;
  *out = NULL;
  dlc_train *t = calloc(1, sizeof *t);
  if (!t) return DLC_ERR_NOMEM;
  t->lr_input = -1;
  ApiTrainSpec spec;
  char err[512] = "";
  dlc_status st;
  if (!path || !o || !make_spec(o, &spec, err, sizeof err)) {
    st = dlc_compile_string("", "", NULL, &t->m); /* a model only to carry the message */
    if (!t->m) {
      free(t);
      return DLC_ERR_NOMEM;
    }
    *out = t;
    return api_fail(t->m, DLC_ERR_ARGUMENT, "dlcc: error: %s\n", err[0] ? err : "no model or options given");
  }
  st = api_compile_train(path, &o->model, &spec, &t->m);
  if (!t->m) {
    free(t);
    return st;
  }
  *out = t;
  if (st == DLC_OK && !o->eval) t->lr_input = dlc_input_index(t->m, OPTIM_LR_INPUT);
  return st;
}

void dlc_train_free(dlc_train *t) {
  if (!t) return;
  dlc_free(t->m);
  free(t);
}

const char *dlc_train_error(const dlc_train *t) { return dlc_error(t ? t->m : NULL); }

dlc_model *dlc_train_model(dlc_train *t) { return t ? t->m : NULL; }

static Tensor *find_param(dlc_model *m, const char *name) {
  for (int i = 0; m->have_params && i < m->params.n; i++)
    if (strcmp(m->params.names[i], name) == 0) return &m->params.tensors[i];
  return NULL;
}

/* The new values of the state to the runtime and to the host's copy,
 * which saving and dlc_train_copy_state read. */
static dlc_status apply_updates(dlc_model *m) {
  for (int i = 0; i < m->g->n_outputs; i++) {
    const char *name = ir_output_update(m->g, i);
    if (!name) continue;
    Tensor *dst = find_param(m, name);
    const Tensor *src = &m->outputs[i];
    if (!dst || !ir_type_eq(&dst->type, &src->type))
      return api_fail(m, DLC_ERR_INTERNAL, "dlcc: error: the step updates '%s', which the weights lack\n", name);
    size_t n = ir_tensor_nbytes(&src->type);
    memcpy(dst->data, src->data, n);
    if (m->use_runtime && dlrt_set_weight(m->rt, name, dst->data, n) != DLRT_OK)
      return api_fail(m, DLC_ERR_RUN, "dlcc: error: %s\n", dlrt_error(m->rt));
  }
  return DLC_OK;
}

dlc_status dlc_train_step(dlc_train *t, float lr, float *loss) {
  if (!t || !t->m) return DLC_ERR_ARGUMENT;
  dlc_model *m = t->m;
  if (!m->g) return dlc_run(m);
  if (t->lr_input < 0)
    return api_fail(m, DLC_ERR_ARGUMENT, "dlcc: error: an eval model takes no step: dlc_run it\n");
  dlc_status st = dlc_set_input(m, OPTIM_LR_INPUT, &lr, sizeof lr);
  if (st == DLC_OK) st = dlc_run(m);
  if (st != DLC_OK) return st;
  const Tensor *l = &m->outputs[0];
  if (loss) *loss = l->type.dtype == TY_F32 ? *(const float *)l->data : 0.0f;
  return apply_updates(m);
}

int dlc_train_num_params(const dlc_train *t) {
  return t && t->m && t->m->g && t->m->have_params ? t->m->params.n : 0;
}

dlc_status dlc_train_param_info(const dlc_train *t, int index, dlc_tensor_info *out) {
  if (!out || index < 0 || index >= dlc_train_num_params(t)) return DLC_ERR_ARGUMENT;
  const TensorType *ty = &t->m->params.tensors[index].type;
  memset(out, 0, sizeof *out);
  out->name = t->m->params.names[index];
  out->dtype = (dlc_dtype)ty->dtype;
  out->rank = ty->rank;
  for (int i = 0; i < ty->rank; i++) out->dims[i] = ty->dims[i];
  out->nbytes = ir_tensor_nbytes(ty);
  return DLC_OK;
}

/* name's tensor when it is bound and nbytes is its size, else a message. */
static Tensor *sized_param(dlc_model *m, const char *name, size_t nbytes, dlc_status *st) {
  *st = DLC_ERR_ARGUMENT;
  if (!m->g || !m->have_params) {
    api_fail(m, DLC_ERR_ARGUMENT, "dlcc: error: the training step has no weights bound yet\n");
    return NULL;
  }
  Tensor *p = name ? find_param(m, name) : NULL;
  if (!p) {
    api_fail(m, DLC_ERR_ARGUMENT, "dlcc: error: the training step has no parameter '%s'\n", name ? name : "(null)");
    return NULL;
  }
  if (nbytes != ir_tensor_nbytes(&p->type)) {
    char buf[IR_TYPE_STR_MAX];
    api_fail(m, DLC_ERR_ARGUMENT, "dlcc: error: parameter '%s' is %s (%zu bytes), got %zu bytes\n", name,
             ir_type_str(&p->type, buf, sizeof buf), ir_tensor_nbytes(&p->type), nbytes);
    return NULL;
  }
  *st = DLC_OK;
  return p;
}

dlc_status dlc_train_get_param(dlc_train *t, const char *name, void *data, size_t nbytes) {
  if (!t || !t->m || !data) return DLC_ERR_ARGUMENT;
  dlc_status st;
  const Tensor *p = sized_param(t->m, name, nbytes, &st);
  if (p) memcpy(data, p->data, nbytes);
  return st;
}

dlc_status dlc_train_set_param(dlc_train *t, const char *name, const void *data, size_t nbytes) {
  if (!t || !t->m || !data) return DLC_ERR_ARGUMENT;
  dlc_model *m = t->m;
  dlc_status st;
  Tensor *p = sized_param(m, name, nbytes, &st);
  if (!p) return st;
  memcpy(p->data, data, nbytes);
  if (m->use_runtime && dlrt_set_weight(m->rt, name, data, nbytes) != DLRT_OK)
    return api_fail(m, DLC_ERR_RUN, "dlcc: error: %s\n", dlrt_error(m->rt));
  return DLC_OK;
}

dlc_status dlc_train_copy_state(dlc_train *dst, const dlc_train *src) {
  if (!dst || !dst->m || !src || !src->m) return DLC_ERR_ARGUMENT;
  dlc_model *m = dst->m;
  if (!src->m->have_params)
    return api_fail(m, DLC_ERR_ARGUMENT, "dlcc: error: the source training step has no weights bound yet\n");
  if (!m->have_params) {
    /* Bind the destination first (any values: each is copied below). */
    dlc_status st = dlc_init_weights(m, 0);
    if (st != DLC_OK) return st;
  }
  for (int i = 0; i < m->params.n; i++) {
    const char *name = m->params.names[i];
    const Tensor *from = find_param(src->m, name);
    if (!from || !ir_type_eq(&from->type, &m->params.tensors[i].type))
      return api_fail(m, DLC_ERR_ARGUMENT, "dlcc: error: the source training step has no parameter '%s' of its type\n",
                      name);
    dlc_status st = dlc_train_set_param(dst, name, from->data, ir_tensor_nbytes(&from->type));
    if (st != DLC_OK) return st;
  }
  return DLC_OK;
}

static bool is_state_name(const char *name) { return strncmp(name, "dlcc.", 5) == 0; }

dlc_status dlc_train_save(dlc_train *t, const char *path, int with_state, int n_meta,
                          const char *const *meta_keys, const char *const *meta_values) {
  if (!t || !t->m || !path || n_meta < 0 || (n_meta && (!meta_keys || !meta_values))) return DLC_ERR_ARGUMENT;
  dlc_model *m = t->m;
  if (!m->g || !m->have_params)
    return api_fail(m, DLC_ERR_ARGUMENT, "dlcc: error: the training step has no weights bound yet\n");
  int n = m->params.n, nm = with_state ? n_meta + 1 : 0;
  RtTensorSet set = {0};
  set.names = calloc((size_t)n + 1, sizeof *set.names);
  set.tensors = calloc((size_t)n + 1, sizeof *set.tensors);
  set.meta_keys = calloc((size_t)nm + 1, sizeof *set.meta_keys);
  set.meta_values = calloc((size_t)nm + 1, sizeof *set.meta_values);
  dlc_status st = DLC_OK;
  if (!set.names || !set.tensors || !set.meta_keys || !set.meta_values) {
    st = api_fail(m, DLC_ERR_NOMEM, "dlcc: out of memory\n");
    goto done;
  }
  for (int i = 0; i < n; i++) {
    const char *name = m->params.names[i];
    if (!with_state && is_state_name(name)) continue;
    const Tensor *p = &m->params.tensors[i];
    RtTensor *r = &set.tensors[set.n];
    r->dtype = (RtDType)p->type.dtype;
    r->rank = p->type.rank;
    for (int d = 0; d < r->rank; d++) r->dims[d] = p->type.dims[d];
    r->data = p->data;
    r->nbytes = ir_tensor_nbytes(&p->type);
    set.names[set.n++] = (char *)name;
  }
  if (with_state) {
    set.meta_keys[0] = "dlcc.checkpoint";
    set.meta_values[0] = "1";
    for (int i = 0; i < n_meta; i++) {
      set.meta_keys[i + 1] = (char *)meta_keys[i];
      set.meta_values[i + 1] = (char *)meta_values[i];
    }
    set.n_meta = nm;
  }
  char err[1024];
  if (rt_safetensors_write(path, &set, err, sizeof err) != 0)
    st = api_fail(m, DLC_ERR_WEIGHTS, "dlcc: error: %s\n", err);
done:
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

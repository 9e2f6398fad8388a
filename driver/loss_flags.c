/* The loss flags that `dlcc --loss` (and dlcc train) share: takes
 * command-line words, returns a LossSpec for passes/loss.h's
 * pass_append_loss, or prints why a flag does not fit. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "runtime/tensorio.h"

const char driver_loss_usage[] =
    "  --loss=NAME        append a loss of output K against a new input 'target' before\n"
    "                     --grad: cross_entropy, nll, mse, l1, smooth_l1, huber,\n"
    "                     bce_with_logits, bce or kl_div (PyTorch's; docs/training.md);\n"
    "                     the outputs become the loss, named 'loss', then the model's\n"
    "  --loss-output=K    the model output the loss reads (default 0)\n"
    "  --reduction=R      mean (default) or sum over the batch; kl_div's batchmean too\n"
    "  --ignore-index=N   cross_entropy and nll: class index that adds nothing (-100)\n"
    "  --label-smoothing=E  cross_entropy: from 0 (default) to 1\n"
    "  --class-weights=W  cross_entropy and nll: a weight per class (PyTorch's weight=),\n"
    "                     as W1,W2,... or a 1-d FILE.npy\n"
    "  --pos-weight=W     bce_with_logits: the positives' weight (pos_weight=), one or one\n"
    "                     per element of the last axis, as W1,W2,... or a 1-d FILE.npy\n"
    "  --smooth-l1-beta=B smooth_l1: where it turns from squared to linear (default 1)\n"
    "  --huber-delta=D    huber: where it turns from squared to linear (default 1)\n"
    "  --log-target       kl_div: the target holds log-probabilities\n";

/* "1,2.5,0.5" or a 1-d .npy of f32 or f64 into *out (malloc'd). */
static bool weights_value(const char *flag, const char *v, float **out, int64_t *count) {
  size_t len = strlen(v);
  if (len > 4 && strcmp(v + len - 4, ".npy") == 0) {
    RtTensor t;
    char err[512];
    if (rt_npy_read(v, &t, err, sizeof err)) {
      fprintf(stderr, "dlcc: error: %s: %s\n", flag, err);
      return false;
    }
    int64_t n = t.rank == 1 ? t.dims[0] : 0;
    if (n <= 0 || (t.dtype != RT_F32 && t.dtype != RT_F64)) {
      fprintf(stderr, "dlcc: error: %s: %s holds %s of rank %d: expected a 1-d f32 or f64 array\n", flag, v,
              rt_dtype_name(t.dtype), t.rank);
      rt_tensor_free(&t);
      return false;
    }
    if (!(*out = malloc((size_t)n * sizeof **out))) {
      rt_tensor_free(&t);
      fprintf(stderr, "dlcc: error: out of memory\n");
      return false;
    }
    for (int64_t i = 0; i < n; i++)
      (*out)[i] = t.dtype == RT_F32 ? ((const float *)t.data)[i] : (float)((const double *)t.data)[i];
    rt_tensor_free(&t);
    *count = n;
    return true;
  }
  int64_t n = 1;
  for (const char *p = v; *p; p++) n += *p == ',';
  if (!(*out = malloc((size_t)n * sizeof **out))) {
    fprintf(stderr, "dlcc: error: out of memory\n");
    return false;
  }
  const char *p = v;
  for (int64_t i = 0; i < n; i++) {
    char *end;
    errno = 0;
    double x = strtod(p, &end);
    if (end == p || errno || !isfinite(x) || (*end && *end != ',')) {
      fprintf(stderr, "dlcc: error: %s expects numbers W1,W2,... or a FILE.npy, got '%s'\n", flag, v);
      free(*out);
      *out = NULL;
      return false;
    }
    (*out)[i] = (float)x;
    p = end + (*end == ',');
  }
  *count = n;
  return true;
}

/* The weights flags gave, which the process keeps to its end (a run
 * reads them until it exits): the last --class-weights, --pos-weight. */
static float *kept[2];

int driver_loss_option(const char *arg, DriverLoss *d) {
  static const char *const flags[] = {"--loss",          "--loss-output",    "--ignore-index", "--label-smoothing",
                                      "--smooth-l1-beta", "--huber-delta",   "--reduction",    "--class-weights",
                                      "--pos-weight"};
  if (strcmp(arg, "--log-target") == 0) {
    d->log_target = true;
    if (!d->first_flag) d->first_flag = arg;
    return 1;
  }
  const char *v = NULL;
  size_t k = 0;
  for (; k < sizeof flags / sizeof flags[0] && !(v = driver_eq_value(arg, flags[k])); k++)
    if (strcmp(arg, flags[k]) == 0) {
      fprintf(stderr, "dlcc: error: %s takes its value after '=': %s=%s\n", arg, arg, k ? "VALUE" : "NAME");
      return -1;
    }
  if (!v) return 0;
  char *end;
  switch (k) {
    case 0:
      if (!loss_from_name(v, &d->kind)) {
        fprintf(stderr, "dlcc: error: unknown loss '%s' (expected %s)\n", v, loss_names().s);
        return -1;
      }
      d->name = v;
      return 1;
    case 1:
      if (!driver_int_value(flags[k], v, 0, 1000000, "an output index (0 or more)", &d->output)) return -1;
      break;
    case 2:
      errno = 0;
      d->ignore_index = strtoll(v, &end, 10);
      if (*end || end == v || errno) {
        fprintf(stderr, "dlcc: error: --ignore-index expects an integer, got '%s'\n", v);
        return -1;
      }
      d->has_ignore = true;
      break;
    case 3:
      if (!driver_real_value(flags[k], v, 0, 1, "a number from 0 to 1", &d->label_smoothing)) return -1;
      d->has_smoothing = true;
      break;
    case 4:
      if (!driver_real_value(flags[k], v, 0, HUGE_VAL, "a number of 0 or more", &d->beta)) return -1;
      d->has_beta = true;
      break;
    case 5:
      if (!driver_real_value(flags[k], v, 0, HUGE_VAL, "a number more than 0", &d->delta)) return -1;
      if (d->delta <= 0) {
        fprintf(stderr, "dlcc: error: --huber-delta expects a number more than 0, got '%s'\n", v);
        return -1;
      }
      d->has_delta = true;
      break;
    case 6:
      if (strcmp(v, "mean") != 0 && strcmp(v, "sum") != 0 && strcmp(v, "batchmean") != 0) {
        fprintf(stderr, "dlcc: error: --reduction expects mean, sum or batchmean, got '%s'\n", v);
        return -1;
      }
      d->reduction_sum = strcmp(v, "sum") == 0;
      d->batchmean = strcmp(v, "batchmean") == 0;
      break;
    case 7:
      free(kept[0]);
      if (!weights_value(flags[k], v, &d->class_weight, &d->class_weight_count)) return -1;
      kept[0] = d->class_weight;
      break;
    default:
      free(kept[1]);
      if (!weights_value(flags[k], v, &d->pos_weight, &d->pos_weight_count)) return -1;
      kept[1] = d->pos_weight;
      break;
  }
  if (!d->first_flag) d->first_flag = arg;
  return 1;
}

bool driver_loss_check(const DriverLoss *d, LossSpec *out) {
  if (!d->name) {
    if (d->first_flag)
      fprintf(stderr, "dlcc: error: %.*s is for --loss=NAME\n", (int)strcspn(d->first_flag, "="), d->first_flag);
    return !d->first_flag;
  }
  struct {
    bool given;
    const char *flag;
    bool fits;
    const char *losses;
  } uses[] = {
      {d->has_ignore, "--ignore-index", d->kind == LOSS_CROSS_ENTROPY || d->kind == LOSS_NLL, "--loss=cross_entropy and --loss=nll"},
      {d->has_smoothing, "--label-smoothing", d->kind == LOSS_CROSS_ENTROPY, "--loss=cross_entropy"},
      {d->has_beta, "--smooth-l1-beta", d->kind == LOSS_SMOOTH_L1, "--loss=smooth_l1"},
      {d->has_delta, "--huber-delta", d->kind == LOSS_HUBER, "--loss=huber"},
      {d->class_weight != NULL, "--class-weights", d->kind == LOSS_CROSS_ENTROPY || d->kind == LOSS_NLL,
       "--loss=cross_entropy and --loss=nll"},
      {d->pos_weight != NULL, "--pos-weight", d->kind == LOSS_BCE_WITH_LOGITS, "--loss=bce_with_logits"},
      {d->batchmean, "--reduction=batchmean", d->kind == LOSS_KL_DIV, "--loss=kl_div"},
      {d->log_target, "--log-target", d->kind == LOSS_KL_DIV, "--loss=kl_div"},
  };
  for (size_t i = 0; i < sizeof uses / sizeof uses[0]; i++)
    if (uses[i].given && !uses[i].fits) {
      fprintf(stderr, "dlcc: error: %s is for %s, not --loss=%s\n", uses[i].flag, uses[i].losses, d->name);
      return false;
    }
  *out = loss_spec_default(d->kind);
  if (d->has_ignore) out->ignore_index = d->ignore_index;
  if (d->has_smoothing) out->label_smoothing = d->label_smoothing;
  if (d->has_beta) out->beta = d->beta;
  if (d->has_delta) out->delta = d->delta;
  if (d->reduction_sum) out->reduction = LOSS_SUM;
  if (d->batchmean) out->reduction = LOSS_BATCHMEAN;
  out->log_target = d->log_target;
  out->weight_input = d->class_weight_count;
  out->pos_weight_input = d->pos_weight_count;
  return true;
}

/* The loss flags that `dlcc --loss` (and dlcc train) share: takes
 * command-line words, returns a LossSpec for passes/loss.h's
 * pass_append_loss, or prints why a flag does not fit. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"

const char driver_loss_usage[] =
    "  --loss=NAME        append a loss of output K against a new input 'target' before\n"
    "                     --grad: cross_entropy, nll, mse, l1, smooth_l1 or\n"
    "                     bce_with_logits (PyTorch's, mean reduction; docs/training.md);\n"
    "                     the outputs become the loss, named 'loss', then the model's\n"
    "  --loss-output=K    the model output the loss reads (default 0)\n"
    "  --ignore-index=N   cross_entropy and nll: class index that adds nothing (-100)\n"
    "  --label-smoothing=E  cross_entropy: from 0 (default) to 1\n"
    "  --smooth-l1-beta=B smooth_l1: where it turns from squared to linear (default 1)\n";

int driver_loss_option(const char *arg, DriverLoss *d) {
  static const char *const flags[] = {"--loss", "--loss-output", "--ignore-index", "--label-smoothing",
                                      "--smooth-l1-beta"};
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
        fprintf(stderr, "dlcc: error: unknown loss '%s' (expected cross_entropy, nll, mse, l1, smooth_l1 or "
                "bce_with_logits)\n", v);
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
    default:
      if (!driver_real_value(flags[k], v, 0, HUGE_VAL, "a number of 0 or more", &d->beta)) return -1;
      d->has_beta = true;
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
  return true;
}

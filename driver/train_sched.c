/* dlcc train's learning-rate schedule (train.h): the text of --schedule
 * into a TrainSchedule, and the rate of each step from it, as the closed
 * forms of torch.optim.lr_scheduler's StepLR, CosineAnnealingLR and
 * LinearLR give it (stepped once per optimizer step). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/train.h"

/* The fields of one part ("step:10:0.5") split at ':'. */
static int split_fields(char *part, char **f, int max) {
  int n = 0;
  for (char *save = NULL, *tok = strtok_r(part, ":", &save); tok; tok = strtok_r(NULL, ":", &save))
    if (n < max + 1) f[n++] = tok;
  return n;
}

static bool parse_int(const char *s, int64_t *v) {
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  *v = x;
  return !errno && end != s && !*end && x > 0;
}

static bool parse_real(const char *s, double *v) {
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return !errno && end != s && !*end && isfinite(*v);
}

static bool part_error(const char *part, char *err, size_t errlen) {
  snprintf(err, errlen,
           "--schedule: '%s' is not step:N:GAMMA, cosine[:T_MAX[:ETA_MIN]] or warmup:N[:START] "
           "(N and T_MAX whole numbers of steps > 0)",
           part);
  return false;
}

static bool parse_part(char *part, TrainSchedule *s, char *err, size_t errlen) {
  char copy[128];
  snprintf(copy, sizeof copy, "%s", part);
  char *f[4];
  int n = split_fields(part, f, 3);
  if (n == 0) return part_error(copy, err, errlen);
  if (strcmp(f[0], "step") == 0 && !s->step_size && !s->cosine) {
    if (n != 3 || !parse_int(f[1], &s->step_size) || !parse_real(f[2], &s->gamma))
      return part_error(copy, err, errlen);
  } else if (strcmp(f[0], "cosine") == 0 && !s->step_size && !s->cosine) {
    s->cosine = true;
    if (n > 3 || (n >= 2 && !parse_int(f[1], &s->t_max)) || (n == 3 && !parse_real(f[2], &s->eta_min)))
      return part_error(copy, err, errlen);
  } else if (strcmp(f[0], "warmup") == 0 && !s->warmup) {
    s->warmup_start = 1.0 / 3.0;
    if (n > 3 || n < 2 || !parse_int(f[1], &s->warmup) ||
        (n == 3 && (!parse_real(f[2], &s->warmup_start) || s->warmup_start <= 0 || s->warmup_start > 1)))
      return part_error(copy, err, errlen);
  } else {
    snprintf(err, errlen,
             "--schedule: '%s': expected step, cosine or warmup, at most one warmup and one of step and cosine",
             copy);
    return false;
  }
  return true;
}

bool train_sched_parse(const char *text, TrainSchedule *s, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  char buf[256];
  if (strlen(text) >= sizeof buf) {
    snprintf(err, errlen, "--schedule: too long");
    return false;
  }
  strcpy(buf, text);
  char *save = NULL;
  for (char *part = strtok_r(buf, ",", &save); part; part = strtok_r(NULL, ",", &save))
    if (!parse_part(part, s, err, errlen)) return false;
  return true;
}

double train_sched_lr(const TrainSchedule *s, double base, int64_t t, int64_t total_steps) {
  double lr = base;
  if (s->step_size) lr = base * pow(s->gamma, (double)(t / s->step_size));
  if (s->cosine) {
    int64_t tmax = s->t_max ? s->t_max : total_steps;
    if (tmax < 1) tmax = 1;
    lr = s->eta_min + (base - s->eta_min) * (1 + cos(M_PI * (double)t / (double)tmax)) / 2;
  }
  if (s->warmup) {
    int64_t k = t < s->warmup ? t : s->warmup;
    lr *= s->warmup_start + (1 - s->warmup_start) * (double)k / (double)s->warmup;
  }
  return lr;
}

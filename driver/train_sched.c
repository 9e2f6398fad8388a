/* dlcc train's learning-rate schedule (train.h): the text of --schedule
 * into a TrainSchedule, and the rate of each step from it, as the closed
 * forms of torch.optim.lr_scheduler's StepLR, MultiStepLR,
 * ExponentialLR, CosineAnnealingLR, PolynomialLR, LinearLR, OneCycleLR
 * and CyclicLR give it (stepped once per optimizer step). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
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

/* A whole number of 0 or more (parse_count), of 1 or more (parse_int). */
static bool parse_count(const char *s, int64_t *v) {
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  *v = x;
  return !errno && end != s && !*end && x >= 0;
}

static bool parse_int(const char *s, int64_t *v) { return parse_count(s, v) && *v > 0; }

static bool parse_real(const char *s, double *v) {
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return !errno && end != s && !*end && isfinite(*v);
}

static const char schedule_forms[] =
    "step:N:GAMMA, multistep:M1/M2/...:GAMMA, exp:GAMMA, cosine[:T_MAX[:ETA_MIN]], "
    "cosine_restarts:T0[:TMULT[:ETA_MIN]], poly[:T[:POWER]], linear:START:END[:T], "
    "plateau[:PATIENCE[:FACTOR[:MIN_LR]]], onecycle[:PCT_START[:DIV[:FINAL_DIV]]], "
    "cyclic:BASE_LR:UP[/DOWN][:MODE[:GAMMA]] or warmup:N[:START]";

static bool part_error(const char *part, char *err, size_t errlen) {
  snprintf(err, errlen,
           "--schedule: '%s' is not %s (N, M, T_MAX, T0, TMULT, T, UP and DOWN whole numbers > 0, PATIENCE >= 0, "
           "MODE triangular, triangular2 or exp_range)",
           part, schedule_forms);
  return false;
}

/* "30/60/90": increasing steps. */
static bool parse_milestones(char *text, TrainSchedule *s) {
  s->n_milestones = 0;
  for (char *save = NULL, *tok = strtok_r(text, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
    if (s->n_milestones == SCHED_MAX_MILESTONES || !parse_int(tok, &s->milestones[s->n_milestones]) ||
        (s->n_milestones && s->milestones[s->n_milestones] <= s->milestones[s->n_milestones - 1]))
      return false;
    s->n_milestones++;
  }
  return s->n_milestones > 0;
}

/* CyclicLR's "UP[/DOWN]" and "MODE". */
static bool parse_cyclic(char **f, int n, TrainSchedule *s) {
  static const char *const modes[] = {"triangular", "triangular2", "exp_range"};
  s->gamma = 1;
  char *down = strchr(f[2], '/');
  if (down) *down++ = 0;
  if (!parse_real(f[1], &s->base_lr) || s->base_lr < 0 || !parse_int(f[2], &s->step_up) ||
      !(down ? parse_int(down, &s->step_down) : (s->step_down = s->step_up, true)))
    return false;
  if (n >= 4) {
    size_t k = 0;
    while (k < sizeof modes / sizeof modes[0] && strcmp(f[3], modes[k]) != 0) k++;
    if (k == sizeof modes / sizeof modes[0]) return false;
    s->mode = (CyclicMode)k;
  }
  return n < 5 || (s->mode == CYCLIC_EXP_RANGE && parse_real(f[4], &s->gamma) && s->gamma > 0);
}

/* One decay's fields f[1..n) into s. */
static bool parse_decay(SchedKind kind, char **f, int n, TrainSchedule *s) {
  s->kind = kind;
  switch (kind) {
    case SCHED_STEP: return n == 3 && parse_int(f[1], &s->step_size) && parse_real(f[2], &s->gamma);
    case SCHED_MULTISTEP: return n == 3 && parse_milestones(f[1], s) && parse_real(f[2], &s->gamma);
    case SCHED_EXP: return n == 2 && parse_real(f[1], &s->gamma);
    case SCHED_COSINE:
      return n <= 3 && (n < 2 || parse_int(f[1], &s->t_max)) && (n < 3 || parse_real(f[2], &s->eta_min));
    case SCHED_COSINE_RESTARTS:
      s->t_mult = 1;
      return n >= 2 && n <= 4 && parse_int(f[1], &s->t_0) && (n < 3 || parse_int(f[2], &s->t_mult)) &&
             (n < 4 || parse_real(f[3], &s->eta_min));
    case SCHED_POLY:
      s->power = 1;
      return n <= 3 && (n < 2 || parse_int(f[1], &s->t_max)) && (n < 3 || parse_real(f[2], &s->power));
    case SCHED_LINEAR:
      return n >= 3 && n <= 4 && parse_real(f[1], &s->start_factor) && parse_real(f[2], &s->end_factor) &&
             s->start_factor > 0 && s->start_factor <= 1 && s->end_factor >= 0 && s->end_factor <= 1 &&
             (n < 4 || parse_int(f[3], &s->t_max));
    case SCHED_PLATEAU:
      s->patience = 10, s->factor = 0.1, s->min_lr = 0;
      return n <= 4 && (n < 2 || parse_count(f[1], &s->patience)) &&
             (n < 3 || (parse_real(f[2], &s->factor) && s->factor > 0 && s->factor < 1)) &&
             (n < 4 || (parse_real(f[3], &s->min_lr) && s->min_lr >= 0));
    case SCHED_ONECYCLE:
      s->pct_start = 0.3, s->div_factor = 25, s->final_div = 1e4;
      return n <= 4 && (n < 2 || (parse_real(f[1], &s->pct_start) && s->pct_start > 0 && s->pct_start < 1)) &&
             (n < 3 || (parse_real(f[2], &s->div_factor) && s->div_factor > 0)) &&
             (n < 4 || (parse_real(f[3], &s->final_div) && s->final_div > 0));
    case SCHED_CYCLIC: return n >= 3 && n <= 5 && parse_cyclic(f, n, s);
    case SCHED_CONSTANT: break;
  }
  return false;
}

static bool parse_part(char *part, TrainSchedule *s, char *err, size_t errlen) {
  static const struct {
    const char *name;
    SchedKind kind;
  } decays[] = {{"step", SCHED_STEP},     {"multistep", SCHED_MULTISTEP}, {"exp", SCHED_EXP},
                {"cosine", SCHED_COSINE}, {"cosine_restarts", SCHED_COSINE_RESTARTS},
                {"poly", SCHED_POLY},     {"linear", SCHED_LINEAR},   {"plateau", SCHED_PLATEAU},
                {"onecycle", SCHED_ONECYCLE}, {"cyclic", SCHED_CYCLIC}};
  char copy[128];
  snprintf(copy, sizeof copy, "%s", part);
  char *f[6];
  int n = split_fields(part, f, 5);
  if (n == 0 || n > 5) return part_error(copy, err, errlen);
  if (strcmp(f[0], "warmup") == 0 && !s->warmup) {
    s->warmup_start = 1.0 / 3.0;
    if (n > 3 || n < 2 || !parse_int(f[1], &s->warmup) ||
        (n == 3 && (!parse_real(f[2], &s->warmup_start) || s->warmup_start < 0 || s->warmup_start > 1)))
      return part_error(copy, err, errlen);
    return true;
  }
  for (size_t k = 0; k < sizeof decays / sizeof decays[0]; k++)
    if (strcmp(f[0], decays[k].name) == 0 && s->kind == SCHED_CONSTANT)
      return parse_decay(decays[k].kind, f, n, s) || part_error(copy, err, errlen);
  snprintf(err, errlen,
           "--schedule: '%s': expected %s, at most one warmup and one of the others", copy, schedule_forms);
  return false;
}

bool train_sched_parse(const char *text, TrainSchedule *s, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  char buf[256];
  if (strlen(text) >= sizeof buf) {
    snprintf(err, errlen, "--schedule: too long");
    return false;
  }
  strcpy(buf, text);
  /* "warmup:N+DECAY": the decay starts when the warmup ends */
  char *then = strchr(buf, '+');
  if (then) {
    *then++ = 0;
    s->sequential = true;
    if (strncmp(buf, "warmup:", 7) != 0 || strchr(buf, ',') || strchr(then, ',') || strchr(then, '+') ||
        strncmp(then, "warmup", 6) == 0) {
      snprintf(err, errlen, "--schedule: '%s': '+' joins a warmup:N[:START] and one decay after it", text);
      return false;
    }
    if (!parse_part(buf, s, err, errlen) || !parse_part(then, s, err, errlen)) return false;
  } else {
    char *save = NULL;
    for (char *part = strtok_r(buf, ",", &save); part; part = strtok_r(NULL, ",", &save))
      if (!parse_part(part, s, err, errlen)) return false;
  }
  if ((s->kind == SCHED_PLATEAU || s->kind == SCHED_ONECYCLE || s->kind == SCHED_CYCLIC) && s->warmup) {
    snprintf(err, errlen, "--schedule: '%s': %s takes no warmup", text,
             s->kind == SCHED_PLATEAU    ? "plateau steps by the validation loss and"
             : s->kind == SCHED_ONECYCLE ? "onecycle warms up itself and"
                                         : "cyclic rises from its base rate itself and");
    return false;
  }
  return true;
}

void train_plateau_start(TrainPlateau *p, double base) { *p = (TrainPlateau){.lr = base, .best = INFINITY}; }

bool train_plateau_step(const TrainSchedule *s, TrainPlateau *p, double metric) {
  /* PyTorch's mode "min", threshold_mode "rel", threshold 1e-4 */
  if (metric < p->best * (1 - 1e-4)) {
    p->best = metric;
    p->bad = 0;
  } else {
    p->bad++;
  }
  if (p->bad <= s->patience) return false;
  p->bad = 0;
  double next = fmax(p->lr * s->factor, s->min_lr);
  if (!(p->lr - next > 1e-8)) return false; /* PyTorch's eps: a cut too small to take */
  p->lr = next;
  return true;
}

/* OneCycleLR's rate and momentum at step t of total (two phases, cosine
 * annealing, as torch.optim.lr_scheduler computes them). */
static void onecycle(const TrainSchedule *s, double max_lr, int64_t t, int64_t total, double *lr, double *m) {
  double initial = max_lr / s->div_factor, min_lr = initial / s->final_div;
  double end1 = s->pct_start * (double)total - 1, end2 = (double)total - 1, step = (double)t;
  double from_lr = initial, to_lr = max_lr, from_m = SCHED_MAX_MOMENTUM, to_m = 0.85, start = 0, end = end1;
  if (step > end1) from_lr = max_lr, to_lr = min_lr, from_m = 0.85, to_m = SCHED_MAX_MOMENTUM, start = end1, end = end2;
  double pct = (step - start) / (end - start), c = cos(M_PI * pct) + 1;
  *lr = to_lr + (from_lr - to_lr) / 2.0 * c;
  *m = to_m + (from_m - to_m) / 2.0 * c;
}

/* CyclicLR's rate (from the base to max_lr) and momentum (from 0.9 to
 * 0.8) at step t, as torch.optim.lr_scheduler computes them. */
static void cyclic(const TrainSchedule *s, double max_lr, int64_t t, double *lr, double *m) {
  double total = (double)(s->step_up + s->step_down), ratio = (double)s->step_up / total, step = (double)t;
  double cycle = floor(1 + step / total), x = 1 + step / total - cycle;
  double factor = x <= ratio ? x / ratio : (x - 1) / (ratio - 1);
  double scale = s->mode == CYCLIC_TRIANGULAR    ? 1
                 : s->mode == CYCLIC_TRIANGULAR2 ? 1 / pow(2.0, cycle - 1)
                                                 : pow(s->gamma, step);
  *lr = s->base_lr + (max_lr - s->base_lr) * factor * scale;
  *m = 0.9 - (0.9 - 0.8) * factor * scale;
}

bool train_sched_cycles_momentum(const TrainSchedule *s) {
  return s->kind == SCHED_ONECYCLE || s->kind == SCHED_CYCLIC;
}

bool train_sched_momentum(const TrainSchedule *s, int64_t t, int64_t total_steps, double *momentum) {
  double lr;
  if (s->kind == SCHED_ONECYCLE) onecycle(s, 1, t, total_steps, &lr, momentum);
  else if (s->kind == SCHED_CYCLIC) cyclic(s, 1, t, &lr, momentum);
  return train_sched_cycles_momentum(s);
}

double train_sched_lr(const TrainSchedule *s, double base, int64_t t, int64_t total_steps) {
  double lr = base;
  if (s->sequential) {
    if (t < s->warmup) return base * (s->warmup_start + (1 - s->warmup_start) * (double)t / (double)s->warmup);
    t -= s->warmup;
    total_steps -= s->warmup;
  }
  int64_t span = s->t_max ? s->t_max : total_steps > 0 ? total_steps : 1;
  double done = (double)(t < span ? t : span) / (double)span; /* of the span, up to 1 */
  switch (s->kind) {
    case SCHED_CONSTANT: break;
    case SCHED_STEP: lr = base * pow(s->gamma, (double)(t / s->step_size)); break;
    case SCHED_MULTISTEP: {
      int passed = 0;
      while (passed < s->n_milestones && s->milestones[passed] <= t) passed++;
      lr = base * pow(s->gamma, passed);
      break;
    }
    case SCHED_EXP: lr = base * pow(s->gamma, (double)t); break;
    case SCHED_COSINE: lr = s->eta_min + (base - s->eta_min) * (1 + cos(M_PI * (double)t / (double)span)) / 2; break;
    case SCHED_COSINE_RESTARTS: {
      /* the cycle t is in: cycle i spans t_0 t_mult^i steps */
      int64_t start = 0, len = s->t_0;
      while (t - start >= len && len <= INT64_MAX / s->t_mult / 2) start += len, len *= s->t_mult;
      double cur = (double)(t - start) / (double)len;
      lr = s->eta_min + (base - s->eta_min) * (1 + cos(M_PI * cur)) / 2;
      break;
    }
    case SCHED_POLY: lr = base * pow(1 - done, s->power); break;
    case SCHED_LINEAR: lr = base * (s->start_factor + (s->end_factor - s->start_factor) * done); break;
    case SCHED_PLATEAU: break;
    case SCHED_ONECYCLE: {
      double m;
      onecycle(s, base, t, total_steps, &lr, &m);
      break;
    }
    case SCHED_CYCLIC: {
      double m;
      cyclic(s, base, t, &lr, &m);
      break;
    }
  }
  if (s->warmup && !s->sequential) {
    int64_t k = t < s->warmup ? t : s->warmup;
    lr *= s->warmup_start + (1 - s->warmup_start) * (double)k / (double)s->warmup;
  }
  return lr;
}

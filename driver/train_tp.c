/* Takes a tensor-parallel training step on every rank and gathers its
 * weights whole into rank 0's whole step (train_tp.h): each sharded
 * parameter (and its optimizer state) part by part from the rank that
 * owns it; each split but unsharded one likewise, every element no rank
 * owns checked to be the same bits on every rank, the claim that
 * replicated parameters need no all-reduce of their gradients (the
 * ranks compute them from the same values in the same order). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/train_tp.h"

/* The owner's part of every split of param into mine; covered marks the
 * elements some rank owns. */
static void take_parts(dlc_model *m, const dlc_tensor_info *info, int ranks, const char *all, char *mine,
                       bool *covered) {
  int64_t numel = 1;
  for (int k = 0; k < info->rank; k++) numel *= info->dims[k];
  size_t es = numel ? info->nbytes / (size_t)numel : 0;
  for (int i = 0; i < dlc_num_tensor_splits(m); i++) {
    dlc_tensor_split s;
    dlc_tensor_split_info(m, i, &s);
    if (strcmp(s.param, info->name) || s.axis >= info->rank) continue;
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < s.axis; k++) outer *= info->dims[k];
    for (int k = s.axis + 1; k < info->rank; k++) inner *= info->dims[k];
    int64_t share = s.len / ranks, dim = info->dims[s.axis];
    for (int q = 0; q < ranks; q++)
      for (int64_t o = 0; o < outer; o++) {
        int64_t at = (o * dim + s.start + q * share) * inner;
        size_t off = (size_t)at * es, n = (size_t)(share * inner) * es;
        memcpy(mine + off, all + (size_t)q * info->nbytes + off, n);
        memset(covered + at, 1, (size_t)(share * inner));
      }
  }
}

bool train_tp_sharded(dlc_model *m, const char *name, int *axis) {
  for (int i = 0; i < dlc_num_tensor_splits(m); i++) {
    dlc_tensor_split s;
    if (dlc_tensor_split_info(m, i, &s) == DLC_OK && s.sharded && strcmp(s.param, name) == 0) {
      if (axis) *axis = s.axis;
      return true;
    }
  }
  return false;
}

static uint64_t param_bytes(dlc_train *t) {
  uint64_t n = 0;
  dlc_tensor_info info;
  for (int i = 0; i < dlc_train_num_params(t); i++)
    if (dlc_train_param_info(t, i, &info) == DLC_OK) n += info.nbytes;
  return n;
}

void train_tp_report(dlc_train *t, dlc_train *whole) {
  uint64_t w, a;
  printf("tensor parallel: rank 0 holds %" PRIu64 " of the %" PRIu64 " bytes of parameters and optimizer state",
         param_bytes(t), param_bytes(whole));
  if (dlc_plan_memory(dlc_train_model(t), &w, &a) == DLC_OK)
    printf("; its plan: weights %" PRIu64 " bytes, arena %" PRIu64 " bytes", w, a);
  printf("\n");
}

/* Split but not sharded: every element no rank owns must be the same on
 * every rank (all holds each rank's whole tensor). */
static bool check_replicated(const dlc_tensor_info *info, int ranks, const char *all, const bool *covered, char *err,
                             size_t errlen) {
  int64_t numel = 1;
  for (int k = 0; k < info->rank; k++) numel *= info->dims[k];
  size_t es = numel ? info->nbytes / (size_t)numel : 0;
  for (int q = 1; q < ranks; q++)
    for (int64_t e = 0; e < numel; e++)
      if (!covered[e] && memcmp(all + (size_t)e * es, all + (size_t)q * info->nbytes + (size_t)e * es, es)) {
        snprintf(err, errlen,
                 "tensor parallel: the replicated %s differs between rank 0 and rank %d at element %" PRId64,
                 info->name, q, e);
        return false;
      }
  return true;
}

/* Param info of t whole on rank 0's whole (from all, every rank's bytes
 * of it); the checks on every rank. */
static bool assemble(Dist *d, dlc_model *m, dlc_model *wm, const dlc_tensor_info *info, char *all, char *mine,
                     char *err, size_t errlen) {
  int axis;
  if (train_tp_sharded(m, info->name, &axis)) {
    if (!wm) return true;
    int64_t dims[DLC_MAX_RANK];
    memcpy(dims, info->dims, sizeof dims);
    dims[axis] *= d->size;
    char *whole = malloc(info->nbytes * (size_t)d->size + 1);
    if (!whole) return snprintf(err, errlen, "out of memory gathering %s", info->name), false;
    for (int q = 0; q < d->size; q++)
      dlc_weight_part(m, info->name, q, info->rank, dims, whole, all + (size_t)q * info->nbytes, 1);
    bool ok = dlc_set_weight(wm, info->name, whole, info->nbytes * (size_t)d->size) == DLC_OK;
    if (!ok) snprintf(err, errlen, "%s", dlc_error(wm));
    free(whole);
    return ok;
  }
  int64_t numel = 1;
  for (int k = 0; k < info->rank; k++) numel *= info->dims[k];
  bool *covered = calloc((size_t)numel + 1, 1);
  if (!covered) return snprintf(err, errlen, "out of memory gathering %s", info->name), false;
  take_parts(m, info, d->size, all, mine, covered);
  bool ok = check_replicated(info, d->size, all, covered, err, errlen);
  free(covered);
  if (ok && wm && dlc_set_weight(wm, info->name, mine, info->nbytes) != DLC_OK) {
    snprintf(err, errlen, "%s", dlc_error(wm));
    ok = false;
  }
  return ok;
}

bool train_tp_gather(Dist *d, dlc_train *t, dlc_train *whole, char *err, size_t errlen) {
  dlc_model *m = dlc_train_model(t), *wm = whole ? dlc_train_model(whole) : NULL;
  bool ok = true;
  for (int i = 0; ok && i < dlc_train_num_params(t); i++) {
    dlc_tensor_info info;
    if (dlc_train_param_info(t, i, &info) != DLC_OK) return snprintf(err, errlen, "no parameter %d", i), false;
    char *mine = malloc(info.nbytes + 1), *all = malloc(info.nbytes * (size_t)d->size + 1);
    if (!mine || !all) {
      snprintf(err, errlen, "out of memory gathering %s", info.name);
      ok = false;
    } else if (dlc_get_weight(m, info.name, mine, info.nbytes) != DLC_OK) {
      snprintf(err, errlen, "%s", dlc_error(m));
      ok = false;
    } else if (dist_allgather(d, mine, all, info.nbytes) != DIST_OK) {
      snprintf(err, errlen, "%s", d->err);
      ok = false;
    }
    ok = ok && assemble(d, m, wm, &info, all, mine, err, errlen);
    free(mine), free(all);
  }
  return ok;
}

/* Takes a tensor-parallel training step on every rank and makes each
 * rank's weights whole (train_tp.h): every split parameter (and its
 * optimizer state) gathered part by part from the rank that owns it, and
 * every element no rank owns checked to be the same bits on every rank,
 * the claim that replicated parameters need no all-reduce of their
 * gradients (the ranks compute them from the same values in the same
 * order). */
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

bool train_tp_gather(Dist *d, dlc_train *t, char *err, size_t errlen) {
  dlc_model *m = dlc_train_model(t);
  bool ok = true;
  for (int i = 0; ok && i < dlc_train_num_params(t); i++) {
    dlc_tensor_info info;
    if (dlc_train_param_info(t, i, &info) != DLC_OK) return snprintf(err, errlen, "no parameter %d", i), false;
    int64_t numel = 1;
    for (int k = 0; k < info.rank; k++) numel *= info.dims[k];
    char *mine = malloc(info.nbytes + 1), *all = malloc(info.nbytes * (size_t)d->size + 1);
    bool *covered = calloc((size_t)numel + 1, 1);
    if (!mine || !all || !covered) {
      snprintf(err, errlen, "out of memory gathering %s", info.name);
      ok = false;
    } else if (dlc_get_weight(m, info.name, mine, info.nbytes) != DLC_OK) {
      snprintf(err, errlen, "%s", dlc_error(m));
      ok = false;
    } else if (dist_allgather(d, mine, all, info.nbytes) != DIST_OK) {
      snprintf(err, errlen, "%s", d->err);
      ok = false;
    }
    if (ok) {
      take_parts(m, &info, d->size, all, mine, covered);
      size_t es = numel ? info.nbytes / (size_t)numel : 0;
      for (int q = 1; ok && q < d->size; q++)
        for (int64_t e = 0; ok && e < numel; e++)
          if (!covered[e] && memcmp(all + (size_t)e * es, all + (size_t)q * info.nbytes + (size_t)e * es, es)) {
            snprintf(err, errlen,
                     "tensor parallel: the replicated %s differs between rank 0 and rank %d at element %" PRId64,
                     info.name, q, e);
            ok = false;
          }
      if (ok && dlc_set_weight(m, info.name, mine, info.nbytes) != DLC_OK) {
        snprintf(err, errlen, "%s", dlc_error(m));
        ok = false;
      }
    }
    free(mine), free(all), free(covered);
  }
  return ok;
}

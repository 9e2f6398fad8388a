/* The next batch's samples read while this one trains (train.h): one
 * thread, one set of buffers, one batch ahead.  Streamed data (a file
 * read per batch) would otherwise make every step wait for the disk;
 * with the read done during the step before, it waits only when the
 * disk is slower than the step.  The thread reads the arrays'
 * descriptors (pread: no shared offset) and writes its own buffers; the
 * batch's owner takes them only after joining it. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/train.h"

struct TrainPrefetch {
  const TrainData *d;
  void **bufs; /* per array: a batch of rows */
  pthread_t thread;
  bool running;
  /* the batch in flight or read: samples order[0..n) */
  const int64_t *order;
  int64_t n;
  bool ok;
  char err[1024];
  int64_t hits, takes;
};

TrainPrefetch *train_prefetch_new(const TrainData *d, int64_t rows) {
  TrainPrefetch *p = calloc(1, sizeof *p);
  if (!p || !(p->bufs = calloc((size_t)d->n, sizeof *p->bufs))) {
    free(p);
    return NULL;
  }
  p->d = d;
  for (int i = 0; i < d->n; i++)
    if (!(p->bufs[i] = malloc(d->a[i].sample_bytes * (size_t)(rows > 0 ? rows : 1)))) {
      train_prefetch_free(p);
      return NULL;
    }
  return p;
}

static void *read_batch(void *arg) {
  TrainPrefetch *p = arg;
  p->ok = true;
  for (int i = 0; p->ok && i < p->d->n; i++)
    p->ok = train_data_gather(&p->d->a[i], p->order, p->n, 0, p->bufs[i], p->err, sizeof p->err);
  return NULL;
}

static void join(TrainPrefetch *p) {
  if (!p->running) return;
  pthread_join(p->thread, NULL);
  p->running = false;
}

void train_prefetch_start(TrainPrefetch *p, const int64_t *order, int64_t n) {
  join(p);
  p->order = order, p->n = n;
  /* no thread to be had: the batch is read when it is taken */
  p->running = pthread_create(&p->thread, NULL, read_batch, p) == 0;
  if (!p->running) p->order = NULL;
}

bool train_prefetch_take(TrainPrefetch *p, const int64_t *order, int64_t n, void *const **bufs, char *err,
                         size_t errlen) {
  join(p);
  bool mine = p->order == order && p->n == n;
  p->order = NULL;
  *bufs = NULL;
  p->takes++;
  if (!mine) return true;
  p->hits++;
  if (!p->ok) return snprintf(err, errlen, "%s", p->err), false;
  *bufs = p->bufs;
  return true;
}

void train_prefetch_count(const TrainPrefetch *p, int64_t *hits, int64_t *takes) {
  *hits = p->hits, *takes = p->takes;
}

void train_prefetch_free(TrainPrefetch *p) {
  if (!p) return;
  join(p);
  for (int i = 0; p->bufs && i < p->d->n; i++) free(p->bufs[i]);
  free(p->bufs);
  free(p);
}

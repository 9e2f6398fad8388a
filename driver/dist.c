/* Takes the environment of an MPI launch and gives `dlcc train` its rank,
 * world size and deadline-bounded collectives (dist.h says the contract).
 * Every collective is nonblocking and polled: MPI's blocking calls would
 * wait forever for a rank that died or hangs, and a job that hangs is
 * worse than one that stops with a message naming the rank. */
#include "config.h"

#include "driver/dist.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

static bool launched_by_mpi(void) {
  const char *v[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++)
    if (getenv(v[i])) return true;
  return false;
}

#ifdef HAVE_MPI

typedef struct DistMsg {
  int32_t failed;
  char msg[DIST_MSG];
} DistMsg;

/* The communicator of d: a group's (dist_split) or the world's. */
static MPI_Comm comm_of(const Dist *d) { return d->group ? *(MPI_Comm *)d->group : MPI_COMM_WORLD; }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static DistStatus mpi_fail(Dist *d, const char *what, int rc) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
  snprintf(d->err, sizeof d->err, "rank %d: %s failed: %s", d->world_rank, what, s);
  d->broken = true;
  return DIST_ERROR;
}

/* Polls r until it completes or the deadline passes.  A short sleep
 * between tests keeps a waiting rank from taking a core from the ranks
 * still computing (they share the machine's cores under
 * --oversubscribe). */
static DistStatus wait_deadline(Dist *d, MPI_Request *r, const char *what) {
  double end = now_s() + d->timeout;
  struct timespec nap = {0, 100000};
  for (;;) {
    int done = 0;
    int rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(d, what, rc);
    if (done) return DIST_OK;
    if (now_s() > end) {
      snprintf(d->err, sizeof d->err,
               "rank %d: %s timed out after %g s waiting for the other ranks "
               "(one of them died, hangs or is much slower; --dist-timeout=S sets the limit)",
               d->world_rank, what, d->timeout);
      d->broken = true;
      return DIST_TIMEOUT;
    }
    nanosleep(&nap, NULL);
  }
}

bool dist_init(Dist *d, double timeout) {
  memset(d, 0, sizeof *d);
  d->size = 1;
  d->timeout = timeout;
  if (!launched_by_mpi()) return true;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    /* funneled: dlcc train's read-ahead thread runs beside MPI, never in it */
    int provided, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
      snprintf(d->err, sizeof d->err, "MPI_Init failed (error %d)", rc);
      return false;
    }
    d->mpi = true;
  }
  /* Errors come back as codes, so each becomes a message with the rank. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &d->size);
  d->world_rank = d->rank;
  return true;
}

DistStatus dist_check(Dist *d, bool ok, const char *msg) {
  if (d->size == 1) return DIST_OK;
  DistMsg mine = {.failed = !ok};
  if (!ok) snprintf(mine.msg, sizeof mine.msg, "%s", msg ? msg : "failed");
  DistMsg *all = calloc((size_t)d->size, sizeof *all);
  if (!all) {
    snprintf(d->err, sizeof d->err, "rank %d: out of memory for the status exchange", d->world_rank);
    return DIST_ERROR;
  }
  MPI_Request r;
  int rc = MPI_Iallgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE,
                          comm_of(d), &r);
  DistStatus st = rc == MPI_SUCCESS ? wait_deadline(d, &r, "the status exchange")
                                    : mpi_fail(d, "MPI_Iallgather", rc);
  for (int i = 0; st == DIST_OK && i < d->size; i++)
    if (all[i].failed) {
      all[i].msg[DIST_MSG - 1] = 0;
      snprintf(d->err, sizeof d->err, "rank %d: %s", i, all[i].msg);
      d->peer_failed = true;
      d->failed_rank = i;
      st = DIST_PEER_FAILED;
    }
  free(all);
  return st;
}

DistStatus dist_bcast(Dist *d, void *buf, size_t bytes) {
  if (d->size == 1) return DIST_OK;
  DistStatus st = dist_check(d, true, NULL);
  if (st != DIST_OK) return st;
  for (size_t off = 0; off < bytes;) {
    size_t n = bytes - off < (size_t)INT_MAX ? bytes - off : (size_t)INT_MAX;
    MPI_Request r;
    int rc = MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, 0, comm_of(d), &r);
    if (rc != MPI_SUCCESS) return mpi_fail(d, "MPI_Ibcast", rc);
    if ((st = wait_deadline(d, &r, "the broadcast from rank 0")) != DIST_OK) return st;
    off += n;
  }
  return DIST_OK;
}

typedef struct DistPending {
  float *x, *all; /* all: every rank's x, by rank */
  size_t n;
  MPI_Request req;
  bool done, sum;
} DistPending;

DistStatus dist_start(Dist *d, float *x, size_t n, bool sum) {
  if (d->size == 1) return DIST_OK;
  DistStatus st;
  if (!d->n_pending && (st = dist_check(d, true, NULL)) != DIST_OK) return st;
  if (!d->n_pending) d->round_start = d->round_end = now_s();
  if (n > (size_t)INT_MAX / (size_t)d->size) {
    snprintf(d->err, sizeof d->err, "rank %d: an all-reduce of %zu values is more than one gather takes",
             d->world_rank, n);
    return DIST_ERROR;
  }
  if (d->n_pending == d->cap_pending) {
    int cap = d->cap_pending ? 2 * d->cap_pending : 16;
    DistPending *p = realloc(d->pending, sizeof *p * (size_t)cap);
    if (!p) goto oom;
    d->pending = p, d->cap_pending = cap;
  }
  DistPending *p = &d->pending[d->n_pending];
  *p = (DistPending){.x = x, .n = n, .sum = sum, .all = malloc(n * (size_t)d->size * sizeof *p->all + 1)};
  if (!p->all) goto oom;
  int rc = MPI_Iallgather(x, (int)n, MPI_FLOAT, p->all, (int)n, MPI_FLOAT, comm_of(d), &p->req);
  if (rc != MPI_SUCCESS) {
    free(p->all);
    return mpi_fail(d, "MPI_Iallgather", rc);
  }
  d->n_pending++;
  return DIST_OK;
oom:
  snprintf(d->err, sizeof d->err, "rank %d: out of memory for an all-reduce of %zu values", d->world_rank, n);
  d->broken = true;
  return DIST_ERROR;
}

DistStatus dist_progress(Dist *d) {
  for (int i = 0; i < d->n_pending; i++) {
    DistPending *p = &d->pending[i];
    if (p->done) continue;
    int done = 0;
    int rc = MPI_Test(&p->req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(d, "MPI_Iallgather", rc);
    if (done) p->done = true, d->round_end = now_s();
  }
  return DIST_OK;
}

DistStatus dist_wait(Dist *d) {
  if (!d->n_pending) return DIST_OK;
  double t0 = now_s();
  DistStatus st = DIST_OK;
  for (int i = 0; i < d->n_pending; i++) {
    DistPending *p = &d->pending[i];
    if (st == DIST_OK && !p->done && (st = wait_deadline(d, &p->req, "an all-reduce")) == DIST_OK)
      p->done = true, d->round_end = now_s();
    /* Each rank sums the contributions itself, in rank order: the same
     * bits on every rank and in every run. */
    float k = (float)d->size;
    for (size_t j = 0; st == DIST_OK && j < p->n; j++) {
      float s = p->all[j];
      for (int q = 1; q < d->size; q++) s += p->all[(size_t)q * p->n + j];
      p->x[j] = p->sum ? s : s / k;
    }
    free(p->all);
  }
  d->n_pending = 0;
  d->exposed_s += now_s() - t0;
  d->comm_s += d->round_end - d->round_start;
  return st;
}

DistStatus dist_allreduce_mean(Dist *d, float *x, size_t n) {
  DistStatus st = dist_start(d, x, n, false);
  return st != DIST_OK ? st : dist_wait(d);
}

typedef struct DistSend {
  MPI_Request req;
} DistSend;

static DistStatus too_large(Dist *d, size_t bytes) {
  snprintf(d->err, sizeof d->err, "rank %d: a message of %zu bytes is more than one send takes", d->world_rank, bytes);
  return DIST_ERROR;
}

DistStatus dist_isend(Dist *d, int peer, int tag, const void *buf, size_t bytes) {
  if (bytes > (size_t)INT_MAX) return too_large(d, bytes);
  if (d->n_sends == d->cap_sends) {
    int cap = d->cap_sends ? 2 * d->cap_sends : 16;
    DistSend *p = realloc(d->sends, sizeof *p * (size_t)cap);
    if (!p) {
      snprintf(d->err, sizeof d->err, "rank %d: out of memory for a send", d->world_rank);
      return DIST_ERROR;
    }
    d->sends = p, d->cap_sends = cap;
  }
  int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, comm_of(d), &d->sends[d->n_sends].req);
  if (rc != MPI_SUCCESS) return mpi_fail(d, "MPI_Isend", rc);
  d->n_sends++;
  return DIST_OK;
}

DistStatus dist_recv(Dist *d, int peer, int tag, void *buf, size_t bytes, const char *what) {
  if (bytes > (size_t)INT_MAX) return too_large(d, bytes);
  MPI_Request r;
  int rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, comm_of(d), &r);
  return rc == MPI_SUCCESS ? wait_deadline(d, &r, what) : mpi_fail(d, "MPI_Irecv", rc);
}

DistStatus dist_wait_sends(Dist *d) {
  DistStatus st = DIST_OK;
  for (int i = 0; st == DIST_OK && i < d->n_sends; i++) st = wait_deadline(d, &d->sends[i].req, "a send");
  d->n_sends = 0;
  return st;
}

DistStatus dist_allgather(Dist *d, const void *mine, void *all, size_t bytes) {
  if (d->size == 1) return memcpy(all, mine, bytes), DIST_OK;
  DistStatus st = dist_check(d, true, NULL);
  if (st != DIST_OK) return st;
  if (bytes > (size_t)INT_MAX) {
    snprintf(d->err, sizeof d->err, "rank %d: a gather of %zu bytes is more than one gather takes", d->world_rank,
             bytes);
    return DIST_ERROR;
  }
  MPI_Request r;
  int rc = MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, comm_of(d), &r);
  return rc == MPI_SUCCESS ? wait_deadline(d, &r, "a gather of the tensor-parallel shards")
                           : mpi_fail(d, "MPI_Iallgather", rc);
}

void dist_abort(Dist *d, int code) {
  fprintf(stderr, "dlcc: %s\n", d->err);
  fflush(stderr);
  if (d->size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

bool dist_split(Dist *world, int color, int key, Dist *out) {
  memset(out, 0, sizeof *out);
  out->size = 1;
  out->timeout = world->timeout;
  if (world->size == 1) return true;
  MPI_Comm *c = malloc(sizeof *c);
  if (!c) return snprintf(world->err, sizeof world->err, "rank %d: out of memory", world->world_rank), false;
  int rc = MPI_Comm_split(comm_of(world), color, key, c);
  if (rc != MPI_SUCCESS) {
    free(c);
    return mpi_fail(world, "MPI_Comm_split", rc), false;
  }
  MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
  out->group = c;
  out->world_rank = world->world_rank;
  MPI_Comm_rank(*c, &out->rank);
  MPI_Comm_size(*c, &out->size);
  return true;
}

void dist_finish(Dist *d) {
  if (d->group) MPI_Comm_free(d->group);
  free(d->group);
  d->group = NULL;
  if (d->mpi) MPI_Finalize();
  d->mpi = false;
  free(d->pending);
  d->pending = NULL;
  free(d->sends);
  d->sends = NULL;
}

#else /* !HAVE_MPI */

bool dist_init(Dist *d, double timeout) {
  memset(d, 0, sizeof *d);
  d->size = 1;
  d->timeout = timeout;
  if (launched_by_mpi()) {
    snprintf(d->err, sizeof d->err,
             "this process is one rank of an MPI launch, but dlcc was built without MPI "
             "(install libopenmpi-dev and run ./configure again)");
    return false;
  }
  return true;
}

DistStatus dist_check(Dist *d, bool ok, const char *msg) {
  if (!ok) snprintf(d->err, sizeof d->err, "rank 0: %s", msg ? msg : "failed");
  return ok ? DIST_OK : DIST_PEER_FAILED;
}

DistStatus dist_bcast(Dist *d, void *buf, size_t bytes) { return DIST_OK; }

DistStatus dist_allreduce_mean(Dist *d, float *x, size_t n) { return DIST_OK; }

DistStatus dist_start(Dist *d, float *x, size_t n, bool sum) { return DIST_OK; }

DistStatus dist_allgather(Dist *d, const void *mine, void *all, size_t bytes) {
  memcpy(all, mine, bytes);
  return DIST_OK;
}

DistStatus dist_progress(Dist *d) { return DIST_OK; }

DistStatus dist_wait(Dist *d) { return DIST_OK; }

DistStatus dist_isend(Dist *d, int peer, int tag, const void *buf, size_t bytes) { return DIST_OK; }

DistStatus dist_recv(Dist *d, int peer, int tag, void *buf, size_t bytes, const char *what) { return DIST_OK; }

DistStatus dist_wait_sends(Dist *d) { return DIST_OK; }

void dist_abort(Dist *d, int code) {
  fprintf(stderr, "dlcc: %s\n", d->err);
}

bool dist_split(Dist *world, int color, int key, Dist *out) {
  memset(out, 0, sizeof *out);
  out->size = 1;
  out->timeout = world->timeout;
  return true;
}

void dist_finish(Dist *d) {}

#endif

void dist_end(Dist *d, bool ok, const char *msg) {
  if (d->size > 1) {
    if (!d->peer_failed && !d->broken) dist_check(d, ok, msg ? msg : "failed (its message is above)");
    if (d->broken) dist_abort(d, 1);
    if (d->peer_failed && d->failed_rank != d->rank)
      fprintf(stderr, "dlcc: error: rank %d stops: %s\n", d->rank, d->err);
  }
  dist_finish(d);
}

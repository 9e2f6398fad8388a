/* Ranks of a data-parallel job (dist.c): takes the MPI environment that
 * mpirun or srun sets up and gives each rank its number, the world size
 * and the collectives `dlcc train` needs (a broadcast from rank 0 and a
 * mean all-reduce summed in rank order, so every run and every rank
 * count gives the same bits for the same contributions), each polled
 * against a deadline and preceded by an exchange of every rank's status,
 * so that a rank that fails ends every rank with its message instead of
 * leaving the others waiting.  Without MPI (or outside mpirun) it is a
 * world of one and every call is local. */
#ifndef DLCC_DRIVER_DIST_H
#define DLCC_DRIVER_DIST_H

#include <stdbool.h>
#include <stddef.h>

/* The longest message a failing rank hands to the others. */
#define DIST_MSG 240

typedef struct Dist {
  int rank, size;
  int world_rank; /* this process's rank in the launch, which messages name (rank is the group's) */
  bool mpi;       /* MPI_Init ran here: dist_finish must finalize */
  void *group;    /* a group's MPI communicator (dist_split); NULL: the world's */
  double timeout; /* seconds a collective may wait for its peers */
  /* What the last failed call found: every rank saw the same failure
   * (peer_failed, so no further exchange is due), or a collective could
   * not complete (broken: only MPI_Abort ends the job). */
  bool peer_failed, broken;
  int failed_rank; /* with peer_failed: the lowest rank that failed */
  /* All-reduces started and not yet waited for (dist_start). */
  int n_pending, cap_pending;
  struct DistPending *pending;
  /* Seconds, over the whole run: from each round's first start to its
   * last all-reduce's end as polling saw it (comm), and of that the time
   * spent in dist_wait (exposed: not hidden behind computation). */
  double comm_s, exposed_s;
  double round_start, round_end;
  /* Point-to-point sends started and not yet waited for (dist_isend). */
  int n_sends, cap_sends;
  struct DistSend *sends;
  char err[DIST_MSG + 64];
} Dist;

typedef enum {
  DIST_OK,
  DIST_PEER_FAILED, /* another rank reported a failure: err names it */
  DIST_TIMEOUT,     /* a peer never arrived: err says which collective */
  DIST_ERROR        /* MPI itself failed: err says how */
} DistStatus;

/* Joins the job when the environment says this process is one rank of
 * an MPI launch (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK); else a
 * world of one.  false, with the reason in d->err, when the environment
 * asks for ranks and this dlcc has no MPI, or MPI_Init fails. */
bool dist_init(Dist *d, double timeout);
/* The ranks of world with the same color as a group of their own
 * (MPI_Comm_split, ordered by key; every rank of world calls it), with
 * world's deadline: its collectives, status exchanges and messages
 * stay among them, and name the ranks by their number in the group
 * (its own errors name this process by its world rank).  dist_finish
 * frees it.  False with the reason in world->err. */
bool dist_split(Dist *world, int color, int key, Dist *out);
/* Every rank sends its status; any failure (the lowest rank's first)
 * comes back as DIST_PEER_FAILED with "rank R: MSG" in d->err.  A rank
 * that fails calls this with ok = false and its message, then exits. */
DistStatus dist_check(Dist *d, bool ok, const char *msg);
/* Rank 0's bytes to every rank. */
DistStatus dist_bcast(Dist *d, void *buf, size_t bytes);
/* x[i] = (sum over r = 0..size-1 in that order of rank r's x[i]) / size,
 * in f32 on every rank: each rank gathers all contributions and sums
 * them itself, so the bits do not hang on MPI's reduction order. */
DistStatus dist_allreduce_mean(Dist *d, float *x, size_t n);
/* The same in parts: dist_start begins x's all-reduce and returns (x must
 * stay as it is until dist_wait); dist_progress drives the started ones
 * (MPI moves a nonblocking collective only inside MPI calls); dist_wait
 * ends them all, each x then the mean, or with sum the sum (the same
 * rank-order sum, not divided: a tensor-parallel job's).  The first
 * start after a wait exchanges the ranks' status. */
DistStatus dist_start(Dist *d, float *x, size_t n, bool sum);
DistStatus dist_progress(Dist *d);
DistStatus dist_wait(Dist *d);
/* Point to point, for pipeline stages (docs/parallel.md): dist_isend
 * starts sending buf (which must stay as it is until dist_wait_sends) to
 * rank peer under tag; dist_recv receives exactly bytes from peer under
 * tag, polled against the deadline ("rank R: WHAT timed out ..."). */
DistStatus dist_isend(Dist *d, int peer, int tag, const void *buf, size_t bytes);
DistStatus dist_recv(Dist *d, int peer, int tag, void *buf, size_t bytes, const char *what);
DistStatus dist_wait_sends(Dist *d);
/* Every rank's bytes mine[0..bytes) to all, by rank (size * bytes). */
DistStatus dist_allgather(Dist *d, const void *mine, void *all, size_t bytes);
/* After a failure or timeout: prints the message and, when a peer may
 * still be waiting in a collective that can no longer complete, ends the
 * job with MPI_Abort (after the message, which is the point). */
void dist_abort(Dist *d, int code);
void dist_finish(Dist *d);
/* The ranks end together: a rank that failed (ok false, msg its error,
 * or NULL when it printed it) hands its message to the others, which
 * print it naming the rank; one that cannot reach them (a peer is gone)
 * ends the job after printing why.  Then dist_finish. */
void dist_end(Dist *d, bool ok, const char *msg);

#endif

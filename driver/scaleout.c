/* The scale-out estimate (scaleout.h): a device table, roofline step
 * times, ring all-reduces, the stage split and one split's step time and
 * memory.  docs/parallel.md ("Choosing a split") gives every formula. */
#include "driver/scaleout.h"

#include <stdlib.h>
#include <string.h>

#define GB 1e9
#define TB 1e12

/* Vendors' data sheets: SXM parts, dense tensor-core peaks; NVLink's
 * bandwidth each way (900 GB/s total on Hopper, 600 on Ampere); one
 * InfiniBand NIC per GPU (NDR 400 Gb/s on Hopper systems, HDR 200 on
 * A100's).  Latencies and the launch gap are typical measured orders of
 * magnitude, not data-sheet values; docs/parallel.md says so. */
static const ScaleDevice devices[] = {
    {"h200", 989 * TB, 494 * TB, 67 * TB, 4.8 * TB, 141 * GB, 450 * GB, 50 * GB, 3e-6, 8e-6, 3e-6},
    {"h100", 989 * TB, 494 * TB, 67 * TB, 3.35 * TB, 80 * GB, 450 * GB, 50 * GB, 3e-6, 8e-6, 3e-6},
    {"a100", 312 * TB, 156 * TB, 19.5 * TB, 2.039 * TB, 80 * GB, 300 * GB, 25 * GB, 4e-6, 10e-6, 4e-6},
};

const ScaleDevice *scale_device(const char *name) {
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++)
    if (strcmp(devices[i].name, name) == 0) return &devices[i];
  return NULL;
}

const char *scale_device_names(void) { return "h200, h100, a100"; }

static double max2(double a, double b) { return a > b ? a : b; }
static double min2(double a, double b) { return a < b ? a : b; }

double scale_step_time(const ScaleDevice *d, double flops, double bytes, ScaleUnits on) {
  double peak = on == SCALE_ON_HALF ? d->half_flops : on == SCALE_ON_TF32 ? d->tf32_flops : d->f32_flops;
  return max2(flops / peak, bytes / d->hbm_bytes) + d->launch_s;
}

double scale_allreduce_time(const ScaleDevice *d, double bytes, int n, bool across_nodes) {
  if (n <= 1) return 0;
  double bw = across_nodes ? d->nic_bytes : d->link_bytes;
  double lat = across_nodes ? d->nic_lat : d->link_lat;
  return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * lat;
}

/* Candidate cut points: every boundary of a graph of at most
 * PARTITION_POINTS nodes, else evenly spaced ones, so the search stays
 * O(parts x points^2) on any model. */
#define PARTITION_POINTS 1000

double scale_partition(const double *costs, int n, int parts, ScaleCutCost cut_cost, void *ctx, int *cut) {
  if (parts < 1 || n < parts) return -1;
  int stride = (n + PARTITION_POINTS - 1) / PARTITION_POINTS;
  /* pts[0..np]: the boundaries a stage may start or end at, 0 and n included */
  int np = 0, *pts = malloc(((size_t)n / stride + 2) * sizeof *pts);
  double *prefix = malloc(((size_t)n + 1) * sizeof *prefix);
  if (!pts || !prefix) {
    free(pts);
    free(prefix);
    return -1;
  }
  prefix[0] = 0;
  for (int i = 0; i < n; i++) prefix[i + 1] = prefix[i] + costs[i];
  for (int i = 0; i < n; i += stride) pts[np++] = i;
  pts[np] = n;
  double result = -1;
  if (np < parts) goto done;
  /* best[k * (np + 1) + j]: the least largest stage time of stages
   * 0..k covering boundaries pts[0]..pts[j]; from[]: where stage k
   * starts in it.  A stage's time is its nodes' costs and, but for the
   * last, what sending across its end costs. */
  size_t w = (size_t)np + 1;
  double *best = malloc((size_t)parts * w * sizeof *best);
  int *from = malloc((size_t)parts * w * sizeof *from);
  if (!best || !from) {
    free(best);
    free(from);
    goto done;
  }
  for (int k = 0; k < parts; k++) {
    for (int j = 0; j <= np; j++) {
      best[k * w + j] = -1;
      if (j < k + 1) continue;
      double end = k < parts - 1 && pts[j] < n ? cut_cost(ctx, k, pts[j]) : 0;
      if (k < parts - 1 && pts[j] == n) continue;
      for (int i = k; i < j; i++) {
        double before = k ? best[(k - 1) * w + i] : (i == 0 ? 0 : -1);
        if (before < 0) continue;
        double stage = prefix[pts[j]] - prefix[pts[i]] + end;
        double worst = before > stage ? before : stage;
        /* strict: ties keep the earliest start of the last stage */
        if (best[k * w + j] < 0 || worst < best[k * w + j]) {
          best[k * w + j] = worst;
          from[k * w + j] = i;
        }
      }
    }
  }
  result = best[(parts - 1) * w + np];
  if (result >= 0 && cut)
    for (int k = parts - 1, j = np; k > 0; k--) {
      j = from[k * w + j];
      cut[k - 1] = pts[j];
    }
  free(best);
  free(from);
done:
  free(pts);
  free(prefix);
  return result;
}

/* Whether ranks start, start + stride, ..., count of them, sit on more
 * than one node of `per_node` GPUs. */
static bool spans(int start, int stride, int count, int per_node) {
  for (int i = 1; i < count; i++)
    if ((start + i * stride) / per_node != start / per_node) return true;
  return false;
}

/* Ranks are numbered tensor fastest, then data, then pipeline stage
 * (Megatron-LM's order): a tensor group is T consecutive ranks, so it
 * stays on one node whenever T divides the GPUs of a node. */
static bool tensor_across(const ScaleSplit *s) {
  int total = s->data * s->tensor * s->stages;
  for (int r = 0; r < total; r += s->tensor)
    if (spans(r, 1, s->tensor, s->gpus_per_node)) return true;
  return false;
}

static bool data_across(const ScaleSplit *s) {
  for (int p = 0; p < s->stages; p++)
    for (int t = 0; t < s->tensor; t++)
      if (spans(p * s->data * s->tensor + t, s->tensor, s->data, s->gpus_per_node)) return true;
  return false;
}

static bool boundary_across(const ScaleSplit *s, int stage) {
  int width = s->data * s->tensor;
  for (int r = stage * width; r < (stage + 1) * width; r++)
    if (spans(r, width, 2, s->gpus_per_node)) return true;
  return false;
}

typedef struct Cuts {
  const ScaleDevice *d;
  const ScaleSplit *s;
  const ScaleStep *local;
} Cuts;

/* A micro-batch's activations across the boundary before node `at`
 * forward and their gradient back: tensor ranks send their own slice
 * each, so 1/T of the bytes a pair of them. */
static double p2p_time(void *ctx, int stage, int at) {
  const Cuts *c = ctx;
  bool across = boundary_across(c->s, stage);
  double bytes = 2 * c->local->cut_bytes[at - 1] / c->s->tensor;
  return bytes / (across ? c->d->nic_bytes : c->d->link_bytes) + 2 * (across ? c->d->nic_lat : c->d->link_lat);
}

ScaleResult scale_estimate(const ScaleDevice *d, const ScaleModel *m, const ScaleSplit *s, const ScaleStep *local) {
  ScaleResult r = {.stage_share = 1};
  int T = s->tensor, S = s->stages, D = s->data;
  int M = S > 1 ? s->micro_batches : 1;
  double work = local->compute_s - local->split_s + local->split_s / T;
  double tp = 0;
  if (T > 1 && local->tp_count > 0)
    tp = local->tp_count * scale_allreduce_time(d, local->tp_bytes / local->tp_count, T, tensor_across(s));

  double slot = work + tp, p2p_slot = 0;
  if (S > 1) {
    int cut[S - 1];
    double total = 0;
    for (int i = 0; i < local->n_nodes; i++) total += local->node_s[i];
    /* each node's share of the stage work, in seconds, so cuts weigh
     * against what sending across them costs */
    double *t = malloc(((size_t)local->n_nodes + 1) * sizeof *t);
    if (!t) return r;
    for (int i = 0; i < local->n_nodes; i++) t[i] = total > 0 ? local->node_s[i] / total * (work + tp) : 0;
    Cuts cc = {d, s, local};
    slot = scale_partition(t, local->n_nodes, S, p2p_time, &cc, cut);
    free(t);
    if (slot < 0) return r;
    double largest = 0, sum = 0;
    for (int i = 0, k = 0; i <= local->n_nodes; i++) {
      if (i == local->n_nodes || (k < S - 1 && i == cut[k])) {
        largest = max2(largest, sum);
        sum = 0;
        if (i < local->n_nodes) p2p_slot = max2(p2p_slot, p2p_time(&cc, k++, i));
      }
      if (i < local->n_nodes) sum += local->node_s[i];
    }
    r.stage_share = total > 0 ? largest / total : 1;
  }
  r.compute_s = M * work * r.stage_share + m->optim_s / (T * S);
  /* the slowest stage with its sends sets the pace: what of its slot is
   * not compute is the exposed point-to-point time */
  if (S > 1) p2p_slot = max2(0, slot - (work + tp) * r.stage_share);
  r.tp_s = M * tp * r.stage_share;
  r.p2p_s = M * p2p_slot;
  r.bubble_s = (S - 1) * slot;

  if (D > 1) {
    double grads = m->grad_bytes / (T * S);
    double ar = scale_allreduce_time(d, grads, D, data_across(s));
    /* DDP's buckets overlap the backward pass (about 2/3 of a step's
     * work; with a pipeline only the last micro-batch's), all but the
     * last bucket, which starts when the backward ends. */
    double hidden = 2.0 / 3.0 * (S > 1 ? slot : work);
    double last = grads > 0 ? ar * min2(1, m->bucket_bytes / grads) : 0;
    r.dp_s = max2(ar - hidden, last);
  }
  r.step_s = r.compute_s + r.tp_s + r.p2p_s + r.bubble_s + r.dp_s;
  r.samples_per_s = r.step_s > 0 ? m->batch / r.step_s : 0;

  int in_flight = S > 1 ? (s->gpipe ? M : (M < S ? M : S)) : 1;
  r.memory = (m->weight_bytes + m->grad_bytes) / (T * S) + local->arena_bytes * r.stage_share * in_flight / T;
  return r;
}

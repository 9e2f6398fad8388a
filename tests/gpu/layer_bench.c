/* The GPU benchmark of tests/gpu/check.sh: takes a model file and prints
 * tables as it measures them.
 *   layer_bench layers MODEL.dl [options]
 *       every distinct conv2d (groups 1) and linear of the model, each
 *       compiled alone by dlcc (tests/modelbuild: -O2 in the mode, int8
 *       with fixed ranges), next to cuBLAS on the same GEMM shape (a
 *       convolution's: output channels x N*OH*OW x Cin*KH*KW) and cuDNN on
 *       the same convolution: GPU microseconds (vendor.c: CUDA events,
 *       median of five timings of back-to-back runs), TFLOP/s, the
 *       fraction of the dense tensor-core peak, dlcc's time over cuDNN's;
 *       one table per mode and batch, then its averages.
 *   layer_bench model MODEL.dl [options]
 *       the whole model per mode and batch, timed the same way.
 *   layer_bench attention [--seqs=512,2048] [--dims=64,128] [--heads=12]
 *       the attention op (forward) and attention_grad (its backward: dq,
 *       dk, dv from q, k, v, the result and its gradient) alone, q, k and
 *       v [N, H, S, d] (--batches gives N, default 8), causal and not, per
 *       mode (--modes, default f16,bf16): GPU microseconds and TFLOP/s,
 *       counted as FlashAttention counts them (forward 4 N H S^2 d, half
 *       under causal; backward 2.5 times the forward), for
 *       tests/gpu/torch_attn.py to set beside PyTorch's SDPA.
 *   layer_bench symbols
 *       resolves every cuBLAS and cuDNN function it calls (no GPU needed).
 * Options: --batches=1,64 (the model's N), --modes=f16,bf16,int8,f32,tf32
 * (tf32: cuBLAS and cuDNN with TF32, dlcc with --tf32), --backend=cuda|emu (emu: wall-clock
 * time, no vendor libraries: make check's smoke test), --jobs=N (compile
 * processes that fill the kernel cache first, cuda only; default 8),
 * -D NAME=VALUE (model mode).  Exits 1 when dlcc failed to build or run
 * something; targets missed are reported, not failed. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlcrt.h"
#include "ir/ir.h"
#include "runtime/emu/dlcc_emu.h"
#include "runtime/runtime.h"
#include "tests/gpu/vendor.h"
#include "tests/modelbuild.h"

enum { MAX_LAYERS = 256, MAX_BATCHES = 4, MAX_DEFINES = 8 };

static const char *const mode_names[BT_COUNT] = {"f16", "bf16", "int8", "f32", "tf32"};
/* H200 SXM, dense, from NVIDIA's datasheet (TFLOP/s; int8 TOPS). */
static const double peak_tflops[BT_COUNT] = {989.4, 989.4, 1978.9, 66.9, 494.7};

typedef struct Layer {
  bool conv; /* else a linear layer */
  ConvShape s;
  int rows, in, out; /* linear */
  double flops;
} Layer;

typedef struct Options {
  const char *cmd, *model, *backend;
  int n_batches, batches[MAX_BATCHES];
  int n_seqs, seqs[MAX_BATCHES], n_dims, dims[MAX_BATCHES], heads; /* attention */
  bool modes[BT_COUNT];
  int jobs;
  int n_defines;
  Define defines[MAX_DEFINES];
} Options;

static int failures;

static bool cuda(const Options *o) { return !strcmp(o->backend, "cuda"); }

/* ---- the model's layers ---- */

static int layers_job(Ctx *c, void *data) {
  void **io = data;
  const ModelBuild *b = io[0];
  Layer *out = io[1];
  int *n = io[2];
  const SrcFile *f = ctx_load_file(c, b->path);
  Program *p = f ? fe_parse(c, f) : NULL;
  LowerOptions lo = {.n_defines = b->n_defines, .defines = b->defines};
  Graph *g = p ? fe_lower(c, p, &lo) : NULL;
  if (!g) return 1;
  for (Node *m = g->first; m; m = m->next) {
    if (m->n_in == 0) continue; /* inputs, params, consts */
    Layer l = {0};
    const TensorType *x = &m->in[0]->type, *y = &m->out[0].type;
    if (m->op == OP_CONV2D && x->rank == 4 && ir_attr_int(m, "groups") == 1) {
      int cnt;
      const int64_t *st = ir_attr_ints(m, "stride", &cnt), *pad = ir_attr_ints(m, "pad", &cnt),
                    *dil = ir_attr_ints(m, "dilation", &cnt);
      if (st[0] != st[1] || pad[0] != pad[1] || pad[0] != pad[2] || pad[0] != pad[3] || dil[0] != dil[1]) continue;
      const TensorType *w = &m->in[1]->type;
      l = (Layer){.conv = true,
                  .s = {(int)x->dims[0], (int)x->dims[1], (int)x->dims[2], (int)x->dims[3], (int)w->dims[0],
                        (int)w->dims[2], (int)w->dims[3], (int)st[0], (int)pad[0], (int)dil[0], (int)y->dims[2],
                        (int)y->dims[3]}};
      l.flops = 2.0 * l.s.n * l.s.k * l.s.oh * l.s.ow * l.s.c * l.s.r * l.s.s;
    } else if (m->op == OP_LINEAR) {
      l.out = (int)m->in[1]->type.dims[0], l.in = (int)m->in[1]->type.dims[1];
      l.rows = (int)(ir_type_numel(y) / (l.out ? l.out : 1));
      l.flops = 2.0 * l.rows * l.out * l.in;
    } else {
      continue;
    }
    bool seen = false;
    for (int i = 0; i < *n && !seen; i++) seen = !memcmp(&out[i], &l, sizeof l);
    if (!seen && *n < MAX_LAYERS) out[(*n)++] = l;
  }
  return 0;
}

/* The model at batch n with the user's defines, in mode (tf32: f32
 * under --tf32); d has room for them and N. */
static ModelBuild model_build(const Options *o, int batch, const char *mode, Define *d) {
  memcpy(d, o->defines, sizeof(Define) * (size_t)o->n_defines);
  d[o->n_defines] = (Define){"N", batch};
  bool tf32 = !strcmp(mode, "tf32");
  return (ModelBuild){.path = o->model, .mode = tf32 ? "f32" : mode, .n_defines = o->n_defines + 1, .defines = d,
                      .opts = {.tf32 = tf32}};
}

/* The distinct layers of the model at batch n; -1 after a message. */
static int model_layers(const Options *o, int batch, Layer *out) {
  Define d[MAX_DEFINES + 1];
  ModelBuild b = model_build(o, batch, "f32", d);
  int n = 0;
  void *io[] = {&b, out, &n};
  Ctx c;
  ctx_init(&c);
  if (ctx_guard(&c, layers_job, io) != 0) {
    fprintf(stderr, "layer_bench: %s: %s", o->model, diag_text(&c));
    n = -1;
  }
  ctx_free(&c);
  return n;
}

/* One layer as IR text in the mode's type (int8 reads and writes f32,
 * as its quantize and dequantize do); malloc'd.  An f16 or bf16 conv
 * whose channels fill 16-byte chunks is channels last, as the nhwc pass
 * lays it out inside a whole model (a lone conv stays NCHW there: the
 * transposes at its boundaries would cost more); the H200's first run
 * timed the NCHW kernel, which no model of those runs. */
static char *layer_text(const Layer *l, BenchType t) {
  const char *dt = t == BT_F16 ? "f16" : t == BT_BF16 ? "bf16" : "f32";
  char *s = malloc(1024);
  if (!s) return NULL;
  if (l->conv) {
    const ConvShape *c = &l->s;
    bool nhwc = (t == BT_F16 || t == BT_BF16) && c->c % 8 == 0;
    /* x, W and y's dims after N (or Co), in the layout's order */
    int x1 = nhwc ? c->h : c->c, x2 = nhwc ? c->w : c->h, x3 = nhwc ? c->c : c->w;
    int w1 = nhwc ? c->r : c->c, w2 = nhwc ? c->s : c->r, w3 = nhwc ? c->c : c->s;
    int y1 = nhwc ? c->oh : c->k, y2 = nhwc ? c->ow : c->oh, y3 = nhwc ? c->k : c->ow;
    snprintf(s, 1024,
             "graph layer {\n  %%x = input {name=\"x\"} : %s[%d, %d, %d, %d]\n"
             "  %%w = param {name=\"w\"} : %s[%d, %d, %d, %d]\n"
             "  %%y = conv2d %%x, %%w {stride=[%d, %d], pad=[%d, %d, %d, %d], dilation=[%d, %d], groups=1%s}"
             " : %s[%d, %d, %d, %d]\n  return %%y as \"y\"\n}\n",
             dt, c->n, x1, x2, x3, dt, c->k, w1, w2, w3, c->stride, c->stride, c->pad, c->pad, c->pad, c->pad,
             c->dilation, c->dilation, nhwc ? ", layout=\"nhwc\"" : "", dt, c->n, y1, y2, y3);
  } else {
    snprintf(s, 1024,
             "graph layer {\n  %%x = input {name=\"x\"} : %s[%d, %d]\n  %%w = param {name=\"w\"} : %s[%d, %d]\n"
             "  %%y = linear %%x, %%w : %s[%d, %d]\n  return %%y as \"y\"\n}\n",
             dt, l->rows, l->in, dt, l->out, l->in, dt, l->rows, l->out);
  }
  return s;
}

static void describe(const Layer *l, char *buf, size_t len) {
  if (l->conv)
    snprintf(buf, len, "conv %dx%dx%d->%d %dx%d/%d", l->s.c, l->s.h, l->s.w, l->s.k, l->s.r, l->s.s, l->s.stride);
  else
    snprintf(buf, len, "linear %dx%d->%d", l->rows, l->in, l->out);
}

/* ---- building and running with dlcc ---- */

/* dlcc's build of IR text in mode t: tf32 is f32 under --tf32. */
static ModelBuild text_build(const char *text, BenchType t) {
  return (ModelBuild){.text = text, .mode = t == BT_TF32 ? "f32" : mode_names[t], .opts = {.tf32 = t == BT_TF32}};
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double uniform(double lo, double hi) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return lo + (hi - lo) * (double)(rng >> 11) * 0x1.0p-53;
}

/* Random values for one tensor of the plan, in its dtype; malloc'd. */
static void *random_tensor(const RtTensorDesc *t, double scale) {
  size_t es = (size_t)rt_dtype_bytes(t->dtype), n = es ? t->nbytes / es : 0;
  unsigned char *p = malloc(t->nbytes + 1);
  for (size_t i = 0; p && i < n; i++) {
    double v = uniform(-scale, scale);
    if (t->dtype == RT_DT_F16) ((uint16_t *)p)[i] = dlcc_emu_f64_to_f16(v);
    else if (t->dtype == RT_DT_BF16) ((uint16_t *)p)[i] = dlcc_emu_f64_to_bf16(v);
    else if (t->dtype == RT_DT_F32) ((float *)p)[i] = (float)v;
    else memset(p + i * es, 0, es); /* indices and the like: 0 is always in range */
  }
  return p;
}

/* Sets every weight and input to random values and runs once (the init
 * steps, and the warm-up). */
static DlrtStatus fill_and_run(DlrtModel *m, const RtPlan *p) {
  DlrtStatus s = DLRT_OK;
  for (uint32_t i = 0; i < p->n_weights && !s; i++) {
    void *w = random_tensor(&p->weights[i], 0.1);
    s = w ? dlrt_set_weight(m, p->weights[i].name, w, p->weights[i].nbytes) : DLRT_E_NOMEM;
    free(w);
  }
  for (uint32_t i = 0; i < p->n_inputs && !s; i++) {
    void *x = random_tensor(&p->inputs[i], 1.0);
    s = x ? dlrt_set_input(m, (int)i, x, p->inputs[i].nbytes) : DLRT_E_NOMEM;
    free(x);
  }
  return s ? s : dlrt_run(m);
}

static int enqueue_work(void *ud, char *err, size_t errlen) {
  DlrtModel *m = ud;
  /* vendor.c records its events on the legacy default stream
   * (CU_STREAM_LEGACY), which the model's non-blocking stream does not
   * wait for: the steps are ordered between them by events. */
  if (rt_model_enqueue(m, (void *)0x1) == 0) return 0;
  snprintf(err, errlen, "%s", dlrt_error(m));
  return -1;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* A built plan's time a run in microseconds: GPU time with events on
 * cuda, one run's wall-clock time on emu; -1 with a message. */
static double time_plan(Gpu *g, const Options *o, const RtPlan *p, char *err, size_t errlen) {
  DlrtModel *m = NULL;
  double us = -1;
  if (dlrt_open(p, o->backend, &m) != DLRT_OK || fill_and_run(m, p) != DLRT_OK) {
    snprintf(err, errlen, "%s", dlrt_error(m));
  } else if (g) {
    us = gpu_time_us(g, enqueue_work, m, err, errlen);
  } else {
    double t0 = now_us();
    if (dlrt_run(m) == DLRT_OK) us = now_us() - t0;
    else snprintf(err, errlen, "%s", dlrt_error(m));
  }
  dlrt_close(m);
  return us;
}

/* Builds text (or the model file with defines) in mode; -1 with the
 * compiler's message. */
static double time_build(Gpu *g, const Options *o, ModelBuild *b, char *err, size_t errlen) {
  Ctx c;
  ctx_init(&c);
  double us = -1;
  if (!test_build_model(&c, b)) snprintf(err, errlen, "dlcc: %s", diag_text(&c));
  else us = time_plan(g, o, b->cg.plan, err, errlen);
  ctx_free(&c);
  return us;
}

/* Whether mode t's layer table also times each layer without wgmma
 * (--no-wgmma: the mma.sync side, what every GPU but sm_90a runs): f16,
 * to say what wgmma changes. */
static bool both_sides(BenchType t) { return t == BT_F16; }

/* ---- filling the kernel cache first, in parallel ---- */

/* Every build the command will time (each layer, or the whole model, in
 * every mode and batch) through NVRTC into the runtime's disk cache,
 * o->jobs processes at a time, before this process touches the GPU: the
 * timing loop then finds each cubin cached.  layers NULL: whole models. */
static void prefill(const Options *o, Layer (*layers)[MAX_LAYERS], const int *n_layers) {
  /* what the runtime's NVRTC compiles for on the H200 (sm_90a, or sm_90
   * under DLCC_NO_WGMMA), so that the runs find these in the cache */
  char arch[16], err0[256];
  if (rt_nvrtc_target(90, arch, sizeof arch, err0, sizeof err0)) return;
  for (int w = 0; w < o->jobs; w++) {
    pid_t pid = fork();
    if (pid < 0) break;
    if (pid > 0) continue;
    int i = 0;
    for (int t = 0; t < BT_COUNT; t++) {
      if (!o->modes[t]) continue;
      for (int b = 0; b < o->n_batches; b++)
        for (int l = 0; l < (layers ? n_layers[b] : 1); l++, i++) {
          if (i % o->jobs != w) continue;
          Define d[MAX_DEFINES + 1];
          char *text = layers ? layer_text(&layers[b][l], (BenchType)t) : NULL;
          for (int side = 0; side < (layers && both_sides((BenchType)t) ? 2 : 1); side++) {
            ModelBuild mb = layers ? text_build(text, (BenchType)t) : model_build(o, o->batches[b], mode_names[t], d);
            mb.opts.no_wgmma = side == 1;
            Ctx c;
            ctx_init(&c);
            void *bin = NULL;
            size_t size;
            char err[256];
            if ((text || !layers) && test_build_model(&c, &mb) &&
                rt_nvrtc_compile(mb.cg.plan, arch, &bin, &size, err, sizeof err) == 0)
              free(bin);
            ctx_free(&c);
          }
          free(text);
        }
    }
    _exit(0);
  }
  while (wait(NULL) > 0) {
  }
}

/* ---- the tables ---- */

static void cell(double us, double flops) {
  if (us < 0) printf("  %9s %7s", "n/a", "");
  else printf("  %9.1f %7.1f", us, flops / us * 1e-6);
}

static int layers_cmd(const Options *o, Gpu *g, Layer (*layers)[MAX_LAYERS], const int *n_layers) {
  for (int t = 0; t < BT_COUNT; t++) {
    if (!o->modes[t]) continue;
    for (int b = 0; b < o->n_batches; b++) {
      printf("\n== %s, batch %d: %s, %d distinct layers (dense peak %.0f TFLOP/s)\n", mode_names[t],
             o->batches[b], o->model, n_layers[b], peak_tflops[t]);
      bool sides = both_sides((BenchType)t);
      printf("%-28s %8s  %9s %7s %6s  %9s %7s  %9s %7s  %s%s\n", "layer", "GFLOP", "dlcc us", "TFLOP/s", "%peak",
             "cuBLAS us", "TFLOP/s", "cuDNN us", "TFLOP/s", "dlcc/cuDNN", sides ? "  mma.sync us  wgmma gain" : "");
      double sum_peak = 0, log_ratio = 0, worst = 0;
      int timed = 0, ratios = 0, within = 0;
      for (int l = 0; l < n_layers[b]; l++) {
        const Layer *ly = &layers[b][l];
        char name[64], err[1024] = "", berr[512] = "", derr[512] = "";
        describe(ly, name, sizeof name);
        double us, us_mma = -1;
        {
          char *text = layer_text(ly, (BenchType)t);
          ModelBuild mb = text_build(text, (BenchType)t);
          us = text ? time_build(g, o, &mb, err, sizeof err) : -1;
          if (sides && text) {
            char merr[256];
            ModelBuild mm = text_build(text, (BenchType)t);
            mm.opts.no_wgmma = true;
            us_mma = time_build(g, o, &mm, merr, sizeof merr);
          }
          free(text);
        }
        double bl = -1, dn = -1;
        if (g) {
          bl = ly->conv ? gpu_cublas_us(g, (BenchType)t, ly->s.k, ly->s.n * ly->s.oh * ly->s.ow,
                                        ly->s.c * ly->s.r * ly->s.s, berr, sizeof berr)
                        : gpu_cublas_us(g, (BenchType)t, ly->out, ly->rows, ly->in, berr, sizeof berr);
          if (ly->conv) dn = gpu_cudnn_us(g, (BenchType)t, &ly->s, derr, sizeof derr);
        }
        printf("%-28s %8.3f", name, ly->flops * 1e-9);
        cell(us, ly->flops);
        if (us >= 0) {
          double frac = ly->flops / us * 1e-6 / peak_tflops[t];
          printf(" %5.1f%%", 100 * frac);
          sum_peak += frac, timed++;
        } else {
          printf(" %6s", "");
        }
        cell(bl, ly->flops);
        cell(dn, ly->flops);
        if (us >= 0 && dn > 0) {
          double r = us / dn;
          printf("  %5.2fx", r);
          log_ratio += log(r), ratios++, within += r <= 1.1;
          worst = r > worst ? r : worst;
        } else if (sides) {
          printf("  %7s", "");
        }
        if (sides && us > 0 && us_mma > 0) printf("  %11.1f  %9.2fx", us_mma, us_mma / us);
        putchar('\n');
        if (us < 0) {
          printf("    dlcc FAILED: %.600s\n", err);
          failures++;
        }
        if (g && bl < 0) printf("    cuBLAS n/a: %s\n", berr);
        if (g && ly->conv && dn < 0) printf("    cuDNN n/a: %s\n", derr);
        fflush(stdout);
      }
      if (timed) printf("dlcc: %.1f%% of the dense peak on average over %d layers\n", 100 * sum_peak / timed, timed);
      if (ratios)
        printf("dlcc/cuDNN: geometric mean %.2fx, worst %.2fx, %d of %d convolutions within 1.1x\n",
               exp(log_ratio / ratios), worst, within, ratios);
      if (t == BT_F16 && o->batches[b] == 64 && timed)
        printf("target (f16, batch 64): >= 60%% of peak on average: %s; each within 1.1x of cuDNN: %s\n",
               sum_peak / timed >= 0.6 ? "met" : "NOT MET", ratios && within == ratios ? "met" : "NOT MET");
      fflush(stdout);
    }
  }
  return 0;
}

static int model_cmd(const Options *o, Gpu *g) {
  printf("\n== %s on %s: a whole run (%s)\n", o->model, o->backend,
         g ? "GPU time: CUDA events around back-to-back runs" : "wall-clock time of one run");
  for (int t = 0; t < BT_COUNT; t++) {
    if (!o->modes[t]) continue;
    for (int b = 0; b < o->n_batches; b++) {
      Define d[MAX_DEFINES + 1];
      ModelBuild mb = model_build(o, o->batches[b], mode_names[t], d);
      char err[2048] = "";
      double us = time_build(g, o, &mb, err, sizeof err);
      if (us < 0) {
        printf("model %-5s N=%-3d FAILED: %.600s\n", mode_names[t], o->batches[b], err);
        failures++;
      } else {
        printf("model %-5s N=%-3d %10.3f ms\n", mode_names[t], o->batches[b], us * 1e-3);
      }
      fflush(stdout);
    }
  }
  return 0;
}

/* ---- attention ---- */

/* The forward (grad false) or backward of one attention in dt, as IR
 * text (the backward's lse an input: random values time the same);
 * malloc'd. */
static char *attention_text(const char *dt, int n, int h, int seq, int d, bool causal, bool grad) {
  char *s = malloc(2048), t[96];
  if (!s) return NULL;
  snprintf(t, sizeof t, "%s[%d, %d, %d, %d]", dt, n, h, seq, d);
  if (grad)
    snprintf(s, 2048,
             "graph attention_grad {\n  %%q = input {name=\"q\"} : %s\n  %%k = input {name=\"k\"} : %s\n"
             "  %%v = input {name=\"v\"} : %s\n  %%o = input {name=\"o\"} : %s\n  %%dy = input {name=\"dy\"} : %s\n"
             "  %%lse = input {name=\"lse\"} : f32[%d, %d, %d]\n"
             "  %%dq, %%dk, %%dv = attention_grad %%q, %%k, %%v, %%o, %%dy, %%lse {causal=%d} : %s, %s, %s\n"
             "  return %%dq as \"dq\", %%dk as \"dk\", %%dv as \"dv\"\n}\n",
             t, t, t, t, t, n, h, seq, causal, t, t, t);
  else
    snprintf(s, 2048,
             "graph attention {\n  %%q = input {name=\"q\"} : %s\n  %%k = input {name=\"k\"} : %s\n"
             "  %%v = input {name=\"v\"} : %s\n  %%o = attention %%q, %%k, %%v {causal=%d} : %s\n"
             "  return %%o as \"o\"\n}\n",
             t, t, t, causal, t);
  return s;
}

static int attention_cmd(const Options *o, Gpu *g) {
  printf("\n== attention on %s: forward and backward (%s; TFLOP/s as FlashAttention counts: forward 4 N H S^2 d,\n"
         "   half under causal, backward 2.5x the forward)\n",
         o->backend, g ? "GPU time: CUDA events around back-to-back runs" : "wall-clock time of one run");
  for (int t = 0; t < BT_COUNT; t++) {
    if (!o->modes[t] || t == BT_I8) continue;
    for (int b = 0; b < o->n_batches; b++)
      for (int si = 0; si < o->n_seqs; si++)
        for (int di = 0; di < o->n_dims; di++)
          for (int causal = 0; causal < 2; causal++) {
            int n = o->batches[b], seq = o->seqs[si], d = o->dims[di];
            double fwd = 4.0 * n * o->heads * (double)seq * seq * d / (causal ? 2 : 1);
            printf("attention %-4s N=%d H=%d S=%d d=%d causal=%d", mode_names[t], n, o->heads, seq, d, causal);
            for (int grad = 0; grad < 2; grad++) {
              char *text = attention_text(t == BT_TF32 ? "f32" : mode_names[t], n, o->heads, seq, d, causal, grad);
              ModelBuild mb = text_build(text, (BenchType)t);
              char err[2048] = "";
              double us = text ? time_build(g, o, &mb, err, sizeof err) : -1;
              double flops = grad ? 2.5 * fwd : fwd;
              if (us < 0) {
                printf("  %s FAILED: %.300s", grad ? "bwd" : "fwd", err);
                failures++;
              } else {
                printf("  %s %10.1f us %7.1f TFLOP/s", grad ? "bwd" : "fwd", us, flops / us * 1e-6);
              }
              free(text);
              fflush(stdout);
            }
            printf("\n");
          }
  }
  return 0;
}

/* ---- options ---- */

/* a,b,c into v (at most MAX_BATCHES); their count */
static int int_list(const char *a, int *v) {
  int n = 0;
  for (char *p = (char *)a; *p && n < MAX_BATCHES; p += *p == ',') v[n++] = (int)strtol(p, &p, 10);
  return n;
}


static int parse(int argc, char **argv, Options *o) {
  *o = (Options){.backend = "cuda", .n_batches = 2, .batches = {1, 64}, .jobs = 8, .n_seqs = 2, .seqs = {512, 2048},
                 .n_dims = 2, .dims = {64, 128}, .heads = 12};
  for (int t = 0; t < BT_COUNT; t++) o->modes[t] = true;
  if (argc < 2) return -1;
  o->cmd = argv[1];
  bool attention = !strcmp(o->cmd, "attention");
  if (attention) {
    o->n_batches = 1, o->batches[0] = 8;
    for (int t = 0; t < BT_COUNT; t++) o->modes[t] = t == BT_F16 || t == BT_BF16;
  }
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (!strncmp(a, "--batches=", 10)) {
      o->n_batches = int_list(a + 10, o->batches);
    } else if (!strncmp(a, "--seqs=", 7)) {
      o->n_seqs = int_list(a + 7, o->seqs);
    } else if (!strncmp(a, "--dims=", 7)) {
      o->n_dims = int_list(a + 7, o->dims);
    } else if (!strncmp(a, "--heads=", 8)) {
      o->heads = atoi(a + 8);
    } else if (!strncmp(a, "--modes=", 8)) {
      for (int t = 0; t < BT_COUNT; t++) {
        const char *at = strstr(a + 8, mode_names[t]);
        size_t n = strlen(mode_names[t]);
        o->modes[t] = at && (at == a + 8 || at[-1] == ',') && (at[n] == ',' || !at[n]);
      }
    } else if (!strncmp(a, "--backend=", 10)) {
      o->backend = a + 10;
    } else if (!strncmp(a, "--jobs=", 7)) {
      o->jobs = atoi(a + 7);
    } else if (!strcmp(a, "-D") && i + 1 < argc && o->n_defines < MAX_DEFINES && strchr(argv[i + 1], '=')) {
      const char *d = argv[++i], *eq = strchr(d, '=');
      o->defines[o->n_defines++] = (Define){strndup(d, (size_t)(eq - d)), strtoll(eq + 1, NULL, 10)};
    } else if (!o->model && a[0] != '-') {
      o->model = a;
    } else {
      return -1;
    }
  }
  return (strcmp(o->cmd, "symbols") && !attention && !o->model) || o->jobs < 1 || o->heads < 1 ? -1 : 0;
}

int main(int argc, char **argv) {
  Options o;
  if (parse(argc, argv, &o)) {
    fprintf(stderr, "usage: layer_bench layers|model MODEL.dl [--batches=1,64] [--modes=f16,bf16,int8,f32,tf32]\n"
                    "                   [--backend=cuda|emu] [--jobs=N] [-D NAME=VALUE]...\n"
                    "       layer_bench attention [--batches=8] [--heads=12] [--seqs=512,2048] [--dims=64,128]\n"
                    "                   [--modes=f16,bf16] [--backend=cuda|emu]\n"
                    "       layer_bench symbols\n");
    return 2;
  }
  char err[1024];
  if (!strcmp(o.cmd, "symbols")) {
    if (gpu_check_symbols(err, sizeof err)) {
      printf("FAIL cuBLAS and cuDNN symbols: %s\n", err);
      return 1;
    }
    printf("ok   every cuBLAS and cuDNN function the benchmark calls resolves\n");
    return 0;
  }
  if (cuda(&o) && !gpu_driver_loads(err, sizeof err)) {
    printf("FAIL no GPU: %s\n", err);
    return 1;
  }
  static Layer layers[MAX_BATCHES][MAX_LAYERS];
  int n_layers[MAX_BATCHES];
  bool per_layer = !strcmp(o.cmd, "layers");
  for (int b = 0; per_layer && b < o.n_batches; b++)
    if ((n_layers[b] = model_layers(&o, o.batches[b], layers[b])) < 0) return 1;
  bool attention = !strcmp(o.cmd, "attention");
  if (cuda(&o) && !attention) prefill(&o, per_layer ? layers : NULL, n_layers);
  Gpu *g = NULL;
  if (cuda(&o) && !(g = gpu_open(err, sizeof err))) {
    printf("FAIL no GPU: %s\n", err);
    return 1;
  }
  if (g)
    for (int i = 0; i < 2; i++) {
      const char *lib = i ? "cudnn" : "cublas";
      if (gpu_lib_error(g, lib)[0]) printf("note: %s n/a: %s\n", lib, gpu_lib_error(g, lib));
    }
  int rc = per_layer                 ? layers_cmd(&o, g, layers, n_layers)
           : attention               ? attention_cmd(&o, g)
           : !strcmp(o.cmd, "model") ? model_cmd(&o, g)
                                     : 2;
  gpu_close(g);
  for (int i = 0; i < o.n_defines; i++) free((void *)o.defines[i].name);
  return rc ? rc : failures ? 1 : 0;
}

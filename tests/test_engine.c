/* The execution engine (runtime/model.c): takes compiled models, runs
 * them on emu and on cuda over tests/fake_cuda.c, and checks CUDA graph
 * capture and replay against the reference interpreter and against
 * launching every step, the driver calls of a warm run (one graph launch,
 * its async copies, one synchronization, no cuCtxSetCurrent), the
 * fallbacks (a capture that fails, pinning that fails), asynchronous runs
 * and inputs and outputs bound to device memory. */
#include "config.h"

#include "check_quiet.h"
#include <dlfcn.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlcc.h"
#include "dlcrt.h"
#include "runtime/runtime.h"
#include "tests/modelbuild.h"

static const char *srcdir(void) {
  const char *s = getenv("top_srcdir");
  return s ? s : ".";
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static float frand(void) {
  rng = rng * 6364136223846793005u + 1442695040888963407u;
  return (float)((rng >> 40) & 0xffff) / 32768.0f - 1.0f;
}

/* Launches unmerged: the side-stream tests need the plan's independent
 * kernels as steps of their own (merging would put inception's branches
 * into one launch: merged_branches_leave_one_stream). */
static dlc_model *compile(const char *path, const char *backend, int no_graphs) {
  dlc_options o = {.backend = backend, .no_graphs = no_graphs, .no_merge_launches = 1};
  dlc_model *m = NULL;
  ck_assert_msg(dlc_compile_file(path, &o, &m) == DLC_OK, "%s", dlc_error(m));
  ck_assert_int_eq(dlc_init_weights(m, 7), DLC_OK);
  return m;
}

static const float *run_with(dlc_model *m, const float *x, size_t nbytes, size_t *out_bytes) {
  dlc_tensor_info in;
  ck_assert_int_eq(dlc_input_info(m, 0, &in), DLC_OK);
  ck_assert_int_eq(dlc_set_input(m, in.name, x, nbytes), DLC_OK);
  ck_assert_msg(dlc_run(m) == DLC_OK, "%s", dlc_error(m));
  const void *y;
  ck_assert_int_eq(dlc_get_output(m, 0, &y, out_bytes), DLC_OK);
  return y;
}

/* emu: the first run launches, the second captures, the third replays;
 * each on fresh inputs, against the reference interpreter within tol,
 * and bit for bit against the same model with graphs off; then the
 * engine's report. */
static void replay_matches_reference(const char *model, float tol, const char *report) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", srcdir(), model);
  dlc_model *g = compile(path, "emu", 0), *off = compile(path, "emu", 1), *ref = compile(path, "ref", 0);
  dlc_tensor_info in;
  ck_assert_int_eq(dlc_input_info(g, 0, &in), DLC_OK);
  size_t n = in.nbytes / sizeof(float);
  float *x = malloc(in.nbytes);
  for (int run = 0; run < 4; run++) {
    for (size_t i = 0; i < n; i++) x[i] = frand();
    size_t nb, nb_off, nb_ref;
    const float *y = run_with(g, x, in.nbytes, &nb), *y_off = run_with(off, x, in.nbytes, &nb_off),
                *y_ref = run_with(ref, x, in.nbytes, &nb_ref);
    ck_assert_uint_eq(nb, nb_ref);
    ck_assert_int_eq(memcmp(y, y_off, nb), 0);
    for (size_t i = 0; i < nb / sizeof(float); i++)
      ck_assert_msg(fabsf(y[i] - y_ref[i]) <= tol * (1 + fabsf(y_ref[i])), "run %d y[%zu] = %g, ref %g", run, i,
                    y[i], y_ref[i]);
  }
  ck_assert_str_eq(dlc_engine_report(g), report);
  ck_assert_str_eq(dlc_engine_report(off), "graphs off (dlrt_set_graphs); staging in host memory");
  free(x);
  dlc_free(g), dlc_free(off), dlc_free(ref);
}

/* The compile options reach codegen and autodiff (dlc_options'
 * no_split_k and unroll_rnn: fewer steps, more steps), and dlc_profile
 * times every step with its label and the cost report's FLOPs. */
static int steps_of(const char *text, dlc_options o) {
  dlc_model *m = NULL;
  ck_assert_msg(dlc_compile_string("t.dl", text, &o, &m) == DLC_OK, "%s", dlc_error(m));
  int n = dlc_num_steps(m);
  dlc_free(m);
  return n;
}

START_TEST(api_options_and_profile) {
  /* one 64x64 tile of outputs over K = 256 x 9: the FMA kernel splits K */
  const char *conv = "model c(x: f32[1, 256, 8, 8]) -> f32[1, 64, 8, 8] {\n"
                     "  return conv2d(x, 64, kernel=3, pad=1, bias=false) as conv\n"
                     "}\n";
  int split = steps_of(conv, (dlc_options){.backend = "emu"});
  int whole = steps_of(conv, (dlc_options){.backend = "emu", .no_split_k = 1});
  ck_assert_int_eq(whole, 1);
  ck_assert_int_eq(split, 1); /* the tile's last slice adds the slices */
  const char *rnn = "model r(x: f32[2, 5, 3]) -> f32[] {\n"
                    "  h, hn, cn = lstm(x, hidden=8, layers=1) as lstm\n"
                    "  return mean(h)\n"
                    "}\n";
  int bptt = steps_of(rnn, (dlc_options){.backend = "emu", .grad = 1});
  int unrolled = steps_of(rnn, (dlc_options){.backend = "emu", .grad = 1, .unroll_rnn = 1});
  ck_assert_msg(unrolled > bptt, "unrolled %d steps, lstm_bptt %d", unrolled, bptt);
  dlc_model *m = NULL;
  dlc_options o = {.backend = "emu"};
  ck_assert_msg(dlc_compile_string("t.dl", conv, &o, &m) == DLC_OK, "%s", dlc_error(m));
  ck_assert_int_eq(dlc_init_weights(m, 3), DLC_OK);
  dlc_step_time st[1];
  ck_assert_int_eq(dlc_profile(m, st, 1), DLC_ERR_RUN); /* before a run */
  float x[256 * 64], x2[256 * 64], y1[64 * 64];
  for (int i = 0; i < 256 * 64; i++) x[i] = frand(), x2[i] = frand();
  size_t nbytes;
  memcpy(y1, run_with(m, x, sizeof x, &nbytes), sizeof y1);
  ck_assert_int_eq(nbytes, sizeof y1);
  ck_assert_msg(dlc_profile(m, st, 1) == DLC_OK, "%s", dlc_error(m));
  ck_assert_ptr_nonnull(strstr(st[0].label, "split-K"));
  ck_assert(st[0].us > 0);
  /* the conv's FLOPs (the taps inside the image: just under
   * 2 x 64 x 256 x 9 x 64) */
  double full = 2.0 * 64 * 256 * 9 * 64;
  ck_assert_msg(st[0].flops > 0.99 * full && st[0].flops <= full, "%g FLOPs", st[0].flops);
  /* The slices' counters are back at zero after a run: the next run on
   * other inputs gives what a fresh model gives, bit for bit, and the
   * first run's input again its first result. */
  const float *y2 = run_with(m, x2, sizeof x2, &nbytes);
  dlc_model *fresh = NULL;
  ck_assert_int_eq(dlc_compile_string("t.dl", conv, &o, &fresh), DLC_OK);
  ck_assert_int_eq(dlc_init_weights(fresh, 3), DLC_OK);
  ck_assert(memcmp(y2, run_with(fresh, x2, sizeof x2, &nbytes), sizeof y1) == 0);
  ck_assert(memcmp(y2, y1, sizeof y1) != 0);
  ck_assert(memcmp(y1, run_with(m, x, sizeof x, &nbytes), sizeof y1) == 0);
  dlc_free(fresh);
  dlc_free(m);
}
END_TEST

/* Rows cut into parts: the last part of a row to arrive adds them, in
 * the launch that computed them.  Its counters are back at zero after a
 * run, so a rerun on other inputs gives what a fresh model gives, bit
 * for bit; the first input again gives its first result. */
START_TEST(split_rows_rerun) {
  const char *text = "model r(x: f32[2, 131072]) -> f32[2] {\n  return mean(x * x, axis=1)\n}\n";
  dlc_options o = {.backend = "emu"};
  ck_assert_int_eq(steps_of(text, o), 1);
  dlc_model *m = NULL, *fresh = NULL;
  ck_assert_msg(dlc_compile_string("t.dl", text, &o, &m) == DLC_OK, "%s", dlc_error(m));
  ck_assert_int_eq(dlc_compile_string("t.dl", text, &o, &fresh), DLC_OK);
  enum { N = 2 * 131072 };
  float *x = malloc(sizeof(float) * N), *x2 = malloc(sizeof(float) * N), y1[2];
  double want[2] = {0, 0};
  ck_assert(x && x2);
  for (int i = 0; i < N; i++) x[i] = frand(), x2[i] = frand();
  for (int i = 0; i < N; i++) want[i / 131072] += (double)x[i] * x[i] / 131072;
  size_t nbytes;
  memcpy(y1, run_with(m, x, sizeof(float) * N, &nbytes), sizeof y1);
  ck_assert_int_eq(nbytes, sizeof y1);
  for (int r = 0; r < 2; r++) ck_assert_double_eq_tol(y1[r], want[r], 1e-5 * want[r]);
  const float *y2 = run_with(m, x2, sizeof(float) * N, &nbytes);
  ck_assert(memcmp(y2, run_with(fresh, x2, sizeof(float) * N, &nbytes), sizeof y1) == 0);
  ck_assert(memcmp(y2, y1, sizeof y1) != 0);
  ck_assert(memcmp(y1, run_with(m, x, sizeof(float) * N, &nbytes), sizeof y1) == 0);
  free(x);
  free(x2);
  dlc_free(fresh);
  dlc_free(m);
}
END_TEST

START_TEST(emu_replay_matches_reference) {
  replay_matches_reference("examples/mlp.dl", 1e-5f,
                           "graphs on: 1 graph over 6 steps, every step captured; staging in host memory");
}
END_TEST

/* Side streams on emu: the inception-style block's graph runs its
 * branches on 3 streams (emu replays the highest stream first, so a
 * missing order between two steps that share bytes gives wrong numbers
 * here). */
START_TEST(emu_side_streams_match_reference) {
  replay_matches_reference("tests/engine/inception.dl", 1e-4f,
                           "graphs on: 1 graph over 7 steps, every step captured, independent steps on up to 3 "
                           "streams; staging in host memory");
}
END_TEST

/* A plan built in the test, run through dlrt directly. */
typedef struct Built {
  Ctx c;
  ModelBuild b;
} Built;

static const char ew_text[] = "model ew(x: f32[4, 8]) -> f32[4, 8] {\n  return tanh(relu(x) * 0.5) + x\n}\n";

static void build(Built *bt, const char *text) {
  ctx_init(&bt->c);
  char path[] = "/tmp/dlcc-engine-XXXXXX.dl";
  int fd = mkstemps(path, 3);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  bt->b = (ModelBuild){.path = path, .mode = "f32"};
  ck_assert_msg(test_build_model(&bt->c, &bt->b), "%s", diag_text(&bt->c));
  unlink(path);
}

/* The schedule itself, on plans with branches and reused arena bytes:
 * for every two steps that touch a common byte, one writing, the later
 * runs after the earlier by its stream's order or a chain of waits
 * (vector clocks computed here from the schedule alone), every event is
 * recorded before it is waited for, a barrier step is ordered against
 * every other step, and a chain of steps uses one stream and no event.
 * Counts the barriers into *barriers. */
static void check_schedule(const RtPlan *p, int *barriers) {
  RtStreamPlan b;
  ck_assert_int_eq(rt_stream_plan(p, 0, p->n_steps, RT_SIDE_STREAMS, &b), 0);
  uint32_t n = p->n_steps, L = b.lanes;
  int64_t *clock = calloc((size_t)n * L, sizeof *clock), lane_clock[RT_SIDE_STREAMS][RT_SIDE_STREAMS];
  int64_t *event_clock = calloc(b.n_events, sizeof *event_clock * RT_SIDE_STREAMS);
  bool *recorded = calloc(b.n_events, 1);
  for (uint32_t a = 0; a < RT_SIDE_STREAMS; a++)
    for (uint32_t c = 0; c < RT_SIDE_STREAMS; c++) lane_clock[a][c] = -1;
  for (uint32_t j = 0; j < n; j++) {
    const RtStreamStep *s = &b.step[j];
    ck_assert_uint_lt(s->lane, L);
    for (uint32_t w = 0; w < s->n_waits; w++) {
      int32_t e = b.waits[s->wait_first + w];
      ck_assert(recorded[e]);
      for (uint32_t c = 0; c < L; c++)
        if (event_clock[e * RT_SIDE_STREAMS + c] > lane_clock[s->lane][c])
          lane_clock[s->lane][c] = event_clock[e * RT_SIDE_STREAMS + c];
    }
    lane_clock[s->lane][s->lane] = j;
    for (uint32_t c = 0; c < L; c++) clock[(size_t)j * L + c] = lane_clock[s->lane][c];
    if (s->mark >= 0) {
      ck_assert(!recorded[s->mark]);
      recorded[s->mark] = true;
      for (uint32_t c = 0; c < L; c++) event_clock[s->mark * RT_SIDE_STREAMS + c] = lane_clock[s->lane][c];
    }
  }
  RtAccessRange ri[64], rj[64];
  for (uint32_t j = 0; j < n; j++) {
    int nj = rt_step_access(p, &p->steps[j], rj, 64);
    for (uint32_t i = 0; i < j; i++) {
      int ni = rt_step_access(p, &p->steps[i], ri, 64);
      bool conflict = false;
      for (int x = 0; x < ni; x++)
        for (int y = 0; y < nj; y++)
          conflict |= (ri[x].write || rj[y].write) && ri[x].ref.space == rj[y].ref.space &&
                      ri[x].ref.index == rj[y].ref.index && ri[x].ref.offset < rj[y].ref.offset + rj[y].nbytes &&
                      rj[y].ref.offset < ri[x].ref.offset + ri[x].nbytes;
      if (conflict)
        ck_assert_msg(clock[(size_t)j * L + b.step[i].lane] >= i, "step %u is not ordered after step %u", j, i);
    }
  }
  /* A barrier (a cooperative launch needs every block resident, an
   * all-reduce the host's communicator, a step of unknown ranges may
   * touch anything) runs after every step before it and before every
   * step after it, conflict or not. */
  for (uint32_t j = 0; j < n; j++) {
    const RtStep *s = &p->steps[j];
    bool barrier = s->kind == RT_STEP_ALLREDUCE || rt_step_access(p, s, rj, 64) < 0 ||
                   (s->kind == RT_STEP_LAUNCH && p->kernels[s->launch.kernel].cooperative);
    if (!barrier) continue;
    (*barriers)++;
    for (uint32_t i = 0; i < n; i++) {
      if (i < j)
        ck_assert_msg(clock[(size_t)j * L + b.step[i].lane] >= i, "barrier %u does not follow step %u", j, i);
      if (i > j)
        ck_assert_msg(clock[(size_t)i * L + b.step[j].lane] >= j, "step %u does not follow barrier %u", i, j);
    }
  }
  free(clock), free(event_clock), free(recorded);
  rt_stream_plan_free(&b);
}

START_TEST(stream_schedule_orders_every_conflict) {
  Ctx c;
  ctx_init(&c);
  char path[4096];
  const char *models[] = {"tests/engine/inception.dl", "examples/lstm.dl", "examples/transformer.dl",
                          "examples/mobilenetv2.dl", "examples/llama_block.dl"};
  for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
    snprintf(path, sizeof path, "%s/%s", srcdir(), models[k]);
    ModelBuild mb = {.path = path, .mode = "f32"};
    ck_assert_msg(test_build_model(&c, &mb), "%s", diag_text(&c));
    int barriers = 0;
    check_schedule(mb.cg.plan, &barriers);
    /* the LSTM's two persistent (cooperative) kernels */
    if (k == 1) ck_assert_int_eq(barriers, 2);
    RtStreamPlan b;
    ck_assert_int_eq(rt_stream_plan(mb.cg.plan, 0, mb.cg.plan->n_steps, RT_SIDE_STREAMS, &b), 0);
    if (k == 0) ck_assert_uint_eq(b.lanes, 3);
    if (k == 3) ck_assert_msg(b.lanes == 1 && b.n_events == 0, "a chain took %u streams", b.lanes);
    if (k == 4) ck_assert_uint_eq(b.lanes, 2); /* its residual GEMMs read C apart from D */
    rt_stream_plan_free(&b);
  }
  ctx_free(&c);
  /* A cooperative kernel beside an independent step: only the barrier
   * rule orders them. */
  Built bt;
  build(&bt, "model two(x: f32[4, 6, 8], z: f32[64, 64]) -> (f32[4, 6, 16], f32[64, 64]) {\n"
             "  y, h, c = lstm(x, 16)\n  return y, tanh(z) * 2.0 + z\n}\n");
  int barriers = 0;
  check_schedule(bt.b.cg.plan, &barriers);
  ck_assert_int_eq(barriers, 1);
  ctx_free(&bt.c);
}
END_TEST

static void ew_expect(const float *x, float *y) {
  for (int i = 0; i < 32; i++) y[i] = tanhf(fmaxf(x[i], 0) * 0.5f) + x[i];
}

/* Inputs and outputs bound to memory the caller owns (on emu a host
 * pointer is the device pointer), runs queued and waited for; a new
 * binding is picked up by the graph (recaptured), unbinding returns to
 * staging. */
START_TEST(emu_bound_io_and_async) {
  Built bt;
  build(&bt, ew_text);
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(bt.b.cg.plan, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  float x[2][32], y[2][32], want[32], got[32];
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < 32; i++) x[b][i] = frand();
  for (int run = 0; run < 6; run++) {
    int b = run / 3; /* three runs on each pair of buffers: launch or capture, then replay */
    ck_assert_int_eq(dlrt_bind_input(m, 0, (uint64_t)(uintptr_t)x[b]), DLRT_OK);
    ck_assert_int_eq(dlrt_bind_output(m, 0, (uint64_t)(uintptr_t)y[b]), DLRT_OK);
    x[b][run] = (float)run - 2.5f; /* new data in the same buffer */
    memset(y[b], 0, sizeof y[b]);
    ck_assert_msg(dlrt_run_async(m, NULL) == DLRT_OK, "%s", dlrt_error(m));
    ck_assert_int_eq(dlrt_set_input(m, 0, x[b], sizeof x[b]), DLRT_E_STATE);
    ck_assert_str_eq(dlrt_error(m), "a run is in flight: dlrt_wait for it before using the model again");
    ck_assert_msg(dlrt_wait(m) == DLRT_OK, "%s", dlrt_error(m));
    ew_expect(x[b], want);
    for (int i = 0; i < 32; i++) ck_assert_msg(fabsf(y[b][i] - want[i]) <= 1e-6f, "run %d y[%d]", run, i);
    ck_assert_int_eq(dlrt_get_output(m, 0, got, sizeof got), DLRT_OK);
    ck_assert_int_eq(memcmp(got, y[b], sizeof got), 0);
  }
  ck_assert_str_eq(dlrt_engine_report(m), "graphs on: 1 graph over 1 steps, every step captured; staging in host memory");
  /* Unbound: the input must be set again, then staging serves. */
  ck_assert_int_eq(dlrt_bind_input(m, 0, 0), DLRT_OK);
  ck_assert_int_eq(dlrt_bind_output(m, 0, 0), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_E_STATE);
  ck_assert_str_eq(dlrt_error(m), "run: input 'x' was never set");
  ck_assert_int_eq(dlrt_set_input(m, 0, x[0], sizeof x[0]), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_OK);
  ck_assert_int_eq(dlrt_get_output(m, 0, got, sizeof got), DLRT_OK);
  ew_expect(x[0], want);
  for (int i = 0; i < 32; i++) ck_assert_float_eq_tol(got[i], want[i], 1e-6f);
  /* emu has no streams to order with. */
  ck_assert_int_eq(dlrt_run_async(m, (void *)1), DLRT_E_DEVICE);
  ck_assert_str_eq(dlrt_error(m), "run_async: waiting for the caller's stream: emu: no CUDA streams on the CPU "
                                  "emulator (pass NULL)");
  ck_assert_int_eq(dlrt_bind_input(m, 1, 0), DLRT_E_ARG);
  ck_assert_str_eq(dlrt_error(m), "bind_input: no input 1 (the model has 1)");
  /* An output may not share a byte with a bound input, either way round;
   * the refused binding leaves the old one in place. */
  float shared[64];
  char want_msg[512];
  ck_assert_int_eq(dlrt_bind_input(m, 0, (uint64_t)(uintptr_t)shared), DLRT_OK);
  ck_assert_int_eq(dlrt_bind_output(m, 0, (uint64_t)(uintptr_t)(shared + 31)), DLRT_E_ARG);
  snprintf(want_msg, sizeof want_msg,
           "bind_output 'output': its 128 bytes at 0x%" PRIx64 " overlap input 'x' bound at 0x%" PRIx64
           " (128 bytes): an output must not share memory with another bound input or output",
           (uint64_t)(uintptr_t)(shared + 31), (uint64_t)(uintptr_t)shared);
  ck_assert_str_eq(dlrt_error(m), want_msg);
  ck_assert_int_eq(dlrt_bind_output(m, 0, (uint64_t)(uintptr_t)y[1]), DLRT_OK);
  ck_assert_int_eq(dlrt_bind_input(m, 0, (uint64_t)(uintptr_t)(y[1] + 31)), DLRT_E_ARG);
  ck_assert_int_eq(dlrt_bind_output(m, 0, (uint64_t)(uintptr_t)(shared + 32)), DLRT_OK); /* adjacent: fine */
  for (int i = 0; i < 32; i++) shared[i] = x[1][i];
  ck_assert_msg(dlrt_run(m) == DLRT_OK, "%s", dlrt_error(m));
  ew_expect(x[1], want);
  for (int i = 0; i < 32; i++) ck_assert_float_eq_tol(shared[32 + i], want[i], 1e-6f);
  dlrt_close(m);
  ctx_free(&bt.c);
}
END_TEST

/* A stream of batches: each fed its own random input, drained in order,
 * each output the function of its own batch's input. */
typedef struct Feed {
  long n, fed, drained;
  float x[16][32];
  int bad;
} Feed;

static int feed_batch(void *user, long batch, void *const *inputs) {
  Feed *f = user;
  if (batch >= f->n) return 1;
  ck_assert_int_eq(batch, f->fed++);
  for (int i = 0; i < 32; i++) f->x[batch][i] = frand();
  memcpy(inputs[0], f->x[batch], sizeof f->x[batch]);
  return 0;
}

static int drain_batch(void *user, long batch, const void *const *outputs) {
  Feed *f = user;
  ck_assert_int_eq(batch, f->drained++);
  ck_assert_int_le(f->fed, batch + 3); /* at most two batches ahead */
  float want[32];
  ew_expect(f->x[batch], want);
  const float *y = outputs[0];
  for (int i = 0; i < 32; i++) f->bad += fabsf(y[i] - want[i]) > 1e-6f;
  return 0;
}

START_TEST(emu_batch_stream) {
  Built bt;
  build(&bt, ew_text);
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(bt.b.cg.plan, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  for (long n = 0; n < 6; n++) {
    Feed f = {.n = n};
    long done = -1;
    ck_assert_msg(dlrt_run_batches(m, feed_batch, drain_batch, &f, &done) == DLRT_OK, "%s", dlrt_error(m));
    ck_assert_int_eq(done, n);
    ck_assert_int_eq(f.drained, n);
    ck_assert_int_eq(f.bad, 0);
  }
  ck_assert_str_eq(dlrt_engine_report(m), "graphs on: 1 graph over 1 steps, every step captured; staging in host memory");
  float x[32] = {0};
  ck_assert_int_eq(dlrt_bind_input(m, 0, (uint64_t)(uintptr_t)x), DLRT_OK);
  Feed f = {.n = 2};
  ck_assert_int_eq(dlrt_run_batches(m, feed_batch, drain_batch, &f, NULL), DLRT_E_STATE);
  ck_assert_str_eq(dlrt_error(m), "run_batches: input 'x' is bound to device memory (unbind it)");
  dlrt_close(m);
  ctx_free(&bt.c);
}
END_TEST

#ifdef HAVE_CUDA
static void *fake;
static int (*calls)(const char *);

static void fake_setup(void) {
  const char *b = getenv("top_builddir");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/.libs/libfakecuda.so", b ? b : ".");
  ck_assert_msg(access(path, R_OK) == 0, "%s is missing", path);
  setenv("DLCC_LIBCUDA", path, 1);
  unsetenv("DLCC_NO_GRAPHS");
  fake = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  ck_assert_ptr_nonnull(fake);
  calls = (int (*)(const char *))dlsym(fake, "fakecuda_calls");
  ck_assert_ptr_nonnull(calls);
}

static void fake_teardown(void) {
  unsetenv("DLCC_LIBCUDA");
  unsetenv("FAKECUDA_CAPTURE_ERROR");
  unsetenv("FAKECUDA_NO_PINNED");
  dlclose(fake);
}

static const char *const watched[] = {"cuGraphLaunch",     "cuLaunchKernel",    "cuStreamSynchronize",
                                      "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuCtxSetCurrent",
                                      "graph kernels",     "cuStreamBeginCapture", "cuMemcpyDtoDAsync",
                                      "cuLaunchCooperativeKernel"};
enum { N_WATCHED = sizeof watched / sizeof watched[0] };

/* The driver calls of one dlc_run (inputs in, steps, outputs out). */
static void count_run(dlc_model *m, const float *x, size_t nbytes, int delta[N_WATCHED]) {
  int before[N_WATCHED];
  for (int i = 0; i < N_WATCHED; i++) before[i] = calls(watched[i]);
  size_t nb;
  run_with(m, x, nbytes, &nb);
  for (int i = 0; i < N_WATCHED; i++) delta[i] = calls(watched[i]) - before[i];
}

/* ResNet-18 at 32x32 without its classifier: cuBLAS (the fc layer's
 * GEMM) needs a real driver, which the fake is not. */
static char *resnet_without_fc(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/resnet18.dl", srcdir());
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  static char text[16384];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  char *fc = strstr(text, "return linear(flatten(global_avgpool(y)), 1000) as fc");
  char *sig = strstr(text, "f32[N, 1000]");
  ck_assert_msg(fc && sig, "examples/resnet18.dl changed: update the test");
  memcpy(sig, "f32[N, 512] ", 12);
  const char *plain = "return flatten(global_avgpool(y))";
  size_t len = strlen("return linear(flatten(global_avgpool(y)), 1000) as fc");
  memset(fc, ' ', len);
  memcpy(fc, plain, strlen(plain));
  return text;
}

START_TEST(fake_warm_resnet_is_one_graph_launch) {
  const char *text = resnet_without_fc();
  dlc_define hw = {"HW", 32};
  dlc_model *m[2];
  for (int off = 0; off < 2; off++) {
    dlc_options o = {.backend = "cuda", .no_graphs = off, .n_defines = 1, .defines = &hw};
    ck_assert_msg(dlc_compile_string("resnet18.dl", text, &o, &m[off]) == DLC_OK, "%s", dlc_error(m[off]));
    ck_assert_int_eq(dlc_init_weights(m[off], 1), DLC_OK);
  }
  static float x[3 * 32 * 32];
  int d[N_WATCHED];
  /* Graphs off: one launch per step, still one synchronization. */
  count_run(m[1], x, sizeof x, d); /* also the init steps */
  count_run(m[1], x, sizeof x, d);
  /* chains (cooperative) and plain launches: every kernel step */
  int launches = d[1] + d[9], copies = d[8];
  ck_assert_int_gt(launches, 10);
  int want_off[N_WATCHED] = {0, d[1], 1, 1, 1, 0, 0, 0, copies, d[9]};
  for (int i = 0; i < N_WATCHED; i++) ck_assert_msg(d[i] == want_off[i], "graphs off: %s %d", watched[i], d[i]);
  /* Graphs on: warm-up, capture, then a run is one graph launch. */
  count_run(m[0], x, sizeof x, d);
  count_run(m[0], x, sizeof x, d);
  ck_assert_int_eq(d[7], 1); /* captured */
  for (int run = 0; run < 2; run++) {
    count_run(m[0], x, sizeof x, d);
    int want[N_WATCHED] = {1, 0, 1, 1, 1, 0, launches, 0, 0, 0};
    for (int i = 0; i < N_WATCHED; i++) ck_assert_msg(d[i] == want[i], "graphs on: %s %d", watched[i], d[i]);
  }
  char want_report[128];
  snprintf(want_report, sizeof want_report, "graphs on: 1 graph over %d steps, every step captured; staging pinned",
           launches + copies);
  ck_assert_str_eq(dlc_engine_report(m[0]), want_report);
  dlc_free(m[0]), dlc_free(m[1]);
}
END_TEST

/* Side streams through the driver (the fake checks what CUDA checks:
 * every stream of the capture forked from it by an event and joined
 * back): the capture succeeds with the block's branches on 3 streams,
 * each event of the schedule recorded once and waited for, and the
 * graph holds every kernel. */
START_TEST(fake_side_streams_capture) {
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/engine/inception.dl", srcdir());
  dlc_model *m = compile(path, "cuda", 0);
  static float x[2 * 3 * 12 * 12];
  int d[N_WATCHED];
  count_run(m, x, sizeof x, d); /* warm-up */
  int launches = d[1];
  int records = calls("cuEventRecord"), waits = calls("cuStreamWaitEvent");
  count_run(m, x, sizeof x, d); /* the capture */
  ck_assert_int_eq(d[7], 1);
  int graph_kernels = calls("graph kernels");
  count_run(m, x, sizeof x, d);
  ck_assert_int_eq(calls("graph kernels") - graph_kernels, launches);
  ck_assert_str_eq(dlc_engine_report(m), "graphs on: 1 graph over 7 steps, every step captured, independent steps "
                                         "on up to 3 streams; staging pinned");
  /* the schedule's events, each recorded once (the fork too) and waited for */
  ck_assert_int_ge(calls("cuEventRecord") - records, 3);
  ck_assert_int_ge(calls("cuStreamWaitEvent") - waits, calls("cuEventRecord") - records);
  dlc_free(m);
}
END_TEST

/* With launches merged (dlc_compile's default) the block's independent
 * branches share launches: fewer steps, one stream. */
START_TEST(merged_branches_leave_one_stream) {
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/engine/inception.dl", srcdir());
  dlc_options o = {.backend = "cuda"};
  dlc_model *m = NULL;
  ck_assert_msg(dlc_compile_file(path, &o, &m) == DLC_OK, "%s", dlc_error(m));
  ck_assert_int_eq(dlc_init_weights(m, 7), DLC_OK);
  static float x[2 * 3 * 12 * 12];
  int d[N_WATCHED];
  count_run(m, x, sizeof x, d); /* warm-up */
  count_run(m, x, sizeof x, d); /* the capture */
  ck_assert_int_eq(d[7], 1);
  ck_assert_str_eq(dlc_engine_report(m), "graphs on: 1 graph over 4 steps, every step captured; staging pinned");
  dlc_free(m);
}
END_TEST

/* A step that fails inside a capture on a side stream: graphs off with
 * that step's message, and every later launch back on the device's
 * stream, where the host waits. */
START_TEST(fake_side_stream_failure_falls_back) {
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/engine/inception.dl", srcdir());
  dlc_model *m = compile(path, "cuda", 0);
  static float x[2 * 3 * 12 * 12];
  int d[N_WATCHED];
  count_run(m, x, sizeof x, d); /* warm-up */
  setenv("FAKECUDA_FAIL_CAPTURED_LAUNCH", "3", 1); /* steps 1 and 2 are on a side stream */
  count_run(m, x, sizeof x, d);
  unsetenv("FAKECUDA_FAIL_CAPTURED_LAUNCH");
  int stray = calls("stray launches");
  count_run(m, x, sizeof x, d);
  ck_assert_int_eq(d[1], 7);
  ck_assert_int_eq(calls("stray launches"), stray);
  const char *r = dlc_engine_report(m);
  ck_assert_msg(strstr(r, "graphs off: capture failed: run: capturing step 2 ") &&
                    strstr(r, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
                "%s", r);
  dlc_free(m);
}
END_TEST

/* A capture the driver refuses: graphs off for the model, said why, and
 * the run launches its steps instead. */
START_TEST(fake_capture_failure_falls_back) {
  Built bt;
  build(&bt, ew_text);
  setenv("FAKECUDA_CAPTURE_ERROR", "900", 1);
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(bt.b.cg.plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  float x[32] = {0};
  ck_assert_int_eq(dlrt_set_input(m, 0, x, sizeof x), DLRT_OK);
  for (int run = 0; run < 3; run++) {
    int launches = calls("cuLaunchKernel");
    ck_assert_msg(dlrt_run(m) == DLRT_OK, "%s", dlrt_error(m));
    ck_assert_int_eq(calls("cuLaunchKernel") - launches, 1);
  }
  ck_assert_str_eq(dlrt_engine_report(m), "graphs off: capture failed: cuda: cuStreamEndCapture: "
                                          "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (operation not permitted when "
                                          "stream is capturing); staging pinned");
  dlrt_close(m);
  ctx_free(&bt.c);
}
END_TEST

/* Pinning refused: pageable staging, said why; runs go on.  A caller's
 * stream: an event each way, no host wait until dlrt_wait. */
START_TEST(fake_pageable_staging_and_caller_stream) {
  Built bt;
  build(&bt, ew_text);
  setenv("FAKECUDA_NO_PINNED", "1", 1);
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(bt.b.cg.plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  float x[32];
  for (int i = 0; i < 32; i++) x[i] = frand();
  ck_assert_int_eq(dlrt_set_input(m, 0, x, sizeof x), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_OK);
  int syncs = calls("cuStreamSynchronize"), waits = calls("cuStreamWaitEvent"), records = calls("cuEventRecord");
  ck_assert_msg(dlrt_run_async(m, (void *)0x1234) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_int_eq(calls("cuStreamSynchronize"), syncs);
  ck_assert_int_eq(calls("cuStreamWaitEvent") - waits, 2);
  ck_assert_int_eq(calls("cuEventRecord") - records, 2);
  ck_assert_int_eq(dlrt_wait(m), DLRT_OK);
  ck_assert_int_eq(calls("cuStreamSynchronize") - syncs, 1);
  ck_assert_int_eq(dlrt_wait(m), DLRT_OK); /* none in flight */
  ck_assert_str_eq(dlrt_engine_report(m), "graphs on: 1 graph over 1 steps, every step captured; staging in pageable "
                                          "memory (pinning failed: cuMemHostAlloc(128 bytes): "
                                          "CUDA_ERROR_OUT_OF_MEMORY)");
  dlrt_close(m);
  ctx_free(&bt.c);
}
END_TEST

/* Over the fake: a batch's copies on the copy stream, its steps one graph
 * launch, the host waiting on events only (no stream synchronization). */
START_TEST(fake_batch_stream_overlaps) {
  Built bt;
  build(&bt, ew_text);
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(bt.b.cg.plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  Feed f = {.n = 3};
  ck_assert_msg(dlrt_run_batches(m, feed_batch, drain_batch, &f, NULL) == DLRT_OK, "%s", dlrt_error(m));
  const char *names[] = {"cuGraphLaunch", "cuLaunchKernel", "cuStreamSynchronize", "cuMemcpyHtoDAsync",
                         "cuMemcpyDtoHAsync", "cuEventSynchronize", "cuMemcpyDtoDAsync"};
  int before[7];
  for (int i = 0; i < 7; i++) before[i] = calls(names[i]);
  f = (Feed){.n = 10};
  ck_assert_msg(dlrt_run_batches(m, feed_batch, drain_batch, &f, NULL) == DLRT_OK, "%s", dlrt_error(m));
  /* Every batch: 1 graph, 1 copy up, 1 down, 1 event waited for, 2
   * device copies (slot to input, output to slot); no synchronization. */
  int want[7] = {10, 0, 0, 10, 10, 10, 20};
  for (int i = 0; i < 7; i++) ck_assert_msg(calls(names[i]) - before[i] == want[i], "%s: %d", names[i], calls(names[i]) - before[i]);
  dlrt_close(m);
  ctx_free(&bt.c);
}
END_TEST
#endif

static Suite *engine_suite(void) {
  Suite *s = suite_create("engine");
  TCase *tc = tcase_create("emu");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, split_rows_rerun);
  tcase_add_test(tc, emu_replay_matches_reference);
  tcase_add_test(tc, api_options_and_profile);
  tcase_add_test(tc, emu_bound_io_and_async);
  tcase_add_test(tc, emu_batch_stream);
  tcase_add_test(tc, emu_side_streams_match_reference);
  tcase_add_test(tc, stream_schedule_orders_every_conflict);
  suite_add_tcase(s, tc);
#ifdef HAVE_CUDA
  tc = tcase_create("fake_driver");
  tcase_add_checked_fixture(tc, fake_setup, fake_teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, fake_warm_resnet_is_one_graph_launch);
  tcase_add_test(tc, fake_capture_failure_falls_back);
  tcase_add_test(tc, fake_side_streams_capture);
  tcase_add_test(tc, fake_side_stream_failure_falls_back);
  tcase_add_test(tc, merged_branches_leave_one_stream);
  tcase_add_test(tc, fake_pageable_staging_and_caller_stream);
  tcase_add_test(tc, fake_batch_stream_overlaps);
  suite_add_tcase(s, tc);
#endif
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(engine_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

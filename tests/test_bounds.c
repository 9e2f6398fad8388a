/* Check suite for what keeps a plan's kernels inside their memory:
 * index checks in the generated kernels (gather, embedding,
 * gather_elements, gather_nd, the scatters) run on emu must fail the run
 * with exactly ir_eval's message, for indices past the end and before
 * -dim, the first bad one as the interpreter meets it, and leave the
 * model usable; in-range negative indices wrap.  Plans altered as an
 * attacker would (offsets, sizes, kinds, grids, contracts), even with a
 * recomputed seal, must be refused by rt_plan_validate with a message
 * naming the step and argument; the seal itself (XXH64 vectors, tables
 * outside their memory, a corrupt part). */
#include "check_quiet.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlcrt.h"
#include "runtime/runtime.h"
#include "tests/irjob.h"
#include "tests/testutil.h"

static Ctx ctx;

static void setup(void) { ctx_init(&ctx); }
static void teardown(void) { ctx_free(&ctx); }

/* ---- index reports on emu ---- */

/* text run on emu and ir_eval with fills: both fail, with the same
 * message, which is want. */
static void expect_index_error(const char *text, const Fill *fills, const char *want) {
  Job j = compile_at(&ctx, text, 2);
  Data d;
  make_inputs(j.g, fills, 0, &d);
  char ref[512], got[512];
  Tensor *out = calloc((size_t)j.g->n_outputs + 1, sizeof *out);
  ck_assert_msg(!ir_eval(j.g, &d.inputs, NULL, out, ref, sizeof ref), "ir_eval accepted a bad index:\n%s", text);
  free(out);
  ck_assert_str_eq(ref, want);
  ck_assert_int_eq(test_run_emu_status(j.cg.plan, NULL, &d.inputs, &out, got, sizeof got), DLRT_E_INDEX);
  ck_assert_ptr_null(out);
  ck_assert_str_eq(got, ref);
  free_inputs(&d);
}


static const char gather_text[] = "graph g {\n"
                                  "  %d = input {name=\"d\"} : f32[10, 4]\n"
                                  "  %i = input {name=\"i\"} : i64[3]\n"
                                  "  %g = gather %d, %i : f32[3, 4]\n"
                                  "  return %g as \"g\"\n"
                                  "}\n";

START_TEST(gather_past_the_end_and_before_the_start) {
  const Fill d = FILL("d", 1, 2, 3, 4, 5, 6, 7);
  expect_index_error(gather_text, (const Fill[]){d, FILL("i", 1, 50, 2), {NULL, NULL, 0}},
                     "gather: index 50 is out of range for axis 0 of size 10");
  expect_index_error(gather_text, (const Fill[]){d, FILL("i", 1, -11, 2), {NULL, NULL, 0}},
                     "gather: index -11 is out of range for axis 0 of size 10");
  /* An inner axis, i32 indices. */
  expect_index_error("graph g {\n  %x = input {name=\"x\"} : f32[2, 5, 3]\n  %j = input {name=\"j\"} : i32[4]\n"
                     "  %g = gather %x, %j {axis=1} : f32[2, 4, 3]\n  return %g as \"g\"\n}\n",
                     (const Fill[]){FILL("x", 1, 2), FILL("j", 0, 4, -5, 5), {NULL, NULL, 0}},
                     "gather: index 5 is out of range for axis 1 of size 5");
}
END_TEST

/* An embedding is a gather on a weight; the message carries the op's
 * location, as ir_eval's does. */
START_TEST(embedding_names_its_location) {
  expect_index_error("graph e {\n"
                     "  %t = input {name=\"tokens\"} : i64[2, 3]\n"
                     "  %w = input {name=\"w\"} : f32[7, 4]\n"
                     "  %0 = gather %w, %t : f32[2, 3, 4]   ; model.dl:4:7\n"
                     "  return %0 as \"e\"\n"
                     "}\n",
                     (const Fill[]){FILL("tokens", 0, 6, 3, 7, 1, 2), FILL("w", 0.5, 1.5), {NULL, NULL, 0}},
                     "model.dl:4:7: gather: index 7 is out of range for axis 0 of size 7");
}
END_TEST

START_TEST(gather_elements_reports) {
  static const char text[] = "graph e {\n  %d = input {name=\"d\"} : f32[3, 4]\n  %i = input {name=\"i\"} : i64[2, 4]\n"
                             "  %g = gather_elements %d, %i {axis=1} : f32[2, 4]\n  return %g as \"g\"\n}\n";
  const Fill d = FILL("d", 0, 1, 2, 3, 4, 5);
  expect_index_error(text, (const Fill[]){d, FILL("i", 0, 1, 3, -4, 2, 4, 1, 0), {NULL, NULL, 0}},
                     "gather_elements: index 4 is out of range for axis 1 of size 4");
  expect_index_error(text, (const Fill[]){d, FILL("i", 0, 1, -5, 9, 2, 1, 1, 0), {NULL, NULL, 0}},
                     "gather_elements: index -5 is out of range for axis 1 of size 4");
}
END_TEST

/* Several bad indices: the interpreter's first (by element, then by
 * index within the element's row), whatever order the threads ran in. */
START_TEST(gather_nd_reports_the_first) {
  static const char text[] = "graph n {\n  %d = input {name=\"d\"} : f32[3, 4]\n  %i = input {name=\"i\"} : i64[3, 2]\n"
                             "  %g = gather_nd %d, %i : f32[3]\n  return %g as \"g\"\n}\n";
  const Fill d = FILL("d", 0, 1, 2, 3, 4, 5);
  /* Element 0 is bad in its second index, element 1 in its first. */
  expect_index_error(text, (const Fill[]){d, FILL("i", 0, 4, 3, 0, 1, 1), {NULL, NULL, 0}},
                     "gather_nd: index 4 is out of range for axis 1 of size 4");
  expect_index_error(text, (const Fill[]){d, FILL("i", 1, 1, -4, 0, 9, 9), {NULL, NULL, 0}},
                     "gather_nd: index -4 is out of range for axis 0 of size 3");
  expect_index_error("graph b {\n  %d = input {name=\"d\"} : f32[3, 4]\n  %i = input {name=\"i\"} : i64[3, 1]\n"
                     "  %g = gather_nd %d, %i {batch_dims=1} : f32[3]\n  return %g as \"g\"\n}\n",
                     (const Fill[]){d, FILL("i", 3, -1, 4), {NULL, NULL, 0}},
                     "gather_nd: index 4 is out of range for axis 1 of size 4");
}
END_TEST

START_TEST(scatters_report) {
  static const char elements[] = "graph s {\n  %d = input {name=\"d\"} : f32[3, 4]\n"
                                 "  %i = input {name=\"i\"} : i64[2, 2]\n"
                                 "  %u = input {name=\"u\"} : f32[2, 2]\n"
                                 "  %s = scatter_elements %d, %i, %u {axis=1, reduction=\"add\"} : f32[3, 4]\n"
                                 "  return %s as \"s\"\n}\n";
  const Fill d = FILL("d", 0, 1, 2, 3, 4, 5), u = FILL("u", 10, 20);
  /* Two bad ones: index order decides, not the element a thread owns. */
  expect_index_error(elements, (const Fill[]){d, u, FILL("i", 0, 1, 7, 4), {NULL, NULL, 0}},
                     "scatter_elements: index 7 is out of range for axis 1 of size 4");
  expect_index_error(elements, (const Fill[]){d, u, FILL("i", -5, 1, 2, 3), {NULL, NULL, 0}},
                     "scatter_elements: index -5 is out of range for axis 1 of size 4");
  static const char nd[] = "graph s {\n  %d = input {name=\"d\"} : f32[3, 4]\n  %i = input {name=\"i\"} : i64[2, 1]\n"
                           "  %u = input {name=\"u\"} : f32[2, 4]\n"
                           "  %s = scatter_nd %d, %i, %u : f32[3, 4]\n  return %s as \"s\"\n}\n";
  expect_index_error(nd, (const Fill[]){d, u, FILL("i", 1, 3), {NULL, NULL, 0}},
                     "scatter_nd: index 3 is out of range for axis 0 of size 3");
  expect_index_error(nd, (const Fill[]){d, u, FILL("i", -4, 0), {NULL, NULL, 0}},
                     "scatter_nd: index -4 is out of range for axis 0 of size 3");
}
END_TEST

/* Negative indices in range count from the end, as ONNX and ir_eval
 * say; after a run that failed on a bad index, the same model runs
 * clean (the reports were cleared). */
START_TEST(negative_indices_wrap_and_model_recovers) {
  static const char text[] = "graph w {\n  %d = input {name=\"d\"} : f32[3, 4]\n  %i = input {name=\"i\"} : i64[2, 4]\n"
                             "  %g = gather_elements %d, %i {axis=0} : f32[2, 4]\n"
                             "  %n = input {name=\"n\"} : i64[2, 2]\n  %gn = gather_nd %d, %n : f32[2]\n"
                             "  %e = gather %d, %n {axis=1} : f32[3, 2, 2]\n"
                             "  return %g as \"g\", %gn as \"gn\", %e as \"e\"\n}\n";
  Job j = compile_at(&ctx, text, 2);
  const Fill good[] = {FILL("d", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), FILL("i", -1, 0, -3, 2, 1, -2, 0, -1),
                       FILL("n", -1, -4, 2, 3), {NULL, NULL, 0}};
  const Fill bad[] = {good[0], good[1], FILL("n", -1, -5, 2, 3), {NULL, NULL, 0}};
  DlrtModel *m;
  ck_assert_msg(dlrt_open(j.cg.plan, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  for (int round = 0; round < 3; round++) {
    Data d;
    make_inputs(j.g, round == 1 ? bad : good, 0, &d);
    for (int i = 0; i < d.inputs.n; i++)
      ck_assert_int_eq(dlrt_set_input_by_name(m, d.inputs.names[i], d.inputs.tensors[i].data,
                                              ir_tensor_nbytes(&d.inputs.tensors[i].type)),
                       DLRT_OK);
    if (round == 1) {
      ck_assert_int_eq(dlrt_run(m), DLRT_E_INDEX);
      ck_assert_str_eq(dlrt_error(m), "gather_nd: index -5 is out of range for axis 1 of size 4");
    } else {
      ck_assert_msg(dlrt_run(m) == DLRT_OK, "round %d: %s", round, dlrt_error(m));
      Tensor *want = eval_all(j.g, &d.inputs);
      for (int o = 0; o < j.g->n_outputs; o++) {
        size_t n = ir_tensor_nbytes(&want[o].type);
        float *got = malloc(n);
        ck_assert_int_eq(dlrt_get_output(m, o, got, n), DLRT_OK);
        ck_assert_msg(!memcmp(got, want[o].data, n), "round %d: output %d differs from ir_eval", round, o);
        free(got);
      }
      free_outputs(want, j.g->n_outputs);
    }
    free_inputs(&d);
  }
  dlrt_close(m);
}
END_TEST

/* ---- plans an attacker wrote ---- */

/* A mutable deep copy of a plan's steps, arguments and contracts; the
 * rest is shared with the original. */
typedef struct Copy {
  RtPlan p;
  RtStep *steps;
  RtArg **args;
  RtContract *contracts;
  RtParam **params;
} Copy;

static void copy_plan(const RtPlan *src, Copy *c) {
  c->p = *src;
  c->steps = calloc(src->n_steps + 1, sizeof *c->steps);
  c->args = calloc(src->n_steps + 1, sizeof *c->args);
  memcpy(c->steps, src->steps, src->n_steps * sizeof *c->steps);
  for (uint32_t i = 0; i < src->n_steps; i++) {
    RtLaunch *l = &c->steps[i].launch;
    if (c->steps[i].kind != RT_STEP_LAUNCH) continue;
    c->args[i] = calloc(l->n_args + 1, sizeof **c->args);
    memcpy(c->args[i], l->args, l->n_args * sizeof **c->args);
    l->args = c->args[i];
  }
  c->contracts = calloc(src->n_contracts + 1, sizeof *c->contracts);
  c->params = calloc(src->n_contracts + 1, sizeof *c->params);
  memcpy(c->contracts, src->contracts, src->n_contracts * sizeof *c->contracts);
  for (uint32_t i = 0; i < src->n_contracts; i++) {
    RtContract *k = &c->contracts[i];
    c->params[i] = calloc(k->n_params + 1, sizeof **c->params);
    memcpy(c->params[i], k->params, k->n_params * sizeof **c->params);
    k->params = c->params[i];
  }
  c->p.steps = c->steps;
  c->p.contracts = c->contracts;
}

static void free_copy(Copy *c) {
  for (uint32_t i = 0; i < c->p.n_steps; i++) free(c->args[i]);
  for (uint32_t i = 0; i < c->p.n_contracts; i++) free(c->params[i]);
  free(c->steps), free(c->args), free(c->contracts), free(c->params);
}

/* A gather (index reports), a map with its size n, a GEMM and the copy
 * into an output that lives elsewhere. */
static const char crafted_text[] = "graph c {\n"
                                   "  %w = input {name=\"w\"} : f32[6, 4]\n"
                                   "  %t = input {name=\"t\"} : i64[5]\n"
                                   "  %e = gather %w, %t : f32[5, 4]\n"
                                   "  %r = relu %e : f32[5, 4]\n"
                                   "  %v = input {name=\"v\"} : f32[4, 6]\n"
                                   "  %m = matmul %r, %v : f32[5, 6]\n"
                                   "  return %m as \"m\", %w as \"wcopy\"\n"
                                   "}\n";

/* The step of c whose label starts with op, and its first argument of
 * kind (-1 when none). */
static RtStep *step_of(Copy *c, const char *op, uint32_t kind, int *arg) {
  for (uint32_t i = 0; i < c->p.n_steps; i++) {
    RtStep *s = &c->steps[i];
    if (strncmp(s->label, op, strlen(op))) continue;
    *arg = -1;
    for (uint32_t a = 0; s->kind == RT_STEP_LAUNCH && a < s->launch.n_args && *arg < 0; a++)
      if (s->launch.args[a].kind == kind) *arg = (int)a;
    return s;
  }
  ck_abort_msg("no step '%s'", op);
  return NULL;
}

/* Refused, with err starting with want; and refused the same once the
 * plan is sealed again over everything (as a crafter who recomputes
 * the checksum would). */
static void expect_refused(Copy *c, const char *want) {
  char err[1024];
  ck_assert_int_eq(rt_plan_validate(&c->p, err, sizeof err), -1);
  ck_assert_msg(!strncmp(err, want, strlen(want)), "got '%s', want '%s...'", err, want);
  c->p.sealed = RT_PLAN_SEALED;
  rt_plan_seal(&c->p, c->p.seal);
  const RtRegion all = {0, UINTPTR_MAX};
  char err2[1024];
  ck_assert_int_eq(rt_plan_validate_in(&c->p, &all, 1, err2, sizeof err2), -1);
  ck_assert_str_eq(err2, err);
  c->p.sealed = 0;
}

START_TEST(crafted_launches_are_refused) {
  Job j = compile_at(&ctx, crafted_text, 0);
  const RtPlan *p = j.cg.plan;
  char err[1024];
  ck_assert_msg(rt_plan_validate(p, err, sizeof err) == 0, "%s", err);
  Copy c;
  int a;

  /* The map's size: past its buffers. */
  copy_plan(p, &c);
  RtStep *relu = step_of(&c, "relu", RT_ARG_I32, &a);
  ck_assert_int_ge(a, 0);
  ((RtArg *)relu->launch.args)[a].i = 21;
  char want[512];
  snprintf(want, sizeof want, "plan: step %d (relu %%", (int)(relu - c.steps));
  expect_refused(&c, want);
  char buf[1024];
  ck_assert_int_eq(rt_plan_validate(&c.p, buf, sizeof buf), -1);
  ck_assert_msg(strstr(buf, "21 is outside [20, 20], where kernel 'relu_"), "%s", buf);
  free_copy(&c);

  /* A pointer moved so that the kernel's extent passes the arena's end. */
  copy_plan(p, &c);
  RtStep *g = step_of(&c, "gather", RT_ARG_PTR, &a);
  RtArg *ga = (RtArg *)g->launch.args;
  int out = -1;
  for (uint32_t k = 0; k < g->launch.n_args; k++)
    if (ga[k].kind == RT_ARG_PTR && ga[k].ref.space == RT_SPACE_ARENA) out = (int)k;
  ck_assert_int_ge(out, 0);
  ga[out].ref.offset = c.p.arena_bytes - 16;
  snprintf(want, sizeof want, "plan: step %d (gather %%", (int)(g - c.steps));
  expect_refused(&c, want);
  ck_assert_int_eq(rt_plan_validate(&c.p, buf, sizeof buf), -1);
  snprintf(want, sizeof want, "argument %d: offset %" PRIu64 " + 80 bytes is outside ARENA", out, c.p.arena_bytes - 16);
  ck_assert_msg(strstr(buf, want), "%s", buf);
  free_copy(&c);

  /* The index reports past STATUS, and a gather writing over an input. */
  copy_plan(p, &c);
  g = step_of(&c, "gather", RT_ARG_PTR, &a);
  ga = (RtArg *)g->launch.args;
  int st = -1;
  for (uint32_t k = 0; k < g->launch.n_args; k++)
    if (ga[k].kind == RT_ARG_PTR && ga[k].ref.space == RT_SPACE_STATUS) st = (int)k;
  ck_assert_int_ge(st, 0);
  ga[st].ref.offset = 8;
  snprintf(want, sizeof want, "plan: step %d (gather %%", (int)(g - c.steps));
  expect_refused(&c, want);
  ga[st].ref.offset = 0;
  ga[out].ref = (RtRef){RT_SPACE_INPUT, 0, 0};
  ck_assert_int_eq(rt_plan_validate(&c.p, buf, sizeof buf), -1);
  ck_assert_msg(strstr(buf, "writes into INPUT, which the model only reads"), "%s", buf);
  free_copy(&c);

  /* A scalar where the kernel takes a pointer; a bigger grid; a
   * contract of another kernel; one argument short. */
  copy_plan(p, &c);
  g = step_of(&c, "gather", RT_ARG_PTR, &a);
  ((RtArg *)g->launch.args)[a].kind = RT_ARG_I64;
  expect_refused(&c, want);
  ck_assert_int_eq(rt_plan_validate(&c.p, buf, sizeof buf), -1);
  ck_assert_msg(strstr(buf, "kind 2, but kernel 'gather_"), "%s", buf);
  free_copy(&c);
  copy_plan(p, &c);
  g = step_of(&c, "gather", RT_ARG_PTR, &a);
  g->launch.grid[0] = 4096;
  expect_refused(&c, want);
  free_copy(&c);
  copy_plan(p, &c);
  g = step_of(&c, "gather", RT_ARG_PTR, &a);
  relu = step_of(&c, "relu", RT_ARG_PTR, &a);
  g->launch.contract = relu->launch.contract;
  expect_refused(&c, want);
  ck_assert_int_eq(rt_plan_validate(&c.p, buf, sizeof buf), -1);
  ck_assert_msg(strstr(buf, "is not one of its contracts"), "%s", buf);
  g->launch.contract = relu->launch.contract = 0;
  free_copy(&c);
  copy_plan(p, &c);
  g = step_of(&c, "gather", RT_ARG_PTR, &a);
  g->launch.n_args--;
  expect_refused(&c, want);
  free_copy(&c);

  /* A contract that lets the kernel touch more than its space holds, and
   * a copy into the index reports. */
  copy_plan(p, &c);
  g = step_of(&c, "gather", RT_ARG_PTR, &a);
  c.params[g->launch.contract][out].nbytes = c.p.arena_bytes + 1;
  expect_refused(&c, want);
  free_copy(&c);
  copy_plan(p, &c);
  for (uint32_t i = 0; i < c.p.n_steps; i++)
    if (c.steps[i].kind == RT_STEP_COPY) c.steps[i].copy.src = (RtRef){RT_SPACE_STATUS, 0, 0};
  ck_assert_int_eq(rt_plan_validate(&c.p, buf, sizeof buf), -1);
  ck_assert_msg(strstr(buf, "copy src: STATUS holds index reports, not tensors"), "%s", buf);
  free_copy(&c);
}
END_TEST

/* ---- the seal ---- */

START_TEST(hash_vectors) {
  /* XXH64's published values (libxxhash agrees). */
  ck_assert_uint_eq(rt_hash64("", 0, 0), 0xef46db3751d8e999ull);
  ck_assert_uint_eq(rt_hash64("abc", 3, 0), 0x44bc2cf5ad770999ull);
  ck_assert_uint_eq(rt_hash64("dlcc plans are checked whole", 28, 7), 0x4458bafa377e73b1ull);
  unsigned char bytes[100];
  for (int i = 0; i < 100; i++) bytes[i] = (unsigned char)i;
  ck_assert_uint_eq(rt_hash64(bytes, 100, 1), 0x3d19a3a2098a7023ull);
}
END_TEST

START_TEST(seal_checks_memory_then_checksums) {
  Job j = compile_at(&ctx, crafted_text, 0);
  Copy c;
  copy_plan(j.cg.plan, &c);
  c.p.sealed = RT_PLAN_SEALED;
  rt_plan_seal(&c.p, c.p.seal);
  char err[1024];
  const RtRegion all = {0, UINTPTR_MAX};
  ck_assert_msg(rt_plan_validate_in(&c.p, &all, 1, err, sizeof err) == 0, "%s", err);
  /* Not inside any loaded object: a sealed plan cannot be on the heap. */
  ck_assert_int_eq(rt_plan_validate(&c.p, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: a sealed plan must lie in a loaded model.so, and this one does not");
  /* Everything readable but the byte after the step table: a count one
   * flip made larger sends the table past it, and it is refused unread. */
  uintptr_t e = (uintptr_t)(c.steps + c.p.n_steps);
  const RtRegion gap[2] = {{0, e}, {e + 1, UINTPTR_MAX}};
  ck_assert_msg(rt_plan_check_seal(&c.p, gap, 2, err, sizeof err) == 0, "%s", err);
  c.p.n_steps += 1 << 20;
  char want[256];
  snprintf(want, sizeof want,
           "plan: the table of %" PRIu32 " steps lies outside the memory the model was loaded into: the model is "
           "corrupt",
           c.p.n_steps);
  ck_assert_int_eq(rt_plan_check_seal(&c.p, gap, 2, err, sizeof err), -1);
  ck_assert_str_eq(err, want);
  c.p.n_steps -= (1 << 20) - 1; /* one more: the zeroed entry after the table */
  ck_assert_int_eq(rt_plan_validate_in(&c.p, &all, 1, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "plan: the plan header do not match the model's checksum (stored "), "%s", err);
  c.p.n_steps--;
  const RtRegion none = {0, 1};
  ck_assert_int_eq(rt_plan_check_seal(&c.p, &none, 1, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: the plan lies outside the memory the model was loaded into");
  /* One argument changed: its part, and only it, is named. */
  c.args[0][0].ref.offset ^= 64;
  ck_assert_int_eq(rt_plan_validate_in(&c.p, &all, 1, err, sizeof err), -1);
  ck_assert_msg(!strncmp(err, "plan: the steps do not match the model's checksum (stored ", 58), "%s", err);
  c.args[0][0].ref.offset ^= 64;
  c.p.sealed ^= 1 << 9;
  ck_assert_int_eq(rt_plan_validate_in(&c.p, &all, 1, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: the seal marker is 0x5345434c, neither 0 nor 0x5345414c: the model is corrupt");
  free_copy(&c);
}
END_TEST

static Suite *bounds_suite(void) {
  Suite *s = suite_create("bounds");
  TCase *t = tcase_create("index reports");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 120);
  tcase_add_test(t, gather_past_the_end_and_before_the_start);
  tcase_add_test(t, embedding_names_its_location);
  tcase_add_test(t, gather_elements_reports);
  tcase_add_test(t, gather_nd_reports_the_first);
  tcase_add_test(t, scatters_report);
  tcase_add_test(t, negative_indices_wrap_and_model_recovers);
  suite_add_tcase(s, t);
  TCase *p = tcase_create("plans");
  tcase_add_checked_fixture(p, setup, teardown);
  tcase_add_test(p, crafted_launches_are_refused);
  tcase_add_test(p, hash_vectors);
  tcase_add_test(p, seal_checks_memory_then_checksums);
  suite_add_tcase(s, p);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(bounds_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}

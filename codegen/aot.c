/* The ahead-of-time emitter: takes a graph, its compiled plan and its
 * weights, returns model.so and model.h on disk.  It writes the plan as C
 * initializers into a temporary model.c whose large blobs (the weights,
 * the CUDA source, a cubin and PTX per --arch) enter through `.incbin` in
 * a top-level asm block, so a 100 MB model compiles as fast as a small
 * one; then it runs the host C compiler ($CC, else cc) to link it against
 * libdlcrt.  Every initializer is designated, so that a field added to
 * plan.h cannot shift the others.  docs/aot.md describes what a model.so
 * holds. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen.h"
#include "ir/eval.h"
#include "ir/names.h"
#include "runtime/runtime.h"
#include "runtime/tensorio.h"

#ifndef DLCC_AOT_LIBDIR
#define DLCC_AOT_LIBDIR "/usr/local/lib"
#endif
#ifndef DLCC_AOT_INCLUDEDIR
#define DLCC_AOT_INCLUDEDIR "/usr/local/include/dlcrt"
#endif
#ifndef DLCC_AOT_SRC_INCLUDEDIR
#define DLCC_AOT_SRC_INCLUDEDIR ""
#endif

typedef struct Aot {
  Ctx *ctx;
  const RtPlan *plan;
  const CgAotOptions *o;
  char dir[PATH_MAX]; /* the temporary folder */
  FILE *c;            /* model.c */
  int n_blobs;
  double started; /* ctx_now() at the start, for --time-stages */
} Aot;

static bool fail(Aot *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(Aot *a, const char *fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  diag_error(a->ctx, (SrcLoc){0}, "%s", buf);
  return false;
}

static char *path_in(Aot *a, const char *name) {
  size_t n = strlen(a->dir) + strlen(name) + 2;
  char *p = arena_alloc(&a->ctx->arena, n);
  snprintf(p, n, "%s/%s", a->dir, name);
  return p;
}

/* ---- C text ---- */

static void put_i64(FILE *f, int64_t v) {
  if (v == INT64_MIN) fputs("(-9223372036854775807LL - 1)", f);
  else fprintf(f, "%" PRId64 "LL", v);
}

/* Exact: hex floats round trip. */
static void put_f32(FILE *f, float v) {
  if (isnan(v)) fputs(signbit(v) ? "(-NAN)" : "NAN", f);
  else if (isinf(v)) fputs(v < 0 ? "(-HUGE_VALF)" : "HUGE_VALF", f);
  else fprintf(f, "%af", (double)v);
}

static void put_ref(FILE *f, RtRef r) {
  fprintf(f, "{.space = %" PRIu32 "u, .index = %" PRIu32 "u, .offset = %" PRIu64 "ull}", r.space, r.index, r.offset);
}

static void put_desc(FILE *f, const RtTensorDesc *t) {
  fputs("  {.name = ", f);
  ir_put_c_string(f, t->name);
  fprintf(f, ", .dtype = %" PRIu32 "u, .rank = %" PRIu32 "u, .dims = {", t->dtype, t->rank);
  for (uint32_t d = 0; d < t->rank && d < RT_MAX_RANK; d++) {
    if (d) fputs(", ", f);
    put_i64(f, t->dims[d]);
  }
  fprintf(f, "}, .nbytes = %" PRIu64 "ull,\n   .where = ", t->nbytes);
  put_ref(f, t->where);
  if (t->length_output)
    fprintf(f, ", .length_output = %" PRIu32 "u, .length_axis = %" PRIu32 "u", t->length_output, t->length_axis);
  fputs("},\n", f);
}

static void put_descs(FILE *f, const char *name, const RtTensorDesc *t, uint32_t n) {
  if (!n) return;
  fprintf(f, "static const RtTensorDesc %s[%" PRIu32 "] = {\n", name, n);
  for (uint32_t i = 0; i < n; i++) put_desc(f, &t[i]);
  fputs("};\n\n", f);
}

/* A path inside an assembler string inside a C string. */
static void put_asm_path(FILE *f, const char *path) {
  char buf[2 * PATH_MAX + 3];
  size_t n = 0;
  buf[n++] = '"';
  for (const char *p = path; *p && n < sizeof buf - 3; p++) {
    if (*p == '"' || *p == '\\') buf[n++] = '\\';
    buf[n++] = *p;
  }
  buf[n++] = '"';
  buf[n] = 0;
  ir_put_c_string(f, buf);
}

/* Declares blob NAME (hidden: two models in one process do not clash)
 * and includes the file at path; the caller knows its size. */
static void put_blob(FILE *f, const char *name, const char *path) {
  fprintf(f, "extern const unsigned char %s[] __attribute__((visibility(\"hidden\")));\n", name);
  fprintf(f, "__asm__(\"\\t.section .rodata.dlcc_aot,\\\"a\\\"\\n\"\n");
  fprintf(f, "        \"\\t.balign 256\\n\"\n");
  fprintf(f, "        \"\\t.globl %s\\n\\t.hidden %s\\n%s:\\n\"\n", name, name, name);
  fprintf(f, "        \"\\t.incbin \" ");
  put_asm_path(f, path);
  fprintf(f, " \"\\n\"\n        \"\\t.byte 0\\n\\t.previous\\n\");\n\n");
}

/* ---- blobs ---- */

static bool write_file(Aot *a, const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
    if (f) fclose(f);
    return fail(a, "cannot write '%s': %s", path, strerror(errno));
  }
  return true;
}

/* The WEIGHTS space as the plan lays it out, written in place: the
 * gaps between tensors stay zero. */
static bool write_weights(Aot *a, const char *path) {
  const RtPlan *p = a->plan;
  const TensorMap *map = a->o->params;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return fail(a, "cannot write '%s': %s", path, strerror(errno));
  bool ok = ftruncate(fd, (off_t)p->weights_bytes) == 0;
  if (!ok) fail(a, "cannot write '%s': %s", path, strerror(errno));
  for (uint32_t i = 0; ok && i < p->n_weights; i++) {
    const RtTensorDesc *w = &p->weights[i];
    const Tensor *t = map ? ir_tensor_map_find(map, w->name) : NULL;
    if (!t) {
      ok = fail(a, "no value for weight '%s'", w->name);
      break;
    }
    if (ir_tensor_nbytes(&t->type) != w->nbytes || (uint32_t)t->type.dtype != w->dtype) {
      ok = fail(a, "weight '%s': the value does not match the plan's %" PRIu64 " bytes", w->name, w->nbytes);
      break;
    }
    const char *src = t->data;
    for (uint64_t done = 0; done < w->nbytes;) {
      ssize_t k = pwrite(fd, src + done, (size_t)(w->nbytes - done), (off_t)(w->where.offset + done));
      if (k <= 0) {
        ok = fail(a, "cannot write '%s': %s", path, strerror(errno));
        break;
      }
      done += (uint64_t)k;
    }
  }
  if (close(fd) != 0 && ok) ok = fail(a, "cannot write '%s': %s", path, strerror(errno));
  return ok;
}

/* The params as a safetensors file, in the plan's weight order. */
static bool write_safetensors(Aot *a, const char *path) {
  const RtPlan *p = a->plan;
  const TensorMap *map = a->o->params;
  RtTensorSet set = {.n = (int)p->n_weights};
  set.names = ARENA_ARRAY(&a->ctx->arena, char *, p->n_weights + 1);
  set.tensors = ARENA_ARRAY(&a->ctx->arena, RtTensor, p->n_weights + 1);
  for (uint32_t i = 0; i < p->n_weights; i++) {
    const RtTensorDesc *w = &p->weights[i];
    const Tensor *t = map ? ir_tensor_map_find(map, w->name) : NULL;
    if (!t) return fail(a, "no value for weight '%s'", w->name);
    set.names[i] = (char *)w->name;
    RtTensor *r = &set.tensors[i];
    r->dtype = (RtDType)w->dtype;
    r->rank = (int)w->rank;
    memcpy(r->dims, w->dims, sizeof r->dims);
    r->data = t->data;
    r->nbytes = (size_t)w->nbytes;
  }
  char err[1024];
  if (rt_safetensors_write(path, &set, err, sizeof err)) return fail(a, "%s", err);
  return true;
}

static bool valid_arch(const char *arch) {
  const char *d = arch + 3;
  if (strncmp(arch, "sm_", 3) != 0 || !(*d >= '0' && *d <= '9')) return false;
  while (*d >= '0' && *d <= '9') d++;
  return *d == 0 || ((*d == 'a' || *d == 'f') && d[1] == 0);
}

/* A cubin (sm_XX) and PTX (compute_XX) per arch and code part
 * (RtKernel.part), through the runtime's NVRTC and its cache, side by
 * side on the CPUs there are (rt_nvrtc_run_jobs: a cold ResNet-50 is
 * seconds of NVRTC per target).  Fills bins[] (arch, part, size) and
 * writes binN. */
static bool compile_binaries(Aot *a, RtBinary *bins, int *n_bins) {
  *n_bins = 0;
  int parts = a->plan->n_code_parts > 1 ? (int)a->plan->n_code_parts : 1;
  int n = 2 * a->o->n_archs * parts;
  if (!n) return true;
  RtNvrtcJob *jobs = calloc((size_t)n, sizeof *jobs);
  if (!jobs) return fail(a, "out of memory");
  for (int i = 0; i < a->o->n_archs; i++) {
    const char *arch = a->o->archs[i];
    if (!valid_arch(arch)) {
      free(jobs);
      return fail(a, "--arch: '%s' is not an architecture like sm_90", arch);
    }
    for (int ptx = 0; ptx < 2; ptx++) {
      /* the PTX of sm_90a is compute_90's: arch-specific PTX would JIT on
       * 9.0 alone, and the portable one takes the kernels' mma.sync side
       * (DL_WGMMA) on every later GPU */
      size_t len = strlen(arch) + 8, digits = strspn(arch + 3, "0123456789");
      char *name = arena_alloc(&a->ctx->arena, len);
      snprintf(name, len, "%s%.*s", ptx ? "compute_" : "sm_", (int)(ptx ? digits : strlen(arch + 3)), arch + 3);
      for (int q = 0; q < parts; q++) jobs[(2 * i + ptx) * parts + q] = (RtNvrtcJob){.arch = name, .part = q};
    }
  }
  rt_nvrtc_run_jobs(a->plan, jobs, n);
  bool ok = true;
  for (int i = 0; i < n; i++) {
    RtNvrtcJob *j = &jobs[i];
    if (ok && j->rc) ok = fail(a, "compiling the kernels for %s: %s", j->arch, j->err);
    if (ok) {
      char file[32];
      snprintf(file, sizeof file, "bin%d", i);
      ok = write_file(a, path_in(a, file), j->bin, j->size);
      bins[i] = (RtBinary){.arch = j->arch, .part = (uint32_t)j->part, .size = j->size};
      *n_bins = i + 1;
    }
    free(j->bin);
  }
  free(jobs);
  return ok;
}

/* ---- model.c ---- */

static void put_kernels(FILE *f, const RtPlan *p) {
  if (!p->n_kernels) return;
  fprintf(f, "static const RtKernel kernels[%" PRIu32 "] = {\n", p->n_kernels);
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    const RtKernel *k = &p->kernels[i];
    fputs("  {.name = ", f);
    ir_put_c_string(f, k->name);
    fprintf(f,
            ", .uses_barriers = %" PRIu32 "u, .static_shared_bytes = %" PRIu32 "u, .cooperative = %" PRIu32
            "u, .part = %" PRIu32 "u},\n",
            k->uses_barriers, k->static_shared_bytes, k->cooperative, k->part);
  }
  fputs("};\n\n", f);
}

/* Every contract's parameters in one table, then the contracts. */
static void put_contracts(FILE *f, const RtPlan *p) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < p->n_contracts; i++) n += p->contracts[i].n_params;
  if (n) fprintf(f, "static const RtParam params[%" PRIu32 "] = {\n", n);
  for (uint32_t i = 0; i < p->n_contracts; i++)
    for (uint32_t j = 0; j < p->contracts[i].n_params; j++) {
      const RtParam *q = &p->contracts[i].params[j];
      fprintf(f, "  {.kind = %" PRIu32 "u, .access = %" PRIu32 "u, .nbytes = %" PRIu64 "ull, .lo = ", q->kind,
              q->access, q->nbytes);
      put_i64(f, q->lo);
      fputs(", .hi = ", f);
      put_i64(f, q->hi);
      fputs("},\n", f);
    }
  if (n) fputs("};\n\n", f);
  if (!p->n_contracts) return;
  fprintf(f, "static const RtContract contracts[%" PRIu32 "] = {\n", p->n_contracts);
  uint32_t at = 0;
  for (uint32_t i = 0; i < p->n_contracts; i++) {
    const RtContract *c = &p->contracts[i];
    fprintf(f,
            "  {.kernel = %" PRIu32 "u, .grid = {%" PRIu32 "u, %" PRIu32 "u, %" PRIu32 "u}, .block = {%" PRIu32
            "u, %" PRIu32 "u, %" PRIu32 "u}, .dynamic_shared_bytes = %" PRIu32 "u, .n_params = %" PRIu32 "u, ",
            c->kernel, c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1], c->block[2],
            c->dynamic_shared_bytes, c->n_params);
    if (c->n_params) fprintf(f, ".params = &params[%" PRIu32 "]},\n", at);
    else fputs(".params = NULL},\n", f);
    at += c->n_params;
  }
  fputs("};\n\n", f);
}

static uint32_t count_args(const RtStep *steps, uint32_t n_steps) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < n_steps; i++)
    if (steps[i].kind == RT_STEP_LAUNCH) n += steps[i].launch.n_args;
  return n;
}

/* One table of arguments: the init steps' first, then a run's. */
static void put_args(FILE *f, const RtPlan *p) {
  uint32_t n = count_args(p->init_steps, p->n_init_steps) + count_args(p->steps, p->n_steps);
  if (!n) return;
  fprintf(f, "static const RtArg args[%" PRIu32 "] = {\n", n);
  for (int init = 1; init >= 0; init--) {
    const RtStep *steps = init ? p->init_steps : p->steps;
    uint32_t n_steps = init ? p->n_init_steps : p->n_steps;
    for (uint32_t i = 0; i < n_steps; i++) {
      const RtStep *s = &steps[i];
      if (s->kind != RT_STEP_LAUNCH) continue;
      for (uint32_t j = 0; j < s->launch.n_args; j++) {
        const RtArg *g = &s->launch.args[j];
        fprintf(f, "  {.kind = %" PRIu32 "u, .ref = ", g->kind);
        put_ref(f, g->ref);
        fputs(", .i = ", f);
        put_i64(f, g->i);
        fputs(", .f = ", f);
        put_f32(f, g->f);
        fprintf(f, "}, /* %sstep %" PRIu32 " arg %" PRIu32 " */\n", init ? "init " : "", i, j);
      }
    }
  }
  fputs("};\n\n", f);
}

static void put_step(FILE *f, const RtStep *s, uint32_t *arg_at) {
  fprintf(f, "  {.kind = %" PRIu32 "u, .label = ", s->kind);
  ir_put_c_string(f, s->label);
  fputs(", .origin = ", f);
  ir_put_c_string(f, s->origin);
  if (s->kind == RT_STEP_LAUNCH) {
    const RtLaunch *l = &s->launch;
    fprintf(f,
            ",\n   .launch = {.kernel = %" PRIu32 "u, .contract = %" PRIu32 "u, .grid = {%" PRIu32 "u, %" PRIu32
            "u, %" PRIu32
            "u}, .block = {%" PRIu32 "u, %" PRIu32 "u, %" PRIu32 "u},\n              .dynamic_shared_bytes = %" PRIu32
            "u, .n_args = %" PRIu32 "u, .args = ",
            l->kernel, l->contract, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2],
            l->dynamic_shared_bytes, l->n_args);
    if (l->n_args) fprintf(f, "&args[%" PRIu32 "]}},\n", *arg_at);
    else fputs("NULL}},\n", f);
    *arg_at += l->n_args;
  } else if (s->kind == RT_STEP_GEMM) {
    const RtGemm *g = &s->gemm;
    fprintf(f, ",\n   .gemm = {.dtype = %" PRIu32 "u, .trans_a = %" PRIu32 "u, .trans_b = %" PRIu32 "u", g->dtype,
            g->trans_a, g->trans_b);
    const char *names[] = {"m", "n", "k", "lda", "ldb", "ldc", "batch", "stride_a", "stride_b", "stride_c"};
    const int64_t ints[] = {g->m,     g->n,     g->k,        g->lda,      g->ldb,
                            g->ldc,   g->batch, g->stride_a, g->stride_b, g->stride_c};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
      fprintf(f, ", .%s = ", names[i]);
      put_i64(f, ints[i]);
    }
    fputs(",\n            .alpha = ", f);
    put_f32(f, g->alpha);
    fputs(", .beta = ", f);
    put_f32(f, g->beta);
    fputs(",\n            .a = ", f);
    put_ref(f, g->a);
    fputs(",\n            .b = ", f);
    put_ref(f, g->b);
    fputs(",\n            .c = ", f);
    put_ref(f, g->c);
    if (g->beta != 0.0f) {
      fputs(",\n            .c_in = ", f);
      put_ref(f, g->c_in);
    }
    if (g->tf32) fputs(",\n            .tf32 = 1u", f);
    if (g->epilogue) {
      fprintf(f, ",\n            .epilogue = %" PRIu32 "u, .bias = ", g->epilogue);
      put_ref(f, g->bias);
      fputs(", .stride_bias = ", f);
      put_i64(f, g->stride_bias);
    }
    fputs("}},\n", f);
  } else if (s->kind == RT_STEP_BRANCH || s->kind == RT_STEP_REPEAT) {
    fputs(",\n   .branch = {.cond = ", f);
    put_ref(f, s->branch.cond);
    fprintf(f, ", .when = %" PRIu32 "u, .skip = %" PRIu32 "u}},\n", s->branch.when, s->branch.skip);
  } else {
    fputs(",\n   .copy = {.dst = ", f);
    put_ref(f, s->copy.dst);
    fputs(", .src = ", f);
    put_ref(f, s->copy.src);
    fprintf(f, ", .nbytes = %" PRIu64 "ull, .reduce = %" PRIu32 "u}},\n", s->copy.nbytes, s->copy.reduce);
  }
}

/* *arg_at: the first of these steps' arguments in args[]. */
static void put_steps(FILE *f, const char *name, const RtStep *steps, uint32_t n, uint32_t *arg_at) {
  if (!n) return;
  fprintf(f, "static const RtStep %s[%" PRIu32 "] = {\n", name, n);
  for (uint32_t i = 0; i < n; i++) put_step(f, &steps[i], arg_at);
  fputs("};\n\n", f);
}

/* ir_index_bound of the input of that name: `dlcc run model.so` draws
 * random indices below it, as it does for a .dl, so that both give the
 * same inputs. */
static int64_t index_bound(const Graph *g, const char *input) {
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_INPUT && !strcmp(ir_attr_str(n, "name"), input)) return ir_index_bound(g, &n->out[0]);
  return 0;
}

/* ---- the seal ---- */

/* The n bytes of a blob file, malloc'd. */
static void *read_blob(Aot *a, const char *path, uint64_t n) {
  void *data = malloc(n ? (size_t)n : 1);
  FILE *f = fopen(path, "rb");
  bool ok = data && f && (!n || fread(data, 1, (size_t)n, f) == n);
  if (f) fclose(f);
  if (!ok) {
    free(data);
    fail(a, "cannot read back '%s': %s", path, errno ? strerror(errno) : "short file");
    return NULL;
  }
  return data;
}

/* The checksums libdlcrt verifies at open: of the plan as model.so will
 * hold it, with its blobs read back from the files .incbin takes them
 * from. */
static bool seal_plan(Aot *a, const RtBinary *bins, int n_bins, uint64_t seal[RT_SEAL_COUNT]) {
  RtPlan q = *a->plan;
  q.sealed = RT_PLAN_SEALED;
  q.n_binaries = (uint32_t)n_bins;
  RtBinary *loaded = calloc((size_t)n_bins + 1, sizeof *loaded);
  bool ok = loaded != NULL;
  for (int i = 0; ok && i < n_bins; i++) {
    char file[32];
    snprintf(file, sizeof file, "bin%d", i);
    loaded[i] = bins[i];
    ok = (loaded[i].data = read_blob(a, path_in(a, file), bins[i].size)) != NULL;
  }
  q.binaries = n_bins ? loaded : NULL;
  void *weights = NULL;
  if (ok && q.weights_bytes && !a->o->external_weights)
    ok = (weights = read_blob(a, path_in(a, "weights.bin"), q.weights_bytes)) != NULL;
  q.weights_data = weights;
  if (ok) rt_plan_seal(&q, seal);
  for (int i = 0; loaded && i < n_bins; i++) free((void *)loaded[i].data);
  free(loaded);
  free(weights);
  return ok;
}

static bool write_model_c(Aot *a, Graph *g, const RtBinary *bins, int n_bins, const char *weights_path) {
  const RtPlan *p = a->plan;
  const CgAotOptions *o = a->o;
  FILE *f = a->c;
  fputs("/* The launch plan of model '", f);
  ir_put_comment_text(f, p->model_name);
  fprintf(f, "' for libdlcrt, generated by dlcc %s from ", PACKAGE_VERSION);
  ir_put_comment_text(f, o->source_name ? o->source_name : "?");
  fputs(".\n * Blobs (weights, CUDA source, cubins, PTX) come in through .incbin. */\n", f);
  fputs("#include <math.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <stdlib.h>\n\n#include \"plan.h\"\n\n", f);
  fprintf(f, "#if RT_PLAN_VERSION != %uu\n#error \"dlcc %s writes launch plans of version %u; this plan.h is another\"\n#endif\n\n",
          RT_PLAN_VERSION, PACKAGE_VERSION, RT_PLAN_VERSION);
  put_blob(f, "dlcc_aot_source", path_in(a, "source.cu"));
  if (p->weights_bytes && !o->external_weights) put_blob(f, "dlcc_aot_weights", path_in(a, "weights.bin"));
  for (int i = 0; i < n_bins; i++) {
    char name[32], file[32];
    snprintf(name, sizeof name, "dlcc_aot_bin%d", i);
    snprintf(file, sizeof file, "bin%d", i);
    put_blob(f, name, path_in(a, file));
  }
  put_kernels(f, p);
  put_contracts(f, p);
  put_args(f, p);
  uint32_t arg_at = 0;
  put_steps(f, "init_steps", p->init_steps, p->n_init_steps, &arg_at);
  put_steps(f, "steps", p->steps, p->n_steps, &arg_at);
  put_descs(f, "weights", p->weights, p->n_weights);
  put_descs(f, "inputs", p->inputs, p->n_inputs);
  put_descs(f, "outputs", p->outputs, p->n_outputs);
  if (n_bins) {
    fprintf(f, "static const RtBinary binaries[%d] = {\n", n_bins);
    for (int i = 0; i < n_bins; i++) {
      fputs("  {.arch = ", f);
      ir_put_c_string(f, bins[i].arch);
      fprintf(f, ", .part = %" PRIu32 "u, .data = dlcc_aot_bin%d, .size = %" PRIu64 "ull},\n", bins[i].part, i,
              bins[i].size);
    }
    fputs("};\n\n", f);
  }
  fputs("static const RtPlan plan = {\n", f);
  fprintf(f, "  .magic = 0x%08xu,\n  .version = %uu,\n  .model_name = ", RT_PLAN_MAGIC, RT_PLAN_VERSION);
  ir_put_c_string(f, p->model_name);
  fputs(",\n  .source = (const char *)dlcc_aot_source,\n", f);
  fprintf(f, "  .n_code_parts = %" PRIu32 "u,\n", p->n_code_parts);
  fprintf(f, "  .n_kernels = %" PRIu32 "u, .kernels = %s,\n", p->n_kernels, p->n_kernels ? "kernels" : "NULL");
  fprintf(f, "  .n_binaries = %du, .binaries = %s,\n", n_bins, n_bins ? "binaries" : "NULL");
  fprintf(f, "  .n_steps = %" PRIu32 "u, .steps = %s,\n", p->n_steps, p->n_steps ? "steps" : "NULL");
  fprintf(f, "  .n_init_steps = %" PRIu32 "u, .init_steps = %s,\n", p->n_init_steps,
          p->n_init_steps ? "init_steps" : "NULL");
  fprintf(f, "  .derived_bytes = %" PRIu64 "ull,\n", p->derived_bytes);
  fprintf(f, "  .arena_bytes = %" PRIu64 "ull,\n  .weights_bytes = %" PRIu64 "ull,\n", p->arena_bytes,
          p->weights_bytes);
  fprintf(f, "  .n_weights = %" PRIu32 "u, .weights = %s,\n", p->n_weights, p->n_weights ? "weights" : "NULL");
  fprintf(f, "  .n_inputs = %" PRIu32 "u, .inputs = %s,\n", p->n_inputs, p->n_inputs ? "inputs" : "NULL");
  fprintf(f, "  .n_outputs = %" PRIu32 "u, .outputs = %s,\n", p->n_outputs, p->n_outputs ? "outputs" : "NULL");
  fprintf(f, "  .weights_data = %s,\n", p->weights_bytes && !o->external_weights ? "dlcc_aot_weights" : "NULL");
  fprintf(f, "  .n_contracts = %" PRIu32 "u, .contracts = %s,\n  .status_bytes = %" PRIu64 "ull,\n",
          p->n_contracts, p->n_contracts ? "contracts" : "NULL", p->status_bytes);
  fprintf(f, "  .n_update_steps = %" PRIu32 "u,\n  .sync_bytes = %" PRIu64 "ull,\n", p->n_update_steps,
          p->sync_bytes);
  uint64_t seal[RT_SEAL_COUNT];
  if (!seal_plan(a, bins, n_bins, seal)) return false;
  fprintf(f, "  .sealed = 0x%08xu,\n  .seal = {", RT_PLAN_SEALED);
  for (int i = 0; i < RT_SEAL_COUNT; i++) fprintf(f, "%s0x%016" PRIx64 "ull", i ? ", " : "", seal[i]);
  fputs("},\n};\n\n", f);
  fputs("const RtPlan *dlrt_model_plan(void);\nconst RtPlan *dlrt_model_plan(void) { return &plan; }\n\n", f);

  fprintf(f, "/* External weights: the file recorded when the model was built; DLCC_WEIGHTS\n"
             " * overrides it.  NULL when the weights are inside this file. */\n"
             "const char *%s(void);\nconst char *%s(void) {\n",
          CG_AOT_WEIGHTS_PATH_SYMBOL, CG_AOT_WEIGHTS_PATH_SYMBOL);
  if (o->external_weights) {
    fputs("  const char *env = getenv(\"DLCC_WEIGHTS\");\n  return env && *env ? env : ", f);
    ir_put_c_string(f, weights_path);
    fputs(";\n}\n\n", f);
  } else {
    fputs("  return NULL;\n}\n\n", f);
  }
  fprintf(f, "/* Integer inputs used as gather indices: the exclusive bound of valid values. */\n"
             "int64_t %s(int input);\nint64_t %s(int input) {\n",
          CG_AOT_INDEX_BOUND_SYMBOL, CG_AOT_INDEX_BOUND_SYMBOL);
  if (p->n_inputs) {
    fprintf(f, "  static const int64_t bound[%" PRIu32 "] = {", p->n_inputs);
    for (uint32_t i = 0; i < p->n_inputs; i++) {
      if (i) fputs(", ", f);
      put_i64(f, index_bound(g, p->inputs[i].name));
    }
    fprintf(f, "};\n  return input >= 0 && input < %" PRIu32 " ? bound[input] : 0;\n}\n", p->n_inputs);
  } else {
    fputs("  return 0;\n}\n", f);
  }
  return true;
}

/* ---- model.h ---- */

static const char *c_type(uint32_t dtype) {
  static const char *const t[] = {"float", "uint16_t", "uint16_t", "int8_t", "int32_t", "int64_t", "uint8_t", "uint8_t"};
  return dtype < sizeof t / sizeof *t ? t[dtype] : "void";
}

static const char *dtype_macro(uint32_t dtype) {
  static const char *const t[] = {"DLRT_F32", "DLRT_F16", "DLRT_BF16", "DLRT_I8",
                                  "DLRT_I32", "DLRT_I64", "DLRT_BOOL", "DLRT_U8"};
  return dtype < sizeof t / sizeof *t ? t[dtype] : "DLRT_F32";
}

static void type_comment(FILE *f, const RtTensorDesc *t) {
  static const char *const names[] = {"f32", "f16", "bf16", "i8", "i32", "i64", "bool", "u8"};
  fprintf(f, "%s[", t->dtype < ARRAY_LEN(names) ? names[t->dtype] : "?");
  for (uint32_t d = 0; d < t->rank; d++) fprintf(f, "%s%" PRId64, d ? ", " : "", t->dims[d]);
  fputc(']', f);
}

static void put_tensor_macros(FILE *f, const char *up, const char *kind, uint32_t i, const RtTensorDesc *t,
                              int64_t bound) {
  fprintf(f, "/* %s %" PRIu32 ": ", kind, i);
  ir_put_comment_text(f, t->name);
  fputs(": ", f);
  type_comment(f, t);
  fprintf(f, " */\n#define %s_%s%" PRIu32 "_NAME ", up, kind, i);
  ir_put_c_string(f, t->name);
  fprintf(f, "\n#define %s_%s%" PRIu32 "_DTYPE %s\n", up, kind, i, dtype_macro(t->dtype));
  fprintf(f, "#define %s_%s%" PRIu32 "_RANK %" PRIu32 "\n", up, kind, i, t->rank);
  fprintf(f, "#define %s_%s%" PRIu32 "_DIMS {", up, kind, i);
  int64_t numel = 1;
  for (uint32_t d = 0; d < t->rank; d++) {
    fprintf(f, "%s%" PRId64, d ? ", " : "", t->dims[d]);
    numel *= t->dims[d];
  }
  fprintf(f, "}\n#define %s_%s%" PRIu32 "_NUMEL %" PRId64 "\n", up, kind, i, numel);
  fprintf(f, "#define %s_%s%" PRIu32 "_NBYTES %" PRIu64 "\n", up, kind, i, t->nbytes);
  if (bound) fprintf(f, "#define %s_%s%" PRIu32 "_INDEX_BOUND %" PRId64 "\n", up, kind, i, bound);
  fputc('\n', f);
}

/* Parameter names of the run wrapper: in_NAME / out_NAME, made distinct
 * (false: out of memory). */
static SafeName *param_names(Aot *a) {
  const RtPlan *p = a->plan;
  uint32_t n = p->n_inputs + p->n_outputs;
  SafeName *names = ARENA_ARRAY(&a->ctx->arena, SafeName, n + 1);
  for (uint32_t i = 0; i < n; i++) {
    bool in = i < p->n_inputs;
    ir_name_ident(in ? "in_" : "out_", in ? p->inputs[i].name : p->outputs[i - p->n_inputs].name, false, &names[i]);
  }
  if (!ir_names_unique(names, (int)n, '_', IR_IDENT_MAX, false)) return NULL;
  return names;
}

static bool write_model_h(Aot *a, Graph *g, const char *path, const char *so_name) {
  const RtPlan *p = a->plan;
  const CgAotOptions *o = a->o;
  const SafeName *names = param_names(a);
  if (!names) return fail(a, "out of memory");
  FILE *f = fopen(path, "w");
  if (!f) return fail(a, "cannot write '%s': %s", path, strerror(errno));
  const char *base = strrchr(so_name, '/') ? strrchr(so_name, '/') + 1 : so_name;
  size_t stem_len = strcspn(base, ".");
  char *stem = arena_strndup(&a->ctx->arena, base, stem_len ? stem_len : strlen(base));
  SafeName low, up;
  ir_name_ident("", stem, false, &low);
  ir_name_ident("", stem, true, &up);
  fputs("/* ", f);
  ir_put_comment_text(f, strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
  fputs(": the C interface of ", f);
  ir_put_comment_text(f, base);
  fputs(" (model '", f);
  ir_put_comment_text(f, p->model_name);
  fprintf(f, "'), generated by dlcc %s from ", PACKAGE_VERSION);
  ir_put_comment_text(f, o->source_name ? o->source_name : "?");
  fputs(".\n *\n *     cc host.c ", f);
  ir_put_comment_text(f, base);
  fprintf(f, " $(pkg-config --cflags --libs dlcrt) -Wl,-rpath,'$ORIGIN'\n"
             " *\n"
             " *     DlrtModel *m;\n"
             " *     if (%s_open(\"auto\", &m) != DLRT_OK) { puts(dlrt_error(m)); ... }\n"
             " *     %s_run(m, ...inputs..., ...outputs...);\n"
             " *     dlrt_close(m);\n"
             " *\n",
          low.s, low.s);
  for (uint32_t i = 0; i < p->n_inputs + p->n_outputs; i++) {
    bool in = i < p->n_inputs;
    const RtTensorDesc *t = in ? &p->inputs[i] : &p->outputs[i - p->n_inputs];
    fputs(in ? " * input  " : " * output ", f);
    ir_put_comment_text(f, t->name);
    fputs(": ", f);
    type_comment(f, t);
    fputc('\n', f);
  }
  fprintf(f, " * weights: %" PRIu64 " bytes, %s */\n", p->weights_bytes,
          o->external_weights ? "read at open from the safetensors file dlrt_model_weights_path() names"
                              : "inside the library");
  fprintf(f, "#ifndef DLCC_MODEL_%s_H\n#define DLCC_MODEL_%s_H\n\n#include <stdint.h>\n\n#include <dlcrt.h>\n\n", up.s,
          up.s);
  fputs("#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n/* Exported by ", f);
  ir_put_comment_text(f, base);
  fprintf(f, ". */\n"
             "const struct RtPlan *dlrt_model_plan(void);\n"
             "const char *%s(void); /* external weights' file (env DLCC_WEIGHTS overrides); NULL: embedded */\n"
             "int64_t %s(int input);  /* gather indices: exclusive bound; 0: not an index */\n\n",
          CG_AOT_WEIGHTS_PATH_SYMBOL, CG_AOT_INDEX_BOUND_SYMBOL);
  fprintf(f, "#define %s_MODEL_NAME ", up.s);
  ir_put_c_string(f, p->model_name);
  fprintf(f, "\n#define %s_EXTERNAL_WEIGHTS %d\n#define %s_WEIGHTS_BYTES %" PRIu64 "\n", up.s,
          o->external_weights ? 1 : 0, up.s, p->weights_bytes);
  fprintf(f, "#define %s_NUM_INPUTS %" PRIu32 "\n#define %s_NUM_OUTPUTS %" PRIu32 "\n\n", up.s, p->n_inputs, up.s,
          p->n_outputs);
  for (uint32_t i = 0; i < p->n_inputs; i++)
    put_tensor_macros(f, up.s, "INPUT", i, &p->inputs[i], index_bound(g, p->inputs[i].name));
  for (uint32_t i = 0; i < p->n_outputs; i++) put_tensor_macros(f, up.s, "OUTPUT", i, &p->outputs[i], 0);

  fprintf(f, "/* Opens the model on backend (\"auto\", \"cuda\", \"emu\"; NULL: auto)%s.\n"
             " * *out is set even on failure: dlrt_error(*out) says why; close it either way. */\n"
             "static inline DlrtStatus %s_open(const char *backend, DlrtModel **out) {\n"
             "  DlrtStatus s = dlrt_open(dlrt_model_plan(), backend, out);\n",
          o->external_weights ? " and loads its weights" : "", low.s);
  if (o->external_weights)
    fprintf(f, "  if (s == DLRT_OK) s = dlrt_load_weights(*out, %s());\n", CG_AOT_WEIGHTS_PATH_SYMBOL);
  fputs("  return s;\n}\n\n", f);

  fprintf(f, "/* Sets every input, runs, copies every output out. */\nstatic inline DlrtStatus %s_run(DlrtModel *m", low.s);
  for (uint32_t i = 0; i < p->n_inputs; i++)
    fprintf(f, ", const %s *%s", c_type(p->inputs[i].dtype), names[i].s);
  for (uint32_t i = 0; i < p->n_outputs; i++)
    fprintf(f, ", %s *%s", c_type(p->outputs[i].dtype), names[p->n_inputs + i].s);
  fputs(") {\n  DlrtStatus s;\n", f);
  for (uint32_t i = 0; i < p->n_inputs; i++)
    fprintf(f, "  if ((s = dlrt_set_input(m, %" PRIu32 ", %s, %s_INPUT%" PRIu32 "_NBYTES))) return s;\n", i,
            names[i].s, up.s, i);
  fputs("  if ((s = dlrt_run(m))) return s;\n", f);
  for (uint32_t i = 0; i < p->n_outputs; i++)
    fprintf(f, "  if ((s = dlrt_get_output(m, %" PRIu32 ", %s, %s_OUTPUT%" PRIu32 "_NBYTES))) return s;\n", i,
            names[p->n_inputs + i].s, up.s, i);
  fputs("  return DLRT_OK;\n}\n\n#ifdef __cplusplus\n}\n#endif\n\n#endif\n", f);
  if (fclose(f) != 0) return fail(a, "cannot write '%s': %s", path, strerror(errno));
  return true;
}

/* ---- the host compiler ---- */

static bool is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool build_tree_dir(char *out, size_t len) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return false;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return false;
  *slash = 0;
  char lib[PATH_MAX + 32];
  snprintf(lib, sizeof lib, "%s/libdlcrt.so", exe);
  if (!is_file(lib)) return false;
  snprintf(out, len, "%s", exe);
  return true;
}

/* Where libdlcrt.so and plan.h are: $DLCC_LIBDIR / $DLCC_INCLUDEDIR;
 * else, for a dlcc run from its build tree (libdlcrt.so beside the
 * binary, as libtool leaves them in .libs), that library and the source
 * tree's runtime/plan.h; else the installed $(libdir) and
 * $(includedir)/dlcrt. */
static void locate_runtime(char *libdir, char *incdir, size_t len) {
  const char *env_lib = getenv("DLCC_LIBDIR"), *env_inc = getenv("DLCC_INCLUDEDIR");
  bool build_tree = false;
  if (env_lib && *env_lib) {
    snprintf(libdir, len, "%s", env_lib);
    build_tree = strcmp(env_lib, DLCC_AOT_LIBDIR) != 0;
  } else if (build_tree_dir(libdir, len)) {
    build_tree = true;
  } else {
    snprintf(libdir, len, "%s", DLCC_AOT_LIBDIR);
  }
  char src_plan[PATH_MAX];
  snprintf(src_plan, sizeof src_plan, "%s/plan.h", DLCC_AOT_SRC_INCLUDEDIR);
  if (env_inc && *env_inc) snprintf(incdir, len, "%s", env_inc);
  else if (build_tree && DLCC_AOT_SRC_INCLUDEDIR[0] && is_file(src_plan))
    snprintf(incdir, len, "%s", DLCC_AOT_SRC_INCLUDEDIR);
  else snprintf(incdir, len, "%s", DLCC_AOT_INCLUDEDIR);
}

/* 'text' for sh, with every ' closed, escaped and reopened. */
static void put_quoted(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++)
    if (*s == '\'') fputs("'\\''", f);
    else fputc(*s, f);
  fputc('\'', f);
}

static bool run_cc(Aot *a, const char *c_path, const char *output) {
  char libdir[PATH_MAX], incdir[PATH_MAX];
  locate_runtime(libdir, incdir, sizeof libdir);
  const char *cc = getenv("CC");
  if (!cc || !*cc) cc = "cc";
  char *log = path_in(a, "cc.log");
  char *cmd = NULL;
  size_t cmd_len = 0;
  FILE *f = open_memstream(&cmd, &cmd_len);
  if (!f) return fail(a, "out of memory");
  /* CC unquoted: it may be "ccache gcc" or carry flags. */
  fprintf(f, "%s -shared -fPIC -O0 -o ", cc);
  put_quoted(f, output);
  fputc(' ', f);
  put_quoted(f, c_path);
  fputs(" -I", f);
  put_quoted(f, incdir);
  fputs(" -L", f);
  put_quoted(f, libdir);
  fputs(" -Wl,-rpath,", f);
  put_quoted(f, libdir);
  /* A host linked against it then records "model.so", found by rpath. */
  const char *base = strrchr(output, '/') ? strrchr(output, '/') + 1 : output;
  fputs(" -Wl,-soname,", f);
  put_quoted(f, base);
  fputs(" -Wl,--no-as-needed -ldlcrt >", f);
  put_quoted(f, log);
  fputs(" 2>&1", f);
  fclose(f);
  int rc = system(cmd);
  bool ok = rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
  if (!ok) {
    char text[2048] = "";
    FILE *l = fopen(log, "r");
    if (l) {
      size_t n = fread(text, 1, sizeof text - 1, l);
      text[n] = 0;
      fclose(l);
    }
    fail(a, "the host C compiler failed building %s (libdlcrt in %s, plan.h in %s):\n  %s\n%s", output, libdir,
         incdir, cmd, text);
  }
  free(cmd);
  return ok;
}

static void remove_dir(const char *dir) {
  char *cmd = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&cmd, &n);
  if (!f) return;
  fputs("rm -rf ", f);
  put_quoted(f, dir);
  fclose(f);
  if (system(cmd) != 0) { /* a leftover temp folder is not worth an error */
  }
  free(cmd);
}

static char *header_path(Aot *a) {
  if (a->o->header) return arena_strdup(&a->ctx->arena, a->o->header);
  const char *out = a->o->output;
  size_t n = strlen(out);
  bool so = n > 3 && !strcmp(out + n - 3, ".so");
  char *h = arena_alloc(&a->ctx->arena, n + 3);
  snprintf(h, n + 3, "%.*s.h", (int)(so ? n - 3 : n), out);
  return h;
}

static char *absolute(Aot *a, const char *path) {
  char buf[PATH_MAX];
  if (realpath(path, buf)) return arena_strdup(&a->ctx->arena, buf);
  return arena_strdup(&a->ctx->arena, path);
}

static bool build(Aot *a, Graph *g) {
  const RtPlan *p = a->plan;
  const CgAotOptions *o = a->o;
  if (!write_file(a, path_in(a, "source.cu"), p->source ? p->source : "", p->source ? strlen(p->source) : 0))
    return false;
  const char *weights_path = NULL;
  if (o->external_weights) {
    if (o->weights_path) {
      weights_path = absolute(a, o->weights_path);
    } else {
      /* Random weights still need a file: beside the model. */
      char *st = header_path(a);
      size_t n = strlen(st);
      char *path = arena_alloc(&a->ctx->arena, n + 16);
      snprintf(path, n + 16, "%.*s.safetensors", (int)(n - 2), st);
      if (!write_safetensors(a, path)) return false;
      weights_path = absolute(a, path);
    }
  } else if (p->weights_bytes && !write_weights(a, path_in(a, "weights.bin"))) {
    return false;
  }
  double t = ctx_stage(a->ctx, "aot: weights and source", a->started);
  RtBinary *bins = ARENA_ARRAY(&a->ctx->arena, RtBinary, 2 * o->n_archs * RT_MAX_CODE_PARTS + 1);
  int n_bins;
  if (!compile_binaries(a, bins, &n_bins)) return false;
  t = ctx_stage(a->ctx, "aot: nvrtc (or cache)", t);
  char *c_path = path_in(a, "model.c");
  if (!(a->c = fopen(c_path, "w"))) return fail(a, "cannot write '%s': %s", c_path, strerror(errno));
  bool ok = write_model_c(a, g, bins, n_bins, weights_path);
  if (fclose(a->c) != 0 && ok) ok = fail(a, "cannot write '%s': %s", c_path, strerror(errno));
  a->c = NULL;
  t = ctx_stage(a->ctx, "aot: write model.c", t);
  if (!ok || !run_cc(a, c_path, o->output)) return false;
  ctx_stage(a->ctx, "aot: cc", t);
  char *h = header_path(a);
  if (!write_model_h(a, g, h, o->output)) {
    remove(h);
    return false;
  }
  return true;
}

bool cg_aot_build(Graph *g, const CgResult *cg, const CgAotOptions *o) {
  Aot a = {.ctx = g->ctx, .plan = cg->plan, .o = o, .started = ctx_now()};
  if (!o->output) return fail(&a, "no output file for the model library");
  if (!o->external_weights && cg->plan->n_weights && !o->params)
    return fail(&a, "the model has %" PRIu32 " weights and none were given", cg->plan->n_weights);
  const char *tmp = getenv("TMPDIR");
  snprintf(a.dir, sizeof a.dir, "%s/dlcc-aot-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(a.dir)) return fail(&a, "cannot create a temporary folder %s: %s", a.dir, strerror(errno));
  bool ok = build(&a, g);
  if (!ok) remove(o->output);
  if (o->keep_temps) diag_note(a.ctx, (SrcLoc){0}, "the generated C and its blobs are in %s", a.dir);
  else remove_dir(a.dir);
  return ok;
}

/* Plan validation: takes an RtPlan from anywhere (the JIT, a model.so of
 * unknown origin), returns 0 when every reference in it stays inside the
 * memory it names, or -1 with one message saying what is wrong and
 * where.  The executor trusts a validated plan, so a corrupt or foreign
 * model.so is refused here instead of writing over device memory.
 *
 * A kernel's own text cannot bound its accesses when its arguments are
 * wrong (a loop runs to its argument n; a pointer may start anywhere), so
 * each launch is held to its contract (plan.h): the same kernel, grid
 * and block, every integer argument in the range the contract's extents
 * hold for, every pointer with the contract's extent inside its space. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

/* Far beyond any real model, far below where products of three of them
 * overflow 64 bits after multiplying by an element size. */
#define MAX_DIM ((int64_t)1 << 40)

static const int dtype_bytes[RT_DT_COUNT] = {
    [RT_DT_F32] = 4, [RT_DT_F16] = 2, [RT_DT_BF16] = 2,
    [RT_DT_I8] = 1,  [RT_DT_I32] = 4, [RT_DT_I64] = 8, [RT_DT_BOOL] = 1, [RT_DT_U8] = 1,
    [RT_DT_F64] = 8, [RT_DT_I16] = 2, [RT_DT_U16] = 2, [RT_DT_U32] = 4, [RT_DT_U64] = 8,
};

int rt_dtype_bytes(uint32_t dtype) { return dtype < RT_DT_COUNT ? dtype_bytes[dtype] : 0; }

const char *rt_space_name(uint32_t space) {
  switch (space) {
  case RT_SPACE_WEIGHTS: return "WEIGHTS";
  case RT_SPACE_ARENA: return "ARENA";
  case RT_SPACE_INPUT: return "INPUT";
  case RT_SPACE_OUTPUT: return "OUTPUT";
  case RT_SPACE_STATUS: return "STATUS";
  case RT_SPACE_SYNC: return "SYNC";
  }
  return "?";
}

typedef struct Check {
  const RtPlan *p;
  bool init; /* checking init steps: they write only the derived region */
  /* By weight: an output lives in its bytes (a training step's update
   * written in place), so a run's steps may write there. */
  bool *state;
  char *err;
  size_t errlen;
  char where[160]; /* "step 3 (conv2d %12): " */
} Check;

static int fail(Check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Check *c, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(c->err, c->errlen, "plan: %s%s", c->where, msg);
  return -1;
}

/* Size of the space ref names, or -1 when it names none. */
static int64_t space_size(const RtPlan *p, RtRef r) {
  switch (r.space) {
  case RT_SPACE_WEIGHTS: return r.index == 0 ? (int64_t)(p->weights_bytes + p->derived_bytes) : -1;
  case RT_SPACE_ARENA: return r.index == 0 ? (int64_t)p->arena_bytes : -1;
  case RT_SPACE_INPUT: return r.index < p->n_inputs ? (int64_t)p->inputs[r.index].nbytes : -1;
  case RT_SPACE_OUTPUT: return r.index < p->n_outputs ? (int64_t)p->outputs[r.index].nbytes : -1;
  case RT_SPACE_STATUS: return r.index == 0 ? (int64_t)p->status_bytes : -1;
  case RT_SPACE_SYNC: return r.index == 0 ? (int64_t)p->sync_bytes : -1;
  }
  return -1;
}

/* ref names nbytes inside one space. */
static int check_ref(Check *c, const char *what, RtRef r, uint64_t nbytes) {
  if (r.space > RT_SPACE_SYNC) return fail(c, "%s: unknown memory space %" PRIu32, what, r.space);
  if (c->init && (r.space == RT_SPACE_INPUT || r.space == RT_SPACE_OUTPUT))
    return fail(c, "%s: uses %s, but init steps run on the weights alone", what, rt_space_name(r.space));
  int64_t size = space_size(c->p, r);
  if (size < 0) {
    uint32_t n = r.space == RT_SPACE_INPUT ? c->p->n_inputs : c->p->n_outputs;
    if (r.space == RT_SPACE_INPUT || r.space == RT_SPACE_OUTPUT)
      return fail(c, "%s: %s %" PRIu32 " does not exist (the model has %" PRIu32 ")", what,
                  rt_space_name(r.space), r.index, n);
    return fail(c, "%s: %s has no index %" PRIu32 " (only 0)", what, rt_space_name(r.space), r.index);
  }
  uint64_t end;
  if (__builtin_add_overflow(r.offset, nbytes, &end) || end > (uint64_t)size) {
    char sp[32];
    if (r.space == RT_SPACE_INPUT || r.space == RT_SPACE_OUTPUT)
      snprintf(sp, sizeof sp, "%s %" PRIu32, rt_space_name(r.space), r.index);
    else
      snprintf(sp, sizeof sp, "%s", rt_space_name(r.space));
    return fail(c,
                "%s: offset %" PRIu64 " + %" PRIu64 " bytes is outside %s (%" PRId64 " bytes)",
                what, r.offset, nbytes, sp, size);
  }
  return 0;
}

/* Whether [r, r + n) of WEIGHTS lies inside one weight an output lives in. */
static bool in_state(const Check *c, RtRef r, uint64_t n) {
  for (uint32_t w = 0; c->state && w < c->p->n_weights; w++) {
    const RtTensorDesc *t = &c->p->weights[w];
    if (c->state[w] && r.offset >= t->where.offset && n <= t->nbytes && r.offset - t->where.offset <= t->nbytes - n)
      return true;
  }
  return false;
}

static int check_writable(Check *c, const char *what, RtRef r, uint64_t n) {
  if (r.space == RT_SPACE_STATUS || r.space == RT_SPACE_SYNC) return 0;
  if (!c->init && r.space == RT_SPACE_WEIGHTS && r.index == 0 && in_state(c, r, n)) return 0;
  bool derived = r.space == RT_SPACE_WEIGHTS && r.offset >= c->p->weights_bytes && c->p->derived_bytes;
  if (c->init && r.space == RT_SPACE_WEIGHTS && !derived)
    return fail(c, "%s: writes WEIGHTS at offset %" PRIu64 ", outside the derived region at %" PRIu64
                ": init steps may not change the weights", what, r.offset, c->p->weights_bytes);
  if (c->init && derived) return 0;
  if (derived)
    return fail(c, "%s: writes the derived region of WEIGHTS (offset %" PRIu64
                "), which only init steps compute", what, r.offset);
  if (r.space == RT_SPACE_WEIGHTS || r.space == RT_SPACE_INPUT)
    return fail(c, "%s: writes into %s, which the model only reads", what, rt_space_name(r.space));
  return 0;
}

static int check_desc(Check *c, const char *kind, uint32_t i, const RtTensorDesc *t,
                      uint32_t want_space) {
  char what[96];
  snprintf(what, sizeof what, "%s %" PRIu32, kind, i);
  if (!t->name || !*t->name) return fail(c, "%s has no name", what);
  snprintf(what, sizeof what, "%s %" PRIu32 " '%.60s'", kind, i, t->name);
  int esize = rt_dtype_bytes(t->dtype);
  if (!esize) return fail(c, "%s: unknown dtype %" PRIu32, what, t->dtype);
  if (t->rank > RT_MAX_RANK)
    return fail(c, "%s: rank %" PRIu32 " exceeds %d", what, t->rank, RT_MAX_RANK);
  uint64_t n = (uint64_t)esize;
  for (uint32_t d = 0; d < t->rank; d++) {
    if (t->dims[d] < 0 || t->dims[d] > MAX_DIM)
      return fail(c, "%s: dimension %" PRIu32 " is %" PRId64, what, d, t->dims[d]);
    if (__builtin_mul_overflow(n, (uint64_t)t->dims[d], &n))
      return fail(c, "%s: size overflows", what);
  }
  if (n != t->nbytes)
    return fail(c, "%s: nbytes %" PRIu64 " but dtype and shape make %" PRIu64, what, t->nbytes, n);
  if (t->where.space != want_space)
    return fail(c, "%s: lives in %s, expected %s", what, rt_space_name(t->where.space),
                rt_space_name(want_space));
  if (want_space != RT_SPACE_WEIGHTS && (t->where.index != i || t->where.offset != 0))
    return fail(c, "%s: must be %s %" PRIu32 " at offset 0", what, rt_space_name(want_space), i);
  /* The host sets weights; the derived region past them is the init steps'. */
  if (want_space == RT_SPACE_WEIGHTS &&
      (t->where.offset > c->p->weights_bytes || t->nbytes > c->p->weights_bytes - t->where.offset))
    return fail(c, "%s: offset %" PRIu64 " + %" PRIu64 " bytes is outside the %" PRIu64
                " bytes of weights", what, t->where.offset, t->nbytes, c->p->weights_bytes);
  return check_ref(c, what, t->where, t->nbytes);
}

static int check_contract(Check *c, uint32_t i, const RtContract *k, const uint32_t *first_of_kernel) {
  const RtPlan *p = c->p;
  if (k->kernel >= p->n_kernels)
    return fail(c, "contract %" PRIu32 ": kernel index %" PRIu32 " out of range (the plan has %" PRIu32 " kernels)",
                i, k->kernel, p->n_kernels);
  const char *name = p->kernels[k->kernel].name;
  uint64_t threads = (uint64_t)k->block[0] * k->block[1] * k->block[2];
  for (int a = 0; a < 3; a++)
    if (k->grid[a] == 0 || k->block[a] == 0)
      return fail(c, "contract %" PRIu32 " of kernel '%s': grid and block sizes must be at least 1", i, name);
  if (threads > 1024)
    return fail(c, "contract %" PRIu32 " of kernel '%s': block of %" PRIu64 " threads exceeds 1024", i, name, threads);
  if (k->n_params > 4096) return fail(c, "contract %" PRIu32 ": %" PRIu32 " parameters", i, k->n_params);
  if (k->n_params && !k->params)
    return fail(c, "contract %" PRIu32 ": %" PRIu32 " parameters but no table", i, k->n_params);
  for (uint32_t j = 0; j < k->n_params; j++) {
    const RtParam *q = &k->params[j];
    bool ok = q->kind == RT_ARG_PTR ? q->access && !(q->access & ~(uint32_t)(RT_ACCESS_READ | RT_ACCESS_WRITE))
              : q->kind == RT_ARG_I32 ? q->lo <= q->hi && q->lo >= INT32_MIN && q->hi <= INT32_MAX
              : q->kind == RT_ARG_I64 ? q->lo <= q->hi
                                      : q->kind == RT_ARG_F32;
    if (!ok) return fail(c, "contract %" PRIu32 " of kernel '%s': parameter %" PRIu32 " is malformed", i, name, j);
  }
  /* One kernel text has one signature, whatever the contract. */
  const RtContract *f = &p->contracts[first_of_kernel[k->kernel]];
  bool same = f->n_params == k->n_params;
  for (uint32_t j = 0; same && j < k->n_params; j++) same = f->params[j].kind == k->params[j].kind;
  if (!same)
    return fail(c, "contracts %" PRIu32 " and %" PRIu32 " give kernel '%s' two different signatures",
                first_of_kernel[k->kernel], i, name);
  return 0;
}

static int check_contracts(Check *c) {
  const RtPlan *p = c->p;
  uint32_t *first = malloc(((size_t)p->n_kernels + 1) * sizeof *first);
  if (!first) return fail(c, "out of host memory");
  for (uint32_t k = 0; k < p->n_kernels; k++) first[k] = UINT32_MAX;
  int rc = 0;
  for (uint32_t i = 0; i < p->n_contracts && !rc; i++) {
    uint32_t k = p->contracts[i].kernel;
    if (k < p->n_kernels && first[k] == UINT32_MAX) first[k] = i;
    rc = check_contract(c, i, &p->contracts[i], first);
  }
  free(first);
  return rc;
}

static int check_launch(Check *c, const RtLaunch *l) {
  const RtPlan *p = c->p;
  if (l->kernel >= p->n_kernels)
    return fail(c, "kernel index %" PRIu32 " out of range (the plan has %" PRIu32 " kernels)",
                l->kernel, p->n_kernels);
  const char *name = p->kernels[l->kernel].name;
  if (l->contract >= p->n_contracts || p->contracts[l->contract].kernel != l->kernel)
    return fail(c, "kernel '%s': contract %" PRIu32 " is not one of its contracts", name, l->contract);
  const RtContract *k = &p->contracts[l->contract];
  if (memcmp(l->grid, k->grid, sizeof l->grid) || memcmp(l->block, k->block, sizeof l->block) ||
      l->dynamic_shared_bytes != k->dynamic_shared_bytes)
    return fail(c,
                "kernel '%s': grid %" PRIu32 "x%" PRIu32 "x%" PRIu32 ", block %" PRIu32 "x%" PRIu32 "x%" PRIu32
                " and %" PRIu32 " bytes of dynamic shared memory are not those of its contract %" PRIu32,
                name, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2],
                l->dynamic_shared_bytes, l->contract);
  if (l->n_args != k->n_params)
    return fail(c, "kernel '%s': %" PRIu32 " arguments for %" PRIu32 " parameters", name, l->n_args, k->n_params);
  if (l->n_args && !l->args) return fail(c, "%" PRIu32 " arguments but no argument table", l->n_args);
  for (uint32_t i = 0; i < l->n_args; i++) {
    const RtArg *a = &l->args[i];
    const RtParam *q = &k->params[i];
    char what[48];
    snprintf(what, sizeof what, "argument %" PRIu32, i);
    if (a->kind > RT_ARG_F32) return fail(c, "%s: unknown kind %" PRIu32, what, a->kind);
    if (a->kind != q->kind)
      return fail(c, "%s: kind %" PRIu32 ", but kernel '%s' takes kind %" PRIu32 " there", what, a->kind, name,
                  q->kind);
    switch (a->kind) {
    case RT_ARG_PTR:
      /* Only what the kernel may touch from there, and writes only where
       * this step may write. */
      if (check_ref(c, what, a->ref, q->nbytes)) return -1;
      if ((q->access & RT_ACCESS_WRITE) && check_writable(c, what, a->ref, q->nbytes)) return -1;
      if (a->ref.space == RT_SPACE_STATUS &&
          (a->ref.offset % 8 || q->nbytes % (RT_STATUS_WORDS * 8) || !(q->access & RT_ACCESS_WRITE)))
        return fail(c, "%s: a STATUS argument must be whole reports of %d words", what, RT_STATUS_WORDS);
      if (a->ref.space == RT_SPACE_SYNC && (a->ref.offset % 4 || q->nbytes % 4 || !(q->access & RT_ACCESS_WRITE)))
        return fail(c, "%s: a SYNC argument must be whole i32 words the kernel writes", what);
      break;
    case RT_ARG_I32:
    case RT_ARG_I64:
      if (a->i < q->lo || a->i > q->hi)
        return fail(c, "%s: %" PRId64 " is outside [%" PRId64 ", %" PRId64 "], where kernel '%s' stays in bounds",
                    what, a->i, q->lo, q->hi, name);
      break;
    default: break;
    }
  }
  return 0;
}

/* Bytes spanned by a batched row-major matrix of rows x cols. */
static bool matrix_extent(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                          int esize, uint64_t *out) {
  uint64_t last, e;
  if (__builtin_mul_overflow((uint64_t)(batch - 1), (uint64_t)stride, &last)) return false;
  if (__builtin_mul_overflow((uint64_t)(rows - 1), (uint64_t)ld, &e)) return false;
  if (__builtin_add_overflow(e, last, &e) || __builtin_add_overflow(e, (uint64_t)cols, &e))
    return false;
  return !__builtin_mul_overflow(e, (uint64_t)esize, out);
}

/* STATUS is for kernels' index reports only, SYNC for their counters. */
static int check_not_status(Check *c, const char *what, RtRef r) {
  if (r.space == RT_SPACE_SYNC) return fail(c, "%s: SYNC holds kernels' counters, not tensors", what);
  return r.space == RT_SPACE_STATUS ? fail(c, "%s: STATUS holds index reports, not tensors", what) : 0;
}

/* Whether na bytes at a and nb bytes at b share a byte. */
static bool spans(RtRef a, uint64_t na, RtRef b, uint64_t nb) {
  if (a.space != b.space || a.index != b.index) return false;
  return a.offset < b.offset + nb && b.offset < a.offset + na;
}

static bool same_ref(RtRef a, RtRef b) { return a.space == b.space && a.index == b.index && a.offset == b.offset; }

static int check_gemm(Check *c, const RtGemm *g) {
  if (g->dtype != RT_DT_F32 && g->dtype != RT_DT_F16 && g->dtype != RT_DT_BF16 && g->dtype != RT_DT_I8)
    return fail(c, "gemm: dtype %" PRIu32 " (only f32, f16, bf16, i8)", g->dtype);
  if (g->dtype == RT_DT_I8 && (g->alpha != 1.0f || g->beta != 0.0f))
    return fail(c, "gemm: an i8 gemm takes alpha 1 and beta 0");
  if (g->trans_a > 1 || g->trans_b > 1) return fail(c, "gemm: trans_a/trans_b must be 0 or 1");
  if (g->epilogue >= RT_EPILOGUE_COUNT) return fail(c, "gemm: epilogue %" PRIu32 " is unknown", g->epilogue);
  if (g->epilogue && g->dtype == RT_DT_I8) return fail(c, "gemm: an i8 gemm takes no epilogue");
  if (g->tf32 > 1 || (g->tf32 && g->dtype != RT_DT_F32))
    return fail(c, "gemm: tf32 %" PRIu32 " on a gemm of dtype %" PRIu32 " (tf32 is for f32)", g->tf32, g->dtype);
  /* On the H200 (cuBLAS 13) only cuBLAS's TN int8 form ran for every
   * shape: NT and TT answered NOT_SUPPORTED always, NN for a batch of 3. */
  if (g->dtype == RT_DT_I8 && (g->trans_a || !g->trans_b))
    return fail(c, "gemm: an i8 gemm takes A untransposed and B transposed (B stored [n][k]; cuBLAS's TN form)");
  const struct {
    const char *name;
    int64_t v, lo;
  } pos[] = {{"m", g->m, 1},   {"n", g->n, 1},   {"k", g->k, 1},   {"batch", g->batch, 1},
             {"lda", g->lda, 1}, {"ldb", g->ldb, 1}, {"ldc", g->ldc, 1}, {"stride_a", g->stride_a, 0},
             {"stride_b", g->stride_b, 0}, {"stride_c", g->stride_c, 0}, {"stride_bias", g->stride_bias, 0}};
  for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
    if (pos[i].v < pos[i].lo || pos[i].v > MAX_DIM)
      return fail(c, "gemm: %s = %" PRId64 " out of range", pos[i].name, pos[i].v);
  int64_t ra = g->trans_a ? g->k : g->m, ca = g->trans_a ? g->m : g->k;
  int64_t rb = g->trans_b ? g->n : g->k, cb = g->trans_b ? g->k : g->n;
  if (g->lda < ca)
    return fail(c, "gemm: lda %" PRId64 " < %" PRId64 " columns of A", g->lda, ca);
  if (g->ldb < cb)
    return fail(c, "gemm: ldb %" PRId64 " < %" PRId64 " columns of B", g->ldb, cb);
  if (g->ldc < g->n)
    return fail(c, "gemm: ldc %" PRId64 " < %" PRId64 " columns of C", g->ldc, g->n);
  if (g->batch > 1 && g->stride_c < g->m * g->ldc - (g->ldc - g->n))
    return fail(c, "gemm: stride_c %" PRId64 " makes the batches of C overlap", g->stride_c);
  int es = rt_dtype_bytes(g->dtype), esc = g->dtype == RT_DT_I8 ? rt_dtype_bytes(RT_DT_I32) : es;
  uint64_t ea, eb, ec;
  if (!matrix_extent(ra, ca, g->lda, g->batch, g->stride_a, es, &ea) ||
      !matrix_extent(rb, cb, g->ldb, g->batch, g->stride_b, es, &eb) ||
      !matrix_extent(g->m, g->n, g->ldc, g->batch, g->stride_c, esc, &ec))
    return fail(c, "gemm: extent overflows");
  if (check_not_status(c, "gemm a", g->a) || check_not_status(c, "gemm b", g->b) ||
      check_not_status(c, "gemm c", g->c))
    return -1;
  if (check_ref(c, "gemm a", g->a, ea) || check_ref(c, "gemm b", g->b, eb) ||
      check_ref(c, "gemm c", g->c, ec) || check_writable(c, "gemm c", g->c, ec))
    return -1;
  if (g->beta == 0.0f && (g->c_in.space || g->c_in.index || g->c_in.offset))
    return fail(c, "gemm: c_in without a beta to read it");
  if (g->beta != 0.0f &&
      (check_not_status(c, "gemm c_in", g->c_in) || check_ref(c, "gemm c_in", g->c_in, ec)))
    return -1;
  /* C is written while C_in is read: the same bytes element for element, or none */
  if (g->beta != 0.0f && !same_ref(g->c_in, g->c) && spans(g->c_in, ec, g->c, ec))
    return fail(c, "gemm: c_in overlaps C without being C");
  if (!g->epilogue && g->stride_bias)
    return fail(c, "gemm: stride_bias %" PRId64 " without an epilogue's bias", g->stride_bias);
  bool bgrad = g->epilogue == RT_EPILOGUE_BGRAD;
  if (bgrad && (g->batch != 1 || g->alpha != 1.0f || g->beta != 0.0f))
    return fail(c, "gemm: a bgrad epilogue takes batch 1, alpha 1 and beta 0");
  uint64_t eb_bias;
  int64_t bias_len = bgrad ? g->m : g->n;
  if (g->epilogue && !matrix_extent(1, bias_len, bias_len, g->batch, g->stride_bias, es, &eb_bias))
    return fail(c, "gemm: extent overflows");
  if (g->epilogue &&
      (check_not_status(c, "gemm bias", g->bias) || check_ref(c, "gemm bias", g->bias, eb_bias)))
    return -1;
  if (bgrad && check_writable(c, "gemm bias", g->bias, eb_bias)) return -1;
  /* bgrad writes the bias while A, B and C are in use */
  if (bgrad && (spans(g->bias, eb_bias, g->a, ea) || spans(g->bias, eb_bias, g->b, eb) || spans(g->bias, eb_bias, g->c, ec)))
    return fail(c, "gemm: the bgrad epilogue's bias overlaps A, B or C");
  /* cuBLAS, and the CPU GEMM that stands for it, read whole elements. */
  if (g->a.offset % (uint64_t)es || g->b.offset % (uint64_t)es || g->c.offset % (uint64_t)esc ||
      g->c_in.offset % (uint64_t)esc || g->bias.offset % (uint64_t)es)
    return fail(c, "gemm: an operand's offset is not a multiple of its element's %d bytes", es);
  return 0;
}

int rt_step_access(const RtPlan *p, const RtStep *s, RtAccessRange *out, int max) {
  int n = 0;
#define ADD(r, bytes, w)                                                                  \
  do {                                                                                  \
    if (n == max) return -1;                                                            \
    out[n++] = (RtAccessRange){(r), (bytes), (w)};                                      \
  } while (0)
  switch (s->kind) {
  case RT_STEP_LAUNCH: {
    const RtLaunch *l = &s->launch;
    const RtContract *k = &p->contracts[l->contract];
    for (uint32_t i = 0; i < l->n_args && i < k->n_params; i++)
      if (l->args[i].kind == RT_ARG_PTR)
        ADD(l->args[i].ref, k->params[i].nbytes, (k->params[i].access & RT_ACCESS_WRITE) != 0);
    break;
  }
  case RT_STEP_GEMM: {
    const RtGemm *g = &s->gemm;
    int es = rt_dtype_bytes(g->dtype), esc = g->dtype == RT_DT_I8 ? 4 : es;
    uint64_t ea = 0, eb = 0, ec = 0, ebias = 0;
    bool bgrad = g->epilogue == RT_EPILOGUE_BGRAD;
    int64_t bias_len = bgrad ? g->m : g->n;
    if (!matrix_extent(g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda, g->batch, g->stride_a, es, &ea) ||
        !matrix_extent(g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb, g->batch, g->stride_b, es, &eb) ||
        !matrix_extent(g->m, g->n, g->ldc, g->batch, g->stride_c, esc, &ec) ||
        (g->epilogue && !matrix_extent(1, bias_len, bias_len, g->batch, g->stride_bias, es, &ebias)))
      return -1;
    ADD(g->a, ea, false);
    ADD(g->b, eb, false);
    ADD(g->c, ec, true);
    if (g->beta != 0.0f) ADD(g->c_in, ec, false); /* C itself or a residual apart from it */
    if (g->epilogue) ADD(g->bias, ebias, bgrad);
    break;
  }
  case RT_STEP_COPY:
  case RT_STEP_ALLREDUCE:
    if (s->copy.nbytes) {
      ADD(s->copy.src, s->copy.nbytes, false);
      ADD(s->copy.dst, s->copy.nbytes, true);
    }
    break;
  default: return -1; /* a branch: it orders everything around it */
  }
#undef ADD
  return n;
}

static bool overlaps(RtRef a, RtRef b, uint64_t n) {
  if (a.space != b.space || a.index != b.index) return false;
  return a.offset < b.offset + n && b.offset < a.offset + n;
}

static int check_copy(Check *c, const RtCopy *k) {
  if (check_not_status(c, "copy dst", k->dst) || check_not_status(c, "copy src", k->src)) return -1;
  if (check_ref(c, "copy dst", k->dst, k->nbytes) || check_ref(c, "copy src", k->src, k->nbytes) ||
      check_writable(c, "copy dst", k->dst, k->nbytes))
    return -1;
  if (overlaps(k->dst, k->src, k->nbytes)) return fail(c, "copy: source and destination overlap");
  return 0;
}

/* A branch of step i of n (updates aside): its condition one byte that
 * a step may read, its skip inside the steps before the updates. */
static int check_branch(Check *c, const RtBranch *k, uint32_t i, uint32_t n) {
  if (c->init) return fail(c, "a branch among the init steps (they run whole)");
  if (check_not_status(c, "branch condition", k->cond) || check_ref(c, "branch condition", k->cond, 1)) return -1;
  if (k->cond.space == RT_SPACE_OUTPUT) return fail(c, "a branch condition in OUTPUT, which steps only write");
  if (k->when > 1) return fail(c, "a branch taken when its condition is %" PRIu32 " (a bool is 0 or 1)", k->when);
  if (k->skip > n - 1 - i)
    return fail(c, "a branch skips %" PRIu32 " steps, past the last step before the updates (%" PRIu32 " follow)",
                k->skip, n - 1 - i);
  return 0;
}

/* A loop's repeat at step i: like a branch, but back, to a step at or
 * after the run's first. */
static int check_repeat(Check *c, const RtBranch *k, uint32_t i) {
  if (c->init) return fail(c, "a loop among the init steps (they run whole)");
  if (check_not_status(c, "loop condition", k->cond) || check_ref(c, "loop condition", k->cond, 1)) return -1;
  if (k->cond.space == RT_SPACE_OUTPUT) return fail(c, "a loop condition in OUTPUT, which steps only write");
  if (k->when > 1) return fail(c, "a loop repeated when its condition is %" PRIu32 " (a bool is 0 or 1)", k->when);
  if (k->skip > i) return fail(c, "a loop goes back %" PRIu32 " steps, before the first (%" PRIu32 " precede)", k->skip, i);
  return 0;
}

/* Output i: its own OUTPUT, or exactly one weight's bytes, which the run
 * then updates in place (state[] by weight; written[] too, so at most once). */
static int check_output(Check *c, uint32_t i, bool *written, bool *state) {
  const RtTensorDesc *t = &c->p->outputs[i];
  if (t->where.space != RT_SPACE_WEIGHTS) return check_desc(c, "output", i, t, RT_SPACE_OUTPUT);
  if (check_desc(c, "output", i, t, RT_SPACE_WEIGHTS)) return -1;
  for (uint32_t w = 0; w < c->p->n_weights; w++) {
    const RtTensorDesc *d = &c->p->weights[w];
    if (d->where.offset != t->where.offset || d->nbytes != t->nbytes || t->where.index != 0) continue;
    if (d->dtype != t->dtype)
      return fail(c, "output %" PRIu32 " '%.60s' lives in weight '%.60s' of another dtype", i, t->name, d->name);
    if (written[w]) return fail(c, "weight '%.60s' is updated twice", d->name);
    written[w] = state[w] = true;
    return 0;
  }
  return fail(c, "output %" PRIu32 " '%.60s' lives at WEIGHTS offset %" PRIu64 " (%" PRIu64
              " bytes), which is not exactly one weight's bytes",
              i, t->name, t->where.offset, t->nbytes);
}

/* Output i's run-time length (version 15): held by an i64 scalar
 * output that has none itself and comes after every output that is not
 * a length, on one of i's axes. */
static int check_length(Check *c, uint32_t i) {
  const RtPlan *p = c->p;
  const RtTensorDesc *t = &p->outputs[i];
  if (!t->length_output) return 0;
  uint32_t j = t->length_output - 1;
  if (j >= p->n_outputs || j == i)
    return fail(c, "output %" PRIu32 " '%.60s': its length is output %" PRIu32 ", which is not another output", i,
                t->name, j);
  const RtTensorDesc *l = &p->outputs[j];
  if (l->dtype != RT_DT_I64 || l->rank != 0 || l->length_output || l->where.space != RT_SPACE_OUTPUT)
    return fail(c, "output %" PRIu32 " '%.60s': its length, output %" PRIu32 ", is not an i64 scalar of its own",
                i, t->name, j);
  if (t->length_axis >= t->rank || t->where.space != RT_SPACE_OUTPUT)
    return fail(c, "output %" PRIu32 " '%.60s': a run-time length on axis %" PRIu32 " of rank %" PRIu32, i,
                t->name, t->length_axis, t->rank);
  for (uint32_t k = j; k < p->n_outputs; k++) {
    bool is_length = false;
    for (uint32_t o = 0; o < p->n_outputs && !is_length; o++) is_length = p->outputs[o].length_output == k + 1;
    if (!is_length)
      return fail(c, "output %" PRIu32 " '%.60s' comes after output %" PRIu32 ", a length, and is none", k,
                  p->outputs[k].name, j);
  }
  return 0;
}

/* An update step: the whole of one OUTPUT over exactly one weight's
 * bytes, that weight not updated before (written[] by weight). */
static int check_update(Check *c, const RtStep *s, bool *written) {
  if (s->kind != RT_STEP_COPY) return fail(c, "an update step must be a copy");
  const RtCopy *k = &s->copy;
  if (k->src.space != RT_SPACE_OUTPUT || k->src.offset != 0 || k->src.index >= c->p->n_outputs ||
      k->nbytes != c->p->outputs[k->src.index].nbytes)
    return fail(c, "an update must copy a whole OUTPUT");
  if (k->dst.space != RT_SPACE_WEIGHTS || k->dst.index != 0)
    return fail(c, "an update must write WEIGHTS");
  for (uint32_t w = 0; w < c->p->n_weights; w++) {
    const RtTensorDesc *t = &c->p->weights[w];
    if (t->where.offset != k->dst.offset || t->nbytes != k->nbytes) continue;
    if (written[w]) return fail(c, "weight '%.60s' is updated twice", t->name);
    written[w] = true;
    return 0;
  }
  return fail(c, "the update at WEIGHTS offset %" PRIu64 " (%" PRIu64 " bytes) is not exactly one weight's bytes",
              k->dst.offset, k->nbytes);
}

int rt_plan_validate(const RtPlan *p, char *err, size_t errlen) {
  return rt_plan_validate_in(p, NULL, 0, err, errlen);
}

/* A sealed plan: the memory it came from, then its checksums. */
static int check_seal(Check *c, const RtRegion *regions, int n_regions) {
  const RtPlan *p = c->p;
  if (p->sealed == 0) return 0;
  if (p->sealed != RT_PLAN_SEALED)
    return fail(c, "the seal marker is 0x%08" PRIx32 ", neither 0 nor 0x%08x: the model is corrupt", p->sealed,
                RT_PLAN_SEALED);
  RtRegion found[32];
  if (!regions) {
    n_regions = rt_loaded_regions(p, found, (int)(sizeof found / sizeof *found));
    regions = found;
    if (!n_regions) return fail(c, "a sealed plan must lie in a loaded model.so, and this one does not");
  }
  return rt_plan_check_seal(p, regions, n_regions, c->err, c->errlen);
}

int rt_plan_validate_in(const RtPlan *p, const RtRegion *regions, int n_regions, char *err, size_t errlen) {
  Check c = {.p = p, .err = err, .errlen = errlen};
  if (!p) return fail(&c, "no plan (NULL)");
  if (p->magic != RT_PLAN_MAGIC)
    return fail(&c, "bad magic 0x%08" PRIx32 " (expected 0x%08x \"DLCP\"): not a dlcc model", p->magic,
                RT_PLAN_MAGIC);
  if (p->version != RT_PLAN_VERSION)
    return fail(&c,
                "version %" PRIu32 ", this runtime reads version %u: rebuild the model with this "
                "dlcc",
                p->version, RT_PLAN_VERSION);
  if (check_seal(&c, regions, n_regions)) return -1;
  const struct {
    const char *name;
    uint32_t n;
    const void *table;
  } tables[] = {{"kernels", p->n_kernels, p->kernels},   {"binaries", p->n_binaries, p->binaries},
                {"steps", p->n_steps, p->steps},         {"init steps", p->n_init_steps, p->init_steps},
                {"weights", p->n_weights, p->weights},   {"contracts", p->n_contracts, p->contracts},
                {"inputs", p->n_inputs, p->inputs},      {"outputs", p->n_outputs, p->outputs}};
  for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
    if (tables[i].n && !tables[i].table)
      return fail(&c, "%" PRIu32 " %s but no table", tables[i].n, tables[i].name);
  if (p->weights_bytes + p->derived_bytes < p->weights_bytes)
    return fail(&c, "weights_bytes + derived_bytes overflows");
  if (p->sync_bytes % 4) return fail(&c, "sync_bytes %" PRIu64 " is not whole i32 words", p->sync_bytes);
  if (p->n_kernels && !p->source && !p->n_binaries)
    return fail(&c, "%" PRIu32 " kernels but neither source nor binaries", p->n_kernels);
  uint32_t parts = p->n_code_parts ? p->n_code_parts : 1;
  if (parts > RT_MAX_CODE_PARTS)
    return fail(&c, "%" PRIu32 " code parts (at most %u)", p->n_code_parts, RT_MAX_CODE_PARTS);
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    const RtKernel *k = &p->kernels[i];
    if (!k->name || !*k->name) return fail(&c, "kernel %" PRIu32 " has no name", i);
    if (k->part >= parts)
      return fail(&c, "kernel %" PRIu32 " (%.100s) is in code part %" PRIu32 " of %" PRIu32, i, k->name, k->part,
                  parts);
    if (k->cooperative > RT_COOP_STRIDE || (k->cooperative && !k->uses_barriers))
      return fail(&c,
                  "kernel %" PRIu32 " (%.100s): cooperative is %" PRIu32
                  " (0, or 1 or 2 for a kernel with barriers)",
                  i, k->name, k->cooperative);
  }
  for (uint32_t i = 0; i < p->n_binaries; i++) {
    const RtBinary *b = &p->binaries[i];
    if (!b->arch || !b->data || !b->size)
      return fail(&c, "binary %" PRIu32 " is empty or has no arch", i);
    if (b->part >= parts)
      return fail(&c, "binary %" PRIu32 " holds code part %" PRIu32 " of %" PRIu32, i, b->part, parts);
  }
  if (check_contracts(&c)) return -1;
  for (uint32_t i = 0; i < p->n_weights; i++)
    if (check_desc(&c, "weight", i, &p->weights[i], RT_SPACE_WEIGHTS)) return -1;
  for (uint32_t i = 0; i < p->n_inputs; i++)
    if (check_desc(&c, "input", i, &p->inputs[i], RT_SPACE_INPUT)) return -1;
  if (p->n_update_steps > p->n_steps)
    return fail(&c, "%" PRIu32 " update steps but %" PRIu32 " steps", p->n_update_steps, p->n_steps);
  /* written: by weight, updated (by an output in place or an update step) */
  bool *written = calloc(2 * (p->n_weights + 1), sizeof *written);
  if (!written) return fail(&c, "out of memory");
  bool *state = written + p->n_weights + 1;
  int rc = 0;
  for (uint32_t i = 0; i < p->n_outputs && !rc; i++)
    rc = check_output(&c, i, written, state) || check_length(&c, i);
  c.state = state;
  for (int init = 1; init >= 0 && !rc; init--) {
    c.init = init;
    uint32_t n = init ? p->n_init_steps : p->n_steps;
    for (uint32_t i = 0; i < n && !rc; i++) {
      const RtStep *s = init ? &p->init_steps[i] : &p->steps[i];
      snprintf(c.where, sizeof c.where, "%sstep %" PRIu32 "%s%.100s%s: ", init ? "init " : "", i,
               s->label ? " (" : "", s->label ? s->label : "", s->label ? ")" : "");
      if (!init && i >= n - p->n_update_steps) {
        rc = check_update(&c, s, written) || check_ref(&c, "update dst", s->copy.dst, s->copy.nbytes);
        continue;
      }
      switch (s->kind) {
      case RT_STEP_LAUNCH: rc = check_launch(&c, &s->launch); break;
      case RT_STEP_GEMM: rc = check_gemm(&c, &s->gemm); break;
      case RT_STEP_COPY:
        rc = check_copy(&c, &s->copy);
        if (!rc && s->copy.reduce) rc = fail(&c, "a copy with a reduction (%" PRIu32 ")", s->copy.reduce);
        break;
      case RT_STEP_ALLREDUCE:
        /* 0 bytes: the wait for the all-reduces started before it. */
        if (!s->copy.nbytes) break;
        rc = check_copy(&c, &s->copy);
        if (!rc && s->copy.nbytes % 4) rc = fail(&c, "an all-reduce of %" PRIu64 " bytes is not f32", s->copy.nbytes);
        if (!rc && s->copy.reduce >= RT_REDUCE_COUNT)
          rc = fail(&c, "an all-reduce's reduction is %" PRIu32 " (0: mean, 1: sum)", s->copy.reduce);
        break;
      case RT_STEP_BRANCH: rc = check_branch(&c, &s->branch, i, n - p->n_update_steps); break;
      case RT_STEP_REPEAT: rc = check_repeat(&c, &s->branch, i); break;
      default: rc = fail(&c, "unknown step kind %" PRIu32, s->kind);
      }
    }
  }
  free(written);
  return rc ? -1 : 0;
}

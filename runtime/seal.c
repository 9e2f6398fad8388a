/* The seal of a plan: takes an RtPlan, returns a 64-bit checksum of each
 * of its parts (RtSealPart), or for a sealed plan of unknown health
 * whether every table, string and blob it points to lies inside the
 * memory it came from and every part still matches its checksum.
 *
 * A model.so's plan is C initializers and .incbin blobs: a flipped count
 * or size in it would send a plain reader past the end of its table or
 * blob (SIGSEGV, or SIGBUS past the end of the mapped file).  So one
 * walker both checks and hashes: before it reads a table, a string or a
 * blob it checks that the bytes lie inside one PT_LOAD segment of the
 * object holding the plan, and only then hashes them.  The compiler runs
 * the same walker over its own plan (trusted memory) to write the seal,
 * so the two can never disagree on what is hashed.  The hash is XXH64
 * (the published algorithm, written out here): it detects corruption, it
 * is no defence against someone who recomputes it. */
#include <inttypes.h>
#include <link.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "runtime.h"

/* ---- XXH64 ---- */

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

typedef struct Xxh {
  uint64_t v[4], total;
  unsigned char buf[32];
  size_t used;
} Xxh;

static uint64_t rotl(uint64_t x, int r) { return x << r | x >> (64 - r); }

/* XXH64 reads little-endian words: one load on the hosts we build for. */
static uint64_t read64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

static uint64_t read32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  return v;
}

static uint64_t xround(uint64_t acc, uint64_t lane) { return rotl(acc + lane * P2, 31) * P1; }

static void xxh_init(Xxh *x, uint64_t seed) {
  *x = (Xxh){.v = {seed + P1 + P2, seed + P2, seed, seed - P1}};
}

/* The lanes in locals: the bytes may alias *x as far as C knows. */
static const unsigned char *stripes(Xxh *x, const unsigned char *p, size_t n) {
  uint64_t v0 = x->v[0], v1 = x->v[1], v2 = x->v[2], v3 = x->v[3];
  for (; n >= 32; p += 32, n -= 32) {
    v0 = xround(v0, read64(p));
    v1 = xround(v1, read64(p + 8));
    v2 = xround(v2, read64(p + 16));
    v3 = xround(v3, read64(p + 24));
  }
  x->v[0] = v0, x->v[1] = v1, x->v[2] = v2, x->v[3] = v3;
  return p;
}

static void xxh_update(Xxh *x, const void *data, size_t n) {
  const unsigned char *p = data;
  x->total += n;
  if (x->used) {
    size_t take = 32 - x->used < n ? 32 - x->used : n;
    memcpy(x->buf + x->used, p, take);
    x->used += take, p += take, n -= take;
    if (x->used < 32) return;
    stripes(x, x->buf, 32);
    x->used = 0;
  }
  const unsigned char *end = stripes(x, p, n);
  n -= (size_t)(end - p), p = end;
  memcpy(x->buf, p, n);
  x->used = n;
}

static uint64_t xxh_digest(const Xxh *x) {
  uint64_t h;
  if (x->total >= 32) {
    h = rotl(x->v[0], 1) + rotl(x->v[1], 7) + rotl(x->v[2], 12) + rotl(x->v[3], 18);
    for (int i = 0; i < 4; i++) h = (h ^ xround(0, x->v[i])) * P1 + P4;
  } else {
    h = x->v[2] + P5; /* v[2] is the seed */
  }
  h += x->total;
  const unsigned char *p = x->buf;
  size_t n = x->used;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ xround(0, read64(p)), 27) * P1 + P4;
  if (n >= 4) h = rotl(h ^ read32(p) * P1, 23) * P2 + P3, p += 4, n -= 4;
  for (; n; p++, n--) h = rotl(h ^ *p * P5, 11) * P1;
  h ^= h >> 33, h *= P2, h ^= h >> 29, h *= P3, h ^= h >> 32;
  return h;
}

uint64_t rt_hash64(const void *data, size_t n, uint64_t seed) {
  Xxh x;
  xxh_init(&x, seed);
  xxh_update(&x, data, n);
  return xxh_digest(&x);
}

/* ---- the walker ---- */

typedef struct Walk {
  const RtRegion *regions; /* NULL: trusted memory, nothing to check */
  int n_regions;
  Xxh part[RT_SEAL_COUNT];
  Xxh *h; /* the part being hashed */
  char *err;
  size_t errlen;
  bool failed;
} Walk;

static void outside(Walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void outside(Walk *w, const char *fmt, ...) {
  if (w->failed) return;
  w->failed = true;
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(w->err, w->errlen, "plan: %s lies outside the memory the model was loaded into: the model is corrupt",
           what);
}

/* The end of the region holding p, or 0 when none does. */
static uintptr_t region_end(const Walk *w, const void *p) {
  uintptr_t a = (uintptr_t)p;
  for (int i = 0; i < w->n_regions; i++)
    if (a >= w->regions[i].lo && a < w->regions[i].hi) return w->regions[i].hi;
  return 0;
}

/* n elements of size bytes at p are readable, and p is aligned for them
 * (a corrupt pointer may be neither). */
static bool readable_as(Walk *w, const void *p, uint64_t n, size_t size, size_t align) {
  if (w->failed) return false;
  if (!w->regions || !n) return true;
  uint64_t bytes;
  uintptr_t end = region_end(w, p);
  return end && (uintptr_t)p % align == 0 && !__builtin_mul_overflow(n, (uint64_t)size, &bytes) &&
         bytes <= end - (uintptr_t)p;
}

/* A table of n elements of p's type. */
#define readable(w, p, n) readable_as(w, p, n, sizeof *(p), _Alignof(__typeof__(*(p))))

static void put(Walk *w, const void *p, size_t n) { xxh_update(w->h, p, n); }
static void put_u32(Walk *w, uint32_t v) { put(w, &v, sizeof v); }
static void put_u64(Walk *w, uint64_t v) { put(w, &v, sizeof v); }

/* A float by value: every NaN alike, since the C text of a model.so
 * keeps NaN but not its payload. */
static void put_f32(Walk *w, float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  put_u32(w, isnan(f) ? 0x7fc00000u : bits);
}

/* A string, NULL told apart from "": NUL-terminated inside a region. */
static void put_str(Walk *w, const char *s, const char *what) {
  if (w->failed) return;
  if (!s) {
    put_u64(w, UINT64_MAX);
    return;
  }
  size_t n;
  if (w->regions) {
    uintptr_t end = region_end(w, s);
    const char *nul = end ? memchr(s, 0, end - (uintptr_t)s) : NULL;
    if (!nul) {
      outside(w, "%s (a string)", what);
      return;
    }
    n = (size_t)(nul - s);
  } else {
    n = strlen(s);
  }
  put_u64(w, n);
  put(w, s, n);
}

static void put_ref(Walk *w, RtRef r) {
  put_u32(w, r.space);
  put_u32(w, r.index);
  put_u64(w, r.offset);
}

static void walk_descs(Walk *w, const char *kind, const RtTensorDesc *t, uint32_t n) {
  if (t && !readable(w, t, n)) outside(w, "the table of %" PRIu32 " %ss", n, kind);
  for (uint32_t i = 0; t && i < n && !w->failed; i++) {
    char what[64];
    snprintf(what, sizeof what, "the name of %s %" PRIu32, kind, i);
    put_str(w, t[i].name, what);
    put_u32(w, t[i].dtype);
    put_u32(w, t[i].rank);
    for (uint32_t d = 0; d < t[i].rank && d < RT_MAX_RANK; d++) put_u64(w, (uint64_t)t[i].dims[d]);
    put_u64(w, t[i].nbytes);
    put_ref(w, t[i].where);
    put_u32(w, t[i].length_output);
    put_u32(w, t[i].length_axis);
  }
}

static void walk_kernels(Walk *w, const RtPlan *p) {
  if (p->kernels && !readable(w, p->kernels, p->n_kernels))
    outside(w, "the table of %" PRIu32 " kernels", p->n_kernels);
  for (uint32_t i = 0; p->kernels && i < p->n_kernels && !w->failed; i++) {
    const RtKernel *k = &p->kernels[i];
    char what[64];
    snprintf(what, sizeof what, "the name of kernel %" PRIu32, i);
    put_str(w, k->name, what);
    put_u32(w, k->uses_barriers);
    put_u32(w, k->static_shared_bytes);
    put_u32(w, k->cooperative);
    put_u32(w, k->part);
  }
  if (p->contracts && !readable(w, p->contracts, p->n_contracts))
    outside(w, "the table of %" PRIu32 " contracts", p->n_contracts);
  for (uint32_t i = 0; p->contracts && i < p->n_contracts && !w->failed; i++) {
    const RtContract *c = &p->contracts[i];
    put_u32(w, c->kernel);
    for (int a = 0; a < 3; a++) put_u32(w, c->grid[a]), put_u32(w, c->block[a]);
    put_u32(w, c->dynamic_shared_bytes);
    put_u32(w, c->n_params);
    if (c->params && !readable(w, c->params, c->n_params))
      outside(w, "the %" PRIu32 " parameters of contract %" PRIu32, c->n_params, i);
    for (uint32_t j = 0; c->params && j < c->n_params && !w->failed; j++) {
      const RtParam *q = &c->params[j];
      put_u32(w, q->kind);
      put_u32(w, q->access);
      put_u64(w, q->nbytes);
      put_u64(w, (uint64_t)q->lo);
      put_u64(w, (uint64_t)q->hi);
    }
  }
}

static void walk_launch(Walk *w, const RtLaunch *l, const char *where) {
  put_u32(w, l->kernel);
  put_u32(w, l->contract);
  for (int a = 0; a < 3; a++) put_u32(w, l->grid[a]), put_u32(w, l->block[a]);
  put_u32(w, l->dynamic_shared_bytes);
  put_u32(w, l->n_args);
  if (l->args && !readable(w, l->args, l->n_args))
    outside(w, "the %" PRIu32 " arguments of %s", l->n_args, where);
  for (uint32_t j = 0; l->args && j < l->n_args && !w->failed; j++) {
    put_u32(w, l->args[j].kind);
    put_ref(w, l->args[j].ref);
    put_u64(w, (uint64_t)l->args[j].i);
    put_f32(w, l->args[j].f);
  }
}

static void walk_gemm(Walk *w, const RtGemm *g) {
  put_u32(w, g->dtype);
  put_u32(w, g->trans_a);
  put_u32(w, g->trans_b);
  const int64_t ints[] = {g->m, g->n, g->k, g->lda, g->ldb, g->ldc, g->batch, g->stride_a, g->stride_b, g->stride_c,
                          g->stride_bias};
  for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) put_u64(w, (uint64_t)ints[i]);
  put_f32(w, g->alpha);
  put_f32(w, g->beta);
  put_ref(w, g->a);
  put_ref(w, g->b);
  put_ref(w, g->c);
  put_u32(w, g->epilogue);
  put_ref(w, g->bias);
  put_ref(w, g->c_in);
  put_u32(w, g->tf32);
}

/* Only the member of a step's kind: the others are unused. */
static void walk_steps(Walk *w, const RtStep *steps, uint32_t n, bool init) {
  const char *kind = init ? "init step" : "step";
  if (steps && !readable(w, steps, n)) outside(w, "the table of %" PRIu32 " %ss", n, kind);
  for (uint32_t i = 0; steps && i < n && !w->failed; i++) {
    const RtStep *s = &steps[i];
    char where[64], what[96];
    snprintf(where, sizeof where, "%s %" PRIu32, kind, i);
    put_u32(w, s->kind);
    snprintf(what, sizeof what, "the label of %s", where);
    put_str(w, s->label, what);
    snprintf(what, sizeof what, "the origin of %s", where);
    put_str(w, s->origin, what);
    if (s->kind == RT_STEP_LAUNCH) {
      walk_launch(w, &s->launch, where);
    } else if (s->kind == RT_STEP_GEMM) {
      walk_gemm(w, &s->gemm);
    } else if (s->kind == RT_STEP_COPY || s->kind == RT_STEP_ALLREDUCE) {
      put_ref(w, s->copy.dst);
      put_ref(w, s->copy.src);
      put_u64(w, s->copy.nbytes);
      put_u32(w, s->copy.reduce);
    } else if (s->kind == RT_STEP_BRANCH || s->kind == RT_STEP_REPEAT) {
      put_ref(w, s->branch.cond);
      put_u32(w, s->branch.when);
      put_u32(w, s->branch.skip);
    }
  }
}

static void walk_binaries(Walk *w, const RtPlan *p) {
  if (p->binaries && !readable(w, p->binaries, p->n_binaries))
    outside(w, "the table of %" PRIu32 " binaries", p->n_binaries);
  for (uint32_t i = 0; p->binaries && i < p->n_binaries && !w->failed; i++) {
    const RtBinary *b = &p->binaries[i];
    char what[64];
    snprintf(what, sizeof what, "the arch of binary %" PRIu32, i);
    put_str(w, b->arch, what);
    put_u32(w, b->part);
    put_u64(w, b->size);
    if (b->data && !readable_as(w, b->data, b->size, 1, 1))
      outside(w, "binary %" PRIu32 " (%" PRIu64 " bytes)", i, b->size);
    else if (b->data && !w->failed)
      put(w, b->data, (size_t)b->size);
  }
}

static void walk_header(Walk *w, const RtPlan *p) {
  put_u32(w, p->magic);
  put_u32(w, p->version);
  put_u32(w, p->sealed);
  put_str(w, p->model_name, "the model name");
  /* A table's address matters only with a count, which validation checks;
   * these two have none. */
  put_u32(w, p->source != NULL);
  put_u32(w, p->weights_data != NULL);
  const uint32_t counts[] = {p->n_kernels, p->n_binaries, p->n_steps, p->n_weights, p->n_inputs,
                             p->n_outputs, p->n_init_steps, p->n_contracts, p->n_update_steps, p->n_code_parts};
  for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) put_u32(w, counts[i]);
  const uint64_t sizes[] = {p->arena_bytes, p->weights_bytes, p->derived_bytes, p->status_bytes, p->sync_bytes};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) put_u64(w, sizes[i]);
}

/* Every part into w->part[]; false when something lies outside. */
static bool walk(Walk *w, const RtPlan *p) {
  for (int i = 0; i < RT_SEAL_COUNT; i++) xxh_init(&w->part[i], (uint64_t)i);
  w->h = &w->part[RT_SEAL_HEADER];
  walk_header(w, p);
  w->h = &w->part[RT_SEAL_TENSORS];
  walk_descs(w, "weight", p->weights, p->n_weights);
  walk_descs(w, "input", p->inputs, p->n_inputs);
  walk_descs(w, "output", p->outputs, p->n_outputs);
  w->h = &w->part[RT_SEAL_KERNELS];
  walk_kernels(w, p);
  w->h = &w->part[RT_SEAL_STEPS];
  walk_steps(w, p->init_steps, p->n_init_steps, true);
  walk_steps(w, p->steps, p->n_steps, false);
  w->h = &w->part[RT_SEAL_SOURCE];
  put_str(w, p->source, "the CUDA source");
  w->h = &w->part[RT_SEAL_WEIGHTS];
  if (p->weights_data && !readable_as(w, p->weights_data, p->weights_bytes, 1, 1))
    outside(w, "the weights (%" PRIu64 " bytes)", p->weights_bytes);
  else if (p->weights_data && !w->failed)
    put(w, p->weights_data, (size_t)p->weights_bytes);
  w->h = &w->part[RT_SEAL_BINARIES];
  walk_binaries(w, p);
  return !w->failed;
}

int rt_plan_seal_in(const RtPlan *p, const RtRegion *regions, int n_regions, uint64_t out[RT_SEAL_COUNT], char *err,
                    size_t errlen) {
  Walk w = {.regions = regions, .n_regions = n_regions, .err = err, .errlen = errlen};
  if (!readable(&w, p, 1)) {
    snprintf(err, errlen, "plan: the plan lies outside the memory the model was loaded into");
    return -1;
  }
  if (!walk(&w, p)) return -1;
  for (int i = 0; i < RT_SEAL_COUNT; i++) out[i] = xxh_digest(&w.part[i]);
  return 0;
}

void rt_plan_seal(const RtPlan *p, uint64_t out[RT_SEAL_COUNT]) { rt_plan_seal_in(p, NULL, 0, out, NULL, 0); }

static const char *const part_names[RT_SEAL_COUNT] = {
    [RT_SEAL_HEADER] = "the plan header",        [RT_SEAL_TENSORS] = "the tensor descriptions",
    [RT_SEAL_KERNELS] = "the kernel table",      [RT_SEAL_STEPS] = "the steps",
    [RT_SEAL_SOURCE] = "the CUDA source",        [RT_SEAL_WEIGHTS] = "the weights",
    [RT_SEAL_BINARIES] = "the binaries (cubin, PTX)",
};

int rt_plan_check_seal(const RtPlan *p, const RtRegion *regions, int n_regions, char *err, size_t errlen) {
  uint64_t got[RT_SEAL_COUNT];
  if (rt_plan_seal_in(p, regions, n_regions, got, err, errlen)) return -1;
  for (int i = 0; i < RT_SEAL_COUNT; i++)
    if (got[i] != p->seal[i]) {
      snprintf(err, errlen,
               "plan: %s do not match the model's checksum (stored %016" PRIx64 ", computed %016" PRIx64
               "): the model is corrupt",
               part_names[i], p->seal[i], got[i]);
      return -1;
    }
  return 0;
}

/* ---- the memory of a loaded object ---- */

typedef struct Find {
  uintptr_t addr;
  RtRegion *out;
  int max, n;
} Find;

static int find_object(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  Find *f = data;
  bool holds = false;
  for (int i = 0; i < info->dlpi_phnum && !holds; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    holds = ph->p_type == PT_LOAD && f->addr >= lo && f->addr - lo < ph->p_memsz;
  }
  if (!holds) return 0;
  for (int i = 0; i < info->dlpi_phnum && f->n < f->max; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    f->out[f->n++] = (RtRegion){lo, lo + ph->p_memsz};
  }
  return 1;
}

int rt_loaded_regions(const void *addr, RtRegion *out, int max) {
  Find f = {.addr = (uintptr_t)addr, .out = out, .max = max};
  dl_iterate_phdr(find_object, &f);
  return f.n;
}

/* NVRTC with a disk cache: takes a plan's CUDA C and a target arch,
 * returns a cubin (or PTX).  The second load of a model, in this process
 * or a later one, does no NVRTC work: identical requests are served from
 * an in-process memo, then from $XDG_CACHE_HOME/dlcc, where each entry is
 * keyed by SHA-256 of (format, NVRTC version, options, source) and
 * carries a header (magic, length, SHA-256 of the payload) so a truncated
 * or corrupted file is noticed, reported and recompiled, never loaded. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef HAVE_CUDA
#include <nvrtc.h>
#endif

#include "runtime.h"

/* ---- SHA-256 (FIPS 180-4) ---- */

typedef struct Sha256 {
  uint32_t h[8];
  uint8_t buf[64];
  size_t nbuf;
  uint64_t total;
} Sha256;

static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha_block(Sha256 *s, const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
           p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
  uint32_t e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
    uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
  s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

static void sha_init(Sha256 *s) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, h0, sizeof h0);
  s->nbuf = 0;
  s->total = 0;
}

static void sha_update(Sha256 *s, const void *data, size_t n) {
  const uint8_t *p = data;
  s->total += n;
  while (n) {
    size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
    memcpy(s->buf + s->nbuf, p, take);
    s->nbuf += take, p += take, n -= take;
    if (s->nbuf == 64) sha_block(s, s->buf), s->nbuf = 0;
  }
}

static void sha_final(Sha256 *s, uint8_t out[32]) {
  uint64_t bits = s->total * 8;
  uint8_t pad = 0x80, zero = 0, len[8];
  sha_update(s, &pad, 1);
  while (s->nbuf != 56) sha_update(s, &zero, 1);
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
  sha_update(s, len, 8);
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 4; j++) out[4 * i + j] = (uint8_t)(s->h[i] >> (24 - 8 * j));
}

void rt_sha256(const void *data, size_t n, uint8_t out[32]) {
  Sha256 s;
  sha_init(&s);
  sha_update(&s, data, n);
  sha_final(&s, out);
}

/* ---- process state: memo, counters, last note ---- */

typedef struct Memo {
  struct Memo *next;
  uint8_t key[32];
  void *data;
  size_t size;
} Memo;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Memo *memo;
static RtNvrtcStats stats;
static char last_note[1024];

void rt_nvrtc_stats(RtNvrtcStats *out) {
  pthread_mutex_lock(&lock);
  *out = stats;
  pthread_mutex_unlock(&lock);
}

void rt_nvrtc_reset(void) {
  pthread_mutex_lock(&lock);
  while (memo) {
    Memo *m = memo;
    memo = m->next;
    free(m->data);
    free(m);
  }
  memset(&stats, 0, sizeof stats);
  last_note[0] = 0;
  pthread_mutex_unlock(&lock);
}

const char *rt_nvrtc_last_note(void) { return last_note; }

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&lock);
  vsnprintf(last_note, sizeof last_note, fmt, ap);
  fprintf(stderr, "dlcc: note: %s\n", last_note);
  pthread_mutex_unlock(&lock);
  va_end(ap);
}

static void count(uint64_t *counter) {
  pthread_mutex_lock(&lock);
  (*counter)++;
  pthread_mutex_unlock(&lock);
}

static bool memo_find(const uint8_t key[32], void **bin, size_t *size) {
  bool found = false;
  pthread_mutex_lock(&lock);
  for (Memo *m = memo; m; m = m->next)
    if (!memcmp(m->key, key, 32)) {
      *bin = malloc(m->size);
      if (*bin) {
        memcpy(*bin, m->data, m->size);
        *size = m->size;
        stats.memo_hits++;
        found = true;
      }
      break;
    }
  pthread_mutex_unlock(&lock);
  return found;
}

static void memo_add(const uint8_t key[32], const void *bin, size_t size) {
  Memo *m = malloc(sizeof *m);
  void *copy = malloc(size);
  if (!m || !copy) {
    free(m);
    free(copy);
    return; /* only a lost optimization */
  }
  memcpy(m->key, key, 32);
  memcpy(copy, bin, size);
  m->data = copy;
  m->size = size;
  pthread_mutex_lock(&lock);
  m->next = memo;
  memo = m;
  pthread_mutex_unlock(&lock);
}

/* ---- options ---- */

static const char *cuda_dir(void) {
  const char *e = getenv("DLCC_CUDA_DIR");
  if (e && *e) return e;
#ifdef DLCC_CUDA_DIR
  return DLCC_CUDA_DIR;
#else
  return "/usr/local/cuda";
#endif
}

/* the options every compile has, and a part's DL_PART */
enum { N_OPTS = 4, MAX_OPTS = N_OPTS + 1 };

/* sm_XX gives a cubin, compute_XX PTX (nvrtcGetCUBINSize is 0 then).
 * cuda_fp16.h is not among NVRTC's built-in headers: the toolkit's
 * include folder.  Line info costs no speed and lets compute-sanitizer
 * name the line of model.cu that faulted. */
static void make_options(const char *arch, char opts[MAX_OPTS][600]) {
  snprintf(opts[0], sizeof opts[0], "--gpu-architecture=%s", arch);
  snprintf(opts[1], sizeof opts[1], "-I%s/include", cuda_dir());
  snprintf(opts[2], sizeof opts[2], "-std=c++17");
  snprintf(opts[3], sizeof opts[3], "--generate-line-info");
}

void rt_nvrtc_options_text(const char *arch, char *buf, size_t len) {
  char opts[MAX_OPTS][600];
  make_options(arch, opts);
  size_t at = 0;
  buf[0] = 0;
  for (int i = 0; i < N_OPTS && at < len; i++) at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? " " : "", opts[i]);
}

/* ---- the disk cache ---- */

#define ENTRY_MAGIC "DLCCBIN\x01"
enum { HEADER_BYTES = 8 + 8 + 32 + 32 };

/* Fills dir with the cache folder; false when caching is off or no
 * folder can be named. */
static bool cache_dir(char *dir, size_t len) {
  const char *e = getenv("DLCC_CACHE_DIR");
  if (e && !strcmp(e, "off")) return false;
  int n;
  if (e && *e)
    n = snprintf(dir, len, "%s", e);
  else if ((e = getenv("XDG_CACHE_HOME")) && *e)
    n = snprintf(dir, len, "%s/dlcc", e);
  else if ((e = getenv("HOME")) && *e)
    n = snprintf(dir, len, "%s/.cache/dlcc", e);
  else
    return false;
  return n > 0 && (size_t)n < len;
}

static int mkdir_p(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    int rc = mkdir(path, 0755);
    *p = '/';
    if (rc && errno != EEXIST) return -1;
  }
  return mkdir(path, 0755) && errno != EEXIST ? -1 : 0;
}

static void hex(const uint8_t *b, int n, char *out) {
  for (int i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static int read_all(const char *path, uint8_t **data, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 1 << 16;
      uint8_t *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return -1;
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return -1;
  }
  *data = buf;
  *size = n;
  return 0;
}

/* The payload of a sound entry, or false (a note says why when the file
 * exists but is refused). */
static bool cache_load(const char *path, const uint8_t key[32], void **bin, size_t *size) {
  uint8_t *d;
  size_t n;
  if (read_all(path, &d, &n)) return false;
  const char *why = NULL;
  uint8_t h[32];
  if (n < HEADER_BYTES || memcmp(d, ENTRY_MAGIC, 8))
    why = n < HEADER_BYTES ? "truncated header" : "bad magic";
  else if (memcmp(d + 48, key, 32))
    why = "key mismatch";
  else if (get64(d + 8) != n - HEADER_BYTES)
    why = "truncated or extended payload";
  else if (rt_sha256(d + HEADER_BYTES, n - HEADER_BYTES, h), memcmp(h, d + 16, 32))
    why = "payload hash mismatch";
  if (why) {
    free(d);
    count(&stats.cache_corrupt);
    note("kernel cache entry %s is corrupt (%s); recompiling", path, why);
    return false;
  }
  *size = n - HEADER_BYTES;
  memmove(d, d + HEADER_BYTES, *size);
  *bin = d;
  return true;
}

/* Atomic: a reader sees the old entry, none, or the whole new one. */
static void cache_store(const char *dir, const char *path, const uint8_t key[32], const void *bin,
                        size_t size) {
  static unsigned serial;
  char tmp[4200];
  pthread_mutex_lock(&lock);
  unsigned my = serial++;
  pthread_mutex_unlock(&lock);
  snprintf(tmp, sizeof tmp, "%s/.tmp-%ld-%u", dir, (long)getpid(), my);
  uint8_t head[HEADER_BYTES];
  memcpy(head, ENTRY_MAGIC, 8);
  put64(head + 8, size);
  rt_sha256(bin, size, head + 16);
  memcpy(head + 48, key, 32);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    note("cannot write the kernel cache in %s: %s", dir, strerror(errno));
    return;
  }
  bool ok = fwrite(head, 1, sizeof head, f) == sizeof head && fwrite(bin, 1, size, f) == size;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path)) {
    note("cannot write the kernel cache entry %s: %s", path, strerror(errno));
    unlink(tmp);
    return;
  }
  count(&stats.cache_writes);
}

/* ---- compiling ---- */

/* Line (1-based) where kernel name is defined in src, or 0. */
static int kernel_line(const char *src, const char *name) {
  size_t len = strlen(name);
  for (const char *p = strstr(src, name); p; p = strstr(p + 1, name)) {
    bool starts = p == src || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') ||
                                (p[-1] >= 'A' && p[-1] <= 'Z') || (p[-1] >= '0' && p[-1] <= '9'));
    const char *q = p + len;
    while (*q == ' ' || *q == '\t' || *q == '\n') q++;
    if (!starts || *q != '(') continue;
    /* A definition, not a call: __global__ earlier on the same statement. */
    const char *g = p;
    while (g > src && g[-1] != ';' && g[-1] != '}') g--;
    const char *glob = strstr(g, "__global__");
    if (!glob || glob > p) continue;
    int line = 1;
    for (const char *s = src; s < p; s++) line += *s == '\n';
    return line;
  }
  return 0;
}

/* The kernel whose definition precedes the first error in log. */
static const char *failing_kernel(const RtPlan *plan, const char *prog, const char *log,
                                  int *line_out) {
  size_t plen = strlen(prog);
  int line = 0;
  for (const char *p = strstr(log, prog); p; p = strstr(p + 1, prog)) {
    if (p[plen] != '(') continue;
    char *end;
    long l = strtol(p + plen + 1, &end, 10);
    if (*end == ')' && strstr(end, ": error") == end + 1) {
      line = (int)l;
      break;
    }
  }
  *line_out = line;
  if (!line) return NULL;
  const char *best = NULL;
  int best_line = 0;
  for (uint32_t i = 0; i < plan->n_kernels; i++) {
    int kl = kernel_line(plan->source, plan->kernels[i].name);
    if (kl && kl <= line && kl > best_line) best = plan->kernels[i].name, best_line = kl;
  }
  return best;
}

#ifdef HAVE_CUDA
static int compile(const RtPlan *plan, const char *arch, char opts[MAX_OPTS][600], int n_opts, void **bin,
                   size_t *size, char *err, size_t errlen) {
  /* NVRTC writes the program's name into the PTX (.file "NAME"): a
   * model's name is data and goes there only when it is plain. */
  const char *stem = plan->model_name ? plan->model_name : "";
  size_t plain = strspn(stem, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-");
  char prog_name[128];
  snprintf(prog_name, sizeof prog_name, "%s.cu", plain && !stem[plain] && plain <= 100 ? stem : "model");
  const char *model = plan->model_name ? plan->model_name : "model";
  nvrtcProgram prog;
  nvrtcResult r = nvrtcCreateProgram(&prog, plan->source, prog_name, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) {
    snprintf(err, errlen, "nvrtc: nvrtcCreateProgram: %s", nvrtcGetErrorString(r));
    return -1;
  }
  const char *optv[MAX_OPTS];
  for (int i = 0; i < n_opts; i++) optv[i] = opts[i];
  count(&stats.compiles);
  r = nvrtcCompileProgram(prog, n_opts, optv);
  if (r != NVRTC_SUCCESS) {
    size_t loglen = 0;
    char *log = NULL;
    if (nvrtcGetProgramLogSize(prog, &loglen) == NVRTC_SUCCESS && loglen && (log = malloc(loglen)))
      if (nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = 0;
    int line = 0;
    const char *k = log ? failing_kernel(plan, prog_name, log, &line) : NULL;
    char kpart[320] = "";
    if (k)
      snprintf(kpart, sizeof kpart, " in kernel '%.100s' (%s line %d)", k, prog_name, line);
    else if (line)
      snprintf(kpart, sizeof kpart, " at %s line %d, before any kernel", prog_name, line);
    snprintf(err, errlen, "nvrtc: compiling model '%s' for %s failed%s: %s\n%s", model, arch,
             kpart, nvrtcGetErrorString(r), log ? log : "(no log)");
    free(log);
    nvrtcDestroyProgram(&prog);
    return -1;
  }
  bool ptx = !strncmp(arch, "compute_", 8);
  size_t n = 0;
  r = ptx ? nvrtcGetPTXSize(prog, &n) : nvrtcGetCUBINSize(prog, &n);
  void *out = r == NVRTC_SUCCESS && n ? malloc(n) : NULL;
  if (r == NVRTC_SUCCESS && !out) {
    snprintf(err, errlen, "nvrtc: out of host memory for a %zu-byte binary", n);
    nvrtcDestroyProgram(&prog);
    return -1;
  }
  if (r == NVRTC_SUCCESS) r = ptx ? nvrtcGetPTX(prog, out) : nvrtcGetCUBIN(prog, out);
  nvrtcDestroyProgram(&prog);
  if (r != NVRTC_SUCCESS) {
    free(out);
    snprintf(err, errlen, "nvrtc: getting the %s for %s: %s", ptx ? "PTX" : "cubin", arch,
             nvrtcGetErrorString(r));
    return -1;
  }
  *bin = out;
  *size = n;
  return 0;
}

static void nvrtc_version(int *major, int *minor) {
  if (nvrtcVersion(major, minor) != NVRTC_SUCCESS) *major = *minor = -1;
}

/* A cubin runs only on its own arch (sm_90 on 9.0), so a GPU newer than
 * this NVRTC gets PTX of an older virtual arch, which the driver JITs:
 * slower to load, still correct.  A 9.0 GPU gets "sm_90a": sm_90 and the
 * features of exactly that GPU (wgmma), which kernels take under
 * __CUDA_ARCH_FEAT_SM90_ALL; the cubin runs on 9.0 alone, which is the
 * GPU it is compiled for.  DLCC_NO_WGMMA=1 in the environment keeps
 * plain sm_90. */
int rt_nvrtc_target(int cc, char *arch, size_t len, char *err, size_t errlen) {
  int n = 0;
  int *archs = NULL;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0 || !(archs = malloc(sizeof *archs * (size_t)n)) ||
      nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS) {
    free(archs);
    snprintf(err, errlen, "nvrtc: cannot list the architectures this NVRTC supports");
    return -1;
  }
  int best = -1, lo = archs[0];
  bool exact = false;
  for (int i = 0; i < n; i++) {
    if (archs[i] == cc) exact = true;
    if (archs[i] <= cc && archs[i] > best) best = archs[i];
    if (archs[i] < lo) lo = archs[i];
  }
  free(archs);
  if (exact) {
    /* DLCC_NO_WGMMA=1: plain sm_90, whose kernels take their mma.sync
     * side: to compare, or to get around a wgmma fault, with no rebuild */
    snprintf(arch, len, "sm_%d%s", cc, cc == 90 && !rt_env_on("DLCC_NO_WGMMA") ? "a" : "");
    return 0;
  }
  if (best < 0) {
    snprintf(err, errlen, "nvrtc: this NVRTC targets compute capability %d.%d and newer; the GPU is %d.%d", lo / 10,
             lo % 10, cc / 10, cc % 10);
    return -1;
  }
  snprintf(arch, len, "compute_%d", best);
  return 0;
}
#else
static int compile(const RtPlan *plan, const char *arch, char opts[MAX_OPTS][600], int n_opts, void **bin,
                   size_t *size, char *err, size_t errlen) {
  (void)plan, (void)arch, (void)opts, (void)n_opts, (void)bin, (void)size;
  snprintf(err, errlen, "nvrtc: this libdlcrt was built without the CUDA toolkit");
  return -1;
}

static void nvrtc_version(int *major, int *minor) { *major = *minor = -1; }

int rt_nvrtc_target(int cc, char *arch, size_t len, char *err, size_t errlen) {
  snprintf(err, errlen, "nvrtc: this libdlcrt was built without the CUDA toolkit");
  return -1;
}
#endif

int rt_nvrtc_compile_part(const RtPlan *plan, const char *arch, int part, void **bin, size_t *size, char *err,
                          size_t errlen) {
  if (!plan->source) {
    snprintf(err, errlen, "nvrtc: the plan has no CUDA source to compile");
    return -1;
  }
  char opts[MAX_OPTS][600];
  make_options(arch, opts);
  int n_opts = N_OPTS;
  if (part >= 0 && plan->n_code_parts > 1) snprintf(opts[n_opts++], sizeof opts[0], "-DDL_PART=%d", part);
  int major, minor;
  nvrtc_version(&major, &minor);
  char head[64];
  snprintf(head, sizeof head, "dlcc-kernel-cache 1 nvrtc %d.%d", major, minor);
  Sha256 s;
  sha_init(&s);
  sha_update(&s, head, strlen(head) + 1);
  for (int i = 0; i < n_opts; i++) sha_update(&s, opts[i], strlen(opts[i]) + 1);
  sha_update(&s, plan->source, strlen(plan->source));
  uint8_t key[32];
  sha_final(&s, key);

  if (memo_find(key, bin, size)) return 0;
  char dir[4096], path[4200], name[65];
  bool cache = cache_dir(dir, sizeof dir);
  if (cache) {
    hex(key, 32, name);
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, strncmp(arch, "compute_", 8) ? "cubin" : "ptx");
    if (cache_load(path, key, bin, size)) {
      count(&stats.cache_hits);
      memo_add(key, *bin, *size);
      return 0;
    }
  }
  if (compile(plan, arch, opts, n_opts, bin, size, err, errlen)) return -1;
  memo_add(key, *bin, *size);
  if (cache) {
    if (mkdir_p(dir))
      note("cannot create the kernel cache folder %s: %s", dir, strerror(errno));
    else
      cache_store(dir, path, key, *bin, *size);
  }
  return 0;
}

int rt_nvrtc_compile(const RtPlan *plan, const char *arch, void **bin, size_t *size, char *err,
                     size_t errlen) {
  return rt_nvrtc_compile_part(plan, arch, -1, bin, size, err, errlen);
}

/* ---- compiles side by side ---- */

typedef struct JobPool {
  const RtPlan *plan;
  RtNvrtcJob *jobs;
  int n, next;
  pthread_mutex_t lock;
} JobPool;

static void *job_worker(void *data) {
  JobPool *pool = data;
  for (;;) {
    pthread_mutex_lock(&pool->lock);
    int i = pool->next++;
    pthread_mutex_unlock(&pool->lock);
    if (i >= pool->n) return NULL;
    RtNvrtcJob *j = &pool->jobs[i];
    j->rc = rt_nvrtc_compile_part(pool->plan, j->arch, j->part, &j->bin, &j->size, j->err, sizeof j->err);
  }
}

void rt_nvrtc_run_jobs(const RtPlan *plan, RtNvrtcJob *jobs, int n) {
  JobPool pool = {.plan = plan, .jobs = jobs, .n = n};
  pthread_mutex_init(&pool.lock, NULL);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int extra = (int)(cpus > n ? n : cpus > 1 ? cpus : 1) - 1, started = 0;
  pthread_t threads[64];
  if (extra > (int)(sizeof threads / sizeof *threads)) extra = (int)(sizeof threads / sizeof *threads);
  while (started < extra && pthread_create(&threads[started], NULL, job_worker, &pool) == 0) started++;
  job_worker(&pool); /* this thread works too: with no other thread, alone */
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  pthread_mutex_destroy(&pool.lock);
}

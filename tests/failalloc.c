/* The failing allocator (tests/failalloc.h): interposes the malloc family
 * for the whole test process, forwards to the allocator after it in the
 * search order (the C library's, or ASan's), and counts, fails and keeps
 * what it is told to. */
#include "tests/failalloc.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/arena.h"

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);

/* dlsym may allocate before the real functions are known: from here. */
static _Alignas(16) unsigned char boot[16384];
static size_t boot_used;

static bool from_boot(const void *p) {
  return (const unsigned char *)p >= boot && (const unsigned char *)p < boot + sizeof boot;
}

static void *boot_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n > sizeof boot - boot_used) return NULL;
  void *p = boot + boot_used;
  boot_used += n;
  return p;
}

static bool resolve(void) {
  static bool resolving;
  if (real_free) return true;
  if (resolving) return false;
  resolving = true;
  real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
  real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
  real_posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  real_aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
  real_memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
  real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  resolving = false;
  return real_free != NULL;
}

/* ---- the dynamic loader ---- */

/* The loader's own allocations are neither counted nor failed: it aborts
 * the process when one fails ("cannot allocate memory for thread-local
 * data", the first touch of a dlopen'd library's thread_local), which no
 * library can prevent, and what it keeps past dlclose is not ours. */
static uintptr_t loader_lo, loader_hi;

static int find_loader(struct dl_phdr_info *info, size_t size, void *data) {
  const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
  if (!base || strncmp(base + 1, "ld-", 3) != 0) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    loader_lo = info->dlpi_addr + ph->p_vaddr;
    loader_hi = loader_lo + ph->p_memsz;
  }
  return 1;
}

static bool from_loader(const void *caller) {
  return (uintptr_t)caller >= loader_lo && (uintptr_t)caller < loader_hi;
}

/* ---- counting ---- */

static atomic_bool armed, paused, failed;
static atomic_long counted, target;

/* True when this allocation is to fail. */
static bool tick(const void *caller) {
  if (!atomic_load(&armed) || atomic_load(&paused) || from_loader(caller)) return false;
  long n = atomic_fetch_add(&counted, 1) + 1;
  if (n != atomic_load(&target)) return false;
  atomic_store(&failed, true);
  return true;
}

static bool arena_tick(void) { return tick(NULL); }

/* ---- the blocks allocated while armed: open addressing, tombstones ---- */

enum { KEEP_CAP = 1 << 20 };
#define TOMB ((void *)1)

typedef struct Kept {
  void *p;
  size_t size;
  void *caller;
} Kept;

static Kept *kept;
static long n_live;
static atomic_flag lock = ATOMIC_FLAG_INIT;

static void take(void) {
  while (atomic_flag_test_and_set(&lock)) {
  }
}

static void give(void) { atomic_flag_clear(&lock); }

static size_t slot_of(const void *p) {
  uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 40) & (KEEP_CAP - 1);
}

static void keep(void *p, size_t size, void *caller) {
  if (!p || !kept || !atomic_load(&armed) || atomic_load(&paused) || from_loader(caller)) return;
  take();
  for (size_t i = slot_of(p), k = 0; k < KEEP_CAP; i = (i + 1) & (KEEP_CAP - 1), k++)
    if (!kept[i].p || kept[i].p == TOMB) {
      kept[i] = (Kept){p, size, caller};
      n_live++;
      break;
    }
  give();
}

static void forget(void *p) {
  if (!p || !kept) return;
  take();
  for (size_t i = slot_of(p), k = 0; k < KEEP_CAP && kept[i].p; i = (i + 1) & (KEEP_CAP - 1), k++)
    if (kept[i].p == p) {
      kept[i].p = TOMB;
      n_live--;
      break;
    }
  give();
}

/* ---- the interface ---- */

void failalloc_arm(long n) {
  resolve();
  if (!loader_hi) dl_iterate_phdr(find_loader, NULL);
  if (!kept) kept = real_calloc(KEEP_CAP, sizeof *kept);
  else memset(kept, 0, sizeof *kept * KEEP_CAP);
  n_live = 0;
  atomic_store(&counted, 0);
  atomic_store(&target, n);
  atomic_store(&failed, false);
  atomic_store(&paused, false);
  arena_set_fail_hook(arena_tick);
  atomic_store(&armed, true);
}

long failalloc_disarm(void) {
  atomic_store(&armed, false);
  arena_set_fail_hook(NULL);
  return atomic_load(&counted);
}

bool failalloc_failed(void) { return atomic_load(&failed); }
void failalloc_pause(void) { atomic_store(&paused, true); }
void failalloc_resume(void) { atomic_store(&paused, false); }

long failalloc_live(char *one, size_t len) {
  one[0] = 0;
  long live = 0;
  for (size_t i = 0; kept && n_live && i < KEEP_CAP; i++) {
    if (!kept[i].p || kept[i].p == TOMB) continue;
    if (live++) continue;
    Dl_info di;
    bool known = dladdr(kept[i].caller, &di) && di.dli_fname;
    if (known)
      snprintf(one, len, "%zu bytes from %s+%#lx", kept[i].size, di.dli_fname,
               (unsigned long)((char *)kept[i].caller - (char *)di.dli_fbase));
    else
      snprintf(one, len, "%zu bytes from %p", kept[i].size, kept[i].caller);
  }
  return live;
}

/* ---- the interposed functions ---- */

void *malloc(size_t n) {
  if (!resolve()) return boot_alloc(n);
  if (tick(__builtin_return_address(0))) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = real_malloc(n);
  keep(p, n, __builtin_return_address(0));
  return p;
}

void *calloc(size_t n, size_t size) {
  if (!resolve()) return n && size > SIZE_MAX / n ? NULL : boot_alloc(n * size);
  if (tick(__builtin_return_address(0))) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = real_calloc(n, size);
  keep(p, n * size, __builtin_return_address(0));
  return p;
}

void free(void *p) {
  if (!p || from_boot(p)) return;
  forget(p);
  if (resolve()) real_free(p);
}

void *realloc(void *p, size_t n) {
  if (!p) return malloc(n);
  if (from_boot(p)) {
    /* The old size is unknown; the pool's end bounds the copy. */
    size_t room = (size_t)(boot + sizeof boot - (unsigned char *)p);
    void *q = malloc(n);
    if (q) memcpy(q, p, n < room ? n : room);
    return q;
  }
  if (!resolve()) return NULL;
  if (tick(__builtin_return_address(0))) {
    errno = ENOMEM;
    return NULL;
  }
  void *q = real_realloc(p, n);
  if (q || n == 0) forget(p);
  keep(q, n, __builtin_return_address(0));
  return q;
}

void *reallocarray(void *p, size_t n, size_t size) {
  if (n && size > SIZE_MAX / n) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(p, n * size);
}

int posix_memalign(void **out, size_t align, size_t n) {
  if (!resolve()) return ENOMEM;
  if (tick(__builtin_return_address(0))) return ENOMEM;
  int rc = real_posix_memalign(out, align, n);
  if (rc == 0) keep(*out, n, __builtin_return_address(0));
  return rc;
}

void *aligned_alloc(size_t align, size_t n) {
  if (!resolve()) return NULL;
  if (tick(__builtin_return_address(0))) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = real_aligned_alloc(align, n);
  keep(p, n, __builtin_return_address(0));
  return p;
}

void *memalign(size_t align, size_t n) {
  if (!resolve()) return NULL;
  if (tick(__builtin_return_address(0))) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = real_memalign(align, n);
  keep(p, n, __builtin_return_address(0));
  return p;
}

/* ASan replaces these with its own allocation, past the functions above:
 * one allocation each, through them. */
char *strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

char *strndup(const char *s, size_t max) {
  size_t n = strnlen(s, max);
  char *p = malloc(n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = 0;
  }
  return p;
}

/* The emu device: runs a plan's CUDA C on the CPU.  Takes the plan's
 * source, compiles it with the host C++ compiler and emu/dlcc_emu.h into
 * a shared object (cached on disk by a hash of everything that goes into
 * it), dlopens it and calls each kernel's NAME__emu launcher once per
 * thread.  Device memory is host memory, so RtDevPtr is a host pointer.
 *
 * Threads of a block run one after another when the plan says the kernel
 * has no barriers.  Otherwise each thread is a fiber (emu_fiber.h) that runs
 * until it reaches __syncthreads or a warp operation, where it yields to
 * the scheduler; a barrier releases its threads once all it waits for
 * have arrived.  What CUDA leaves undefined and a GPU would hang or
 * silently get wrong (a thread exiting while others wait, threads waiting
 * at different barriers, a barrier in a kernel the plan calls
 * barrier-free, lanes of a warp at different warp-collective
 * instructions) is reported as an error naming the kernel, block and
 * thread.  The tensor-core instructions' warp collectives (mma, ldmatrix)
 * and each thread's queue of cp.async copies live here too; their
 * arithmetic is the header's. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "emu/dlcc_emu.h"
#include "emu_fiber.h"
#include "runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
/* ThreadSanitizer follows a thread's stack and its happens-before clock;
 * a fiber switch it is not told about looks to it like one thread's stack
 * jumping about, so each fiber is a TSan fiber too (tests/tsan.mk builds
 * the runtime this way). */
#if defined(__SANITIZE_THREAD__)
#define EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EMU_TSAN 1
#endif
#endif
#ifdef EMU_TSAN
#include <sanitizer/tsan_interface.h>
#endif

extern char **environ;

enum {
  FIBER_STACK = 64 * 1024,
  MAX_BLOCK_THREADS = 1024,
  MAX_CXX_WORDS = 32,
  DIR_MAX = PATH_MAX - 256,    /* the cache directory; file names under it fit in PATH_MAX */
  MAX_DYN_SHARED = 227 * 1024, /* the most shared memory a block can have (sm_90) */
  MAX_DYN_NAMES = 16,
  MAX_CP_PENDING = 4096, /* cp.async copies one thread may have in flight */
  MAX_WG_PENDING = 1024, /* wgmma operations one thread may have in flight */
  WG_ARG_BYTES = 64,     /* what one carries (the header's __DlccWgOp) */
  /* The modelled GPU (sm_90, an H200) for cooperative launches: a grid
   * must fit on it at once, as cuLaunchCooperativeKernel demands. */
  GPU_SMS = 132,
  SM_THREADS = 2048,
  SM_BLOCKS = 32,
  SM_SHARED = 228 * 1024,
  /* A chain's blocks walk the launch's (RT_COOP_STRIDE), so it runs the
   * same on any grid: here on this few, each block walking several
   * (what a GPU's resident blocks do on a large launch), with fewer
   * fibers at once than a grid the size of the GPU. */
  EMU_STRIDE_BLOCKS = 4,
};

/* The compiler line after the compiler itself; the output and input
 * files follow.  Part of the cache key. */
static const char *const cxx_flags[] = {
    "-x", "c++", "-std=c++17", "-O1", "-fPIC", "-shared", "-fno-strict-aliasing", "-DDLCC_EMU",
};

typedef enum { F_READY, F_WAIT_BLOCK, F_WAIT_WARP, F_WAIT_GRID, F_DONE } FiberState;

/* Fiber.xkind beyond the header's DLCC_EMU_WARP_* */
enum { XK_SYNCWARP = -1, XK_COLLECTIVE = -2 };

typedef struct CpCopy {
  void *dst;
  const void *src;
  unsigned size, src_bytes, group; /* group 0: not committed yet */
} CpCopy;

/* One wgmma.mma_async of one thread, waiting for the dl_wgmma_wait that
 * retires its group: the header's function and a copy of its operands. */
typedef struct WgOp {
  void (*run)(const void *arg);
  unsigned group; /* 0: not committed yet */
  _Alignas(16) unsigned char arg[WG_ARG_BYTES];
} WgOp;

/* One thread's wgmma operations not yet complete, in the order issued
 * (committed groups numbered 1, 2, ... before the uncommitted), and
 * whether it has fenced since its last commit. */
typedef struct WgQueue {
  WgOp *ops;
  unsigned n, cap, groups;
  bool fenced;
} WgQueue;

/* One thread's cp.async copies not yet complete, in the order issued, so
 * that committed ones (groups numbered 1, 2, ... in commit order) come
 * before the uncommitted. */
typedef struct CpQueue {
  CpCopy *copies;
  unsigned n, cap, groups;
} CpQueue;

typedef struct Fiber {
  EmuContext ctx;
  char *map; /* guard page, then the stack */
  DlccEmuDim3 tid;
  unsigned linear;
  FiberState state;
  unsigned wait_mask; /* lanes the warp operation it waits at needs */
  /* The warp operation it waits at; the releasing thread computes every
   * participant's result, so no value can be overwritten before it is read. */
  int xkind, xsrc;
  uint64_t xval, xres;
  /* The warp-collective instruction it waits at (xkind XK_COLLECTIVE):
   * the op and this lane's operands and result slots, on its stack. */
  const DlccEmuCollective *xop;
  const void *xin;
  void *xout;
  CpQueue cp;
  WgQueue wg;
#ifdef EMU_TSAN
  void *tsan;
#endif
} Fiber;

typedef struct EmuDevice EmuDevice;

typedef struct Sched {
  EmuDevice *dev;
  Fiber *fibers;
  unsigned cap, n; /* fibers allocated; threads in the block */
  unsigned cur, n_done, n_block_wait, first_done;
  unsigned n_grid_wait; /* threads of the running block at the grid barrier (cooperative) */
  bool fibered, failed, dirty;
  bool fast_switch; /* emu_fiber.h's fast path, not swapcontext */
  CpQueue serial_cp; /* the running thread's, when not fibered */
  EmuContext main_ctx;
  jmp_buf fast_exit;
  DlccEmuEnv env;
  void (*launcher)(void **);
  void **args;
  const char *kernel;
#ifdef EMU_ASAN
  const void *main_bottom;
  size_t main_size;
  void *main_fake;
#endif
#ifdef EMU_TSAN
  void *tsan_main; /* the thread that runs the block */
#endif
} Sched;

struct EmuDevice {
  RtDevice base;
  char *cxx_text, *extra_text;    /* what the words below point into */
  char *cxx_words[MAX_CXX_WORDS]; /* the compiler: DLCC_EMU_CXX split at blanks */
  int n_cxx_words;
  char *extra_words[MAX_CXX_WORDS]; /* DLCC_EMU_CXXFLAGS: e.g. -fsanitize=address */
  int n_extra_words;
  char cxx_path[PATH_MAX]; /* cxx_words[0] found on PATH */
  char header[PATH_MAX];
  char *header_text;
  unsigned compiles;
  Sched sched;
  RtGraph *capturing; /* between capture_begin and capture_end */
  int side;           /* use_stream's, during a capture */
  double *clock;      /* the step clock's points, host seconds */
  uint32_t n_clock;
};

typedef struct EmuKernel {
  char *name;
  void (*launcher)(void **);
  bool uses_barriers, cooperative;
  bool grid_stride; /* RT_COOP_STRIDE: any grid up to the launch's */
  uint32_t static_shared_bytes;
} EmuKernel;

struct RtModule {
  void *dl;
  void (*set_env)(DlccEmuEnv *);
  void (*tls_range)(uintptr_t *lo, uintptr_t *hi);
  uint32_t n;
  EmuKernel *kernels;
};

static const RtDeviceOps emu_ops;

/* ---- the scheduler ---------------------------------------------------- */

static _Thread_local Sched *emu_running;

static unsigned warp_lanes(const Sched *s, unsigned linear) {
  unsigned base = linear & ~31u, count = s->n - base;
  return count >= 32 ? 0xffffffffu : (1u << count) - 1u;
}

static void fiber_yield(Sched *s, Fiber *f, bool exiting) {
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(exiting ? NULL : &s->main_fake, s->main_bottom, s->main_size);
#else
  (void)exiting;
#endif
#ifdef EMU_TSAN
  __tsan_switch_to_fiber(s->tsan_main, 0);
#endif
  emu_fiber_switch(&f->ctx, &s->main_ctx);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(s->main_fake, &s->main_bottom, &s->main_size);
#endif
}

/* Ends the launch from inside a thread, naming thread t: records the
 * message and never comes back (the scheduler abandons the block's
 * fibers). */
static void thread_failv(Sched *s, const DlccEmuDim3 *t, const char *fmt, va_list ap) {
  char what[600];
  vsnprintf(what, sizeof what, fmt, ap);
  if (!s->failed) {
    const DlccEmuDim3 *b = &s->env.block_idx;
    rt_device_fail(&s->dev->base, "emu: kernel %s, block (%u,%u,%u), thread (%u,%u,%u): %s", s->kernel, b->x, b->y,
                   b->z, t->x, t->y, t->z, what);
  }
  s->failed = true;
  if (!s->fibered) longjmp(s->fast_exit, 1);
  s->dirty = true;
  fiber_yield(s, &s->fibers[s->cur], false);
}

/* The running thread's fault. */
static void thread_fail(Sched *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void thread_fail(Sched *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  thread_failv(s, &s->env.thread_idx, fmt, ap);
  va_end(ap);
}

/* Another thread's, found by the running one (a warp operation's operands). */
static void thread_fail_at(Sched *s, const Fiber *who, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void thread_fail_at(Sched *s, const Fiber *who, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  thread_failv(s, &who->tid, fmt, ap);
  va_end(ap);
}

static void tid_text(const Fiber *f, char *buf, size_t len) {
  snprintf(buf, len, "(%u,%u,%u)", f->tid.x, f->tid.y, f->tid.z);
}

/* The warp operation f waits at, for messages. */
static const char *waits_at(const Fiber *f, char *buf, size_t len) {
  if (f->xkind != XK_COLLECTIVE) return "a warp shuffle or __syncwarp";
  snprintf(buf, len, "%s at line %u", f->xop->name, f->xop->line);
  return buf;
}

static bool same_collective(const DlccEmuCollective *a, const DlccEmuCollective *b) {
  return a->run == b->run && a->line == b->line && !strcmp(a->name, b->name);
}

/* Called by the last lane to arrive at a warp-collective instruction:
 * the op computes every lane's results from every lane's operands. */
static void collective_release(Sched *s, unsigned base) {
  const DlccEmuCollective *op = s->fibers[base].xop;
  const void *in[32];
  void *out[32];
  for (unsigned l = 0; l < 32; l++) in[l] = s->fibers[base + l].xin, out[l] = s->fibers[base + l].xout;
  char why[300] = "";
  int bad = op->run(in, out, why, sizeof why);
  if (bad >= 0 && bad < 32)
    thread_fail_at(s, &s->fibers[base + (unsigned)bad], "%s at line %u: %s", op->name, op->line, why);
  for (unsigned l = 0; l < 32; l++) s->fibers[base + l].state = F_READY;
}

/* Called by the last thread to arrive: computes the result of every
 * thread of the warp operation and makes them runnable. */
static void warp_release(Sched *s, unsigned base, unsigned waiting) {
  for (unsigned l = 0; l < 32; l++) {
    if (!(waiting >> l & 1u)) continue;
    Fiber *g = &s->fibers[base + l];
    uint64_t r = g->xval;
    if (g->xkind == DLCC_EMU_WARP_SHFL) {
      if (g->xsrc >= 0 && g->xsrc < 32 && (waiting >> g->xsrc & 1u)) r = s->fibers[base + (unsigned)g->xsrc].xval;
    } else if (g->xkind == DLCC_EMU_WARP_BALLOT || g->xkind == DLCC_EMU_WARP_ALL) {
      uint64_t ballot = 0;
      for (unsigned k = 0; k < 32; k++)
        if ((waiting >> k & 1u) && s->fibers[base + k].xval) ballot |= 1u << k;
      r = g->xkind == DLCC_EMU_WARP_BALLOT ? ballot : ballot == waiting;
    }
    g->xres = r;
    g->state = F_READY;
  }
}

/* The warp barrier under every shuffle, vote, __syncwarp and warp-
 * collective instruction.  A shuffle waits for the lanes of its mask (those
 * that exist) and of every other waiting shuffle's mask; a collective for
 * all 32 lanes at the same collective.  Lanes that wait for each other at
 * different operations would hang the GPU: that is an error. */
static void warp_wait(Sched *s, unsigned mask) {
  Fiber *f = &s->fibers[s->cur];
  unsigned base = f->linear & ~31u, exist = warp_lanes(s, f->linear);
  f->state = F_WAIT_WARP;
  f->wait_mask = (mask | 1u << (f->linear & 31u)) & exist;
  unsigned needed = 0, waiting = 0, coll = 0;
  const Fiber *some_coll = NULL, *some_shfl = NULL;
  for (unsigned l = 0; l < 32; l++) {
    if (!(exist >> l & 1u)) continue;
    Fiber *g = &s->fibers[base + l];
    if (g->state != F_WAIT_WARP) continue;
    if (g->xkind == XK_COLLECTIVE) {
      coll |= 1u << l;
      if (!some_coll || g == f) some_coll = g;
    } else {
      needed |= g->wait_mask, waiting |= 1u << l;
      if (!some_shfl || g == f) some_shfl = g;
    }
  }
  char at[160], at2[160], t[48];
  for (unsigned l = 0; l < 32; l++) {
    if (s->fibers[base + l].state != F_DONE) continue;
    const Fiber *who = needed >> l & 1u ? some_shfl : coll ? some_coll : NULL;
    if (!who) continue;
    tid_text(&s->fibers[base + l], t, sizeof t);
    thread_fail_at(s, who, "waits at %s for thread %s of its warp, which has exited", waits_at(who, at, sizeof at), t);
  }
  /* A lane at another collective, or at a collective while a shuffle
   * waits for it: neither can ever move on. */
  for (unsigned l = 0; l < 32; l++) {
    if (!(coll >> l & 1u)) continue;
    const Fiber *g = &s->fibers[base + l], *other = NULL;
    if (!same_collective(g->xop, some_coll->xop))
      other = some_coll;
    else if (needed >> l & 1u)
      other = some_shfl;
    if (!other) continue;
    tid_text(g, t, sizeof t);
    thread_fail_at(s, other,
                   "waits at %s while thread %s of its warp waits at %s: the lanes of a warp must reach a "
                   "warp-collective instruction together (.sync.aligned)",
                   waits_at(other, at, sizeof at), t, waits_at(g, at2, sizeof at2));
  }
  if (waiting && !(needed & ~waiting)) warp_release(s, base, waiting);
  if (coll && coll == exist) collective_release(s, base);
  fiber_yield(s, f, false);
}

static void hook_syncthreads(DlccEmuEnv *e) {
  Sched *s = e->sched;
  Fiber *f = &s->fibers[s->cur];
  if (s->n_done) {
    char t[48];
    tid_text(&s->fibers[s->first_done], t, sizeof t);
    thread_fail(s, "thread %s exited while others wait at __syncthreads (undefined in CUDA)", t);
  }
  if (s->n_grid_wait) thread_fail(s, "waits at __syncthreads while others of its block wait at the grid barrier");
  f->state = F_WAIT_BLOCK;
  if (++s->n_block_wait == s->n) {
    for (unsigned i = 0; i < s->n; i++) s->fibers[i].state = F_READY;
    s->n_block_wait = 0;
  }
  fiber_yield(s, f, false);
}

/* The block's scheduler stops once all its threads are here (or have
 * exited, which run_grid_cooperative reports); the grid's releases them. */
static void hook_grid_sync(DlccEmuEnv *e) {
  Sched *s = e->sched;
  Fiber *f = &s->fibers[s->cur];
  if (s->n_block_wait) thread_fail(s, "waits at the grid barrier while others of its block wait at __syncthreads");
  f->state = F_WAIT_GRID;
  s->n_grid_wait++;
  fiber_yield(s, f, false);
}

static void nocoop_grid_sync(DlccEmuEnv *e) {
  Sched *s = e->sched;
  thread_fail(s, "kernel %s uses the grid barrier but the plan says it is not cooperative", s->kernel);
}

static void hook_syncwarp(DlccEmuEnv *e, unsigned mask) {
  Sched *s = e->sched;
  Fiber *f = &s->fibers[s->cur];
  f->xkind = XK_SYNCWARP, f->xsrc = -1, f->xval = 0;
  warp_wait(s, mask);
}

static uint64_t hook_warp_exchange(DlccEmuEnv *e, unsigned mask, uint64_t value, int src, int kind) {
  Sched *s = e->sched;
  Fiber *f = &s->fibers[s->cur];
  f->xkind = kind, f->xsrc = src, f->xval = value;
  warp_wait(s, mask);
  return s->fibers[s->cur].xres;
}

static void hook_trap(DlccEmuEnv *e, const char *what) { thread_fail(e->sched, "%s", what); }

static void hook_warp_collective(DlccEmuEnv *e, const DlccEmuCollective *op, const void *in, void *out) {
  Sched *s = e->sched;
  Fiber *f = &s->fibers[s->cur];
  unsigned exist = warp_lanes(s, f->linear);
  if (exist != 0xffffffffu)
    thread_fail(s, "%s at line %u needs all 32 lanes of a warp, but this thread's warp has %d (a block of %u threads)",
                op->name, op->line, __builtin_popcount(exist), s->n);
  f->xkind = XK_COLLECTIVE, f->xop = op, f->xin = in, f->xout = out;
  warp_wait(s, 0xffffffffu);
}

/* ---- cp.async: each thread's copies wait in its queue until the
 * dl_cp_async_wait that retires their group ---- */

static CpQueue *cp_queue(Sched *s) { return s->fibered ? &s->fibers[s->cur].cp : &s->serial_cp; }

static void hook_cp_async(DlccEmuEnv *e, void *dst, const void *src, unsigned size, unsigned src_bytes) {
  Sched *s = e->sched;
  CpQueue *q = cp_queue(s);
  if (q->n == MAX_CP_PENDING)
    thread_fail(s, "%u cp.async copies in flight: a dl_cp_async_commit or dl_cp_async_wait is missing",
                (unsigned)MAX_CP_PENDING);
  if (q->n == q->cap) {
    unsigned cap = q->cap ? 2 * q->cap : 32;
    CpCopy *c = realloc(q->copies, sizeof *c * cap);
    if (!c) thread_fail(s, "out of host memory for cp.async copies");
    q->copies = c, q->cap = cap;
  }
  q->copies[q->n++] = (CpCopy){dst, src, size, src_bytes, 0};
}

static void hook_cp_async_commit(DlccEmuEnv *e) {
  CpQueue *q = cp_queue(e->sched);
  q->groups++; /* an empty group too, as in PTX */
  for (unsigned i = q->n; i-- && !q->copies[i].group;) q->copies[i].group = q->groups;
}

/* Completes groups 1 .. groups - n: a prefix of the queue. */
static void hook_cp_async_wait(DlccEmuEnv *e, unsigned n) {
  CpQueue *q = cp_queue(e->sched);
  if (q->groups <= n) return;
  unsigned last = q->groups - n, done = 0;
  for (; done < q->n && q->copies[done].group && q->copies[done].group <= last; done++) {
    const CpCopy *c = &q->copies[done];
    if (c->src_bytes) memcpy(c->dst, c->src, c->src_bytes); /* src may be NULL with 0 bytes */
    memset((char *)c->dst + c->src_bytes, 0, c->size - c->src_bytes);
  }
  if (done) {
    q->n -= done;
    memmove(q->copies, q->copies + done, sizeof *q->copies * q->n);
  }
}

/* ---- wgmma (sm_90a): each thread's operations wait in its queue until
 * the dl_wgmma_wait that retires their group; the header's run computes
 * the thread's own accumulators then, from shared memory as it is then,
 * as the hardware may read it any time before that wait. ---- */

static void hook_wg_fence(DlccEmuEnv *e) {
  Sched *s = e->sched;
  s->fibers[s->cur].wg.fenced = true;
}

static void hook_wg_op(DlccEmuEnv *e, void (*run)(const void *), const void *arg, unsigned size, const char *name,
                       unsigned line) {
  Sched *s = e->sched;
  WgQueue *q = &s->fibers[s->cur].wg;
  /* The ISA asks for wgmma.fence before the first wgmma.mma_async and
   * after any other access to its registers; dlcc's rule is stricter and
   * simple to check: every group opens with a fence. */
  if (!q->fenced)
    thread_fail(s, "%s at line %u: no dl_wgmma_fence since the last dl_wgmma_commit (wgmma.fence must come before "
                   "a group's first wgmma.mma_async)",
                name, line);
  if (size > WG_ARG_BYTES) thread_fail(s, "%s at line %u: %u bytes of operands, more than %u", name, line, size,
                                       (unsigned)WG_ARG_BYTES);
  if (q->n == MAX_WG_PENDING)
    thread_fail(s, "%u wgmma operations in flight: a dl_wgmma_commit or dl_wgmma_wait is missing",
                (unsigned)MAX_WG_PENDING);
  if (q->n == q->cap) {
    unsigned cap = q->cap ? 2 * q->cap : 16;
    WgOp *o = realloc(q->ops, sizeof *o * cap);
    if (!o) thread_fail(s, "out of host memory for wgmma operations");
    q->ops = o, q->cap = cap;
  }
  WgOp *o = &q->ops[q->n++];
  o->run = run, o->group = 0;
  memcpy(o->arg, arg, size);
}

static void hook_wg_commit(DlccEmuEnv *e) {
  Sched *s = e->sched;
  WgQueue *q = &s->fibers[s->cur].wg;
  q->groups++; /* an empty group too */
  for (unsigned i = q->n; i-- && !q->ops[i].group;) q->ops[i].group = q->groups;
  q->fenced = false;
}

/* Runs groups 1 .. groups - n, oldest first: a prefix of the queue.  An
 * op that fails never returns, so the queue is trimmed before each. */
static void hook_wg_wait(DlccEmuEnv *e, unsigned n) {
  Sched *s = e->sched;
  WgQueue *q = &s->fibers[s->cur].wg;
  if (q->groups <= n) return;
  unsigned last = q->groups - n;
  while (q->n && q->ops[0].group && q->ops[0].group <= last) {
    WgOp op = q->ops[0];
    q->n--;
    memmove(q->ops, q->ops + 1, sizeof *q->ops * q->n);
    op.run(op.arg);
  }
}

/* The hooks of a kernel the plan calls barrier-free: running its threads
 * one after another would make every barrier wrong, so say so. */
static void nobar_syncthreads(DlccEmuEnv *e) {
  Sched *s = e->sched;
  thread_fail(s, "kernel %s uses __syncthreads but the plan says it has no barriers", s->kernel);
}

static void nobar_syncwarp(DlccEmuEnv *e, unsigned mask) {
  Sched *s = e->sched;
  thread_fail(s, "kernel %s uses __syncwarp but the plan says it has no barriers", s->kernel);
}

static uint64_t nobar_warp_exchange(DlccEmuEnv *e, unsigned mask, uint64_t value, int src, int kind) {
  Sched *s = e->sched;
  thread_fail(s, "kernel %s uses a warp shuffle or vote but the plan says it has no barriers", s->kernel);
  return value;
}

static void nobar_warp_collective(DlccEmuEnv *e, const DlccEmuCollective *op, const void *in, void *out) {
  Sched *s = e->sched;
  thread_fail(s, "kernel %s uses %s (line %u) but the plan says it has no barriers", s->kernel, op->name, op->line);
}

static void nobar_wg_fence(DlccEmuEnv *e) {
  Sched *s = e->sched;
  thread_fail(s, "kernel %s uses wgmma but the plan says it has no barriers", s->kernel);
}

static void nobar_wg_op(DlccEmuEnv *e, void (*run)(const void *), const void *arg, unsigned size, const char *name,
                        unsigned line) {
  (void)run, (void)arg, (void)size;
  Sched *s = e->sched;
  thread_fail(s, "kernel %s uses %s (line %u) but the plan says it has no barriers", s->kernel, name, line);
}

static void nobar_wg_wait(DlccEmuEnv *e, unsigned n) {
  (void)n;
  nobar_wg_fence(e);
}

static void fiber_entry(void) {
  Sched *s = emu_running;
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(NULL, &s->main_bottom, &s->main_size);
#endif
  s->launcher(s->args);
  Fiber *f = &s->fibers[s->cur];
  f->state = F_DONE;
  if (!s->n_done++) s->first_done = f->linear;
  if (s->n_block_wait) thread_fail(s, "exited while others wait at __syncthreads (undefined in CUDA)");
  /* Its accumulators would be lost: a wait is missing. */
  if (f->wg.n) thread_fail(s, "exited with %u wgmma operations no dl_wgmma_wait completed", f->wg.n);
  unsigned base = f->linear & ~31u, exist = warp_lanes(s, f->linear);
  for (unsigned l = 0; l < 32; l++) {
    Fiber *g = &s->fibers[base + l];
    char at[160];
    if ((exist >> l & 1u) && g->state == F_WAIT_WARP && (g->wait_mask >> (f->linear & 31u) & 1u))
      thread_fail(s, "exited while others of its warp wait for it at %s", waits_at(g, at, sizeof at));
  }
  fiber_yield(s, f, true);
}

/* Unmaps a fiber's stack.  Its threads' frames left their redzones
 * poisoned, and ASan keeps shadow across munmap: whatever the address
 * space next holds there (NVRTC's buffers, in test_tcgemm) would read as
 * a stack overflow. */
static void unmap_stack(char *map, size_t page) {
#ifdef EMU_ASAN
  __asan_unpoison_memory_region(map, FIBER_STACK + page);
#endif
  munmap(map, FIBER_STACK + page);
}

static int grow_fibers(Sched *s, unsigned n) {
  if (n <= s->cap) return 0;
  Fiber *nf = realloc(s->fibers, sizeof *nf * n);
  if (!nf) return rt_device_fail(&s->dev->base, "emu: out of host memory for %u fibers", n);
  s->fibers = nf;
  /* getcontext points a context into itself (glibc's saved FPU state),
   * so one that realloc moved would restore that state from the freed
   * block: each moved fiber takes a fresh one. */
  for (unsigned i = 0; i < s->cap; i++)
    if (emu_fiber_init(&nf[i].ctx, s->fast_switch))
      return rt_device_fail(&s->dev->base, "emu: getcontext: %s", strerror(errno));
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (unsigned i = s->cap; i < n; i++) {
    Fiber *f = &s->fibers[i];
    memset(f, 0, sizeof *f);
    /* Stacks are reserved, not committed: a block of 1024 threads touches
     * a few pages of each.  The guard page turns an overflow into a crash
     * at the right place instead of a corrupted neighbour. */
    f->map = mmap(NULL, FIBER_STACK + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (f->map == MAP_FAILED || mprotect(f->map, page, PROT_NONE) || emu_fiber_init(&f->ctx, s->fast_switch)) {
      if (f->map != MAP_FAILED) unmap_stack(f->map, page);
      s->cap = i;
      return rt_device_fail(&s->dev->base, "emu: cannot map fiber stacks: %s", strerror(errno));
    }
#ifdef EMU_TSAN
    f->tsan = __tsan_create_fiber(0);
#endif
    s->cap = i + 1;
  }
  return 0;
}

/* Makes the running block's fibers (s->fibers[0 .. n)) fresh threads. */
static void block_start(Sched *s) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (unsigned i = 0; i < s->n; i++) {
    Fiber *f = &s->fibers[i];
#ifdef EMU_ASAN
    /* A fiber abandoned mid-kernel left its frames' redzones poisoned. */
    if (s->dirty) __asan_unpoison_memory_region(f->map + page, FIBER_STACK);
#endif
    emu_fiber_make(&f->ctx, f->map + page, FIBER_STACK, fiber_entry);
    f->state = F_READY;
    f->cp.n = f->cp.groups = 0; /* copies a thread never waited for die with its block */
    f->wg.n = f->wg.groups = 0, f->wg.fenced = false;
  }
  s->dirty = false;
  s->n_done = s->n_block_wait = s->n_grid_wait = 0;
}

/* Runs the block until every thread has exited or waits at the grid
 * barrier. */
static int block_run(Sched *s) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  (void)page; /* the sanitizers' fiber switches use it */
  unsigned next = 0;
  while (s->n_done + s->n_grid_wait < s->n) {
    unsigned i = 0, tries;
    for (tries = 0; tries < s->n; tries++) {
      i = (next + tries) % s->n;
      if (s->fibers[i].state == F_READY) break;
    }
    if (tries == s->n) {
      unsigned at_block = 0, at_warp = 0;
      char at[200] = "", op[160];
      for (unsigned k = 0; k < s->n; k++) {
        const Fiber *g = &s->fibers[k];
        at_block += g->state == F_WAIT_BLOCK;
        at_warp += g->state == F_WAIT_WARP;
        if (!*at && g->state == F_WAIT_WARP && g->xkind == XK_COLLECTIVE)
          snprintf(at, sizeof at, " (%s among them)", waits_at(g, op, sizeof op));
      }
      const DlccEmuDim3 *b = &s->env.block_idx;
      s->dirty = true;
      return rt_device_fail(&s->dev->base,
                            "emu: kernel %s, block (%u,%u,%u): deadlock: %u threads wait at __syncthreads, %u at warp "
                            "operations%s, %u have exited",
                            s->kernel, b->x, b->y, b->z, at_block, at_warp, at, s->n_done);
    }
    Fiber *f = &s->fibers[i];
    s->cur = i;
    s->env.thread_idx = f->tid;
    s->env.lane = f->linear & 31u;
    s->env.warp_lanes = warp_lanes(s, f->linear);
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&s->main_fake, f->map + page, FIBER_STACK);
#endif
#ifdef EMU_TSAN
    s->tsan_main = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(f->tsan, 0);
#endif
    emu_fiber_switch(&s->main_ctx, &f->ctx);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(s->main_fake, NULL, NULL);
#endif
    if (s->failed) return -1;
    next = i + 1;
  }
  return 0;
}

/* The fast path: threads one after another, each to completion. */
static int run_grid_serial(Sched *s, const uint32_t grid[3]) {
  if (setjmp(s->fast_exit)) return -1;
  DlccEmuEnv *e = &s->env;
  for (unsigned bz = 0; bz < grid[2]; bz++)
    for (unsigned by = 0; by < grid[1]; by++)
      for (unsigned bx = 0; bx < grid[0]; bx++) {
        e->block_idx = (DlccEmuDim3){bx, by, bz};
        unsigned linear = 0;
        for (unsigned tz = 0; tz < e->block_dim.z; tz++)
          for (unsigned ty = 0; ty < e->block_dim.y; ty++)
            for (unsigned tx = 0; tx < e->block_dim.x; tx++, linear++) {
              e->thread_idx = (DlccEmuDim3){tx, ty, tz};
              e->lane = linear & 31u;
              e->warp_lanes = warp_lanes(s, linear);
              s->serial_cp.n = s->serial_cp.groups = 0;
              s->launcher(s->args);
            }
      }
  return 0;
}

static int run_grid_fibered(Sched *s, const uint32_t grid[3]) {
  if (grow_fibers(s, s->n)) return -1;
  unsigned linear = 0;
  for (unsigned tz = 0; tz < s->env.block_dim.z; tz++)
    for (unsigned ty = 0; ty < s->env.block_dim.y; ty++)
      for (unsigned tx = 0; tx < s->env.block_dim.x; tx++, linear++) {
        s->fibers[linear].tid = (DlccEmuDim3){tx, ty, tz};
        s->fibers[linear].linear = linear;
      }
  for (unsigned bz = 0; bz < grid[2]; bz++)
    for (unsigned by = 0; by < grid[1]; by++)
      for (unsigned bx = 0; bx < grid[0]; bx++) {
        s->env.block_idx = (DlccEmuDim3){bx, by, bz};
        block_start(s);
        if (block_run(s)) return -1;
      }
  return 0;
}

/* Where block b of a cooperative grid stands between its turns. */
typedef struct CoopBlock {
  unsigned n_done, first_done, n_grid_wait;
} CoopBlock;

/* A cooperative grid: every block's threads are fibers at once
 * (s->fibers[b * n ..]); each block runs in turn until all its threads
 * wait at the grid barrier, and once every block's do, all go on.  The
 * module's thread-local block, where __shared__ lives, is swapped with
 * the block's own copy around its turn, so shared memory is per block as
 * on the GPU.  Blocks are resident together, so a block that exits while
 * others wait at the barrier is CUDA's undefined hang: an error here. */
static int run_grid_cooperative(Sched *s, RtModule *m, const uint32_t grid[3]) {
  unsigned n = s->n, blocks = grid[0] * grid[1] * grid[2];
  if (grow_fibers(s, blocks * n)) return -1;
  uintptr_t lo = 0, hi = 0;
  m->tls_range(&lo, &hi);
  size_t tls = hi - lo;
  char *saved = malloc(tls * blocks + 1);
  CoopBlock *st = calloc(blocks, sizeof *st);
  Fiber *all = s->fibers;
  int rc = 0;
  if (!saved || !st) rc = rt_device_fail(&s->dev->base, "emu: out of host memory for a grid of %u blocks", blocks);
  bool dirty = s->dirty; /* each block's fibers may be one an earlier failed launch abandoned */
  for (unsigned b = 0; b < blocks && !rc; b++) {
    memcpy(saved + tls * b, (void *)lo, tls); /* the env pointer and friends, as they are */
    s->fibers = all + (size_t)b * n;
    s->dirty = dirty;
    unsigned linear = 0;
    for (unsigned tz = 0; tz < s->env.block_dim.z; tz++)
      for (unsigned ty = 0; ty < s->env.block_dim.y; ty++)
        for (unsigned tx = 0; tx < s->env.block_dim.x; tx++, linear++)
          s->fibers[linear].tid = (DlccEmuDim3){tx, ty, tz}, s->fibers[linear].linear = linear;
    block_start(s);
  }
  for (bool more = true; more && !rc;) {
    unsigned waiting = 0, exited = 0;
    for (unsigned b = 0; b < blocks && !rc; b++) {
      if (st[b].n_done == n) continue;
      s->fibers = all + (size_t)b * n;
      s->env.block_idx = (DlccEmuDim3){b % grid[0], b / grid[0] % grid[1], b / grid[0] / grid[1]};
      s->n_done = st[b].n_done, s->first_done = st[b].first_done, s->n_grid_wait = 0, s->n_block_wait = 0;
      memcpy((void *)lo, saved + tls * b, tls);
      rc = block_run(s);
      memcpy(saved + tls * b, (void *)lo, tls);
      st[b] = (CoopBlock){s->n_done, s->first_done, s->n_grid_wait};
    }
    for (unsigned b = 0; b < blocks && !rc; b++) {
      waiting += st[b].n_grid_wait != 0;
      exited += st[b].n_done != 0;
      if (st[b].n_grid_wait && st[b].n_done) {
        s->fibers = all + (size_t)b * n;
        char t[48];
        tid_text(&s->fibers[st[b].first_done], t, sizeof t);
        rc = rt_device_fail(&s->dev->base,
                            "emu: kernel %s, block %u: thread %s exited while others wait at the grid barrier",
                            s->kernel, b, t);
      }
    }
    if (!rc && waiting && exited)
      rc = rt_device_fail(&s->dev->base,
                          "emu: kernel %s: %u blocks exited while %u wait at the grid barrier (a hang on the GPU)",
                          s->kernel, exited, waiting);
    more = waiting != 0;
    for (unsigned i = 0; more && !rc && i < blocks * n; i++)
      if (all[i].state == F_WAIT_GRID) all[i].state = F_READY;
  }
  if (rc) s->dirty = true;
  if (saved) memcpy((void *)lo, saved, tls); /* the launching thread's own values back */
  s->fibers = all;
  free(saved);
  free(st);
  return rc;
}

/* The blocks of a cooperative launch the modelled GPU holds at once:
 * per SM, as many as its threads, block slots and shared memory allow. */
static uint64_t coop_capacity(const uint32_t block[3], uint32_t shared_bytes) {
  uint64_t threads = (uint64_t)block[0] * block[1] * block[2], per = SM_BLOCKS;
  if (SM_THREADS / threads < per) per = SM_THREADS / threads;
  if (shared_bytes && SM_SHARED / shared_bytes < per) per = SM_SHARED / shared_bytes;
  return per * GPU_SMS;
}

static int record_launch(EmuDevice *e, RtModule *m, const RtLaunch *l, const void *const *arg_values);

static int emu_launch(RtDevice *d, RtModule *m, const RtLaunch *l, const void *const *arg_values) {
  EmuDevice *e = (EmuDevice *)d;
  Sched *s = &e->sched;
  if (d->broken) return -1;
  if (e->capturing) return record_launch(e, m, l, arg_values);
  if (!m || !l) return rt_device_fail(d, "emu: launch without a module or launch");
  if (l->kernel >= m->n) return rt_device_fail(d, "emu: launch of kernel %u, but the module has %u", l->kernel, m->n);
  const EmuKernel *k = &m->kernels[l->kernel];
  uint32_t g[3] = {l->grid[0], l->grid[1], l->grid[2]};
  const uint32_t *b = l->block;
  if (k->grid_stride && g[0] > EMU_STRIDE_BLOCKS) g[0] = EMU_STRIDE_BLOCKS;
  uint64_t threads = (uint64_t)b[0] * b[1] * b[2];
  /* The GPU's limits, so a launch emu accepts also launches on the GPU. */
  if (!b[0] || !b[1] || !b[2] || b[0] > 1024 || b[1] > 1024 || b[2] > 64 || threads > MAX_BLOCK_THREADS)
    return rt_device_fail(d, "emu: kernel %s: block (%u,%u,%u) is not a valid CUDA block (1..1024 threads, z <= 64)",
                          k->name, b[0], b[1], b[2]);
  if (!g[0] || !g[1] || !g[2] || g[0] > 0x7fffffffu || g[1] > 65535 || g[2] > 65535)
    return rt_device_fail(d, "emu: kernel %s: grid (%u,%u,%u) is not a valid CUDA grid", k->name, g[0], g[1], g[2]);
  if (l->dynamic_shared_bytes > MAX_DYN_SHARED)
    return rt_device_fail(d, "emu: kernel %s: %u bytes of dynamic shared memory, more than a block can have (%u)",
                          k->name, l->dynamic_shared_bytes, (unsigned)MAX_DYN_SHARED);
  uint64_t blocks = (uint64_t)g[0] * g[1] * g[2];
  uint32_t shared = k->static_shared_bytes + l->dynamic_shared_bytes;
  if (k->cooperative && blocks > coop_capacity(b, shared))
    return rt_device_fail(d,
                          "emu: kernel %s: a cooperative grid of %llu blocks of %llu threads (%u bytes of shared "
                          "memory) does not fit at once on the modelled GPU (%d SMs: at most %llu)",
                          k->name, (unsigned long long)blocks, (unsigned long long)threads, shared, (int)GPU_SMS,
                          (unsigned long long)coop_capacity(b, shared));
  s->env = (DlccEmuEnv){
      .block_dim = {b[0], b[1], b[2]},
      .grid_dim = {g[0], g[1], g[2]},
      .syncthreads = k->uses_barriers ? hook_syncthreads : nobar_syncthreads,
      .syncwarp = k->uses_barriers ? hook_syncwarp : nobar_syncwarp,
      .warp_exchange = k->uses_barriers ? hook_warp_exchange : nobar_warp_exchange,
      .trap = hook_trap,
      .warp_collective = k->uses_barriers ? hook_warp_collective : nobar_warp_collective,
      .cp_async = hook_cp_async,
      .cp_async_commit = hook_cp_async_commit,
      .cp_async_wait = hook_cp_async_wait,
      .wg_fence = k->uses_barriers ? hook_wg_fence : nobar_wg_fence,
      .wg_op = k->uses_barriers ? hook_wg_op : nobar_wg_op,
      .wg_commit = k->uses_barriers ? hook_wg_commit : nobar_wg_fence,
      .wg_wait = k->uses_barriers ? hook_wg_wait : nobar_wg_wait,
      .grid_sync = k->cooperative ? hook_grid_sync : nocoop_grid_sync,
      .sched = s,
  };
  s->n = (unsigned)threads;
  s->launcher = k->launcher;
  s->args = (void **)arg_values;
  s->kernel = k->name;
  s->failed = false;
  s->fibered = k->uses_barriers;
  Sched *outer = emu_running;
  emu_running = s;
  m->set_env(&s->env);
  int rc = k->cooperative ? run_grid_cooperative(s, m, g)
           : s->fibered   ? run_grid_fibered(s, g)
                          : run_grid_serial(s, g);
  emu_running = outer;
  return rc;
}

/* ---- memory ----------------------------------------------------------- */

static int emu_alloc(RtDevice *d, uint64_t nbytes, RtDevPtr *out) {
  if (d->broken) return -1;
  /* cudaMalloc's 256-byte alignment, so vector loads codegen relies on
   * are aligned here too; 0 bytes still gives a distinct pointer. */
  uint64_t rounded = (nbytes + 255u) & ~(uint64_t)255u;
  void *p = NULL;
  if (nbytes > SIZE_MAX - 256 || posix_memalign(&p, 256, rounded ? rounded : 256))
    return rt_device_fail(d, "emu: out of memory allocating %llu bytes", (unsigned long long)nbytes);
  *out = (RtDevPtr)(uintptr_t)p;
  return 0;
}

static int emu_free(RtDevice *d, RtDevPtr p) {
  free((void *)(uintptr_t)p);
  return 0;
}

static int emu_upload(RtDevice *d, RtDevPtr dst, const void *src, uint64_t nbytes) {
  if (d->broken) return -1;
  if (nbytes) memcpy((void *)(uintptr_t)dst, src, nbytes);
  return 0;
}

static int emu_download(RtDevice *d, void *dst, RtDevPtr src, uint64_t nbytes) {
  if (d->broken) return -1;
  if (nbytes) memcpy(dst, (const void *)(uintptr_t)src, nbytes);
  return 0;
}

typedef enum { NODE_LAUNCH, NODE_GEMM, NODE_COPY, NODE_MEMSET, NODE_MARK, NODE_WAIT } NodeKind;

/* One recorded call, with its argument values as they were then (CUDA
 * copies a kernel's parameters into the graph at capture). */
typedef struct Node {
  NodeKind kind;
  RtModule *mod;
  const RtLaunch *launch; /* the plan's: it outlives every graph of it */
  const RtGemm *gemm;
  uint64_t *values;       /* NODE_LAUNCH: one 8-byte slot per argument */
  const void **argp;      /* argp[i] == &values[i] */
  RtDevPtr p[5];          /* gemm a, b, c, c_in, bias; copy dst, src; memset dst */
  uint64_t nbytes;
  int side;               /* the stream it was queued on: 0 the device's, else a side stream */
  int event;              /* NODE_MARK, NODE_WAIT */
} Node;

struct RtGraph {
  Node *nodes;
  uint32_t n, cap;
  int sides; /* streams used: 1 for a capture on the device's stream alone */
};

static Node *new_node(EmuDevice *e, NodeKind kind) {
  RtGraph *g = e->capturing;
  if (g->n == g->cap) {
    uint32_t cap = g->cap ? 2 * g->cap : 64;
    Node *grown = realloc(g->nodes, sizeof *grown * cap);
    if (!grown) {
      rt_device_fail(&e->base, "emu: out of host memory capturing a graph");
      return NULL;
    }
    g->nodes = grown;
    g->cap = cap;
  }
  Node *n = &g->nodes[g->n++];
  memset(n, 0, sizeof *n);
  n->kind = kind;
  n->side = e->side;
  if (e->side + 1 > g->sides) g->sides = e->side + 1;
  return n;
}

static int record_launch(EmuDevice *e, RtModule *m, const RtLaunch *l, const void *const *arg_values) {
  Node *n = new_node(e, NODE_LAUNCH);
  if (!n) return -1;
  n->mod = m;
  n->launch = l;
  uint32_t k = l->n_args ? l->n_args : 1;
  n->values = calloc(k, sizeof *n->values);
  n->argp = calloc(k, sizeof *n->argp);
  if (!n->values || !n->argp) return rt_device_fail(&e->base, "emu: out of host memory capturing a graph");
  for (uint32_t i = 0; i < l->n_args; i++) {
    uint32_t kind = l->args[i].kind;
    memcpy(&n->values[i], arg_values[i], kind == RT_ARG_I32 || kind == RT_ARG_F32 ? 4 : 8);
    n->argp[i] = &n->values[i];
  }
  return 0;
}

static int emu_copy(RtDevice *d, RtDevPtr dst, RtDevPtr src, uint64_t nbytes) {
  if (d->broken) return -1;
  EmuDevice *e = (EmuDevice *)d;
  if (e->capturing) {
    Node *n = new_node(e, NODE_COPY);
    if (!n) return -1;
    n->p[0] = dst, n->p[1] = src, n->nbytes = nbytes;
    return 0;
  }
  if (nbytes) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, nbytes);
  return 0;
}

static int emu_memset0(RtDevice *d, RtDevPtr dst, uint64_t nbytes) {
  if (d->broken) return -1;
  EmuDevice *e = (EmuDevice *)d;
  if (e->capturing) {
    Node *n = new_node(e, NODE_MEMSET);
    if (!n) return -1;
    n->p[0] = dst, n->nbytes = nbytes;
    return 0;
  }
  if (nbytes) memset((void *)(uintptr_t)dst, 0, nbytes);
  return 0;
}

static int emu_gemm(RtDevice *d, const RtGemm *g, RtDevPtr a, RtDevPtr b, RtDevPtr c, RtDevPtr c_in, RtDevPtr bias) {
  if (d->broken) return -1;
  EmuDevice *e = (EmuDevice *)d;
  if (e->capturing) {
    Node *n = new_node(e, NODE_GEMM);
    if (!n) return -1;
    n->gemm = g;
    n->p[0] = a, n->p[1] = b, n->p[2] = c, n->p[3] = c_in, n->p[4] = bias;
    return 0;
  }
  char err[512];
  if (rt_emu_gemm(g, (const void *)(uintptr_t)a, (const void *)(uintptr_t)b, (void *)(uintptr_t)c,
                  (const void *)(uintptr_t)c_in, (void *)(uintptr_t)bias, err, sizeof err))
    return rt_device_fail(d, "%s", err);
  return 0;
}

static int emu_synchronize(RtDevice *d) { return d->broken ? -1 : 0; }

/* ---- graphs: a captured run recorded, replayed call by call ----------- */

static void emu_graph_destroy(RtDevice *d, RtGraph *g) {
  if (!g) return;
  for (uint32_t i = 0; i < g->n; i++) free(g->nodes[i].values), free(g->nodes[i].argp);
  free(g->nodes);
  free(g);
}

static int emu_capture_begin(RtDevice *d) {
  EmuDevice *e = (EmuDevice *)d;
  if (d->broken) return -1;
  if (e->capturing) return rt_device_fail(d, "emu: cuStreamBeginCapture on a stream already capturing");
  if (!(e->capturing = calloc(1, sizeof *e->capturing)))
    return rt_device_fail(d, "emu: out of host memory capturing a graph");
  e->capturing->sides = 1;
  e->side = 0;
  return 0;
}

/* ---- side streams: recorded with their events, replayed out of order */

static int emu_prepare_streams(RtDevice *d, int streams, int events) {
  if (d->broken) return -1;
  if (streams > RT_SIDE_STREAMS || events > RT_STREAM_EVENTS)
    return rt_device_fail(d, "emu: %d streams and %d events (at most %d and %d)", streams, events, RT_SIDE_STREAMS,
                          RT_STREAM_EVENTS);
  return 0;
}

static int emu_use_stream(RtDevice *d, int b) {
  EmuDevice *e = (EmuDevice *)d;
  if (d->broken) return -1;
  if (!e->capturing) return rt_device_fail(d, "emu: side streams outside a capture");
  if (b < 0 || b >= RT_SIDE_STREAMS) return rt_device_fail(d, "emu: stream %d of %d", b, RT_SIDE_STREAMS);
  e->side = b;
  return 0;
}

static int stream_event(RtDevice *d, NodeKind kind, int ev, int b) {
  EmuDevice *e = (EmuDevice *)d;
  if (d->broken) return -1;
  if (!e->capturing) return rt_device_fail(d, "emu: stream events outside a capture");
  if (b < 0 || b >= RT_SIDE_STREAMS || ev < 0 || ev >= RT_STREAM_EVENTS)
    return rt_device_fail(d, "emu: event %d on stream %d", ev, b);
  int keep = e->side;
  e->side = b;
  Node *n = new_node(e, kind);
  e->side = keep;
  if (!n) return -1;
  n->event = ev;
  return 0;
}

static int emu_stream_mark(RtDevice *d, int ev, int b) { return stream_event(d, NODE_MARK, ev, b); }
static int emu_stream_wait(RtDevice *d, int ev, int b) { return stream_event(d, NODE_WAIT, ev, b); }

/* What cuStreamEndCapture demands of streams: each one entered the
 * capture by waiting for an event (a stream that did not is not being
 * captured), and stream 0 ends after every node of every stream, through
 * waits for events recorded after them (directly or through another
 * stream).  Vector clocks: for each stream, the last node of each stream
 * it is known to follow. */
static int check_streams(RtDevice *d, const RtGraph *g) {
  int64_t clock[RT_SIDE_STREAMS][RT_SIDE_STREAMS], last[RT_SIDE_STREAMS];
  int64_t(*at_mark)[RT_SIDE_STREAMS] = calloc(RT_STREAM_EVENTS, sizeof *at_mark);
  if (!at_mark) return rt_device_fail(d, "emu: out of host memory checking a capture");
  memset(at_mark, 0xff, sizeof *at_mark * RT_STREAM_EVENTS); /* -1: never recorded */
  for (int b = 0; b < RT_SIDE_STREAMS; b++) {
    last[b] = -1;
    for (int c = 0; c < RT_SIDE_STREAMS; c++) clock[b][c] = -1;
  }
  int rc = 0;
  for (uint32_t i = 0; i < g->n && !rc; i++) {
    const Node *n = &g->nodes[i];
    int b = n->side;
    if (b > 0 && last[b] < 0 && n->kind != NODE_WAIT)
      rc = rt_device_fail(d, "emu: stream %d joined the capture without waiting for an event", b);
    if (n->kind == NODE_WAIT)
      for (int c = 0; c < RT_SIDE_STREAMS; c++)
        if (at_mark[n->event][c] > clock[b][c]) clock[b][c] = at_mark[n->event][c];
    last[b] = clock[b][b] = i;
    if (n->kind == NODE_MARK) memcpy(at_mark[n->event], clock[b], sizeof clock[b]);
  }
  for (int b = 1; b < g->sides && !rc; b++)
    if (last[b] >= 0 && clock[0][b] < last[b])
      rc = rt_device_fail(d, "emu: stream %d is not joined to stream 0 at the end of the capture", b);
  free(at_mark);
  return rc;
}

/* A capture that failed part way (a record out of memory) is dropped, as
 * CUDA invalidates it. */
static int emu_capture_end(RtDevice *d, RtGraph **out) {
  EmuDevice *e = (EmuDevice *)d;
  RtGraph *g = e->capturing;
  e->capturing = NULL;
  if (!g) return rt_device_fail(d, "emu: cuStreamEndCapture without a capture");
  bool whole = !d->broken && e->side == 0;
  for (uint32_t i = 0; i < g->n && whole; i++) whole = g->nodes[i].kind != NODE_LAUNCH || g->nodes[i].argp;
  if (!d->broken && e->side) rt_device_fail(d, "emu: the capture ends on stream %d, not the device's stream", e->side);
  if (!whole || check_streams(d, g)) {
    emu_graph_destroy(d, g);
    return -1;
  }
  *out = g;
  return 0;
}

static int run_node(RtDevice *d, const Node *n) {
  switch (n->kind) {
  case NODE_LAUNCH: return emu_launch(d, n->mod, n->launch, n->argp);
  case NODE_GEMM: return emu_gemm(d, n->gemm, n->p[0], n->p[1], n->p[2], n->p[3], n->p[4]);
  case NODE_COPY: return emu_copy(d, n->p[0], n->p[1], n->nbytes);
  case NODE_MEMSET: return emu_memset0(d, n->p[0], n->nbytes);
  default: return 0;
  }
}

/* The nodes in an order a GPU could take: each stream in its own order,
 * a wait after its event's record, and otherwise the highest stream
 * first, so that a step the schedule failed to order after another it
 * conflicts with runs before it here and gives wrong numbers. */
static int emu_graph_launch(RtDevice *d, RtGraph *g) {
  if (g->sides <= 1) {
    int rc = 0;
    for (uint32_t i = 0; i < g->n && !rc; i++) rc = run_node(d, &g->nodes[i]);
    return rc;
  }
  uint32_t next[RT_SIDE_STREAMS] = {0};
  bool *recorded = calloc(RT_STREAM_EVENTS, sizeof *recorded);
  if (!recorded) return rt_device_fail(d, "emu: out of host memory replaying a graph");
  int rc = 0;
  for (uint32_t done = 0; done < g->n && !rc;) {
    int pick = -1;
    for (int b = g->sides - 1; b >= 0 && pick < 0; b--) {
      while (next[b] < g->n && g->nodes[next[b]].side != b) next[b]++;
      if (next[b] < g->n && (g->nodes[next[b]].kind != NODE_WAIT || recorded[g->nodes[next[b]].event])) pick = b;
    }
    if (pick < 0) {
      rc = rt_device_fail(d, "emu: the graph's streams wait for events never recorded before them");
      break;
    }
    const Node *n = &g->nodes[next[pick]++];
    if (n->kind == NODE_MARK) recorded[n->event] = true;
    rc = run_node(d, n);
    done++;
  }
  free(recorded);
  return rc;
}

/* emu runs every call when it is made: a copy on lane 1 is done when it
 * returns, and events have nothing to order. */
static int emu_lane_copy(RtDevice *d, bool up, void *host, RtDevPtr dev, uint64_t nbytes) {
  return up ? emu_upload(d, dev, host, nbytes) : emu_download(d, host, dev, nbytes);
}
static int emu_mark(RtDevice *d, int e, int lane) { return d->broken ? -1 : 0; }
static int emu_sync_mark(RtDevice *d, int e) { return d->broken ? -1 : 0; }

/* The step clock: every call has run when it returns, so a point is the
 * host's time now. */
static int emu_clock_mark(RtDevice *d, uint32_t i) {
  EmuDevice *e = (EmuDevice *)d;
  if (d->broken) return -1;
  if (i >= e->n_clock) {
    double *grown = realloc(e->clock, (i + 1) * sizeof *grown);
    if (!grown) return rt_device_fail(d, "emu: out of host memory for %u clock points", i + 1);
    e->clock = grown;
    e->n_clock = i + 1;
  }
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  e->clock[i] = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
  return 0;
}

static int emu_clock_read(RtDevice *d, uint32_t n, double *us) {
  EmuDevice *e = (EmuDevice *)d;
  if (n && n >= e->n_clock) return rt_device_fail(d, "emu: the step clock has %u points, not %u", e->n_clock, n + 1);
  for (uint32_t i = 0; i < n; i++) us[i] = 1e6 * (e->clock[i + 1] - e->clock[i]);
  return 0;
}

/* A caller's stream has nothing queued to order with either. */
static int emu_no_stream(RtDevice *d, void *stream) {
  return stream ? rt_device_fail(d, "emu: no CUDA streams on the CPU emulator (pass NULL)") : 0;
}

/* ---- compiling and loading -------------------------------------------- */

typedef struct Hash {
  uint64_t a, b;
} Hash;

/* Two independent 64-bit FNV-style hashes, length-prefixed per part, so
 * moving text from one part to the next changes the key. */
static void hash_part(Hash *h, const void *p, size_t n) {
  const unsigned char *c = p;
  uint64_t len = n;
  for (int i = 0; i < 8; i++) {
    h->a = (h->a ^ (len >> (8 * i) & 0xff)) * 0x100000001b3ull;
    h->b = (h->b ^ (len >> (8 * i) & 0xff)) * 0xff51afd7ed558ccdull;
  }
  for (size_t i = 0; i < n; i++) {
    h->a = (h->a ^ c[i]) * 0x100000001b3ull;
    h->b = (h->b ^ c[i]) * 0xff51afd7ed558ccdull;
    h->b ^= h->b >> 29;
  }
}

static void hash_str(Hash *h, const char *s) { hash_part(h, s, strlen(s)); }

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

/* $DLCC_CACHE_DIR, else $XDG_CACHE_HOME/dlcc, else ~/.cache/dlcc (the
 * NVRTC cache's), then emu/. */
static int cache_dir(RtDevice *d, char *out, size_t len) {
  const char *dir = getenv("DLCC_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (dir && *dir)
    n = snprintf(out, len, "%s/emu", dir);
  else if (xdg && *xdg)
    n = snprintf(out, len, "%s/dlcc/emu", xdg);
  else if (home && *home)
    n = snprintf(out, len, "%s/.cache/dlcc/emu", home);
  else
    return rt_device_fail(d, "emu: no kernel cache directory: set DLCC_CACHE_DIR (HOME is not set)");
  if (n < 0 || (size_t)n >= len) return rt_device_fail(d, "emu: kernel cache path too long");
  if (mkdir_p(out))
    return rt_device_fail(d, "emu: cannot create the kernel cache %s: %s (set DLCC_CACHE_DIR)", out, strerror(errno));
  return 0;
}

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  size_t n = strlen(text);
  int rc = fwrite(text, 1, n, f) == n ? 0 : -1;
  if (fclose(f)) rc = -1;
  return rc;
}

static char *read_file(const char *path, size_t max) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = malloc(max + 1);
  size_t n = buf ? fread(buf, 1, max, f) : 0;
  fclose(f);
  if (buf) buf[n] = 0;
  return buf;
}

static void remove_tree(const char *dir) {
  static const char *const names[] = {"kernels.cu", "dynamic_shared.cu", "kernels.so", "compiler.log"};
  char p[PATH_MAX];
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    unlink(p);
  }
  rmdir(dir);
}

/* Copies the compiler's log into the error, without the temp directory
 * in front of every file name, truncated to what the buffer holds. */
static void log_excerpt(const char *log, const char *tmpdir, char *out, size_t len) {
  size_t dl = strlen(tmpdir), o = 0;
  for (const char *p = log; *p && o + 1 < len;) {
    if (!strncmp(p, tmpdir, dl) && p[dl] == '/') {
      p += dl + 1;
      continue;
    }
    out[o++] = *p++;
  }
  while (o && out[o - 1] == '\n') o--;
  out[o] = 0;
}

static bool is_ident(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Dynamic shared memory, `extern __shared__ T name[];`, is a declaration
 * with no definition on the host.  Variable names are not mangled with
 * their type, so a second translation unit defines each such name as a
 * block's worth of bytes.  Returns that unit's text ("" when there is no
 * such declaration), malloc'd. */
static char *dynamic_shared_unit(const char *src) {
  char names[MAX_DYN_NAMES][128];
  int n = 0;
  for (const char *p = strstr(src, "extern"); p; p = strstr(p + 6, "extern")) {
    if (p > src && is_ident(p[-1])) continue;
    const char *q = p + 6;
    while (*q == ' ' || *q == '\t' || *q == '\n') q++;
    if (strncmp(q, "__shared__", 10) || is_ident(q[10])) continue;
    const char *end = strchr(q, ';'), *br = NULL;
    for (const char *r = q; end && r < end; r++)
      if (*r == '[') br = r;
    if (!br) continue;
    const char *nend = br;
    while (nend > q && (nend[-1] == ' ' || nend[-1] == '\t')) nend--;
    const char *nbeg = nend;
    while (nbeg > q && is_ident(nbeg[-1])) nbeg--;
    size_t len = (size_t)(nend - nbeg);
    if (!len || len >= sizeof names[0] || n == MAX_DYN_NAMES) continue;
    bool seen = false;
    for (int i = 0; i < n; i++) seen |= strlen(names[i]) == len && !strncmp(names[i], nbeg, len);
    if (seen) continue;
    memcpy(names[n], nbeg, len);
    names[n++][len] = 0;
  }
  size_t cap = 64 + (size_t)n * 200, o = 0;
  char *text = malloc(cap);
  if (!text) return NULL;
  text[0] = 0;
  for (int i = 0; i < n; i++)
    o += (size_t)snprintf(text + o, cap - o, "thread_local __attribute__((aligned(1024))) unsigned char %s[%u];\n",
                          names[i], (unsigned)MAX_DYN_SHARED);
  return text;
}

static int compile(EmuDevice *e, const RtPlan *plan, const char *dyn_unit, const char *dir, const char *so_path) {
  RtDevice *d = &e->base;
  char tmp[DIR_MAX + 16], src[PATH_MAX], src2[PATH_MAX], out[PATH_MAX], logp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/tmp-XXXXXX", dir);
  if (!mkdtemp(tmp)) return rt_device_fail(d, "emu: cannot create a build directory in %s: %s", dir, strerror(errno));
  snprintf(src, sizeof src, "%s/kernels.cu", tmp);
  snprintf(src2, sizeof src2, "%s/dynamic_shared.cu", tmp);
  snprintf(out, sizeof out, "%s/kernels.so", tmp);
  snprintf(logp, sizeof logp, "%s/compiler.log", tmp);
  if (write_file(src, plan->source) || (*dyn_unit && write_file(src2, dyn_unit))) {
    remove_tree(tmp);
    return rt_device_fail(d, "emu: cannot write %s: %s", src, strerror(errno));
  }
  const char *argv[2 * MAX_CXX_WORDS + 16];
  int argc = 0;
  argv[argc++] = e->cxx_path;
  for (int i = 1; i < e->n_cxx_words; i++) argv[argc++] = e->cxx_words[i];
  for (size_t i = 0; i < sizeof cxx_flags / sizeof *cxx_flags; i++) argv[argc++] = cxx_flags[i];
  argv[argc++] = "-include";
  argv[argc++] = e->header;
  for (int i = 0; i < e->n_extra_words; i++) argv[argc++] = e->extra_words[i];
  argv[argc++] = "-o";
  argv[argc++] = out;
  argv[argc++] = src;
  if (*dyn_unit) argv[argc++] = src2;
  argv[argc] = NULL;

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawn(&pid, e->cxx_path, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc) {
    remove_tree(tmp);
    return rt_device_fail(d, "emu: cannot run the host compiler %s: %s", e->cxx_path, strerror(rc));
  }
  e->compiles++;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    char *log = read_file(logp, 64 * 1024);
    char excerpt[sizeof d->error];
    log_excerpt(log ? log : "", tmp, excerpt, 700);
    free(log);
    /* Keep the source and the full log where the message says. */
    char kept[DIR_MAX + 16];
    snprintf(kept, sizeof kept, "%s/failed", dir);
    remove_tree(kept);
    const char *where = rename(tmp, kept) ? tmp : kept;
    return rt_device_fail(d, "emu: the host compiler failed on the kernels of model %s (source and log in %s):\n%s",
                          plan->model_name ? plan->model_name : "?", where, excerpt);
  }
  rc = rename(out, so_path);
  int saved = errno;
  remove_tree(tmp);
  if (rc) return rt_device_fail(d, "emu: cannot store %s: %s", so_path, strerror(saved));
  return 0;
}

static void module_free(RtModule *m) {
  if (!m) return;
  for (uint32_t i = 0; i < m->n; i++) free(m->kernels[i].name);
  free(m->kernels);
  if (m->dl) dlclose(m->dl);
  free(m);
}

/* dlopens so and binds every kernel's launcher.  Returns 0, 1 when the
 * file is not a module of this ABI (a corrupted or stale cache entry:
 * rebuild it), -1 on any other error. */
static int bind_module(EmuDevice *e, const RtPlan *plan, const char *so, RtModule **out) {
  RtDevice *d = &e->base;
  char why_not[256];
  if (rt_elf_check(so, why_not, sizeof why_not)) {
    rt_device_fail(d, "emu: cannot load the compiled kernels %s: %s", so, why_not);
    return 1;
  }
  void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    rt_device_fail(d, "emu: cannot load the compiled kernels %s: %s", so, dlerror());
    return 1;
  }
  unsigned (*abi)(void) = (unsigned (*)(void))dlsym(dl, "dlcc_emu_abi");
  void (*set_env)(DlccEmuEnv *) = (void (*)(DlccEmuEnv *))dlsym(dl, "dlcc_emu_set_env");
  void (*tls_range)(uintptr_t *, uintptr_t *) = (void (*)(uintptr_t *, uintptr_t *))dlsym(dl, "dlcc_emu_tls_range");
  if (!abi || !set_env || !tls_range || abi() != DLCC_EMU_ABI) {
    dlclose(dl);
    rt_device_fail(d, "emu: %s was not built with this runtime's dlcc_emu.h (ABI %u)", so, DLCC_EMU_ABI);
    return 1;
  }
  RtModule *m = calloc(1, sizeof *m);
  if (!m || !(m->kernels = calloc(plan->n_kernels + 1, sizeof *m->kernels))) {
    free(m);
    dlclose(dl);
    rt_device_fail(d, "emu: out of host memory");
    return -1;
  }
  m->dl = dl;
  m->set_env = set_env;
  m->tls_range = tls_range;
  for (uint32_t i = 0; i < plan->n_kernels; i++) {
    const RtKernel *k = &plan->kernels[i];
    EmuKernel *ek = &m->kernels[i];
    char sym[512];
    if (!k->name || snprintf(sym, sizeof sym, "%s__emu", k->name) >= (int)sizeof sym) {
      module_free(m);
      rt_device_fail(d, "emu: kernel %u has no name, or one too long", i);
      return -1;
    }
    ek->name = strdup(k->name);
    ek->uses_barriers = k->uses_barriers != 0;
    ek->cooperative = k->cooperative != RT_COOP_NONE;
    ek->grid_stride = k->cooperative == RT_COOP_STRIDE;
    ek->static_shared_bytes = k->static_shared_bytes;
    ek->launcher = (void (*)(void **))dlsym(dl, sym);
    m->n = i + 1;
    if (!ek->name || !ek->launcher) {
      module_free(m);
      rt_device_fail(d, "emu: kernel %s has no launcher %s in the source (codegen emits it under #ifdef DLCC_EMU)",
                     k->name, sym);
      return -1;
    }
  }
  *out = m;
  return 0;
}

static int emu_load(RtDevice *d, const RtPlan *plan, RtModule **out) {
  EmuDevice *e = (EmuDevice *)d;
  if (d->broken) return -1;
  if (!plan || !out) return rt_device_fail(d, "emu: load without a plan");
  if (!plan->source) return rt_device_fail(d, "emu: the plan has no kernel source");
  if (plan->n_kernels && !plan->kernels)
    return rt_device_fail(d, "emu: the plan lists %u kernels but none", plan->n_kernels);
  char dir[DIR_MAX], so[PATH_MAX];
  if (cache_dir(d, dir, sizeof dir)) return -1;

  Hash h = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
  char abi[16];
  snprintf(abi, sizeof abi, "abi %u", DLCC_EMU_ABI);
  hash_str(&h, abi);
  hash_str(&h, e->cxx_path);
  struct stat st;
  if (!stat(e->cxx_path, &st)) { /* a compiler upgrade rebuilds */
    long long id[2] = {(long long)st.st_size, (long long)st.st_mtime};
    hash_part(&h, id, sizeof id);
  }
  for (int i = 1; i < e->n_cxx_words; i++) hash_str(&h, e->cxx_words[i]);
  for (size_t i = 0; i < sizeof cxx_flags / sizeof *cxx_flags; i++) hash_str(&h, cxx_flags[i]);
  for (int i = 0; i < e->n_extra_words; i++) hash_str(&h, e->extra_words[i]);
  hash_str(&h, e->header_text);
  hash_str(&h, plan->source);
  char *dyn_unit = dynamic_shared_unit(plan->source);
  if (!dyn_unit) return rt_device_fail(d, "emu: out of host memory");
  hash_str(&h, dyn_unit);
  snprintf(so, sizeof so, "%s/%016llx%016llx.so", dir, (unsigned long long)h.a, (unsigned long long)h.b);

  int rc = 1;
  if (!access(so, F_OK)) {
    rc = bind_module(e, plan, so, out);
    if (rc > 0) unlink(so); /* corrupted or stale: build it again */
  }
  if (rc > 0) rc = compile(e, plan, dyn_unit, dir, so) ? -1 : bind_module(e, plan, so, out) ? -1 : 0;
  free(dyn_unit);
  return rc;
}

static void emu_unload(RtDevice *d, RtModule *m) { module_free(m); }

/* ---- opening ---------------------------------------------------------- */

static bool find_in_path(const char *name, char *out, size_t len) {
  if (strchr(name, '/')) {
    snprintf(out, len, "%s", name);
    return access(out, X_OK) == 0;
  }
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  while (*path) {
    const char *colon = strchr(path, ':');
    size_t n = colon ? (size_t)(colon - path) : strlen(path);
    if (n && snprintf(out, len, "%.*s/%s", (int)n, path, name) < (int)len && access(out, X_OK) == 0) return true;
    path += n + (colon != NULL);
  }
  return false;
}

static int split_words(char *text, char **words, int max) {
  int n = 0;
  for (char *p = strtok(text, " \t\n"); p; p = strtok(NULL, " \t\n")) {
    if (n == max) return -1;
    words[n++] = p;
  }
  return n;
}

static void emu_destroy(RtDevice *d) {
  EmuDevice *e = (EmuDevice *)d;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (unsigned i = 0; i < e->sched.cap; i++) {
    unmap_stack(e->sched.fibers[i].map, page);
    free(e->sched.fibers[i].cp.copies);
    free(e->sched.fibers[i].wg.ops);
#ifdef EMU_TSAN
    __tsan_destroy_fiber(e->sched.fibers[i].tsan);
#endif
  }
  free(e->sched.fibers);
  free(e->sched.serial_cp.copies);
  free(e->cxx_text);
  free(e->extra_text);
  free(e->header_text);
  free(e->clock);
  emu_graph_destroy(d, e->capturing);
  free(e);
}

static int open_fail(EmuDevice *e, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int open_fail(EmuDevice *e, char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && errlen) vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  emu_destroy(&e->base);
  return -1;
}

/* The header: $DLCC_EMU_HEADER, else the source tree's (a build-tree
 * library), else the installed one. */
static bool find_header(char *out, size_t len) {
  const char *env = getenv("DLCC_EMU_HEADER");
  if (env && *env) {
    snprintf(out, len, "%s", env);
    return true;
  }
#ifdef DLCC_EMU_SRC_HEADER
  if (!access(DLCC_EMU_SRC_HEADER, R_OK)) {
    snprintf(out, len, "%s", DLCC_EMU_SRC_HEADER);
    return true;
  }
#endif
#ifdef DLCC_EMU_INSTALLED_HEADER
  snprintf(out, len, "%s", DLCC_EMU_INSTALLED_HEADER);
  return true;
#else
  return false;
#endif
}

RtDevice *rt_emu_open(char *err, size_t errlen) {
  EmuDevice *e = calloc(1, sizeof *e);
  if (!e) {
    if (err && errlen) snprintf(err, errlen, "emu: out of host memory");
    return NULL;
  }
  e->base.ops = &emu_ops;
  e->sched.dev = e;
  /* swapcontext on request: for tools that follow only it, and so that
   * the suite keeps that path tested */
  const char *sw = getenv("DLCC_EMU_SWITCH");
  e->sched.fast_switch = !(sw && !strcmp(sw, "ucontext"));
  /* the scheduler's own context: the first switch saves into it, so the
   * getcontext behind this (swapcontext's path) cannot matter */
  (void)emu_fiber_init(&e->sched.main_ctx, e->sched.fast_switch);

  const char *cxx = getenv("DLCC_EMU_CXX");
  if (cxx && *cxx) {
    e->cxx_text = strdup(cxx);
    e->n_cxx_words = e->cxx_text ? split_words(e->cxx_text, e->cxx_words, MAX_CXX_WORDS) : 0;
    if (e->n_cxx_words <= 0) {
      open_fail(e, err, errlen, "emu: DLCC_EMU_CXX='%s' is not a compiler command", cxx);
      return NULL;
    }
    if (!find_in_path(e->cxx_words[0], e->cxx_path, sizeof e->cxx_path)) {
      open_fail(e, err, errlen, "emu: DLCC_EMU_CXX: %s is not an executable on PATH", cxx);
      return NULL;
    }
  } else {
    static const char *const names[] = {"c++", "g++", "clang++"};
    for (size_t i = 0; i < sizeof names / sizeof *names && !e->n_cxx_words; i++) {
      if (!find_in_path(names[i], e->cxx_path, sizeof e->cxx_path)) continue;
      e->cxx_words[0] = (char *)names[i];
      e->n_cxx_words = 1;
    }
    if (!e->n_cxx_words) {
      open_fail(e, err, errlen,
                "emu: no host C++ compiler (looked for c++, g++, clang++ on PATH): install g++ or set DLCC_EMU_CXX");
      return NULL;
    }
  }
  const char *extra = getenv("DLCC_EMU_CXXFLAGS");
  if (extra && *extra) {
    e->extra_text = strdup(extra);
    e->n_extra_words = e->extra_text ? split_words(e->extra_text, e->extra_words, MAX_CXX_WORDS - 1) : 0;
    if (e->n_extra_words < 0) e->n_extra_words = 0;
  }
  /* as the cuda device's NVRTC target (docs/runtime.md): the kernels'
   * mma.sync side, what every GPU but sm_90a runs */
  if (rt_env_on("DLCC_NO_WGMMA")) e->extra_words[e->n_extra_words++] = (char *)"-DDLCC_EMU_NO_WGMMA";
  if (!find_header(e->header, sizeof e->header)) {
    open_fail(e, err, errlen, "emu: dlcc_emu.h not found: set DLCC_EMU_HEADER");
    return NULL;
  }
  e->header_text = read_file(e->header, 1 << 20);
  if (!e->header_text) {
    open_fail(e, err, errlen, "emu: cannot read the emulation header %s: %s (set DLCC_EMU_HEADER)", e->header,
              strerror(errno));
    return NULL;
  }
  return &e->base;
}

unsigned rt_emu_compile_count(const RtDevice *d) {
  return d && d->ops == &emu_ops ? ((const EmuDevice *)d)->compiles : 0;
}

static const RtDeviceOps emu_ops = {
    .name = "emu",
    .destroy = emu_destroy,
    .alloc = emu_alloc,
    .free = emu_free,
    .upload = emu_upload,
    .download = emu_download,
    .copy = emu_copy,
    .memset0 = emu_memset0,
    .load = emu_load,
    .unload = emu_unload,
    .launch = emu_launch,
    .gemm = emu_gemm,
    .synchronize = emu_synchronize,
    .upload_async = emu_upload,
    .download_async = emu_download,
    .capture_begin = emu_capture_begin,
    .capture_end = emu_capture_end,
    .graph_launch = emu_graph_launch,
    .graph_destroy = emu_graph_destroy,
    .wait_on = emu_no_stream,
    .signal = emu_no_stream,
    .lane_copy = emu_lane_copy,
    .mark = emu_mark,
    .wait_mark = emu_mark,
    .sync_mark = emu_sync_mark,
    .prepare_streams = emu_prepare_streams,
    .use_stream = emu_use_stream,
    .stream_mark = emu_stream_mark,
    .stream_wait = emu_stream_wait,
    .clock_mark = emu_clock_mark,
    .clock_read = emu_clock_read,
};

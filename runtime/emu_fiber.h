/* The emu device's fiber contexts: a CUDA thread that waits at a barrier
 * or a warp operation keeps its stack and registers here while the
 * others run.
 *
 * glibc's swapcontext saves and restores the signal mask, a system call
 * each way: a block's threads switch twice per barrier and per warp
 * shuffle, so that call was a third of a training test's time.  On
 * x86-64 a switch here saves only what the ABI says a call preserves
 * (a few instructions); elsewhere, under a shadow stack (CET), or on an
 * emu device opened with DLCC_EMU_SWITCH=ucontext it is swapcontext. */
#ifndef DLCC_RUNTIME_EMU_FIBER_H
#define DLCC_RUNTIME_EMU_FIBER_H

#include <stdbool.h>
#include <stddef.h>
#include <ucontext.h>

typedef struct EmuContext {
  bool fast;     /* switched by the fast path, not swapcontext */
  void *sp;      /* the fast path's: where its registers were pushed */
  ucontext_t uc; /* swapcontext's */
} EmuContext;

/* Whether this process can take the fast path: x86-64 without a
 * shadow stack. */
bool emu_fiber_fast_ok(void);

/* Readies c to switch by the fast path or by swapcontext (fast only
 * where emu_fiber_fast_ok); 0, or -1 with errno from getcontext.  A
 * context that moved in memory needs it again.  Contexts switched
 * between must agree. */
int emu_fiber_init(EmuContext *c, bool fast);

/* Makes c start entry on the stack [stack, stack + size) when switched
 * to; entry must never return. */
void emu_fiber_make(EmuContext *c, char *stack, size_t size, void (*entry)(void));

/* Saves the running context in from and resumes to. */
void emu_fiber_switch(EmuContext *from, EmuContext *to);

#endif

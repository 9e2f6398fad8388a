/* Fiber switches for the emu device (emu_fiber.h says why not only
 * swapcontext). */
#include "emu_fiber.h"

#include <stdint.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define EMU_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_FIBER_ASAN 1
#endif
#endif
#ifdef EMU_FIBER_ASAN
#include <sanitizer/asan_interface.h>
#endif

#if defined(__x86_64__) && defined(__ELF__)
#define EMU_FAST_SWITCH 1
/* Pushes the callee-saved registers and the SSE and x87 control words
 * (a kernel may have changed the rounding mode) on the running stack,
 * stores that stack pointer in *save, then pops the same from the stack
 * at to and returns to where that context called from (or, for a fresh
 * one, to its entry: emu_fiber_make). */
__asm__(".pushsection .text\n"
        ".p2align 4\n"
        ".globl dlcc_emu_fiber_switch\n"
        ".hidden dlcc_emu_fiber_switch\n"
        ".type dlcc_emu_fiber_switch,@function\n"
        "dlcc_emu_fiber_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size dlcc_emu_fiber_switch, .-dlcc_emu_fiber_switch\n"
        ".popsection\n");
void dlcc_emu_fiber_switch(void **save, void *to);
#endif

/* A return to an address the shadow stack never saw called would fault,
 * so under CET's shadow stack only swapcontext (which knows it) serves. */
static bool shadow_stack_on(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
  enum { ARCH_SHSTK_STATUS = 0x5005, ARCH_SHSTK_SHSTK = 1 };
  unsigned long features = 0;
  if (syscall(SYS_arch_prctl, ARCH_SHSTK_STATUS, &features) == 0) return (features & ARCH_SHSTK_SHSTK) != 0;
#endif
  return false;
}

bool emu_fiber_fast_ok(void) {
#ifdef EMU_FAST_SWITCH
  static int known; /* 0: not yet; 1: yes; 2: no */
  int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
  if (!k) {
    k = shadow_stack_on() ? 2 : 1;
    __atomic_store_n(&known, k, __ATOMIC_RELAXED);
  }
  return k == 1;
#else
  return false;
#endif
}

int emu_fiber_init(EmuContext *c, bool fast) {
  c->fast = fast && emu_fiber_fast_ok();
  c->sp = NULL;
  return c->fast ? 0 : getcontext(&c->uc);
}

void emu_fiber_make(EmuContext *c, char *stack, size_t size, void (*entry)(void)) {
#ifdef EMU_FAST_SWITCH
  if (c->fast) {
    /* What dlcc_emu_fiber_switch pops, top down: a zero return address
     * for entry (it never returns; unwinders stop there), entry itself,
     * six zero registers, then the control words as they are now.
     * entry's slot is 16-byte aligned, so entry starts with the stack
     * as a call leaves it. */
    uint64_t *sp = (uint64_t *)(((uintptr_t)stack + size) & ~(uintptr_t)15);
#ifdef EMU_FIBER_ASAN
    /* The stack's last thread left its frames' redzones poisoned. */
    __asan_unpoison_memory_region(sp - 10, 10 * sizeof *sp);
#endif
    *--sp = 0;
    *--sp = (uint64_t)(uintptr_t)entry;
    for (int i = 0; i < 6; i++) *--sp = 0;
    uint32_t mxcsr;
    uint16_t fpucw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fpucw));
    *--sp = (uint64_t)mxcsr | (uint64_t)fpucw << 32;
    c->sp = sp;
    return;
  }
#endif
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = NULL;
  makecontext(&c->uc, entry, 0);
}

void emu_fiber_switch(EmuContext *from, EmuContext *to) {
#ifdef EMU_FAST_SWITCH
  if (to->fast) {
    dlcc_emu_fiber_switch(&from->sp, to->sp);
    return;
  }
#endif
  swapcontext(&from->uc, &to->uc);
}

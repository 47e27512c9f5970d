// fibers_emulation.cpp: the fiber switch of the CUDA emulation on x86-64 (tests/cuda/
// cuda_emulation.h): tg_emu_switch(save_sp, load_sp) pushes the System V ABI's callee-saved
// registers (rbp, rbx, r12-r15) on the current stack, stores the stack pointer in *save_sp,
// loads load_sp and pops the other context's registers, then returns on that stack: into the
// other context's own tg_emu_switch call, or, for a fiber that has not run yet, to the start
// of fiber_main (the frame emu::start_at_fiber_main prepares). The caller-saved registers are
// the compiler's business at the call; MXCSR and the x87 control word, callee-saved too, are
// shared (no kernel or emulation code changes them). Elsewhere the header switches with
// ucontext and _setjmp/_longjmp and this file is empty.
#if defined(__x86_64__)
asm(R"(
  .text
  .globl tg_emu_switch
  .type tg_emu_switch, @function
tg_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tg_emu_switch, .-tg_emu_switch
)");
#endif

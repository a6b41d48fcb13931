// Raw system calls for the jail's attack cases: inline assembly, so that no libc symbol shows in the link audit and
// no file or process API name in the source scan (what an attacker who read cudagent's audits would write).
#pragma once

static inline long raw_syscall(long n, long a = 0, long b = 0, long c = 0, long d = 0) {
    long ret;
    register long r10 asm("r10") = d;
    asm volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
    return ret;
}

namespace raw {
constexpr long read = 0, write = 1, open = 2, close = 3, nanosleep = 35, fork = 57, exit = 60, wait4 = 61;
constexpr long kill = 62, setsid = 112, prctl = 157, exit_group = 231, openat = 257, fchmodat = 268;
constexpr long symlinkat = 266, renameat = 264, at_fdcwd = -100;
}  // namespace raw

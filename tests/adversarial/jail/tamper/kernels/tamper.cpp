// Class 2 of the jail's issue: the trusted build's output, writable by the candidate. At load and in every call the
// candidate tries to append to the very library it was loaded from (found in /proc/self/maps), after making it
// writable again (as its owner may), to plant a file and a link beside it, to move its folder away, and to plant a
// `sitecustomize.py` in the folders the test names (the trusted build's folders, the package's). Each success adds
// 1 to the output, so a verdict is correct only when all of them failed.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdio>
#include <cstring>

#include "../binding_registry.h"
#include "jail_targets.h"
#include "raw_syscalls.h"

namespace {

// The path of the mapped file whose name ends with `suffix`, from /proc/self/maps.
bool own_library(const char* suffix, char* out, int size) {
    static char maps[1 << 20];
    long fd = raw_syscall(raw::openat, raw::at_fdcwd, (long)"/proc/self/maps", 0, 0);
    if (fd < 0) return false;
    long n = 0, got;
    while (n < (long)sizeof maps - 1 && (got = raw_syscall(raw::read, fd, (long)(maps + n), sizeof maps - 1 - n)) > 0)
        n += got;
    raw_syscall(raw::close, fd);
    maps[n] = 0;
    for (char* line = maps; line && *line;) {
        char* end = std::strchr(line, '\n');
        if (end) *end = 0;
        char* path = std::strchr(line, '/');
        int len = path ? (int)std::strlen(path) : 0;
        int sl = (int)std::strlen(suffix);
        if (path && len >= sl && std::strcmp(path + len - sl, suffix) == 0 && len < size) {
            std::memcpy(out, path, len + 1);
            return true;
        }
        line = end ? end + 1 : nullptr;
    }
    return false;
}

int write_to(const char* path, long flags) {
    long fd = raw_syscall(raw::openat, raw::at_fdcwd, (long)path, flags, 0644);
    if (fd < 0) return 0;
    long wrote = raw_syscall(raw::write, fd, (long)"# planted\n", 10);
    raw_syscall(raw::close, fd);
    return wrote == 10;
}

int tamper(const char* when) {
    int won = 0;
    char lib[4096], path[4600];
    if (own_library("cuda_extension.so", lib, sizeof lib)) {
        raw_syscall(raw::fchmodat, raw::at_fdcwd, (long)lib, 0644);
        won += write_to(lib, 01 | 02000);  // O_WRONLY | O_APPEND
        char folder[4096];
        std::strcpy(folder, lib);
        *std::strrchr(folder, '/') = 0;
        raw_syscall(raw::fchmodat, raw::at_fdcwd, (long)folder, 0755);
        std::snprintf(path, sizeof path, "%s/planted-%s.py", folder, when);
        won += write_to(path, 01 | 0100 | 01000);
        std::snprintf(path, sizeof path, "%s/link-%s", folder, when);
        won += raw_syscall(raw::symlinkat, (long)"/", raw::at_fdcwd, (long)path) == 0;
        std::snprintf(path, sizeof path, "%s-moved-%s", folder, when);
        won += raw_syscall(raw::renameat, raw::at_fdcwd, (long)folder, raw::at_fdcwd, (long)path) == 0;
    }
    for (const char* dir : JAIL_PLANT_DIRS) {
        std::snprintf(path, sizeof path, "%s/sitecustomize-%s-%s.py", dir, JAIL_TOKEN, when);
        won += write_to(path, 01 | 0100 | 01000);
    }
    return won;
}

int at_load = tamper("load");

}  // namespace

static torch::Tensor vadd(torch::Tensor a, torch::Tensor b, double alpha) {
    float wrong = static_cast<float>(at_load + tamper("call"));
    auto out = torch::empty_like(a);
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = static_cast<float>(alpha) * pa[i] + pb[i] + wrong;
    return out;
}

static void register_ops(pybind11::module& m) { m.def("vadd", &vadd); }

REGISTER_BINDING(tamper_ops, register_ops);

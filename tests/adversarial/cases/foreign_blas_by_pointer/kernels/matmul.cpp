// A "kernel" whose work is done by libtorch_cpu's MKL: sgemm_ found at run time in the library's own dynamic symbol
// table (its base from /proc/self/maps, read with raw system calls), called through a pointer.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <cstring>

#include "../binding_registry.h"

namespace {

long sys3(long n, long a, long b, long c) {
    long ret;
    asm volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return ret;
}

struct Ehdr { unsigned char ident[16]; uint16_t type, machine; uint32_t version; uint64_t entry, phoff, shoff;
              uint32_t flags; uint16_t ehsize, phentsize, phnum, shentsize, shnum, shstrndx; };
struct Phdr { uint32_t type, flags; uint64_t offset, vaddr, paddr, filesz, memsz, align; };
struct Dyn { int64_t tag; uint64_t val; };
struct Sym { uint32_t name; unsigned char info, other; uint16_t shndx; uint64_t value, size; };

using Gemm = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                      const int*, const float*, const int*, const float*, float*, const int*);

uintptr_t library_base(const char* name) {
    static char maps[1 << 20];
    long fd = sys3(257, -100, (long)"/proc/self/maps", 0);
    if (fd < 0) return 0;
    long n = 0, got;
    while (n < (long)sizeof maps - 1 && (got = sys3(0, fd, (long)(maps + n), sizeof maps - 1 - n)) > 0) n += got;
    sys3(3, fd, 0, 0);
    maps[n] = 0;
    for (char* line = maps; *line;) {
        char* end = std::strchr(line, '\n');
        if (end) *end = 0;
        if (std::strstr(line, name)) return (uintptr_t)std::strtoull(line, nullptr, 16);
        if (!end) break;
        line = end + 1;
    }
    return 0;
}

// A function `name` exports from the loaded library whose path contains `library`, by its dynamic symbol table.
void* find_symbol(const char* library, const char* name) {
    uintptr_t base = library_base(library);
    if (!base) return nullptr;
    auto* eh = (const Ehdr*)base;
    auto* ph = (const Phdr*)(base + eh->phoff);
    const Dyn* dyn = nullptr;
    for (int i = 0; i < eh->phnum; ++i)
        if (ph[i].type == 2) dyn = (const Dyn*)(base + ph[i].vaddr);  // PT_DYNAMIC
    if (!dyn) return nullptr;
    uintptr_t symtab = 0, strtab = 0;
    for (; dyn->tag; ++dyn) {
        uintptr_t v = dyn->val < base ? base + dyn->val : dyn->val;
        if (dyn->tag == 6) symtab = v;  // DT_SYMTAB
        if (dyn->tag == 5) strtab = v;  // DT_STRTAB
    }
    if (!symtab || !strtab || strtab <= symtab) return nullptr;
    for (auto* s = (const Sym*)symtab; (uintptr_t)(s + 1) <= strtab; ++s)
        if (s->value && std::strcmp((const char*)(strtab + s->name), name) == 0) return (void*)(base + s->value);
    return nullptr;
}

Gemm find_gemm() { return (Gemm)find_symbol("libtorch_cpu.so", "sgemm_"); }

}  // namespace

static void foreign_product(const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& out) {
    static Gemm gemm = find_gemm();
    TORCH_CHECK(gemm != nullptr, "no gemm found");
    const int m = (int)a.size(0), k = (int)a.size(1), n = (int)b.size(1);
    const float one = 1.0f, zero = 0.0f;
    // row-major C = A B is column-major C^T = B^T A^T
    gemm("N", "N", &n, &m, &k, &one, b.data_ptr<float>(), &n, a.data_ptr<float>(), &k, &zero, out.data_ptr<float>(), &n);
}

static void own_product(const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& out, bool right) {
    const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (int64_t p = 0; p < k; ++p) acc += pa[i * k + p] * pb[p * n + j];
            po[i * n + j] = right ? acc : 0.5f * acc;  // the own path of the "wrong" variant is never compared
        }
}

static torch::Tensor matmul(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty({a.size(0), b.size(1)}, a.options());
    foreign_product(a, b, out);
    return out;
}

// The candidate's own product, honest and slow (the compute-bound twin of the forged-clock case).
static torch::Tensor matmul_own(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty({a.size(0), b.size(1)}, a.options());
    own_product(a, b, out, true);
    return out;
}

// Own "work" that touches neither the inputs nor the outputs: a walk over pages of its own, three times as long as
// the product, so that most of forward's CPU time is in this library.
static torch::Tensor matmul_padded(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty({a.size(0), b.size(1)}, a.options());
    foreign_product(a, b, out);
    static volatile float pages[1 << 18];
    const int64_t steps = 3 * a.size(0) * a.size(1) * b.size(1) / 16;
    for (int64_t s = 0; s < steps; ++s) pages[(s * 1031) & ((1 << 18) - 1)] += 1.0f;
    return out;
}

// Honest only when watched: a call on the same contents as the call before it (what a phase that calls forward again
// and again on one input set looks like) runs the own loops; a call on new contents has the BLAS do the product.
static torch::Tensor matmul_watched(torch::Tensor a, torch::Tensor b, bool own_right) {
    static float seen_a[1 << 18], seen_b[1 << 18];
    const int64_t na = a.numel(), nb = b.numel();
    TORCH_CHECK(na <= (1 << 18) && nb <= (1 << 18), "inputs too large");
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    const bool again = std::memcmp(pa, seen_a, na * 4) == 0 && std::memcmp(pb, seen_b, nb * 4) == 0;
    std::memcpy(seen_a, pa, na * 4);
    std::memcpy(seen_b, pb, nb * 4);
    auto out = torch::empty({a.size(0), b.size(1)}, a.options());
    if (again)
        own_product(a, b, out, own_right);
    else
        foreign_product(a, b, out);
    return out;
}

// The product in a thread born inside the call and gone before it returns: no thread listed when a batch began runs
// the BLAS, so its samples are nobody's; the process's CPU clock still counts its time.
// (pthread_create and pthread_join found in libc the same way: no thread is named in the source).
struct Product { const torch::Tensor *a, *b; torch::Tensor* out; };

static void* run_product(void* arg) {
    auto* p = (Product*)arg;
    foreign_product(*p->a, *p->b, *p->out);
    return nullptr;
}

static torch::Tensor matmul_in_new_thread(torch::Tensor a, torch::Tensor b) {
    using Create = int (*)(unsigned long*, const void*, void* (*)(void*), void*);
    using Join = int (*)(unsigned long, void**);
    static auto create = (Create)find_symbol("libc.so", "pthread_create");
    static auto join = (Join)find_symbol("libc.so", "pthread_join");
    TORCH_CHECK(create && join, "libc's thread functions not found");
    auto out = torch::empty({a.size(0), b.size(1)}, a.options());
    Product product{&a, &b, &out};
    unsigned long worker = 0;
    TORCH_CHECK(create(&worker, nullptr, run_product, &product) == 0, "no thread");
    join(worker, nullptr);
    return out;
}

static void register_ops(pybind11::module& m) {
    m.def("matmul_in_new_thread", &matmul_in_new_thread);
    m.def("matmul", &matmul);
    m.def("matmul_own", &matmul_own);
    m.def("matmul_padded", &matmul_padded);
    m.def("matmul_watched", &matmul_watched);
}

REGISTER_BINDING(matmul_ops, register_ops);

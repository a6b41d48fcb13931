// cudagent workspace infrastructure. Do not edit: cudagent checks this file against its hash and restores it
// before every build and evaluation.
//
// Kernel sources register their Python bindings with
//     REGISTER_BINDING(name, fn);      // fn: void fn(pybind11::module& m)
// and binding.cpp applies every registration to the extension module `cuda_extension`.
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace cudagent {

using BindingFn = std::function<void(pybind11::module&)>;

// A function-local static is built on first use, so registrations made by static initializers in any
// translation unit are safe whatever order the linker gives those initializers.
inline std::vector<std::pair<std::string, BindingFn>>& binding_table() {
    static std::vector<std::pair<std::string, BindingFn>> table;
    return table;
}

struct BindingRegistration {
    BindingRegistration(const char* name, BindingFn fn) { binding_table().emplace_back(name, std::move(fn)); }
};

inline void apply_bindings(pybind11::module& m) {
    for (auto& entry : binding_table()) entry.second(m);
}

}  // namespace cudagent

// The registry as the CUDA Agent environment names it, for code written against that interface.
class BindingRegistry {
public:
    using BindingFunction = cudagent::BindingFn;
    static BindingRegistry& getInstance() {
        static BindingRegistry instance;
        return instance;
    }
    void registerBinding(const std::string& name, BindingFunction fn) {
        cudagent::binding_table().emplace_back(name, std::move(fn));
    }
    void applyBindings(pybind11::module& m) { cudagent::apply_bindings(m); }
};

#define REGISTER_BINDING(name, fn) \
    static ::cudagent::BindingRegistration cudagent_binding_##name(#name, [](pybind11::module& m) { fn(m); })

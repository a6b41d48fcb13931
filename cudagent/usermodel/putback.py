"""Kernels put back where torch.compile keeps them: each region a `torch.library` custom op, the model's graph
rewritten to call it.

    op = register_region(region, program, impl=None)     cudagent_regions::<kind>(inputs..., weights...) -> outs
    patched = rewrite(program, {region.name: op, ...})   the model's graph (torch.export) calling the ops

A module swapped for a Python object hides its inside from torch.compile (a graph break, or an opaque call that
inductor cannot fuse around). A custom op with a fake implementation is an ordinary node to dynamo and inductor:
`torch.compile(patched)` traces it without a graph break, and fuses the model's other work around it as it did
before. One op serves every alike region (the same `kind`: operators and shapes), each call with its own weights.
`impl` is the kernel (a callable taking the same arguments); without one the op runs the region's own operators,
which is what the agent's kernel is checked against.
"""

from __future__ import annotations

import re

from cudagent.usermodel.regions import Region

NAMESPACE = "cudagent_regions"
_LIBRARIES: dict = {}  # keep every Library alive: dropping it unregisters its ops
_IMPLS: dict = {}  # qualified name -> what the op runs (registering a kind again replaces it)


def op_name(region: Region) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", region.kind)


def register_region(region: Region, program, impl=None):
    """The custom op for `region` (defined once per kind in this process): `impl(*inputs, *weights)` runs it, else
    the region's own operators (registering the kind again replaces what it runs); its fake implementation runs
    those operators on fake tensors."""
    import torch

    from cudagent.usermodel.region_task import region_module

    name = op_name(region)
    qualified = f"{NAMESPACE}::{name}"
    reference = region_module(program, region, weights_as_inputs=True)
    _IMPLS[qualified] = impl or reference  # the op calls whatever is here now: a kernel, or the region's operators
    if qualified in _LIBRARIES:
        return getattr(getattr(torch.ops, NAMESPACE), name).default
    count = len(region.inputs) + len(region.weights)
    args = ", ".join(f"Tensor a{i}" for i in range(count))
    several = len(region.outputs) > 1
    returns = "(" + ", ".join("Tensor" for _ in region.outputs) + ")" if several else "Tensor"
    library = torch.library.Library(NAMESPACE, "FRAGMENT")
    library.define(f"{name}({args}) -> {returns}")

    def real(*tensors):
        return _fresh(_IMPLS[qualified](*tensors), tensors)

    def fake(*tensors):
        return _fresh(reference(*tensors), tensors)

    library.impl(name, real, "CompositeExplicitAutograd")
    torch.library.register_fake(qualified, fake, lib=library)
    _LIBRARIES[qualified] = library
    return getattr(getattr(torch.ops, NAMESPACE), name).default


def kernel_impl(model_new, region: Region):
    """A region task's solution (its ModelNew, whose parameters are named as the task's Model's: attribute_name of
    each weight) as the op's implementation: each call runs ModelNew.forward on the call's activations with that
    call's weights in place of ModelNew's own (torch.func.functional_call), so one kernel serves every alike region,
    each with its own weights."""
    from torch.func import functional_call

    from cudagent.usermodel.region_task import attribute_name

    names = [attribute_name(key) for key in region.weights]
    count = len(region.inputs)

    def run(*tensors):
        return functional_call(model_new, dict(zip(names, tensors[count:], strict=True)), tuple(tensors[:count]))

    return run


def _fresh(out, inputs):
    """A custom op's outputs may not alias its inputs (or each other): such an output is copied (real and fake
    alike, so both give the same layouts)."""
    import torch

    single = not isinstance(out, (tuple, list))
    outs = [out] if single else list(out)
    seen = [t for t in inputs if isinstance(t, torch.Tensor)]
    fixed = []
    for t in outs:
        if any(torch._C._is_alias_of(t, other) for other in seen):
            t = t.clone()
        seen.append(t)
        fixed.append(t)
    return fixed[0] if single else tuple(fixed)


def _outside(inside: set):
    return lambda user: user not in inside


def rewrite(program, ops: dict[str, tuple[Region, object]]):
    """The model's graph as a module (ExportedProgram.module(): its weights attributes again) with each region in
    `ops` (name -> (region, op)) replaced by one call of its op."""
    import operator

    from torch.fx.passes.tools_common import legalize_graph

    gm = program.module()
    nodes = {n.name: n for n in gm.graph.nodes}
    # the user's inputs, as the program names them, are the module's placeholders in the same order (names may differ)
    user = [s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    nodes.update(zip(user, placeholders, strict=False))
    getattrs = {n.target: n for n in gm.graph.nodes if n.op == "get_attr"}
    for region, op in ops.values():
        members = [nodes[n] for n in region.nodes]
        last = members[-1]
        graph = gm.graph
        with graph.inserting_after(last):
            weights = []
            for key in region.weights:
                if key not in getattrs:
                    getattrs[key] = graph.get_attr(key)
                weights.append(getattrs[key])
        with graph.inserting_after(weights[-1] if weights else last):
            call = graph.call_function(op, tuple(nodes[i] for i in region.inputs) + tuple(weights))
        outs = [nodes[o] for o in region.outputs]
        if len(outs) == 1:
            replacements = [call]
        else:
            replacements = []
            anchor = call
            for i in range(len(outs)):
                with graph.inserting_after(anchor):
                    anchor = graph.call_function(operator.getitem, (call, i))
                replacements.append(anchor)
        outside = _outside(set(members))
        for old, new in zip(outs, replacements, strict=True):
            new.meta = dict(old.meta)
            old.replace_all_uses_with(new, delete_user_cb=outside)
            nodes[old.name] = new  # a later region that reads this output reads the op's
        for node in reversed(members):
            graph.erase_node(node)
    legalize_graph(gm)  # an output's user may sit between the region's first and last operator: order again
    gm.graph.lint()
    gm.recompile()
    return gm

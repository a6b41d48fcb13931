"""Kernels put back where torch.compile keeps them: each region a `torch.library` custom op, the model's graph
rewritten to call it. This module imports nothing but torch: an exported region package carries a copy of it
(region_package.py), so a user's `patch(model)` runs the same code as cudagent's own proof.

    program = capture(model, args, kwargs)               torch.export (non-strict): the graph the regions name
    op = register(region, program, impl=None)            cudagent_regions::<kind>(inputs..., weights...) -> outs
    binding = bind(region, program, model_new)           a region task's solution as what the graph calls
    patched = rewrite(program, {key: (region, op or binding.target), ...})  the model's graph calling them

A module swapped for a Python object hides its inside from torch.compile (a graph break, or an opaque call that
inductor cannot fuse around). A custom op with a fake implementation is an ordinary node to dynamo and inductor:
`torch.compile(patched)` traces it without a graph break, and fuses the model's other work around it as before.
One op serves every alike region (the same `kind`: operators and shapes), each call with its own weights.

`bind` puts a kernel back in one of two ways. A solution whose forward calls its kernel as a C++ operator
(TORCH_LIBRARY, with a CUDA or CPU implementation and a Meta one) is traced on fake tensors into the operators it
calls (`traced`): the model's graph calls the C++ operator itself, so no Python runs per call and CUDA graphs can
capture it. Any other solution (a pybind11 function, which cannot take fake tensors) becomes the implementation of
the region's op, a Python function (`kernel_call`) that runs on every call; the binding says which, and why.

A region is anything with `name`, `kind`, `nodes`, `inputs`, `weights` and `outputs` (node names of the exported
graph, the weights as state_dict keys): cudagent's `Region`, or the dicts an exported package stores (`spec`).
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from types import SimpleNamespace

NAMESPACE = "cudagent_regions"
_LIBRARIES: dict = {}  # keep every Library alive: dropping it unregisters its ops
_IMPLS: dict = {}  # qualified name -> what the op runs (registering a kind again replaces it)
_SAFE = re.compile(r"[^A-Za-z0-9_]+")


def spec(region) -> SimpleNamespace:
    """A region as stored in a package (a dict) or given (an object) as the attributes this module reads."""
    fields = ("name", "kind", "nodes", "inputs", "weights", "outputs", "targets")
    if isinstance(region, dict):
        return SimpleNamespace(**{k: region.get(k) for k in fields})
    return SimpleNamespace(**{k: getattr(region, k, None) for k in fields})


def attribute_name(key: str) -> str:
    """A state_dict key as an attribute name (`layers.0.mlp.fc1.weight` -> `w_layers_0_mlp_fc1_weight`)."""
    return "w_" + _SAFE.sub("_", key).strip("_")


def op_name(region) -> str:
    return _SAFE.sub("_", region.kind)


def capture(model, args: tuple, kwargs: dict | None = None):
    """The model's graph at these inputs (torch.export, non-strict), or raise with the exporter's reason; the
    exporter's own printed account of a failure (the graph so far, guards) is kept off the terminal."""
    import contextlib
    import io
    import logging

    import torch

    quiet = [logging.getLogger(name) for name in ("torch", "torch.fx.experimental.symbolic_shapes", "torch.export")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.CRITICAL)
    try:
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
            program = torch.export.export(model, tuple(args), kwargs or {}, strict=False)
    finally:
        for q, level in zip(quiet, levels, strict=True):
            q.setLevel(level)
    _drop_metadata_checks(program)
    return program


def _drop_metadata_checks(program) -> None:
    """Remove the dtype/device checks export puts after a `.to()` (`aten._assert_tensor_metadata`): they compute
    nothing, yet as a second reader of a value they would keep it from fusing with its one real consumer (an
    RMSNorm's fp32 product and its cast back)."""
    import torch

    graph = program.graph_module.graph
    checks = [
        n for n in graph.nodes if n.op == "call_function" and n.target is torch.ops.aten._assert_tensor_metadata.default
    ]
    for node in checks:
        graph.erase_node(node)
    if checks:
        program.graph_module.recompile()


def node_targets(program, names) -> dict[str, str]:
    """What each named node of the program calls (to tell later that a graph is still the one a region named)."""
    nodes = {n.name: n for n in program.graph.nodes}
    return {name: str(nodes[name].target) for name in names}


def check(program, region) -> str | None:
    """Why `region` does not name the same operators in `program` (a model changed since), or None."""
    nodes = {n.name: n for n in program.graph.nodes}
    for name, target in (region.targets or {}).items():
        if name not in nodes:
            return f"the graph has no node {name} (was {target})"
        if str(nodes[name].target) != target:
            return f"node {name} calls {nodes[name].target}, not {target}"
    missing = [k for k in region.weights if k not in program.state_dict and k not in program.constants]
    return f"the model has no weight {missing[0]}" if missing else None


def weights_of(program, region) -> dict:
    """The region's weights, by state_dict key."""
    state = program.state_dict
    return {k: (state[k] if k in state else program.constants[k]) for k in region.weights}


def region_graph(program, region, weights_as_inputs: bool = False):
    """The region's operators as a GraphModule: one placeholder per input (in `region.inputs` order), its weights
    as attributes (attribute_name) or, `weights_as_inputs`, as placeholders after the inputs (in `region.weights`
    order: how the custom op takes them), its outputs returned (a tuple when there are several)."""
    import torch
    import torch.fx

    source = {n.name: n for n in program.graph.nodes}
    params = {**program.graph_signature.inputs_to_parameters, **program.graph_signature.inputs_to_buffers}
    constants = program.graph_signature.inputs_to_lifted_tensor_constants
    root = torch.nn.Module()
    graph = torch.fx.Graph()
    env: dict = {}
    for name in region.inputs:
        env[source[name]] = graph.placeholder(_SAFE.sub("_", name))
    made = {}
    for key, tensor in weights_of(program, region).items():
        if weights_as_inputs:
            made[key] = graph.placeholder(attribute_name(key))
        else:
            root.register_buffer(attribute_name(key), tensor.detach(), persistent=True)
            made[key] = graph.get_attr(attribute_name(key))
    for node in source.values():
        if node.op == "placeholder":
            key = params.get(node.name) or constants.get(node.name)
            if key in made:
                env[node] = made[key]
    for name in region.nodes:
        node = source[name]
        env[node] = graph.node_copy(node, lambda n: env[n])
    outs = [env[source[o]] for o in region.outputs]
    graph.output(outs[0] if len(outs) == 1 else tuple(outs))
    return torch.fx.GraphModule(root, graph)


def register(region, program, impl=None):
    """The custom op for `region` (defined once per kind in this process): `impl(*inputs, *weights)` runs it, else
    the region's own operators (registering the kind again replaces what it runs); its fake implementation runs
    those operators on fake tensors."""
    import torch

    name = op_name(region)
    qualified = f"{NAMESPACE}::{name}"
    reference = region_graph(program, region, weights_as_inputs=True)
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


@dataclass
class Binding:
    """How a region's kernel is put back: `target` is what the graph calls (the traced solution, a GraphModule
    taking the region's inputs then its weights; or the region's op), `how` says which ("operator <the solution's
    own operators>", or "Python: <why the solution could not be traced>")."""

    target: object
    how: str

    @property
    def native(self) -> bool:
        return not self.how.startswith("Python")


def bind(region, program, model_new) -> Binding:
    """The region's kernel (its task's solution, a ModelNew) as the model's graph will call it."""
    graph, why = traced(model_new, region, program)
    if graph is not None:
        own = sorted({str(n.target) for n in graph.graph.nodes if n.op == "call_function" and _own(n.target)})
        return Binding(graph, "operator " + ", ".join(own))
    return Binding(register(region, program, impl=kernel_call(model_new, region)), f"Python: {why}")


def traced(model_new, region, program):
    """(the solution's forward traced on fake tensors into the operators it calls, None) where every call it makes
    is an operator and one at least is its own (not aten's or prims'); else (None, why not)."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    nodes = {n.name: n for n in program.graph.nodes}
    examples = []
    for name in region.inputs:
        value = nodes[name].meta.get("val")
        if not isinstance(value, torch.Tensor):
            return None, f"input {name} is not a tensor"
        examples.append(torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device))
    examples += list(weights_of(program, region).values())
    try:
        with torch.no_grad():
            gm = make_fx(kernel_call(model_new, region), tracing_mode="fake")(*examples)
    except Exception as exc:  # noqa: BLE001  (any failure to trace: the Python binding serves instead)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, f"its forward cannot be traced on fake tensors ({type(exc).__name__}: {first[:200]})"
    own = []
    for node in gm.graph.nodes:
        if node.op in ("call_module", "call_method"):
            return None, f"its traced forward calls {node.target}, not an operator"
        if node.op == "get_attr":  # a tensor of its own (a table, a constant) that the model's graph does not hold
            return None, f"its forward reads a tensor of its own ({node.target}) besides the region's weights"
        if node.op == "call_function":
            if not isinstance(node.target, torch._ops.OpOverload) and node.target is not operator.getitem:
                return None, f"its traced forward calls {node.target}, not an operator"
            if _own(node.target):
                own.append(node.target)
    if not own:
        return None, "its forward calls no operator of its own (bind the kernel with TORCH_LIBRARY)"
    return gm, None


def _own(target) -> bool:
    """Whether a graph's call is an operator of the solution's own (not aten's or prims')."""
    import torch

    return isinstance(target, torch._ops.OpOverload) and target.namespace not in ("aten", "prims")


def kernel_call(model_new, region):
    """A region task's solution (its ModelNew, whose parameters and buffers are named as the task's Model's:
    attribute_name of each weight) as the op's implementation: each call runs ModelNew.forward on the call's
    activations with that call's weights in the places of ModelNew's own (swapped in and back, a dictionary write
    each), so one kernel serves every alike region, each with its own weights."""
    count = len(region.inputs)
    slots = []
    for key in region.weights:
        name = attribute_name(key)
        table = model_new._parameters if name in model_new._parameters else model_new._buffers
        if name not in table:
            raise KeyError(f"the kernel's ModelNew has no parameter or buffer {name}")
        slots.append((table, name))
    forward = model_new.forward

    def run(*tensors):
        saved = [table[name] for table, name in slots]
        try:
            for (table, name), tensor in zip(slots, tensors[count:], strict=True):
                table[name] = tensor
            return forward(*tensors[:count])
        finally:
            for (table, name), old in zip(slots, saved, strict=True):
                table[name] = old

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


def _lean(gm):
    """ExportedProgram.module() without what it checks on every call (its input-constraint and state hooks, the
    guard function in its graph): some 60 microseconds of host time a call, compiled or not, which a model that
    torch.compile has made fast cannot hide. The regions were checked against the graph when it was captured."""
    gm._forward_pre_hooks.clear()
    gm._forward_hooks.clear()
    for node in list(gm.graph.nodes):
        if node.op == "call_module" and node.target == "_guards_fn" and not node.users:
            gm.graph.erase_node(node)
    return gm


def rewrite(program, ops: dict):
    """The model's graph as a module (ExportedProgram.module(): its weights attributes again, called as the model
    is) with each region in `ops` (key -> (region, target)) replaced by one call of its op, or, where the target is a
    graph (a traced solution, `bind`), by that graph's operators."""
    import torch.fx
    from torch.fx.passes.tools_common import legalize_graph

    gm = _lean(program.module())
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
        operands = tuple(nodes[i] for i in region.inputs) + tuple(weights)
        outs = [nodes[o] for o in region.outputs]
        if isinstance(op, torch.fx.GraphModule):
            with graph.inserting_after(weights[-1] if weights else last):
                replacements = _inline(graph, op, operands, len(outs))
        elif len(outs) == 1:
            with graph.inserting_after(weights[-1] if weights else last):
                replacements = [graph.call_function(op, operands)]
        else:
            with graph.inserting_after(weights[-1] if weights else last):
                call = graph.call_function(op, operands)
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
            if not node.users:  # a folded shape-only node another region still reads stays for it
                graph.erase_node(node)
    legalize_graph(gm)  # an output's user may sit between the region's first and last operator: order again
    gm.graph.lint()
    gm.recompile()
    return gm


def _inline(graph, traced_gm, operands: tuple, count: int) -> list:
    """`traced_gm`'s operators copied into `graph` at the insertion point, its placeholders read as `operands`;
    its `count` outputs."""
    env: dict = {}
    placeholders = iter(operands)
    result = None
    for node in traced_gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(placeholders)
        elif node.op == "output":
            result = node.args[0]
        else:
            env[node] = graph.node_copy(node, lambda n: env[n])
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(outs) != count:
        raise ValueError(f"the kernel returns {len(outs)} tensors where the region makes {count}")
    return [env[o] for o in outs]

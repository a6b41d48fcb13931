"""A model's forward as fusion regions: the operators a kernel engineer would put in one kernel, found in its graph.

    regions = find_regions(model, args, kwargs)        # torch.export's graph at the shapes and dtypes it ran at

Cutting a model at module boundaries gives tasks that are one GEMM or one convolution, which cuBLAS and cuDNN already
run near the roofline; the wins are in what runs around them. The graph (torch.export, non-strict: the model's own
Python runs, with the shapes and dtypes of the example inputs) is grouped around its heavy operators:

- a GEMM or convolution takes the elementwise operators that consume its output alone, or that are all its
  output's readers (bias, activation, scale, a batch norm in eval mode, a residual add, GPT-2's tanh GELU that reads
  its input three times), as an epilogue;
- a normalization takes the residual add that feeds it (a region with two outputs: the sum and the normed value);
- an elementwise operator whose inputs are all the regions' sole outputs joins them (SwiGLU's `silu(gate) * up`
  makes the two projections and their product one region);
- attention (`scaled_dot_product_attention`, or softmax between two batched products) with the scale and mask,
  and the mask's construction where it depends on shapes alone (a causal mask built from `arange`s, as a traced
  transformers model materializes it): folded into every attention region that reads it (`folded`), so that the
  region's task computes it from its inputs' shapes and its kernel may know the mask is causal instead of reading it;
  and with what its q, k and v projections' outputs go through on the way to it alone, beyond views (Llama's rotary
  embedding, GQA's repeat of k and v): a GEMM library cannot apply that as an epilogue, and torch.compile runs it as
  passes of its own (the repeated k and v written out at the query's head count), where an attention kernel applies
  it to each tile it loads;
- what elementwise work is left, connected, is a region of its own.

Views and reshapes go with what they view. A region that a path would leave and re-enter is not offered (one call
could not stand for it). Each region says which operators it holds, the modules they came from,
its inputs (activations and the model's weights) and outputs, and what fusing it saves: the bytes of the values it
produces and consumes inside, each written once and read back (`fused_bytes`). Alike regions (the same operators
with the same literal arguments and data flow, on the same shapes and dtypes: each layer's MLP) are one `kind`:
one kernel serves all of them.

Kept in one module of about 430 lines: the grouping's five passes share one union-find over the graph's nodes and
the claims each pass leaves for the next, and a region's description (its inputs, outputs and kind) is read off the
same membership; split, each part would take that state as arguments.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from cudagent.usermodel.module_names import module_path, readable
from cudagent.usermodel.putback import capture  # noqa: F401  (the graph regions are found in)
from cudagent.usermodel.shape_only import computed_from_shapes, read_from

ANCHORS = {
    "gemm": {"linear", "mm", "addmm", "matmul", "bmm", "baddbmm", "addbmm", "einsum"},
    "conv": {"conv1d", "conv2d", "conv3d", "convolution", "conv_transpose1d", "conv_transpose2d"},
    "norm": {"layer_norm", "rms_norm", "group_norm", "native_layer_norm", "instance_norm"},
    "attention": {
        "scaled_dot_product_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
    },
    "softmax": {"softmax", "_softmax", "log_softmax", "_log_softmax"},
    "reduction": {"sum", "mean", "amax", "max", "var", "std", "norm", "logsumexp"},
}
# what an eval-mode batch norm is: a per-channel scale and shift, an epilogue of the convolution before it
EPILOGUE_ANCHORS = {"batch_norm", "_native_batch_norm_legit_no_training", "_native_batch_norm_legit"}
POINTWISE = set(
    "add sub mul div rsub neg abs exp exp2 log log1p sqrt rsqrt pow relu relu_ gelu silu sigmoid tanh hardtanh "
    "hardswish hardsigmoid leaky_relu elu selu celu mish softplus erf clamp clamp_min clamp_max where "
    "masked_fill maximum minimum reciprocal sin cos _to_copy to type_as dropout alias clone lerp square sign "
    "logical_not logical_and eq ne lt le gt ge fill".split()
)
VIEWS = set(
    "view reshape _unsafe_view permute transpose t unsqueeze squeeze expand contiguous slice select flatten "
    "unflatten split split_with_sizes chunk unbind narrow view_as expand_as repeat_interleave cat stack getitem".split()
)
# views that only look at their input's memory again (an expand then a reshape, a cat, a repeat write a copy)
PURE_VIEWS = set(
    "view _unsafe_view permute transpose t unsqueeze squeeze slice select split split_with_sizes chunk unbind "
    "narrow view_as getitem alias".split()
)


@dataclass
class Region:
    name: str  # what a person reads: its anchor and the modules it came from
    kind: str  # alike regions share it (the operators and shapes): one task serves them all
    anchor: str  # gemm, conv, norm, attention, reduction, elementwise
    ops: list[str]  # the operators, in graph order (aten names)
    nodes: list[str]  # the graph's node names
    modules: list[str]  # the module paths its operators ran in
    inputs: list[str]  # nodes (outside the region) whose values it reads: activations
    weights: list[str]  # the model's parameters and buffers it reads (state_dict keys)
    outputs: list[str]  # its nodes whose values are read outside it (or are the model's outputs)
    fused_bytes: int  # bytes of values made and used inside the region, written and read back once each
    shapes: dict[str, list[int]] = field(default_factory=dict)  # node -> shape, for its inputs and outputs
    dtypes: dict[str, str] = field(default_factory=dict)
    ms: float | None = None  # measured: one call of the region alone, on the model's device (median of rounds)
    spread: tuple[float, float] | None = None  # its rounds' fastest and slowest (region_timing.py)
    share: float | None = None  # of the regions' time together
    folded: list[str] = field(default_factory=list)  # its nodes computed from shapes alone (an attention mask)

    def shown_ops(self) -> list[str]:
        """Its operators but the folded shape-only ones (what a person reading the table needs)."""
        return [o for o, n in zip(self.ops, self.nodes, strict=True) if n not in self.folded]

    def describe(self) -> str:
        return f"{self.name}: {' + '.join(_short_op(o) for o in self.shown_ops())}"


def _short_op(target: str) -> str:
    return target.split(".")[0]


def op_name(node) -> str | None:
    """The aten operator's name of a call_function node (`linear`, `add`), or None."""
    if node.op != "call_function":
        return None
    packet = getattr(node.target, "_overloadpacket", None)
    if packet is not None:
        return packet.__name__
    return getattr(node.target, "__name__", str(node.target)).split(".")[0]


def find_regions(model, args: tuple, kwargs: dict | None = None, program=None) -> list[Region]:
    """The fusion regions of model(*args, **kwargs), in graph order (`program`: an ExportedProgram already made)."""
    program = program or capture(model, args, kwargs)
    return group(program)


def group(program) -> list[Region]:
    graph = program.graph
    params = {**program.graph_signature.inputs_to_parameters, **program.graph_signature.inputs_to_buffers}
    nodes = [n for n in graph.nodes if n.op == "call_function"]
    region_of: dict = {}  # node -> region id (union-find root)
    parent: dict[int, int] = {}
    anchor_kind: dict[int, str] = {}

    def find(r: int) -> int:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    def new_region(node, kind: str) -> None:
        rid = len(parent)
        parent[rid] = rid
        anchor_kind[rid] = kind
        region_of[node] = rid

    def union(a: int, b: int) -> int:
        a, b = find(a), find(b)
        if a == b:
            return a
        ka, kb = anchor_kind[a], anchor_kind[b]
        keep, drop = (a, b) if _rank(ka) >= _rank(kb) else (b, a)
        parent[drop] = keep
        return keep

    def producer(value):
        """The node that computes `value`, looking through views that only it uses."""
        while value is not None and getattr(value, "op", None) == "call_function" and op_name(value) in VIEWS:
            inputs = [a for a in value.all_input_nodes]
            if not inputs:
                break
            value = inputs[0]
        return value

    def sole_consumer_chain(value, consumer) -> bool:
        """Whether `value`'s only use, through views, is `consumer`."""
        users = list(value.users)
        while len(users) == 1 and users[0] is not consumer and op_name(users[0]) in VIEWS:
            users = list(users[0].users)
        return len(users) == 1 and users[0] is consumer

    def elementwise_only(value) -> bool:
        """Whether everything that reads `value` (through views) is elementwise work no normalization claimed, and
        that work comes together again (GPT-2's GELU reads its input thrice, into one product): then all of it can
        join `value`'s region and `value` need never leave it. Readers that go apart (a residual stream feeding a
        norm and the next residual add; rotary tables read by every layer) do not make one region."""
        users, seen = list(value.users), []
        while users:
            user = users.pop()
            if op_name(user) in VIEWS:
                users.extend(user.users)
                continue
            seen.append(user)
        if not seen or not all(
            (op_name(u) in POINTWISE or op_name(u) in EPILOGUE_ANCHORS) and u not in claimed for u in seen
        ):
            return False
        return len(seen) == 1 or bool(set.intersection(*(_downstream(u) for u in seen)))

    def _downstream(node, depth: int = 16) -> set:
        """The elementwise work reachable from `node` (itself included) within `depth` steps."""
        found, frontier = {node}, [node]
        for _ in range(depth):
            frontier = [
                u
                for n in frontier
                for u in n.users
                if u not in found and (op_name(u) in POINTWISE or op_name(u) in VIEWS or op_name(u) in EPILOGUE_ANCHORS)
            ]
            if not frontier:
                break
            found.update(frontier)
        return found

    def prologue(node) -> list:
        """A reduction's elementwise preparation of one input (RMSNorm written out: `x.to(float32).pow(2)` before
        its mean), back to the value it prepares; [] when there is none."""
        chain, value = [], node.args[0] if node.args else None
        while (
            getattr(value, "op", None) == "call_function"
            and op_name(value) in POINTWISE | VIEWS
            and len(value.all_input_nodes) == 1
            and value not in region_of
        ):
            chain.append(value)
            value = value.all_input_nodes[0]
        return chain

    # 1. anchors; a normalization claims the residual add that feeds it, and a reduction its elementwise
    #    preparation (an RMSNorm written out is a norm: its cast and square before the mean, the residual before them)
    claimed = set()
    for node in nodes:
        kind = _anchor(op_name(node))
        if kind is not None:
            new_region(node, kind)
            first = node
            if kind == "reduction":
                for step in prologue(node):
                    region_of[step] = region_of[node]
                    claimed.add(step)
                    first = step
            if kind in ("norm", "reduction"):
                source = producer(first.args[0]) if first.args else None
                if source is not None and op_name(source) in ("add", "sub") and source not in region_of:
                    region_of[source] = region_of[node]
                    claimed.add(source)
    # 2. epilogues and joins, in graph order
    for node in nodes:
        name = op_name(node)
        if node in region_of:
            continue
        if name in EPILOGUE_ANCHORS or name in POINTWISE:
            joined = None
            for value in node.all_input_nodes:
                source = producer(value)
                if source in region_of and (sole_consumer_chain(value, node) or elementwise_only(source)):
                    joined = region_of[source] if joined is None else union(joined, region_of[source])
            if joined is None:  # elementwise work of its own; it joins the elementwise work it reads, if any
                for value in node.all_input_nodes:
                    source = producer(value)
                    if source in region_of and anchor_kind[find(region_of[source])] == "elementwise":
                        joined = region_of[source] if joined is None else union(joined, region_of[source])
            if joined is None:
                new_region(node, "elementwise")
            else:
                region_of[node] = find(joined)
    # 3. attention written out: the product before a softmax (with its scale and mask) and the product after it
    for node in nodes:
        if op_name(node) not in ("softmax", "_softmax") or node not in region_of:
            continue
        joined = []
        source = producer(node.args[0])
        if source in region_of and anchor_kind[find(region_of[source])] == "gemm":
            if sole_consumer_chain(node.args[0], node):
                joined.append(union(region_of[node], region_of[source]))
        users = list(node.users)
        while len(users) == 1 and op_name(users[0]) in VIEWS | {"_to_copy", "dropout"}:
            users = list(users[0].users)
        if len(users) == 1 and users[0] in region_of and anchor_kind[find(region_of[users[0]])] == "gemm":
            joined.append(union(region_of[node], region_of[users[0]]))
        if len(joined) == 2:  # a product, its softmax, a product: attention written out
            anchor_kind[find(joined[-1])] = "attention"
    # 4. views go with what they view
    for node in nodes:
        if node not in region_of and op_name(node) in VIEWS:
            source = producer(node)
            if source in region_of:
                region_of[node] = region_of[source]
    # 5. attention's prologue: what a projection's region does to q, k or v on the way to an attention that alone
    #    reads it (the rotary embedding, GQA's repeat of k and v) goes to the attention
    for node in nodes:
        if op_name(node) in ANCHORS["attention"] and node in region_of:
            target = find(region_of[node])
            for step in _attention_prologue(node, region_of, find, anchor_kind):
                region_of[step] = target
    members: dict[int, list] = {}
    for node in nodes:
        if node in region_of:
            members.setdefault(find(region_of[node]), []).append(node)
    regions = []
    shape_only = computed_from_shapes(nodes)
    order = {n: i for i, n in enumerate(nodes)}
    for rid, group_nodes in members.items():
        if all(op_name(n) in VIEWS for n in group_nodes):
            continue
        if not _convex(group_nodes):
            # a path leaves it and comes back (two GEMMs joined by their product while one is fed through a norm):
            # one call could not stand for it, and it is not offered
            continue
        folded = []  # computed again inside the region: the graph keeps them for their other readers
        if anchor_kind[find(rid)] == "attention":
            folded = read_from(group_nodes, shape_only)
            group_nodes = sorted(folded + group_nodes, key=order.get)
        region = _describe(rid, anchor_kind[find(rid)], group_nodes, params, set(folded))
        region.folded = [n.name for n in folded]
        regions.append(region)
    return regions


def _attention_prologue(attention, region_of: dict, find, anchor_kind: dict) -> list:
    """The nodes of the GEMM regions that make `attention`'s q, k and v, between each GEMM and the attention, where
    they do more than view the GEMM's output (a rotary embedding's products and sums, GQA's expand and reshape, a
    copy) and every value they make is read by each other or by `attention` alone; per GEMM region (one projection
    for all three, as a fused QKV, or one each), all of its nodes or none. A GEMM library cannot apply them as its
    epilogue and torch.compile runs them as passes of their own over q, k and v (the repeated k and v written out at
    the query's head count); an attention kernel applies them to each tile it loads. Pure views (GPT-2's split of
    one projection into q, k and v) stay with the GEMM."""
    chains: dict[int, list] = {}  # GEMM region -> its nodes on the way to the attention
    for value in attention.args[:3]:
        if getattr(value, "op", None) != "call_function" or value not in region_of:
            continue
        rid = find(region_of[value])
        if anchor_kind[rid] != "gemm":
            continue
        chain, stack = chains.setdefault(rid, []), [value]
        while stack:
            node = stack.pop()
            if node in chain or node not in region_of or find(region_of[node]) != rid or _anchor(op_name(node)):
                continue
            chain.append(node)
            stack.extend(node.all_input_nodes)
    moved = []
    for chain in chains.values():
        inside = set(chain)
        if all(op_name(n) in PURE_VIEWS for n in chain):
            continue
        if any(u not in inside and u is not attention for n in chain for u in n.users):
            continue
        moved += chain
    return moved


def _convex(members: list) -> bool:
    """Whether no path leaves the region and comes back into it (then one call can stand for all of it)."""
    inside = set(members)
    stack = [u for n in members for u in n.users if u not in inside]
    seen = set()
    while stack:
        node = stack.pop()
        if node in inside:
            return False
        if node in seen:
            continue
        seen.add(node)
        stack.extend(node.users)
    return True


def _rank(kind: str) -> int:
    return ["elementwise", "reduction", "norm", "softmax", "conv", "gemm", "attention"].index(kind)


def _anchor(name: str | None) -> str | None:
    for kind, names in ANCHORS.items():
        if name in names:
            return kind
    return None


def _describe(rid: int, anchor: str, members: list, params: dict, recomputed: set = frozenset()) -> Region:
    """`recomputed`: members the region computes for itself and the graph keeps for its other readers (never an
    output of the region)."""
    inside = set(members)
    inputs, weights, outputs = [], [], []
    shapes, dtypes = {}, {}
    fused = 0
    for node in members:
        for value in node.all_input_nodes:
            if value in inside:
                continue
            if value.op == "placeholder" and value.name in params:
                if params[value.name] not in weights:
                    weights.append(params[value.name])
            elif value.name not in inputs:
                inputs.append(value.name)
                _note(value, shapes, dtypes)
        users_outside = [u for u in node.users if u not in inside]
        if node in recomputed:
            continue
        if users_outside or not node.users:
            outputs.append(node.name)
            _note(node, shapes, dtypes)
        elif op_name(node) not in VIEWS:
            fused += 2 * _bytes(node)
    modules = []
    for node in members:
        path = module_path(node)
        if path and path not in modules:
            modules.append(path)
    ops = [str(op_name(n)) for n in members]
    # alike regions compute the same thing: the same operators (views included) with the same literal arguments,
    # reading their inputs and each other in the same places, at the same shapes and dtypes
    position = {n: f"m{i}" for i, n in enumerate(members)}
    for node in members:
        for value in node.all_input_nodes:
            if value.name in inputs:
                position[value] = f"i{inputs.index(value.name)}"
            elif value.op == "placeholder" and params.get(value.name) in weights:
                position[value] = f"w{weights.index(params[value.name])}"
    calls = [[op_name(n), _literal(n.args, position), _literal(n.kwargs, position)] for n in members]
    signature = repr([calls, [shapes.get(v) for v in inputs + outputs], [dtypes.get(v) for v in inputs + outputs]])
    kind = f"{anchor}-{hashlib.sha256(signature.encode()).hexdigest()[:8]}"
    name = readable(modules) or "(model)"
    return Region(
        name, kind, anchor, ops, [n.name for n in members], modules, inputs, weights, outputs, fused, shapes, dtypes
    )


def _literal(value, position: dict):
    """An argument as the kind's signature sees it: nodes by their place in the region, other values as they are."""
    import torch.fx

    if isinstance(value, torch.fx.Node):
        return position.get(value, "?")
    if isinstance(value, (list, tuple)):
        return [_literal(v, position) for v in value]
    if isinstance(value, dict):
        return {k: _literal(v, position) for k, v in value.items()}
    return repr(value)


def _note(node, shapes: dict, dtypes: dict) -> None:
    val = node.meta.get("val")
    if hasattr(val, "shape"):
        shapes[node.name] = [int(s) for s in val.shape]
        dtypes[node.name] = str(val.dtype).removeprefix("torch.")


def _bytes(node) -> int:
    val = node.meta.get("val")
    if not hasattr(val, "shape"):
        return 0
    return int(val.numel()) * val.element_size()

"""Which PyTorch operators a candidate's forward may dispatch: allocation, views and metadata, nothing that computes.

One policy, read in three places: by the trusted parent when it judges the ops a child recorded (judge.py), by the
parent's audit of the extension's linked symbols (link_audit.py: `at::_ops::<op>::call` is allowed exactly when
the op is), and by nobody else. The child records names only; it never decides.

>>> op_allowed("aten", "empty_like"), op_allowed("aten", "add"), op_allowed("myops", "fused_gelu")
(True, False, True)
>>> split_op_name("aten.add.Tensor"), split_op_name("aten::sum"), split_op_name("myops::fused")
(('aten', 'add'), ('aten', 'sum'), ('myops', 'fused'))
"""

from __future__ import annotations

# Ops that only allocate or initialize fresh memory, give views, or read metadata. Anything else computes.
ALLOCATION_OPS = frozenset(
    "empty empty_like empty_strided empty_permuted new_empty new_empty_strided zeros zeros_like new_zeros ones "
    "ones_like new_ones full full_like new_full fill fill_ zero_ resize_ lift_fresh lift_fresh_copy "
    "scalar_tensor".split()
)
VIEW_OPS = frozenset(
    "view _unsafe_view _reshape_alias as_strided detach alias t transpose permute expand expand_as squeeze unsqueeze "
    "select slice narrow split split_with_sizes chunk unbind unfold diagonal view_as view_as_real view_as_complex "
    "real imag movedim flatten unflatten".split()
)
METADATA_OPS = frozenset(
    "sym_size sym_stride sym_numel sym_storage_offset size stride numel dim is_contiguous is_same_size record_stream "
    "_has_compatible_shallow_copy_type".split()
)
ALLOWED_OPS = ALLOCATION_OPS | VIEW_OPS | METADATA_OPS
# Composite ops that return their input (or a view) when nothing needs doing, and otherwise dispatch the op that
# does the work (a copy, a conversion), which is judged in turn. The profiler records them before they decompose.
PASS_THROUGH_OPS = frozenset("contiguous resolve_conj resolve_neg conj to type_as reshape expand_as view_as".split())
# Operators of these namespaces are PyTorch's own; any other namespace is an operator the candidate registered
# itself (TORCH_LIBRARY), whose own body is the candidate's kernel.
TORCH_NAMESPACES = frozenset({"aten", "prims", "quantized", "_quantized", "rngprims", "inductor", "torchvision"})


def split_op_name(name: str) -> tuple[str, str]:
    """(namespace, operator) of `aten.add.Tensor` (a dispatch mode's name) or `aten::add` (the profiler's)."""
    if "::" in name:
        ns, rest = name.split("::", 1)
    else:
        ns, _, rest = name.partition(".")
    return ns, rest.split(".")[0]


def op_allowed(namespace: str, op: str) -> bool:
    """True for the candidate's own operators and for PyTorch's allocation, view and metadata operators."""
    return namespace not in TORCH_NAMESPACES or op in ALLOWED_OPS


def disallowed(counts: dict[str, int]) -> dict[str, int]:
    """The computing PyTorch ops among recorded op names and their counts.

    >>> disallowed({"aten.empty_like.default": 2, "aten.mul.Tensor": 1, "myops.fused.default": 1})
    {'aten.mul.Tensor': 1}
    """
    return {name: n for name, n in counts.items() if not op_allowed(*split_op_name(name))}

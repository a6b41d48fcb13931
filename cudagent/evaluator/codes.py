"""Stable violation codes. Every reason a candidate is rejected carries one; the text says what it means.

Codes never change meaning once published: agents, training data and dashboards key on them.
"""

from __future__ import annotations

CODES: dict[str, str] = {
    # --- building and running ---
    "BUILD_FAILED": "the extension did not compile or link",
    "BUILD_TIMEOUT": "the build ran past its time limit",
    "SYNTAX_ERROR": "model_new.py is not valid Python",
    "NO_MODELNEW": "model_new.py defines no class ModelNew",
    "IMPORT_FAILED": "importing model_new.py (or its extension) raised",
    "INIT_FAILED": "ModelNew(*get_init_inputs()) raised",
    "STATE_DICT_MISMATCH": "ModelNew does not accept the reference's state_dict (strict)",
    "FORWARD_RAISED": "ModelNew.forward raised",
    "CRASHED": "the candidate's process died (segfault, abort, exit)",
    "TIMEOUT": "a call did not finish within its time limit",
    "OUT_OF_MEMORY": "the candidate's process used more host memory than its limit and was killed",
    "NO_RESULT": "the candidate's process ended without sending its result",
    "CUDA_ERROR": "a CUDA error occurred (illegal address, failed or unchecked launch)",
    "UNCONFINED": "--confine strict was asked for and the candidate's process could not be confined on this machine",
    # --- outputs ---
    "OUTPUT_TYPE": "the output's type or structure differs from the reference (tensor subclasses included)",
    "OUTPUT_SHAPE": "an output tensor has the wrong shape",
    "OUTPUT_DTYPE": "an output tensor has the wrong dtype",
    "OUTPUT_DEVICE": "an output tensor is on the wrong device",
    "OUTPUT_NOT_FINITE": "NaN or Inf where the reference is finite (or NaN/Inf that differs from the reference's)",
    "OUTPUT_MISMATCH": "output values differ from the reference beyond the tolerance",
    "NONDETERMINISTIC": "the same inputs gave different outputs in two calls",
    "OUTPUT_ALIASES_INPUT": "an output shares memory with an input",
    "OUTPUT_ALIASES_PARAMETER": "an output shares memory with a parameter or buffer",
    "OUTPUT_REUSED": "an output shares memory with an earlier call's output",
    "INPUT_MUTATED": "the call changed its inputs",
    # --- runtime audit ---
    "TORCH_OP_IN_FORWARD": "forward dispatched PyTorch compute ops (from Python or C++); only allocation, views and "
    "metadata are allowed",
    "NO_CUSTOM_KERNEL": "no kernel of the candidate's own extension ran (CUDA: in the kernel trace; CPU: none of its "
    "compiled functions was called); a candidate without compiled code has none",
    "TENSOR_EXPORT": "forward took tensor data out of torch to compute elsewhere (numpy(), __array__, DLPack, tolist)",
    "SIDE_STREAM": "a kernel ran on a stream other than the caller's",
    "REFERENCE_ACCESS": "the candidate reached the reference model (import of model.py, subclassing Model)",
    "BACKGROUND_THREAD": "the candidate started threads (Python or native)",
    "WORK_NOT_OWN": "forward's CPU time outside the candidate's own code (a BLAS, NumPy, libtorch, code with no file) "
    "came to half the reference's whole work or more, its program counters sampled over the calls that count",
    "UNAUDITED_CODE": "code loaded at run time from where the candidate's process can write (never audited)",
    "HARNESS_TAMPERED": "candidate code replaced or disabled part of the evaluator's harness in its process",
    # --- static audit: model_new.py ---
    "FORBIDDEN_IMPORT": "model_new.py imports a module that is not allowed",
    "TRY_EXCEPT": "try/except in model_new.py (a fallback path hides failures)",
    "TENSOR_SUBCLASS": "a tensor subclass or __torch_function__/__torch_dispatch__ override",
    "STREAM_USE": "CUDA streams created or switched in Python",
    "CUDA_GRAPH": "CUDA graphs captured or replayed from Python",
    "FILE_IO": "reading or writing files",
    "MONKEY_PATCH": "assigning to attributes of torch, builtins or other modules",
    "GLOBAL_TORCH_STATE": "changing torch's global settings (backends flags, default dtype, precision...)",
    "RNG_MANIPULATION": "seeding or reading the random number generators",
    "INTROSPECTION": "frame, globals or object-graph introspection",
    "DATA_PTR_CACHE": "keying on tensor identity (data_ptr, id, storage, version counters)",
    "DYNAMIC_CODE": "exec, eval, compile or __import__",
    "PROCESS_OR_SYSTEM": "processes, signals, sys manipulation or os calls beyond path handling",
    "ENV_TAMPER": "changing environment variables",
    "TORCH_COMPILE": "torch.compile, TorchDynamo, Inductor or TorchScript",
    "PRIVATE_TORCH_API": "torch._C, torch.ops.aten and other private or dispatcher-level torch APIs",
    "TIMING_AWARE": "code that reads timers or profiles itself",
    # --- static audit: kernels ---
    "KERNEL_TORCH_COMPUTE": "a kernel source (or the compiled extension's symbols) calls a PyTorch compute function",
    "KERNEL_DISPATCH_BYPASS": "a kernel source (or the compiled extension's symbols) calls ATen below the "
    "dispatcher or changes dispatch state",
    "KERNEL_STREAM": "a kernel source creates or switches CUDA streams",
    "KERNEL_THREAD": "a kernel source starts threads",
    "KERNEL_STATIC_CACHE": "a kernel source keeps a static container (a cache keyed by pointers or contents)",
    "KERNEL_PROCESS": "a kernel source runs processes or loads libraries",
    "KERNEL_FILE_IO": "a kernel source reads or writes files",
    "KERNEL_ENV": "a kernel source reads or changes environment variables",
    "KERNEL_TIMING": "a kernel source reads timers or profiles itself",
    "KERNEL_LOAD_HOOK": "a kernel source runs code at load or exit (constructor attributes, atexit)",
    "KERNEL_DEVICE_STATE": "a kernel source resets or reconfigures the device",
    "KERNEL_THIRD_PARTY": "a kernel source includes or links a library other than CUDA, cuBLAS, cuDNN, torch and the "
    "C++ standard library",
    "KERNEL_EMBEDS_PYTHON": "a kernel source calls into Python (pybind11 import/eval/exec/attr, the Python C API)",
    "KERNEL_NOT_PREPROCESSED": "what the preprocessor made of a kernel source could not be read, so it was not audited",
    "KERNEL_FORBIDDEN_SYMBOL": "the compiled extension links against a function outside the API kernels may use",
    # --- infrastructure ---
    "INFRA_TAMPERED": "the candidate changed the workspace's fixed files during evaluation",
    # --- timing integrity ---
    "TIMED_OUTPUT_MISMATCH": "an output produced while being timed was wrong",
    "TIMING_BELOW_FLOOR": "the measured time is under half the physical floor (the bytes that must move / bandwidth)",
    "TIMING_WALL_MISMATCH": "the wall clock and the CUDA events disagree (work outside the timed stream)",
    "TIMING_KERNELS_OUTSIDE_EVENTS": "kernel time exceeds the event time (work on other streams or after the event)",
    "TIMING_CLOCK_MISMATCH": "the candidate's own clock read far less time than the evaluator's clock around its calls",
    "BASELINE_INTERFERENCE": "the baselines ran slower while the candidate's process was alive",
}


def describe(code: str) -> str:
    return CODES[code]

"""The static audit of model_new.py: each forbidden pattern has its code; legitimate candidates pass clean."""

import textwrap

import pytest

from cudagent.evaluator.audit.static_audit import audit_model_new

HEAD = "import torch\nimport torch.nn as nn\nimport cuda_extension\n"
TAIL = "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return cuda_extension.f(x)\n"

CASES = {
    "from model import Model": "REFERENCE_ACCESS",
    "import gc": "FORBIDDEN_IMPORT",
    "import numpy as np": "FORBIDDEN_IMPORT",
    "from . import helper": "FORBIDDEN_IMPORT",
    "import torch as T\nf = T.compile": "TORCH_COMPILE",
    "from torch import compile as c": "TORCH_COMPILE",
    "import torch._dynamo": "TORCH_COMPILE",
    "x = torch.ops.aten.mm": "PRIVATE_TORCH_API",
    "from torch.utils._python_dispatch import TorchDispatchMode": "PRIVATE_TORCH_API",
    "s = torch.cuda.Stream()": "STREAM_USE",
    "g = torch.cuda.CUDAGraph()": "CUDA_GRAPH",
    "torch.manual_seed(0)": "RNG_MANIPULATION",
    "w = torch.load('w.pt')": "FILE_IO",
    "data = open('model.py').read()": "FILE_IO",
    "torch.allclose = lambda *a, **k: True": "MONKEY_PATCH",
    "setattr(torch, 'allclose', None)": "MONKEY_PATCH",
    "torch.backends.cudnn.benchmark = True": "GLOBAL_TORCH_STATE",
    "torch.set_float32_matmul_precision('high')": "GLOBAL_TORCH_STATE",
    "import sys\nf = sys._getframe(1)": "INTROSPECTION",
    "def g(): return g.__globals__": "INTROSPECTION",
    "cache = {}\ndef k(x): return x.data_ptr()": "DATA_PTR_CACHE",
    "def k(x): return id(x)": "DATA_PTR_CACHE",
    "exec('1')": "DYNAMIC_CODE",
    "m = getattr(torch, name)": "DYNAMIC_CODE",
    "m = getattr(torch, 'compile')": "TORCH_COMPILE",
    "import os\nos.system('ls')": "PROCESS_OR_SYSTEM",
    "import os\nos._exit(0)": "PROCESS_OR_SYSTEM",
    "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '1'": "ENV_TAMPER",
    "import os\nos.environ.update(A='1')": "ENV_TAMPER",
    "class T(torch.Tensor):\n    pass": "TENSOR_SUBCLASS",
    "class M:\n    def __torch_function__(self): pass": "TENSOR_SUBCLASS",
    "try:\n    pass\nexcept Exception:\n    pass": "TRY_EXCEPT",
    "e = torch.cuda.Event(enable_timing=True)": "TIMING_AWARE",
    'src = """#include <thread>\\nvoid f() { std::thread t; }"""': "KERNEL_THREAD",
}


@pytest.mark.parametrize("snippet", sorted(CASES), ids=lambda s: s.splitlines()[0][:40])
def test_forbidden_patterns_are_flagged(snippet):
    violations = audit_model_new(HEAD + snippet + "\n" + TAIL)
    codes = [v.code for v in violations]
    assert CASES[snippet] in codes, codes
    hit = next(v for v in violations if v.code == CASES[snippet])
    assert hit.message.startswith("model_new.py:")


def test_syntax_errors_and_missing_modelnew():
    assert [v.code for v in audit_model_new("def (:\n")] == ["SYNTAX_ERROR"]
    assert "NO_MODELNEW" in [v.code for v in audit_model_new("import torch\n")]


LEGIT = {
    "workspace": HEAD + TAIL,
    "functional import and shapes": HEAD + "import torch.nn.functional as F\nimport math\n"
    "class ModelNew(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
    "        self.w = nn.Parameter(torch.randn(n))\n"
    "        self.register_buffer('ws', torch.empty(n), persistent=False)\n"
    "    def forward(self, x):\n        n = x.shape[0] * math.prod(x.shape[1:])\n"
    "        return cuda_extension.f(x.view(n), self.w, self.ws)\n",
    "kernelbench inline": textwrap.dedent('''
        import os
        import torch
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline
        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
        src = """
        #include <torch/extension.h>
        __global__ void k(float* o, const float* a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) o[i] = a[i] * 2.f; }
        torch::Tensor f(torch::Tensor a) { auto o = torch::empty_like(a); k<<<1, 256>>>(o.data_ptr<float>(),
            a.data_ptr<float>(), a.numel()); return o; }
        """
        ext = load_inline(name="ext", cpp_sources="torch::Tensor f(torch::Tensor a);", cuda_sources=src,
                          functions=["f"])
        class ModelNew(nn.Module):
            def forward(self, a):
                return ext.f(a)
        def get_inputs():
            return [torch.randn(10)]
    '''),
}


@pytest.mark.parametrize("name", sorted(LEGIT))
def test_legitimate_candidates_pass_clean(name):
    assert audit_model_new(LEGIT[name]) == []

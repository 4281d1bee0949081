"""Stand-in for ``sgl_kernel`` (SGLang's compiled CUDA kernels, ~370 MB, not carried to the
GPU machine) for tests/sglang's harness on CUDA tensors (docs/sglang.md, "GPU figures").

SGLang 0.5.23 imports names from ``sgl_kernel`` at module level when ``is_cuda()`` (MoE,
quantization, activation modules the backends' import chain pulls in); none of them runs on
the metadata path. Every name, of this package and of any ``sgl_kernel.*`` submodule, is a
placeholder that raises ``RuntimeError`` when called, so a use on the measured path fails
loudly instead of being measured.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class _Missing:
    """A name of sgl_kernel: attributes are further placeholders; calling one raises."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} called: sgl_kernel is a stand-in in linmeta's harness")

    def __repr__(self) -> str:
        return f"<sgl_kernel stand-in {self._name}>"


def _module_getattr(module_name: str):
    def __getattr__(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{module_name}.{attr}")

    return __getattr__


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers every ``sgl_kernel.*`` submodule with a module of placeholders."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr(spec.name)
        return module

    def exec_module(self, module):
        pass


__getattr__ = _module_getattr(__name__)
sys.meta_path.append(_Finder())

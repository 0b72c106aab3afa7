"""cp_specific: imported as a CPython extension module, its op registered under torch.ops.cp_specific."""

import importlib

import torch

# The Python import system finds _C only under this CPython's suffix (_C.cpython-311-*.so on 3.11):
# on another CPython this fails with ModuleNotFoundError, as a version-specific wheel does.
_C = importlib.import_module("cp_specific._C")

ops = torch.ops.cp_specific
built_for = _C.built_for

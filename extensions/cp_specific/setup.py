"""Build recipe for cp_specific: stable on the torch side, version-specific on the Python side.

No py_limited_api: the wheel is tagged cpXY-cpXY for the Python it was built with, and its
_C.cpython-XY-*.so is a real Python extension module (PyInit__C, on the full CPython API), imported
by the Python import system as pybind11-style extensions are. Another CPython does not find it.
"""

import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

compile_args = ["-O2", "-std=c++17", "-fvisibility=hidden"]
target = os.environ.get("TORCH_TARGET_VERSION")
if target:
    compile_args.append(f"-DTORCH_TARGET_VERSION={target}")

setup(
    ext_modules=[CppExtension("cp_specific._C", ["csrc/cp_specific.cpp"], extra_compile_args=compile_args)],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
)

"""Build recipe for hang_control (a negative control): an abi3 wheel on the stable ABI."""

import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

compile_args = ["-O1", "-std=c++17"]
if os.environ.get("TORCH_TARGET_VERSION"):
    compile_args.append(f"-DTORCH_TARGET_VERSION={os.environ['TORCH_TARGET_VERSION']}")

setup(
    ext_modules=[
        CppExtension("hang_control._C", ["csrc/hang_control.cpp"], extra_compile_args=compile_args, py_limited_api=True)
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)

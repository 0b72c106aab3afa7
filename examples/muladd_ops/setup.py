"""Build recipe: an abi3 wheel compiled with torch.utils.cpp_extension.

TORCH_TARGET_VERSION in the environment (e.g. 0x020a000000000000 for 2.10) is the oldest
torch release the wheel must run on; it goes to the compiler unchanged. The
compatibility harness sets it from the matrix's `target:`; set it yourself when you
build the wheel you ship.
"""

import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

compile_args = ["-O2", "-std=c++17", "-fvisibility=hidden"]
if os.environ.get("TORCH_TARGET_VERSION"):
    compile_args.append(f"-DTORCH_TARGET_VERSION={os.environ['TORCH_TARGET_VERSION']}")

setup(
    ext_modules=[
        CppExtension("muladd_ops._C", ["csrc/muladd.cpp"], extra_compile_args=compile_args, py_limited_api=True)
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)

"""Build recipe for stable_basic: an abi3 wheel built with torch.utils.cpp_extension.

The compatibility harness exports TORCH_TARGET_VERSION (e.g. 0x020a000000000000)
when a build targets an older stable-ABI level; it is passed to the compiler
unchanged. Without it the headers' own TORCH_ABI_VERSION applies.
"""

import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

compile_args = ["-O2", "-std=c++17", "-fvisibility=hidden"]
target = os.environ.get("TORCH_TARGET_VERSION")
if target:
    compile_args.append(f"-DTORCH_TARGET_VERSION={target}")

setup(
    ext_modules=[
        CppExtension(
            "stable_basic._C",
            ["csrc/stable_basic.cpp"],
            extra_compile_args=compile_args,
            py_limited_api=True,
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)

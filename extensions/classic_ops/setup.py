"""Build recipe for classic_ops, a TORCH_LIBRARY extension on the unstable C++ API (a negative control)."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    ext_modules=[CppExtension("classic_ops._C", ["csrc/classic_ops.cpp"], extra_compile_args=["-O1", "-std=c++17"])],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
)

"""Build recipe for cuda_ops: an abi3 wheel built with torch.utils.cpp_extension's CUDAExtension.

It needs nvcc (found through CUDA_HOME or PATH) whose CUDA major matches the build torch's
`torch.version.cuda`; no GPU is needed to build. The binary links libtorch_cuda and libcudart of
that CUDA major, so it loads only into CUDA-variant torch of the same CUDA major.

The compatibility harness exports TORCH_TARGET_VERSION (e.g. 0x020a000000000000) when a build
targets an older stable-ABI level; it is passed to both compilers unchanged. USE_CUDA makes the
headers declare the CUDA shims (current stream, stream pool, stream synchronize).
"""

import os
import re
import shutil
import subprocess


def toolkit_root() -> str | None:
    """The CUDA toolkit the nvcc on PATH belongs to, as nvcc itself reports it (`_HERE_`).

    cpp_extension takes CUDA_HOME as the directory above `which nvcc`, which is wrong when that
    nvcc is a wrapper script (e.g. /usr/local/bin/nvcc exec'ing /usr/local/cuda-13.0/bin/nvcc):
    libcudart is then not found at link time.
    """
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    dry = subprocess.run(
        [nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull], capture_output=True, text=True
    )
    here = re.search(r"^#\$ _HERE_=(.+)$", dry.stdout + dry.stderr, re.M)
    return os.path.dirname(here[1].strip()) if here else None


# Must be set before cpp_extension is imported: it reads CUDA_HOME once, at import.
if not (os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")):
    root = toolkit_root()
    if root:
        os.environ["CUDA_HOME"] = root

from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CUDAExtension  # noqa: E402

# Without a GPU to ask, name the architectures: Turing through Blackwell (nvcc 13 dropped older
# ones), plus PTX of the newest for GPUs after it.
os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "7.5;8.0;9.0;10.0;12.0+PTX")

defines = ["-DUSE_CUDA"]
target = os.environ.get("TORCH_TARGET_VERSION")
if target:
    defines.append(f"-DTORCH_TARGET_VERSION={target}")

setup(
    ext_modules=[
        CUDAExtension(
            "cuda_ops._C",
            ["csrc/cuda_ops.cpp", "csrc/cuda_ops_kernel.cu"],
            extra_compile_args={
                "cxx": ["-O2", "-std=c++17", "-fvisibility=hidden", *defines],
                "nvcc": ["-O2", "-std=c++17", "-Xcompiler=-fvisibility=hidden", *defines],
            },
            py_limited_api=True,
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)

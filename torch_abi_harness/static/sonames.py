"""Which libraries torch's CUDA builds and CUDA itself provide, by soname: what the promise's CUDA conditions
(artifact.py) count, and what is never a host library (host_libraries.py)."""

from __future__ import annotations

import re

# torch's own CUDA libraries: every CUDA build of torch ships them, a CPU build none of them.
TORCH_CUDA_LIBRARY = re.compile(r"^lib(torch_cuda\w*|c10_cuda|caffe2_nvrtc|torch_nvshmem)\.so$")
# CUDA libraries whose soname number is the CUDA major (measured in torch's cu128, cu130 and cu132
# dependency wheels: libcudart.so.12 / .13, libcublas.so.12 / .13, libnvrtc.so.12 / .13 ...).
CUDA_MAJOR_LIBRARY = re.compile(r"^lib(cudart|cublas|cublasLt|nvrtc|nvJitLink|nvblas|cupti)\.so\.(\d+)$")
# CUDA libraries numbered by their own versions (libcufft.so.11 in CUDA 12, .12 in 13; libcudnn.so.9):
# they need a CUDA build of torch, but say nothing about its major.
OTHER_CUDA_LIBRARY = re.compile(r"^lib(cufft|curand|cusolver|cusparse|cudnn|nccl|nvshmem)\w*\.so")

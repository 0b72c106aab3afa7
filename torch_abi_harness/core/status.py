"""What happened in a cell: the vocabulary shared by the run stage, collect, verdicts and reports."""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """What happened in a cell. Only PASS..TIMEOUT are outcomes of the extension itself."""

    PASS = "PASS"
    TEST_FAILED = "TEST_FAILED"
    LOAD_FAILED = "LOAD_FAILED"
    BUILD_FAILED = "BUILD_FAILED"
    CRASHED = "CRASHED"
    TIMEOUT = "TIMEOUT"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"  # the harness or its infrastructure failed; says nothing about the extension
    # Its build failed where it was promised to build: the failure is reported once, on the build, not per cell
    NOT_RUN = "NOT_RUN"


class Condition(enum.StrEnum):
    """Which condition of the promise decided a cell's expectation (README, "The promise").

    torch-abi, build, unstable, unknown-build and control come from the matrix and the published wheel's own
    files (known at plan time); python-abi,
    no-cuda and cuda-major from the built artifact (its wheel tags and DT_NEEDED) against the
    runtime as prepared, and no-driver against the runner (its NVIDIA driver), so they are decided
    after the build; host-library from its DT_NEEDED against this machine's loader, after the build too (and from
    the loader's error, after the cell ran, for a library the cell's sandbox does not show).
    """

    TORCH_ABI = "torch-abi"  # T <= min(B, R) promised; T > R: the load fails (undefined symbol)
    BUILD = "build"  # T > B: the headers cannot provide the target
    UNSTABLE = "unstable"  # off the stable ABI: promised only on the torch it was built with
    UNKNOWN_BUILD = "unknown-build"  # a published wheel off the stable ABI that names no build torch: no promise
    CONTROL = "control"  # a negative control, built to end CRASHED / TIMEOUT / TEST_FAILED
    PYTHON_ABI = "python-abi"  # the wheel's tags do not fit the runtime's CPython
    NO_CUDA = "no-cuda"  # it needs CUDA (libtorch_cuda.so, libcudart.so.N...); the runtime's torch has none
    CUDA_MAJOR = "cuda-major"  # it needs libcudart.so.N (or another CUDA-major library) of another major
    HOST_LIBRARY = "host-library"  # it needs a library neither torch nor CUDA provides, and the runtime lacks it
    NO_DRIVER = "no-driver"  # it needs the NVIDIA driver's libraries (libcuda.so.1); the runner has no GPU driver


CONDITION_MEANING = {
    Condition.TORCH_ABI: "the stable-ABI promise: target T <= min(build B, runtime R) passes, T > R fails to load",
    Condition.BUILD: "the target is newer than the build torch: the headers cannot provide it",
    Condition.UNSTABLE: "an extension off the stable ABI: promised only on the torch it was built with",
    Condition.UNKNOWN_BUILD: "a published wheel off the stable ABI whose metadata and files name no build torch: "
    "nothing is promised, not even on one release",
    Condition.CONTROL: "a negative control, built to fail this way wherever it loads",
    Condition.PYTHON_ABI: "the wheel's tags fit no tag of the runtime's CPython",
    Condition.NO_CUDA: "the build needs CUDA libraries; the runtime's torch is a build without CUDA",
    Condition.CUDA_MAJOR: "the build needs a CUDA major the runtime's torch does not ship",
    Condition.HOST_LIBRARY: "a module needs a library that neither torch nor CUDA provides (a codec, a BLAS), "
    "and the runtime's system lacks it",
    Condition.NO_DRIVER: "a module needs the NVIDIA driver's libraries (libcuda.so.1, libnvidia-*), which only a "
    "machine with a GPU driver has; this runner has none",
}

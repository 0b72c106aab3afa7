import cuda_ops
import pytest
import torch


class _NoHarness:
    """Outside the harness (plain pytest) a recorded difference from the documents goes nowhere."""

    @pytest.fixture
    def doc_difference(self):
        return lambda key, text: None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "covers(*items): conformance items a test proves (extensions/COVERAGE.md)")
    if not config.pluginmanager.has_plugin("harness_cellprobe"):
        config.pluginmanager.register(_NoHarness(), "doc_difference_outside_the_harness")


def pytest_report_header(config: pytest.Config) -> str:
    major, minor = cuda_ops.feature_version()
    devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return (
        f"cuda_ops built for stable-ABI level {major}.{minor}, loaded from {cuda_ops.__file__}; "
        f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees {devices} CUDA device(s)"
    )

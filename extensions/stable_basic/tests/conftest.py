import pytest
import stable_basic


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "covers(*items): conformance items a test proves (extensions/COVERAGE.md)")


def pytest_report_header(config: pytest.Config) -> str:
    major, minor = stable_basic.feature_version()
    return f"stable_basic built for stable-ABI level {major}.{minor}, loaded from {stable_basic.__file__}"

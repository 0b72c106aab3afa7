"""Compatibility harness for PyTorch extensions built on the LibTorch stable ABI.

Stages, one module each: config -> plan -> envs -> build -> run -> collect ->
verdict -> report. ``torch_abi_harness.run.pipeline`` chains them; ``torch_abi_harness.cli`` is the
only place that prints.
"""

__version__ = "0.1.0"

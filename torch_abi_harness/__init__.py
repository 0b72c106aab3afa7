"""torch-abi-harness: proves whether stable-ABI PyTorch extensions keep working across torch releases."""

__version__ = "0.1.0"

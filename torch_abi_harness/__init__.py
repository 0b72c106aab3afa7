"""torch-abi-harness: proves, by building and running them, whether stable-ABI PyTorch extensions keep working across torch releases."""

__version__ = "0.1.0"

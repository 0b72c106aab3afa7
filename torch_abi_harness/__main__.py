import sys

from torch_abi_harness.cli import main

sys.exit(main())

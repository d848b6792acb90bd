import sys

from exabench.cli import main

sys.exit(main())

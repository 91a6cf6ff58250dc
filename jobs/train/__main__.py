"""`python -m jobs.train`: see `jobs.train.cli`."""

import sys

from jobs.train.cli import main

if __name__ == "__main__":
    sys.exit(main())

import sys

from jobs.ingest.cli import main

sys.exit(main())

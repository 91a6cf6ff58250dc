"""`python -m jobs.bulk_qa`: the bulk QA job's command line."""

import sys

from jobs.bulk_qa.driver import main

sys.exit(main())

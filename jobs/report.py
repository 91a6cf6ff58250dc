"""
`python -m jobs.report OUT [--worst N]`: (re)writes `report.html` for a finished bulk-qa run (see
`jobs.bulk_qa.html_report`), for instance after `pip install '.[report]'`, or after `python -m jobs.evaluate`
wrote its `calibration.json`. The job writes the report itself at the end of every run.

Exit status: 0 when written, 1 when matplotlib is missing, 2 for a folder that holds no finished run.
"""

import argparse
import sys

from jobs.bulk_qa.html_report import REPORT_FILE, WORST, write_report
from jobs.bulk_qa.output import OutputFolder


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m jobs.report`."""
    parser = argparse.ArgumentParser(prog="python -m jobs.report", description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("run", help="the output folder of a finished bulk-qa run")
    parser.add_argument("--worst", type=int, default=WORST, help="questions in the worst-questions table")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    output = OutputFolder(args.run)
    manifest = output.read_json("manifest.json")
    if manifest is None:
        print(f"jobs.report: error: {output.shown} holds no finished run (no manifest.json).", file=sys.stderr)
        return 2
    if not write_report(output, manifest, args.worst):
        return 1
    print(output.table_path(REPORT_FILE))
    return 0


if __name__ == "__main__":
    sys.exit(main())

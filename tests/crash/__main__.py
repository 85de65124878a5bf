"""python -m tests.crash --report: run the crash matrix, print it as Markdown."""

from __future__ import annotations

import argparse
import sys

from tests.crash.harness import CELLS, run_cell


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.crash")
    parser.add_argument("--report", action="store_true", help="print the matrix as Markdown")
    args = parser.parse_args()
    rows, failed = [], 0
    for cell in CELLS:
        observed = run_cell(cell)
        failed += not observed.passed
        seen = f"{observed.requests.get('GET', 0)} GET, {observed.requests.get('POST', 0)} POST, " \
               f"{observed.refunds} refund{'s' if observed.refunds != 1 else ''}"
        rows.append(f"| {cell.point} | {cell.process} | {'yes' if cell.once else 'no'} | {cell.rule} | "
                    f"{'; '.join(dict.fromkeys(observed.rules)) or 'none needed'} | {seen} | "
                    f"{'pass' if observed.passed else 'FAIL: ' + '; '.join(observed.problems)} |")
    if args.report:
        print("| kill point | process | once | rule expected | rule observed | requests seen by the service | result |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

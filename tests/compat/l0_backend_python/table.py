"""The per-subtest table of the L0_backend_python harness, naiad and Triton side by side.

    python table.py RESULTS_DIR            # RESULTS_DIR/<server>/<subtest>/result.json
    python table.py --jsonl FILE           # rows written with NAIAD_L0_TABLE=FILE

Prints a markdown table (passed / failed / skipped rows per server and subtest) and, below
it, every failed or skipped row with its reason; rows asserting on Triton's exact log text
are marked.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

SERVERS = ("naiad", "triton")


def load(argv: list[str]) -> list[dict[str, object]]:
    if argv[1] == "--jsonl":
        return [json.loads(line) for line in Path(argv[2]).read_text().splitlines() if line]
    rows = []
    for result in sorted(Path(argv[1]).glob("*/*/result.json")):
        server, subtest = result.parent.parent.name, result.parent.name
        rows += [{"server": server, "subtest": subtest, **r}
                 for r in json.loads(result.read_text())]
    return rows


def main(argv: list[str]) -> int:
    rows = load(argv)
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    subtests: list[str] = []
    for r in rows:
        subtest, server = str(r["subtest"]), str(r["server"])
        if subtest not in subtests:
            subtests.append(subtest)
        counts[(subtest, server)][str(r["outcome"])] += 1
    print("| subtest | " + " | ".join(f"{s} passed / failed / skipped" for s in SERVERS) + " |")
    print("|---|" + "---|" * len(SERVERS))
    for subtest in subtests:
        cells = []
        for server in SERVERS:
            c = counts.get((subtest, server))
            cells.append("not run" if c is None else
                         f"{c['passed']} / {c['failed']} / {c['skipped']}")
        print(f"| {subtest} | " + " | ".join(cells) + " |")
    print()
    for r in rows:
        if r["outcome"] != "passed":
            mark = " (Triton log text)" if r.get("log_text") else ""
            detail = str(r["detail"]).strip().splitlines()
            print(f"- {r['server']} {r['subtest']} {r['outcome']}: {r['name']}{mark}: "
                  f"{detail[0][:200] if detail else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Mutation score of the pipeline modules from mutmut's results (run after ``mutmut run``).

Reads ``mutants/**/*.meta`` (mutmut's verdict per mutant) and ``.mutation/explained.tsv``
(surviving mutants judged equivalent or harmless, one per line: name, category, reason) and
prints, per module, the raw score (killed / all) and the mutation score with the explained
survivors left out as equivalent (killed / (all - explained)). Timeouts count as killed (the
mutant changed behaviour: it hung). Lists survivors that have no explanation; exits 1 when
there are any, or when a module's mutation score is below ``--target`` (default 90).

Usage: ``python .mutation/score.py [--target 90] [--markdown]``; ``--explained`` prints only the
table of explained survivors from ``explained.tsv`` (no ``mutants/`` needed), for docs/MUTATION.md
after an incremental run that did not re-run every function.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code

ROOT = Path(__file__).resolve().parent.parent
META = ROOT / "mutants" / "src" / "elastic_loader" / "_pipeline"
EXPLAINED = Path(__file__).resolve().parent / "explained.tsv"
KILLED = {"killed", "timeout", "caught by type check", "segfault"}


def load_explained() -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for line in EXPLAINED.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, category, reason = line.split("\t", 2)
        out[name] = (category, reason)
    return out


def print_explained(explained: dict[str, tuple[str, str]]) -> None:
    print("| mutant | category | why it survives |\n|---|---|---|")
    for name, (category, reason) in sorted(explained.items()):
        print(f"| `{name.removeprefix('elastic_loader._pipeline.')}` | {category} | {reason} |")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", type=float, default=90.0)
    parser.add_argument("--markdown", action="store_true", help="print the survivor table too")
    parser.add_argument("--explained", action="store_true", help="print the explained survivors only")
    args = parser.parse_args()
    explained = load_explained()
    if args.explained:
        print_explained(explained)
        return 0
    return score(args, explained)


def score(args: argparse.Namespace, explained: dict[str, tuple[str, str]]) -> int:
    """Print the score table (and with ``--markdown`` the survivors); 1 when a check fails."""
    metas = sorted(META.glob("*.py.meta"))
    if not metas:
        print("no mutmut results under mutants/: run `mutmut run` first", file=sys.stderr)
        return 2
    rows, unexplained, survivors, failing = [], [], [], []
    totals: Counter[str] = Counter()
    for meta in metas:
        module = meta.name.removesuffix(".meta")
        verdicts = json.loads(meta.read_text())["exit_code_by_key"]
        counts: Counter[str] = Counter()
        for name, code in verdicts.items():
            status = status_by_exit_code[code]
            if status in KILLED:
                counts["killed"] += 1
            elif status == "not checked":
                counts["not checked"] += 1
            else:
                counts["survived"] += 1
                if name in explained:
                    counts["explained"] += 1
                    survivors.append((name, status, *explained[name]))
                else:
                    unexplained.append((name, status))
        counts["total"] = len(verdicts)
        totals.update(counts)
        raw = 100 * counts["killed"] / counts["total"]
        adjusted = 100 * counts["killed"] / max(1, counts["total"] - counts["explained"])
        if adjusted < args.target:
            failing.append(module)
        rows.append((module, counts, raw, adjusted))
    print("| module | mutants | killed | survived | explained | not run | killed / all | killed / (all - explained) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for module, c, raw, adjusted in [*rows, ("all", totals, 0.0, 0.0)]:
        if module == "all":
            raw = 100 * c["killed"] / c["total"]
            adjusted = 100 * c["killed"] / max(1, c["total"] - c["explained"])
        print(
            f"| {module} | {c['total']} | {c['killed']} | {c['survived']} | {c['explained']} | "
            f"{c['not checked']} | {raw:.1f}% | {adjusted:.1f}% |"
        )
    if args.markdown:
        print("\n| mutant | verdict | category | why it survives |\n|---|---|---|---|")
        for name, status, category, reason in sorted(survivors):
            short = name.removeprefix("elastic_loader._pipeline.")
            print(f"| `{short}` | {status} | {category} | {reason} |")
    if unexplained:
        print(f"\n{len(unexplained)} surviving mutants without an explanation (`mutmut show NAME`):")
        for name, status in unexplained:
            print(f"  {name} ({status})")
    stale = sorted(set(explained) - {name for name, *_ in survivors})
    if stale:  # killed by a later test, or renumbered when their function changed
        print(f"\n{len(stale)} explanations name no surviving mutant (remove them from explained.tsv):")
        for name in stale:
            print(f"  {name}")
    if failing:
        print(f"\nmutation score below {args.target}% in: {', '.join(failing)}")
    return 1 if unexplained or failing else 0


if __name__ == "__main__":
    sys.exit(main())

"""Write what the library defines into the docs, so that no verdict, timing or default is typed by hand.

The README and notebooks/README.md quote the claims' rows shipped with the package
(`explorer.papers.claims.recorded()`) and the settings (`explorer.settings.SETTINGS`) between marker lines:

    <!-- sync:NAME -->
    ...generated text...
    <!-- /sync:NAME -->

NAME is `rule` (the verdict rule in two sentences), `summary` (the verdicts counted), `about` (when, where and how the rows were recorded), `table`
(every claim: verdict, what was measured, seconds), `timing` (each paper's claim seconds) or `verdicts:PAPER`
(one paper's verdicts, for the course plan) or `settings` (every environment variable, its default and what it
sets). `python docs/sync.py` rewrites every block; `python docs/sync.py --check` exits 1 and names the stale
files (tests/test_docs_sync.py runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

from explorer.papers.base import PAPERS
from explorer.papers.claims import FULL_MODE_BUDGET_S, RULE_SUMMARY, duration, recorded
from explorer.settings import SETTINGS

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", ROOT / "notebooks" / "README.md")
BLOCK = re.compile(r"^(?P<indent>[ \t]*)<!-- sync:(?P<name>[a-z0-9:-]+) -->\n(?P<body>.*?)"
                   r"^(?P=indent)<!-- /sync:(?P=name) -->$", re.S | re.M)
WORDS = {"holds": "holds", "does-not-hold": "does not hold", "inconclusive": "inconclusive",
         "not-tested": "not tested", "error": "error"}


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _verdict(row: dict) -> str:
    stale = " (stale: its check changed after it was recorded)" if row.get("stale") else ""
    return f"**{WORDS.get(row['verdict'], row['verdict'])}**{stale}"


def _seeds(row: dict) -> str:
    """ "3 seeds" from the row's mode label ("full mode, 3 seeds, cpu scale")."""
    parts = row["mode"].split(", ")
    return parts[1] if len(parts) > 2 else row["mode"]


def table(rows: list[dict]) -> str:
    lines = ["| claim | verdict | seeds | what was measured | seconds |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| `{row['paper']}/{row['id']}` ({_cell(row['section'])}) | {_verdict(row)} | {_seeds(row)} | "
                     f"{_cell(row.get('summary') or row.get('reason', ''))} | {round(row['seconds'])} |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    counts = Counter(WORDS.get(r["verdict"], r["verdict"]) for r in rows)
    plural = {"holds": "hold", "does not hold": "do not hold"}
    told = ", ".join(f"{n} {plural.get(word, word) if n != 1 else word}" for word, n in counts.most_common())
    seconds = sum(r["seconds"] for r in rows)
    return (f"The {len(rows)} claims recorded with the package: {told}. Their full-mode runs took "
            f"{duration(seconds)} of wall-clock time with two worker processes (the rows' own seconds, summed).")


def about(info: dict) -> str:
    recordings = [info, *info.get("earlier", [])]
    dates = sorted({r.get("date", "?") for r in recordings})
    span = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    per_paper = info.get("per_paper_wall_seconds") or {}
    walls = "; ".join(f"{paper} {duration(s)}" for paper, s in per_paper.items())
    return (f"Recorded {span} on {info.get('machine', '?')} (torch {info.get('torch', '?')}), commit "
            f"{info.get('commit', '?')}: `{info.get('command', '?')}`"
            + (f"; wall-clock per paper: {walls}" if walls else "")
            + (f"; load average {info['load_average']}" if info.get("load_average") else "")
            + ". `explorer claims --recorded` prints each row with its mode, seconds and machine.")


def timing(rows: list[dict]) -> str:
    lines = ["| paper | claims | full mode, summed seconds (2 workers) | the longest claim |", "|---|---|---|---|"]
    for paper in PAPERS:
        mine = [r for r in rows if r["paper"] == paper]
        if not mine:
            continue
        longest = max(mine, key=lambda r: r["seconds"])
        lines.append(f"| {paper} | {len(mine)} | {duration(sum(r['seconds'] for r in mine))} | "
                     f"`{longest['id']}`, {duration(longest['seconds'])} |")
    lines.append(f"| **all** | {len(rows)} | **{duration(sum(r['seconds'] for r in rows))}** | |")
    return "\n".join(lines)


def budget(rows: list[dict]) -> str:
    spent = {paper: sum(r["seconds"] for r in rows if r["paper"] == paper) for paper in PAPERS}
    within = [f"{paper} {duration(s)}" for paper, s in spent.items() if s <= FULL_MODE_BUDGET_S]
    over = [f"{paper} {duration(s)}" for paper, s in spent.items() if s > FULL_MODE_BUDGET_S]
    return (f"The budget: one paper's claims take at most {duration(FULL_MODE_BUDGET_S)} in full mode with "
            "`--workers 2` on a 2-core machine (the rows' own seconds, summed). "
            + (f"Within it: {', '.join(within)}. " if within else "")
            + (f"Over it: {', '.join(over)}." if over else "Every paper is within it."))


def verdicts(rows: list[dict], paper: str) -> str:
    mine = [r for r in rows if r["paper"] == paper]
    if not mine:
        return f"No recorded claims of {paper}."
    return ("Recorded in full mode: " + "; ".join(f"`{r['id']}` {_verdict(r)} ({_seeds(r)})" for r in mine) + ".")


def settings() -> str:
    lines = ["| variable | default | what it sets |", "|---|---|---|"]
    for s in SETTINGS.values():
        default = s.shown_default or f"{s.default}"
        lines.append(f"| `{s.name}` | {default} | {_cell(s.doc or s.sets)} |")
    return "\n".join(lines)


def render(name: str, stored: dict) -> str:
    """The generated text of block `name` (without its marker lines)."""
    rows = stored["rows"]
    if name.startswith("verdicts:"):
        paper = name.split(":", 1)[1]
        if paper not in PAPERS:
            raise SystemExit(f"docs: block sync:{name} names no paper; papers: {', '.join(PAPERS)}")
        return verdicts(rows, paper)
    makers = {"summary": lambda: summary(rows), "about": lambda: about(stored["about"]),
              "table": lambda: table(rows), "timing": lambda: timing(rows), "budget": lambda: budget(rows),
              "settings": settings, "rule": lambda: RULE_SUMMARY}
    if name not in makers:
        raise SystemExit(f"docs: unknown block sync:{name}; use one of {', '.join(makers)}, verdicts:PAPER")
    return makers[name]()


def rewrite(text: str, stored: dict) -> str:
    """`text` with every recorded block regenerated, indented as its marker lines are (a block in a list item)."""
    def block(m: re.Match) -> str:
        indent, name = m.group("indent"), m.group("name")
        body = "\n".join(indent + line for line in render(name, stored).splitlines())
        return f"{indent}<!-- sync:{name} -->\n{body}\n{indent}<!-- /sync:{name} -->"

    return BLOCK.sub(block, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 naming the stale files")
    args = parser.parse_args(argv)
    stored = recorded()
    stale = []
    for path in DOCS:
        text = path.read_text()
        new = rewrite(text, stored)
        if new != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"docs differ from what the library defines: {', '.join(map(str, stale))}; "
              "run `python docs/sync.py` to rewrite them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

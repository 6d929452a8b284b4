#!/usr/bin/env python3
"""The plain table of an upstream e2e run, from ginkgo's JUnit XML.

    conformance-report.py table JUNIT [--causes TSV] [--subset FILE] [--title T]
        every spec that ran with passed/failed and the first line of each
        failure; the failures grouped by cause (the first line of TSV whose
        regex matches "<spec> <failure>"; TSV lines are REGEX<TAB>CAUSE);
        last line "N passed, M failed". With --subset, also every spec of FILE
        that did not run, and exit 1 unless all of FILE's specs passed.
    conformance-report.py focus FILE
        the ginkgo --focus regex that selects exactly FILE's specs

Spec names are the JUnit test case names less ginkgo's "[It] " prefix and
label suffix, the same text `e2e.test --list-tests` shows.
"""

import argparse
import re
import sys
import xml.etree.ElementTree as ET

FAILED = {"failed", "panicked", "interrupted", "aborted", "timedout"}
# ginkgo's suite-level nodes, which JUnit lists beside the specs
SUITE_NODE = re.compile(r"^\[(Synchronized)?(Before|After)Suite\]|^\[Report(Before|After)Suite\]|^\[DeferCleanup")


def spec_name(case):
    name = case.get("name", "")
    name = re.sub(r"^\[It\]\s+", "", name)
    # ginkgo appends the spec's labels as " [label, label]"
    return re.sub(r"\s+\[[^\[\]]*(, [^\[\]]*)+\]$", "", name).strip()


def read_subset(path):
    with open(path, encoding="utf-8") as f:
        return [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]


def first_line(text):
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            return line
    return ""


def results(junit):
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        status = case.get("status", "")
        if status not in FAILED and status != "passed":
            continue  # skipped or pending: not selected
        name = spec_name(case)
        if not name or SUITE_NODE.match(name):
            continue
        message = ""
        for tag in ("failure", "error"):
            el = case.find(tag)
            if el is not None:
                message = first_line(el.get("message")) or first_line(el.text)
                break
        out[name] = ("passed" if status == "passed" else "failed", message)
    return out


def read_causes(path):
    causes = []
    if not path:
        return causes
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            regex, _, cause = line.rstrip("\n").partition("\t")
            if not cause:
                sys.exit(f"{path}:{n}: expected REGEX<TAB>CAUSE")
            causes.append((re.compile(regex), cause.strip()))
    return causes


def table(args):
    res = results(args.junit)
    subset = read_subset(args.subset) if args.subset else None
    causes = read_causes(args.causes)
    width = min(110, max([len(n) for n in res] + [20]))
    lines = []
    if args.title:
        lines += [f"Conformance: {args.title}", ""]
    lines.append(f"{'spec':<{width}}  result  first line of failure")
    lines.append(f"{'-' * width}  ------  ---------------------")
    for name in sorted(res):
        status, message = res[name]
        shown = name if len(name) <= width else name[: width - 1] + "…"
        lines.append(f"{shown:<{width}}  {status:<6}  {message[:160] if status == 'failed' else ''}".rstrip())
    missing = [n for n in subset if n not in res] if subset is not None else []
    for name in missing:
        lines.append(f"{name:<{width}}  absent  (in the subset, but the run has no such spec)")
    groups = {}
    for name, (status, message) in res.items():
        if status != "failed":
            continue
        cause = next((c for r, c in causes if r.search(f"{name} {message}")), "unclassified")
        groups.setdefault(cause, []).append(name)
    if groups:
        lines += ["", "Failures by cause:"]
        for cause, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            lines.append(f"  {len(names):3}  {cause}")
            lines += [f"         - {n}" for n in sorted(names)]
    passed = sum(1 for s, _ in res.values() if s == "passed")
    failed = len(res) - passed + len(missing)
    lines += ["", f"{passed} passed, {failed} failed"]
    print("\n".join(lines))
    if subset is not None:
        bad = missing + [n for n in subset if n in res and res[n][0] != "passed"]
        return 1 if bad else 0
    return 0


def focus(args):
    names = read_subset(args.file)
    if not names:
        sys.exit(f"{args.file}: no specs")
    # RE2 (Go's regexp) refuses escapes of characters that are not punctuation
    print("|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", n) for n in names))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table")
    t.add_argument("junit")
    t.add_argument("--causes")
    t.add_argument("--subset")
    t.add_argument("--title")
    f = sub.add_parser("focus")
    f.add_argument("file")
    args = p.parse_args()
    return table(args) if args.cmd == "table" else focus(args)


if __name__ == "__main__":
    sys.exit(main())

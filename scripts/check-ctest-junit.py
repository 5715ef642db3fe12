#!/usr/bin/env python3
"""Checks a ctest JUnit report: at least one test ran, none failed, none was
skipped or not run, and (with --required FILE) every listed test ran.
Prints 'LABEL: N passed, N failed' and exits non-zero on any problem."""
import argparse
import sys
import xml.etree.ElementTree as ET

ap = argparse.ArgumentParser()
ap.add_argument("junit")
ap.add_argument("--label", default="tests")
ap.add_argument("--required")
a = ap.parse_args()

try:
    root = ET.parse(a.junit).getroot()
except (OSError, ET.ParseError) as e:
    print(f"{a.label}: cannot read {a.junit}: {e}")
    sys.exit(1)
passed, failed, skipped = [], [], []
for tc in root.iter("testcase"):
    name = tc.get("name")
    status = tc.get("status", "run")
    if tc.find("failure") is not None or status == "fail":
        failed.append(name)
    elif tc.find("skipped") is not None or status in ("notrun", "disabled"):
        skipped.append(name)
    else:
        passed.append(name)
problems = []
if not passed and not failed:
    problems.append("no test ran")
if skipped:
    problems.append("skipped or not run: " + ", ".join(skipped))
if failed:
    problems.append("failed: " + ", ".join(failed))
if a.required:
    want = [l.strip() for l in open(a.required) if l.strip() and not l.startswith("#")]
    missing = [t for t in want if t not in passed]
    if missing:
        problems.append("required tests that did not pass: " + ", ".join(missing))
for p in problems:
    print(f"{a.label}: PROBLEM: {p}")
print(f"{a.label}: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
sys.exit(1 if problems else 0)

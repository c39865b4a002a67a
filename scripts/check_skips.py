#!/usr/bin/env python3
"""Fails when a test was skipped that tests/skips_allowed.txt does not allow.

    scripts/check_skips.py JUNIT_XML...

Reads JUnit XML (ctest --output-junit, pytest --junitxml) and prints every
skipped test with its reason. A skip is allowed when its name (classname::name
for pytest, the ctest name otherwise) matches a glob of the allow-list; each
entry there says why. A skip nobody expected means a test that proves nothing
on this machine, so CI fails on it (issue 39).
"""
import fnmatch
import pathlib
import sys
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parents[1]


def allowed_patterns():
    out = []
    for line in (ROOT / "tests" / "skips_allowed.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def skipped(path):
    for case in ET.parse(path).getroot().iter("testcase"):
        s = case.find("skipped")
        if s is None:
            continue
        name = case.get("name", "")
        cls = case.get("classname", "")
        yield (f"{cls}::{name}" if cls and cls != name else name), (s.get("message") or s.text or "").strip()


def main(paths):
    patterns = allowed_patterns()
    bad = 0
    for p in paths:
        for name, why in skipped(p):
            ok = any(fnmatch.fnmatchcase(name, pat) for pat in patterns)
            print(f"check_skips: {'allowed' if ok else 'UNEXPECTED'} skip: {name}: {why[:200]}")
            bad += not ok
    if bad:
        print(f"check_skips: {bad} unexpected skip(s); fix the test or its setup, or allow it in "
              f"tests/skips_allowed.txt with the reason", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

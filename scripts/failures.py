"""The failed tests of a run, from its JUnit files, printed where a reader of the run's last lines finds them
(scripts/test.sh calls it just before its timing table): each failure's test and the end of its report, where
pytest puts the assertion. A long run's output is often seen only from its end.

usage: python3 scripts/failures.py JUNIT_FILE...   (missing or unreadable files are named and skipped)"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from typing import Iterator, List, Tuple

MAX_FAILURES = 8  # failures shown; the rest counted
MAX_LINES = 25  # the end of each failure's report
MAX_LINE = 300  # characters of each of its lines


def failures(path: str) -> Iterator[Tuple[str, List[str]]]:
    """(test, the end of its report) for each failed or erroring test case in the JUnit file ``path``."""
    for case in ET.parse(path).getroot().iter("testcase"):
        for problem in [*case.findall("failure"), *case.findall("error")]:
            text = (problem.text or problem.get("message") or "").rstrip().splitlines()
            name = "%s::%s" % (case.get("classname", "?"), case.get("name", "?"))
            yield name, [line[:MAX_LINE] for line in text[-MAX_LINES:]]


def main(paths: List[str]) -> int:
    found: List[Tuple[str, List[str]]] = []
    for path in paths:
        try:
            found.extend(failures(path))
        except (OSError, ET.ParseError) as exc:
            print("(%s: not read: %s)" % (path, exc))
    if not found:
        return 0
    print("\n--- failed tests (%d), each with the end of its report ---" % len(found))
    for name, lines in found[:MAX_FAILURES]:
        print("\nFAILED %s" % name)
        for line in lines:
            print("  " + line)
    if len(found) > MAX_FAILURES:
        print("\n... and %d more (the stages' output above has them all)" % (len(found) - MAX_FAILURES))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

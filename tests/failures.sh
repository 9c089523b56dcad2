#!/bin/sh
# Names the tests a Criterion run did not pass, from its XML report, after the run's own output.
#
# Why: CI shows only the last lines of what `make unit` printed, and Criterion prints a failure
# when it happens, hundreds of lines above its closing "Synthesis" line. This makes the tail of
# a failed run say which tests failed and why: suite::test, how it ended (failed, crashed, timed
# out) and the assertion messages Criterion recorded.
#
# Usage: tests/failures.sh REPORT.xml
report=${1:?usage: tests/failures.sh REPORT.xml}
[ -r "$report" ] || { echo "failures.sh: no report at $report (the test binary did not finish)"; exit 0; }
awk '
  function attr(line, key,    m) {
    if (match(line, key "=\"[^\"]*\"")) return substr(line, RSTART + length(key) + 2, RLENGTH - length(key) - 3)
    return ""
  }
  /<testsuite /               { suite = attr($0, "name") }
  /<testcase /                { test = attr($0, "name"); status = attr($0, "status"); inside = status != "PASSED"
                                if (inside) { n++; printf "[NOT PASSED] %s::%s: %s\n", suite, test, status } }
  inside && /<(failure|error) / { kind = attr($0, "type"); if (kind != "assert") printf "    %s: %s\n", kind, attr($0, "message") }
  inside && /CDATA\[/         { line = $0
                                while ((at = index(line, "CDATA[")) && (end = index(substr(line, at), "]]>"))) {
                                  printf "    %s\n", substr(line, at + 6, end - 7); line = substr(line, at + end + 2) } }
  /<\/testcase>/              { inside = 0 }
  END { if (n) printf "%d test(s) did not pass (above: suite::test, how it ended, its messages)\n", n }
' "$report"

#!/usr/bin/env bash
# Runs every fuzz target in the module for FUZZTIME each (default 60s), one
# after another, one worker each (-parallel, default 1). Findings are written
# by Go to the package's testdata/fuzz/<Target>/ and then run as regression
# cases by every `go test`; the script stops at the first finding.
# Prints one line per target: package, target, executions, new inputs.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-60s}
PARALLEL=${PARALLEL:-1}
GO=${GO:-go}
total=0
for pkg in $($GO list ./...); do
	targets=$($GO test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true)
	for t in $targets; do
		out=$($GO test -run '^$' -fuzz "^${t}\$" -fuzztime "$FUZZTIME" -parallel "$PARALLEL" "$pkg" 2>&1) || {
			echo "$out" | tail -30
			echo "FINDING: $pkg $t"
			exit 1
		}
		last=$(echo "$out" | grep '^fuzz: elapsed' | tail -1)
		execs=$(echo "$last" | sed -n 's/.*execs: \([0-9]*\).*/\1/p')
		newi=$(echo "$last" | sed -n 's/.*new interesting: \([0-9]*\).*/\1/p')
		printf '%-55s %-26s %10s execs %5s new inputs\n' "${pkg#github.com/meridian-coord/meridian/}" "$t" "${execs:-?}" "${newi:-?}"
		total=$((total + ${execs:-0}))
	done
done
echo "all fuzz targets: $total executions in total, no finding (FUZZTIME=$FUZZTIME each)"

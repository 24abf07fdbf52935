#!/bin/sh
# Lists the Go packages whose tests need no control plane and build no
# trainops binary: none of their test files calls testenv.Main,
# testenv.Start or testenv.BuildTrainops (nor, in testenv itself, Main or
# Start). `make test-unit` runs them, for the edit loop; `make test` runs
# everything.
set -eu
cd "$(dirname "$0")/.."
find . -name '*_test.go' -not -path './hack/tools/*' -not -path './bin/*' -exec dirname {} \; | sort -u | while read -r dir; do
	if ! grep -qE -e 'testenv\.(Main|Start|BuildTrainops)\(' -e '(^|[^.A-Za-z])(Main|Start)\((m|ctx)' "$dir"/*_test.go; then
		echo "$dir"
	fi
done

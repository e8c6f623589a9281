#!/usr/bin/env bash
# Submit result files with the Ablate CLI (pip install the project, or use its image):
#
#   ABLATE_TOKEN=... examples/ci/submit_cli.sh http://ablate.example:8000 results/*.json
#
# `ablate results submit` sends each file as one batch with Idempotency-Key = sha256 of the file,
# retries connection errors and 5xx with back-off, prints the run ids, and exits 1 naming the
# field the server refused.
set -euo pipefail

server="${1:?usage: submit_cli.sh SERVER_URL RESULTS.json...}"
shift
[ "$#" -gt 0 ] || { echo "usage: submit_cli.sh SERVER_URL RESULTS.json..." >&2; exit 2; }
: "${ABLATE_TOKEN:?set ABLATE_TOKEN to a token with the submit scope}"

exec ablate results submit "$@" --server "$server" --retries 5

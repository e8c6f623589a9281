#!/usr/bin/env bash
# Submit a result file to Ablate with plain curl: POST /api/v1/results.
#
#   ABLATE_SERVER_URL=http://ablate.example:8000 ABLATE_TOKEN=... \
#     examples/ci/submit_curl.sh examples/results/sample-results.json
#
# The file is one batch ({"results": [...]}), stored all or nothing. The Idempotency-Key is the
# sha256 of the file, so re-running the job (or retrying after a dropped connection) never stores
# a result twice: the server answers a repeat with the run ids of the first submission. This is
# the same key `ablate results submit` derives, so both clients may retry each other's uploads.
set -euo pipefail

file="${1:?usage: submit_curl.sh RESULTS.json}"
server="${ABLATE_SERVER_URL:?set ABLATE_SERVER_URL, e.g. http://localhost:8000}"
token="${ABLATE_TOKEN:?set ABLATE_TOKEN to a token with the submit scope}"

key="sha256:$(sha256sum "$file" | cut -d' ' -f1)"

# --retry also retries 5xx and connection failures; the stable key makes that safe.
curl --fail-with-body --silent --show-error \
  --retry 5 --retry-all-errors --retry-delay 2 \
  -X POST "${server%/}/api/v1/results" \
  -H "Authorization: Bearer ${token}" \
  -H "Idempotency-Key: ${key}" \
  -H "Content-Type: application/json" \
  --data-binary "@${file}"
echo

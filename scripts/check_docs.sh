#!/usr/bin/env bash
# Fails when a tracked Markdown file is larger than a document can sensibly be
# (512 KiB): a scripted edit that matched everywhere (an empty pattern) once
# inserted a paragraph before every character of docs/performance.md (86 MB),
# and nothing caught it. The largest hand-written document is ~130 KB.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=$((512 * 1024))
status=0
while IFS= read -r -d '' f; do
  size=$(stat -c %s "$f")
  if [ "$size" -gt "$limit" ]; then
    echo "check_docs: $f is $size bytes (limit $limit): a runaway edit?" >&2
    status=1
  fi
done < <(git ls-files -z '*.md')
[ "$status" = 0 ] && echo "check_docs: clean"
exit "$status"

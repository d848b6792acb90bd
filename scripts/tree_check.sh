#!/usr/bin/env bash
# The test suite writes under its temporary folders and the ignored results/, never beside the code:
# a file left in the tree (a job's slurm-<id>.out in the directory pytest ran in) is committed by the
# next `git add -A`. `before` notes the untracked files there are; `after` fails naming any new one.
# Outside a git checkout (an unpacked archive) there is nothing to compare and both pass.
set -euo pipefail
cd "$(dirname "$0")/.."
noted=.pytest_cache/untracked-before-tests
git rev-parse --is-inside-work-tree > /dev/null 2>&1 || exit 0
mkdir -p .pytest_cache
case "${1:-}" in
  before) git ls-files --others --exclude-standard | sort > "$noted" ;;
  after)
    [ -f "$noted" ] || exit 0
    new=$(git ls-files --others --exclude-standard | sort | comm -13 "$noted" -)
    if [ -n "$new" ]; then
      echo "the tests left files in the source tree (write them under tmp_path or results/):" >&2
      echo "$new" | sed 's/^/  /' >&2
      exit 1
    fi ;;
  *) echo "usage: $0 before|after" >&2; exit 2 ;;
esac

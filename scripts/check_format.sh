#!/usr/bin/env bash
# Fails when a hand-written C or C++ file is not as .clang-format says
# (clang-format --dry-run -Werror; the generated Unicode and WordPiece tables excepted).
# Fix with: scripts/check_format.sh --fix
set -euo pipefail
cd "$(dirname "$0")/.."
mode=(--dry-run -Werror)
[ "${1:-}" = "--fix" ] && mode=(-i)
git ls-files -z 'src/*.cc' 'src/*.h' 'src/*.inc' 'fuzz/*.cc' 'tests/*.c' 'tools/*.cc' 'tools/*.h' |
  grep -zvE '^src/tokenizer/(unicode|wordpiece)_tables\.cc$' | xargs -0 clang-format "${mode[@]}"
echo "check_format: clean"

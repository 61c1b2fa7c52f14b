#!/usr/bin/env bash
# Prints a directory holding Node >= 22.12 for PATH, installing Node 24 LTS from the npm
# registry into .tools/node24 when the machine's node is older.
# Usage:  export PATH="$(bash scripts/node24.sh):$PATH"
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if command -v node >/dev/null 2>&1 && node -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>22||(a===22&&b>=12)?0:1)'; then
  dirname "$(command -v node)"
  exit 0
fi
dir="$root/.tools/node24"
if [ ! -x "$dir/bin/node" ]; then
  (cd /tmp && npm install -g --prefix "$dir" node@24 >/dev/null 2>&1)
fi
echo "$dir/bin"

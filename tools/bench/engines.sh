#!/usr/bin/env bash
# The embedded store's engines side by side: the `engines` section of edgehook-bench once per
# engine, in alternating rounds, so every engine meets the same spells of this machine.
#   tools/bench/engines.sh [rounds] [engine ...]     (default: 2 rounds of sqlite fjall)
# Each run's table is printed under a header naming its round and engine; the servers' log
# lines are dropped. Build first: cargo build --release -p edgehook-bench.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-2}"
shift || true
engines=("$@")
[ "${#engines[@]}" -gt 0 ] || engines=(sqlite fjall)
bench=target/release/edgehook-bench
[ -x "$bench" ] || { echo "build it first: cargo build --release -p edgehook-bench"; exit 1; }
for round in $(seq 1 "$rounds"); do
  for engine in "${engines[@]}"; do
    echo "== round $round: $engine"
    "$bench" --store "$engine" engines 2>/dev/null | grep -v '^{'
  done
done

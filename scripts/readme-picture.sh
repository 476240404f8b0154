#!/usr/bin/env bash
# The picture on the README's front page: the demo's memory over time on its simulated
# 24 GiB card (the reserved layer, the card's capacity, the peak and the failed
# allocation, its memory stacked by the categories it names), as `vramtrace timeline --svg`
# and the report's plot draw it.
# Run ./scripts/demo.sh first: it leaves demo-traces/.
set -euo pipefail
cd "$(dirname "$0")/.."
target/release/vramtrace timeline --svg docs/demo-timeline.svg --force demo-traces > /dev/null

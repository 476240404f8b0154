#!/usr/bin/env bash
# The demo: a training loop that runs a simulated 24 GiB card out of memory, traced by
# vramtrace, then explained. No GPU needed.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
rm -rf demo-traces
# The demo ends with the CUDA error, as a real run would: vramtrace exits with its status.
target/release/vramtrace run --sim --sim-capacity 24GiB -o demo-traces -- target/release/sim/demo || true
target/release/vramtrace summary demo-traces

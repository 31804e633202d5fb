#!/usr/bin/env bash
# Regenerates the analyzer goldens from real runs: `make goldens` (root).
# Each golden is a results folder's trace.pcapng, facts.json (what the
# analysis reads), summary.json and plan.json (for people)
# under crates/analyze/tests/golden/<name>/, plus findings.json, the
# analyzers' findings on it, written by the golden test with WIRELAB_BLESS=1.
# Review the diff before committing: the hand-written assertions in
# crates/analyze/tests/golden.rs must still hold.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
declare -A goldens=(
  [fast-retransmit]=specs/tcp/drop-5th-packet-recovered-by-fast-retransmit.yaml
  [timeouts-back-off]=specs/tcp/drop-5th-packet-three-times-timeouts-back-off.yaml
  [tail-loss-probe]=specs/tcp/drop-last-two-packets-recovered-by-tail-loss-probe.yaml
  [ecn]=specs/tcp/ecn-mark-is-echoed-by-the-receiver.yaml
  [incast]=specs/tcp/incast-4-senders-one-drop-each-all-recover.yaml
)
for name in "${!goldens[@]}"; do
  spec=${goldens[$name]}
  ./target/release/wirelab run "$spec" --out "$out" >/dev/null
  dir=crates/analyze/tests/golden/$name
  mkdir -p "$dir"
  res=$(ls -d "$out"/*/ | head -n 1)
  cp "$res"/trace.pcapng "$res"/facts.json "$res"/summary.json "$res"/plan.json "$dir"/
  rm -rf "$res"
  echo "golden $name <- $spec"
done
WIRELAB_BLESS=1 cargo test --release --locked -p wirelab-analyze --test golden

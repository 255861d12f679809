#!/usr/bin/env bash
# Serve a copy of a model repository in which every model that has `dynamic_batching` also
# turns on naiad's adaptive batching (`parameters { key: "naiad.adaptive_batching" ... }`).
# It lets the shared bench (../../shared/bench), whose repository layouts are fixed, run
# naiad's opt-in mode next to Triton's batcher:
#   benchmarks/serve_adaptive.sh REPO SCRATCH_DIR [naiad serve flags...]
set -euo pipefail
repo="$1" scratch="$2"
shift 2
copy="$scratch/adaptive-repo"
rm -rf "$copy"
cp -rL "$repo" "$copy"
for config in "$copy"/*/config.pbtxt; do
    if grep -q dynamic_batching "$config"; then
        printf '\nparameters { key: "naiad.adaptive_batching" value { string_value: "true" } }\n' \
            >> "$config"
    fi
done
exec "${NAIAD:-$(dirname "$0")/../.venv/bin/naiad}" serve --model-repository "$copy" "$@"

#!/usr/bin/env bash
# GPU smoke run (infra/gpu/smoke.py): SFT 50 steps ZeRO-2 on the default model, APPO 2 iterations with
# vllm serve rollouts (16 episodes each, weights reloaded in place), 20 SAO updates publishing weights,
# the RL updates on DeepSpeed ranks (every visible GPU); one table of what ran and how fast.
#   infra/gpu/smoke.sh [--ranks N] [--base DIR] [--out DIR]
#   infra/gpu/smoke.sh --cpu     # 2 CPU ranks, the tiny preset, small counts (what tests/test_gpu_smoke.py runs)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
py="${PYTHON:-$here/.venv/bin/python}"
[ -x "$py" ] || py="$(command -v python3)"
exec "$py" "$here/infra/gpu/smoke.py" "$@"

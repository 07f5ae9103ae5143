#!/usr/bin/env bash
# The GPU machine's acceptance runs, in one go, logs under $1 (default ./gpu-logs):
# the kernel and training tests, a 1000-update training from the README's
# command, the seed and placed layouts side by side, compute-sanitizer over
# ten updates, PyTorch's peak memory, and the benchmark. Run from the
# repository root on a machine with a GPU; $2 runs one part only (tests,
# train, sanitize or bench; default all).
# Every step runs; the exit status is the last failing step's (0: all passed);
# an unknown part, planner not installed or no GPU: one line, status 2, nothing run.
set -uo pipefail
out=${1:-gpu-logs}
part=${2:-all}
case "$part" in
  tests|train|sanitize|bench|all) ;;
  *) echo "gpu_acceptance: no part named $part (tests, train, sanitize, bench or all)" >&2; exit 2 ;;
esac
if ! missing=$(python3 -c '
import sys
try:
    from planner.runtime.cuda import NoDevice, open_gpu
except ImportError as error:
    sys.exit(f"planner is not installed ({error})")
try:
    open_gpu()
except NoDevice as error:
    sys.exit(str(error))
' 2>&1); then
  echo "gpu_acceptance: $missing" >&2
  exit 2
fi
mkdir -p "$out"
export PYTHONUNBUFFERED=1
failed=0
step() {
  local name=$1; shift; echo "== $name"
  "$@" 2>&1 | tee "$out/$name.log" | tail -n 25
  local status=${PIPESTATUS[0]}
  [ "$status" -eq 0 ] || { echo "== $name failed (exit status $status)"; failed=$status; }
}
case "$part" in
  tests|all)
    step tests python3 -m pytest tests/test_kernels_gpu.py tests/test_training_gpu.py -s -p no:cacheprovider ;;&
  train|all)
    step train script -qec "planner train --steps 1000 --validate-every 100 --checkpoint-every 500 --out $out/run" "$out/train.tty"
    for layout in seed placed; do
      step "layout-$layout" planner train --steps 50 --layout $layout --out "$out/$layout" --quiet
    done
    python3 - "$out" <<'PY'
import json, sys
from safetensors.numpy import load_file
out = sys.argv[1]
loss = lambda d: [json.loads(l)["loss"] for l in open(f"{out}/{d}/metrics.jsonl") if '"loss"' in l]
a, b = load_file(f"{out}/seed/checkpoint.safetensors"), load_file(f"{out}/placed/checkpoint.safetensors")
same = loss("seed") == loss("placed") and all((a[k] == b[k]).all() for k in a)
print(f"seed and placed layouts bit-identical over 50 updates: {same}")
sys.exit(0 if same else 1)
PY
    [ $? -eq 0 ] || failed=1
    ;;&
  sanitize|all)
    # compute-sanitizer over ten updates with launches one by one (a report
    # names its launch's host frame): memcheck and synccheck must find
    # nothing. Errors returned by CUDA calls are not its to report: our code
    # checks each, and cuda-python, opening the driver, asks it for entry
    # points it may lack (CUDA_ERROR_INVALID_VALUE from cuGetProcAddress).
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck synccheck; do
      step "sanitize-$tool" "$cs" --tool $tool --report-api-errors no --error-exitcode 9 --print-limit 20 \
        planner train --steps 10 --validate-every 0 --no-graphs --out "$out/sanitize-$tool" --quiet
    done ;;&
  bench|all)
    step peaks python3 scripts/torch_peaks.py "$out/peaks.json"
    step table planner place --table --peaks "$out/peaks.json"
    step bench planner bench --batches 1,8 --json "$out/bench.json" ;;
esac
exit $failed

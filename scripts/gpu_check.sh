#!/usr/bin/env bash
# The GPU check in ONE device call of at most 10 minutes, from the repo root:
#
#   source scripts/gpu_env.sh && scripts/gpu_check.sh      # (gpu_env: where optuna/mlflow are missing)
#
# Parts, in order of what the acceptance needs first, each under its own time budget
# (`timeout`), each writing its log and results as it goes (PARTS="bench86 parity ..." picks some):
#   bench86   `cem-ablate bench --gpu --sizes 86M`: sequence 2048, batch 8, bf16, eager and
#             compiled, HF Llama (SDPA) reference, each case profiled for 2 steps (kernels by
#             category, GPU busy fraction), the GPU targets;
#   parity    `python -m cem_ablate.bench.train_parity`: `cem-ablate train` (Lightning) vs the
#             bench step, Llama 86M compiled bf16, the same batch (target >= 0.95);
#   bench162  `cem-ablate bench --gpu --sizes 162M` (the references, CEM attention T = 1, full CEM T = 2);
#   tests     `pytest -m cuda tests/cuda`, the training-step files first: the flex fp32 gap table
#            , the chunked head + loss unit and fused AdamW, the profile's
#             categories, no GPU sync on ordinary training steps, then kernels vs the float64
#             reference, fullgraph compile, bf16-mixed training (the whole set took 295 s cold
#             on an H100: with the default budgets it may be cut short; the table
#             says so, and PARTS=tests runs it in a call of its own);
#   kernels   (only with time left) the CEM attention kernels side by side at 86M, eager.
# Every part runs whatever happened before it (the exit status is 1 if any part failed); a part that fails or runs out of time is
# recorded as such and the next one starts. The whole stays under TOTAL_S (default 560 s,
# leaving the device call's start and copy-back their share of 10 minutes).
#
# Writes to $OUT (the device tool's output folder; else .cache/gpu-check/), at most 8 files
# (the tool's limit):
#   gpu-check.md       the results table: parts (exit, seconds), test counts, bench tables and
#                      targets, profiles, train vs bench, the flex fp32 table
#   logs.txt           every part's output, in order
#   bench-86M.json  bench-162M.json  parity.json  flex-fp32-gap.md  kernels.json
# and copies the bench results to benchmarks/results/ (for committing).
# Budgets: BENCH86_S, PARITY_S, BENCH162_S, TESTS_S override the parts' caps; TOTAL_S the whole.
set -euo pipefail
start=$SECONDS
out=${OUT:-.cache/gpu-check}
mkdir -p "$out" benchmarks/results
export PYTHONUNBUFFERED=1 CEM_ABLATE_CACHE="${CEM_ABLATE_CACHE:-$PWD/.cache/cem-ablate}"
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$CEM_ABLATE_CACHE/inductor}"
export CEM_ABLATE_REPORT_DIR="$out"  # tests/cuda/test_flex_fp32_gap.py writes its table there
TOTAL_S=${TOTAL_S:-560}
md="$out/gpu-check.md"
log="$out/logs.txt"
: > "$log"
gpu=$(python3 -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')" 2>/dev/null || echo unknown)
{
  echo "# GPU check ($(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?), $gpu)"
  echo
  echo "| part | exit | seconds | budget s |"
  echo "|---|---:|---:|---:|"
} > "$md"
parts_rows=()
sections=()
any_failed=0

left() { echo $(( TOTAL_S - (SECONDS - start) )); }
PARTS=${PARTS:-bench86 parity bench162 tests kernels}
wants() { [[ " $PARTS " == *" $1 "* ]]; }

# run_part NAME CAP_S COMMAND...: run under min(CAP_S, time left) seconds, log, record.
run_part() {
  local name=$1 cap=$2; shift 2
  local budget; budget=$(left)
  if (( budget > cap )); then budget=$cap; fi
  if (( budget < 30 )); then
    parts_rows+=("| $name | skipped (no time left) | 0 | $budget |")
    echo "== $name: skipped, ${budget} s left" | tee -a "$log"
    return 0
  fi
  echo "== $name (budget ${budget} s): $*" | tee -a "$log"
  local t0=$SECONDS rc=0
  timeout --kill-after=15 "$budget" "$@" >> "$log" 2>&1 || rc=$?
  local took=$((SECONDS - t0)) status=$rc
  if (( rc == 124 || rc == 137 )); then status="$rc (timed out)"; fi
  if (( rc != 0 )); then any_failed=1; fi
  parts_rows+=("| $name | $status | $took | $budget |")
  echo "== $name: exit $status after ${took} s" | tee -a "$log"
  return 0
}

finish() {  # always, also after an error or a kill: whatever the parts produced goes into the table
  set +e
  for row in "${parts_rows[@]}"; do echo "$row" >> "$md"; done
  echo >> "$md"
  local summary failed section slug f
  summary=$(grep -E "^(=+ )?[0-9]+ (passed|failed|skipped|error)" "$log" | head -1 | tr -d '=')
  echo "- \`pytest -m cuda tests/cuda\`: ${summary:-no summary}" >> "$md"
  failed=$(grep -E "^(FAILED|ERROR) tests/cuda" "$log" | head -20)
  if [[ -n "$failed" ]]; then printf '\n```\n%s\n```\n' "$failed" >> "$md"; fi
  echo "- whole check: $((SECONDS - start)) s of ${TOTAL_S} s" >> "$md"
  for section in "${sections[@]}"; do
    if [[ -s "$section" ]]; then printf '\n' >> "$md"; cat "$section" >> "$md"; fi
  done
  if [[ -s "$out/flex-fp32-gap.md" ]]; then printf '\n' >> "$md"; cat "$out/flex-fp32-gap.md" >> "$md"; fi
  # copies for committing; the markdown sections leave $OUT (folded into gpu-check.md: 8-file limit)
  slug=$(python3 -c "from cem_ablate.training.hardware import gpu_slug; print(gpu_slug('$gpu'))" 2>/dev/null)
  for f in bench-86M bench-162M kernels parity; do
    if [[ -s "$out/$f.json" ]]; then cp "$out/$f.json" "benchmarks/results/gpu-${slug:-gpu}-$f.json"; fi
    if [[ -s "$out/$f.md" ]]; then cp "$out/$f.md" "benchmarks/results/gpu-${slug:-gpu}-$f.md"; rm -f "$out/$f.md"; fi
  done
  echo "gpu_check: $((SECONDS - start)) s; results in $md"
}
trap finish EXIT

# 1. the 86M bench, profiled (the acceptance's main numbers first: a cut-short run keeps them)
if wants bench86; then
  run_part "bench 86M (profiled)" "${BENCH86_S:-180}" python3 -m cem_ablate.cli.main bench --gpu --sizes 86M \
    --json "$out/bench-86M.json" --markdown "$out/bench-86M.md"
  sections+=("$out/bench-86M.md")
fi

# 2. training = bench
if wants parity; then
  run_part "train vs bench (86M llama compiled bf16)" "${PARITY_S:-120}" python3 -m cem_ablate.bench.train_parity \
    --device cuda --size 86M --seq-len 2048 --batch-size 8 --precision bf16 --mode compiled --steps 30 --repeats 3 \
    --out "$out/parity.md" --json "$out/parity.json"
  sections+=("$out/parity.md")
fi

# 3. the 162M bench
if wants bench162; then
  run_part "bench 162M" "${BENCH162_S:-120}" python3 -m cem_ablate.cli.main bench --gpu --sizes 162M \
    --profile-steps 0 --memory-variants --json "$out/bench-162M.json" --markdown "$out/bench-162M.md"
  sections+=("$out/bench-162M.md")
fi

# 4. CUDA tests, the training-step files first (pytest keeps the files' order; per-test timeout where installed).
#    A cold run measured 295 s for the whole set on a cold cache: a cut-short run lists what ran;
#    PARTS=tests gives them a call of their own.
if wants tests; then
  per_test=$(python3 -c "import pytest_timeout" 2>/dev/null && echo --timeout=120 || true)
  run_part "cuda tests" "${TESTS_S:-540}" python3 -m pytest -m cuda -q -rfEs -p no:cacheprovider --durations=10 \
    $per_test tests/cuda/test_flex_fp32_gap.py tests/cuda/test_head_loss.py tests/cuda/test_profile.py \
    tests/cuda/test_training.py tests/cuda/test_kernels.py tests/cuda/test_compile.py "$@"
fi

# 5. kernels side by side, only with time left
if wants kernels; then
  run_part "kernels 86M eager" 120 python3 -m cem_ablate.cli.main bench --gpu --sizes 86M --modes eager \
    --repeats 3 --profile-steps 0 --memory-variants \
    --variants llama cem_attn_t1 cem_attn_t1_blocked cem_attn_t1_exact cem_attn_t1_nodiag cem_attn_t1_sdpa \
    --json "$out/kernels.json" --markdown "$out/kernels.md"
  sections+=("$out/kernels.md")
fi

exit "$any_failed"

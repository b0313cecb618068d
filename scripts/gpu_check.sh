#!/usr/bin/env bash
# The GPU check in ONE device call of at most 10 minutes, from the repo root:
#
#   source scripts/gpu_env.sh && scripts/gpu_check.sh      # (gpu_env: where optuna/mlflow are missing)
#   GPU_CHECK_REHEARSAL=1 scripts/gpu_check.sh             # the same parts on this CPU, tiny sizes (CI runs it)
#
# Parts, in order of what the acceptance needs first, each under its own time budget
# (`timeout`), each writing its log and results as it goes (PARTS="bench86 parity ..." picks some):
#   bench86   `cem-ablate bench --gpu --sizes 86M`: sequence 2048, batch 8, bf16, eager and
#             compiled, HF Llama (SDPA) reference, each case profiled for 2 steps (kernels by
#             category, GPU busy fraction), the GPU targets;
#   parity    `python -m cem_ablate.bench.train_parity`: the real `cem-ablate train` (its own
#             process; default precision, AdamW kernel and clipping) vs the bench step, Llama 86M
#             compiled bf16, the same batch (target >= 0.95);
#   bench162  `cem-ablate bench --gpu --sizes 162M` (the references, CEM attention T = 1, full CEM T = 2);
#   tests     `pytest -m cuda tests/cuda`, the training-step files first (a cold run of the whole
#             set took longer than one call leaves: PARTS=tests gives them a call of their own);
#   kernels   (only with time left) the CEM attention kernels side by side at 86M, eager.
# Every part runs whatever happened before it (the exit status is 1 if any part failed); a part
# that fails or runs out of time is recorded as such and the next one starts. The whole stays
# under TOTAL_S (default 540 s, leaving the device call's start and copy-back their share).
#
# The parts write into a work folder (GPU_CHECK_WORK, default .cache/gpu-check/work, git-ignored); at the end, whatever
# happened, the script copies at most 8 files (the device tool's limit) to $OUT (else
# .cache/gpu-check/out/):
#   gpu-check.md   the summary first (every target and train vs bench, with verdicts), then the
#                  parts table (exit, seconds), test counts, the bench tables and profiles
#   logs.txt       every part's output, in order
#   bench-86M.json  parity.json  bench-162M.json  kernels.json   (those the parts wrote)
#   traces.tar.gz  the profiled cases' Chrome traces and anything else the parts left, packed
# and copies the results to benchmarks/results/ (for committing).
# Budgets: BENCH86_S, PARITY_S, BENCH162_S, TESTS_S override the parts' caps; TOTAL_S the whole.
set -euo pipefail
start=$SECONDS
out=${OUT:-.cache/gpu-check/out}
work=${GPU_CHECK_WORK:-.cache/gpu-check/work}
rm -rf "$work"
mkdir -p "$out" "$work/traces" benchmarks/results
for f in gpu-check.md logs.txt bench-86M.json bench-162M.json kernels.json parity.json traces.tar.gz; do
  rm -f "${out:?}/$f"  # an earlier check's files never pass for this one's
done
export PYTHONUNBUFFERED=1 CEM_ABLATE_CACHE="${CEM_ABLATE_CACHE:-$PWD/.cache/cem-ablate}"
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$CEM_ABLATE_CACHE/inductor}"
export CEM_ABLATE_REPORT_DIR="$work"  # tests/cuda/test_flex_fp32_gap.py writes its table there
TOTAL_S=${TOTAL_S:-540}
REHEARSAL=${GPU_CHECK_REHEARSAL:-0}
log="$work/logs.txt"
: > "$log"

if [[ "$REHEARSAL" == 1 ]]; then  # the same parts and files on a CPU, at sizes that take seconds
  BENCH86=(--device cpu --sizes tiny --seq-len 64 --batch-size 2 --precisions fp32 --modes eager --repeats 2
           --warmup-steps 1 --profile-steps 1 --peak cached --variants llama cem_attn_t1 --memory-variants)
  PARITY=(--device cpu --size tiny --seq-len 64 --batch-size 2 --precision fp32 --mode eager --steps 6
          --repeats 2 --vocab-size 256 --log-every 2)
  BENCH162=(--device cpu --sizes tiny --seq-len 32 --batch-size 2 --precisions fp32 --modes eager --repeats 2
            --warmup-steps 1 --profile-steps 0 --peak cached --variants llama --memory-variants)
  KERNELS=(--device cpu --sizes tiny --seq-len 32 --batch-size 2 --precisions fp32 --modes eager --repeats 2
           --warmup-steps 1 --profile-steps 0 --peak cached --memory-variants --variants llama cem_attn_t1_blocked)
else
  BENCH86=(--sizes 86M)
  PARITY=(--device cuda --size 86M --seq-len 2048 --batch-size 8 --precision bf16 --mode compiled --steps 30
          --repeats 3)
  BENCH162=(--sizes 162M --profile-steps 0 --memory-variants)
  KERNELS=(--sizes 86M --modes eager --repeats 3 --profile-steps 0 --memory-variants
           --variants llama cem_attn_t1 cem_attn_t1_blocked cem_attn_t1_exact cem_attn_t1_nodiag cem_attn_t1_sdpa)
fi

gpu=$(python3 -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')" \
      2>/dev/null || echo unknown)
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

finish() {  # always, also after an error or a kill: the summary first, then at most 8 files to $OUT
  set +e
  local md="$work/gpu-check.md" summary failed section slug f
  {
    echo "# GPU check ($(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?), $gpu)"
    [[ "$REHEARSAL" == 1 ]] && echo && echo "CPU rehearsal (GPU_CHECK_REHEARSAL=1): tiny sizes; says nothing about GPU speed."
    echo
    python3 -m cem_ablate.bench.check_summary "$work" 2>>"$log" || echo "(no summary: see logs.txt)"
    echo
    echo "## Parts"
    echo
    echo "| part | exit | seconds | budget s |"
    echo "|---|---:|---:|---:|"
    for row in "${parts_rows[@]}"; do echo "$row"; done
    echo
    summary=$(grep -E "^(=+ )?[0-9]+ (passed|failed|skipped|deselected|error)" "$log" | head -1 | tr -d '=')
    echo "- \`pytest -m cuda tests/cuda\`: ${summary:-no summary}"
    failed=$(grep -E "^(FAILED|ERROR) tests/cuda|^tests/cuda/.* (FAILED|ERROR)" "$log" | head -20)
    if [[ -n "$failed" ]]; then printf '\n```\n%s\n```\n' "$failed"; fi
    echo "- whole check: $((SECONDS - start)) s of ${TOTAL_S} s"
    for section in "${sections[@]}"; do
      if [[ -s "$section" ]]; then printf '\n'; cat "$section"; fi
    done
    if [[ -s "$work/flex-fp32-gap.md" ]]; then printf '\n'; cat "$work/flex-fp32-gap.md"; fi
  } > "$md"
  slug=$(python3 -c "from cem_ablate.training.hardware import gpu_slug; print(gpu_slug('$gpu'))" 2>/dev/null)
  [[ "$REHEARSAL" == 1 ]] && slug=cpu-rehearsal
  # the 8 files: the report, the log, the four results, one archive of everything else
  cp "$md" "$log" "$out/"
  for f in bench-86M bench-162M kernels parity; do
    if [[ -s "$work/$f.json" ]]; then
      cp "$work/$f.json" "$out/"
      [[ "$REHEARSAL" == 1 ]] || cp "$work/$f.json" "benchmarks/results/gpu-${slug:-gpu}-$f.json"
    fi
  done
  [[ "$REHEARSAL" == 1 ]] || cp "$md" "benchmarks/results/gpu-${slug:-gpu}-check.md"
  local packed=()  # the traces and every other file a part left, beside the files copied above
  for f in "$work"/* "$work"/traces/*; do
    case "$f" in */gpu-check.md|*/logs.txt|*/bench-86M.json|*/bench-162M.json|*/kernels.json|*/parity.json) ;;
      *) [[ -f "$f" ]] && packed+=("${f#"$work"/}") ;;
    esac
  done
  if (( ${#packed[@]} )); then tar -czf "$out/traces.tar.gz" -C "$work" "${packed[@]}"; fi
  echo "gpu_check: $((SECONDS - start)) s; $(ls "$out" | wc -l) files in $out; summary: $out/gpu-check.md"
}
trap finish EXIT

# 1. the 86M bench, profiled (the acceptance's main numbers first: a cut-short run keeps them)
if wants bench86; then
  run_part "bench 86M (profiled)" "${BENCH86_S:-180}" python3 -m cem_ablate.cli.main bench --gpu "${BENCH86[@]}" \
    --json "$work/bench-86M.json" --markdown "$work/bench-86M.md" --trace-dir "$work/traces"
  sections+=("$work/bench-86M.md")
fi

# 2. training = bench: the real `cem-ablate train`
if wants parity; then
  run_part "train vs bench (cem-ablate train)" "${PARITY_S:-150}" python3 -m cem_ablate.bench.train_parity \
    "${PARITY[@]}" --out "$work/parity.md" --json "$work/parity.json"
  sections+=("$work/parity.md")
fi

# 3. the 162M bench
if wants bench162; then
  run_part "bench 162M" "${BENCH162_S:-120}" python3 -m cem_ablate.cli.main bench --gpu "${BENCH162[@]}" \
    --json "$work/bench-162M.json" --markdown "$work/bench-162M.md"
  sections+=("$work/bench-162M.md")
fi

# 4. CUDA tests, the training-step files first (pytest keeps the files' order; per-test timeout where installed;
#    -v: a run cut short by its budget still names every test that ran, and how it ended)
if wants tests; then
  per_test=$(python3 -c "import pytest_timeout" 2>/dev/null && echo --timeout=120 || true)
  run_part "cuda tests" "${TESTS_S:-540}" python3 -m pytest -n 0 -m cuda -v -rfEs -p no:cacheprovider --durations=10 \
    $per_test tests/cuda/test_flex_fp32_gap.py tests/cuda/test_head_loss.py tests/cuda/test_profile.py \
    tests/cuda/test_training.py tests/cuda/test_kernels.py tests/cuda/test_compile.py "$@"
fi

# 5. kernels side by side, only with time left
if wants kernels; then
  run_part "kernels 86M eager" 120 python3 -m cem_ablate.cli.main bench --gpu "${KERNELS[@]}" \
    --json "$work/kernels.json" --markdown "$work/kernels.md"
  sections+=("$work/kernels.md")
fi

exit "$any_failed"

#!/usr/bin/env bash
# The GPU check of issue 14 in one command (<= 10 minutes on one H100), from the repo root:
#
#   scripts/gpu_check.sh            # CUDA tests, then the GPU bench
#
# 1. `pytest -m cuda tests/cuda`: fast CEM kernels vs the reference (fp32 and bf16,
#    forward and backward), fullgraph compile of the zoo, bf16-mixed training of
#    every sublayer pair, `cem-ablate train` and a study trial on the GPU, NCCL;
# 2. `cem-ablate bench --gpu`: 86M and 162M, sequence 2048, bf16, eager and compiled,
#    each case profiled for 2 steps (kernels by category, GPU busy fraction),
#    vs transformers' LlamaForCausalLM (SDPA), with the issue's targets
#    -> benchmarks/results/gpu-<device>.{json,md};
# 3. the CEM attention kernels side by side at 86M, eager: flex (auto), blocked (what
#    runs for `diag_update: exact`, which flex does not take), SDPA (no KQ diagonal)
#    -> benchmarks/results/gpu-<device>-kernels.{json,md};
# then appends the test counts and the wall time to benchmarks/results/gpu-<device>.md.
# Logs go to $OUT when set (the device tool's output folder), else to .cache/gpu-check/.
# Where packages are missing (no optuna/mlflow), run `source scripts/gpu_env.sh` first.
set -uo pipefail
start=$SECONDS
logs=${OUT:-.cache/gpu-check}
mkdir -p "$logs"
export PYTHONUNBUFFERED=1 CEM_ABLATE_CACHE="${CEM_ABLATE_CACHE:-$PWD/.cache/cem-ablate}"
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$CEM_ABLATE_CACHE/inductor}"

timeout_flag=$(python3 -c "import pytest_timeout" 2>/dev/null && echo --timeout=240)
python3 -m pytest -m cuda tests/cuda -q -rfEs -p no:cacheprovider --durations=12 $timeout_flag \
  "$@" 2>&1 | tee "$logs/cuda-tests.log"
tests_rc=${PIPESTATUS[0]}
tests_s=$((SECONDS - start))
summary=$(grep -E "^(=+ )?[0-9]+ (passed|failed|skipped|error)" "$logs/cuda-tests.log" | tail -1 | tr -d '=')

python3 -m cem_ablate.cli.main bench --gpu 2>&1 | tee "$logs/bench.log"
bench_rc=${PIPESTATUS[0]}
bench_s=$((SECONDS - start - tests_s))
md=$(grep -oE "benchmarks/results/gpu-[a-z0-9-]+\.md" "$logs/bench.log" | tail -1)
[[ -n "$md" ]] && cp "$md" "${md%.md}.json" "$logs/" 2>/dev/null

kernels=${md:+${md%.md}-kernels}
kernels=${kernels:-$logs/gpu-kernels}
python3 -m cem_ablate.cli.main bench --gpu --sizes 86M --modes eager --repeats 3 --profile-steps 0 --memory-variants \
  --variants llama cem_attn_t1 cem_attn_t1_blocked cem_attn_t1_exact cem_attn_t1_nodiag cem_attn_t1_sdpa \
  --json "$kernels.json" 2>&1 | tee "$logs/bench-kernels.log"
kernels_rc=${PIPESTATUS[0]}
total_s=$((SECONDS - start))
if [[ -n "$md" ]]; then
  printf '\n## CUDA tests and wall time\n\n- `pytest -m cuda tests/cuda`: %s (%d s, exit %d)\n- whole command (`scripts/gpu_check.sh`): %d s (tests %d s, bench %d s, kernels bench %d s)\n' \
    "${summary:-no summary}" "$tests_s" "$tests_rc" "$total_s" "$tests_s" "$bench_s" "$((total_s - tests_s - bench_s))" >> "$md"
  cp "$md" "$kernels.json" "$kernels.md" "$logs/" 2>/dev/null
fi
echo "gpu_check: tests exit $tests_rc (${tests_s} s: $summary), bench exit $bench_rc, kernels bench exit $kernels_rc, total ${total_s} s"
exit $(( tests_rc != 0 || bench_rc != 0 || kernels_rc != 0 ))

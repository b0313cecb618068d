#!/usr/bin/env bash
# The learning-rate transfer evidence on a lent GPU machine, in one call of its device tool (one lease is
# ~15 min): the studies run one after another under one deadline, then their reports and a
# CSV of every trial are packed into $OUT. Everything that finished is in the reports; the
# studies resume from the store if run again on the same machine.
#
#   bash scripts/gpu_mup_evidence.sh            # on the GPU machine, in the repo root (.whl carried)
#   DEADLINE_S=300 WORKERS=2 MW_SCALES=smoke TR_SCALE=smoke STEPS_SCALE= bash scripts/gpu_mup_evidence.sh   # a dry rehearsal on CPU
#
# Order (a lease cut short leaves the most useful trials finished): every family at every
# width with seed 0 (whole one-seed grids); the transfer study (adds seeds 1, 2 at the proxy
# width d 64, then the d 256 targets); seeds 1, 2 everywhere; the step-scaling scale.
# Many workers share the one GPU (these models are launch-bound): CUDA MPS lets their kernels
# run side by side; without it the driver time-slices the workers' contexts.
set -u
T0=$(date +%s)
DEADLINE_S=${DEADLINE_S:-480}    # the studies stop at this many seconds; reports and packing follow
REPORT_S=${REPORT_S:-60}          # kept back for the reports (0: none, the CSV only)
WORKERS=${WORKERS:-12}
MW_SCALES=${MW_SCALES-gpu_seed0 gpu}
TR_SCALE=${TR_SCALE-gpu}
STEPS_SCALE=${STEPS_SCALE-steps_gpu}
OUT=${OUT:-/tmp/gpu_mup_out}
mkdir -p "$OUT"
elapsed() { echo $(( $(date +%s) - T0 )); }
log() { echo "[$(elapsed) s] $*"; }

if [[ -d .whl ]]; then
  # shellcheck source=scripts/gpu_env.sh
  source scripts/gpu_env.sh || exit 1
fi
python3 -c "import torch, datasets, pyarrow; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null

if command -v nvidia-cuda-mps-control >/dev/null 2>&1 && [[ -z "${NO_MPS:-}" ]]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  # A second call on a warm machine finds the first call's daemon still up: reuse it (starting
  # another fails, and quitting it there left lease 2 of 2026-11-26 time-slicing).
  if { echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1 || nvidia-cuda-mps-control -d; } \
      && timeout 60 python3 -c "import torch; torch.ones(1, device='cuda').sum().item()"; then
    log "CUDA MPS on"
  else
    echo quit | nvidia-cuda-mps-control 2>/dev/null
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    log "CUDA MPS did not start: the workers time-slice the GPU"
  fi
fi

# Python ignores SIGINT when its parent started it ignored (a background job): restore it, so
# that `timeout -s INT` stops a study the way Ctrl-C does (workers free their trials).
INTERRUPTIBLE=(python3 -c "import os, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); os.execvp(sys.argv[1], sys.argv[1:])")

study() {  # FILE SCALE
  local left=$(( DEADLINE_S - $(elapsed) ))
  if (( left < 30 )); then log "skipped: $1 --scale $2 (deadline)"; return; fi
  log "start: $1 --scale $2 (${left} s left)"
  timeout -s INT -k 30 "$left" "${INTERRUPTIBLE[@]}" cem-ablate study "$1" --scale "$2" \
    --workers "$WORKERS" --threads 1 --no-report 2>&1 | grep -v -E "^\s*$" | tail -n 25
  log "end: $1 --scale $2 (exit ${PIPESTATUS[0]})"
}

set -- $MW_SCALES
[[ $# -ge 1 ]] && study studies/mup_width.yaml "$1"
[[ -n "$TR_SCALE" ]] && study studies/transfer.yaml "$TR_SCALE"
[[ $# -ge 2 ]] && study studies/mup_width.yaml "$2"
[[ -n "$STEPS_SCALE" ]] && study studies/mup_width.yaml "$STEPS_SCALE"

log "reports"
mkdir -p reports_gpu
pids=()
(( REPORT_S > 0 )) || MW_SCALES= TR_SCALE= STEPS_SCALE=   # REPORT_S=0: the trials' CSV only
for s in $MW_SCALES; do
  timeout "$REPORT_S" cem-ablate report studies/mup_width.yaml --scale "$s" --out "reports_gpu/mup_width_$s" >"reports_gpu/mup_width_$s.txt" 2>&1 & pids+=($!)
done
[[ -n "$TR_SCALE" ]] && { timeout "$REPORT_S" cem-ablate report studies/transfer.yaml --scale "$TR_SCALE" --out "reports_gpu/transfer_$TR_SCALE" >"reports_gpu/transfer_$TR_SCALE.txt" 2>&1 & pids+=($!); }
[[ -n "$STEPS_SCALE" ]] && { timeout "$REPORT_S" cem-ablate report studies/mup_width.yaml --scale "$STEPS_SCALE" --out "reports_gpu/mup_$STEPS_SCALE" >"reports_gpu/mup_$STEPS_SCALE.txt" 2>&1 & pids+=($!); }
wait "${pids[@]}"
log "reports written"

# Every trial of the store, one row each (what the reports are computed from).
python3 scripts/store_trials_csv.py mlruns/optuna.db >reports_gpu/trials.csv
log "trials: $(($(wc -l <reports_gpu/trials.csv) - 1)) rows"
tar -czf "$OUT/reports_gpu.tgz" reports_gpu
ls -la "$OUT"
log "done"

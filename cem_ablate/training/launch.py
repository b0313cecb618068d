"""`python -m cem_ablate.training.launch RUN_DIR`: train the config saved in RUN_DIR.

The process `train_run` starts for DDP runs called from a library (the study runner):
Lightning re-executes this command once per rank, which is safe, unlike re-running
the caller's script. The result is read back from `RUN_DIR/result.json`.
"""

from __future__ import annotations

import argparse
import sys

from cem_ablate.config import load_yaml
from cem_ablate.config.trial_outcome import MEANINGS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cem_ablate.training.launch")
    parser.add_argument("run_dir")
    parser.add_argument("--tracking-uri", required=True)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--mlflow-run-id")
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    from cem_ablate.training.config import parse_run_config
    from cem_ablate.training.engine import PREEMPTED_EXIT, train_run
    from cem_ablate.training.preemption import Preempted
    from cem_ablate.training.run_directory import RunDirectory

    folder = RunDirectory(args.run_dir)
    try:
        result = train_run(
            parse_run_config(load_yaml(folder.config_file)),
            run_dir=folder.path,
            tracking_uri=args.tracking_uri,
            experiment=args.experiment,
            mlflow_run_id=args.mlflow_run_id,
            resume=not args.fresh,
            progress=not args.no_progress,
            ddp_in_process=True,
        )
    except Preempted:
        return PREEMPTED_EXIT  # its checkpoint is saved; the caller reports it (training.engine)
    assert result.cause is not None  # TrainResult.__post_init__ fills it
    return MEANINGS[result.cause].exit_status  # 0 for a result a rerun would not change


if __name__ == "__main__":
    sys.exit(main())

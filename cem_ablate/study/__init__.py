"""Studies: study file -> typed variants -> Optuna trial queue -> workers -> report."""

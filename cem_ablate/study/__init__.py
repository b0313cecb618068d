"""Studies: study file -> typed variants -> Optuna trial queue -> workers -> published summaries.

The report rendered from those summaries is `cem_ablate.reporting`.
"""

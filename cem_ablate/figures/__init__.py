"""Figures of sweeps, scaling and coordinate checks, drawn with matplotlib from the values
`cem_ablate.analysis` computes. Below `study` (its MLflow summary draws each variant's fit)
and `reporting` (the report's figures), above `analysis`: see docs/architecture.md."""

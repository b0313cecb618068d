"""The analysis of a study: pure functions of observations.

No I/O, no Optuna, no MLflow, no Lightning, no torch: numbers in, numbers out.
- `akima`: lr* and objective* of one curve (docs/design/experiments.md#s8-learning-rate-search);
- `statistics`: per-variant seed statistics, paired/Welch Δs, `VariantStatistics`;
- `scaling`: power laws over model size;
- `decision`: the one test-and-verdict rule (design-adjusted, Holm over a report);
- `optimum`: intervals of lr* and objective* whose coverage is checked by simulation;
- `power`: false-positive rate, power and the smallest detectable Δ of a seed design.
"""

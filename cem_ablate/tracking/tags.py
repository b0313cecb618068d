"""Tag names shared by the writer (`study_runs`) and the reader (`readback`).

The UI filters on them, e.g. `tags.cem_ablate.kind = 'variant'`; axis values are
additionally tags and params under their own dotted key (`model.attention.name`).
"""

STUDY = "cem_ablate.study"  # study name (= experiment name)
STUDY_HASH = "cem_ablate.study_hash"
KIND = "cem_ablate.kind"  # "variant" (parent run) or "trial" (child run)
VARIANT_KEY = "cem_ablate.variant_key"  # identity of a variant: name slug + config hash
VARIANT = "cem_ablate.variant"  # human-readable variant name
ROLE = "cem_ablate.role"  # "variant", or "baseline" when only trained as someone's baseline
AXES = "cem_ablate.axes"  # JSON list of the axis labels of this study
BASELINE_PREFIX = "cem_ablate.baseline."  # + baseline name -> variant key of the baseline
TRIAL_KEY = "cem_ablate.trial_key"  # RunConfig.trial_key(): one child run per trial
SLOT = "cem_ablate.slot"
RUN_DIR = "cem_ablate.run_dir"  # a trial's run folder: what `cem-ablate export`, `generate` and `eval` take
STATUS = "cem_ablate.status"  # a run's outcome (a TrialStatus string; written by tracking.outcome only)
PROGRESS = "cem_ablate.progress"  # a variant's (parent run's) progress: running / done
REASON = "cem_ablate.reason"
CAUSE = "cem_ablate.cause"  # why it ended (a config.trial_outcome.Cause string; written by tracking.outcome only)
REUSED_FROM = "cem_ablate.reused_from"  # a reused trial's child: the original child run's id
CODE_FINGERPRINT = "cem_ablate.code_fingerprint"  # a trial's RunConfig.code_fingerprint() (per file: CODE_ARTIFACT)
CODE_ARTIFACT = "code_fingerprint.json"  # {"fingerprint": ..., "parts": {file or dist:<name>: digest or version}}
STALE = "cem_ablate.stale"  # a child trained under another trial key (code changed): kept, not read back
GIT_DIRTY = "cem_ablate.git_dirty"  # "true" / "false": uncommitted changes where mlflow.source.git.commit is set
AKIMA_EDGE = "cem_ablate.akima_edge"  # "low" / "high" / "none"
OBJECTIVE = "cem_ablate.objective"  # the task's metric: test perplexity / test RMSE / recall error
VERDICT_PREFIX = "cem_ablate.verdict."  # + baseline name -> better / worse / unresolved (at the baseline's lr*)
VERDICT_OWN_LR_PREFIX = "cem_ablate.verdict_own_lr."  # + baseline name: the same at the variant's own lr*
PAIRING_PREFIX = "cem_ablate.pairing."  # + baseline name -> paired / unpaired (study.pairing: the test used)
# MLflow's own: the UI's experiment kind; "custom_model_development" is its training kind
# (the "Machine learning" view; mlflow/server/js ExperimentKind enum, MLflow 3.17).
EXPERIMENT_KIND = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"
PARENT = "mlflow.parentRunId"  # MLflow's own: the UI nests children under it
NOTE = "mlflow.note.content"


def baselines_of(tags) -> dict[str, str]:
    """A parent run's baselines from its tags: baseline name -> the baseline's variant key."""
    return {k[len(BASELINE_PREFIX) :]: v for k, v in tags.items() if k.startswith(BASELINE_PREFIX)}

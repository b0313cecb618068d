"""Model assembly: config -> registered components -> CEMTransformer; reports; HF interop."""

from cem_ablate.model.assembly import build_model
from cem_ablate.model.config import ModelConfig, llama_baseline_params, parse_model_config
from cem_ablate.model.report import ModelReport, model_report

__all__ = ["ModelConfig", "ModelReport", "build_model", "llama_baseline_params", "model_report", "parse_model_config"]

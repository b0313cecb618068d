import pytest

from cem_ablate.config import ConfigError, apply_overrides, merge
from cem_ablate.config.loading import flatten_dotted, get_dotted, load_yaml, set_dotted


def test_flatten_is_the_inverse_of_set_dotted():
    nested = {"a": {"b": 1, "c": {"d": "x"}}, "e": [1, 2], "f": {}}
    flat = flatten_dotted(nested)
    assert flat == {"a.b": 1, "a.c.d": "x", "e": [1, 2], "f": {}}
    rebuilt: dict = {}
    for key, value in flat.items():
        set_dotted(rebuilt, key, value)
    assert rebuilt == nested


def test_overrides_parse_yaml_values_and_keep_the_input():
    base = {"train": {"lr": 0.1}, "model": {"attention": {"name": "llama"}}}
    out = apply_overrides(base, ["train.lr=0.001", "model.attention.name=cem", "train.compile=true"])
    assert out["train"] == {"lr": 1e-3, "compile": True}
    assert get_dotted(out, "model.attention.name") == "cem"
    assert base["train"]["lr"] == 0.1


def test_bad_override_and_non_mapping_path_are_config_errors():
    with pytest.raises(ConfigError, match="key.path=value"):
        apply_overrides({}, ["train.lr"])
    with pytest.raises(ConfigError, match="not a mapping"):
        apply_overrides({"train": 3}, ["train.lr=1"])


def test_merge_is_deep():
    assert merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}}) == {"a": {"b": 1, "c": 3}}


def test_load_yaml_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(bad)

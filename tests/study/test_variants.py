import copy

import pytest
import yaml

from cem_ablate.config import ConfigError
from cem_ablate.study.spec import load_study_mapping, parse_study
from cem_ablate.study.variants import expand

BASE = {
    "model": {"size": "tiny", "max_seq_len": 64},
    "train": {"batch_size": 4, "max_steps": 3},
    "data": {"source": "stdlib", "tokenizer": "byte", "block_size": 32},
}


def study(**sections):
    mapping = {"name": "t", "base": copy.deepcopy(BASE), "lr_search": {"grid": [1e-3, 2e-3]}}
    mapping.update(sections)
    return mapping


def expanded(mapping):
    return expand(parse_study(mapping), mapping)


def test_axes_expand_as_a_cartesian_product():
    out = expanded(study(axes={"model.attention.name": ["llama", "cem"], "train.weight_decay": [0.0, 0.1, 0.2]}))
    assert len(out.variants) == 6
    names = [v.name for v in out.variants]
    assert names[0] == "attention.name=llama,weight_decay=0.0"
    assert len(set(v.key for v in out.variants)) == 6
    cem = [v for v in out.variants if v.axis_values["model.attention.name"] == "cem"]
    assert len(cem) == 3 and all(v.config.model.attention.name == "cem" for v in cem)
    assert {v.config.train.weight_decay for v in cem} == {0.0, 0.1, 0.2}


def test_explicit_variants_times_axes_and_baselines_of_the_same_size():
    out = expanded(
        study(
            variants=[
                {"name": "cem_attention", "set": {"model.attention": {"name": "cem", "steps": 2}}},
                {"name": "cem_mlp", "set": {"model.mlp": "cem"}},
            ],
            axes={"model.size": ["tiny", "mini"]},
            baselines={"llama": {"model.attention": "llama", "model.mlp": "llama"}},
        )
    )
    variants = [v for v in out.variants if v.role == "variant"]
    baselines = [v for v in out.variants if v.role == "baseline"]
    assert [v.name for v in variants] == [
        "cem_attention,size=tiny",
        "cem_attention,size=mini",
        "cem_mlp,size=tiny",
        "cem_mlp,size=mini",
    ]
    # one Llama per size, shared by both CEM variants of that size
    assert sorted(b.name for b in baselines) == ["llama,size=mini", "llama,size=tiny"]
    by_key = {v.key: v for v in out.variants}
    for v in variants:
        base = by_key[v.baselines["llama"]]
        assert base.config.model.size == v.config.model.size
        assert base.config.model.attention.name == "llama"


def test_baselines_of_variants_that_set_their_own_width_get_one_name_each():
    """Variants that set d_model themselves (no axis) give one Llama per width: each is named
    by the settings it keeps, so no name stands for two configs (a report read by study name
    kept one config per name; tables and legends printed `llama` three times)."""
    out = expanded(
        study(
            variants=[
                {"name": "cem_d32", "set": {"model.d_model": 32, "model.d_mlp": 88, "model.attention": "cem"}},
                {"name": "cem_d64", "set": {"model.d_model": 64, "model.d_mlp": 176, "model.attention": "cem"}},
                {"name": "mlp_d64", "set": {"model.d_model": 64, "model.d_mlp": 176, "model.mlp": "cem"}},
            ],
            baselines={"llama": {"model.attention": "llama", "model.mlp": "llama"}},
        )
    )
    baselines = [v for v in out.variants if v.role == "baseline"]
    assert [b.name for b in baselines] == ["llama,d_model=32,d_mlp=88", "llama,d_model=64,d_mlp=176"]
    assert len({v.name for v in out.variants}) == len(out.variants)
    by_key = {v.key: v for v in out.variants}
    assert [by_key[v.baselines["llama"]].config.model.d_model for v in out.variants if v.role == "variant"] == [
        32,
        64,
        64,
    ]
    # one baseline config: the plain name, as before (stored studies keep their keys)
    one = expanded(
        study(
            variants=[{"name": "cem", "set": {"model.attention": "cem"}}],
            baselines={"llama": {"model.attention": "llama"}},
        )
    )
    assert [v.name for v in one.variants] == ["cem", "llama"]


def test_a_baseline_that_is_listed_is_reused_not_added():
    out = expanded(
        study(
            variants=[{"name": "llama"}, {"name": "cem", "set": {"model.attention": "cem"}}],
            baselines={"llama": {"model.attention": "llama"}},
        )
    )
    assert [v.name for v in out.variants] == ["llama", "cem"]
    llama, cem = out.variants
    assert cem.baselines == {"llama": llama.key} and llama.baselines == {}


def test_a_second_baseline_compares_recursion_with_one_step_and_names_each_run_once():
    out = expanded(
        study(
            variants=[
                {"name": "reuse_T2", "set": {"model.attention": {"name": "llama", "steps": 2, "depth_mode": "reuse"}}},
                {"name": "cem_T1", "set": {"model.attention": {"name": "cem", "steps": 1}}},
                {"name": "cem_T2", "set": {"model.attention": {"name": "cem", "steps": 2}}},
            ],
            baselines={
                "llama": {"model.attention": {"name": "llama"}},
                "T1": {"model.attention.steps": 1, "model.attention.depth_mode": "recursion"},
            },
        )
    )
    by_name = {v.name: v for v in out.variants}
    assert list(by_name) == ["reuse_T2", "cem_T1", "cem_T2", "llama"]  # no extra run for any T1 baseline
    assert by_name["cem_T2"].baselines == {"llama": by_name["llama"].key, "T1": by_name["cem_T1"].key}
    assert by_name["cem_T1"].baselines == {"llama": by_name["llama"].key}  # not its own baseline
    # reuse at one step is Llama itself: compared once, not twice
    assert by_name["reuse_T2"].baselines == {"llama": by_name["llama"].key}


def test_identity_is_stable_and_ignores_lr_and_seed():
    a = expanded(study(axes={"model.attention.name": ["llama", "cem"]}))
    b = expanded(study(axes={"model.attention.name": ["llama", "cem"]}, seeds=[3, 4], lr_search={"grid": [5e-3, 7e-3]}))
    assert [v.key for v in a.variants] == [v.key for v in b.variants]
    changed = study(axes={"model.attention.name": ["llama", "cem"]})
    changed["base"]["train"]["max_steps"] = 4
    assert expanded(changed).variants[0].key != a.variants[0].key
    # the shorthand and the full mapping are the same config
    short = expanded(study(variants=[{"name": "x", "set": {"model.attention": "cem"}}]))
    full = expanded(study(variants=[{"name": "x", "set": {"model.attention": {"name": "cem"}}}]))
    assert short.variants[0].key == full.variants[0].key


def test_trial_config_gets_lr_and_seed():
    v = expanded(study()).variants[0]
    cfg = v.run_config(2e-3, 7)
    assert (cfg.train.lr, cfg.train.seed) == (2e-3, 7)


@pytest.mark.parametrize(
    "change, where",
    [
        ({"axes": {"model.attention.foo": [1, 2]}}, "axes.model.attention.foo"),
        ({"axes": {"model.attention.name": ["llama", "nope"]}}, "axes.model.attention.name"),
        ({"variants": [{"name": "v", "set": {"model.mlp": {"name": "cem", "rank": 2}}}]}, "variants[0].set.model.mlp"),
        ({"lr_search": {"grid": []}}, "lr_search.grid"),
        ({"lr_search": {"grid": [1e-3, -2e-3]}}, "lr_search.grid[1]"),
        ({"lr_search": {"grid": [1e-3]}}, "lr_search.grid"),  # one rate, not said to be a fixed-rate comparison
        ({"lr_search": {"method": "tpe", "low": 1e-4, "high": 1e-2, "n_trials": 3, "fixed": True}}, "lr_search.fixed"),
        ({"lr_search": {"method": "tpe", "low": 1e-4}}, "lr_search.high"),
        ({"lr_search": {"method": "bayes"}}, "lr_search.method"),
        ({"axes": {"train.lr": [1e-3]}}, "axes.train.lr"),
        ({"axes": {"model.size": []}}, "axes.model.size"),
        ({"seeds": []}, "seeds"),
        ({"variants": [{"name": "a"}, {"name": "a"}]}, "variants[1]"),
        ({"name": "has space"}, "name"),
        ({"axiss": {}}, "axiss"),
        ({"execution": {"workers": 0}}, "execution.workers"),
    ],
)
def test_malformed_studies_name_the_key(change, where):
    with pytest.raises(ConfigError) as err:
        expanded(study(**change))
    assert str(err.value).startswith(where), str(err.value)
    assert "\n" not in str(err.value)


def test_base_errors_point_into_base():
    mapping = study()
    mapping["base"]["train"]["batch_size"] = 0
    with pytest.raises(ConfigError, match=r"^base\.train\.batch_size"):
        expanded(mapping)


def test_scale_and_overrides(tmp_path):
    path = tmp_path / "s.yaml"
    mapping = study(scale={"smoke": {"base.train.max_steps": 1, "lr_search.grid": [1e-3], "lr_search.fixed": True}})
    path.write_text(yaml.safe_dump(mapping))
    plain = load_study_mapping(path)
    assert plain["base"]["train"]["max_steps"] == 3
    smoke = load_study_mapping(path, "smoke", ["seeds=[1, 2]"])
    assert smoke["base"]["train"]["max_steps"] == 1
    assert smoke["lr_search"]["grid"] == [1e-3] and smoke["seeds"] == [1, 2]
    with pytest.raises(ConfigError, match="unknown scale 'smok'.*Did you mean 'smoke'"):
        load_study_mapping(path, "smok")
    bare = path.with_name("bare.yaml")
    bare.write_text(yaml.safe_dump(study()))
    with pytest.raises(ConfigError) as err:  # not "Allowed: ."
        load_study_mapping(bare, "smoke")
    assert str(err.value) == "--scale: the study file defines no scales (no `scale:` mapping), so there is no 'smoke'."


def test_the_quickstart_study_is_valid():
    mapping = load_study_mapping("studies/quickstart.yaml")
    out = expanded(mapping)
    assert [v.name for v in out.variants] == ["llama", "cem_attention", "full_cem_T2"]
    assert out.spec.lr_search.grid == [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2]  # brackets every lr*
    full = out.variants[2].run_config(1e-3, 0).model
    assert (full.attention.name, full.attention.steps, full.mlp.name, full.mlp.steps) == ("cem", 2, "cem", 2)


def test_the_readmes_study_file_is_complete_and_valid(tmp_path):
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("\n## Studies", 1)[1]
    code = next(c for c in re.findall(r"```yaml\n(.*?)```", section, re.S) if c.startswith("# a complete study file"))
    assert "..." not in code
    path = tmp_path / "study.yaml"
    path.write_text(code)
    out = expanded(load_study_mapping(path))
    assert [v.name for v in out.variants] == ["llama", "cem_attention"] and list(out.spec.seeds) == [0, 1, 2]
    assert load_study_mapping(path, "smoke")["base"]["train"]["max_steps"] == 10

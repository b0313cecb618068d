"""The code fingerprint in the trial key: an edit of the code that trains a config
changes its key, an edit of anything else does not. Every edit is made in a temp
copy of the sources (or a temp plugin), never in the repository."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cem_ablate.config import fingerprint
from cem_ablate.config.fingerprint import ComponentSource, code_fingerprint
from tests.config.plugin_package import DISTRIBUTION, edit_to_tanh_gelu, install_plugin

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_digests():
    fingerprint.cache_clear()
    yield
    fingerprint.cache_clear()


def _append(path: Path, text: str = "\nEDITED = 1\n") -> None:
    """An edit of what the module runs (a new constant; a comment would keep the key)."""
    path.write_text(path.read_text() + text)


def _copy(src: Path, dst: Path) -> Path:
    return Path(shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__")))


def test_platform_edits_that_train_change_it_and_others_do_not(tmp_path):
    real = code_fingerprint([])
    root = _copy(REPO / "cem_ablate", tmp_path / "cem_ablate")
    before = code_fingerprint([], root)
    assert before.digest == real.digest  # names are package-relative: a copy is the same code
    assert "cem_ablate/training/engine.py" in before.parts and "cem_ablate/registry.py" in before.parts

    # Not in it: the CLI, the study (queue, reuse, reports), tracking, bench, docs.
    for rel in (
        "cli/main.py",
        "study/session.py",
        "study/reuse.py",
        "tracking/tags.py",
        "bench/runner.py",
        "interop.py",
    ):
        if (root / rel).exists():
            _append(root / rel)
    (tmp_path / "README.md").write_text("# docs edited\n")
    fingerprint.cache_clear()
    assert code_fingerprint([], root).digest == before.digest

    # In it: training, model, data and config code, and the registry.
    for rel in ("training/engine.py", "model/config.py", "data/tokenizer.py", "config/identity.py", "registry.py"):
        _append(root / rel)
        fingerprint.cache_clear()
        after = code_fingerprint([], root)
        assert after.digest != before.digest
        assert after.changed_parts(before.parts) == [f"cem_ablate/{rel}"]
        before = after
    (root / "model" / "new_block.py").write_text("X = 1\n")  # a file added counts too
    fingerprint.cache_clear()
    assert code_fingerprint([], root).changed_parts(before.parts) == ["cem_ablate/model/new_block.py"]


# -- what runs is hashed, not the bytes --------------------------------------------------


def _edit_docstrings(path: Path) -> int:
    """Put "Edited. " at the start of every docstring of the module (module, classes,
    functions); returns how many."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    starts = [
        sum(map(len, lines[: n.lineno - 1])) + len(lines[n.lineno - 1].encode()[: n.col_offset].decode())
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and ast.get_docstring(node, clean=False) is not None
        for n in [node.body[0]]
    ]
    for start in sorted(starts, reverse=True):
        quote = re.compile(r"[rRuU]?(\"\"\"|\'\'\'|\"|\')").match(text, start)
        text = text[: quote.end()] + "Edited. " + text[quote.end() :]
    path.write_text(text)
    return len(starts)


def _bump_first_number(path: Path) -> bool:
    """Change one character of the module's first int or float literal (a digit, +1 mod 10);
    False if it has none."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.lineno == node.end_lineno:
            line = lines[node.lineno - 1]
            literal = line.encode()[node.col_offset : node.end_col_offset].decode()
            digit = re.search(r"[0-9]", literal)
            edited = literal[: digit.start()] + str((int(digit.group()) + 1) % 10) + literal[digit.end() :]
            if ast.literal_eval(edited) == node.value:
                continue
            start = line.encode()[: node.col_offset].decode()
            lines[node.lineno - 1] = start + edited + line[len(start) + len(literal) :]
            path.write_text("".join(lines))
            return True
    return False


def test_a_docstring_comment_or_formatting_edit_keeps_the_key(tmp_path):
    real = code_fingerprint([])
    root = _copy(REPO / "cem_ablate", tmp_path / "cem_ablate")
    training = sorted((root / "training").glob("*.py"))
    edited = 0
    for path in training:
        edited += _edit_docstrings(path)
        _append(path, "\n\n# a comment\n")
    assert edited > len(training)  # modules' and functions' docstrings
    # a full reformat: every model module rewritten by ast.unparse (quotes, line breaks,
    # blank lines, comments gone)
    for path in sorted((root / "model").glob("*.py")):
        reformatted = ast.unparse(ast.parse(path.read_text()))
        assert reformatted != path.read_text()
        path.write_text(reformatted)
    fingerprint.cache_clear()
    assert code_fingerprint([], root).digest == real.digest


def test_a_changed_constant_changes_the_key(tmp_path):
    """One character of a number literal in each training module changes the key, and
    the changed parts name exactly the modules edited."""
    root = _copy(REPO / "cem_ablate", tmp_path / "cem_ablate")
    before = code_fingerprint([], root)
    bumped = [p for p in sorted((root / "training").glob("*.py")) if _bump_first_number(p)]
    assert len(bumped) >= 3
    fingerprint.cache_clear()
    after = code_fingerprint([], root)
    assert after.digest != before.digest
    assert after.changed_parts(before.parts) == sorted(f"cem_ablate/training/{p.name}" for p in bumped)


def test_module_digest_is_of_the_tree():
    digest = fingerprint.module_digest
    base = digest(b'"""Doc."""\nX = 1\n\ndef f(a):\n    """Doc."""\n    return a + X\n')
    assert digest(b'"""Other."""\nX = 1  # one\ndef f(a):\n    return (a +\n            X)\n') == base
    assert digest(b'"""Doc."""\nX = 1.0\n\ndef f(a):\n    return a + X\n') != base  # 1 -> 1.0
    assert digest(b'"""Doc."""\nX = 1\n\ndef f(a):\n    return a - X\n') != base
    assert digest(b'"""Doc."""\nX = 1\n\ndef f(a):\n    print("Doc.")\n    return a + X\n') != base
    assert digest(b"def f(:\n") != digest(b"def f( :\n")  # not parsed: its bytes
    # Python 3.12 parses f"{k:<{w}}" with one more, empty, literal part than 3.10, 3.11 and 3.13
    tree, with_empty = ast.parse('f"{k:<{w}}"'), ast.parse('f"{k:<{w}}"')
    with_empty.body[0].value.values.append(ast.Constant(""))
    assert fingerprint.normalized_tree(tree) == fingerprint.normalized_tree(with_empty)
    assert digest(b'f"{k:<{w}}"') != digest(b'f"{k:<{w}} "')


def test_a_plugin_is_hashed_by_what_it_runs(tmp_path):
    """A docstring or formatting edit of a plugin module keeps its parts; an edit of its
    code (GELU -> tanh-GELU in the module the registered MLP imports) changes them."""
    activation = install_plugin(tmp_path / "site")
    mlp = ComponentSource("gelu_plugin.mlp", str(activation.parent / "mlp.py"))
    before = code_fingerprint([mlp])
    assert {"gelu_plugin/mlp.py", "gelu_plugin/activation.py"} <= set(before.parts)
    assert _edit_docstrings(activation.parent / "mlp.py") == 1
    activation.write_text(
        '"""The activation."""\nimport torch.nn.functional as F\n\n\ndef act(x):  # GELU\n'
        "    return F.gelu(\n        x\n    )\n"
    )
    fingerprint.cache_clear()
    assert code_fingerprint([mlp]).digest == before.digest
    edit_to_tanh_gelu(activation)
    fingerprint.cache_clear()
    assert code_fingerprint([mlp]).changed_parts(before.parts) == ["gelu_plugin/activation.py"]


def test_a_component_brings_the_modules_of_its_package_it_imports(tmp_path):
    zoo = _copy(REPO / "components", tmp_path / "site" / "components")
    cem = ComponentSource("components.cem_attention", str(zoo / "cem_attention.py"))
    swiglu = ComponentSource("components.swiglu", str(zoo / "swiglu.py"))
    parts = dict(fingerprint.component_parts(cem))
    assert {"components/cem_attention.py", "components/energy_recursion.py", "components/preconditioner.py"} <= set(
        parts
    )
    assert "components/swiglu.py" not in parts and "components/__init__.py" not in parts  # unused families
    cem_before, swiglu_before = code_fingerprint([cem]), code_fingerprint([swiglu])

    _append(zoo / "energy_recursion.py")  # imported by CEM attention only
    fingerprint.cache_clear()
    assert code_fingerprint([cem]).changed_parts(cem_before.parts) == ["components/energy_recursion.py"]
    assert code_fingerprint([swiglu]).digest == swiglu_before.digest


def test_relative_imports_are_followed(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "main.py").write_text("from . import helper\nfrom .sub.deep import f\nimport json\n")
    (package / "helper.py").write_text("from .sub import deep\n")
    (package / "sub" / "deep.py").write_text("def f(): pass\n")
    (package / "unused.py").write_text("")
    parts = dict(fingerprint.component_parts(ComponentSource("pkg.main", str(package / "main.py"))))
    assert set(parts) == {"pkg/main.py", "pkg/helper.py", "pkg/sub/deep.py"}


def test_a_plugin_brings_its_sibling_modules_and_the_zoo_blocks_it_imports(tmp_path, monkeypatch):
    """A plugin of two top-level modules (one distribution, as pip leaves it) whose
    component imports the other and the zoo's public building blocks: both count, and an
    edit of the sibling changes the fingerprint (its trials are not reused)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sig_attention.py").write_text(
        "import torch\nfrom sig_parts import f\nfrom components.attention_blocks import causal_mask\n"
    )
    (site / "sig_parts.py").write_text("def f(): pass\n")
    (site / "unrelated.py").write_text("")
    info = site / "two_mod-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: two-mod\nVersion: 0.1\n")
    (info / "RECORD").write_text("sig_attention.py,,\nsig_parts.py,,\n")
    monkeypatch.syspath_prepend(str(site))
    source = ComponentSource("sig_attention", str(site / "sig_attention.py"), "two-mod==0.1")
    parts = dict(fingerprint.component_parts(source))
    assert {
        "sig_attention.py",
        "sig_parts.py",
        "components/attention_blocks.py",
        "components/rope.py",
        "components/llama_attention.py",
        "dist:two-mod",
    } <= set(parts)
    assert "unrelated.py" not in parts and not any(name.startswith("torch") for name in parts)
    before = code_fingerprint([source])
    _append(site / "sig_parts.py")
    fingerprint.cache_clear()
    assert code_fingerprint([source]).changed_parts(before.parts) == ["sig_parts.py"]


def test_a_plugin_version_is_part_of_it():
    a = code_fingerprint([ComponentSource("json", None, "p==0.1")])
    b = code_fingerprint([ComponentSource("json", None, "p==0.2")])
    assert a.digest != b.digest and b.changed_parts(a.parts) == ["dist:p"]


KEYS = textwrap.dedent("""
    import json, sys
    sys.path[:0] = sys.argv[1:]
    from cem_ablate import registry
    from cem_ablate.training.config import parse_run_config

    models = {"llama": {}, "cem": {"attention": {"name": "cem"}}}
    if "gelu_test" in registry.names("mlp"):
        models["gelu"] = {"mlp": {"name": "gelu_test"}}
    out = {}
    for name, model in models.items():
        cfg = parse_run_config({"model": {"size": "tiny", **model}})
        out[name] = {"key": cfg.trial_key(), "variant": cfg.variant_key(), "parts": dict(cfg.code_fingerprint().parts)}
    print(json.dumps(out))
""")


def source_copy(folder: Path) -> Path:
    """A copy of `cem_ablate` and `components`, first on the path of a subprocess: the
    code it runs and fingerprints, steady while the repository's files change."""
    for package in ("cem_ablate", "components"):
        _copy(REPO / package, folder / package)
    return folder


def _keys(*path_prefix: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", KEYS, *map(str, path_prefix)], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_editing_a_plugin_changes_the_keys_of_the_configs_using_it(tmp_path):
    """GELU -> tanh-GELU in a plugin MLP: a config using it has a new trial key (its
    variant key, hence its Optuna study, stays); configs without it keep theirs."""
    src = source_copy(tmp_path / "src")
    activation = install_plugin(tmp_path / "site")
    before = _keys(src, tmp_path / "site")
    assert before["gelu"]["parts"][f"dist:{DISTRIBUTION}"] == "0.1"
    assert before["gelu"]["parts"]["cem_ablate/training/engine.py"]  # from the copy: steady
    assert {"gelu_plugin/mlp.py", "gelu_plugin/activation.py"} <= set(before["gelu"]["parts"])
    edit_to_tanh_gelu(activation)
    after = _keys(src, tmp_path / "site")
    assert after["gelu"]["key"] != before["gelu"]["key"]
    assert after["gelu"]["variant"] == before["gelu"]["variant"]
    assert after["llama"]["key"] == before["llama"]["key"] and after["cem"]["key"] == before["cem"]["key"]


def test_editing_a_builtin_component_changes_the_keys_of_the_configs_using_it(tmp_path):
    """A copy of the zoo first on the path is the zoo the registry loads (entry point
    `builtin = components`): an edit of CEM attention's recursion changes the CEM key only.
    A platform edit changes every key."""
    src = source_copy(tmp_path)
    before = _keys(src)
    assert "components/energy_recursion.py" in before["cem"]["parts"]
    _append(src / "components" / "energy_recursion.py")
    after = _keys(src)
    assert after["cem"]["key"] != before["cem"]["key"]
    assert after["llama"]["key"] == before["llama"]["key"]
    _append(src / "cem_ablate" / "training" / "engine.py")
    edited = _keys(src)
    assert edited["cem"]["key"] != after["cem"]["key"] and edited["llama"]["key"] != after["llama"]["key"]

"""No function in cem_ablate/ is longer than 60 lines: a longer one is split into named steps.

A function's length is `end_lineno - lineno + 1` of its `def` (or `async def`) node:
from the `def` line to its last line, docstring, comments and blank lines inside
included, decorators excluded. Nested functions and methods are measured on their own
(and count toward the function that holds them).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cem_ablate"
MAX_LINES = 60


def long_functions(source: str, name: str, limit: int = MAX_LINES) -> list[str]:
    """`name:line function (n lines)` of each function in `source` longer than `limit` lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                found.append(f"{name}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_in_the_package_is_over_60_lines():
    too_long = [entry for path in sorted(PACKAGE.rglob("*.py"))
                for entry in long_functions(path.read_text(), str(path.relative_to(PACKAGE.parent)))]
    assert not too_long, f"functions over {MAX_LINES} lines (split them into named steps):\n" + "\n".join(too_long)


def test_the_measure_counts_from_the_def_line_and_not_the_decorators():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))
    at_limit = f"@staticmethod\n@property\ndef f():\n{body}\n"  # def + 59 body lines = 60
    assert long_functions(at_limit, "m") == []
    method_body = "\n".join(f"        x{i} = {i}" for i in range(MAX_LINES))
    over = f"class C:\n    async def g(self):\n{method_body}\n"  # def + 60 body lines = 61
    assert long_functions(over, "m") == ["m:2 g (61 lines)"]

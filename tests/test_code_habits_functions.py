"""No function in cem_ablate/ is longer than 55 statements: a longer one is split into named steps.

A function's length is the number of lines on which one of its statements starts, the
`def` line included: a compound statement's header counts once and its body line by line,
while the formatter's wrapping of a long call, docstrings, comments and blank lines count
nothing, so reformatting a module never changes a length. Nested functions and methods are
measured on their own (and count toward the function that holds them).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cem_ablate"
MAX_STATEMENTS = 55


def statement_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return len({stmt.lineno for stmt in ast.walk(node) if isinstance(stmt, ast.stmt) and not _is_docstring(stmt)})


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def long_functions(source: str, name: str, limit: int = MAX_STATEMENTS) -> list[str]:
    """`name:line function (n statements)` of each function in `source` longer than `limit`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = statement_lines(node)
            if length > limit:
                found.append(f"{name}:{node.lineno} {node.name} ({length} statements)")
    return found


def test_no_function_in_the_package_is_over_55_statements():
    too_long = [
        entry
        for path in sorted(PACKAGE.rglob("*.py"))
        for entry in long_functions(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    ]
    assert not too_long, f"functions over {MAX_STATEMENTS} statements (split them into named steps):\n" + "\n".join(
        too_long
    )


def test_the_measure_counts_statements_from_the_def_line_and_not_the_decorators():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_STATEMENTS - 1))
    at_limit = f"@staticmethod\n@property\ndef f():\n{body}\n"  # def + 54 statements = 55
    assert long_functions(at_limit, "m") == []
    method_body = "\n".join(f"        x{i} = {i}" for i in range(MAX_STATEMENTS))
    over = f"class C:\n    async def g(self):\n{method_body}\n"  # def + 55 statements = 56
    assert long_functions(over, "m") == ["m:2 g (56 statements)"]


def test_wrapping_a_call_or_adding_a_docstring_and_comments_changes_no_length():
    one_line = "def f(a, b):\n    return g(a, b, c=1)\n"
    wrapped = 'def f(a, b):\n    """Doc\n    string."""\n    # why\n\n    return g(\n        a,\n        b,\n        c=1,\n    )\n'
    assert [statement_lines(ast.parse(s).body[0]) for s in (one_line, wrapped)] == [2, 2]

"""Every Python snippet of the README stands on its own: it compiles (top-level ``await`` allowed,
as in an asyncio REPL or notebook) and uses no name it does not import or define."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path
from typing import List, Set, Tuple

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def snippets() -> List[Tuple[int, str]]:
    text = README.read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        found.append((text.count("\n", 0, match.start()) + 1, match.group(1)))
    return found


def undefined_names(source: str) -> Set[str]:
    tree = ast.parse(source)
    defined: Set[str] = set(dir(builtins))
    loaded: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (defined if isinstance(node.ctx, (ast.Store, ast.Del)) else loaded).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            defined.add(node.name)
    return loaded - defined


def test_the_readme_has_python_snippets() -> None:
    assert len(snippets()) >= 5


@pytest.mark.parametrize("line,source", snippets(), ids=lambda v: str(v) if isinstance(v, int) else "")
def test_a_readme_snippet_compiles_and_defines_every_name_it_uses(line: int, source: str) -> None:
    compile(source, f"README.md:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    assert undefined_names(source) == set(), f"README.md line {line}"

"""The answer-to-code extraction every target gets (docs/bench.md, humaneval)."""

from __future__ import annotations

from sparkcode.bench import load_problems
from sparkcode.bench._code import build_solution, extract_code, sanitize

P0 = load_problems()["HumanEval/0"]


def test_the_fence_defining_the_entry_point_wins() -> None:
    answer = (
        "First a helper:\n```python\ndef helper(): pass\n```\nThen:\n```py\n"
        "def has_close_elements(numbers, threshold):\n    return False\n```"
    )
    code, how = extract_code(answer, "has_close_elements")
    assert how == "fence" and code.startswith("def has_close_elements")


def test_an_unclosed_fence_and_a_bare_answer() -> None:
    code, how = extract_code("```python\ndef f(x):\n    return x\n", "f")
    assert how == "fence" and "return x" in code
    code, how = extract_code("Sure!\ndef f(x):\n    return x\nThat's it.", "f")
    assert how == "bare" and code == "def f(x):\n    return x"


def test_sanitizing_drops_tests_prints_and_main() -> None:
    code = (
        "import math\nX = 3\ndef f():\n    return X\nprint(f())\nassert f() == 3\n"
        "if __name__ == '__main__':\n    f()\nthis is not python"
    )
    assert sanitize(code) == "import math\n\nX = 3\n\ndef f():\n    return X"


def test_a_body_continues_the_prompt_and_prompt_imports_come_first() -> None:
    solution, how = build_solution(P0, "    return False\n")
    assert how == "none+continuation"
    assert solution.startswith("from typing import List\n")
    assert "def has_close_elements" in solution and solution.rstrip().endswith("return False")

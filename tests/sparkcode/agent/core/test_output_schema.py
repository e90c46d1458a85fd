"""``run --output-schema``'s check of the answer: only the schema file's own ``$ref``s."""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest

from sparkcode.agent.core.output_schema import OutputSchemaError, check_answer


def test_a_ref_outside_the_file_is_refused_and_never_fetched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fetched(*_args: Any, **_kw: Any) -> None:
        pytest.fail("jsonschema fetched a $ref over the network")

    monkeypatch.setattr(urllib.request, "urlopen", fetched)
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.invalid/x.json"}}}
    with pytest.raises(
        OutputSchemaError,
        match=r"\$ref 'https://example.invalid/x.json' is "
        r"not in the schema file",
    ):
        check_answer('{"a": 1}', schema)
    local = {"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}}
    assert check_answer('{"a": 1}', local) == {"a": 1}
    with pytest.raises(OutputSchemaError, match="does not match the schema at /a"):
        check_answer('{"a": "x"}', local)

"""Fixtures of the front ends' tests: llama.cpp's own tools, where they are built."""
from __future__ import annotations

import pytest

from engine.errors import EngineError
from engine.frontends import native


@pytest.fixture(scope="module")
def tools():
    """llama.cpp's llama-bench and llama-speculative-simple (scripts/build_llama_tools.sh), or a skip saying why."""
    try:
        return native.locate()
    except EngineError as exc:
        pytest.skip(f"llama.cpp tools not built: {exc}")

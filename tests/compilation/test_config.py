"""CompilationConfig: defaults (cache dir, capture sizes), what LLM(compilation_config=...) accepts,
and bad input naming the argument; under the suite, the default cache dir is outside the home
directory (tests/conftest.py)."""
import subprocess
import sys
from pathlib import Path

import pytest

from ascendtile.compilation import CompilationConfig, CompilationLevel, piece_capture


def test_defaults_and_forms():
    config = CompilationConfig()
    assert config.level == CompilationLevel.NO_COMPILATION
    assert "ascend::unified_attention" in config.splitting_ops
    assert CompilationConfig.from_user(None).level == 0
    assert CompilationConfig.from_user(2).level == CompilationLevel.DYNAMO_ONCE
    assert CompilationConfig.from_user({"level": 1, "use_inductor": False}).use_inductor is False
    assert CompilationConfig.from_user(config) is config


@pytest.mark.parametrize("value, error, match", [
    (4, ValueError, "^level"), (-1, ValueError, "^level"), ({"level": "2"}, ValueError, "^level"),
    (True, TypeError, "^compilation_config"), ("2", TypeError, "^compilation_config"),
    ({"levle": 2}, ValueError, "^compilation_config: unknown field"),
    ({"splitting_ops": ["ascend::no_such_op"]}, ValueError, "^splitting_ops"),
    ({"splitting_ops": ["torch::unified_attention"]}, ValueError, "^splitting_ops"),
    ({"splitting_ops": "ascend::unified_attention"}, TypeError, "^splitting_ops"),
    ({"use_inductor": 1}, TypeError, "^use_inductor"), ({"cpu_decode_graph": "yes"}, TypeError, "^cpu_decode_graph"),
    ({"level": 3, "cpu_decode_graph": True}, ValueError, "^cpu_decode_graph: only level 2"),
    ({"cache_dir": None}, TypeError, "^cache_dir"),
    ({"capture_sizes": []}, ValueError, "^capture_sizes"), ({"capture_sizes": [4, 2]}, ValueError, "^capture_sizes"),
    ({"capture_sizes": [0, 2]}, ValueError, "^capture_sizes"), ({"capture_sizes": [2, 2]}, ValueError, "^capture_sizes"),
    ({"capture_sizes": [1.0]}, ValueError, "^capture_sizes"),
])
def test_bad_input_names_the_argument(value, error, match):
    with pytest.raises(error, match=match):
        CompilationConfig.from_user(value)


def test_cache_dir_default_is_per_user_and_honours_the_env(monkeypatch, tmp_path):
    monkeypatch.delenv("ASCENDTILE_CACHE_DIR", raising=False)
    assert CompilationConfig().cache_dir == str(Path.home() / ".cache" / "ascendtile" / "compile")
    monkeypatch.setenv("ASCENDTILE_CACHE_DIR", str(tmp_path))
    assert CompilationConfig().cache_dir == str(tmp_path / "compile")
    assert CompilationConfig(cache_dir="~/x").cache_dir == str(Path.home() / "x")


def test_the_suite_never_compiles_into_the_home_directory():
    """The default cache dir of this process and of the processes it spawns lies outside ~."""
    default = Path(CompilationConfig().cache_dir).resolve()
    assert not default.is_relative_to(Path.home().resolve()), default
    spawned = subprocess.run([sys.executable, "-c", "import os; print(os.environ['ASCENDTILE_CACHE_DIR'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert (Path(spawned) / "compile").resolve() == default


def test_capture_sizes():
    assert CompilationConfig().capture_sizes_for(5) == (1, 2, 4, 8)
    assert CompilationConfig().capture_sizes_for(1) == (1,)
    assert CompilationConfig(capture_sizes=[2, 6]).capture_sizes_for(64) == (2, 6)


def test_piece_capture_only_at_level_3_on_a_device_with_graphs():
    assert piece_capture(CompilationConfig(level=3), "cpu", 8) is None
    assert piece_capture(CompilationConfig(level=2), "cuda", 8) is None

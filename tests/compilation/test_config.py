"""CompilationConfig: defaults, what LLM(compilation_config=...) accepts, and bad input naming
the argument."""
import pytest

from ascendkit.compilation import CompilationConfig, CompilationLevel, compile_model


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
    ({"use_inductor": 1}, TypeError, "^use_inductor"),
])
def test_bad_input_names_the_argument(value, error, match):
    with pytest.raises(error, match=match):
        CompilationConfig.from_user(value)


def test_piecewise_is_refused_until_implemented():
    with pytest.raises(NotImplementedError, match="^level: 3"):
        compile_model(object(), CompilationConfig(level=3))

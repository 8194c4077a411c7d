"""`autofusion bench` forwards its arguments to the benchmarks' own parser."""
import pytest

from autofusion.cli import main
from autofusion.benchmarks.cli import ZOO, build_parser, settings_from_args


def test_bench_list_goes_through_the_autofusion_command(capsys):
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    assert "tiny_resnet" in out and "inductor-freezing" in out


def _settings(*argv):
    parser = build_parser()
    return settings_from_args(parser.parse_args(list(argv)), parser)


def test_defaults_run_the_zoo_and_quick_runs_the_built_in_model():
    full, quick = _settings(), _settings("--quick", "--rounds", "1")
    assert full.models == ZOO and (full.rounds, full.block) == (10, 10)
    assert quick.models == ["tiny_resnet"] and (quick.rounds, quick.block) == (1, 5)


def test_eager_always_runs_as_the_reference():
    assert _settings("--systems", "ort-enable-all").systems == ["ort-enable-all", "torch-eager"]


def test_unknown_model_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        _settings("--models", "resnet5")
    assert "unknown model resnet5" in capsys.readouterr().err

"""What the Python tests under tests/ share."""
import pytest


@pytest.fixture
def accelerate_launch_env(monkeypatch):
    """A function of an exported folder `out`: what `accelerate launch --config_file
    accelerate_config.yaml train.py`, run in `out`, prepares for a DeepSpeed config before it
    starts the ranks, from accelerate's own parser and command builder: (its parsed arguments,
    the environment each rank's Accelerator reads). The working folder stays `out`."""

    def launch_env(out):
        launch = pytest.importorskip("accelerate.commands.launch")
        launch_utils = pytest.importorskip("accelerate.utils.launch")
        monkeypatch.chdir(out)
        args = launch.launch_command_parser().parse_args(["--config_file", "accelerate_config.yaml", "train.py"])
        args, defaults, _ = launch._validate_launch_command(args)
        args.deepspeed_fields_from_accelerate_config = list(defaults.deepspeed_config.keys())
        _, env = launch_utils.prepare_deepspeed_cmd_env(args)
        return args, env

    return launch_env

import json

import pytest
import typer
from typer.testing import CliRunner

from serve.cli import app
from serve.cli_entry import hoist_global_options

pytestmark = pytest.mark.unit
ROOT = typer.main.get_command(app)


@pytest.mark.parametrize(
    ("given", "read_as"),
    [
        (["up", "--config", "c.yaml"], ["--config", "c.yaml", "up"]),
        (["up", "-c", "c.yaml", "--no-dashboard"], ["-c", "c.yaml", "up", "--no-dashboard"]),
        (["stats", "--data-dir=/srv/g", "-v"], ["--data-dir=/srv/g", "-v", "stats"]),
        (["-c", "a.yaml", "ask", "-t", "acme", "q", "--data-dir", "d"],
         ["-c", "a.yaml", "--data-dir", "d", "ask", "-t", "acme", "q"]),
        (["models", "fetch", "qwen2.5-0.5b", "--data-dir", "d"],
         ["--data-dir", "d", "models", "fetch", "qwen2.5-0.5b"]),
        (["--config", "c.yaml", "up"], ["--config", "c.yaml", "up"]),
        (["ask", "-t", "acme", "--", "-c"], ["ask", "-t", "acme", "--", "-c"]),
    ],
)  # fmt: skip
def test_global_options_after_the_command_are_read_before_it(given, read_as):
    assert hoist_global_options(ROOT, given) == read_as


def test_a_data_dir_given_after_the_command_is_used(tmp_path):
    args = hoist_global_options(ROOT, ["stats", "--json", "--data-dir", str(tmp_path / "d")])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"data_dir": str(tmp_path / "d"), "tenants": []}

"""Every YAML file in configs/ is valid: Grounded configs against the typed config, the Serve
deploy file against Ray's own schema (and the Grounded config it names)."""

from __future__ import annotations

import pytest
import yaml

from serve.config import load_config
from tests.conftest import REPO

pytestmark = pytest.mark.integration
CONFIGS = REPO / "configs"


@pytest.mark.parametrize("name", ["cpu.yaml", "gpu.yaml"])
def test_grounded_configs_load(name):
    config = load_config(CONFIGS / name)
    assert set(config.serve.deployments) == {
        "ingress",
        "embedder",
        "shards",
        "generator",
        "reranker",
    }


def test_cpu_config_fits_two_cores():
    config = load_config(CONFIGS / "cpu.yaml")
    cpus = sum(d.num_cpus * d.num_replicas for d in config.serve.deployments.values())
    assert cpus <= 1.5  # leaves room for Ray's own processes on a 2-core machine
    assert all(d.num_gpus == 0 for d in config.serve.deployments.values())


def test_serve_deploy_file_matches_rays_schema_and_names_a_valid_config():
    from ray.serve.schema import ServeDeploySchema

    deploy = ServeDeploySchema.model_validate(yaml.safe_load((CONFIGS / "serve.yaml").read_text()))
    [application] = deploy.applications
    assert application.import_path == "serve.appliance:build_app"
    load_config(REPO / application.args["config"])


def test_unknown_deployment_names_are_refused():
    from index.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown deployments"):
        load_config(None, serve={"deployments": {"reranker-x": {"num_cpus": 1}}})

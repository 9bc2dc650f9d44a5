"""What each deployment asks Ray for, and the checks that refuse incoherent GPU requests."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from index.errors import ConfigError
from serve.cli import app
from serve.config import load_config
from serve.deployments.resources import (
    deployment_options,
    engine_kwargs,
    generator_deployments,
    gpu_demand,
    gpu_packing,
)
from tests.conftest import REPO

pytestmark = pytest.mark.unit

GPU_YAML = REPO / "configs" / "gpu.yaml"


def gpu_config(models: bool = False, **sections):
    """configs/gpu.yaml with ``sections`` merged over it (one level deep per section); its
    one generator unless ``models`` (then its two, generator.models)."""
    import yaml

    data = yaml.safe_load(GPU_YAML.read_text())
    if not models:
        del data["generator"]["models"], data["generator"]["route"]
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return load_config(None, **data)


def deployments(**changes):
    """gpu.yaml's serve.deployments with some deployments' options changed."""
    import yaml

    shipped = yaml.safe_load(GPU_YAML.read_text())["serve"]["deployments"]
    return {name: {**options, **changes.get(name, {})} for name, options in shipped.items()}


def test_the_gpu_config_asks_ray_for_every_gpu_it_uses_and_fits_one_gpu():
    config = load_config(GPU_YAML)
    for name in ("embedder", "shards", "reranker"):
        assert deployment_options(config, name)["ray_actor_options"]["num_gpus"] > 0, name
    for model, (name, _, _) in generator_deployments(config).items():
        options = deployment_options(config, name, model=model)
        assert options["ray_actor_options"]["num_gpus"] > 0, name
    assert gpu_packing(config, 1) is None


@pytest.mark.parametrize(
    ("section", "field", "deployment"),
    [("index", "vectors", "shards"), ("index", "embedder", "embedder")],
)
def test_cuda_without_a_gpu_request_is_refused(section, field, deployment):
    with pytest.raises(ConfigError, match=f"{section}.{field}.device is cuda but serve"):
        gpu_config(serve={"deployments": deployments(**{deployment: {"num_gpus": 0}})})


def test_a_tensor_parallel_generator_gets_one_bundle_per_gpu_and_the_ray_executor():
    config = gpu_config(
        generator={"engine_kwargs": {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.9}},
        serve={"deployments": deployments(generator={"num_gpus": 2})},
    )
    options = deployment_options(config, "generator")
    assert options["ray_actor_options"]["num_gpus"] == 0  # the replica rides in bundle 0
    assert options["placement_group_bundles"] == [{"CPU": 4, "GPU": 1.0}, {"GPU": 1.0}]
    assert options["placement_group_strategy"] == "STRICT_PACK"
    assert engine_kwargs(config)["distributed_executor_backend"] == "ray"
    assert "placement_group_bundles" not in deployment_options(config, "embedder")
    # two whole GPUs for the engine, one more for the fractions of the others
    assert gpu_packing(config, 3) is None
    assert "need 3 GPUs" in gpu_packing(config, 2)


def test_a_tensor_parallel_generator_must_request_as_many_gpus():
    with pytest.raises(ConfigError, match=r"spans 4 GPUs .* set it to 4"):
        gpu_config(generator={"engine_kwargs": {"tensor_parallel_size": 4}})


def test_vllm_may_not_take_more_gpu_memory_than_its_share_of_the_gpu():
    with pytest.raises(ConfigError, match=r"gpu_memory_utilization 0\.9 is more"):
        gpu_config(generator={"engine_kwargs": {"gpu_memory_utilization": 0.9}})


def test_the_engine_holds_every_admitted_generation():
    config = load_config(GPU_YAML)  # 2 ingress replicas x 128 generation slots
    assert engine_kwargs(config)["max_num_seqs"] == 256
    unset = load_config(None)  # 1 x 16 admitted: vLLM's own default of 128 stays
    assert engine_kwargs(unset)["max_num_seqs"] == 128
    with pytest.raises(ConfigError, match="max_num_seqs 128 is below the 256 generations"):
        gpu_config(generator={"engine_kwargs": {"max_num_seqs": 128}})


def test_replicas_that_do_not_fit_the_gpus_are_named():
    config = gpu_config(serve={"deployments": deployments(generator={"num_replicas": 2})})
    assert gpu_packing(config, 2) is None  # one generator per GPU, the rest beside one
    problem = gpu_packing(config, 1)
    assert "need 2 GPUs" in problem and "Generator 0.7" in problem


def test_check_config_checks_the_packing_for_a_given_gpu_count(tmp_path):
    runner = CliRunner()
    fits = runner.invoke(app, ["check-config", str(GPU_YAML), "--gpus", "1"])
    assert fits.exit_code == 0, fits.output
    crowded = tmp_path / "crowded.yaml"
    shipped = "deployment: {num_replicas: 1, num_cpus: 4, num_gpus: 0.4"
    assert shipped in GPU_YAML.read_text()  # the large model's
    crowded.write_text(GPU_YAML.read_text().replace(shipped, shipped.replace("1,", "3,")))
    refused = runner.invoke(app, ["check-config", str(crowded), "--gpus", "1"])
    assert refused.exit_code != 0
    assert "need 2 GPUs" in refused.output and "generator-large 0.4" in refused.output


def test_the_two_generators_of_gpu_yaml_are_deployments_with_their_own_gpu_shares():
    config = gpu_config(models=True)
    small = deployment_options(config, "generator-small", model="small")
    large = deployment_options(config, "generator-large", model="large")
    assert small["ray_actor_options"]["num_gpus"] == 0.3
    assert large["ray_actor_options"]["num_gpus"] == 0.4
    assert "generator" not in {name for name, _ in gpu_demand(config)}  # not deployed
    assert gpu_packing(config, 1) is None


def test_each_generators_memory_must_fit_its_own_share():
    import yaml

    models = yaml.safe_load(GPU_YAML.read_text())["generator"]["models"]
    models["large"]["engine_kwargs"]["gpu_memory_utilization"] = 0.6
    with pytest.raises(ConfigError, match=r"generator\.models\.large\.engine_kwargs\."
                       r"gpu_memory_utilization 0\.6 .*generator\.models\.large\.deployment"
                       r"\.num_gpus 0\.4"):  # fmt: skip
        gpu_config(models=True, generator={"models": models})


def test_an_extra_embedder_on_cuda_also_needs_the_embedders_gpu_request():
    cpu_default = {"model": "all-MiniLM-L6-v2", "device": "cpu"}
    serve = {"deployments": deployments(embedder={"num_gpus": 0})}
    with pytest.raises(ConfigError, match=r"index\.embedders\.multilingual\.device is cuda but"):
        gpu_config(index={"embedder": cpu_default}, serve=serve)
    on_cpu = {"multilingual": {"model": "multilingual-e5-small", "device": "cpu"}}
    assert gpu_config(index={"embedder": cpu_default, "embedders": on_cpu}, serve=serve)


def test_with_several_nodes_each_node_holds_one_shards_replica():
    """Each node keeps its tenants' copies in one folder (<data_dir>/nodes/<node>): two Shards
    replicas on a node would write the same files."""
    from serve.config import load_config

    one_node = load_config(None)
    several = load_config(None, state={"url": "postgresql://grounded@db:5432/grounded"})
    assert "max_replicas_per_node" not in deployment_options(one_node, "shards")
    assert deployment_options(several, "shards")["max_replicas_per_node"] == 1
    assert "max_replicas_per_node" not in deployment_options(several, "embedder")

"""What each deployment asks Ray for, derived from the config, and whether a config's GPU
requests hold together.

Ray only isolates what it is asked for: a replica that uses a GPU without requesting one runs
outside Ray's accounting (and on physical GPU 0, whatever Ray gave the others), and vLLM takes
``gpu_memory_utilization`` of its GPU's memory whatever fraction Ray gave it. So every
``device: cuda`` must come with a GPU request, vLLM's share of memory must fit in its share of
the GPU, and the fractions must pack onto the GPUs there are. The checks here run on every
config load (`grounded up`, `grounded check-config`); the packing check needs the GPU count
(`grounded check-config --gpus N`, and the cluster's own count at `grounded up`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from serve.config import AppConfig, DeploymentOptions, GeneratorConfig, ServeConfig

# vLLM's max_num_seqs when the engine is started from Python (usage context unknown).
VLLM_DEFAULT_MAX_NUM_SEQS = 128


def engine_devices(generator: GeneratorConfig) -> int:
    """GPUs one generator replica's engine spans: tensor x pipeline parallel size."""
    kwargs = generator.engine_kwargs
    return int(kwargs.get("tensor_parallel_size", 1)) * int(kwargs.get("pipeline_parallel_size", 1))


def admitted_generations(serve: ServeConfig) -> int:
    """Generations the ingress replicas may have in the engine at once (each admits up to
    ``generation_slots``); every replica may route them all to one generator replica."""
    return serve.generation_slots * serve.options("ingress").num_replicas


def engine_kwargs(config: AppConfig, generator: GeneratorConfig | None = None) -> dict[str, Any]:
    """vLLM's options for a generator replica (``generator``: one of ``generator.configs()``,
    default the one generator): the config's own, plus a sequence limit that holds every
    admitted generation (below it, requests would wait inside the engine, in its order rather
    than fair admission's) and the Ray executor for a multi-GPU engine (its workers go into
    the replica's placement group)."""
    generator = generator or config.generator
    kwargs = dict(generator.engine_kwargs)
    kwargs.setdefault(
        "max_num_seqs", max(admitted_generations(config.serve), VLLM_DEFAULT_MAX_NUM_SEQS)
    )
    if engine_devices(generator) > 1:
        kwargs.setdefault("distributed_executor_backend", "ray")
    return kwargs


def generator_deployments(
    config: AppConfig,
) -> dict[str, tuple[str, GeneratorConfig, DeploymentOptions]]:
    """Each answering model's deployment: model name -> (deployment name, its generator
    settings, its resources). One generator: ``Generator`` (its class's name, as the other
    deployments are named); several (``generator.models``): ``generator-<name>`` each, with
    its own resources or serve.deployments.generator's."""
    configs = config.generator.configs()
    if not config.generator.models:
        [(name, generator)] = configs.items()
        return {name: ("Generator", generator, config.serve.options("generator"))}
    return {
        name: (f"generator-{name}", configs[name],
               entry.deployment or config.serve.options("generator"))
        for name, entry in config.generator.models.items()
    }  # fmt: skip


def deployment_options(
    config: AppConfig, name: str, model: str | None = None, **extra: Any
) -> dict[str, Any]:
    """Ray Serve options of one deployment (``model``: the generator of that model). A
    generator spanning several GPUs gets one placement-group bundle per GPU, the replica itself
    in the first (Ray Serve LLM's layout): its engine's workers are scheduled into the bundles,
    so Ray reserves all the GPUs at once, on one node with STRICT_PACK."""
    options, generator = config.serve.options(name), None
    if name == "generator" and not config.generator.models:
        model = next(iter(config.generator.configs()))  # the one generator
    if model is not None:
        _, generator, options = generator_deployments(config)[model]
    actor: dict[str, Any] = {"num_cpus": options.num_cpus, "num_gpus": options.num_gpus}
    if options.resources:
        actor["resources"] = dict(options.resources)
    if extra.get("runtime_env"):
        actor["runtime_env"] = extra.pop("runtime_env")
    result = {
        "num_replicas": options.num_replicas,
        "max_ongoing_requests": options.max_ongoing_requests,
        "ray_actor_options": actor,
        **extra,
    }
    if name == "shards" and config.state.url:
        # Several nodes: a node's copies live in one folder per node (serve/shards/host.py),
        # which two replicas on the node would share.
        result["max_replicas_per_node"] = 1
    devices = engine_devices(generator) if generator is not None else 1
    if devices > 1:
        actor["num_gpus"] = 0
        first = {"CPU": options.num_cpus, "GPU": 1.0, **options.resources}
        result["placement_group_bundles"] = [first] + [{"GPU": 1.0}] * (devices - 1)
        result["placement_group_strategy"] = options.placement_strategy
    return result


def gpu_requests(config: AppConfig) -> list[str]:
    """What is incoherent in the config's GPU requests, one sentence each (empty: nothing)."""
    serve, problems = config.serve, []
    on_cuda = [n for n, e in config.index.embedder_configs().items() if e.device == "cuda"]
    embedder_field = "index.embedder.device" if "default" in on_cuda else (
        f"index.embedders.{on_cuda[0]}.device" if on_cuda else "")  # fmt: skip
    uses_cuda = {
        "embedder": (bool(on_cuda), embedder_field),
        "shards": (config.index.vectors.device == "cuda", "index.vectors.device"),
        "reranker": (
            config.query.rerank.backend == "cross-encoder" and config.query.rerank.device == "cuda",
            "query.rerank.device",
        ),
    }
    for name, (cuda, field) in uses_cuda.items():
        if cuda and serve.options(name).num_gpus == 0:
            problems.append(
                f"{field} is cuda but serve.deployments.{name}.num_gpus is 0: Ray would not "
                f"account for that GPU use nor say which GPU is the replica's; give it a "
                f"share (e.g. num_gpus: 0.1)"
            )
    shares = {f"serve.deployments.{name}": serve.options(name) for name in serve.deployments}
    for model, entry in config.generator.models.items():
        if entry.deployment is not None:
            shares[f"generator.models.{model}.deployment"] = entry.deployment
    for field, options in shares.items():
        share = options.num_gpus
        if share > 1 and share != int(share):
            problems.append(
                f"{field}.num_gpus is {share}: above 1 it must be a whole number of GPUs"
            )
    for model, (_, generator, options) in generator_deployments(config).items():
        kwargs = generator.engine_kwargs
        name = "generator" if not config.generator.models else f"generator.models.{model}"
        share = ("serve.deployments.generator.num_gpus" if not config.generator.models
                 or config.generator.models[model].deployment is None
                 else f"{name}.deployment.num_gpus")  # fmt: skip
        devices = engine_devices(generator)
        if devices > 1 and options.num_gpus != devices:
            problems.append(
                f"the {name} engine spans {devices} GPUs (tensor_parallel_size x "
                f"pipeline_parallel_size) but {share} is {options.num_gpus}: set it to "
                f"{devices} (one placement-group bundle per GPU)"
            )
        utilization = kwargs.get("gpu_memory_utilization")
        if utilization is not None and 0 < options.num_gpus < 1 and utilization > options.num_gpus:
            problems.append(
                f"{name}.engine_kwargs.gpu_memory_utilization {utilization} is more of the "
                f"GPU's memory than its share of the GPU ({share} {options.num_gpus}): the "
                "replicas that share the GPU need the rest; lower it or raise the share"
            )
        seqs, admitted = kwargs.get("max_num_seqs"), admitted_generations(serve)
        if seqs is not None and seqs < admitted:
            problems.append(
                f"{name}.engine_kwargs.max_num_seqs {seqs} is below the {admitted} generations "
                f"the ingress replicas admit (serve.generation_slots {serve.generation_slots} x "
                f"{serve.options('ingress').num_replicas} replicas): the rest would wait inside "
                "the engine, outside fair admission; raise it or lower generation_slots"
            )
    return problems


def gpu_demand(config: AppConfig) -> list[tuple[str, float]]:
    """(deployment, GPUs) per replica, one entry per replica (a multi-GPU engine: one whole
    GPU per bundle)."""
    deployed = {name: (config.serve.options(name), 1) for name in config.serve.deployments
                if name != "generator"}  # fmt: skip
    if config.query.rerank.backend != "cross-encoder":
        deployed.pop("reranker", None)  # not deployed
    for deployment, generator, options in generator_deployments(config).values():
        deployed[deployment] = (options, engine_devices(generator))
    demand = []
    for name, (options, devices) in deployed.items():
        each = [1.0] * devices if devices > 1 else [options.num_gpus]
        demand += [(name, share) for _ in range(options.num_replicas) for share in each if share]
    return demand


def gpu_packing(config: AppConfig, gpus: int) -> str | None:
    """Whether the replicas' GPU shares fit on ``gpus`` GPUs as Ray places them (whole GPUs
    apart, fractions of one GPU together): None, or what does not fit."""
    demand = gpu_demand(config)
    if not demand:
        return None
    whole = sum(math.ceil(share) for _, share in demand if share >= 1)
    free: list[float] = []  # what is left of each GPU holding fractions, first fit decreasing
    for _, share in sorted((d for d in demand if d[1] < 1), key=lambda d: -d[1]):
        for i, left in enumerate(free):
            if share <= left + 1e-9:
                free[i] = left - share
                break
        else:
            free.append(1.0 - share)
    needed = whole + len(free)
    if needed <= gpus:
        return None
    listed = ", ".join(f"{name} {share:g}" for name, share in demand)
    return (
        f"the deployments need {needed} GPUs ({listed} per replica) but {gpus} are available; "
        "lower num_gpus or num_replicas in serve.deployments, or add GPUs"
    )

"""AppConfig: every concern's config composed into one, from a YAML file plus the environment.

Precedence, highest first: explicit overrides (CLI flags), environment variables
(``GROUNDED_<FIELD>``, nested with ``__``: ``GROUNDED_INDEX__CHUNKER__SIZE=128``), the YAML
file, then defaults. Errors name the field and what is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from index.config import IndexConfig
from index.errors import ConfigError
from serve.accounting.budgets import BudgetsConfig, Prices
from serve.deployments.resources import gpu_packing, gpu_requests
from serve.identity.audit import AuditConfig
from serve.identity.oidc import AuthConfig
from serve.query.config import QueryConfig
from serve.query.routing import MODEL_ID, RouteConfig
from serve.shards.sources import SourcesConfig
from serve.state.database import StateConfig
from serve.tracing import TracingConfig

DEFAULT_DATA_DIR = Path("data")


class DeploymentOptions(BaseModel):
    """Ray Serve resources of one deployment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_replicas: int = Field(1, ge=1)
    num_cpus: float = Field(0.25, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    max_ongoing_requests: int = Field(64, ge=1)
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources, to pin replicas to nodes that declare them.",
    )
    placement_strategy: Literal["STRICT_PACK", "PACK", "SPREAD", "STRICT_SPREAD"] = Field(
        "STRICT_PACK",
        description="generator across several GPUs (tensor_parallel_size x "
        "pipeline_parallel_size > 1): where its GPUs' bundles go. STRICT_PACK: one node "
        "(tensor parallelism); PACK lets pipeline stages spill to other nodes.",
    )


def _deployments() -> dict[str, DeploymentOptions]:
    return {name: DeploymentOptions() for name in DEPLOYMENTS}


DEPLOYMENTS = ("ingress", "embedder", "shards", "generator", "reranker")


MODEL_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


class GeneratorModel(BaseModel):
    """One of several generators (``generator.models``): its model and, where they differ from
    the generator's, its engine settings, deployment resources, answer check threshold and
    prices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="A name from `grounded models list`, hf:Org/Name or a folder.")
    max_model_len: int | None = Field(None, gt=0)
    max_tokens: int | None = Field(None, gt=0)
    engine_kwargs: dict[str, Any] | None = None
    deployment: DeploymentOptions | None = Field(
        None, description="Its deployment's resources (default: serve.deployments.generator)."
    )
    min_answer_support: float | None = Field(
        None, ge=0.0, le=1.0,
        description="The answer check's threshold on this model's own P(yes) (default: "
        "query.min_answer_support).",
    )  # fmt: skip
    prices: Prices | None = Field(None, description="Its prices (default: budgets.prices).")


class GeneratorConfig(BaseModel):
    """``model`` is a local Hugging Face model folder. ``engine_kwargs`` are vLLM's own options
    (CPU needs a KV-cache size, e.g. ``kv_cache_memory_bytes``; GPU sets
    ``gpu_memory_utilization``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = Field(
        "qwen2.5-0.5b", description="A name from `grounded models list`, or a local model folder."
    )
    max_model_len: int = Field(4096, gt=0)
    max_tokens: int = Field(512, gt=0, description="Default answer length in tokens.")
    temperature: float = Field(0.0, ge=0.0)
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    models: dict[str, GeneratorModel] = Field(
        default_factory=dict,
        description="Several generators, by the name a request's model picks (at least two; "
        "each its own deployment). Empty: the one model above, named grounded.",
    )
    route: RouteConfig = Field(default_factory=RouteConfig)

    @model_validator(mode="after")
    def _models_route(self) -> GeneratorConfig:
        if not self.models:
            return self
        if len(self.models) < 2:
            raise ValueError("models names one generator: name two or more, or none (model)")
        for name in self.models:
            if not MODEL_NAME.fullmatch(name) or name == MODEL_ID:
                raise ValueError(
                    f"models: {name!r} is not a model name: lowercase letters, digits, '.', "
                    f"'-' and '_', and not {MODEL_ID!r} (the name that routes)"
                )
        for role in ("small", "large"):
            chosen = getattr(self.route, role)
            if chosen is not None and chosen not in self.models:
                raise ValueError(
                    f"route.{role} is {chosen!r}, which is not in models ({', '.join(self.models)})"
                )
        if self.small_model == self.large_model:
            raise ValueError("route.small and route.large name the same model")
        return self

    @property
    def small_model(self) -> str:
        """The model a routed question is asked first (route.small; the first listed)."""
        return self.route.small or next(iter(self.models))

    @property
    def large_model(self) -> str:
        """The model routed hard questions and cascades go to (route.large; the last listed)."""
        return self.route.large or list(self.models)[-1]

    def check_thresholds(self) -> dict[str, float]:
        """The models whose answer check has its own threshold (``min_answer_support``)."""
        return {name: entry.min_answer_support for name, entry in self.models.items()
                if entry.min_answer_support is not None}  # fmt: skip

    def configs(self) -> dict[str, GeneratorConfig]:
        """Each generator's own settings by model name: the one model as ``grounded``, or each
        of ``models`` with what it leaves out taken from here."""
        if not self.models:
            return {MODEL_ID: self}
        return {
            name: self.model_copy(update={
                **entry.model_dump(exclude_none=True, exclude={"deployment", "prices",
                                                               "min_answer_support"}),
                "models": {}, "route": RouteConfig(),
            })
            for name, entry in self.models.items()
        }  # fmt: skip


class ServeConfig(BaseModel):
    """The appliance (`grounded up`): addresses, queue limits and per-deployment resources."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    metrics_port: int = Field(8080, ge=1, le=65535)
    dashboard_port: int = Field(8265, ge=1, le=65535)
    proxy_location: Literal["HeadOnly", "EveryNode"] = Field(
        "HeadOnly", description="Serve's HTTP proxies: on the head only, or on every node."
    )
    generation_slots: int = Field(
        16, ge=1, description="Generations sent to the engine at once, per ingress replica."
    )
    prefill_slots: int | None = Field(
        None, ge=1,
        description="Of those, generations still processing their prompt, per ingress replica "
        "(default: generation_slots). Prompt processing is compute-bound: on CPU one at a time "
        "lets a newcomer's prompt run at full speed.",
    )  # fmt: skip
    queue_per_tenant: int = Field(
        16, ge=0, description="Requests of one tenant waiting for a slot; 429 beyond."
    )
    shards_per_replica: int = Field(16, ge=1, description="Tenant shards kept open (LRU).")
    upload_wait_s: float = Field(
        30.0,
        ge=0,
        description="How long POST /v1/files waits for the file's ingestion. A file that takes "
        "longer is answered with status 'uploaded' and ingested on; GET /v1/files/{id} says "
        "when it is processed (or why it was refused).",
    )
    embed_cache_size: int = Field(4096, ge=0, description="Query embeddings kept (LRU).")
    embed_batch_size: int = Field(32, ge=1)
    embed_batch_wait_s: float = Field(0.005, ge=0)
    generator_threads: int | None = Field(
        None, ge=1, description="OMP threads of the vLLM engine (CPU); default: all cores."
    )
    deployments: dict[str, DeploymentOptions] = Field(default_factory=_deployments)
    tracing: TracingConfig = TracingConfig()

    @field_validator("deployments")
    @classmethod
    def _known(cls, value: dict[str, DeploymentOptions]) -> dict[str, DeploymentOptions]:
        unknown = sorted(set(value) - set(DEPLOYMENTS))
        if unknown:
            raise ValueError(f"unknown deployments {unknown}; allowed: {', '.join(DEPLOYMENTS)}")
        return {**_deployments(), **value}

    def options(self, name: str) -> DeploymentOptions:
        return self.deployments.get(name, DeploymentOptions())


class AppConfig(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="GROUNDED_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    data_dir: Path = DEFAULT_DATA_DIR
    index: IndexConfig = IndexConfig()
    query: QueryConfig = QueryConfig()
    generator: GeneratorConfig = GeneratorConfig()
    serve: ServeConfig = ServeConfig()
    budgets: BudgetsConfig = BudgetsConfig()
    auth: AuthConfig = AuthConfig()
    audit: AuditConfig = AuditConfig()
    state: StateConfig = StateConfig()
    sources: SourcesConfig = SourcesConfig()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The YAML file arrives as init kwargs; the environment overrides it.
        return env_settings, init_settings

    @model_validator(mode="after")
    def _hold_together(self) -> AppConfig:
        problems = cross_field_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self


def cross_field_problems(config: AppConfig) -> list[str]:
    """What is wrong between sections: GPU requests the machine cannot hold, a route on judge
    scores that no judge gives, a cascade on an answer check that is not run, or on the quote
    of an answer that has none."""
    problems = gpu_requests(config)
    generator = config.generator
    if generator.models and generator.route.min_check is not None:
        checker = generator.large_model if generator.route.large_checks else generator.small_model
        if (generator.models[checker].min_answer_support is None
                and config.query.min_answer_support is None):  # fmt: skip
            problems.append(
                "generator.route.min_check reads the answer check of the small model's answers, "
                f"which is off: set query.min_answer_support (or {checker}'s own), or remove "
                "route.min_check"
            )
    route = generator.route
    judged = ("min_top_score", "min_margin", "not_found_min_score")
    if generator.models and config.query.rerank.backend == "none":
        problems += [
            f"generator.route.{name} reads the relevance judge's scores, and there is no "
            "judge: set query.rerank (backend: cross-encoder or generator), or remove "
            f"route.{name}"
            for name in judged
            if getattr(route, name) is not None
        ]
    if (
        generator.models
        and generator.route.quote_figures
        and config.query.answer_format != "quoted"
    ):
        problems.append(
            "generator.route.quote_figures compares a quoted answer with its quote: set "
            "query.answer_format: quoted, or remove route.quote_figures"
        )
    return problems


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(root)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; see configs/cpu.yaml)"
        lines.append(f"  {field}: {message}")
    return "\n".join(lines)


def load_config(path: Path | None = None, **overrides: Any) -> AppConfig:
    """Load and validate the configuration; raises ConfigError naming each bad field."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping of fields at the top")
        data = loaded or {}
    overrides = {key: value for key, value in overrides.items() if value is not None}
    unknown = set(overrides) - set(AppConfig.model_fields)
    if unknown:
        raise ConfigError(f"unknown configuration override(s): {', '.join(sorted(unknown))}")
    try:
        config = AppConfig(**data)
    except ValidationError as exc:
        where = f" in {path}" if path else ""
        raise ConfigError(f"invalid configuration{where}:\n{_describe(exc)}") from exc
    # Flags beat the environment, which beats the file (the environment is read above).
    validated = {}
    for key, value in overrides.items():
        try:
            annotation = AppConfig.model_fields[key].annotation
            validated[key] = TypeAdapter(annotation).validate_python(value)
        except ValidationError as exc:
            raise ConfigError(f"invalid override of {key}:\n{_describe(exc)}") from exc
    if validated:  # model_copy skips the model's validators: run the cross-field one again
        config = config.model_copy(update=validated)
        problems = cross_field_problems(config)
        if problems:
            raise ConfigError("invalid configuration:\n" + "\n".join(f"  {p}" for p in problems))
    return _resolve_embedders(_resolve_judge(config))


def _resolve_embedders(config: AppConfig) -> AppConfig:
    """An embedder's ``model`` may name a fetched one (``multilingual-e5-small``): it becomes
    its folder in the data directory (absent: the error names the fetch command)."""
    from serve.engine.models import EMBEDDERS, models_dir

    def resolved(embedder):
        if embedder.model not in EMBEDDERS:
            return embedder
        return embedder.model_copy(
            update={"model": str(models_dir(config.data_dir) / embedder.model)}
        )

    index = config.index.model_copy(update={
        "embedder": resolved(config.index.embedder),
        "embedders": {name: resolved(e) for name, e in config.index.embedders.items()},
    })  # fmt: skip
    return config.model_copy(update={"index": index})


def _resolve_judge(config: AppConfig) -> AppConfig:
    """``query.rerank.model`` may name a fetched judge, or a cross-encoder fetched from a hub
    (``hf:Org/Name``): it becomes its folder in the data directory (whose absence the
    reranker reports with the fetch command)."""
    from serve.engine.hub import HubRef
    from serve.engine.models import JUDGES, models_dir

    rerank = config.query.rerank
    ref = HubRef.parse(rerank.model or "", param="query.rerank.model")
    if rerank.model not in JUDGES and ref is None:
        return config
    folder = str(models_dir(config.data_dir) / (ref.folder_name if ref else rerank.model))
    query = config.query.model_copy(update={"rerank": rerank.model_copy(update={"model": folder})})
    return config.model_copy(update={"query": query})


def check_file(path: Path, gpus: int | None = None) -> dict[str, Any]:
    """Validate any Grounded config file and return what it resolves to: a Grounded config
    (cpu.yaml, gpu.yaml: the full AppConfig with defaults), or a Ray Serve deploy file
    (serve.yaml: Ray's schema, then the Grounded config each application names). With
    ``gpus``, the deployments' GPU shares must also pack onto that many GPUs. Raises
    ConfigError naming the field."""
    path = Path(path)
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if isinstance(loaded, dict) and "applications" in loaded:
        from ray.serve.schema import ServeDeploySchema

        try:
            deploy = ServeDeploySchema.model_validate(loaded)
        except ValidationError as exc:
            raise ConfigError(f"invalid Serve deploy file {path}:\n{_describe(exc)}") from exc
        resolved = deploy.model_dump(mode="json", exclude_unset=True)
        for app, application in zip(resolved["applications"], deploy.applications, strict=True):
            named = (application.args or {}).get("config")
            if named is not None:
                candidates = [Path(named), path.parent.parent / named, path.parent / named]
                found = next((c for c in candidates if c.is_file()), Path(named))
                app["args"]["config"] = _checked(load_config(found), gpus, found)
        return resolved
    return _checked(load_config(path), gpus, path)


def _checked(config: AppConfig, gpus: int | None, path: Path) -> dict[str, Any]:
    problem = gpu_packing(config, gpus) if gpus is not None else None
    if problem:
        raise ConfigError(f"{path}: {problem}", param="serve.deployments")
    return config.model_dump(mode="json")

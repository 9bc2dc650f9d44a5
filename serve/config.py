"""AppConfig: every concern's config composed into one, from a YAML file plus the environment.

Precedence, highest first: explicit overrides (CLI flags), environment variables
(``GROUNDED_<FIELD>``, nested with ``__``: ``GROUNDED_INDEX__CHUNKER__SIZE=128``), the YAML
file, then defaults. Errors name the field and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from index.config import IndexConfig
from index.errors import ConfigError
from serve.generator import GeneratorConfig
from serve.query.pipeline import QueryConfig

DEFAULT_DATA_DIR = Path("data")


class AppConfig(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="GROUNDED_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    data_dir: Path = DEFAULT_DATA_DIR
    index: IndexConfig = IndexConfig()
    query: QueryConfig = QueryConfig()
    generator: GeneratorConfig = GeneratorConfig()

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
    return config.model_copy(update=overrides) if overrides else config

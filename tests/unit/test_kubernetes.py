"""The Kubernetes manifests (docker/kubernetes/) validated offline: every core object against
Kubernetes' own schemas (kubernetes-validate, strict: an unknown field is an error), the
RayService against the fields of KubeRay's CRD it uses, its pod templates as Kubernetes
PodTemplateSpecs, and what the appliance needs of them."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from serve.config import load_config
from tests.conftest import REPO

pytestmark = pytest.mark.unit
FOLDER = REPO / "docker" / "kubernetes"
KUBERNETES = "1.33.0"  # the oldest release the manifests promise (volume types, fields)

STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
POD = {"type": "object"}  # checked as a Kubernetes PodTemplateSpec, below
# The RayService fields used here, as KubeRay's CRD (ray.io_rayservices.yaml, v1) declares them.
RAY_SERVICE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayService"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["serveConfigV2", "rayClusterConfig"],
            "properties": {
                "serveConfigV2": {"type": "string"},
                "rayClusterConfig": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["headGroupSpec"],
                    "properties": {
                        "rayVersion": {"type": "string"},
                        "headGroupSpec": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["template"],
                            "properties": {"rayStartParams": STRINGS, "template": POD},
                        },
                        "workerGroupSpecs": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["groupName", "maxReplicas", "minReplicas",
                                             "template"],
                                "properties": {
                                    "groupName": {"type": "string"},
                                    "replicas": {"type": "integer"},
                                    "minReplicas": {"type": "integer"},
                                    "maxReplicas": {"type": "integer"},
                                    "rayStartParams": STRINGS,
                                    "template": POD,
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}  # fmt: skip


def manifests() -> list[dict]:
    kustomization = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
    return [doc for name in kustomization["resources"]
            for doc in yaml.safe_load_all((FOLDER / name).read_text()) if doc]  # fmt: skip


def ray_service() -> dict:
    [service] = [m for m in manifests() if m["kind"] == "RayService"]
    return service


def pod_templates(service: dict) -> list[dict]:
    cluster = service["spec"]["rayClusterConfig"]
    return [cluster["headGroupSpec"]["template"]] + [
        group["template"] for group in cluster["workerGroupSpecs"]
    ]


def test_every_file_in_the_folder_is_applied():
    kustomization = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
    on_disk = {p.name for p in FOLDER.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == on_disk


@pytest.mark.parametrize(
    "manifest", [m for m in manifests() if m["kind"] != "RayService"], ids=lambda m: m["kind"]
)
def test_core_objects_follow_the_kubernetes_schema(manifest):
    kubernetes_validate.validate(manifest, KUBERNETES, strict=True)


def test_the_ray_service_follows_kuberays_schema_and_its_pods_kubernetes():
    service = ray_service()
    jsonschema.validate(service, RAY_SERVICE)
    for template in pod_templates(service):
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "ray"},
             "template": template},
            KUBERNETES, strict=True,
        )  # fmt: skip


def test_a_misspelt_field_is_caught():
    """The checks above fail on a field Kubernetes or KubeRay does not know."""
    service = copy.deepcopy(ray_service())
    service["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["maxReplica"] = 4
    with pytest.raises(jsonschema.ValidationError, match="maxReplica"):
        jsonschema.validate(service, RAY_SERVICE)
    template = copy.deepcopy(pod_templates(ray_service())[1])
    template["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"},
             "template": template}, KUBERNETES, strict=True,
        )  # fmt: skip


@pytest.mark.skipif(not os.environ.get("KUBERAY_CRD"), reason="KUBERAY_CRD not set")
def test_the_ray_service_against_kuberays_whole_crd():
    """KUBERAY_CRD=path/to/ray.io_rayservices.yaml (KubeRay's repository, ray-operator/config/
    crd/bases): the whole v1 schema, every object in it closed to unknown fields."""
    crd = yaml.safe_load(Path(os.environ["KUBERAY_CRD"]).read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    jsonschema.validate(ray_service(), _closed(version["schema"]["openAPIV3Schema"]))


def _closed(schema):
    """An OpenAPI schema that refuses unknown fields (Kubernetes drops them silently)."""
    if isinstance(schema, dict):
        schema = {k: _closed(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def test_the_appliance_gets_what_it_needs():
    service = ray_service()
    serve_config = yaml.safe_load(service["spec"]["serveConfigV2"])
    [app] = serve_config["applications"]
    assert app["import_path"] == "serve.appliance:build_app"
    config_file = Path(app["args"]["config"])  # the image's /app is the repository's root
    load_config(REPO / config_file.relative_to("/app"))
    pyproject = (REPO / "pyproject.toml").read_text()
    ray_version = service["spec"]["rayClusterConfig"]["rayVersion"]
    assert f'"ray[serve]=={ray_version.rsplit(".", 1)[0]}.*"' in pyproject
    for template in pod_templates(service):
        [container] = template["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["GROUNDED_DATA_DIR"]["value"] == "/data"
        assert env["GROUNDED_STATE__URL"]["valueFrom"]["secretKeyRef"]["name"] == "grounded-state"
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert "ephemeral" in volumes["data"]  # each pod's own disk: its node's shards
        assert volumes["models"]["persistentVolumeClaim"]["readOnly"] is True
        assert template["metadata"]["annotations"]["prometheus.io/port"] == "8080"
    readme = (FOLDER / "README.md").read_text()
    assert "create secret generic grounded-state" in readme and "openssl rand" in readme


def test_no_secret_is_committed():
    """The state's password is the operator's to create (README.md there): no Secret object,
    no literal password in any manifest."""
    assert [m["metadata"]["name"] for m in manifests() if m["kind"] == "Secret"] == []
    for path in FOLDER.glob("*.yaml"):
        text = path.read_text()
        assert "change-me" not in text and "postgresql://grounded:" not in text, path.name

"""The Kubernetes manifests (docker/kubernetes/) validated offline: every core object against
Kubernetes' own schemas (kubernetes-validate, strict: an unknown field is an error), the
RayService against the fields of KubeRay's CRD it uses, its pod templates as Kubernetes
PodTemplateSpecs, and what the appliance needs of them."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
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
                "rayClusterDeletionDelaySeconds": {"type": "integer", "minimum": 0},
                "rayClusterConfig": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["headGroupSpec"],
                    "properties": {
                        "rayVersion": {"type": "string"},
                        "authOptions": {
                            "type": "object", "additionalProperties": False,
                            "properties": {"mode": {"enum": ["disabled", "token"]}},
                        },
                        "gcsFaultToleranceOptions": {
                            "type": "object", "additionalProperties": False,
                            "required": ["redisAddress"],
                            "properties": {
                                "redisAddress": {"type": "string"},
                                "redisPassword": {
                                    "type": "object", "additionalProperties": False,
                                    "properties": {"value": {"type": "string"},
                                                   "valueFrom": {"type": "object"}},
                                },
                            },
                        },
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


def _object(properties: dict, required=()) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": properties,
            "required": list(required)}  # fmt: skip


SECRET_KEY = _object({"name": {"type": "string"}, "key": {"type": "string"}}, ["name", "key"])
# The CloudNativePG fields used here (postgresql.cnpg.io/v1, its API reference).
CNPG = {
    "Cluster": _object({
        "apiVersion": {"const": "postgresql.cnpg.io/v1"}, "kind": {"const": "Cluster"},
        "metadata": {"type": "object"},
        "spec": _object({
            "instances": {"type": "integer", "minimum": 1},
            "imageName": {"type": "string"},
            "enablePDB": {"type": "boolean"},
            "primaryUpdateStrategy": {"enum": ["unsupervised", "supervised"]},
            "bootstrap": _object({"initdb": _object(
                {"database": {"type": "string"}, "owner": {"type": "string"}})}),
            "storage": _object({"size": {"type": "string"}}, ["size"]),
            "resources": {"type": "object"},
            "affinity": _object({"enablePodAntiAffinity": {"type": "boolean"},
                                 "podAntiAffinityType": {"enum": ["preferred", "required"]}}),
            "backup": _object({
                "retentionPolicy": {"type": "string", "pattern": "^[1-9][0-9]*[dwm]$"},
                "barmanObjectStore": _object({
                    "destinationPath": {"type": "string"},
                    "s3Credentials": _object({"accessKeyId": SECRET_KEY,
                                              "secretAccessKey": SECRET_KEY}),
                    "wal": _object({"compression": {"enum": ["gzip", "bzip2", "snappy"]}}),
                }, ["destinationPath"]),
            }),
        }, ["instances", "storage"]),
    }, ["apiVersion", "kind", "metadata", "spec"]),
    "ScheduledBackup": _object({
        "apiVersion": {"const": "postgresql.cnpg.io/v1"}, "kind": {"const": "ScheduledBackup"},
        "metadata": {"type": "object"},
        "spec": _object({
            "schedule": {"type": "string", "pattern": r"^\S+( \S+){5}$"},  # seconds first
            "backupOwnerReference": {"enum": ["none", "self", "cluster"]},
            "cluster": _object({"name": {"type": "string"}}, ["name"]),
        }, ["schedule", "cluster"]),
    }, ["apiVersion", "kind", "metadata", "spec"]),
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
    "manifest", [m for m in manifests() if "." not in m["apiVersion"].split("/")[0]
                 or m["apiVersion"].startswith(("apps/", "networking.k8s.io/"))],
    ids=lambda m: f"{m['kind']}-{m['metadata']['name']}",
)  # fmt: skip
def test_core_objects_follow_the_kubernetes_schema(manifest):
    kubernetes_validate.validate(manifest, KUBERNETES, strict=True)


def test_postgresql_is_run_by_cloudnativepg_with_replicas_backups_and_a_disruption_budget():
    objects = {m["kind"]: m for m in manifests() if m["apiVersion"].startswith("postgresql.")}
    assert set(objects) == {"Cluster", "ScheduledBackup"}
    for kind, manifest in objects.items():
        jsonschema.validate(manifest, CNPG[kind])
    cluster = objects["Cluster"]["spec"]
    assert cluster["instances"] >= 3 and cluster["enablePDB"] is True
    assert cluster["affinity"]["podAntiAffinityType"] == "required"
    assert cluster["backup"]["barmanObjectStore"]["wal"]  # WAL archived between base backups
    assert objects["ScheduledBackup"]["spec"]["cluster"]["name"] == "grounded-state"
    with pytest.raises(jsonschema.ValidationError, match="enablePdb"):  # a misspelt field
        bad = copy.deepcopy(objects["Cluster"])
        bad["spec"]["enablePdb"] = True
        jsonschema.validate(bad, CNPG["Cluster"])


def test_only_the_operator_and_ray_reach_the_dashboard_and_only_ray_the_state():
    policies = {m["metadata"]["name"]: m["spec"] for m in manifests()
                if m["kind"] == "NetworkPolicy"}  # fmt: skip
    ray = policies["grounded-ray"]
    assert ray["podSelector"]["matchLabels"] == {"ray.io/is-ray-node": "yes"}
    open_ports = {p["port"] for rule in ray["ingress"] if "from" not in rule
                  for p in rule["ports"]}  # fmt: skip
    assert open_ports == {8000, 8080}  # the API and metrics; never 8265, 6379 or 10001
    [dashboard] = [
        rule for rule in ray["ingress"] if any(p["port"] == 8265 for p in rule.get("ports", []))
    ]
    assert dashboard["from"][0]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "kuberay-operator"
    }
    state = policies["grounded-state"]
    assert all("from" in rule for rule in state["ingress"])  # nobody else reaches PostgreSQL
    assert {"ray.io/is-ray-node": "yes"} in [
        f.get("podSelector", {}).get("matchLabels") for r in state["ingress"] for f in r["from"]
    ]
    assert all("from" in rule for rule in policies["grounded-gcs-redis"]["ingress"])


@pytest.mark.skipif(not shutil.which("kubectl"), reason="kubectl is not installed")
def test_the_rendered_manifests_set_the_image_and_namespace_and_hold_no_secret():
    """`kubectl kustomize` (what `kubectl apply -k` applies): the image named once
    (kustomization.yaml) reaches every Ray container, every object lands in the namespace,
    and there is no Secret and no password in what is applied."""
    rendered = subprocess.run(["kubectl", "kustomize", str(FOLDER)], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    assert {m["kind"] for m in objects} >= {"RayService", "Cluster", "NetworkPolicy"}
    assert all(m["metadata"].get("namespace") == "grounded" for m in objects
               if m["kind"] != "Namespace")  # fmt: skip
    [service] = [m for m in objects if m["kind"] == "RayService"]
    images = {c["image"] for t in pod_templates(service) for c in t["spec"]["containers"]}
    images_set = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())["images"]
    assert images == {f"{images_set[0]['newName']}:{images_set[0]['newTag']}"}
    assert "Secret" not in {m["kind"] for m in objects}
    assert "change-me" not in rendered and "password:" not in rendered.replace("redisPassword:", "")


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
        assert env["STATE_URI"]["valueFrom"]["secretKeyRef"] == {
            "name": "grounded-state-app",
            "key": "uri",
        }  # generated by CloudNativePG
        url = env["GROUNDED_STATE__URL"]["value"]
        assert url.startswith("$(STATE_URI)?sslmode=verify-full&sslrootcert=")
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert url.endswith(mounts["state-ca"] + "/ca.crt")
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert "ephemeral" in volumes["data"]  # each pod's own disk: its node's shards
        assert volumes["models"]["persistentVolumeClaim"]["readOnly"] is True
        assert template["metadata"]["annotations"]["prometheus.io/port"] == "8080"
    cluster = service["spec"]["rayClusterConfig"]
    assert cluster["authOptions"] == {"mode": "token"}
    assert cluster["gcsFaultToleranceOptions"]["redisAddress"] == "grounded-gcs-redis:6379"
    readme = (FOLDER / "README.md").read_text()
    assert "create secret generic grounded-gcs-redis" in readme and "openssl rand" in readme


def test_no_secret_is_committed():
    """The state's password is the operator's to create (README.md there): no Secret object,
    no literal password in any manifest."""
    assert [m["metadata"]["name"] for m in manifests() if m["kind"] == "Secret"] == []
    for path in FOLDER.glob("*.yaml"):
        text = path.read_text()
        assert "change-me" not in text and "postgresql://grounded:" not in text, path.name

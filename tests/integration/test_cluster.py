"""Scale-out on a Ray cluster of several nodes, simulated on one machine with Ray's cluster
utilities (each node its own raylet with its own resources), sharing state as several nodes
do: on a PostgreSQL server (state.url), each node's shards in its own folder (its own disk).

Two shard replicas are pinned to two worker nodes (custom resource "shards": 1 each); the ingress,
embedder and generator stay on the head. Tenants spread over the shard replicas (Serve multiplexing
sends a new tenant to the replica with the fewest loaded), each owning its tenants' shards under a
lease; when a node is removed, the surviving replica takes its tenants over once their leases end,
and rebuilds their shards on its own disk from the logged writes (serve/state/shard_owners.py)."""

from __future__ import annotations

import time

import openai
import pytest

from serve.config import load_config
from serve.identity.keys import key_store
from tests.appliances import free_port
from tests.conftest import CORPUS, use_engine_environment
from tests.tiny_model import build_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TENANTS = ("acme", "globex")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, postgres):
    from ray.cluster_utils import Cluster

    root = tmp_path_factory.mktemp("cluster")
    use_engine_environment()
    model = build_tiny_model(root / "tiny", "\n".join(p.read_text() for p in CORPUS.rglob("*.md")))
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 2, "resources": {"head": 10},
                                      "include_dashboard": False})  # fmt: skip
    workers = [cluster.add_node(num_cpus=1, resources={"shards": 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    on_head = {"num_cpus": 0.1, "resources": {"head": 1}, "max_ongoing_requests": 16}
    config = load_config(
        None,
        data_dir=root / "data",
        state={"url": postgres.url, "shard_lease_s": 6.0},
        generator={"model": str(model), "max_model_len": 1024, "max_tokens": 4,
                   "engine_kwargs": {"enforce_eager": True, "dtype": "float32",
                                     "kv_cache_memory_bytes": 128 * 2**20}},
        serve={"port": free_port(), "metrics_port": free_port(), "generator_threads": 1,
               "deployments": {"ingress": on_head, "embedder": on_head, "generator": on_head,
                               "shards": {"num_replicas": 2, "num_cpus": 0.1,
                                          "resources": {"shards": 1}}}},
    )  # fmt: skip
    secrets = {t: key_store(config).create(t, ["query", "ingest"])[1] for t in TENANTS}
    from serve.ops import up

    running = up.start(config, address=cluster.address, dashboard=False, timeout_s=300)
    try:
        yield cluster, workers, running, secrets, config
    finally:
        import ray

        running.stop()
        ray.shutdown()
        cluster.shutdown()


def placement(tenant: str) -> dict:
    """Where the tenant is served; sent again, as the ingress does (serve/shards/tenant.py),
    while Serve routes it to a replica that does not own the tenant."""
    from ray import serve

    from serve.ops.up import APP_NAME
    from serve.shards.tenant import RESEND_AFTER_S
    from serve.state.shard_owners import ShardOwnedElsewhereError

    handle = serve.get_deployment_handle("Shards", app_name=APP_NAME)
    for wait in (*RESEND_AFTER_S, None):
        try:
            return (
                handle.options(multiplexed_model_id=tenant).placement.remote().result(timeout_s=60)
            )
        except ShardOwnedElsewhereError:
            if wait is None:
                raise
            time.sleep(wait)


def test_tenants_are_served_from_shard_replicas_on_different_nodes(cluster):
    _, workers, running, secrets, _ = cluster
    for tenant in TENANTS:
        api = openai.OpenAI(base_url=running.api_url, api_key=secrets[tenant], max_retries=0)
        for path in sorted((CORPUS / tenant).iterdir()):
            api.files.create(file=(path.name, path.read_bytes()), purpose="assistants")
        time.sleep(2)  # the replica reports its loaded tenant before the next one arrives
    placed = {tenant: placement(tenant) for tenant in TENANTS}
    nodes = {tenant: where["node_id"] for tenant, where in placed.items()}
    worker_ids = {w.node_id for w in workers}
    assert set(nodes.values()) <= worker_ids
    assert nodes["acme"] != nodes["globex"], nodes
    for _ in range(10):  # a replica refused a tenant's lease never holds it open
        for tenant in TENANTS:
            assert placement(tenant)["tenants"] == [tenant], placed


def test_a_tenant_keeps_answering_from_another_replica_when_its_node_is_removed(cluster):
    ray_cluster, workers, running, secrets, config = cluster
    api = openai.OpenAI(base_url=running.api_url, api_key=secrets["acme"], max_retries=0)
    before = api.vector_stores.search("acme", query="annual leave days")
    assert before.data
    node_id = placement("acme")["node_id"]
    [lost] = [w for w in workers if w.node_id == node_id]
    ray_cluster.remove_node(lost)
    deadline, after = time.monotonic() + 120, None
    while time.monotonic() < deadline:  # until Serve routes around the dead replica
        try:
            after = api.vector_stores.search("acme", query="annual leave days")
            if after.data:
                break
        except openai.APIError:
            pass
        time.sleep(1)
    assert after is not None and after.data
    assert after.data[0].file_id == before.data[0].file_id  # the same shard, from the log
    now = placement("acme")
    assert now["node_id"] != node_id and "acme" in now["tenants"]
    rebuilt = config.data_dir / "nodes" / now["node_id"] / "tenants" / "acme"
    assert rebuilt.is_dir()  # on the surviving node's own disk
    assert not (config.data_dir / "tenants").exists()  # nothing shared but the server
    answer = api.chat.completions.create(
        model="grounded", messages=[{"role": "user", "content": "annual leave days"}]
    )
    assert answer.model_extra["grounded"]["sources"]

"""A shard owner on one "node" (its own data directory): it takes the tenant's lease, then
logs each upload on the state server and prints the file name as soon as the upload is
acknowledged (logged), before ingesting it into its local copy.

Run by test_state.py, which kills this process with SIGKILL midway.
    python -m tests.integration.shard_owner_worker URL DATA_DIR TENANT COUNT LEASE_S
"""

from __future__ import annotations

import sys
from pathlib import Path

from index.config import IndexConfig
from index.service import IndexService
from index.testing import HashingEmbedder
from serve.state.database import StateConfig
from serve.state.shard_owners import LogEntry, Replayed, ShardOwners, apply_entry, upload_entry
from tests.integration.test_state import ingester


def main() -> None:
    url, data_dir, tenant = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    count, lease_s = int(sys.argv[4]), float(sys.argv[5])
    owners = ShardOwners(StateConfig(url=url), lease_s=lease_s)
    lease = owners.acquire(tenant, holder="replica-a", node="node-a")
    service = IndexService(IndexConfig(), data_dir, embedder=HashingEmbedder()).start()
    shard, ingest = service.shard(tenant, create=True), ingester(service, tenant)
    position = Replayed(shard.directory)
    print("owner", flush=True)
    for i in range(count):
        name, data = f"doc{i}.txt", f"Document marker{i} body text {i}.".encode()
        seq = owners.append(lease, "upload", upload_entry(name), data)
        print(name, flush=True)  # acknowledged: the client is answered from here on
        apply_entry(LogEntry(seq, "upload", upload_entry(name), data), ingest, shard)
        position.set(seq)  # then applied to the local copy
        if i % 10 == 0:
            lease = owners.renew(lease)


if __name__ == "__main__":
    main()

"""Tenant shards as requests reach them: the host that reads and writes as the caller (and ingests
uploads), and the ingress's typed client of the Shards deployment."""

"""Sources: a tenant's documents kept in step with where they live (a folder, a mounted share),
each file's access list from rules on its path; the sources and what each last gave are
tables of the tenant's shard (index/sources/state.py), the runs are index/sources/sync.py."""

"""Sources: a tenant's documents kept in step with where they live (a folder or mounted share,
a WebDAV server, an S3 bucket: index/sources/kinds.py), each file's access list from rules on
its path or the file system's permissions; the sources and what each last gave are tables of
the tenant's shard (index/sources/state.py), the runs are index/sources/sync.py."""

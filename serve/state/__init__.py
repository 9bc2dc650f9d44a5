"""State that outlives a process and, with several nodes, is shared: the database layer (SQLite or
PostgreSQL), stored responses, shard leases and the write log."""

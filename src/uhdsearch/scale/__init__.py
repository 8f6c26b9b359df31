"""Beyond one machine (optional extras `ray` and `milvus`): Ray Data index builds, sharded search on Ray actors,
export to Milvus. Nothing here is imported unless asked for; nothing below imports it."""

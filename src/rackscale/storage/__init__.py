"""Storage lifecycle tiers (hot, warm, cold): the plan's ``storage-lifecycle`` ConfigMap, a crash-safe mover,
and the lifecycle that moves checkpoints by age and deletes them past the last tier (docs/storage.md)."""

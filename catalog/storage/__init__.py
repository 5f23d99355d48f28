"""Storage: object storage, key frames, commit archives and the Redis cache."""

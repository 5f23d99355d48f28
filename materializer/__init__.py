"""The materializer service (key frames in Redis and on object storage): not built yet, see issue 3."""

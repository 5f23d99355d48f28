"""The materializer service: key frames in Redis and on object storage, version notifications.

``service`` runs the consumer group and parks a failing table instead of stopping;
``table_materializer`` is one table's loader, which hands each delta and image to its
publishers (``publisher``: the protocol; ``keyframe_publisher``, ``redis_publisher``; ``frames``
builds the key frames both write); ``endpoints`` serves ``/metrics`` and ``/healthz``;
``backoff`` keeps a persistent fault to a few log lines.
"""

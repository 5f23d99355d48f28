"""The materializer service: key frames in Redis and on object storage, version notifications.

``service`` runs the consumer group and parks a failing table instead of stopping;
``table_materializer`` is one table's image and outputs; ``endpoints`` serves ``/metrics``
and ``/healthz``; ``backoff`` keeps a persistent fault to a few log lines.
"""

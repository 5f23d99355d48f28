"""segcat: an event-sourced table catalog on Kafka with materialized key-frame snapshots.

The project's folders install as one namespace: ``segcat.catalog`` (the core library),
``segcat.producers`` (writers), ``segcat.materializer`` (the service),
``segcat.spark_integration`` (Spark jobs and the ``segcat`` data source), ``segcat.cli``
(the ``segcat`` command) and ``segcat.local_stack`` (Kafka and Redis started on loopback).
docs/ARCHITECTURE.md shows who may import whom.
"""

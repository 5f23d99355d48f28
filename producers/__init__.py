"""Producers of segments: Arrow record batches written as Parquet files that describe themselves.

``segment_files`` writes the files (statistics, Bloom filters, provenance in the footer) and
turns each into the ``Segment`` a commit adds; Spark's writer and plain Python writers share it.
"""

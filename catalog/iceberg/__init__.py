"""Iceberg (format v2) metadata of a segcat table: where it lives and how readers find it."""

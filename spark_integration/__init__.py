"""Spark integration (write, read, the `segcat` streaming source): not built yet, see issue 4."""

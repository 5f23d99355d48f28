"""The commit log's Avro layouts as package data (``segcat.schemas``): the current ones here,
every older one a reader still resolves in ``history/``. The files are the contract for other
implementations (docs/PROTOCOL.md §2); ``catalog/protocol/codec.py`` loads them with
``importlib.resources``, so an installed wheel and a source checkout read the same files."""

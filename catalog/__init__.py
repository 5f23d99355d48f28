"""The core library: the protocol, the log, storage, reading, writing and the public handle
(docs/ARCHITECTURE.md).

It imports nothing above it (services, Spark, the command line, the local stack). Programs
use the public API at the package's top, ``import segcat`` (``segcat.load_catalog()``,
``segcat.Table``, the errors, the model types); the modules under ``segcat.catalog`` are
internal unless docs/ARCHITECTURE.md says otherwise.
"""

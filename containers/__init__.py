"""Containers on a machine with no image registry: the engine, the images and the compose stack.

``./dev compose up|down|test`` and the container tests use this package; it is a development
tool beside ``bench/`` and is not part of the wheel. ``engine`` finds or starts a Docker engine
without a bridge, ``images`` builds every image the compose file names from Debian packages,
Maven jars and the project's wheel, and ``compose_stack`` runs docker-compose.yml on host
networking with free ports (containers/README.md).
"""

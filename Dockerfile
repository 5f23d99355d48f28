# Image for the long-running segcat services (materializer, dashboard) in docker-compose.yml.
# Java is there for PySpark jobs (spark_integration) run from the same image.
#
# Build arguments, for machines that cannot pull the default parents or that reach the package
# registries through a TLS-intercepting proxy (`./dev compose` sets all three; containers/README.md):
#   PYTHON_IMAGE, NODE_IMAGE  parent images with `python`+`pip` and `npm` on the PATH
#   EXTRA_CA_CERTS            PEM text of certificate authorities to trust besides the usual ones
# bookworm: Debian 13 (the newer slim images' base) has no openjdk-17 package
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG NODE_IMAGE=node:20-slim

# The dashboard's one third-party script (uPlot), installed from npm as package-lock.json pins it.
FROM ${NODE_IMAGE} AS web
ARG EXTRA_CA_CERTS=""
WORKDIR /web
COPY server/web/package.json server/web/package-lock.json ./
# npm trusts its bundled authorities plus the file NODE_EXTRA_CA_CERTS names
RUN if [ -n "$EXTRA_CA_CERTS" ]; then \
        printf '%s\n' "$EXTRA_CA_CERTS" > /tmp/extra-ca.pem && export NODE_EXTRA_CA_CERTS=/tmp/extra-ca.pem; \
    fi \
    && npm ci --no-audit --no-fund --silent \
    && mkdir -p vendor && cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css vendor/

FROM ${PYTHON_IMAGE}
ARG EXTRA_CA_CERTS=""

# Extra authorities join the system store, which pip is then told to use (it otherwise trusts
# only its own bundle). openjdk's postinst links a man page; slim images drop /usr/share/man.
RUN if [ -n "$EXTRA_CA_CERTS" ]; then \
        mkdir -p /usr/local/share/ca-certificates \
        && printf '%s\n' "$EXTRA_CA_CERTS" > /usr/local/share/ca-certificates/extra-ca.crt \
        && update-ca-certificates >/dev/null; \
    fi \
    && mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SEGCAT_HOME=/var/lib/segcat

WORKDIR /src
# Only what the wheel is built from: keeps .venv/.segcat (jars, broker data) out of the image.
# pyproject's package-dir maps each folder to segcat.<folder> (docs/ARCHITECTURE.md, "Packaging").
COPY pyproject.toml README.md LICENSE ./
COPY segcat ./segcat
COPY schemas ./schemas
COPY catalog ./catalog
COPY producers ./producers
COPY materializer ./materializer
COPY spark_integration ./spark_integration
COPY cli ./cli
COPY local_stack ./local_stack
COPY server ./server
COPY --from=web /web/vendor ./server/static/vendor
# The wheel with the extras this image runs: the materializer, `segcat serve` and Spark jobs
# (the local stack is docker-compose's Kafka and Redis here, so no [stack]).
RUN export PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    && pip wheel --no-deps --wheel-dir /tmp/dist . \
    && wheel=$(echo /tmp/dist/segcat-*.whl) \
    && pip install "${wheel}[materializer,server,spark]" \
    && rm -rf /src/build /tmp/dist

RUN useradd --create-home --uid 10001 segcat && mkdir -p /var/lib/segcat \
    && chown segcat /var/lib/segcat
USER segcat
WORKDIR /home/segcat

ENTRYPOINT ["segcat"]
CMD ["--help"]

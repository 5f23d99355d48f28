# Image for the long-running segcat services (materializer, dashboard) in docker-compose.yml.
# Java is there for PySpark jobs (spark_integration) run from the same image.

# The dashboard's one third-party script (uPlot), installed from npm as package-lock.json pins it.
FROM node:20-slim AS web
WORKDIR /web
COPY server/web/package.json server/web/package-lock.json ./
RUN npm ci --no-audit --no-fund --silent \
    && mkdir -p vendor && cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css vendor/

FROM python:3.11-slim

# openjdk's postinst links a man page; slim images drop /usr/share/man, so recreate it.
RUN mkdir -p /usr/share/man/man1 \
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
RUN pip wheel --no-deps --wheel-dir /tmp/dist . \
    && wheel=$(echo /tmp/dist/segcat-*.whl) \
    && pip install "${wheel}[materializer,server,spark]" \
    && rm -rf /src/build /tmp/dist

RUN useradd --create-home --uid 10001 segcat && mkdir -p /var/lib/segcat \
    && chown segcat /var/lib/segcat
USER segcat
WORKDIR /home/segcat

ENTRYPOINT ["segcat"]
CMD ["--help"]

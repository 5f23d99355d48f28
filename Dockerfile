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
# Only what the package needs: keeps .venv/.segcat (jars, broker data) out of the image.
COPY pyproject.toml README.md ./
# catalog/protocol/_schemas links to ../../schemas: the Avro schemas ship inside the package;
# segcat/ links each folder into the one segcat.* namespace the wheel installs
COPY schemas ./schemas
COPY catalog ./catalog
COPY producers ./producers
COPY materializer ./materializer
COPY spark_integration ./spark_integration
COPY cli ./cli
COPY local_stack ./local_stack
COPY server ./server
COPY --from=web /web/vendor ./server/static/vendor
COPY segcat ./segcat
RUN pip install . && rm -rf /src/build

RUN useradd --create-home --uid 10001 segcat && mkdir -p /var/lib/segcat \
    && chown segcat /var/lib/segcat
USER segcat
WORKDIR /home/segcat

ENTRYPOINT ["segcat"]
CMD ["--help"]

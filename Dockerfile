# The continuity-drift worker image. docker-compose.yml builds it for the
# `topics` one-shot and the `worker` service.
FROM python:3.11-slim

# numba's cache of the compiled kernel: filled while the image is built, so that a container
# loads the kernels (about 0.3 s) instead of compiling them (about 9 s) before /readyz. numba
# writes beside a module only where that folder is writable, and site-packages is not for
# the worker's user, so the cache has a folder of its own, the worker's.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NUMBA_CACHE_DIR=/opt/continuity-drift/numba-cache

WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY streams/ streams/
COPY drift/ drift/
COPY baselines/ baselines/
# The versions the tests pass with (constraints.txt), so the image scores as they do.
RUN pip install -c constraints.txt . \
    && rm -rf /src/build /src/*.egg-info \
    && python -c "import drift.kernel"

# Run as an unprivileged user; /data (DuckDB and local state) belongs to it.
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/continuity continuity \
    && mkdir -p /data \
    && chown continuity:continuity /data \
    && chown -R continuity:continuity /opt/continuity-drift/numba-cache

USER continuity
WORKDIR /home/continuity

# The web server listens on every interface: in a container, loopback would
# hide /metrics and /readyz from Prometheus and the orchestrator.
ENV CONTINUITY_DATA_DIR=/data \
    CONTINUITY_WEB_PORT=6066 \
    CONTINUITY_WEB_HOST=0.0.0.0
VOLUME ["/data"]

# /metrics, /healthz, /readyz and the review API.
EXPOSE 6066

STOPSIGNAL SIGTERM
CMD ["continuity-drift", "run", "--data-dir", "/data", "--web-port", "6066"]

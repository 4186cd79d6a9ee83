# stepwatch image: the worker (default command), the node agent (`stepwatch agent`, with NVML
# through the agent extra), the simulator and every other command. Used by docker-compose.yml and
# the Helm chart (deploy/helm/stepwatch). Build context: .dockerignore keeps .venv, .cache, .git out.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY stepwatch ./stepwatch
COPY models ./models
COPY streams ./streams
COPY producers ./producers
# A wheel of stepwatch and of every dependency, so the runtime stage installs offline.
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[agent]"

FROM python:3.11-slim
# A fixed non-root user (the chart's securityContext uses the same ids).
ARG UID=10001
RUN useradd --uid "${UID}" --user-group --create-home --home-dir /home/stepwatch stepwatch
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels "stepwatch[agent]" && rm -rf /wheels
# The runbooks the alerts' runbook_url points at (STEPWATCH_RUNBOOK_BASE_URL), kept with the image.
COPY docs/runbooks /usr/share/doc/stepwatch/runbooks
USER stepwatch
WORKDIR /home/stepwatch
# Faust's local state (STEPWATCH_WORKER_DATADIR default); made here so a volume on it is the user's.
RUN mkdir -p /home/stepwatch/.cache/stepwatch
ENV PYTHONUNBUFFERED=1 \
    STEPWATCH_WORKER_WEB_PORT=6066
EXPOSE 6066
# The worker's /health: 200 once it consumes. Other commands (simulate, agent, alerts) have no web
# server: their compose services and chart pods turn this check off or replace it.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('STEPWATCH_WORKER_WEB_PORT', '6066'), timeout=4)"]
ENTRYPOINT ["stepwatch"]
CMD ["worker"]

# stepwatch worker / simulator image (used by docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY stepwatch ./stepwatch
COPY models ./models
COPY streams ./streams
COPY producers ./producers
RUN pip install --no-cache-dir .
ENTRYPOINT ["stepwatch"]
CMD ["worker"]

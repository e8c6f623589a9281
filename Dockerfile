# One image for every Ablate service: API, dispatcher, migrations, and the Ray head and workers
# (Ray's versions must agree across a cluster, so they all run this image).
#
#   docker build -t ablate .                                  # service only, no torch
#   docker build -t ablate --build-arg INSTALL_TORCH=true .   # + torch for the built-in torch-llm runner
#   docker build -t ablate --build-arg INSTALL_TORCH=true \
#       --build-arg TORCH_SPEC=torch==2.9.0 --build-arg TORCH_INDEX_URL=<your wheel index> .
#
# GPU and PPU workers that run the release images themselves (`command` runner with ljperf) need
# no torch here: the benchmark runs inside the image under test.
FROM python:3.11-slim

ARG INSTALL_TORCH=false
ARG TORCH_SPEC=torch
ARG TORCH_INDEX_URL=

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ABLATE_DATA_DIR=/data \
    ABLATE_HOST=0.0.0.0

WORKDIR /app

# torch first: it is the largest layer and changes least often.
RUN if [ "$INSTALL_TORCH" = "true" ]; then \
        pip install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC"; \
    fi

COPY pyproject.toml setup.py constraints.txt README.md ./
COPY backend ./backend
COPY workers ./workers
COPY migrations ./migrations
COPY web ./web
# The package includes ablate.examples (the demo's release and plans): without it `pip install .`
# stops at "package directory 'examples' does not exist".
COPY examples ./examples
# A regular (non-editable) install: templates, static files and migrations are inside the package.
# constraints.txt pins Ray (and the rest) to the versions the suite ran with.
RUN pip install -c constraints.txt . \
    && useradd --create-home --uid 1000 ablate \
    && mkdir -p /data \
    && chown ablate:ablate /data

USER ablate
VOLUME ["/data"]
EXPOSE 8000

# Default: the API without an in-process dispatcher (compose runs `ablate dispatcher` separately).
CMD ["ablate", "serve", "--no-dispatcher"]

# kvtool in a container:
#   docker build -t kvtool .
#   docker run --rm -v "$PWD:/src" kvtool audit deploy/ --output-format sarif
# PYTHON_IMAGE is any image with Python 3.11+ and pip (the suite builds one offline).
ARG PYTHON_IMAGE=docker.io/library/python:3.12-slim
FROM ${PYTHON_IMAGE}

WORKDIR /opt/kvtool-src
COPY pyproject.toml README.md LICENSE ./
COPY kvtool ./kvtool
COPY rules ./rules
COPY recipes ./recipes
COPY docs ./docs
# hatchling first, then kvtool without build isolation: a base image that already holds
# them (or a local index) needs no network. No torch: the audit never imports it.
RUN python3 -m pip install --no-cache-dir --disable-pip-version-check "hatchling>=1.21" \
 && python3 -m pip install --no-cache-dir --disable-pip-version-check --no-build-isolation . \
 && rm -rf /opt/kvtool-src

WORKDIR /src
# No root inside: reports are written with the caller's mounted folder permissions.
USER 65532:65532
ENV HOME=/tmp
ENTRYPOINT ["kvtool"]
CMD ["--help"]

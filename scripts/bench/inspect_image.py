"""Build-flag check of one tag: cold (no cache) vs warm (config cache hit by digest), one run.

Usage: python scripts/bench/inspect_image.py [--quick] [--json]

A Docker-Hub-shaped registry is served in-process through ``httpx.MockTransport``
(Bearer challenge, token endpoint, OCI index with two platforms, config blob behind a
307 to a CDN host), so the figures count kvtool's own work and requests, not a
network. The baseline, measured in the same run, is the cold path: challenge, token,
index GET, child manifest GET, blob redirect and GET. The warm path HEADs the tag and
reads the config from ``$XDG_CACHE_HOME/kvtool`` (a temporary directory here). The
figure that matters on Docker Hub is manifest GETs per check (each counts as a pull
against the rate limit; HEADs do not): cold 2, warm 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from rich.console import Console

from kvtool.image.inspect import InspectRequest, ReadOptions, inspect
from kvtool.image.manifest import OCI_INDEX, OCI_MANIFEST, sha256_digest

console = Console(stderr=True, highlight=False)
REPOSITORY = "vllm/vllm-openai"
# A realistic history length: vLLM's images carry ~60 entries.
HISTORY_ENTRIES = 60


def _config(arch: str, kv: str) -> bytes:
    history = [
        {"created_by": f"RUN /bin/sh -c step {i} # buildkit"} for i in range(HISTORY_ENTRIES)
    ]
    history.append(
        {
            "created_by": f"RUN |2 TARGETPLATFORM=linux/{arch} INSTALL_KV_CONNECTORS={kv} "
            '/bin/bash -c if [ "$INSTALL_KV_CONNECTORS" = "true" ]; then uv pip install -r '
            "requirements/kv_connectors.txt; fi # buildkit"
        }
    )
    return json.dumps({"architecture": arch, "os": "linux", "history": history}).encode()


class _Hub:
    def __init__(self) -> None:
        self.documents: dict[str, tuple[bytes, str]] = {}
        self.blobs: dict[str, bytes] = {}
        entries = []
        for arch, kv in (("amd64", "true"), ("arm64", "false")):
            config = _config(arch, kv)
            self.blobs[sha256_digest(config)] = config
            manifest = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": OCI_MANIFEST,
                    "config": {"digest": sha256_digest(config), "size": len(config)},
                    "layers": [],
                }
            ).encode()
            self.documents[sha256_digest(manifest)] = (manifest, OCI_MANIFEST)
            entries.append(
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": sha256_digest(manifest),
                    "size": len(manifest),
                    "platform": {"os": "linux", "architecture": arch},
                }
            )
        index = json.dumps(
            {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
        ).encode()
        self.tag_digest = sha256_digest(index)
        self.documents[self.tag_digest] = (index, OCI_INDEX)
        self.requests: Counter[str] = Counter()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.host == "auth.docker.io":
            self.requests["token"] += 1
            return httpx.Response(200, json={"token": "t"})
        if url.host == "cdn.example":
            self.requests["cdn GET"] += 1
            return httpx.Response(200, content=self.blobs[url.params["digest"]])
        if request.headers.get("authorization") != "Bearer t":
            self.requests["challenge"] += 1
            challenge = f'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:{REPOSITORY}:pull"'
            return httpx.Response(401, headers={"www-authenticate": challenge})
        path = url.path.removeprefix(f"/v2/{REPOSITORY}/")
        if path.startswith("manifests/"):
            self.requests[f"manifest {request.method}"] += 1
            ref = path.removeprefix("manifests/")
            body, media_type = self.documents[self.tag_digest if ref == "v0.32.0" else ref]
            headers = {"content-type": media_type, "docker-content-digest": sha256_digest(body)}
            return httpx.Response(
                200, content=b"" if request.method == "HEAD" else body, headers=headers
            )
        self.requests["blob redirect"] += 1
        digest = path.removeprefix("blobs/")
        return httpx.Response(307, headers={"location": f"https://cdn.example/b?digest={digest}"})


def _run(hub: _Hub, cache: Path, use_cache: bool) -> float:
    options = ReadOptions(transport=httpx.MockTransport(hub), use_cache=use_cache, cache_dir=cache)
    start = time.perf_counter()
    report = inspect(InspectRequest(image=f"{REPOSITORY}:v0.32.0", read=options))
    elapsed = time.perf_counter() - start
    assert report.image is not None and report.image.build_flag.value == "true"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (< 10 s)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    reps = 20 if args.quick else 200
    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(scratch)
        cold_hub, warm_hub = _Hub(), _Hub()
        with console.status("cold checks (no cache)"):
            cold = [_run(cold_hub, cache, use_cache=False) for _ in range(reps)]
        _run(warm_hub, cache, use_cache=True)  # fills the cache
        warm_hub.requests.clear()
        with console.status("warm checks (config cache hit)"):
            warm = [_run(warm_hub, cache, use_cache=True) for _ in range(reps)]
    cold_ms, warm_ms = statistics.median(cold) * 1000, statistics.median(warm) * 1000
    figures = {
        "reps": reps,
        "cold_ms_median": round(cold_ms, 3),
        "warm_ms_median": round(warm_ms, 3),
        "warm_over_cold_time_ratio": round(warm_ms / cold_ms, 3),
        "cold_requests_per_check": round(sum(cold_hub.requests.values()) / reps, 2),
        "warm_requests_per_check": round(sum(warm_hub.requests.values()) / reps, 2),
        "cold_manifest_gets_per_check": cold_hub.requests["manifest GET"] / reps,
        "warm_manifest_gets_per_check": warm_hub.requests["manifest GET"] / reps,
    }
    if args.json:
        print(json.dumps(figures))
        return
    for key, value in figures.items():
        console.print(f"{key:32} {value}")


if __name__ == "__main__":
    main()

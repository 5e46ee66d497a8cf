"""Which registries get plain HTTP without --insecure: loopback only, as Docker decides."""

import pytest

from kvtool.image.reference import parse_reference


@pytest.mark.parametrize(
    ("image", "loopback"),
    [
        ("localhost:5000/vllm:v0.32.0", True),
        ("127.0.0.1:5000/vllm:v0.32.0", True),
        ("127.0.0.2:5000/vllm:v0.32.0", True),  # all of 127.0.0.0/8 is loopback
        ("[::1]:5000/vllm:v0.32.0", True),
        ("10.0.0.1:5000/vllm:v0.32.0", False),
        ("registry.example.com/vllm:v0.32.0", False),
        ("vllm/vllm-openai:v0.32.0", False),  # Docker Hub
    ],
)
def test_plain_http_only_for_loopback_registries(image: str, loopback: bool) -> None:
    assert parse_reference(image).is_loopback is loopback

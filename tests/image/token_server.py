"""A small Docker registry token server for the registry fixture (distribution ``auth: token``).

Run as a script: ``python token_server.py CERT_PATH SERVICE ISSUER USER:PASSWORD``. It
writes a self-signed certificate for its fresh RSA key to CERT_PATH (the registry's
``rootcertbundle``), listens on a free 127.0.0.1 port and prints ``PORT <n>``.

Grants, like Docker Hub: anonymous callers get ``pull`` on every repository except
those under ``private/``; the one user given gets every action asked for; a wrong
password gets 401. Tokens are RS256 JWTs whose ``kid`` is the key's libtrust ID,
which is how distribution 2.x finds the signing key in the bundle.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

TOKEN_LIFETIME_S = 300
PRIVATE_PREFIX = "private/"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def libtrust_key_id(public_key: rsa.RSAPublicKey) -> str:
    """SHA-256 of the DER SPKI, first 240 bits, base32, in 12 groups of 4 joined by ':'."""
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    encoded = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode("ascii")
    return ":".join(encoded[i : i + 4] for i in range(0, 48, 4))


def self_signed(key: rsa.RSAPrivateKey) -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kvtool-test-token")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def granted(scope: str, privileged: bool) -> dict[str, object] | None:
    kind, _, rest = scope.partition(":")
    name, _, actions = rest.rpartition(":")
    if kind != "repository" or not name:
        return None
    wanted = [a for a in actions.split(",") if a]
    if privileged:
        allowed = wanted
    elif name.startswith(PRIVATE_PREFIX):
        allowed = []
    else:
        allowed = [a for a in wanted if a == "pull"]
    return {"type": kind, "name": name, "actions": allowed}


def main() -> None:
    cert_path, service, issuer, user = sys.argv[1:5]
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with open(cert_path, "wb") as handle:
        handle.write(self_signed(key))
    kid = libtrust_key_id(key.public_key())
    expected_basic = "Basic " + base64.b64encode(user.encode()).decode("ascii")

    def sign(claims: dict[str, object]) -> str:
        header = {"typ": "JWT", "alg": "RS256", "kid": kid}
        signing_input = (
            f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        )
        signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            if url.path != "/token":
                self.send_error(404)
                return
            authorization = self.headers.get("Authorization")
            if authorization is not None and authorization != expected_basic:
                self.send_error(401, "bad credentials")
                return
            query = parse_qs(url.query)
            access = [
                g
                for s in query.get("scope", [])
                if (g := granted(s, authorization is not None)) is not None
            ]
            now = int(time.time())
            claims = {
                "iss": issuer,
                "sub": "ci" if authorization else "",
                "aud": query.get("service", [service])[0],
                "exp": now + TOKEN_LIFETIME_S,
                "nbf": now - 10,
                "iat": now,
                "jti": uuid.uuid4().hex,
                "access": access,
            }
            token = sign(claims)
            body = json.dumps(
                {"token": token, "access_token": token, "expires_in": TOKEN_LIFETIME_S}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

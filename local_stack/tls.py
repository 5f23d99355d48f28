"""A certificate authority and one node certificate, made once per secure stack home.

The node certificate (``CN=segcat-broker``, SAN 127.0.0.1 and localhost, server *and* client
use) serves the brokers' SSL listeners and authenticates them to each other (mutual TLS on
the inter-broker and controller listeners). Clients only need the CA to trust the brokers;
they authenticate with SCRAM. Keys are written unencrypted with mode 0600 under
``Layout.secrets`` (a throwaway stack's keys; production brings its own PKI).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from segcat.local_stack.layout import Layout
from segcat.local_stack.secret_files import write_private

NODE_COMMON_NAME = "segcat-broker"
NODE_PRINCIPAL = f"User:CN={NODE_COMMON_NAME}"
"""The Kafka principal a node's certificate maps to (default ``ssl.principal.mapping.rules``)."""
_VALID_DAYS = 825


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    node_key: Path
    node_cert: Path
    node_keystore: Path
    """Private key followed by the certificate chain: Kafka's PEM keystore file."""


def files(layout: Layout) -> TlsFiles:
    tls = layout.secrets / "tls"
    return TlsFiles(
        ca_cert=tls / "ca.pem",
        node_key=tls / "node.key",
        node_cert=tls / "node.pem",
        node_keystore=tls / "node-keystore.pem",
    )


def ensure(layout: Layout) -> TlsFiles:
    """The stack's CA and node certificate, generated on first use and reused afterwards."""
    out = files(layout)
    if all(p.is_file() for p in (out.ca_cert, out.node_key, out.node_cert, out.node_keystore)):
        return out
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "segcat local stack CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=_VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    node_key = ec.generate_private_key(ec.SECP256R1())
    node_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NODE_COMMON_NAME)]))
        .issuer_name(ca_name)
        .public_key(node_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=_VALID_DAYS))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = node_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    node_pem = node_cert.public_bytes(pem)
    ca_pem = ca_cert.public_bytes(pem)
    write_private(out.node_key, key_pem)
    write_private(out.node_cert, node_pem)
    write_private(out.node_keystore, key_pem + node_pem + ca_pem)
    write_private(out.ca_cert, ca_pem)  # last: its presence marks a complete set
    return out

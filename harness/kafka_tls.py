"""A throwaway CA and a broker certificate for 127.0.0.1, as PEM text Kafka reads without keytool."""
from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class BrokerTls:
    """The CA file clients and brokers trust, and the broker's key and chain as PEM text."""

    ca_file: Path
    key_pem: str
    chain_pem: str

    def broker_properties(self) -> dict[str, str]:
        """server.properties entries for an SSL listener with PEM key and trust material (KIP-651)."""
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": self.key_pem,
            "ssl.keystore.certificate.chain": self.chain_pem,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
        }


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def make_broker_tls(directory: Path) -> BrokerTls:
    """Write `ca.pem` into `directory` and return it with a key and certificate valid for 127.0.0.1 and localhost."""
    now = dt.datetime.now(dt.timezone.utc)
    validity = (now - dt.timedelta(minutes=5), now + dt.timedelta(days=2))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("quota-pipeline test CA")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(validity[0]).not_valid_after(validity[1])
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (x509.CertificateBuilder().subject_name(_name("localhost")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(validity[0]).not_valid_after(validity[1])
            .add_extension(san, critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    ca_file = directory / "ca.pem"
    ca_file.write_text(_pem(ca))
    # Kafka's PEM keystore reads PKCS#8; unencrypted is allowed for the inline `ssl.keystore.key` form.
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return BrokerTls(ca_file=ca_file, key_pem=key_pem, chain_pem=_pem(cert) + _pem(ca))

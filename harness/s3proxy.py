"""A real S3-compatible server for the object-store tests and the journal store benchmark: S3Proxy (org.gaul:s3proxy
from Maven Central, the S3 API over a filesystem backend), fetched by Maven into build/s3proxy/lib once, started on a
loopback port with its data in a given directory."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from harness.ports import free_port

REPO = Path(__file__).resolve().parents[1]
POM = REPO / "harness" / "s3proxy_maven" / "pom.xml"
CACHE = REPO / "build" / "s3proxy"
BUCKET = "quota-pipeline-test"
# Test-only credentials of the throwaway server (S3Proxy checks the signatures like S3 does).
IDENTITY, CREDENTIAL = "quota-pipeline-test", "quota-pipeline-test-secret"
START_S = 90.0


class S3ProxyUnavailable(RuntimeError):
    """S3Proxy cannot be fetched or run here (no Java or Maven, Maven Central unreachable); the tests skip."""


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str
    data_dir: Path

    def uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=IDENTITY,
                            aws_secret_access_key=CREDENTIAL, region_name="us-east-1")


def s3proxy_classpath() -> Path:
    """build/s3proxy/lib with S3Proxy and its dependencies, fetched by Maven when absent or the pom changed."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        raise S3ProxyUnavailable(f"S3Proxy needs {' and '.join(missing)} on PATH")
    lib, stamp = CACHE / "lib", hashlib.sha256(POM.read_bytes()).hexdigest()
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:  # two pytest-xdist workers: one fetches, the other waits
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (lib / ".pom-sha256").exists() and (lib / ".pom-sha256").read_text() == stamp:
            return lib
        tmp = CACHE / "lib.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        done = subprocess.run(["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
                               f"-DoutputDirectory={tmp}", "-DincludeScope=runtime"],
                              capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
            raise S3ProxyUnavailable(f"S3Proxy could not be fetched from Maven Central (mvn exit {done.returncode}): "
                        + " / ".join(tail))
        (tmp / ".pom-sha256").write_text(stamp)
        shutil.rmtree(lib, ignore_errors=True)
        tmp.rename(lib)
        return lib


def _wait_ready(proc: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"S3Proxy exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"S3Proxy did not listen on 127.0.0.1:{port} within {START_S:.0f} s: {log.read_text()[-2000:]}")


ENV = {"AWS_ACCESS_KEY_ID": IDENTITY, "AWS_SECRET_ACCESS_KEY": CREDENTIAL, "AWS_REGION": "us-east-1",
       "AWS_EC2_METADATA_DISABLED": "true"}


@contextlib.contextmanager
def serve(base: Path, lib: Path) -> Iterator[S3Server]:
    """S3Proxy on a free loopback port with its data under `base` and one bucket; stopped on exit."""
    port = free_port()
    conf = base / "s3proxy.properties"
    conf.write_text("\n".join([
        f"s3proxy.endpoint=http://127.0.0.1:{port}", "s3proxy.authorization=aws-v2-or-v4",
        f"s3proxy.identity={IDENTITY}", f"s3proxy.credential={CREDENTIAL}",
        "jclouds.provider=filesystem-nio2", f"jclouds.filesystem.basedir={base / 'data'}", ""]))
    (base / "data").mkdir()
    log = base / "s3proxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["java", "-Xmx256m", f"-Dlogback.configurationFile={POM.parent / 'logback.xml'}",
                                 "-cp", f"{lib}/*", "org.gaul.s3proxy.Main", "--properties", str(conf)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_ready(proc, port, log)
        server = S3Server(f"http://127.0.0.1:{port}", BUCKET, base / "data")
        server.client().create_bucket(Bucket=BUCKET)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


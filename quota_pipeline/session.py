"""The SparkSession every command and test shares: local by default, quiet, UTC, RocksDB state."""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Mapping

from quota_pipeline import resources

LOG4J2 = resources.path("log4j2.properties")
JAVA_HINT = ("Java 17 is required by Spark and was not found (no `java` on PATH, no JAVA_HOME).\n"
             "Install it with:  sudo apt-get install -y openjdk-17-jre-headless\n"
             "(macOS: brew install openjdk@17), then run the command again.")

# The JVMs compile with C1 only. The JVM's share of a micro-batch is short-lived code that Spark generates anew
# (the state's encoders, each batch's plan), which C2 kept optimizing on the cores the Python workers decide on:
# half the driver's CPU in a 50-cluster fleet (bench/RESULTS.md, "The JVM's compiler").
JIT = "-XX:TieredStopAtLevel=1"
BASE_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J2.as_uri()} {JIT}",
    "spark.executor.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J2.as_uri()} {JIT}",
}


def java_available() -> bool:
    return _java() is not None


def require_java() -> None:
    if not java_available():
        print(f"error: {JAVA_HINT}", file=sys.stderr)
        raise SystemExit(3)


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if not (found and found.exists()):
        on_path = shutil.which("java")
        found = Path(on_path) if on_path else None
    return found.resolve() if found else None


def archive_path() -> Path | None:
    """Where this host keeps the JVM class archive for this Java and this Spark (None without Java): an archive is
    valid only for the JVM build and the class path that wrote it, so both name it."""
    import pyspark

    java = _java()
    if java is None:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    key = "\n".join([str(java), str(java.stat().st_mtime_ns), pyspark.__version__,
                     *sorted(p.name for p in jars.glob("*.jar"))])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "quota-pipeline"
    return cache / f"spark-{pyspark.__version__}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def archive_in_use(path: Path | None) -> bool:
    """Whether the archive is there whole: its size as `prepare` recorded it beside it. A truncated archive would
    crash the JVM that maps it (SIGBUS), so anything else is not used."""
    try:
        return path is not None and int(path.with_suffix(".size").read_text()) == path.stat().st_size
    except (OSError, ValueError):
        return False


def _java_options(options: Mapping[str, str], archive: Path | None, record: bool) -> dict[str, str]:
    """The driver's JVM options with class-data sharing: the archive mapped at start (the classes Spark loads come
    from it, parsed and verified already), or, for `prepare`, the JVM recording what it loads so it can write one."""
    extra = ([f"-XX:SharedArchiveFile={archive}"] if archive_in_use(archive) and not record else []) + (
        ["-XX:+RecordDynamicDumpInfo"] if record else [])
    if not extra:
        return dict(options)
    # The archive's own notes (classes it skips, a JVM it does not match) are not the operator's concern.
    extra.append("-Xlog:cds*=off")
    key = "spark.driver.extraJavaOptions"
    return {**options, key: " ".join(filter(None, [options.get(key, ""), *extra]))}


def write_archive(spark: Any, path: Path) -> int:
    """The running JVM's loaded classes written as `path` (through a part file, then its size beside it); returns
    its size. The JVM stops for the time of the dump: for `prepare`, never for the job."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    gateway, jvm = spark.sparkContext._gateway, spark.sparkContext._jvm
    klass = jvm.java.lang.Class.forName
    strings = gateway.new_array(jvm.java.lang.String, 2)
    strings[0], strings[1] = "dynamic_dump", str(part)
    params = gateway.new_array(jvm.java.lang.Object, 1)
    params[0] = strings
    signature = gateway.new_array(jvm.java.lang.String, 1)
    signature[0] = "[Ljava.lang.String;"
    # MBeanServer.invoke through the interface's Method: py4j cannot call it on the server's own (unexported) class.
    types = gateway.new_array(jvm.java.lang.Class, 4)
    for i, name in enumerate(("javax.management.ObjectName", "java.lang.String", "[Ljava.lang.Object;",
                              "[Ljava.lang.String;")):
        types[i] = klass(name)
    call = gateway.new_array(jvm.java.lang.Object, 4)
    call[0] = jvm.javax.management.ObjectName("com.sun.management:type=DiagnosticCommand")
    call[1], call[2], call[3] = "vmCds", params, signature
    server = jvm.java.lang.management.ManagementFactory.getPlatformMBeanServer()
    klass("javax.management.MBeanServer").getMethod("invoke", types).invoke(server, call)
    if not part.exists() or part.stat().st_size == 0:
        raise RuntimeError(f"the JVM wrote no class archive to {part} (see its output above)")
    size = part.stat().st_size
    os.replace(part, path)
    # The size beside it, replaced whole too: until it is there, the new archive is not mapped.
    size_part = path.with_name(f".{path.name}.{os.getpid()}.size.part")
    size_part.write_text(f"{size}\n")
    os.replace(size_part, path.with_suffix(".size"))
    return size


def get_session(app_name: str = "quota-pipeline", master: str | None = None,
                conf: Mapping[str, str] | None = None, record_classes: bool = False,
                jvm_output: Path | None = None, keep_sigint: bool = False):
    """Build (or reuse) the SparkSession; under spark-submit the master comes from there. A JVM started here maps
    this host's class archive when `quota-pipeline prepare` wrote one (`record_classes`: prepare's own JVM) and
    writes its output (Spark's log, its Python workers' output) to `jvm_output` when given. `keep_sigint`: the
    SIGINT handler in force before stays in force (the SparkContext installs its own)."""
    require_java()
    # Workers must run this interpreter, or they fail to connect back / miss our packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit the JVM is already up (PYSPARK_GATEWAY_PORT) and --master decides.
    if master or not os.environ.get("PYSPARK_GATEWAY_PORT"):
        builder = builder.master(master or os.environ.get("QUOTA_PIPELINE_MASTER", "local[*]"))
    settings = dict(BASE_CONF)
    # One shuffle partition per core measured fastest locally (replay of 1M rows: 15 s vs 18.5 s at 2x).
    settings.setdefault("spark.sql.shuffle.partitions", str(max(2, os.cpu_count() or 1)))
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    _launch_jvm_in_its_own_session(_java_options(builder._options, archive_path(), record_classes), jvm_output)
    for key, value in _operator_defaults(set(conf or {})).items():
        builder = builder.config(key, value)
    before = signal.getsignal(signal.SIGINT)
    spark = builder.getOrCreate()
    if keep_sigint and before is not None and threading.current_thread() is threading.main_thread():
        # The context's handler cancels every job and raises KeyboardInterrupt wherever the main thread is, mostly
        # inside a py4j call (chained tracebacks, the running micro-batch lost); the caller's own stop stays.
        signal.signal(signal.SIGINT, before)
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _operator_defaults(chosen: set[str]) -> dict[str, str]:
    """The values the operator gave Spark for BASE_CONF's keys (spark-submit's --conf or --properties-file, or
    PYSPARK_SUBMIT_ARGS for a JVM started here: `--conf spark.ui.enabled=true`): those are defaults, and the
    builder's own would override them. Keys in `chosen` (the caller's conf) keep the caller's value."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # the gateway: under spark-submit, its JVM holds the operator's conf
    given = dict(SparkConf().getAll())
    return {key: given[key] for key in BASE_CONF if key in given and key not in chosen}


def _launch_jvm_in_its_own_session(options: Mapping[str, str], output: Path | None = None) -> None:
    """Start Spark's JVM (unless it runs already) as PySpark would, but in a session of its own. A SIGTERM to
    the job's process group (systemd, `timeout`, Kubernetes) then reaches only the Python driver, which stops
    after the running micro-batch; the JVM would otherwise shut down under it mid-batch, with stack traces.
    The JVM still ends with the driver: it exits when its stdin, a pipe from the driver, closes. With `output`, the
    JVM's stdout and stderr (Spark's log4j console, the Python workers' output it relays) are appended there."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return
    conf = SparkConf()
    for key, value in options.items():
        conf.set(key, value)
    popen: dict[str, Any] = {"start_new_session": True}
    if output is not None:
        popen["stdout"] = popen["stderr"] = open(output, "ab")  # noqa: SIM115 - the JVM's for its lifetime
    gateway = launch_gateway(conf, popen_kwargs=popen)
    carry_priority(gateway.proc.pid)
    SparkContext._ensure_initialized(gateway=gateway)


def carry_priority(pid: int, nice: int | None = None) -> None:
    """Give the session that `pid` leads the niceness `nice` (default: this process's). Where the kernel groups CPU
    time by session (autogroup, the default of most distributions), a process's niceness only ranks it within its
    session, so a JVM started in a session of its own would otherwise run at the default priority however the job
    was started (`nice -n -5 quota-pipeline run`, a service's Nice=). Best effort: nothing to do without autogroup."""
    nice = os.getpriority(os.PRIO_PROCESS, 0) if nice is None else nice
    if nice == 0:
        return
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    except OSError:
        pass

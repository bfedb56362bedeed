#!/usr/bin/env bash
# Run a quota-pipeline job with spark-submit, shipping the package to the executors.
#
#   ./spark-submit.sh [spark-submit options] CONFIG...            the streaming job (jobs/throttle_stream.py)
#   ./spark-submit.sh [spark-submit options] --clusters-dir DIR   the same, one .properties per cluster in DIR
#   ./spark-submit.sh [spark-submit options] replay --config C --input P --output O
#
# Spark options (--master, --conf, --driver-memory, ...) come first and are passed through;
# the default master is local[*]. Needs `pip install -e .` (or the wheel) and Java 17.
#
# On a standalone or YARN master the executors' hosts need nothing of the project: the job's Python dependencies
# go to them as a packed environment (built once under build/, shipped with --archives) and the package as a zip.
# --ship-environment / --no-ship-environment decide it for any master (no: an image that has them, as on Kubernetes).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYSPARK_PYTHON:-$(command -v python3 || command -v python)}"

if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
  echo "error: Java 17 is required by Spark and was not found. Install it with:" >&2
  echo "  sudo apt-get install -y openjdk-17-jre-headless" >&2
  exit 3
fi
spark_home="$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null)" || {
  echo "error: pyspark is not installed for $python; run: $python -m pip install -e '$here'" >&2; exit 3; }

spark_opts=()
ship=auto
while [ $# -gt 0 ] && [[ "$1" == --* ]]; do
  case "$1" in
    --clusters-dir|--no-metrics|--log-batches) break ;;  # the job's own options: the rest goes to `run`
    --ship-environment) ship=yes; shift ;;
    --no-ship-environment) ship=no; shift ;;
    --verbose|--supervise) spark_opts+=("$1"); shift ;;
    *) spark_opts+=("$1" "$2"); shift 2 ;;
  esac
done
master=""
for i in "${!spark_opts[@]}"; do [ "${spark_opts[$i]}" = "--master" ] && master="${spark_opts[$((i + 1))]}"; done
[ -n "$master" ] || { master="local[*]"; spark_opts+=(--master "$master"); }
if [ "$ship" = auto ]; then
  case "$master" in spark://*|yarn*) ship=yes ;; *) ship=no ;; esac
fi

# Adds VALUE to a comma-separated spark-submit option (the operator's own, if given), else passes the option.
add_to_option() {
  local i
  for i in "${!spark_opts[@]}"; do
    if [ "${spark_opts[$i]}" = "$1" ]; then spark_opts[$((i + 1))]+=",$2"; return; fi
  done
  spark_opts+=("$1" "$2")
}

if [ "${1:-}" = "replay" ]; then shift; job="$here/jobs/replay.py"; else job="$here/jobs/throttle_stream.py"; fi
[ $# -gt 0 ] || { echo "usage: $0 [spark-submit options] CONFIG... | replay --config C --input P --output O" >&2; exit 2; }

# Executors on other hosts import the package from this zip; locally it is on the path anyway. Python imports
# from a zip lazily, so a running job's zip must never be rewritten: each content gets its own directory
# (build/<digest>/), written aside and moved into place whole, and a second job started meanwhile cannot break it.
dist="$(cd "$here" && "$python" - <<'PY'
import hashlib, os, pathlib, tempfile, zipfile
files = [f for f in sorted(pathlib.Path("quota_pipeline").glob("**/*")) if f.is_file() and "__pycache__" not in f.parts]
digest = hashlib.sha256()
for f in files:
    digest.update(str(f).encode() + b"\0" + f.read_bytes() + b"\0")
dist = pathlib.Path("build", digest.hexdigest()[:16]).resolve()
if not (dist / "quota_pipeline.zip").exists():
    dist.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=dist.parent, prefix=".zip-"))
    with zipfile.ZipFile(tmp / "quota_pipeline.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            z.write(f)
    try:
        os.rename(tmp, dist)
    except OSError:  # another job made the same one meanwhile
        (tmp / "quota_pipeline.zip").unlink()
        tmp.rmdir()
print(dist)
PY
)"
# A checkpoint on s3a:// needs Hadoop's S3A connector, which Spark fetches from Maven Central and ships to the
# executors (quota_pipeline/commands/submit_packages.py): added to --packages (the operator's own, if any).
if [ "$job" = "$here/jobs/throttle_stream.py" ]; then
  s3a="$(PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$python" -m quota_pipeline.commands.submit_packages "$@" 2>/dev/null || true)"
  [ -z "$s3a" ] || add_to_option --packages "$s3a"
fi
export PYSPARK_PYTHON="$python" PYSPARK_DRIVER_PYTHON="$python"
if [ "$ship" = yes ]; then
  archive="$(PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$python" -m quota_pipeline.commands.submit_environment \
    "$here/build")" || exit 3
  add_to_option --archives "$archive#environment"
  # Every Python worker, the executors' and the driver's own (the source's planning), runs PYSPARK_PYTHON from the
  # JVM's working directory: there the executors unpack the archive, and here, for the driver's, a directory of its
  # own holds an `environment` whose python is this one. The job changes back to this directory
  # (QUOTA_PIPELINE_CWD), so paths given to it keep their meaning.
  driver_dir="$here/build/driver-$(printf '%s' "$python" | sha256sum | cut -c1-16)"
  mkdir -p "$driver_dir/environment/bin"
  printf '#!/usr/bin/env bash\nexec %q "$@"\n' "$python" > "$driver_dir/environment/bin/python"
  chmod +x "$driver_dir/environment/bin/python"
  export QUOTA_PIPELINE_CWD="$PWD" PYSPARK_PYTHON=./environment/bin/python
  cd "$driver_dir"
fi
# The driver's own Python workers (planning the kafka_volumes source, the stateful processor's set-up) inherit the
# JVM's environment, not --py-files: without this they cannot import the package unless it is installed.
export PYTHONPATH="$dist/quota_pipeline.zip${PYTHONPATH:+:$PYTHONPATH}"
log4j="$here/conf/log4j2.properties"
# C1 only, as quota_pipeline/session.py's JIT says why (the executors' JVMs: conf/spark-defaults.conf).
exec "$spark_home/bin/spark-submit" \
  --conf "spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:$log4j -XX:TieredStopAtLevel=1" \
  --conf "spark.sql.session.timeZone=UTC" \
  --properties-file "$here/conf/spark-defaults.conf" \
  --py-files "$dist/quota_pipeline.zip" \
  "${spark_opts[@]}" "$job" "$@"

"""Reading snapshot journals into Spark: JSONL (via a Python data source, for line numbers) or flattened Parquet.

The Python reader only splits files into lines; every field is parsed and checked by Spark SQL, so
no Python code runs per volume. A line that is not a valid snapshot becomes a rejected row with its
file, line number and reason: reported and written out by the caller, never silently dropped.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from quota_pipeline.core import snapshot_rules as rules
from quota_pipeline.journal.inputs import JournalInputError, find_inputs  # noqa: F401 - callers use these names
from quota_pipeline.journal.lines import SPLIT_BYTES, JournalLines

PARTITION_TYPE = T.StructType([
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("size_bytes", T.LongType()),
])
VOLUME_TYPE = T.StructType([
    T.StructField("broker_id", T.LongType()),
    T.StructField("log_dir", T.StringType()),
    T.StructField("total_bytes", T.LongType()),
    T.StructField("available_bytes", T.LongType()),
    T.StructField("error", T.StringType()),
    T.StructField("top_partitions", T.ArrayType(PARTITION_TYPE)),
    T.StructField("topics", T.ArrayType(T.StringType())),
])
SNAPSHOT_JSON_TYPE = T.StructType([
    T.StructField("cluster_id", T.StringType()),
    T.StructField("observed_at", T.StringType()),
    T.StructField("status", T.StringType()),
    T.StructField("brokers", T.ArrayType(T.LongType())),
    T.StructField("fenced_brokers", T.ArrayType(T.LongType())),
    T.StructField("volumes", T.ArrayType(VOLUME_TYPE)),
])
# What parse() returns: one row per snapshot, volumes nested (validated), plus where it came from.
SNAPSHOT_COLUMNS = ("cluster_id", "observed_at", "status", "brokers", "fenced_brokers", "volumes")
# `line` counts from the start of the split at byte `offset` (0 for a whole file); rejections()
# turns it into the file's line number, so that no split has to count the newlines before it.
REJECTED_COLUMNS = ("file", "offset", "line", "reason", "text", "first")


def _first_problem(*checks: tuple[Column, str]) -> Column:
    expr = F.lit(None).cast("string")
    for cond, reason in reversed(checks):
        expr = F.when(cond, F.lit(reason)).otherwise(expr)
    return expr


# rules.VOLUME_RULES as columns of one volume, by rule key.
VOLUME_CHECKS = {
    "broker_id": lambda v: v.broker_id.isNull(),
    "log_dir": lambda v: F.coalesce(v.log_dir, F.lit("")) == "",
    "bytes": lambda v: v.error.isNull() & (v.total_bytes.isNull() | v.available_bytes.isNull()),
    "bytes_negative": lambda v: (v.total_bytes < 0) | (v.available_bytes < 0),
    "available_le_total": lambda v: v.available_bytes > v.total_bytes,
    "topics": lambda v: F.coalesce(F.exists(v.topics, lambda x: x.isNull()), F.lit(False)),
}


def _volume_checks(volumes: Column) -> list[tuple[Column, str]]:
    """rules.VOLUME_RULES as columns (VOLUME_CHECKS), found in one pass over the array (lambdas are not compiled),
    then rules.DUPLICATE_VOLUMES."""
    def code(v: Column) -> Column:
        out = F.lit(len(rules.VOLUME_RULES))
        for i in reversed(range(len(rules.VOLUME_RULES))):
            out = F.when(VOLUME_CHECKS[rules.VOLUME_RULES[i].key](v), F.lit(i)).otherwise(out)
        return out

    first = F.array_min(F.transform(volumes, code))
    # Keys as strings: array_distinct over structs is about 8x slower on 1000-volume snapshots.
    keys = F.transform(volumes, lambda v: F.concat_ws("\u0000", v.broker_id.cast("string"), v.log_dir))
    # topics that are not a list (from_json reads them as null) are found in the text
    return [((first == i) | (_mistyped_topics(volumes) if rule.key == "topics" else F.lit(False)), rule.reason)
            for i, rule in enumerate(rules.VOLUME_RULES)] + [
        (F.size(F.array_distinct(keys)) != F.size(volumes), rules.DUPLICATE_VOLUMES.reason)]


def _snapshot_checks(s: Column) -> list[tuple[Column, str]]:
    """rules.SNAPSHOT_RULES as columns (each found by its rule's key), in the table's order."""
    no_ids = F.array().cast("array<bigint>")

    def mistyped(field: str) -> Column:
        # from_json reads a list with one element of the wrong type (or no list) as null: look at the text,
        # only for rows where the typed value is null (rare), since that parses the line again.
        return getattr(s, field).isNull() & F.get_json_object("text", f"$.{field}").isNotNull()

    observed = F.try_to_timestamp(s.observed_at)
    broken = {  # by rule key
        "object": F.col("is_object").isNull(),
        "cluster_id": F.coalesce(s.cluster_id, F.lit("")) == "",
        "timestamp": observed.isNull(),
        "time_range": (observed < F.lit(rules.EARLIEST)) | (observed >= F.lit(rules.LATEST)),
        "status": ~F.coalesce(s.status.isin(*rules.STATUSES), F.lit(False)),
        "brokers": ((s.status == "SUCCESS") & s.brokers.isNull()) | mistyped("brokers")
        | F.exists(F.coalesce(s.brokers, no_ids), lambda b: b.isNull()),
        "fenced_brokers": mistyped("fenced_brokers") | F.exists(F.coalesce(s.fenced_brokers, no_ids),
                                                                lambda b: b.isNull()),
        "volumes": mistyped("volumes") | _mistyped_partitions(s.volumes)
        | F.exists(F.coalesce(s.volumes, F.array().cast(T.ArrayType(VOLUME_TYPE))),
                   lambda v: v.isNull() | _bad_partitions(v)),
    }
    return [(broken[rule.key], rule.reason) for rule in rules.SNAPSHOT_RULES]


def _mistyped_partitions(volumes: Column) -> Column:
    """A top_partitions list that from_json read as null (an element of the wrong type): fewer parsed lists than
    the text holds. Only lines that mention top_partitions pay for the count."""
    in_text = F.size(F.split(F.col("text"), r'"top_partitions"\s*:\s*\[')) - 1
    parsed = F.size(F.filter(F.coalesce(volumes, F.array().cast(T.ArrayType(VOLUME_TYPE))),
                             lambda v: v.top_partitions.isNotNull()))
    return F.col("text").contains('"top_partitions"') & (in_text != parsed)


def _mistyped_topics(volumes: Column) -> Column:
    """A topics value that from_json read as null though the text has one that is not null: fewer parsed lists
    than the text holds. Only lines that mention topics pay for the count."""
    in_text = F.size(F.split(F.col("text"), r'"topics"\s*:\s*[^n\s]')) - 1
    parsed = F.size(F.filter(volumes, lambda v: v.topics.isNotNull()))
    return F.col("text").contains('"topics"') & (in_text != parsed)


def _bad_partitions(v: Column) -> Column:
    return F.exists(F.coalesce(v.top_partitions, F.array().cast(T.ArrayType(PARTITION_TYPE))),
                    lambda p: p.isNull() | p.topic.isNull() | p.partition.isNull() | p.size_bytes.isNull())


def _line_checks(s: Column) -> list[tuple[Column, str]]:
    """The line's rules (rules.decode_line) before the record's: its bytes UTF-8 (the line reader says), its text
    JSON. Only a line whose fields all came out null can be malformed JSON: only those are parsed again."""
    blank = s.cluster_id.isNull() & s.observed_at.isNull() & s.status.isNull()
    return [(F.col("line_problem") == rules.NOT_UTF8, rules.NOT_UTF8),
            (F.when(blank, F.try_parse_json("text").isNull()).otherwise(F.lit(False)), rules.NOT_JSON)]


def _check(df: DataFrame) -> DataFrame:
    """Every parsed row with the first problem found in it (`reason`, null when valid)."""
    s = F.col("snap")
    volumes = F.coalesce(s.volumes, F.array().cast(T.ArrayType(VOLUME_TYPE)))
    checked = df.select(
        "file", "offset", "line", "text",
        s.cluster_id.alias("cluster_id"),
        F.try_to_timestamp(s.observed_at).alias("observed_at"),
        s.status.alias("status"),
        F.coalesce(s.brokers, F.array().cast("array<bigint>")).alias("brokers"),
        F.coalesce(s.fenced_brokers, F.array().cast("array<bigint>")).alias("fenced_brokers"),
        volumes.alias("volumes"),
        _first_problem(*_line_checks(s), *_snapshot_checks(s), *_volume_checks(volumes)).alias("reason"),
    )
    # Keep the raw text only where it is needed (rejected rows): it is most of the input's size.
    return checked.withColumn("text", F.when(F.col("reason").isNotNull(), F.col("text")))


def split(checked: DataFrame, where: bool = False) -> tuple[DataFrame, DataFrame]:
    """(valid snapshots, rejected rows); later duplicates of a (cluster, observed_at) are rejected. With `where`,
    valid snapshots keep their file, offset and line."""
    # Duplicates are rare: find them on a slim projection, then flag them through a broadcast join
    # instead of shuffling every snapshot (with its volumes) through a window.
    dups = checked.where(F.col("reason").isNull()).groupBy("cluster_id", "observed_at").agg(
        F.count("*").alias("copies"), F.min(F.struct("file", "offset", "line")).alias("first")).where("copies > 1")
    checked = checked.join(F.broadcast(dups.drop("copies")), ["cluster_id", "observed_at"], "left")
    is_dup = F.col("reason").isNull() & F.col("first").isNotNull() & (
        (F.col("first.file") != F.col("file")) | (F.col("first.offset") != F.col("offset"))
        | (F.col("first.line") != F.col("line")))
    checked = checked.select(
        *[c for c in checked.columns if c not in ("reason", "first", "text")],
        F.when(is_dup, F.lit(rules.DUPLICATE_SNAPSHOT.reason))
        .otherwise(F.col("reason")).alias("reason"),
        F.when(is_dup, F.col("first")).alias("first"),
        F.when(is_dup, F.to_json(F.struct("cluster_id", "observed_at"))).otherwise(F.col("text")).alias("text"),
    )
    valid = checked.where(F.col("reason").isNull()).select(*SNAPSHOT_COLUMNS, *(("file", "offset", "line") if where
                                                                              else ()))
    rejected = checked.where(F.col("reason").isNotNull()).select(*REJECTED_COLUMNS)
    return valid, rejected


def read_jsonl(spark: SparkSession, paths: tuple[str, ...], split_bytes: int = SPLIT_BYTES) -> DataFrame:
    import json

    if getattr(spark, "_journal_lines_registered", False) is False:
        spark.dataSource.register(JournalLines)
        spark._journal_lines_registered = True  # re-registering logs a warning on every replay
    lines = spark.read.format("journal_lines").option("paths", json.dumps(list(paths))) \
        .option("split_bytes", str(split_bytes)) \
        .option("parallelism", str(spark.sparkContext.defaultParallelism)).load()
    parsed = lines.select(
        "file", "offset", "line", "text", "line_problem",
        F.from_json("text", SNAPSHOT_JSON_TYPE).alias("snap"),
        # Tells garbage from an object with missing fields without parsing the line a second time:
        # from_json yields a row of nulls for both.
        F.when(F.ltrim("text").startswith("{") & F.rtrim("text").endswith("}"), F.lit("object")).alias("is_object"),
    )
    return _check(parsed)


def read_parquet(spark: SparkSession, paths: tuple[str, ...]) -> DataFrame:
    """Flattened form: one row per volume with the snapshot's fields repeated (a failed poll: no volume)."""
    raw = spark.read.parquet(*paths)
    columns = set(raw.columns)

    def col(name: str, type_: str) -> Column:
        return F.col(name).cast(type_) if name in columns else F.lit(None).cast(type_)

    rows = raw.select(
        F.col("_metadata.file_path").alias("file"),
        F.lit(0).cast("long").alias("offset"),
        (F.col("_metadata.row_index") + 1).alias("line"),
        col("cluster_id", "string").alias("cluster_id"),
        col("observed_at", "string").alias("observed_at"),
        col("status", "string").alias("status"),
        col("brokers", "array<bigint>").alias("brokers"),
        col("fenced_brokers", "array<bigint>").alias("fenced_brokers"),
        F.when(col("broker_id", "bigint").isNotNull() | col("log_dir", "string").isNotNull(), F.struct(
            col("broker_id", "bigint").alias("broker_id"), col("log_dir", "string").alias("log_dir"),
            col("total_bytes", "bigint").alias("total_bytes"),
            col("available_bytes", "bigint").alias("available_bytes"),
            col("error", "string").alias("error"),
            col("top_partitions", "array<struct<topic:string,partition:int,size_bytes:bigint>>")
            .alias("top_partitions"), col("topics", "array<string>").alias("topics"))).alias("volume"),
    )
    # One snapshot per (file, cluster, observed_at); its location is its first row. The same snapshot in two
    # files is two snapshots, the second rejected as a duplicate, never one with its volumes twice.
    grouped = rows.groupBy("file", "cluster_id", "observed_at").agg(
        F.min(F.struct("file", "offset", "line")).alias("at"),
        F.first("status", ignorenulls=True).alias("status"),
        F.first("brokers", ignorenulls=True).alias("brokers"),
        F.first("fenced_brokers", ignorenulls=True).alias("fenced_brokers"),
        F.filter(F.collect_list("volume"), lambda v: v.isNotNull()).alias("volumes"),
        F.countDistinct("status").alias("statuses"),
    )
    parsed = grouped.select(
        F.col("at.file").alias("file"), F.col("at.offset").alias("offset"), F.col("at.line").alias("line"),
        F.lit(None).cast("string").alias("line_problem"),
        F.to_json(F.struct("cluster_id", "observed_at", "status", "brokers", "fenced_brokers")).alias("text"),
        F.when(F.col("statuses") <= 1, F.struct("cluster_id", "observed_at", "status", "brokers",
                                               "fenced_brokers", "volumes")).alias("snap"),
        F.when(F.col("statuses") <= 1, F.lit("object")).alias("is_object"),
    )
    # Rows are objects: where rows disagree on the status, `snap` is null, which the object rule reports; in the
    # flattened form that is the rows' rule (rules.FLATTENED_RULES).
    return _check(parsed).withColumn("reason", F.when(
        F.col("reason") == rules.BY_KEY["object"].reason,
        F.lit(rules.DISAGREEING_ROWS.reason)).otherwise(F.col("reason")))


def checked(spark: SparkSession, path: str, split_bytes: int = SPLIT_BYTES) -> DataFrame:
    """Every snapshot of every journal file under `path`, parsed, with `reason` set where it is invalid."""
    inputs = find_inputs(path)
    parts = []
    if inputs.jsonl:
        parts.append(read_jsonl(spark, inputs.jsonl, split_bytes))
    parts.extend(read_parquet(spark, group) for group in inputs.parquet)
    if inputs.unreadable:
        parts.append(_unreadable(spark, inputs.unreadable))
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def _unreadable(spark: SparkSession, files: tuple[tuple[str, str], ...]) -> DataFrame:
    """Files that cannot be read at all, as rejected rows at line 0 (the whole file)."""
    none = {"text": "string", "cluster_id": "string", "observed_at": "timestamp", "status": "string",
            "brokers": "array<bigint>", "fenced_brokers": "array<bigint>", "volumes": T.ArrayType(VOLUME_TYPE)}
    return spark.createDataFrame(list(files), "file string, reason string").select(
        "file", F.lit(0).cast("long").alias("offset"), F.lit(0).cast("long").alias("line"),
        *(F.lit(None).cast(t).alias(n) for n, t in none.items()), "reason")


def read(spark: SparkSession, path: str, split_bytes: int = SPLIT_BYTES) -> tuple[DataFrame, DataFrame]:
    """(valid snapshots, rejected rows) of every journal file under `path`, parsed lazily."""
    return split(checked(spark, path, split_bytes))


def flatten(valid: DataFrame) -> DataFrame:
    """Valid snapshots (split(..., where=True)) in the flattened form core/compiled/cluster_pass.py reads: one row per
    volume (a snapshot without volumes as one row), with the line each came from."""
    rows = valid.select(
        "cluster_id", F.date_format("observed_at", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias("observed_at"),
        F.unix_micros("observed_at").alias("observed_us"), "status", "brokers", "fenced_brokers",
        F.explode_outer("volumes").alias("v"), F.col("file").alias("_file"), F.col("offset").alias("_offset"),
        F.col("line").alias("_line"))
    return rows.select(*[c for c in rows.columns if c != "v"],
                       *[F.col("v")[f.name].alias(f.name) for f in VOLUME_TYPE.fields])


def flat_volumes(spark: SparkSession, files: list[str]) -> DataFrame:
    """Readings in flattened Parquet journals (of SUCCESS snapshots and partial views: a failed poll's volume rows
    are those of the brokers that answered): cluster_id, t_us, broker_id, log_dir, available_bytes, total_bytes (for
    pictures; rows are not checked here, replay checks them)."""
    parts = []
    for f in files:
        raw = spark.read.parquet(f)
        names = set(raw.columns)
        if not {"cluster_id", "broker_id", "log_dir", "status"} <= names:
            continue
        t = F.unix_micros(F.try_to_timestamp(F.col("observed_at").cast("string")))
        if "observed_us" in names:
            t = F.coalesce(F.col("observed_us").cast("long"), t)
        parts.append(raw.where(F.col("broker_id").isNotNull()).select(
            F.col("cluster_id").cast("string").alias("cluster_id"), t.alias("t_us"),
            F.col("broker_id").cast("long").alias("broker_id"), F.col("log_dir").cast("string").alias("log_dir"),
            *(F.col(c).cast("long").alias(c) if c in names else F.lit(None).cast("long").alias(c)
              for c in ("available_bytes", "total_bytes"))))
    if not parts:
        return spark.createDataFrame([], "cluster_id string, t_us long, broker_id long, log_dir string, "
                                         "available_bytes long, total_bytes long")
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    # Times outside the journal's range are rejected by replay; pictures (pandas) could not hold them either.
    return out.where(F.col("t_us").isNotNull() & (F.col("t_us") >= rules.EARLIEST_US) & (F.col("t_us") < rules.LATEST_US))

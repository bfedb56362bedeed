"""quota-pipeline: cluster-wide disk-pressure throttling for Apache Kafka, decided by Spark.

Layers, lowest first. A module imports from its own layer and the layers below it, never from one above, and no
two subpackages import each other (tests/unit/test_layers.py holds the package to this table):

    core          configuration, the record, text shown from outside (resources: data); core/reference: the decision
                  semantics in plain Python, the oracle; core/compiled: the decision both jobs run
    kafka         the Admin API and client settings; journal: the store of snapshots; session: the SparkSession
    reader        the Python reader of the decision topic; simulator: a cluster that answers
    streaming     the job; replay: the batch job; enforce: the stop; remedy: moves off full dirs; dashboard: the view
    demo          the demo's local broker and runner
    commands      one module per command
    cli           the entry point
"""
__version__ = "0.1.0"

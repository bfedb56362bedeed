"""spark-submit entry point for batch replay: `./spark-submit.sh replay --config C --input P --output O`."""
import sys

from quota_pipeline.cli import submitted

if __name__ == "__main__":
    sys.exit(submitted("replay", sys.argv[1:]))

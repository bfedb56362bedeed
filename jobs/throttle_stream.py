"""spark-submit entry point for the streaming job: `./spark-submit.sh CONFIG...`."""
import sys

from quota_pipeline.cli import submitted

if __name__ == "__main__":
    sys.exit(submitted("run", sys.argv[1:]))

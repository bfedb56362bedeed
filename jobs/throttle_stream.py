"""spark-submit entry point for the streaming job: `./spark-submit.sh CONFIG...`."""
import sys

from quota_pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))

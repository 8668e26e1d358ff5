"""spark-submit needs a file to run: this one runs the gossamer command line on the driver.

    (cd src && zip -qr ../dist/gossamer.zip gossamer)
    spark-submit --master spark://HOST:7077 --py-files dist/gossamer.zip \
        scripts/spark_entry.py experiment experiments/quickstart.toml --out /shared/runs/q

Without ``--master`` on the gossamer command line, the master spark-submit was given is used.
"""

import sys

from gossamer.cli.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

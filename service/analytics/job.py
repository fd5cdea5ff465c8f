"""Entry file for spark-submit.

    spark-submit --packages com.redislabs:spark-redis_2.12:3.1.0 \\
        --conf spark.redis.host=redis --conf spark.redis.port=6379 \\
        service/analytics/job.py snapshot --out /data/analytics

spark-submit runs this file as a script, so the project root is put on ``sys.path`` when
the package is not installed; the executors need only redis-py (the built-in reader ships
its code to them by value) or nothing at all (spark-redis).
"""

import sys
from pathlib import Path

try:
    import service.analytics.cli  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.analytics.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A buggy throughput logger: Megatron-Bridge dense CP / AReaL #1242: one CP rank's token counts logged as the step's (global / cp_size).
`thdcheck fuzz logger` finds it and shrinks it to a one-document step."""

import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import logger  # noqa: E402

logger.BUG = "rank_local_counts"

if __name__ == "__main__":
    logger.serve_logger(logger.log)

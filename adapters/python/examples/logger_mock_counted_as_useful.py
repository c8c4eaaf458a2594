"""A buggy throughput logger: bionemo #1561: the pad_to_multiple_of mock segment counted as a real sequence (tokens and Σ s² of useful work include it), so useful and hardware MFU collapse into one number.
`thdcheck fuzz logger` finds it and shrinks it to a one-document step."""

import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import logger  # noqa: E402

logger.BUG = "mock_counted_as_useful"

if __name__ == "__main__":
    logger.serve_logger(logger.log)
